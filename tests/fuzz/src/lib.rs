//! Entry points of the fuzz targets, shared with `tests/fuzz_regressions.rs`, which replays the
//! committed corpus and every input that once crashed through these same functions on stable.
//!
//! Each entry runs driftgate's own code (no copy of it) and panics when driftgate misbehaves:
//! a panic inside driftgate, or a broken promise of its answer, checked here because a fuzzer
//! notices nothing but crashes.
//!
//! This file is also compiled as a module of the main package's test (`#[path]`), so it uses
//! only crates both have and no crate-level attributes.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use arc_swap::ArcSwap;
use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use driftgate::decision::{Decision, DecisionInput, decide, may_guard, needs_parent};
use driftgate::event_sink::EventSink;
use driftgate::events::planned_events;
use driftgate::kube_state::{NamespaceCache, ParentLookup};
use driftgate::metrics::Metrics;
use driftgate::policy::PolicySet;
use driftgate::request::{RequestEnvelope, RequestFacts};
use driftgate::review::lazy::parse_lazily;
use driftgate::review::{ReviewError, parse_envelope, parse_review};
use driftgate::server::{AppState, router};
use driftgate::timefmt::format_expiry;
use http_body_util::BodyExt;
use jiff::{SignedDuration, Timestamp};
use kube::core::DynamicObject;
use kube::core::admission::AdmissionRequest;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

/// The fixed "now" of every decision, the one the fixtures' windows are written against.
const NOW: &str = "2026-11-30T09:00:00Z";

/// `policies/example.yaml` is what `serve --dev` loads; the Argo CD policy guards the same
/// namespaces with a different controller, so deciding with it takes other paths.
const POLICY_FILES: &[(&str, &str)] = &[
    (
        "policies/example.yaml",
        include_str!("../../../policies/example.yaml"),
    ),
    (
        "policies/tests/argocd.yaml",
        include_str!("../../../policies/tests/argocd.yaml"),
    ),
];

/// Namespace objects the cluster would hold (one with a namespace-wide window).
const NAMESPACE_FILES: &[&str] = &[
    include_str!("../../fixtures/namespaces/prod-orders-window.yaml"),
    include_str!("../../fixtures/namespaces/prod-payments.yaml"),
];

/// The stored parent of a `scale` request, with an open window.
const PARENT_FILE: &str = include_str!("../../fixtures/parents/api-with-window.yaml");

macro_rules! fixtures {
    ($($name:literal),* $(,)?) => {
        &[$(($name, include_str!(concat!("../../fixtures/", $name)))),*]
    };
}

/// The AdmissionReview fixtures, as kube-apiserver sends them: the structure-aware target
/// mutates these, and `policy_load` decides them with the policies it compiles.
pub const FIXTURES: &[(&str, &str)] = fixtures![
    "argocd-apply-update.json",
    "audit-staging-edit.json",
    "bench-deployment-update-30k.json",
    "break-glass-close.json",
    "break-glass-extend.json",
    "break-glass-open-by-bob.json",
    "break-glass-open-malformed.json",
    "break-glass-open-no-reason.json",
    "break-glass-open-too-long.json",
    "break-glass-open.json",
    "break-glass-use-by-bob.json",
    "break-glass-use-edit.json",
    "break-glass-use-far-future.json",
    "break-glass-use-scale.json",
    "controller-held.json",
    "create-with-break-glass-label.json",
    "deployment-controller-revision.json",
    "event-create.json",
    "flux-ssa-create.json",
    "flux-ssa-dryrun.json",
    "flux-ssa-update.json",
    "hpa-image-change.json",
    "hpa-scale.json",
    "kubectl-create-dryrun.json",
    "kubectl-delete.json",
    "kubectl-edit.json",
    "kubectl-label.json",
    "kubectl-scale.json",
    "namespace-controller-delete.json",
    "namespace-window-configmap-edit.json",
    "no-effective-change.json",
    "out-of-scope-namespace.json",
    "replicaset-controller-create-pod.json",
    "root-ca-publisher-create-configmap.json",
    "spoofed-field-manager.json",
    "status-update.json",
];

fn now() -> Timestamp {
    NOW.parse().expect("NOW is an RFC 3339 time")
}

fn yaml_object(text: &str) -> DynamicObject {
    let value: Value = serde_saphyr::from_str(text).expect("a fixture object is YAML");
    serde_json::from_value(value).expect("a fixture object is a Kubernetes object")
}

/// One compiled set per policy file.
fn policy_sets() -> &'static [PolicySet] {
    static SETS: OnceLock<Vec<PolicySet>> = OnceLock::new();
    SETS.get_or_init(|| {
        POLICY_FILES
            .iter()
            .map(|(name, text)| PolicySet::from_yaml(name, text).expect("shipped policies compile"))
            .collect()
    })
}

fn namespaces() -> &'static [DynamicObject] {
    static NAMESPACES: OnceLock<Vec<DynamicObject>> = OnceLock::new();
    NAMESPACES.get_or_init(|| NAMESPACE_FILES.iter().map(|t| yaml_object(t)).collect())
}

fn parent() -> &'static DynamicObject {
    static PARENT: OnceLock<DynamicObject> = OnceLock::new();
    PARENT.get_or_init(|| yaml_object(PARENT_FILE))
}

fn fixture_requests() -> &'static [AdmissionRequest<DynamicObject>] {
    static REQUESTS: OnceLock<Vec<AdmissionRequest<DynamicObject>>> = OnceLock::new();
    REQUESTS.get_or_init(|| {
        FIXTURES
            .iter()
            .map(|(name, text)| {
                parse_review(text.as_bytes())
                    .unwrap_or_else(|e| panic!("fixture {name} does not parse: {e}"))
            })
            .collect()
    })
}

/// The fixtures as JSON values, which the structure-aware target changes.
fn fixture_values() -> &'static [Value] {
    static VALUES: OnceLock<Vec<Value>> = OnceLock::new();
    VALUES.get_or_init(|| {
        FIXTURES
            .iter()
            .map(|(_, text)| serde_json::from_str(text).expect("fixtures are JSON"))
            .collect()
    })
}

/// The webhook's router (`POST /validate`) as `serve --no-kube --dev` builds it, with the
/// clock pinned, on a runtime of its own that the entry points block on.
struct Webhook {
    runtime: tokio::runtime::Runtime,
    router: Router,
    _shutdown: CancellationToken,
}

fn webhook() -> &'static Webhook {
    static WEBHOOK: OnceLock<Webhook> = OnceLock::new();
    WEBHOOK.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a Tokio runtime starts");
        let metrics = Arc::new(Metrics::new());
        let shutdown = CancellationToken::new();
        // The Event publisher is a task: it must be spawned inside the runtime.
        let (events, _task) = runtime.block_on(async {
            EventSink::spawn(None, "fuzz".into(), 1024, metrics.clone(), shutdown.clone())
        });
        let policies = PolicySet::from_yaml(POLICY_FILES[0].0, POLICY_FILES[0].1)
            .expect("the example policy compiles");
        let now = now();
        let state = AppState::new(
            Arc::new(ArcSwap::from_pointee(policies)),
            NamespaceCache::disabled(),
            ParentLookup::new(None, Duration::from_secs(1), metrics.clone()),
            events,
            metrics,
        )
        .with_clock(Arc::new(move || now));
        Webhook {
            router: router(Arc::new(state), Duration::from_secs(4)),
            runtime,
            _shutdown: shutdown,
        }
    })
}

async fn post(router: &Router, body: &[u8]) -> (StatusCode, Vec<u8>) {
    let request = Request::post("/validate")
        .header("content-type", "application/json")
        .body(Body::from(body.to_vec()))
        .expect("a request builds");
    let response = router
        .clone()
        .oneshot(request)
        .await
        .expect("the router is infallible");
    let status = response.status();
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("the response body is in memory")
        .to_bytes()
        .to_vec();
    (status, bytes)
}

/// Target `admission_review`: a request body, as the API server (or anyone reaching the port)
/// would POST it, through the webhook's router; then, when it is a review, decided again the
/// way the server decides with a cluster (namespace labels, the parent of a `scale` request)
/// against every policy file.
pub fn admission_review(body: &[u8]) {
    let webhook = webhook();
    let (status, answer) = webhook.runtime.block_on(post(&webhook.router, body));
    let answer_text = String::from_utf8_lossy(&answer);
    let request = match parse_review(body) {
        Ok(request) => request,
        // A valid envelope is answered whatever its objects hold: admitted when no policy may
        // guard the write, refused (rule Unreadable) when one may.
        Err(ReviewError::Object(_)) => {
            assert_eq!(
                status,
                StatusCode::OK,
                "a review whose object is unreadable got {status}: {answer_text}"
            );
            let envelope = parse_envelope(body).expect("the envelope parses");
            let review: Value = serde_json::from_slice(&answer).expect("the answer is JSON");
            check_answer(envelope.request(), &review);
            return;
        }
        Err(error) => {
            assert_eq!(
                status,
                StatusCode::BAD_REQUEST,
                "a body that is not a review got {status}: {answer_text}"
            );
            assert_eq!(answer_text, format!("{error}\n"));
            return;
        }
    };
    assert_eq!(
        status,
        StatusCode::OK,
        "a review driftgate parses got {status}: {answer_text}"
    );
    let review: Value = serde_json::from_slice(&answer).expect("the answer is JSON");
    check_answer(&request, &review);
    // The server's one-pass reading decides as the two-step parse does, whenever it reads
    // the review itself (else the server falls back to the two-step path).
    let lazy = parse_lazily(body).and_then(|envelope| envelope.read_heads());
    for policies in policy_sets() {
        let two_step = decide_with_cluster(policies, &RequestFacts::new(&request));
        let Some(lazy) = &lazy else { continue };
        let facts = RequestFacts::of_lazy(lazy);
        let decision = decide_with_cluster(policies, &facts);
        if facts.fell_back() {
            continue;
        }
        assert_eq!(
            (decision.allowed, decision.record.rule, &decision.message),
            (two_step.allowed, two_step.record.rule, &two_step.message),
            "the one-pass reading decided otherwise"
        );
        assert_eq!(
            decision.record.changed_fields,
            two_step.record.changed_fields
        );
        assert_eq!(decision.warnings, two_step.warnings);
    }
}

/// What the API server relies on in an answer: its kind, the request's uid, a verdict, and a
/// reason when it refuses.
pub fn check_answer<'r>(request: impl Into<RequestEnvelope<'r>>, review: &Value) {
    let request = request.into();
    assert_eq!(review["apiVersion"], "admission.k8s.io/v1", "{review}");
    assert_eq!(review["kind"], "AdmissionReview", "{review}");
    let response = &review["response"];
    assert_eq!(response["uid"], request.uid(), "{review}");
    let allowed = response["allowed"]
        .as_bool()
        .unwrap_or_else(|| panic!("the answer has no verdict: {review}"));
    if !allowed {
        let message = response["status"]["message"].as_str().unwrap_or_default();
        assert!(!message.is_empty(), "a denial without a reason: {review}");
        assert_eq!(response["status"]["code"], 403, "{review}");
    }
}

/// As `server::review::decide_with_cluster` does with a cluster that holds the fixtures' Namespaces
/// and, for a subresource, a parent (named as the request's object) with an open window.
fn decide_with_cluster(policies: &PolicySet, facts: &RequestFacts<'_>) -> Decision {
    let request = facts.request();
    let namespace_name = match request.namespace() {
        Some(ns) if !ns.is_empty() => Some(ns),
        _ if request.kind().group.is_empty() && request.kind().kind == "Namespace" => {
            Some(request.name())
        }
        _ => None,
    };
    let namespace = namespace_name.and_then(|name| {
        namespaces()
            .iter()
            .find(|ns| ns.metadata.name.as_deref() == Some(name))
    });
    let input = DecisionInput {
        request: facts,
        resource: None,
        namespace: namespace.map(|ns| &ns.metadata),
        parent: None,
        recent_deletes: None,
        now: now(),
        silence: None,
    };
    let mut decision = decide(policies, &input);
    // The server reads objects only when the envelope says a policy may guard the write: it
    // must say so whenever one does.
    assert!(
        decision.record.verdicts.is_empty() || may_guard(policies, request, input.namespace),
        "a write policy {} guards, which may_guard says none may",
        decision.record.verdicts[0].policy
    );
    if needs_parent(policies, &decision) {
        let mut parent = parent().clone();
        parent.metadata.name = Some(request.name().to_owned());
        parent.metadata.namespace = request.namespace().map(str::to_owned);
        decision = decide(
            policies,
            &DecisionInput {
                parent: Some(&parent),
                ..input
            },
        );
    }
    check_decision(facts, &decision);
    decision
}

/// The decision's own promises, and everything the server derives from it: the answer, its
/// JSON, and the Events it would publish.
fn check_decision(facts: &RequestFacts<'_>, decision: &Decision) {
    let request = facts.request();
    if decision.allowed {
        assert!(
            decision.message.is_empty(),
            "an admitted write with a refusal: {}",
            decision.message
        );
    } else {
        assert!(!decision.message.is_empty(), "a denial without a reason");
    }
    let review = decision.to_response(request).into_review();
    let json = serde_json::to_value(&review).expect("an AdmissionReview serializes");
    check_answer(request, &json);
    for event in planned_events(facts, decision) {
        assert!(
            event.note.len() <= driftgate::events::MAX_NOTE_BYTES,
            "an Event note of {} bytes",
            event.note.len()
        );
        let _ = driftgate::event_sink::recorder_event(&event);
    }
}

/// Target `policy_load`: bytes as a policy file, compiled as `policy check` and the server's
/// reload do (YAML, validation, globs, durations); when it compiles, every fixture is decided
/// with it; when it does not, its problems are formatted as the CLI prints them.
pub fn policy_load(data: &[u8]) {
    // The server reads policy files with `read_to_string`: bytes that are not UTF-8 never
    // reach the parser.
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match PolicySet::from_yaml("fuzz.yaml", text) {
        Ok(policies) => {
            for request in fixture_requests() {
                decide_with_cluster(&policies, &RequestFacts::new(request));
            }
        }
        Err(errors) => {
            assert!(!errors.0.is_empty(), "a refused policy without a problem");
            let _ = errors.to_string();
        }
    }
}

/// Reads choices from the fuzzer's bytes; zeros once they run out, so every input is valid.
struct Choices<'a> {
    data: &'a [u8],
}

impl Choices<'_> {
    fn byte(&mut self) -> u8 {
        match self.data.split_first() {
            Some((first, rest)) => {
                self.data = rest;
                *first
            }
            None => 0,
        }
    }

    fn below(&mut self, n: usize) -> usize {
        usize::from(self.byte()) % n.max(1)
    }

    fn bool(&mut self) -> bool {
        self.byte() & 1 == 1
    }

    fn i32(&mut self) -> i32 {
        i32::from_le_bytes([self.byte(), self.byte(), self.byte(), self.byte()])
    }

    fn pick<'t, T>(&mut self, items: &'t [T]) -> &'t T {
        &items[self.below(items.len())]
    }

    /// Mostly a value that means something to the policies; otherwise a short string of
    /// characters that matter to globs, field paths, label syntax and UTF-8 boundaries.
    fn text(&mut self, known: &[&str]) -> String {
        if self.byte() < 192 {
            return (*self.pick(known)).to_owned();
        }
        const ALPHABET: &[char] = &[
            'a', 'z', 'A', '0', '9', '-', '_', '.', ':', '/', '*', '?', '[', ']', '{', '}', ' ',
            'T', 'Z', '"', '\\', '\n', '\0', 'é', '€', '𝄞',
        ];
        let length = self.below(24);
        (0..length).map(|_| *self.pick(ALPHABET)).collect()
    }

    /// A break-glass label value: mostly a well-formed expiry around now (past, open, too
    /// long, far future), sometimes one that is almost well-formed.
    fn expiry(&mut self) -> String {
        let minutes = i64::from(self.i32()) % (60 * 24 * 365 * 20_000);
        let at = now()
            .checked_add(SignedDuration::from_mins(minutes))
            .unwrap_or_else(|_| now());
        let mut value = format_expiry(at);
        match self.below(6) {
            0 => {
                let seconds = self.below(60);
                value.truncate(value.len() - 1);
                value.push_str(&format!("{seconds:02}Z"));
            }
            1 => {
                let cut = self.below(value.len() + 1);
                value.truncate(cut);
            }
            2 => value = self.text(&["20261130T0930Z", "20261130T093015Z", "0", ""]),
            _ => {}
        }
        value
    }
}

const OPERATIONS: &[&str] = &["CREATE", "UPDATE", "DELETE", "CONNECT"];
const USERNAMES: &[&str] = &[
    "alice",
    "bob",
    "system:serviceaccount:flux-system:kustomize-controller",
    "system:serviceaccount:flux-system:helm-controller",
    "system:serviceaccount:argocd:argocd-application-controller",
    "system:serviceaccount:kube-system:horizontal-pod-autoscaler",
    "system:serviceaccount:kube-system:deployment-controller",
    "system:serviceaccount:kube-system:replicaset-controller",
    "system:serviceaccount:kube-system:namespace-controller",
    "system:admin",
    "",
];
const GROUPS: &[&str] = &[
    "sre-oncall",
    "staging-deployers",
    "system:authenticated",
    "system:masters",
    "system:serviceaccounts",
    "system:serviceaccounts:flux-system",
];
const NAMESPACES: &[&str] = &[
    "prod-payments",
    "prod-orders",
    "prod-sandbox",
    "payments",
    "staging",
    "staging-web",
    "default",
    "kube-system",
    "",
];
const SUBRESOURCES: &[&str] = &["", "scale", "status", "exec", "ephemeralcontainers"];
const FIELD_MANAGERS: &[&str] = &[
    "kustomize-controller",
    "helm-controller",
    "argocd-controller",
    "kubectl-edit",
    "kubectl-client-side-apply",
    "kube-controller-manager",
    "",
];
const LABEL_KEYS: &[&str] = &[
    "driftgate.dev/break-glass",
    "app",
    "app.kubernetes.io/name",
    "kustomize.toolkit.fluxcd.io/name",
];
const ANNOTATION_KEYS: &[&str] = &[
    "driftgate.dev/break-glass-reason",
    "deployment.kubernetes.io/revision",
    "kubectl.kubernetes.io/last-applied-configuration",
];
const REASONS: &[&str] = &["INC-4711: api pods OOM, raising memory limit", "", " "];
/// (group, version, kind, resource)
const KINDS: &[(&str, &str, &str, &str)] = &[
    ("apps", "v1", "Deployment", "deployments"),
    ("apps", "v1", "StatefulSet", "statefulsets"),
    ("", "v1", "ConfigMap", "configmaps"),
    ("", "v1", "Secret", "secrets"),
    ("", "v1", "Namespace", "namespaces"),
    ("", "v1", "Pod", "pods"),
    ("", "v1", "Event", "events"),
    ("events.k8s.io", "v1", "Event", "events"),
    ("coordination.k8s.io", "v1", "Lease", "leases"),
    (
        "driftgate.dev",
        "v1alpha1",
        "BackportRequirement",
        "backportrequirements",
    ),
    ("autoscaling", "v1", "Scale", "scale"),
];

/// A path into an object and a value to put there (`None` removes it).
enum Segment {
    Key(&'static str),
    Index(usize),
}
use Segment::{Index, Key};
const FIELD_PATHS: &[&[Segment]] = &[
    &[Key("spec"), Key("replicas")],
    &[
        Key("spec"),
        Key("template"),
        Key("spec"),
        Key("containers"),
        Index(0),
        Key("image"),
    ],
    &[Key("spec")],
    &[Key("status"), Key("replicas")],
    &[Key("metadata"), Key("resourceVersion")],
    &[Key("metadata"), Key("generation")],
    &[Key("metadata"), Key("managedFields")],
    &[Key("metadata"), Key("labels")],
    &[Key("metadata"), Key("annotations")],
    &[Key("metadata"), Key("name")],
    &[Key("metadata")],
    &[Key("data"), Key("flags.yaml")],
    &[Key("kind")],
];

/// The map at `keys` inside `target`, made (replacing what is there) where it is not a map:
/// an earlier change may have put a number or a list anywhere.
fn map_at<'v>(mut at: &'v mut Value, keys: &[&str]) -> &'v mut serde_json::Map<String, Value> {
    for key in keys {
        if !at.is_object() {
            *at = json!({});
        }
        at = at
            .as_object_mut()
            .expect("made an object")
            .entry(*key)
            .or_insert(Value::Null);
    }
    if !at.is_object() {
        *at = json!({});
    }
    at.as_object_mut().expect("made an object")
}

fn set_path(target: &mut Value, path: &[Segment], value: Option<Value>) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut at = target;
    for segment in parents {
        at = match segment {
            Key(key) => {
                if !at.is_object() {
                    *at = json!({});
                }
                at.as_object_mut()
                    .expect("made an object")
                    .entry(*key)
                    .or_insert(Value::Null)
            }
            Index(index) => match at.get_mut(*index) {
                Some(item) => item,
                None => return,
            },
        };
    }
    match (last, value) {
        (Key(key), Some(value)) => {
            if !at.is_object() {
                *at = json!({});
            }
            at[*key] = value;
        }
        (Key(key), None) => {
            if let Some(map) = at.as_object_mut() {
                map.remove(*key);
            }
        }
        (Index(index), value) => {
            if let Some(item) = at.get_mut(*index) {
                *item = value.unwrap_or(Value::Null);
            }
        }
    }
}

/// Target `admission_review_structured`: random bytes rarely make a review, so this one takes
/// a fixture and changes what the decision reads (operation, user, groups, namespace, kind,
/// subresource, field manager, dry run, labels with expiries, reasons, fields of the objects),
/// then posts it as [`admission_review`] does.
pub fn admission_review_structured(data: &[u8]) {
    let body = structured_body(data);
    admission_review(&body);
}

/// The review body the choices in `data` make; public so a crashing input can be saved as the
/// body it produced.
pub fn structured_body(data: &[u8]) -> Vec<u8> {
    let mut choices = Choices { data };
    let mut review = choices.pick(fixture_values()).clone();
    let request = &mut review["request"];
    let changes = choices.below(12);
    for _ in 0..changes {
        let which_object = if choices.bool() {
            "object"
        } else {
            "oldObject"
        };
        match choices.below(14) {
            0 => request["operation"] = json!(choices.pick(OPERATIONS)),
            1 => {
                let username = choices.text(USERNAMES);
                map_at(request, &["userInfo"]).insert("username".into(), json!(username));
            }
            2 => {
                let count = choices.below(4);
                let groups: Vec<String> = (0..count).map(|_| choices.text(GROUPS)).collect();
                map_at(request, &["userInfo"]).insert("groups".into(), json!(groups));
            }
            3 => {
                let namespace = choices.text(NAMESPACES);
                for object in ["object", "oldObject"] {
                    if request[object].is_object() {
                        map_at(&mut request[object], &["metadata"])
                            .insert("namespace".into(), json!(namespace));
                    }
                }
                request["namespace"] = json!(namespace);
            }
            4 => {
                let subresource = choices.text(SUBRESOURCES);
                if subresource.is_empty() {
                    request.as_object_mut().map(|r| r.remove("subResource"));
                } else {
                    request["subResource"] = json!(subresource);
                }
            }
            5 => {
                let manager = choices.text(FIELD_MANAGERS);
                map_at(request, &["options"]).insert("fieldManager".into(), json!(manager));
            }
            6 => request["dryRun"] = json!(choices.bool()),
            7 => {
                let key = choices.text(LABEL_KEYS);
                let value = if choices.below(4) == 0 {
                    None
                } else {
                    Some(json!(choices.expiry()))
                };
                if request[which_object].is_object() {
                    let labels = map_at(&mut request[which_object], &["metadata", "labels"]);
                    match value {
                        Some(value) => labels.insert(key, value),
                        None => labels.remove(&key),
                    };
                }
            }
            8 => {
                let key = choices.text(ANNOTATION_KEYS);
                let value = choices.text(REASONS);
                if request[which_object].is_object() {
                    map_at(&mut request[which_object], &["metadata", "annotations"])
                        .insert(key, json!(value));
                }
            }
            9 => {
                let path = choices.pick(FIELD_PATHS);
                let value = match choices.below(6) {
                    0 => None,
                    1 => Some(Value::Null),
                    2 => Some(json!(choices.i32())),
                    3 => Some(json!(choices.text(&["registry.example.com/api:1.43.0"]))),
                    4 => Some(json!({})),
                    _ => Some(json!([choices.i32()])),
                };
                if request[which_object].is_object() {
                    set_path(&mut request[which_object], path, value);
                }
            }
            10 => request[which_object] = Value::Null,
            11 => {
                let (group, version, kind, resource) = *choices.pick(KINDS);
                request["kind"] = json!({"group": group, "version": version, "kind": kind});
                request["resource"] =
                    json!({"group": group, "version": version, "resource": resource});
                if request[which_object].is_object() {
                    request[which_object]["kind"] = json!(kind);
                }
            }
            12 => request["name"] = json!(choices.text(&["api", "api-config", "prod-orders"])),
            _ => {
                // The same object on both sides: only the metadata changes chosen after this.
                let object = request["object"].clone();
                request["oldObject"] = object;
            }
        }
    }
    serde_json::to_vec(&review).expect("a JSON value serializes")
}
