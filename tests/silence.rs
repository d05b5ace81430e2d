//! A stopped controller is seen (issue 14, section 2), through the webhook router with a clock the
//! test moves: the gauge of the GitOps controller's last write, and the sentence a refused person
//! reads once it has been silent longer than `--controller-silence-after`. The same on a real API
//! server: tests/e2e/silence.rs.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use arc_swap::ArcSwap;
use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use driftgate::decision::{Decision, DecisionInput, decide};
use driftgate::event_sink::EventSink;
use driftgate::files::read_review;
use driftgate::kube_state::{NamespaceCache, ParentLookup};
use driftgate::metrics::Metrics;
use driftgate::policy::PolicySet;
use driftgate::request::RequestFacts;
use driftgate::server::{AppState, admin_router, router};
use driftgate::silence::{ControllerKey, ControllerSilence};
use http_body_util::BodyExt;
use jiff::Timestamp;
use kube::core::DynamicObject;
use kube::core::admission::AdmissionRequest;
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

/// 2026-11-30T06:00:00Z, when Flux last writes in the tests: before controller-held.json's window
/// closes (10:00).
const FLUX_WROTE: i64 = 1_796_018_400;

const GAUGE: &str = "driftgate_controller_last_write_timestamp_seconds";

struct Harness {
    clock: Arc<AtomicI64>,
    state: Arc<AppState>,
    webhook: Router,
    admin: Router,
    _shutdown: CancellationToken,
}

/// The example policy, Flux expected to write at least every 30 minutes, the clock at
/// [`FLUX_WROTE`].
fn harness() -> Harness {
    harness_with(true)
}

/// [`harness`], with every caller the authenticated API server or not.
fn harness_with(caller_authenticated: bool) -> Harness {
    let metrics = Arc::new(Metrics::new());
    let shutdown = CancellationToken::new();
    let policies = PolicySet::load(Path::new("policies/example.yaml")).unwrap();
    let (events, _task) =
        EventSink::spawn(None, "test".into(), 16, metrics.clone(), shutdown.clone());
    let clock = Arc::new(AtomicI64::new(FLUX_WROTE));
    let now = clock.clone();
    let state = Arc::new(
        AppState::new(
            Arc::new(ArcSwap::from_pointee(policies)),
            NamespaceCache::disabled(),
            ParentLookup::new(None, Duration::from_secs(1), metrics.clone()),
            events,
            metrics,
        )
        .with_silence_after(Duration::from_secs(30 * 60))
        // The API server's reviews, authenticated by its client certificate: each one counts.
        // (Unauthenticated, a write counts only as read back from the API server.)
        .with_read_back(None, caller_authenticated)
        .with_clock(Arc::new(move || {
            Timestamp::from_second(now.load(Ordering::Relaxed)).unwrap()
        })),
    );
    Harness {
        clock,
        webhook: router(state.clone(), Duration::from_secs(4)),
        admin: admin_router(state.clone()),
        state,
        _shutdown: shutdown,
    }
}

impl Harness {
    fn set_clock(&self, seconds_after_flux: i64) {
        self.clock
            .store(FLUX_WROTE + seconds_after_flux, Ordering::Relaxed);
    }

    /// The review's response for a fixture.
    async fn review(&self, name: &str) -> Value {
        let body = std::fs::read(Path::new("tests/fixtures").join(name)).unwrap();
        let request = Request::post("/validate")
            .header("content-type", "application/json")
            .body(Body::from(body))
            .unwrap();
        let response = self.webhook.clone().oneshot(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{name}");
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        let answer: Value = serde_json::from_slice(&bytes).unwrap();
        answer["response"].clone()
    }

    /// The message of a refused fixture.
    async fn refusal(&self, name: &str) -> String {
        let response = self.review(name).await;
        assert_eq!(response["allowed"], false, "{name}: {response}");
        response["status"]["message"].as_str().unwrap().to_owned()
    }

    /// The gauge's samples: (labels, value).
    async fn gauge(&self) -> Vec<(String, f64)> {
        let response = self
            .admin
            .clone()
            .oneshot(Request::get("/metrics").body(Body::empty()).unwrap())
            .await
            .unwrap();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        String::from_utf8_lossy(&bytes)
            .lines()
            .filter(|line| line.starts_with(&format!("{GAUGE}{{")))
            .map(|line| {
                let (series, value) = line.rsplit_once(' ').unwrap();
                (
                    series.trim_start_matches(GAUGE).to_owned(),
                    value.parse().unwrap(),
                )
            })
            .collect()
    }
}

const SILENT: &str = "flux has not written in policy \"production\"'s namespaces for";

/// Without client authentication a review is a claim: Flux's reviews (anyone could POST them)
/// move nothing until the API server shows the write, and a dry run never does.
#[tokio::test]
async fn an_unauthenticated_review_alone_moves_no_controller_write() {
    let h = harness_with(false);
    assert_eq!(h.review("flux-real-dryrun.json").await["allowed"], true);
    assert_eq!(h.review("flux-ssa-update.json").await["allowed"], true);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        h.gauge().await,
        Vec::new(),
        "no write shown by an API server"
    );
}

#[tokio::test]
async fn the_gauge_is_absent_until_the_controller_writes_and_then_holds_its_last_write() {
    let h = harness();
    h.refusal("kubectl-edit.json").await;
    assert_eq!(h.gauge().await, Vec::new(), "nothing seen from flux yet");
    // A dry run counts: the real Flux dry-runs every object on every interval.
    assert_eq!(h.review("flux-real-dryrun.json").await["allowed"], true);
    assert_eq!(
        h.gauge().await,
        vec![(
            "{policy=\"production\",controller=\"flux\"}".to_owned(),
            FLUX_WROTE as f64
        )]
    );
    h.set_clock(90);
    h.review("flux-ssa-update.json").await;
    assert_eq!(h.gauge().await[0].1, (FLUX_WROTE + 90) as f64);
}

#[tokio::test]
async fn a_refusal_says_nothing_before_the_first_write_nor_within_the_threshold() {
    let h = harness();
    h.set_clock(6 * 3600);
    let message = h.refusal("kubectl-edit.json").await;
    assert!(!message.contains("has not written"), "{message}");
    h.review("flux-ssa-dryrun.json").await;
    h.set_clock(6 * 3600 + 30 * 60);
    let message = h.refusal("kubectl-edit.json").await;
    assert!(!message.contains("has not written"), "{message}");
}

#[tokio::test]
async fn a_refusal_after_the_threshold_says_the_controller_may_be_down() {
    let h = harness();
    h.review("flux-ssa-dryrun.json").await;
    h.set_clock(3 * 3600 + 12 * 60 + 5);
    let message = h.refusal("kubectl-edit.json").await;
    assert!(
        message.ends_with(&format!(
            "{SILENT} 3h 12m (since 2026-11-30 06:00 UTC); it may be down, and then a change in Git does not reach the cluster until it is back."
        )),
        "{message}"
    );
    // Still the whole refusal: who, what, policy, rule and the next step.
    for part in [
        "bob may not update Deployment prod-payments/api",
        "(policy \"production\", rule NotPermitted)",
        "Change it in Git, or, in an emergency, open a break-glass window",
    ] {
        assert!(message.contains(part), "{message} should say {part:?}");
    }
    let spoofed = h.refusal("spoofed-field-manager.json").await;
    assert!(spoofed.contains(SILENT), "{spoofed}");
}

#[tokio::test]
async fn a_controller_held_off_by_a_window_is_not_silent() {
    let h = harness();
    h.review("flux-ssa-dryrun.json").await;
    h.set_clock(3 * 3600);
    // The fixture's window holds Flux: refused, but Flux is running, and its refusal is no
    // place to tell it about itself.
    let held = h.refusal("controller-held.json").await;
    assert!(!held.contains("has not written"), "{held}");
    assert_eq!(h.gauge().await[0].1, (FLUX_WROTE + 3 * 3600) as f64);
    let message = h.refusal("kubectl-edit.json").await;
    assert!(!message.contains("has not written"), "{message}");
}

#[tokio::test]
async fn kubernetes_own_controllers_are_not_tracked() {
    let h = harness();
    assert_eq!(
        h.review("namespace-controller-delete.json").await["allowed"],
        true
    );
    assert_eq!(h.gauge().await, Vec::new());
}

/// Another replica's write, or one from before this replica started, read from the durable
/// records: the gauge shows it and refusals say Flux may be down, though this replica reviewed
/// nothing of Flux; a write it then sees itself moves the gauge on, and an older record does not
/// move it back.
#[tokio::test]
async fn a_recorded_write_is_in_the_gauge_and_the_refusal_without_a_review() {
    let h = harness();
    let flux = ControllerKey {
        policy: "production".into(),
        controller: "flux".into(),
    };
    let policies = PolicySet::load(Path::new("policies/example.yaml")).unwrap();
    let recorded = Timestamp::from_second(FLUX_WROTE).unwrap();
    h.state
        .effects
        .silence
        .merge_recorded(&policies, vec![(flux.clone(), recorded)]);
    assert_eq!(h.gauge().await[0].1, FLUX_WROTE as f64);
    h.set_clock(3 * 3600 + 12 * 60 + 5);
    let message = h.refusal("kubectl-edit.json").await;
    assert!(
        message.contains(&format!("{SILENT} 3h 12m (since 2026-11-30 06:00 UTC)")),
        "{message}"
    );
    h.review("flux-ssa-dryrun.json").await;
    let seen = (FLUX_WROTE + 3 * 3600 + 12 * 60 + 5) as f64;
    assert_eq!(h.gauge().await[0].1, seen);
    h.state
        .effects
        .silence
        .merge_recorded(&policies, vec![(flux.clone(), recorded)]);
    assert_eq!(
        h.gauge().await[0].1,
        seen,
        "an older record moves nothing back"
    );
    // What this replica saw and the record does not hold is what it records next.
    let unrecorded = h.state.effects.silence.snapshot().unrecorded();
    assert_eq!(
        unrecorded,
        vec![(flux, Timestamp::from_second(seen as i64).unwrap())]
    );
}

/// `request` decided by the example policy at `seconds_after_flux`, with `silence`.
fn decide_at(
    request: &AdmissionRequest<DynamicObject>,
    silence: &ControllerSilence,
    seconds_after_flux: i64,
) -> Decision {
    let policies = PolicySet::load(Path::new("policies/example.yaml")).unwrap();
    decide(
        &policies,
        &DecisionInput {
            request: &RequestFacts::new(request),
            resource: None,
            namespace: None,
            parent: None,
            recent_deletes: None,
            now: Timestamp::from_second(FLUX_WROTE + seconds_after_flux).unwrap(),
            silence: Some(silence),
        },
    )
}

fn fixture(name: &str) -> AdmissionRequest<DynamicObject> {
    read_review(&Path::new("tests/fixtures").join(name)).unwrap()
}

#[test]
fn the_sentence_is_in_the_message_only_never_in_the_event_nor_an_audit_warning() {
    let policies = PolicySet::load(Path::new("policies/example.yaml")).unwrap();
    let mut silence = ControllerSilence::new(Duration::from_secs(30 * 60));
    // Flux's dry run in production's prod-payments, and the same in staging's staging-web.
    let production = fixture("flux-ssa-dryrun.json");
    let mut staging = production.clone();
    staging.namespace = Some("staging-web".into());
    for object in [&mut staging.object, &mut staging.old_object]
        .into_iter()
        .flatten()
    {
        object.metadata.namespace = Some("staging-web".into());
    }
    for request in [&production, &staging] {
        let flux = decide_at(request, &silence, 0);
        silence.observe(
            &policies,
            &flux,
            Timestamp::from_second(FLUX_WROTE).unwrap(),
        );
    }
    assert!(silence.last_write("staging", "flux").is_some());

    let refused = decide_at(&fixture("kubectl-edit.json"), &silence, 4 * 3600);
    assert!(refused.message.contains(SILENT), "{}", refused.message);
    let verdict = &refused.record.verdicts[0];
    let event = verdict
        .refusal
        .as_ref()
        .unwrap()
        .sentence(&verdict.policy, verdict.rule);
    assert!(!event.contains("has not written"), "{event}");
    // Staging is Audit: admitted, its warning as short as ever.
    let audit = decide_at(&fixture("audit-staging-edit.json"), &silence, 4 * 3600);
    assert!(audit.allowed);
    assert!(!audit.warnings.is_empty());
    assert!(
        audit
            .warnings
            .iter()
            .all(|w| !w.contains("has not written")),
        "{:?}",
        audit.warnings
    );
}
