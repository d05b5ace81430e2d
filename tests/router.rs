//! The webhook and admin routers driven with `tower::ServiceExt::oneshot` on the fixtures: no TLS,
//! no cluster. The TLS listener and the process around it are tested in `serve.rs`.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use driftgate::event_sink::EventSink;
use driftgate::kube_state::{NamespaceCache, ParentLookup};
use driftgate::metrics::Metrics;
use driftgate::policy::PolicySet;
use driftgate::server::{AppState, MAX_BODY_BYTES, admin_router, router};
use driftgate::tasks::reload::{PolicyStatus, load_at_start, reload_now};
use http_body_util::BodyExt;
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

struct Harness {
    state: Arc<AppState>,
    webhook: Router,
    admin: Router,
    _shutdown: CancellationToken,
}

fn harness_with(policy: &Path) -> Harness {
    let metrics = Arc::new(Metrics::new());
    let shutdown = CancellationToken::new();
    let policies = Arc::new(ArcSwap::from_pointee(PolicySet::load(policy).unwrap()));
    let (events, _task) =
        EventSink::spawn(None, "test".into(), 16, metrics.clone(), shutdown.clone());
    let now = "2026-11-30T09:00:00Z".parse().unwrap();
    let state = Arc::new(
        AppState::new(
            policies,
            NamespaceCache::disabled(),
            ParentLookup::new(None, Duration::from_secs(1), metrics.clone()),
            events,
            metrics,
        )
        .with_clock(Arc::new(move || now)),
    );
    Harness {
        webhook: router(state.clone(), Duration::from_secs(4)),
        admin: admin_router(state.clone()),
        state,
        _shutdown: shutdown,
    }
}

fn harness() -> Harness {
    harness_with(Path::new("policies/example.yaml"))
}

async fn post(app: &Router, body: impl Into<Body>) -> (StatusCode, Vec<u8>) {
    let request = Request::post("/validate")
        .header("content-type", "application/json")
        .body(body.into())
        .unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = response
        .into_body()
        .collect()
        .await
        .unwrap()
        .to_bytes()
        .to_vec();
    (status, bytes)
}

async fn get(app: &Router, path: &str) -> (StatusCode, String) {
    let response = app
        .clone()
        .oneshot(Request::get(path).body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(Path::new("tests/fixtures").join(name)).unwrap()
}

#[tokio::test]
async fn answers_each_fixture_with_its_uid_and_decision() {
    let h = harness();
    for (name, allowed, rule) in [
        ("flux-ssa-update.json", true, "Controller"),
        ("flux-ssa-dryrun.json", true, "Controller"),
        // Captured from the real kustomize-controller (tests/e2e/scenarios/real_flux_capture.rs).
        ("flux-real-create.json", true, "Controller"),
        ("flux-real-dryrun.json", true, "Controller"),
        ("flux-real-apply.json", true, "Controller"),
        ("flux-real-prune.json", true, "Controller"),
        ("kubectl-edit.json", false, "NotPermitted"),
        ("kubectl-scale.json", false, "NotPermitted"),
        ("spoofed-field-manager.json", false, "FieldManagerSpoofing"),
        ("hpa-scale.json", true, "Delegation"),
        ("break-glass-open.json", true, "BreakGlassOpened"),
        ("break-glass-use-edit.json", true, "BreakGlassWindow"),
        ("controller-held.json", false, "ControllerHeld"),
        ("audit-staging-edit.json", true, "NotPermitted"),
        ("status-update.json", true, "OutOfScope"),
    ] {
        let body = fixture(name);
        let input: Value = serde_json::from_slice(&body).unwrap();
        let (status, answer) = post(&h.webhook, body).await;
        assert_eq!(status, StatusCode::OK, "{name}");
        let answer: Value = serde_json::from_slice(&answer).unwrap();
        assert_eq!(answer["apiVersion"], "admission.k8s.io/v1", "{name}");
        assert_eq!(answer["kind"], "AdmissionReview", "{name}");
        let response = &answer["response"];
        assert_eq!(response["uid"], input["request"]["uid"], "{name}");
        assert_eq!(response["allowed"], allowed, "{name}: {response}");
        assert_eq!(response["auditAnnotations"]["rule"], rule, "{name}");
        if !allowed {
            assert_eq!(response["status"]["code"], 403, "{name}");
            assert!(
                response["status"]["message"]
                    .as_str()
                    .unwrap()
                    .contains(rule),
                "{name}"
            );
        }
    }
    let (_, metrics) = get(&h.admin, "/metrics").await;
    assert!(
        metrics.contains("driftgate_admission_reviews_total{decision=\"denied\",rule=\"NotPermitted\",policy=\"production\",operation=\"UPDATE\"} 2"),
        "{metrics}"
    );
    assert!(
        metrics.contains("driftgate_admission_duration_seconds_count 15"),
        "{metrics}"
    );
    // Alice's edit under the window was seen: one window is known open.
    assert!(
        metrics.contains("driftgate_break_glass_windows_open 1"),
        "{metrics}"
    );
}

/// What the real Argo CD application-controller sends (tests/e2e/scenarios/argocd_capture.rs),
/// with its default client-side apply and with server-side apply, decided by a policy whose
/// `argocd` controller names the identity and field manager captured.
#[tokio::test]
async fn the_real_argocd_reviews_are_decided_as_the_controller_by_an_argocd_policy() {
    let h = harness_with(Path::new("tests/fixtures/policies/argocd-capture.yaml"));
    for name in [
        "argocd-real-create.json",
        "argocd-real-apply.json",
        "argocd-real-prune.json",
        "argocd-real-ssa-create.json",
        "argocd-real-ssa-apply.json",
        "argocd-real-ssa-prune.json",
    ] {
        let body = fixture(name);
        let input: Value = serde_json::from_slice(&body).unwrap();
        let (status, answer) = post(&h.webhook, body).await;
        assert_eq!(status, StatusCode::OK, "{name}");
        let answer: Value = serde_json::from_slice(&answer).unwrap();
        let response = &answer["response"];
        assert_eq!(response["uid"], input["request"]["uid"], "{name}");
        assert_eq!(response["allowed"], true, "{name}: {response}");
        assert_eq!(response["auditAnnotations"]["rule"], "Controller", "{name}");
        assert_eq!(
            response["auditAnnotations"]["policy"], "argocd-capture",
            "{name}: {response}"
        );
    }
}

#[tokio::test]
async fn malformed_reviews_get_a_400_that_says_why() {
    let h = harness();
    for (body, says) in [
        ("not json".to_owned(), "not a valid AdmissionReview"),
        (
            r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#.to_owned(),
            "has no request",
        ),
        (
            r#"{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"x"}}"#.to_owned(),
            "admission.k8s.io/v1beta1\" is not supported",
        ),
        (
            r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"x"}}"#.to_owned(),
            "missing field",
        ),
        (
            String::from_utf8(fixture("kubectl-edit.json")).unwrap()[..400].to_owned(),
            "EOF while parsing",
        ),
    ] {
        let (status, answer) = post(&h.webhook, body.clone()).await;
        let answer = String::from_utf8_lossy(&answer);
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert!(answer.contains(says), "{answer:?} should say {says:?}");
    }
    let (_, metrics) = get(&h.admin, "/metrics").await;
    assert!(metrics.contains("decision=\"invalid\""), "{metrics}");
}

#[tokio::test]
async fn bodies_up_to_7_mib_are_read_and_larger_ones_refused_with_413() {
    let h = harness();
    // A review carrying two ~1.5 MiB objects: a large ConfigMap edited by bob.
    let big = "x".repeat(1536 * 1024);
    let review = serde_json::json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "big-1", "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
            "resource": {"group": "", "version": "v1", "resource": "configmaps"},
            "name": "blob", "namespace": "prod-payments", "operation": "UPDATE",
            "userInfo": {"username": "bob", "groups": ["system:authenticated"]},
            "object": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "blob", "namespace": "prod-payments"}, "data": {"blob": format!("{big}y")}},
            "oldObject": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "blob", "namespace": "prod-payments"}, "data": {"blob": big}},
            "dryRun": false
        }
    });
    let body = serde_json::to_vec(&review).unwrap();
    assert!(body.len() > 3 * 1024 * 1024);
    let (status, answer) = post(&h.webhook, body).await;
    assert_eq!(status, StatusCode::OK);
    let answer: Value = serde_json::from_slice(&answer).unwrap();
    assert_eq!(answer["response"]["allowed"], false);

    let (status, _) = post(&h.webhook, vec![b' '; MAX_BODY_BYTES + 1]).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
}

#[tokio::test]
async fn health_readiness_and_metrics() {
    let h = harness();
    assert_eq!(get(&h.admin, "/healthz").await.0, StatusCode::OK);
    let (status, body) = get(&h.admin, "/readyz").await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains("6 policies"), "{body}");
    let (status, body) = get(&h.admin, "/metrics").await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains("driftgate_build_info"), "{body}");
    // Once shutdown starts, readiness fails so that the Service stops sending new reviews.
    h.state
        .serving
        .accepting
        .store(false, std::sync::atomic::Ordering::Relaxed);
    assert_eq!(
        get(&h.admin, "/readyz").await.0,
        StatusCode::SERVICE_UNAVAILABLE
    );
}

#[tokio::test]
async fn a_bad_reload_keeps_the_last_good_policy_and_readiness() {
    let dir = std::env::temp_dir().join(format!("driftgate-router-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let policy = dir.join("policy.yaml");
    std::fs::copy("policies/example.yaml", &policy).unwrap();
    let h = harness_with(&dir);
    let edit = fixture("kubectl-edit.json");
    assert_eq!(
        serde_json::from_slice::<Value>(&post(&h.webhook, edit.clone()).await.1).unwrap()["response"]
            ["allowed"],
        false
    );

    // An invalid edit is refused; the old policy keeps deciding and the pod stays ready.
    std::fs::write(&policy, "apiVersion: driftgate.dev/v1alpha1\nkind: GatePolicy\nmetadata: {name: x}\nspec: {namespaces: {include: []}}\n").unwrap();
    let errors = reload_now(
        &dir,
        &h.state.review.policies,
        &h.state.serving.policy_status,
        &h.state.serving.metrics,
    )
    .unwrap_err();
    assert!(
        errors
            .to_string()
            .contains("policy.yaml:4: spec.namespaces.include"),
        "{errors}"
    );
    assert_eq!(
        serde_json::from_slice::<Value>(&post(&h.webhook, edit.clone()).await.1).unwrap()["response"]
            ["allowed"],
        false
    );
    let (status, body) = get(&h.admin, "/readyz").await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        body.contains("policy.yaml:4: spec.namespaces.include"),
        "{body}"
    );
    let (_, metrics) = get(&h.admin, "/metrics").await;
    assert!(
        metrics.contains("driftgate_policy_reloads_total{result=\"failure\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("driftgate_policy_valid{source=\"file\"} 0"),
        "the gauge stays 0 while the bad content stays:\n{metrics}"
    );

    // A valid edit that stops guarding prod-payments takes effect at once.
    let relaxed = std::fs::read_to_string("policies/example.yaml")
        .unwrap()
        .replace("\"prod-*\", ", "");
    std::fs::write(&policy, relaxed).unwrap();
    assert_eq!(
        reload_now(
            &dir,
            &h.state.review.policies,
            &h.state.serving.policy_status,
            &h.state.serving.metrics,
        )
        .unwrap(),
        6
    );
    let answer: Value = serde_json::from_slice(&post(&h.webhook, edit).await.1).unwrap();
    assert_eq!(answer["response"]["allowed"], true);
    assert_eq!(answer["response"]["auditAnnotations"]["rule"], "OutOfScope");
    assert_eq!(get(&h.admin, "/readyz").await.1, "ok: 6 policies loaded\n");
    let (_, metrics) = get(&h.admin, "/metrics").await;
    assert!(
        metrics.contains("driftgate_policy_valid{source=\"file\"} 1"),
        "{metrics}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A policy bad from the start: nothing to decide with. Not ready, with the problem; every
/// review (guarded or not: which are guarded is what the policy would say) answered 503 with
/// a Status the API server passes on; once the file is fixed, ready and deciding.
#[tokio::test]
async fn a_policy_bad_from_the_start_leaves_it_unready_until_fixed() {
    let dir = std::env::temp_dir().join(format!("driftgate-router-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let policy = dir.join("policy.yaml");
    std::fs::write(&policy, "apiVersion: driftgate.dev/v1alpha1\nkind: GatePolicy\nmetadata: {name: x}\nspec: {namespaces: {include: []}}\n").unwrap();
    let h = harness();
    let status = Arc::new(PolicyStatus::default());
    // A state as `serve` builds it: an empty set until the file loads.
    let state = Arc::new(
        AppState::new(
            Arc::new(ArcSwap::from_pointee(PolicySet::default())),
            NamespaceCache::disabled(),
            ParentLookup::new(
                None,
                Duration::from_secs(1),
                h.state.serving.metrics.clone(),
            ),
            h.state.effects.events.clone(),
            h.state.serving.metrics.clone(),
        )
        .with_policy_status(status.clone()),
    );
    let (webhook, admin) = (
        router(state.clone(), Duration::from_secs(4)),
        admin_router(state.clone()),
    );
    load_at_start(
        dir.clone(),
        &state.review.policies,
        &status,
        &state.serving.metrics,
    );

    let (code, body) = get(&admin, "/readyz").await;
    assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        body.contains("no valid policy") && body.contains("policy.yaml:4: spec.namespaces.include"),
        "{body}"
    );
    for name in [
        "kubectl-edit.json",
        "flux-ssa-update.json",
        "status-update.json",
    ] {
        let (code, answer) = post(&webhook, fixture(name)).await;
        assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE, "{name}");
        let answer: Value = serde_json::from_slice(&answer).unwrap();
        assert_eq!(answer["kind"], "Status", "{name}: {answer}");
        assert_eq!(answer["code"], 503, "{name}");
        let message = answer["message"].as_str().unwrap();
        assert!(
            message.contains("no valid policy")
                && message.contains("policy.yaml:4: spec.namespaces.include"),
            "{name}: {message}"
        );
    }
    let (_, metrics) = get(&admin, "/metrics").await;
    assert!(
        metrics.contains("driftgate_policy_valid{source=\"file\"} 0"),
        "{metrics}"
    );
    assert!(
        metrics.contains("driftgate_admission_reviews_total{decision=\"unavailable\",rule=\"\",policy=\"\",operation=\"\"} 3"),
        "{metrics}"
    );

    std::fs::copy("policies/example.yaml", &policy).unwrap();
    assert_eq!(
        reload_now(
            &dir,
            &state.review.policies,
            &status,
            &state.serving.metrics
        )
        .unwrap(),
        6
    );
    assert_eq!(
        get(&admin, "/readyz").await,
        (StatusCode::OK, "ok: 6 policies loaded\n".to_owned())
    );
    let (code, answer) = post(&webhook, fixture("kubectl-edit.json")).await;
    assert_eq!(code, StatusCode::OK);
    let answer: Value = serde_json::from_slice(&answer).unwrap();
    assert_eq!(answer["response"]["allowed"], false, "{answer}");
    assert_eq!(
        answer["response"]["auditAnnotations"]["rule"],
        "NotPermitted"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `levels` maps nested in one another, as JSON text: a serde_json::Value that deep would
/// overflow the test's own stack when dropped.
fn nested(levels: usize) -> String {
    format!("{}1{}", "{\"a\":".repeat(levels), "}".repeat(levels))
}

/// A fixture whose `object` (and `oldObject` when `old`) holds nested maps at `place`, so
/// that the object nests `levels` deep (Kubernetes accepts 10,000).
fn deep_review(fixture_name: &str, place: &[&str], old: bool, levels: usize) -> String {
    let mut review: Value = serde_json::from_slice(&fixture(fixture_name)).unwrap();
    let fields: &[&str] = if old {
        &["object", "oldObject"]
    } else {
        &["object"]
    };
    for field in fields {
        let mut node = &mut review["request"][field];
        for key in place {
            node = &mut node[key];
        }
        *node = Value::String("DEEP-PLACEHOLDER".into());
    }
    serde_json::to_string(&review)
        .unwrap()
        .replace("\"DEEP-PLACEHOLDER\"", &nested(levels - place.len()))
}

/// kubectl-edit.json with `field` of the request set to `value`.
fn edit_with(field: &str, value: Value) -> String {
    let mut review: Value = serde_json::from_slice(&fixture("kubectl-edit.json")).unwrap();
    review["request"][field] = value;
    review.to_string()
}

/// kubectl-edit.json with the object's managedFields set to `entries`.
fn with_managed_fields(entries: Value) -> String {
    let mut review: Value = serde_json::from_slice(&fixture("kubectl-edit.json")).unwrap();
    review["request"]["object"]["metadata"]["managedFields"] = entries;
    review.to_string()
}

fn not_an_object() -> Value {
    serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": "x"})
}

/// Runs `test` on a thread with the 2 MiB stack of a tokio worker, on a runtime of its own.
fn on_a_worker_stack(test: impl Future<Output = ()> + Send + 'static) {
    std::thread::Builder::new()
        .stack_size(2 * 1024 * 1024)
        .spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(test)
        })
        .unwrap()
        .join()
        .expect("the test thread did not panic");
}

async fn decided(h: &Harness, body: String, what: &str) -> Value {
    let (status, answer) = post(&h.webhook, body).await;
    assert_eq!(
        status,
        StatusCode::OK,
        "{what}: {}",
        String::from_utf8_lossy(&answer)
    );
    let answer: Value = serde_json::from_slice(&answer).unwrap();
    answer["response"].clone()
}

#[test]
fn objects_of_any_depth_kubernetes_accepts_are_decided_on_a_worker_stack() {
    on_a_worker_stack(async {
        let h = harness();
        for levels in [130, 1000, 10_000] {
            for (what, fixture_name, place, old, allowed, rule) in [
                // Bob's edit is refused whatever its status holds.
                (
                    "bob's edit, deep status",
                    "kubectl-edit.json",
                    &["status"][..],
                    true,
                    false,
                    "NotPermitted",
                ),
                (
                    "bob's edit, deep spec",
                    "kubectl-edit.json",
                    &["spec", "deep"][..],
                    false,
                    false,
                    "NotPermitted",
                ),
                // Flux's apply is the desired state, however deep.
                (
                    "flux's apply, deep spec",
                    "flux-ssa-update.json",
                    &["spec", "deep"][..],
                    false,
                    true,
                    "Controller",
                ),
                // A status writer through /status: read (a subresource may guard), not guarded.
                (
                    "a status write, deep status",
                    "status-update.json",
                    &["status"][..],
                    true,
                    true,
                    "OutOfScope",
                ),
            ] {
                let what = format!("{what}, {levels} levels");
                let response =
                    decided(&h, deep_review(fixture_name, place, old, levels), &what).await;
                assert_eq!(response["allowed"], allowed, "{what}: {response}");
                assert_eq!(
                    response["auditAnnotations"]["rule"], rule,
                    "{what}: {response}"
                );
                if !allowed {
                    let message = response["status"]["message"].as_str().unwrap();
                    assert!(
                        message.starts_with("bob may not update Deployment prod-payments/api"),
                        "{what}: {message}"
                    );
                }
            }
        }
    });
}

#[test]
fn an_unguarded_write_is_admitted_whatever_its_objects_hold() {
    on_a_worker_stack(async {
        let h = harness();
        let unguarded = |body: String| body.replace("\"prod-payments\"", "\"dev-team\"");
        for (what, body) in [
            (
                "130 levels",
                deep_review("kubectl-edit.json", &["status"], true, 130),
            ),
            (
                "10,000 levels",
                deep_review("kubectl-edit.json", &["spec", "deep"], false, 10_000),
            ),
            // Deeper than Kubernetes accepts: never parsed.
            (
                "100,000 levels",
                deep_review("kubectl-edit.json", &["spec", "deep"], false, 100_000),
            ),
            (
                "an object that is not one",
                edit_with("object", not_an_object()),
            ),
        ] {
            let response = decided(&h, unguarded(body), what).await;
            assert_eq!(response["allowed"], true, "{what}: {response}");
            assert_eq!(
                response["auditAnnotations"]["rule"], "OutOfScope",
                "{what}: {response}"
            );
            assert_eq!(
                response["auditAnnotations"]["decision"], "allowed",
                "{what}: {response}"
            );
        }
    });
}

#[test]
fn a_guarded_write_whose_object_cannot_be_read_is_refused_with_why() {
    on_a_worker_stack(async {
        let h = harness();
        for (what, body, says) in [
            (
                "metadata that is not a map",
                edit_with("object", not_an_object()),
                "the request's object is not a Kubernetes object: invalid type: string",
            ),
            (
                "an old object that is a list",
                edit_with("oldObject", serde_json::json!([1, 2])),
                "the request's oldObject is not a Kubernetes object",
            ),
            (
                "deeper than Kubernetes accepts",
                deep_review("kubectl-edit.json", &["spec", "deep"], false, 10_001),
                "nested 10001 levels deep, more than the 10000 Kubernetes accepts",
            ),
            // Read only with the diff on the one-pass path, which then falls back.
            (
                "managedFields that are not entries",
                with_managed_fields(serde_json::json!([{"time": 7}])),
                "the request's object is not a Kubernetes object: invalid type: integer `7`",
            ),
        ] {
            let response = decided(&h, body, what).await;
            assert_eq!(response["allowed"], false, "{what}: {response}");
            assert_eq!(
                response["auditAnnotations"]["rule"], "Unreadable",
                "{what}: {response}"
            );
            assert_eq!(
                response["auditAnnotations"]["policy"], "production",
                "{what}: {response}"
            );
            assert_eq!(response["status"]["code"], 403, "{what}: {response}");
            let message = response["status"]["message"].as_str().unwrap();
            assert!(
                message.starts_with("bob may not update Deployment prod-payments/api: driftgate could not read the object in the request (")
                    && message.contains(says)
                    && message.contains("(policy \"production\", rule Unreadable). Send the object as valid Kubernetes JSON"),
                "{what}: {message}"
            );
        }
        let (_, metrics) = get(&h.admin, "/metrics").await;
        assert!(
            metrics.contains("driftgate_admission_reviews_total{decision=\"denied\",rule=\"Unreadable\",policy=\"production\",operation=\"UPDATE\"} 4"),
            "{metrics}"
        );
    });
}

/// What the ledger does with an admitted object (serialize it to a value and to bytes, clone
/// and compare it, drop the copies: all recursive in serde), at the deepest Kubernetes
/// accepts, fits in the stack a review of it is given.
#[test]
fn the_stack_given_to_a_deep_review_holds_what_the_ledger_does_with_its_object() {
    use driftgate::review::{MAX_DEPTH, parse_envelope, stack_for};
    std::thread::Builder::new()
        .stack_size(2 * 1024 * 1024)
        .spawn(|| {
            let body = deep_review("kubectl-edit.json", &["spec", "deep"], false, MAX_DEPTH);
            let Ok(review) = parse_envelope(body.as_bytes()).unwrap().read_objects() else {
                panic!("an object {MAX_DEPTH} levels deep is read");
            };
            assert_eq!(review.depth(), MAX_DEPTH);
            let stack = stack_for(review.depth());
            stacker::maybe_grow(stack, stack, || {
                let object = review.object.as_ref().unwrap();
                let value = serde_json::to_value(object).unwrap();
                let copy = object.clone();
                assert!(copy == *object);
                let bytes = serde_json::to_vec(&value).unwrap();
                assert!(bytes.len() > 5 * MAX_DEPTH);
                drop(copy);
                drop(value);
            });
        })
        .unwrap()
        .join()
        .expect("the test thread did not panic");
}

#[tokio::test]
async fn with_gatepolicies_the_pod_is_unready_until_they_are_listed() {
    let metrics = Arc::new(Metrics::new());
    let shutdown = CancellationToken::new();
    let policies = Arc::new(ArcSwap::from_pointee(
        PolicySet::load(Path::new("policies/example.yaml")).unwrap(),
    ));
    let (events, _task) =
        EventSink::spawn(None, "test".into(), 16, metrics.clone(), shutdown.clone());
    let state = Arc::new(
        AppState::new(
            policies,
            NamespaceCache::disabled(),
            ParentLookup::new(None, Duration::from_secs(1), metrics.clone()),
            events,
            metrics,
        )
        .with_gatepolicies(Some(Arc::new(
            driftgate::tasks::gatepolicies::GatePolicyHealth::default(),
        ))),
    );
    let (status, body) = get(&admin_router(state), "/readyz").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        body,
        "GatePolicy objects not listed from the API server yet\n"
    );
}
