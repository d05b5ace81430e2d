//! The webhook and admin routers driven with `tower::ServiceExt::oneshot` on the fixtures: no TLS,
//! no cluster. The TLS listener and the process around it are tested in `serve.rs`.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use driftgate::events::EventSink;
use driftgate::kube_state::{NamespaceCache, ParentLookup};
use driftgate::metrics::Metrics;
use driftgate::policy::PolicySet;
use driftgate::server::reload::reload_now;
use driftgate::server::{AppState, MAX_BODY_BYTES, admin_router, router};
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
        metrics.contains("driftgate_admission_duration_seconds_count 11"),
        "{metrics}"
    );
    // Alice's edit under the window was seen: one window is known open.
    assert!(
        metrics.contains("driftgate_break_glass_windows_open 1"),
        "{metrics}"
    );
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
async fn bodies_up_to_8_mib_are_read_and_larger_ones_refused_with_413() {
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
    assert!(body.contains("2 policies"), "{body}");
    let (status, body) = get(&h.admin, "/metrics").await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains("driftgate_build_info"), "{body}");
    // Once shutdown starts, readiness fails so that the Service stops sending new reviews.
    h.state
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
    let errors = reload_now(&dir, &h.state.policies, &h.state.metrics).unwrap_err();
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
    assert_eq!(get(&h.admin, "/readyz").await.0, StatusCode::OK);
    let (_, metrics) = get(&h.admin, "/metrics").await;
    assert!(
        metrics.contains("driftgate_policy_reloads_total{result=\"failure\"} 1"),
        "{metrics}"
    );

    // A valid edit that stops guarding prod-payments takes effect at once.
    let relaxed = std::fs::read_to_string("policies/example.yaml")
        .unwrap()
        .replace("\"prod-*\", ", "");
    std::fs::write(&policy, relaxed).unwrap();
    assert_eq!(
        reload_now(&dir, &h.state.policies, &h.state.metrics).unwrap(),
        2
    );
    let answer: Value = serde_json::from_slice(&post(&h.webhook, edit).await.1).unwrap();
    assert_eq!(answer["response"]["allowed"], true);
    assert_eq!(answer["response"]["auditAnnotations"]["rule"], "OutOfScope");
    std::fs::remove_dir_all(&dir).unwrap();
}
