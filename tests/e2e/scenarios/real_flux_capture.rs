//! Issue 13, scenario 6: the controller names from the real thing. A capture webhook keeps what
//! Flux's real kustomize-controller sends while it creates a Deployment and a ConfigMap,
//! changes the Deployment (a dry run, then an apply) and prunes the ConfigMap; one review of
//! each kind is compared with `tests/fixtures/flux-real-*.json` on what driftgate decides by,
//! and the example policy's `flux` entry must name exactly the identity and field manager seen.
//!
//! The fixtures are the captured reviews with what varies per run normalised (uids,
//! resourceVersions, generations, every timestamp, `extra`'s values); the namespace stays
//! `prod-flux-capture`, a production namespace of the example policy, so `tests/router.rs` can
//! have the example policy decide them. `DRIFTGATE_WRITE_FIXTURES=1` rewrites them instead.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use driftgate::policy::PolicySet;
use k8s_openapi::api::authentication::v1::UserInfo;
use serde_json::{Value, json};

use crate::harness::capture::CaptureWebhook;
use crate::harness::flux::{FLUX_NAMESPACE, flux};
use crate::harness::{ADMIN, FLUX, control_plane, install_crypto_provider, repo_path, shared};

use super::{FLUX_FIELD_MANAGER, api_deployment};

const NAMESPACE: &str = "prod-flux-capture";
/// The Kustomization and its source.
const SOURCE: &str = "prod-flux-capture";
/// The capture webhook's namespaceSelector.
const LABEL: (&str, &str) = ("driftgate-e2e-capture", "yes");
const INTERVAL: &str = "5s";
/// The first reconcile may wait for the controller's caches (it starts with the first test
/// that uses it); later ones come within a few intervals.
const APPLIED: Duration = Duration::from_secs(120);
const REFRESH: &str = "DRIFTGATE_WRITE_FIXTURES=1 cargo test --test e2e real_flux_capture";

fn namespace() -> String {
    format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {NAMESPACE}\n  labels:\n    {}: \"{}\"\n",
        LABEL.0, LABEL.1
    )
}

fn configmap() -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: {NAMESPACE}\ndata:\n  LOG_LEVEL: info\n"
    )
}

/// One "Git" revision: the namespace and `rest`.
fn revision(rest: &[String]) -> String {
    let mut documents = vec![namespace()];
    documents.extend(rest.iter().cloned());
    documents.join("\n---\n")
}

/// Publishes `manifests` and waits until the Kustomization has applied that revision.
async fn publish_and_wait(manifests: &str) {
    wait_applied(&flux().publish(SOURCE, manifests)).await;
}

async fn wait_applied(revision: &str) {
    let start = Instant::now();
    loop {
        let applied = control_plane()
            .kubectl(
                ADMIN,
                &[
                    "get",
                    "kustomization",
                    SOURCE,
                    "-n",
                    FLUX_NAMESPACE,
                    "-o",
                    "jsonpath={.status.lastAppliedRevision}",
                ],
            )
            .stdout;
        if applied.trim() == revision {
            return;
        }
        assert!(
            start.elapsed() < APPLIED,
            "Flux did not apply {revision} within {APPLIED:?} (last applied {applied:?}); log: {}",
            flux().log().display()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Waits until the Deployment controller has written the status of Deployment `api`'s
/// current generation.
async fn wait_observed() {
    let start = Instant::now();
    loop {
        let generations = control_plane()
            .kubectl(
                ADMIN,
                &[
                    "get",
                    "deployment/api",
                    "-n",
                    NAMESPACE,
                    "-o",
                    "jsonpath={.metadata.generation}/{.status.observedGeneration}",
                ],
            )
            .stdout;
        if let Some((generation, observed)) = generations.trim().split_once('/')
            && generation == observed
        {
            return;
        }
        assert!(
            start.elapsed() < APPLIED,
            "the Deployment controller never observed {NAMESPACE}/api ({generations:?})"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test]
async fn the_reviews_the_real_flux_sends_match_the_fixtures_and_the_example_policy() {
    install_crypto_provider();
    shared();
    // The namespace first, alone, so the capture webhook can be registered on it before Flux
    // writes anything else there.
    let first = flux().publish(SOURCE, &revision(&[]));
    flux().kustomize(SOURCE, INTERVAL);
    wait_applied(&first).await;
    let capture = CaptureWebhook::register("driftgate-e2e-capture", LABEL, NAMESPACE);

    let configmap = configmap();
    publish_and_wait(&revision(&[
        api_deployment(NAMESPACE, 2),
        configmap.clone(),
    ]))
    .await;
    // The Deployment controller's status write comes first, as it does in a cluster where Git
    // changes minutes later: the fixtures' managedFields hold its entry.
    wait_observed().await;
    // A change to the Deployment: Flux's dry run shows it, and it applies.
    publish_and_wait(&revision(&[api_deployment(NAMESPACE, 3), configmap])).await;
    // The ConfigMap leaves "Git": Flux prunes it.
    publish_and_wait(&revision(&[api_deployment(NAMESPACE, 3)])).await;

    let reviews: Vec<Value> = capture
        .reviews()
        .into_iter()
        .filter(|r| r["request"]["userInfo"]["username"] == FLUX.user)
        .collect();
    let seen: Vec<String> = reviews.iter().map(summary).collect();
    eprintln!("the real Flux sent, in order:\n{}", seen.join("\n"));
    let picked = [
        (
            "flux-real-create.json",
            pick(&reviews, "CREATE", "Deployment", false),
        ),
        (
            "flux-real-dryrun.json",
            pick(&reviews, "UPDATE", "Deployment", true),
        ),
        (
            "flux-real-apply.json",
            pick(&reviews, "UPDATE", "Deployment", false),
        ),
        (
            "flux-real-prune.json",
            pick(&reviews, "DELETE", "ConfigMap", false),
        ),
    ];
    let write = std::env::var("DRIFTGATE_WRITE_FIXTURES").is_ok_and(|v| v == "1");
    let mut mismatches = Vec::new();
    for (file, review) in &picked {
        let normalised = normalise(review);
        let path = fixture_path(file);
        if write {
            let text = serde_json::to_string_pretty(&normalised).unwrap() + "\n";
            std::fs::write(&path, text).expect("the fixture is written");
            eprintln!("wrote {}", path.display());
            continue;
        }
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e}; write it with {REFRESH}", path.display()));
        let committed: Value = serde_json::from_str(&text).expect("the fixture is JSON");
        mismatches.extend(
            differences(&what_matters(&committed), &what_matters(&normalised))
                .into_iter()
                .map(|d| format!("{file}: {d}")),
        );
    }
    assert!(
        mismatches.is_empty(),
        "the real Flux no longer sends what the fixtures say:\n{}\nIf that is Flux's (or \
         Kubernetes') doing, refresh them with {REFRESH} and review the diff.",
        mismatches.join("\n")
    );
    assert_example_policy_names(&picked.map(|(_, review)| review));
}

pub(super) fn fixture_path(file: &str) -> PathBuf {
    repo_path("tests/fixtures").join(file)
}

/// The first review of `operation` on a `kind` with `dry_run`; the dry-run and real UPDATEs are
/// the Deployment's with 3 replicas (the change, not the no-op dry runs of earlier intervals).
fn pick(reviews: &[Value], operation: &str, kind: &str, dry_run: bool) -> Value {
    reviews
        .iter()
        .find(|r| {
            let request = &r["request"];
            request["operation"] == operation
                && request["kind"]["kind"] == kind
                && request["dryRun"].as_bool().unwrap_or(false) == dry_run
                && (operation != "UPDATE" || request["object"]["spec"]["replicas"] == 3)
        })
        .cloned()
        .unwrap_or_else(|| {
            let seen: Vec<String> = reviews.iter().map(summary).collect();
            panic!(
                "no {operation} of a {kind} (dry run {dry_run}) from Flux was captured; seen:\n{}",
                seen.join("\n")
            )
        })
}

fn summary(review: &Value) -> String {
    let request = &review["request"];
    format!(
        "{} {} {} dryRun={} subResource={}",
        request["operation"],
        request["kind"]["kind"],
        request["name"],
        request["dryRun"],
        request["subResource"]
    )
}

const UID: &str = "00000000-0000-4000-8000-000000000000";
const TIME: &str = "2026-11-30T08:58:00Z";

/// The review with what varies per run replaced by fixed values: every `uid`, `resourceVersion`,
/// `generation` and `observedGeneration`, every RFC 3339 timestamp (creationTimestamp,
/// managedFields' times, conditions), and `userInfo.extra`'s values (the token's id).
pub(super) fn normalise(review: &Value) -> Value {
    let mut review = review.clone();
    normalise_values(&mut review);
    if let Some(extra) = review["request"]["userInfo"]["extra"].as_object_mut() {
        for values in extra.values_mut() {
            *values = json!(["normalised"]);
        }
    }
    review
}

fn normalise_values(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, value) in map.iter_mut() {
                match key.as_str() {
                    "uid" if value.is_string() => *value = json!(UID),
                    "resourceVersion" if value.is_string() => *value = json!("1"),
                    "generation" | "observedGeneration" if value.is_number() => *value = json!(1),
                    _ => normalise_values(value),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(normalise_values),
        Value::String(s) if s.parse::<jiff::Timestamp>().is_ok() => *s = TIME.to_owned(),
        _ => {}
    }
}

/// What driftgate decides by, by JSON pointer: the operation and what it is on, who sends it
/// (username, groups; uid and `extra`'s keys after [`normalise`]), the options (kind, field
/// manager, force, dry run) and the manager entries of the object's and old object's
/// managedFields.
pub(super) fn what_matters(review: &Value) -> BTreeMap<String, Value> {
    let request = &review["request"];
    let mut fields = BTreeMap::new();
    for pointer in [
        "/operation",
        "/kind",
        "/resource",
        "/requestKind",
        "/subResource",
        "/dryRun",
        "/namespace",
        "/name",
        "/userInfo/username",
        "/userInfo/groups",
        "/userInfo/uid",
        "/options",
    ] {
        let value = request.pointer(pointer).cloned().unwrap_or(Value::Null);
        fields.insert(format!("request{pointer}"), value);
    }
    let extra_keys: Vec<&String> = request["userInfo"]["extra"]
        .as_object()
        .map(|extra| extra.keys().collect())
        .unwrap_or_default();
    fields.insert("request/userInfo/extra (keys)".into(), json!(extra_keys));
    for object in ["object", "oldObject"] {
        let managers: Vec<Value> = request[object]["metadata"]["managedFields"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|m| json!([m["manager"], m["operation"], m["subresource"]]))
            .collect();
        fields.insert(
            format!("request/{object}/metadata/managedFields (manager, operation, subresource)"),
            json!(managers),
        );
    }
    fields
}

/// "FIELD: the fixture has A, Flux sent B" for each field that differs.
pub(super) fn differences(
    committed: &BTreeMap<String, Value>,
    captured: &BTreeMap<String, Value>,
) -> Vec<String> {
    committed
        .iter()
        .filter(|(field, want)| captured.get(*field) != Some(*want))
        .map(|(field, want)| {
            format!(
                "{field}: the fixture has {want}, Flux sent {}",
                captured.get(field).unwrap_or(&Value::Null)
            )
        })
        .collect()
}

/// Every example policy's `flux` controller accepts the identity Flux sent, and lists the field
/// manager it sent (its options' fieldManager) literally, not merely through a glob.
fn assert_example_policy_names(reviews: &[Value]) {
    let policies = PolicySet::load(&repo_path("policies/example.yaml")).expect("the example loads");
    for review in reviews {
        let user: UserInfo = serde_json::from_value(review["request"]["userInfo"].clone())
            .expect("userInfo is a UserInfo");
        let field_manager = review["request"]["options"]["fieldManager"].as_str();
        for policy in policies.policies() {
            let flux = policy
                .controllers
                .iter()
                .find(|c| c.name == "flux")
                .unwrap_or_else(|| panic!("policy {} has no flux controller", policy.name));
            assert!(
                flux.identity.matches(&user),
                "policy {}'s flux controller ({}) does not match what Flux sent: {user:?}",
                policy.name,
                flux.identity.describe()
            );
            if let Some(field_manager) = field_manager {
                assert_eq!(field_manager, FLUX_FIELD_MANAGER, "{}", summary(review));
                assert!(
                    flux.field_manager_patterns
                        .iter()
                        .any(|p| p == field_manager),
                    "policy {}'s flux controller lists field managers {:?}, not {field_manager:?} as Flux sends it",
                    policy.name,
                    flux.field_manager_patterns
                );
            }
        }
    }
}
