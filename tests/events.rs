//! Events for decisions: which Events the fixtures' decisions call for (pure), and what the
//! publisher sends to a (mocked) API server. A later real-cluster suite asserts the same Events
//! against a real kube-apiserver; the mock here pins down the requests kube-runtime's Recorder
//! makes and what the publisher does when they fail.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::captured_log::Captured;
use common::*;
use driftgate::decision::{
    AUDIT_DECISION, AUDIT_POLICY, AUDIT_RULE, Decision, DecisionInput, RefusalWords, Rule, decide,
};
use driftgate::event_sink::{EventSink, recorder_event};
use driftgate::events::{EventReason, EventType, MAX_NOTE_BYTES, PlannedEvent, planned_events};
use driftgate::files::read_object;
use driftgate::metrics::{Metrics, ReasonLabels};
use driftgate::policy::PolicySet;
use driftgate::request::RequestFacts;
use driftgate::review::parse_review;
use hyper::Method;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::core::DynamicObject;
use kube::core::admission::AdmissionRequest;
use serde_json::json;
use tokio_util::sync::CancellationToken;

const API_UID: &str = "3b9d6c2e-8f41-4a7d-b0e5-c71f2a9d8e36";
/// What the example policy's refusals of a write to prod-payments/api say to do next.
const API_NEXT: &str = "Change it in Git, or, in an emergency, open a break-glass window (group sre-oncall may): \
     driftgate break-glass open deployment/api -n prod-payments --for 1h --reason \"INC-…: what and why\" \
     (policy owner: team-platform (#platform-oncall)).";
const POD: &str = "driftgate-6f7c9d8b4-x2k9p";
const EVENTS_PATH: &str = "/apis/events.k8s.io/v1/namespaces/prod-payments/events";
const LABEL: &str = "driftgate.dev/break-glass";
const REASON: &str = "driftgate.dev/break-glass-reason";

fn api_deployment() -> ObjectReference {
    ObjectReference {
        api_version: Some("apps/v1".into()),
        kind: Some("Deployment".into()),
        namespace: Some("prod-payments".into()),
        name: Some("api".into()),
        uid: Some(API_UID.into()),
        ..ObjectReference::default()
    }
}

/// The one Event a fixture's decision calls for.
fn only_event(request: &AdmissionRequest<DynamicObject>, decision: &Decision) -> PlannedEvent {
    let mut events = planned_events(&RequestFacts::new(request), decision);
    assert_eq!(events.len(), 1, "expected one Event, got {events:#?}");
    events.remove(0)
}

fn assert_bounded(event: &PlannedEvent) {
    assert!(
        event.note.len() <= MAX_NOTE_BYTES,
        "note of {} bytes",
        event.note.len()
    );
}

// ---- Which Events a decision calls for ----

#[test]
fn kubectl_edit_is_a_write_denied_warning() {
    let (request, decision) = decided("kubectl-edit.json");
    assert!(!decision.allowed);
    let event = only_event(&request, &decision);
    assert_eq!(
        event,
        PlannedEvent {
            reason: EventReason::WriteDenied,
            type_: EventType::Warning,
            action: "Deny",
            note: format!(
                "bob may not update Deployment prod-payments/api: only its controllers (flux, kubernetes) write here \
                 (policy \"production\", rule NotPermitted). {API_NEXT}"
            ),
            regarding: api_deployment(),
        }
    );
}

#[test]
fn write_denied_notes_are_stable_so_repeats_form_a_series() {
    // The Recorder aggregates identical Events into a series; a note that carried the time, the
    // request uid or anything else that changes between retries would start a new Event each time.
    let policies = policies();
    for fixture in [
        "kubectl-edit.json",
        "kubectl-delete.json",
        "spoofed-field-manager.json",
        "break-glass-open-too-long.json",
        "break-glass-open-by-bob.json",
    ] {
        let mut request = review(fixture);
        let early = decide_with(&policies, &request, None, "2026-11-30T09:00:00Z");
        request.uid = "another-request-uid".into();
        let late = decide_with(&policies, &request, None, "2026-11-30T09:47:13Z");
        let (early_events, late_events) = (
            planned_events(&RequestFacts::new(&request), &early),
            planned_events(&RequestFacts::new(&request), &late),
        );
        assert_eq!(early_events.len(), 1, "{fixture}: {early_events:#?}");
        assert_eq!(early_events, late_events, "{fixture}");
        assert_eq!(
            early_events[0].reason,
            EventReason::WriteDenied,
            "{fixture}"
        );
        assert!(!early_events[0].note.contains("another-request-uid"));
    }
    // The admission message for a too-long window names the latest expiry allowed from now, so
    // it differs between the two; the note must not.
    let request = review("break-glass-open-too-long.json");
    let early = decide_with(&policies, &request, None, "2026-11-30T09:00:00Z");
    let late = decide_with(&policies, &request, None, "2026-11-30T09:47:13Z");
    assert_ne!(early.message, late.message);
    assert_eq!(
        planned_events(&RequestFacts::new(&request), &early)[0].note,
        "alice may not change the break-glass window on Deployment prod-payments/api: the expiry 20261201T0900Z \
         (2026-12-01 09:00 UTC) is more than maxDuration 4h from now (policy \"production\", rule BreakGlassRefused) \
         (policy owner: team-platform (#platform-oncall))."
    );
    assert!(
        early
            .message
            .contains("the latest allowed is 2026-11-30 13:01 UTC"),
        "{}",
        early.message
    );
}

#[test]
fn other_denials_are_write_denied_with_their_rule() {
    for (fixture, expected) in [
        (
            "kubectl-delete.json",
            format!(
                "bob may not delete Deployment prod-payments/api: only its controllers (flux, kubernetes) write here \
                 (policy \"production\", rule NotPermitted). {API_NEXT}"
            ),
        ),
        (
            "spoofed-field-manager.json",
            "bob may not update Deployment prod-payments/api with field manager \"kustomize-controller\": \
             it belongs to controller flux (policy \"production\", rule FieldManagerSpoofing). Writing as the \
             controller would hand it ownership of your change and hide the drift from it; use your own field \
             manager, and change the object in Git (policy owner: team-platform (#platform-oncall))."
                .to_owned(),
        ),
        (
            "break-glass-use-far-future.json",
            "alice may not update Deployment prod-payments/api: its break-glass label 20271130T0900Z expires at \
             2027-11-30 09:00 UTC, more than the policy's maxDuration of 4h from now, so it cannot have been opened \
             through driftgate (policy \"production\", rule WindowTooLong). Close it and open a new window with \
             driftgate break-glass open deployment/api -n prod-payments --for 1h --reason \"INC-…: what and why\" \
             (policy owner: team-platform (#platform-oncall))."
                .to_owned(),
        ),
    ] {
        let (request, decision) = decided(fixture);
        let event = only_event(&request, &decision);
        assert_eq!(event.reason, EventReason::WriteDenied, "{fixture}");
        assert_eq!(event.type_, EventType::Warning);
        assert_eq!(event.action, "Deny");
        assert_eq!(event.note, expected, "{fixture}");
        // The Event says what the person refused read.
        assert_eq!(event.note, decision.message, "{fixture}");
        // A DELETE carries only oldObject; the uid comes from it.
        assert_eq!(event.regarding, api_deployment(), "{fixture}");
    }
}

#[test]
fn an_expired_window_is_write_denied_naming_the_window() {
    let request = review("break-glass-use-edit.json");
    let decision = decide_with(&policies(), &request, None, "2026-11-30T10:30:00Z");
    let event = only_event(&request, &decision);
    assert_eq!(event.reason, EventReason::WriteDenied);
    assert_eq!(
        event.note,
        "alice may not update Deployment prod-payments/api: the break-glass window on the object \
         (until 2026-11-30 10:00 UTC, reason \"INC-4711: api pods OOM, raising memory limit\") expired \
         (policy \"production\", rule WindowExpired). Change it in Git, or open a new window: \
         driftgate break-glass open deployment/api -n prod-payments --for 1h --reason \"INC-…: what and why\" \
         (policy owner: team-platform (#platform-oncall))."
    );
}

#[test]
fn opening_a_window_is_a_normal_event_with_who_expiry_and_reason() {
    let (request, decision) = decided("break-glass-open.json");
    assert!(decision.allowed);
    let event = only_event(&request, &decision);
    assert_eq!(
        event,
        PlannedEvent {
            reason: EventReason::BreakGlassOpened,
            type_: EventType::Normal,
            action: "Open",
            note: "alice opened a break-glass window on Deployment prod-payments/api: until 2026-11-30 10:00 UTC, \
                   label 20261130T1000Z, reason \"INC-4711: api pods OOM, raising memory limit\". \
                   Every change made in it must be backported to Git."
                .into(),
            regarding: api_deployment(),
        }
    );
}

#[test]
fn extending_and_closing_a_window_are_normal_events() {
    let (request, decision) = decided("break-glass-extend.json");
    let event = only_event(&request, &decision);
    assert_eq!(
        (event.reason, event.type_, event.action),
        (EventReason::BreakGlassExtended, EventType::Normal, "Extend")
    );
    assert_eq!(
        event.note,
        "alice extended the break-glass window on Deployment prod-payments/api: until 2026-11-30 12:00 UTC, \
         label 20261130T1200Z, reason \"INC-4711: api pods OOM, raising memory limit\". \
         Every change made in it must be backported to Git."
    );

    let (request, decision) = decided("break-glass-close.json");
    let event = only_event(&request, &decision);
    assert_eq!(
        (event.reason, event.type_, event.action),
        (EventReason::BreakGlassClosed, EventType::Normal, "Close")
    );
    assert_eq!(
        event.note,
        "alice closed the break-glass window on Deployment prod-payments/api (until 2026-11-30 10:00 UTC, \
         label 20261130T1000Z, reason \"INC-4711: api pods OOM, raising memory limit\"); \
         the GitOps controller reconciles it again."
    );
    assert_eq!(event.regarding, api_deployment());
}

#[test]
fn a_change_under_a_window_is_a_warning_to_backport_it() {
    let (request, decision) = decided("break-glass-use-edit.json");
    assert!(decision.allowed);
    let event = only_event(&request, &decision);
    assert_eq!(
        event,
        PlannedEvent {
            reason: EventReason::BreakGlassChange,
            type_: EventType::Warning,
            action: "Change",
            note: "alice changed Deployment prod-payments/api under the break-glass window on the object \
                   (until 2026-11-30 10:00 UTC, label 20261130T1000Z, reason \"INC-4711: api pods OOM, raising memory limit\"): \
                   spec.template.spec.containers[0].resources.limits.memory. This is an emergency change: \
                   backport it to Git before the window closes, or the controller will revert it."
                .into(),
            regarding: api_deployment(),
        }
    );
}

#[test]
fn a_scale_under_a_window_regards_the_parent_deployment() {
    let request = review("break-glass-use-scale.json");
    let parent = parent("api-with-window.yaml");
    let decision = decide_with(&policies(), &request, Some(&parent), NOW);
    assert!(decision.allowed);
    let event = only_event(&request, &decision);
    assert_eq!(event.reason, EventReason::BreakGlassChange);
    // The Deployment, not the autoscaling/v1 Scale the request carries.
    assert_eq!(event.regarding, api_deployment());
    assert_eq!(
        event.note,
        "alice changed Deployment prod-payments/api (scale) under the break-glass window on the object \
         (until 2026-11-30 10:00 UTC, label 20261130T1000Z, reason \"INC-4711: api pods OOM, raising memory limit\"): \
         spec.replicas. This is an emergency change: backport it to Git before the window closes, or the \
         controller will revert it."
    );
}

#[test]
fn a_change_under_a_namespace_window_says_so() {
    let request = review("namespace-window-configmap-edit.json");
    let namespace =
        read_object(&path("tests/fixtures/namespaces/prod-orders-window.yaml")).unwrap();
    let decision = decide(
        &policies(),
        &DecisionInput {
            request: &RequestFacts::new(&request),
            resource: None,
            namespace: Some(&namespace.metadata),
            parent: None,
            recent_deletes: None,
            now: NOW.parse().unwrap(),
            silence: None,
        },
    );
    let event = only_event(&request, &decision);
    assert_eq!(event.reason, EventReason::BreakGlassChange);
    assert!(
        event.note.starts_with(
            "alice changed ConfigMap prod-orders/api-config under the break-glass window on the namespace \
             (until 2026-11-30 10:00 UTC, label 20261130T1000Z, reason \"INC-4720: orders capture backlog"
        ),
        "{}",
        event.note
    );
    assert_eq!(event.regarding.api_version.as_deref(), Some("v1"));
    assert_eq!(event.regarding.kind.as_deref(), Some("ConfigMap"));
    assert_eq!(event.regarding.name.as_deref(), Some("api-config"));
}

#[test]
fn opening_a_namespace_wide_window_regards_the_cluster_scoped_namespace() {
    let old = serde_json::to_value(
        read_object(&path("tests/fixtures/namespaces/prod-orders.yaml")).unwrap(),
    )
    .unwrap();
    let mut new = old.clone();
    new["metadata"]["labels"][LABEL] = json!("20261130T1100Z");
    new["metadata"]["annotations"][REASON] = json!("INC-4720: orders capture backlog");
    // As kube-apiserver sends it: for a Namespace, the request's namespace is its own name.
    let review = json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "5d1c7a0e-0b8e-4d5e-9a59-2f0c3c9f6a11",
            "kind": {"group": "", "version": "v1", "kind": "Namespace"},
            "resource": {"group": "", "version": "v1", "resource": "namespaces"},
            "name": "prod-orders", "namespace": "prod-orders", "operation": "UPDATE",
            "userInfo": {"username": "alice", "groups": ["sre-oncall", "system:authenticated"]},
            "object": new, "oldObject": old, "dryRun": false,
            "options": {"kind": "UpdateOptions", "apiVersion": "meta.k8s.io/v1", "fieldManager": "kubectl-label"}
        }
    });
    let request = parse_review(&serde_json::to_vec(&review).unwrap()).unwrap();
    let decision = decide_with(&policies(), &request, None, NOW);
    assert!(decision.allowed, "{}", decision.message);
    let event = only_event(&request, &decision);
    assert_eq!(event.reason, EventReason::BreakGlassOpened);
    assert_eq!(
        event.note,
        "alice opened a break-glass window on Namespace prod-orders: until 2026-11-30 11:00 UTC, \
         label 20261130T1100Z, reason \"INC-4720: orders capture backlog\". \
         Every change made in it must be backported to Git."
    );
    assert_eq!(
        event.regarding,
        ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Namespace".into()),
            namespace: None,
            name: Some("prod-orders".into()),
            uid: old["metadata"]["uid"].as_str().map(str::to_owned),
            ..ObjectReference::default()
        }
    );
}

#[test]
fn a_held_controller_is_a_warning_naming_controller_and_window() {
    let (request, decision) = decided("controller-held.json");
    let event = only_event(&request, &decision);
    assert_eq!(
        event,
        PlannedEvent {
            reason: EventReason::ControllerHeld,
            type_: EventType::Warning,
            action: "Hold",
            note: "Controller flux (system:serviceaccount:flux-system:kustomize-controller) may not update \
                   Deployment prod-payments/api while the break-glass window on the object (until 2026-11-30 10:00 UTC, \
                   reason \"INC-4712: 1.42.0 leaks DB connections under load, rolling forward \
                   to hotfix image\") holds it (policy \"production\", rule ControllerHeld). Backport the emergency \
                   change to Git, then close the window (remove the label driftgate.dev/break-glass) so the \
                   controller can reconcile again."
                .into(),
            regarding: api_deployment(),
        }
    );
}

#[test]
fn an_audit_policy_reports_what_it_would_deny() {
    let (request, decision) = decided("audit-staging-edit.json");
    assert!(decision.allowed);
    let event = only_event(&request, &decision);
    assert_eq!(
        event,
        PlannedEvent {
            reason: EventReason::WouldDeny,
            type_: EventType::Warning,
            action: "Audit",
            note: "bob may not update Deployment staging-web/web once policy \"staging\" is enforced: only its \
                   controllers (flux, kubernetes) write here (rule NotPermitted). Change it in Git, or, in an emergency, \
                   open a break-glass window (groups sre-oncall, staging-deployers may): driftgate break-glass open \
                   deployment/web -n staging-web --for 1h --reason \"INC-…: what and why\" (policy owner: team-platform \
                   (#platform-oncall)). Admitted because the policy is in Audit mode."
                .into(),
            regarding: ObjectReference {
                api_version: Some("apps/v1".into()),
                kind: Some("Deployment".into()),
                namespace: Some("staging-web".into()),
                name: Some("web".into()),
                uid: Some("e1c4a7d9-2f6b-4e83-9a05-b8d3f1c6e742".into()),
                ..ObjectReference::default()
            },
        }
    );
}

#[test]
fn admitted_routine_writes_and_dry_runs_have_no_events() {
    for fixture in [
        "flux-ssa-update.json",                // Controller
        "flux-ssa-dryrun.json",                // dry run (and Controller)
        "kubectl-create-dryrun.json",          // dry run of a write that is denied
        "hpa-scale.json",                      // Delegation
        "no-effective-change.json",            // NoEffectiveChange
        "out-of-scope-namespace.json",         // OutOfScope
        "deployment-controller-revision.json", // Delegation
    ] {
        let (request, decision) = decided(fixture);
        assert_eq!(
            planned_events(&RequestFacts::new(&request), &decision),
            Vec::new(),
            "{fixture} ({})",
            decision.record.rule
        );
    }
    // The dry-run create is denied: only its dry-run flag keeps it from an Event.
    let (request, decision) = decided("kubectl-create-dryrun.json");
    assert!(!decision.allowed && request.dry_run);
    // And the same edit that is a WriteDenied is nothing when it is a dry run.
    let mut request = review("kubectl-edit.json");
    request.dry_run = true;
    let decision = decide_with(&policies(), &request, None, NOW);
    assert!(!decision.allowed);
    assert_eq!(
        planned_events(&RequestFacts::new(&request), &decision),
        Vec::new()
    );
}

const TWO_POLICIES: &str = r#"
apiVersion: driftgate.dev/v1alpha1
kind: GatePolicy
metadata: {name: platform}
spec:
  namespaces: {include: ["prod-*"]}
  controllers: [{name: flux, usernames: ["system:serviceaccount:flux-system:kustomize-controller"]}]
  breakGlass: {maxDuration: 4h, openers: {groups: ["sre-oncall"]}}
---
apiVersion: driftgate.dev/v1alpha1
kind: GatePolicy
metadata: {name: payments}
spec:
  namespaces: {include: ["prod-payments"]}
  controllers: [{name: flux, usernames: ["system:serviceaccount:flux-system:kustomize-controller"]}]
  breakGlass: {maxDuration: 4h, openers: {groups: ["sre-oncall"]}}
"#;

const STRICT: &str = r#"
---
apiVersion: driftgate.dev/v1alpha1
kind: GatePolicy
metadata: {name: strict}
spec:
  namespaces: {include: ["prod-payments"]}
  controllers: [{name: flux, usernames: ["system:serviceaccount:flux-system:kustomize-controller"]}]
"#;

#[test]
fn identical_events_of_two_policies_are_published_once() {
    let policies = PolicySet::from_yaml("inline", TWO_POLICIES).unwrap();
    let request = review("break-glass-use-edit.json");
    let decision = decide_with(&policies, &request, None, NOW);
    assert_eq!(decision.record.verdicts.len(), 2);
    let event = only_event(&request, &decision);
    assert_eq!(event.reason, EventReason::BreakGlassChange);
}

#[test]
fn a_denied_write_reports_only_its_denials() {
    // "platform" admits alice's change under the window, "strict" (no break-glass) denies it: the
    // change did not happen, so there is nothing to backport.
    let policies = PolicySet::from_yaml("inline", &format!("{TWO_POLICIES}{STRICT}")).unwrap();
    let request = review("break-glass-use-edit.json");
    let decision = decide_with(&policies, &request, None, NOW);
    assert!(!decision.allowed);
    let event = only_event(&request, &decision);
    assert_eq!(event.reason, EventReason::WriteDenied);
    assert_eq!(
        event.note,
        "alice may not update Deployment prod-payments/api: only its controllers (flux) write here \
         (policy \"strict\", rule NotPermitted). Change it in Git."
    );
}

#[test]
fn notes_stay_within_1024_bytes_and_keep_their_advice() {
    // A reason annotation may be as long as anyone likes, and in any script.
    let mut review_json: serde_json::Value = serde_json::from_slice(
        &std::fs::read(path("tests/fixtures/break-glass-use-edit.json")).unwrap(),
    )
    .unwrap();
    let reason = format!("INC-9: {}", "überlast ".repeat(400));
    for object in ["object", "oldObject"] {
        review_json["request"][object]["metadata"]["annotations"]["driftgate.dev/break-glass-reason"] =
            json!(reason.clone());
    }
    let request = parse_review(&serde_json::to_vec(&review_json).unwrap()).unwrap();
    let decision = decide_with(&policies(), &request, None, NOW);
    let event = only_event(&request, &decision);
    assert_eq!(event.reason, EventReason::BreakGlassChange);
    assert_bounded(&event);
    assert!(event.note.contains("reason \"INC-9: überlast"));
    assert!(event.note.contains('…'));
    assert!(
        event.note.ends_with("or the controller will revert it."),
        "{}",
        event.note
    );
}

#[test]
fn every_fixture_plans_bounded_notes() {
    let dir = path("tests/fixtures");
    let policies = policies();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let request = driftgate::files::read_review(&path).unwrap();
        let decision = decide_with(&policies, &request, None, NOW);
        for event in planned_events(&RequestFacts::new(&request), &decision) {
            assert_bounded(&event);
            assert!(event.regarding.name.is_some() && event.regarding.kind.is_some());
        }
    }
}

// ---- The publisher, against a mocked API server ----

fn published(metrics: &Metrics, reason: &str) -> i64 {
    metrics
        .events_published
        .get_or_create(&ReasonLabels {
            reason: reason.into(),
        })
        .get() as i64
}

fn dropped(metrics: &Metrics, why: &str) -> i64 {
    metrics
        .events_dropped
        .get_or_create(&ReasonLabels { reason: why.into() })
        .get() as i64
}

struct Publisher {
    sink: EventSink,
    task: tokio::task::JoinHandle<()>,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
}

fn publisher(client: Option<kube::Client>, capacity: usize) -> Publisher {
    let metrics = Arc::new(Metrics::new());
    let shutdown = CancellationToken::new();
    let (sink, task) = EventSink::spawn(
        client,
        POD.into(),
        capacity,
        metrics.clone(),
        shutdown.clone(),
    );
    Publisher {
        sink,
        task,
        metrics,
        shutdown,
    }
}

impl Publisher {
    async fn stop(self) {
        self.shutdown.cancel();
        within_5s("stopping the publisher", self.task)
            .await
            .expect("the publisher task does not panic");
    }
}

#[tokio::test]
async fn the_recorder_posts_the_planned_event() {
    let (client, mut handle) = mock_client();
    let p = publisher(Some(client), 16);
    let (request, decision) = decided("kubectl-edit.json");
    p.sink.record(&RequestFacts::new(&request), &decision);

    let (http, send) = next_request(&mut handle).await;
    assert_eq!(http.method(), Method::POST);
    assert_eq!(http.uri().path(), EVENTS_PATH);
    let body = body_json(http).await;
    assert_eq!(body["apiVersion"], "events.k8s.io/v1");
    assert_eq!(body["kind"], "Event");
    assert_eq!(body["metadata"]["namespace"], "prod-payments");
    assert_eq!(body["reason"], "WriteDenied");
    assert_eq!(body["type"], "Warning");
    assert_eq!(body["action"], "Deny");
    assert_eq!(body["note"], decision.message);
    assert_eq!(
        body["regarding"],
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "prod-payments",
               "name": "api", "uid": API_UID})
    );
    assert_eq!(body["reportingController"], "driftgate.dev/webhook");
    assert_eq!(body["reportingInstance"], POD);
    assert!(body["eventTime"].is_string());
    assert!(body.get("series").is_none());
    respond(send, 201, &body);

    eventually("the Event is counted as published", || {
        published(&p.metrics, "WriteDenied") == 1
    })
    .await;
    assert_eq!(dropped(&p.metrics, "api_error"), 0);
    p.stop().await;
}

#[tokio::test]
async fn repeats_become_a_series_and_other_notes_do_not_join_it() {
    let (client, mut handle) = mock_client();
    let p = publisher(Some(client), 16);
    let (edit, edit_decision) = decided("kubectl-edit.json");

    p.sink.record(&RequestFacts::new(&edit), &edit_decision);
    let (http, send) = next_request(&mut handle).await;
    assert_eq!(http.method(), Method::POST);
    let first = body_json(http).await;
    let name = first["metadata"]["name"].as_str().unwrap().to_owned();
    respond(send, 201, &first);

    // bob retries: the same Event again, published as a PATCH of the first with a series count.
    p.sink.record(&RequestFacts::new(&edit), &edit_decision);
    let (http, send) = next_request(&mut handle).await;
    assert_eq!(http.method(), Method::PATCH);
    assert_eq!(http.uri().path(), format!("{EVENTS_PATH}/{name}"));
    let patch = body_json(http).await;
    assert_eq!(patch["series"]["count"], 2);
    assert_eq!(patch["note"], first["note"]);
    respond(send, 200, &patch);

    // bob then deletes it: same object, reason, action and type, but another note. The Recorder
    // alone would count it into the series above and show the edit's note; it must be its own Event.
    let (delete, delete_decision) = decided("kubectl-delete.json");
    p.sink.record(&RequestFacts::new(&delete), &delete_decision);
    let (http, send) = next_request(&mut handle).await;
    assert_eq!(http.method(), Method::POST);
    let other = body_json(http).await;
    assert_eq!(other["note"], delete_decision.message);
    assert!(other.get("series").is_none());
    respond(send, 201, &other);

    eventually("three publishes are counted", || {
        published(&p.metrics, "WriteDenied") == 3
    })
    .await;
    p.stop().await;
}

#[tokio::test]
async fn dry_runs_send_nothing() {
    let (client, mut handle) = mock_client();
    let p = publisher(Some(client), 16);
    for fixture in ["flux-ssa-dryrun.json", "kubectl-create-dryrun.json"] {
        let (request, decision) = decided(fixture);
        p.sink.record(&RequestFacts::new(&request), &decision);
    }
    let mut edit = review("kubectl-edit.json");
    edit.dry_run = true;
    let decision = decide_with(&policies(), &edit, None, NOW);
    p.sink.record(&RequestFacts::new(&edit), &decision);
    no_request(&mut handle, Duration::from_millis(200)).await;

    // The queue is in order: the first request is the first Event that is not a dry run.
    let (request, decision) = decided("break-glass-open.json");
    p.sink.record(&RequestFacts::new(&request), &decision);
    let (http, send) = next_request(&mut handle).await;
    let body = body_json(http).await;
    assert_eq!(body["reason"], "BreakGlassOpened");
    respond(send, 201, &body);
    eventually("the Event is published", || {
        published(&p.metrics, "BreakGlassOpened") == 1
    })
    .await;
    assert_eq!(dropped(&p.metrics, "queue_full"), 0);
    p.stop().await;
}

#[tokio::test]
async fn a_full_queue_drops_and_counts_without_blocking() {
    let (client, mut handle) = mock_client();
    let p = publisher(Some(client), 1);
    let (edit, edit_decision) = decided("kubectl-edit.json");
    let (delete, delete_decision) = decided("kubectl-delete.json");
    let (spoof, spoof_decision) = decided("spoofed-field-manager.json");

    // The first Event is taken off the queue and its POST waits for an answer...
    p.sink.record(&RequestFacts::new(&edit), &edit_decision);
    let (first, first_send) = next_request(&mut handle).await;
    // ...so the queue (capacity 1) holds the second, and the third has no room.
    p.sink.record(&RequestFacts::new(&delete), &delete_decision);
    p.sink.record(&RequestFacts::new(&spoof), &spoof_decision);
    assert_eq!(dropped(&p.metrics, "queue_full"), 1);

    respond(first_send, 201, &body_json(first).await);
    let (second, second_send) = next_request(&mut handle).await;
    let second = body_json(second).await;
    assert!(second["note"].as_str().unwrap().contains("may not delete"));
    respond(second_send, 201, &second);
    eventually("two Events are published", || {
        published(&p.metrics, "WriteDenied") == 2
    })
    .await;
    no_request(&mut handle, Duration::from_millis(100)).await;
    p.stop().await;
}

#[tokio::test]
async fn an_api_error_is_counted_and_the_publisher_carries_on() {
    let (client, mut handle) = mock_client();
    let p = publisher(Some(client), 16);
    let (edit, edit_decision) = decided("kubectl-edit.json");

    p.sink.record(&RequestFacts::new(&edit), &edit_decision);
    let (_, send) = next_request(&mut handle).await;
    respond(
        send,
        500,
        &status(500, "InternalError", "etcdserver: request timed out"),
    );
    eventually("the failure is counted", || {
        dropped(&p.metrics, "api_error") == 1
    })
    .await;
    assert_eq!(published(&p.metrics, "WriteDenied"), 0);

    // The next identical Event is created afresh: the failed one was never stored, so there is
    // no series to PATCH.
    p.sink.record(&RequestFacts::new(&edit), &edit_decision);
    let (http, send) = next_request(&mut handle).await;
    assert_eq!(http.method(), Method::POST);
    assert_eq!(http.uri().path(), EVENTS_PATH);
    respond(send, 201, &body_json(http).await);
    eventually("the next Event is published", || {
        published(&p.metrics, "WriteDenied") == 1
    })
    .await;
    p.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_hung_api_server_costs_one_timeout_per_event() {
    let (client, mut handle) = mock_client();
    let p = publisher(Some(client), 16);
    let (edit, edit_decision) = decided("kubectl-edit.json");
    p.sink.record(&RequestFacts::new(&edit), &edit_decision);
    // Never answered (but kept open, so the request hangs rather than fails).
    let (_hung, _never_answered) = next_request(&mut handle).await;
    eventually("the timeout is counted", || {
        dropped(&p.metrics, "api_error") == 1
    })
    .await;
    // The queue moves on.
    let (open, open_decision) = decided("break-glass-open.json");
    p.sink.record(&RequestFacts::new(&open), &open_decision);
    let (http, send) = next_request(&mut handle).await;
    let body = body_json(http).await;
    assert_eq!(body["reason"], "BreakGlassOpened");
    respond(send, 201, &body);
    eventually("the next Event is published", || {
        published(&p.metrics, "BreakGlassOpened") == 1
    })
    .await;
    p.stop().await;
}

#[tokio::test]
async fn shutdown_publishes_what_is_queued_then_counts_late_events() {
    let (client, mut handle) = mock_client();
    let p = publisher(Some(client), 16);
    let (edit, edit_decision) = decided("kubectl-edit.json");
    p.sink.record(&RequestFacts::new(&edit), &edit_decision);
    p.shutdown.cancel();
    // Whether the task saw the Event before the cancellation or drains it after, it is sent.
    let (http, send) = next_request(&mut handle).await;
    respond(send, 201, &body_json(http).await);
    within_5s("the publisher stops", p.task).await.unwrap();
    assert_eq!(published(&p.metrics, "WriteDenied"), 1);

    p.sink.record(&RequestFacts::new(&edit), &edit_decision);
    assert_eq!(dropped(&p.metrics, "shutdown"), 1);
}

#[tokio::test]
async fn without_a_client_events_are_logged_not_published() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .json()
        .with_writer(move || writer.clone())
        .finish();
    // The test runtime is single-threaded, so the publisher task logs on this thread.
    let _guard = tracing::subscriber::set_default(subscriber);

    let p = publisher(None, 16);
    let (request, decision) = decided("kubectl-edit.json");
    p.sink.record(&RequestFacts::new(&request), &decision);
    let metrics = p.metrics.clone();
    eventually("the Event is logged", || {
        captured.text().contains("WriteDenied")
    })
    .await;
    p.stop().await;

    let log = captured.text();
    let line: serde_json::Value = serde_json::from_str(
        log.lines()
            .find(|l| l.contains("WriteDenied"))
            .expect("a log line"),
    )
    .unwrap();
    let fields = &line["fields"];
    assert_eq!(line["level"], "INFO");
    assert_eq!(fields["reason"], "WriteDenied");
    assert_eq!(fields["action"], "Deny");
    assert_eq!(fields["regarding.kind"], "Deployment");
    assert_eq!(fields["regarding.name"], "api");
    assert_eq!(fields["regarding.uid"], API_UID);
    assert!(
        fields["note"]
            .as_str()
            .unwrap()
            .starts_with("bob may not update")
    );
    assert_eq!(published(&metrics, "WriteDenied"), 0);
}

// ---- The ledger's refusals ----

/// `decision`, refused by the ledger the one way it refuses: `Decision::refuse`.
fn refused_by_ledger(mut decision: Decision, rule: Rule, message: &str) -> Decision {
    decision.refuse("production", rule, message.to_owned());
    decision
}

/// A refusal names its rule everywhere: the response, the audit annotations, and the decision
/// record that the review log line and `driftgate_admission_reviews_total{rule}` are made of.
fn assert_refused_by(decision: &Decision, request: &AdmissionRequest<DynamicObject>, rule: Rule) {
    assert!(!decision.allowed);
    assert_eq!(decision.record.rule, rule);
    let annotation = |key: &str| decision.audit_annotations.get(key).map(String::as_str);
    assert_eq!(annotation(AUDIT_DECISION), Some("denied"));
    assert_eq!(annotation(AUDIT_RULE), Some(rule.as_str()));
    assert_eq!(annotation(AUDIT_POLICY), Some("production"));
    let verdict = &decision.record.verdicts[0];
    assert_eq!(
        (verdict.rule, verdict.allowed),
        (rule, false),
        "{verdict:#?}"
    );
    let response = decision.to_response(request);
    assert!(!response.allowed);
    assert_eq!(response.result.code, 403);
    assert_eq!(response.result.message, decision.message);
}

#[test]
fn a_refused_revert_is_a_revert_refused_warning_by_its_rule() {
    let (request, decision) = decided("flux-ssa-update.json");
    assert_eq!(
        (decision.allowed, decision.record.rule),
        (true, Rule::Controller)
    );
    let message = "Controller flux may not revert the emergency change recorded in BackportRequirement \
                   prod-payments/deployment-api-3b9d6c2e (policy \"production\", rule RevertRefused). \
                   Backport the change to Git, or resolve the record.";
    let decision = refused_by_ledger(decision, Rule::RevertRefused, message);
    assert_refused_by(&decision, &request, Rule::RevertRefused);
    let event = only_event(&request, &decision);
    assert_eq!(
        (event.reason, event.type_, event.action),
        (EventReason::RevertRefused, EventType::Warning, "Deny")
    );
    assert_eq!(recorder_event(&event).reason, "RevertRefused");
    // A refusal given as a message alone: its Event says that message.
    assert_eq!(event.note, message);
}

#[test]
fn an_unrecorded_break_glass_change_is_a_ledger_unavailable_warning_by_its_rule() {
    let (request, mut decision) = decided("break-glass-use-edit.json");
    assert_eq!(
        (decision.allowed, decision.record.rule),
        (true, Rule::BreakGlassWindow)
    );
    let words = RefusalWords {
        subject: "alice may not update Deployment prod-payments/api".into(),
        why: "driftgate could not record the break-glass change in its backport ledger, so it was not made".into(),
        next: "Retry in a moment; if it keeps failing, driftgate cannot reach the API server".into(),
        owner: String::new(),
    };
    let error = " (the API server did not answer within 2s)";
    decision.refuse_with("production", Rule::LedgerUnavailable, words, error);
    assert_refused_by(&decision, &request, Rule::LedgerUnavailable);
    assert!(decision.message.contains(error), "{}", decision.message);
    let event = only_event(&request, &decision);
    assert_eq!(
        event,
        PlannedEvent {
            reason: EventReason::LedgerUnavailable,
            type_: EventType::Warning,
            action: "Deny",
            // Without the error, which varies and would split a series of the same refusal.
            note: "alice may not update Deployment prod-payments/api: driftgate could not record the break-glass change \
                   in its backport ledger, so it was not made (policy \"production\", rule LedgerUnavailable). \
                   Retry in a moment; if it keeps failing, driftgate cannot reach the API server."
                .into(),
            regarding: api_deployment(),
        },
        "the change that was not made has no BreakGlassChange Event"
    );
    assert_eq!(event.note, decision.message.replace(error, ""));
}

#[test]
fn a_refused_dry_run_revert_publishes_nothing() {
    let (request, decision) = decided("flux-ssa-dryrun.json");
    let decision = refused_by_ledger(
        decision,
        Rule::RevertRefused,
        "Controller flux may not revert the emergency change (policy \"production\", rule RevertRefused).",
    );
    assert_refused_by(&decision, &request, Rule::RevertRefused);
    assert_eq!(
        planned_events(&RequestFacts::new(&request), &decision),
        Vec::new()
    );
}

// ---- An Event says what the refusal it reports says ----

/// Every rule, so that a new one must be placed in [`refusal_by`] below.
const ALL_RULES: [Rule; 36] = [
    Rule::OutOfScope,
    Rule::DeletionProtected,
    Rule::DeletionLimit,
    Rule::Suspended,
    Rule::SuspensionRefused,
    Rule::Resumed,
    Rule::SuspensionAgainstGit,
    Rule::FieldManagerSpoofing,
    Rule::Controller,
    Rule::ControllerHeld,
    Rule::Delegation,
    Rule::NoEffectiveChange,
    Rule::BreakGlassOpened,
    Rule::BreakGlassExtended,
    Rule::BreakGlassClosed,
    Rule::BreakGlassAmended,
    Rule::BreakGlassRefused,
    Rule::BreakGlassWindow,
    Rule::WindowExpired,
    Rule::WindowTooLong,
    Rule::NotPermitted,
    Rule::Unreadable,
    Rule::LedgerWriter,
    Rule::RecordResolved,
    Rule::LedgerMetadata,
    Rule::RecordDeletedWithNamespace,
    Rule::RecordForged,
    Rule::RecordErased,
    Rule::RecordTampered,
    Rule::ResolveRefused,
    Rule::LedgerCrdAdmin,
    Rule::LedgerCrdProtected,
    Rule::PolicyCompiled,
    Rule::PolicyRefused,
    Rule::RevertRefused,
    Rule::LedgerUnavailable,
];

/// A refusal by one rule, and the words its message and its Event must both say.
struct Refused {
    request: AdmissionRequest<DynamicObject>,
    decision: Decision,
    /// Who may write, or why the rule refuses.
    why: &'static str,
    /// What to do next.
    next: &'static str,
}

fn refused(
    request: AdmissionRequest<DynamicObject>,
    decision: Decision,
    why: &'static str,
    next: &'static str,
) -> Refused {
    Refused {
        request,
        decision,
        why,
        next,
    }
}

fn fixture_at(name: &str, now: &str, why: &'static str, next: &'static str) -> Refused {
    let request = review(name);
    let decision = decide_with(&policies(), &request, None, now);
    refused(request, decision, why, next)
}

/// `fixture`'s review with `edit` applied to its JSON.
fn edited_review(
    fixture: &str,
    edit: impl FnOnce(&mut serde_json::Value),
) -> AdmissionRequest<DynamicObject> {
    let mut review: serde_json::Value =
        serde_json::from_slice(&std::fs::read(path(&format!("tests/fixtures/{fixture}"))).unwrap())
            .unwrap();
    edit(&mut review["request"]);
    parse_review(&serde_json::to_vec(&review).unwrap()).unwrap()
}

/// Makes a captured review of bob's Application patch Argo CD's normalization from a stale copy:
/// by the application-controller without a field manager, both objects applied client-side with
/// Git's `automated` (the last-applied annotation, owned by the `argocd-controller` entry), the
/// new one without `syncPolicy`.
fn stale_normalization(request: &mut serde_json::Value) {
    request["userInfo"] = json!({
        "username": "system:serviceaccount:argocd:argocd-application-controller",
        "groups": ["system:serviceaccounts", "system:serviceaccounts:argocd", "system:authenticated"]});
    request["options"] = json!({"apiVersion": "meta.k8s.io/v1", "kind": "UpdateOptions"});
    request["object"] = request["oldObject"].clone();
    request["object"]["spec"]
        .as_object_mut()
        .unwrap()
        .remove("syncPolicy");
    for object in ["object", "oldObject"] {
        let mut git = request["oldObject"].clone();
        git["metadata"] = json!({"name": git["metadata"]["name"], "namespace": "argocd"});
        git.as_object_mut().unwrap().remove("status");
        let metadata = &mut request[object]["metadata"];
        metadata["annotations"] =
            json!({"kubectl.kubernetes.io/last-applied-configuration": git.to_string()});
        metadata["managedFields"] = json!([{
            "apiVersion": "argoproj.io/v1alpha1", "fieldsType": "FieldsV1",
            "fieldsV1": {"f:metadata": {"f:annotations": {".": {},
                "f:kubectl.kubernetes.io/last-applied-configuration": {}}}},
            "manager": "argocd-controller", "operation": "Update",
            "time": "2026-11-30T08:58:00Z"}]);
    }
}

/// Makes a captured review of a ConfigMap one of PersistentVolumeClaim prod-payments/data.
fn pvc_in_prod_payments(request: &mut serde_json::Value) {
    request["namespace"] = json!("prod-payments");
    request["name"] = json!("data");
    request["kind"] = json!({"group": "", "version": "v1", "kind": "PersistentVolumeClaim"});
    request["resource"] =
        json!({"group": "", "version": "v1", "resource": "persistentvolumeclaims"});
    request["requestKind"] = request["kind"].clone();
    request["requestResource"] = request["resource"].clone();
    let old = &mut request["oldObject"];
    old["kind"] = json!("PersistentVolumeClaim");
    old["metadata"]["name"] = json!("data");
    old["metadata"]["namespace"] = json!("prod-payments");
    old["spec"] =
        json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}});
    old.as_object_mut().unwrap().remove("data");
}

/// How to bring about a refusal by `rule`; None for a rule that admits. Exhaustive, so that a
/// new rule cannot go untested.
fn refusal_by(rule: Rule) -> Option<Refused> {
    Some(match rule {
        Rule::OutOfScope
        | Rule::Controller
        | Rule::Delegation
        | Rule::NoEffectiveChange
        | Rule::BreakGlassOpened
        | Rule::BreakGlassExtended
        | Rule::BreakGlassClosed
        | Rule::BreakGlassAmended
        | Rule::BreakGlassWindow
        | Rule::LedgerWriter
        | Rule::RecordResolved
        | Rule::LedgerMetadata
        | Rule::RecordDeletedWithNamespace
        | Rule::LedgerCrdAdmin
        | Rule::PolicyCompiled
        | Rule::Suspended
        | Rule::Resumed => return None,
        Rule::NotPermitted => fixture_at(
            "kubectl-edit.json",
            NOW,
            "only its controllers (flux, kubernetes) write here",
            "Change it in Git, or, in an emergency, open a break-glass window (group sre-oncall may): \
             driftgate break-glass open deployment/api -n prod-payments",
        ),
        // alice's `kubectl patch` of spec.suspend, as the real API server sent it (captured by
        // the e2e suspension scenario).
        Rule::SuspensionRefused => fixture_at(
            "flux-kustomization-suspend-by-alice.json",
            NOW,
            "it has no expiry: a suspension is a break-glass window, and needs the label driftgate.dev/break-glass",
            "Suspend it with driftgate suspend kustomization/suspend-e2e -n flux-system --for 1h --reason \"INC-…: what and why\" (group sre-oncall may), and resume it with driftgate resume kustomization/suspend-e2e -n flux-system",
        ),
        // Argo CD's normalization from a stale copy, made of bob's captured Application patch:
        // as the application-controller (no field manager), removing the `automated` that the
        // configuration it applied client-side declares.
        Rule::SuspensionAgainstGit => {
            let request = edited_review(
                "gitops-application-target-revision-by-bob.json",
                stale_normalization,
            );
            let decision = decide_with(&policies(), &request, None, NOW);
            refused(
                request,
                decision,
                "its write suspends it by spec.syncPolicy.automated, which the configuration it last applied from Git",
                "Nothing to do: the controller writes again from the object as stored",
            )
        }
        Rule::FieldManagerSpoofing => fixture_at(
            "spoofed-field-manager.json",
            NOW,
            "it belongs to controller flux",
            "use your own field manager, and change the object in Git",
        ),
        Rule::ControllerHeld => fixture_at(
            "controller-held.json",
            NOW,
            "while the break-glass window on the object (until 2026-11-30 10:00 UTC",
            "Backport the emergency change to Git, then close the window (remove the label driftgate.dev/break-glass)",
        ),
        Rule::BreakGlassRefused => fixture_at(
            "break-glass-open-by-bob.json",
            NOW,
            "only group sre-oncall may open, extend or amend a window",
            "only group sre-oncall may open",
        ),
        Rule::WindowExpired => fixture_at(
            "break-glass-use-edit.json",
            "2026-11-30T10:30:00Z",
            "reason \"INC-4711: api pods OOM, raising memory limit\") expired",
            "Change it in Git, or open a new window: driftgate break-glass open deployment/api -n prod-payments",
        ),
        Rule::WindowTooLong => fixture_at(
            "break-glass-use-far-future.json",
            NOW,
            "more than the policy's maxDuration of 4h from now",
            "Close it and open a new window with driftgate break-glass open deployment/api",
        ),
        Rule::DeletionProtected => {
            // Flux's prune, as the real one sends it, of a PersistentVolumeClaim.
            let request = edited_review("flux-real-prune.json", pvc_in_prod_payments);
            let decision = decide_with(&policies(), &request, None, NOW);
            refused(
                request,
                decision,
                "the policy protects every PersistentVolumeClaim from deletion by anyone, the GitOps controller included",
                "If it is meant, mark it first, in Git or with kubectl annotate persistentvolumeclaim/data -n prod-payments driftgate.dev/allow-deletion=true",
            )
        }
        Rule::DeletionLimit => {
            // Flux's prune of a ConfigMap, after 20 deletes in the last minute.
            let request = edited_review("flux-real-prune.json", |r| {
                r["namespace"] = json!("prod-payments");
                r["oldObject"]["metadata"]["namespace"] = json!("prod-payments");
            });
            let facts = RequestFacts::new(&request);
            let now: jiff::Timestamp = NOW.parse().unwrap();
            let recent = [(
                "production".to_owned(),
                vec![now - jiff::SignedDuration::from_secs(30); 20],
            )]
            .into();
            let input = DecisionInput {
                request: &facts,
                resource: None,
                namespace: None,
                parent: None,
                recent_deletes: Some(&recent),
                silence: None,
                now,
            };
            let decision = driftgate::decision::decide(&policies(), &input);
            refused(
                request,
                decision,
                "it deleted 20 objects in prod-payments within 1m, the policy's limit",
                "check the last revision",
            )
        }
        Rule::Unreadable => {
            let request = review("kubectl-edit.json");
            let facts = RequestFacts::new(&request);
            let input = DecisionInput {
                request: &facts,
                resource: None,
                namespace: None,
                parent: None,
                recent_deletes: None,
                now: NOW.parse().unwrap(),
                silence: None,
            };
            let decision = driftgate::decision::unreadable(
                &policies(),
                &input,
                "expected `,` or `}` at line 1",
            );
            refused(
                request,
                decision,
                "driftgate could not read the object in the request",
                "Send the object as valid Kubernetes JSON",
            )
        }
        Rule::RecordForged => {
            let request = edited_review("record-delete-by-namespace-admin.json", |r| {
                r["operation"] = json!("CREATE");
                r["object"] = r["oldObject"].take();
            });
            let decision = decide_with(&policies(), &request, None, NOW);
            refused(
                request,
                decision,
                "backport records are written only by driftgate itself",
                "open a break-glass window with driftgate break-glass open",
            )
        }
        Rule::RecordErased => fixture_at(
            "record-delete-by-namespace-admin.json",
            NOW,
            "a backport record is deleted only by driftgate itself",
            "Backport the change to Git, or have an opener of the policy resolve it: \
             driftgate backlog resolve deployment-api-4f1c2a9b7e -n prod-payments",
        ),
        Rule::RecordTampered => fixture_at(
            "record-status-backported-by-bob.json",
            NOW,
            "it changes the record's status (phase AwaitingBackport to Backported)",
            "an opener of the policy runs driftgate backlog resolve deployment-api-4f1c2a9b7e -n prod-payments",
        ),
        Rule::ResolveRefused => fixture_at(
            "record-resolve-by-bob.json",
            NOW,
            "only an opener of the policy (group sre-oncall) may resolve its records",
            "An opener of the policy resolves a record with driftgate backlog resolve deployment-api-4f1c2a9b7e",
        ),
        Rule::LedgerCrdProtected => {
            let request = edited_review("kubectl-delete.json", |r| {
                r["kind"] = json!({"group": "apiextensions.k8s.io", "version": "v1", "kind": "CustomResourceDefinition"});
                r["resource"] = json!({"group": "apiextensions.k8s.io", "version": "v1", "resource": "customresourcedefinitions"});
                r["name"] = json!("backportrequirements.driftgate.dev");
                r["namespace"] = json!("");
                r["oldObject"] = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                    "metadata": {"name": "backportrequirements.driftgate.dev", "uid": "c-1"}});
            });
            let decision = decide_with(&policies(), &request, None, NOW);
            refused(
                request,
                decision,
                "deleting it deletes every BackportRequirement in the cluster",
                "ask one of them",
            )
        }
        Rule::PolicyRefused => {
            let request = edited_review("kubectl-edit.json", |r| {
                r["kind"] =
                    json!({"group": "driftgate.dev", "version": "v1alpha1", "kind": "GatePolicy"});
                r["resource"] = json!({"group": "driftgate.dev", "version": "v1alpha1", "resource": "gatepolicies"});
                r["operation"] = json!("CREATE");
                r["name"] = json!("broken");
                r["object"] = json!({"apiVersion": "driftgate.dev/v1alpha1", "kind": "GatePolicy",
                    "metadata": {"name": "broken", "namespace": "prod-payments"}, "spec": {"mode": "Sometimes"}});
                r["oldObject"] = json!(null);
            });
            let decision = decide_with(&policies(), &request, None, NOW);
            refused(request, decision, "may not write GatePolicy broken", "Fix")
        }
        Rule::RevertRefused => {
            let (request, decision) = decided("flux-ssa-update.json");
            let decision = refused_by_ledger(
                decision,
                Rule::RevertRefused,
                "Controller flux may not revert the emergency change recorded in BackportRequirement \
                 prod-payments/deployment-api-3b9d6c2e (policy \"production\", rule RevertRefused). \
                 Backport the change to Git, or resolve the record.",
            );
            refused(
                request,
                decision,
                "may not revert the emergency change",
                "Backport the change to Git, or resolve the record",
            )
        }
        Rule::LedgerUnavailable => {
            let (request, mut decision) = decided("break-glass-use-edit.json");
            let words = RefusalWords {
                subject: "alice may not update Deployment prod-payments/api".into(),
                why: "driftgate could not record the break-glass change in its backport ledger"
                    .into(),
                next: "Retry in a moment".into(),
                owner: String::new(),
            };
            decision.refuse_with(
                "production",
                Rule::LedgerUnavailable,
                words,
                " (connection refused)",
            );
            refused(
                request,
                decision,
                "could not record the break-glass change",
                "Retry in a moment",
            )
        }
    })
}

#[test]
fn every_refusal_and_its_event_say_the_same_words() {
    let mut refusing = 0;
    for rule in ALL_RULES {
        let Some(case) = refusal_by(rule) else {
            continue;
        };
        refusing += 1;
        let Refused {
            request,
            decision,
            why,
            next,
        } = case;
        assert_eq!(
            (decision.allowed, decision.record.rule),
            (false, rule),
            "{rule}: {}",
            decision.message
        );
        let events = planned_events(&RequestFacts::new(&request), &decision);
        if rule == Rule::PolicyRefused {
            // Its author reads the refusal at apply time (and Flux in its status).
            assert_eq!(events, Vec::new(), "{rule}");
            continue;
        }
        assert_eq!(events.len(), 1, "{rule}: {events:#?}");
        let note = &events[0].note;
        assert!(note.len() <= MAX_NOTE_BYTES, "{rule}: {} bytes", note.len());
        for words in [why, next, &format!("rule {rule}")] {
            assert!(
                decision.message.contains(words),
                "{rule}: {words:?} in the message {:?}",
                decision.message
            );
            assert!(
                note.contains(words),
                "{rule}: {words:?} in the note {note:?}"
            );
        }
        // A refusal in parts: the Event repeats every part of it.
        let verdict = &decision.record.verdicts[0];
        if let Some(words) = &verdict.refusal {
            for part in [&words.subject, &words.why, &words.next, &words.owner] {
                assert!(decision.message.contains(part.as_str()), "{rule}: {part:?}");
                assert!(note.contains(part.as_str()), "{rule}: {part:?} in {note:?}");
            }
        } else {
            assert_eq!(note, &decision.message, "{rule}: given as a message alone");
        }
    }
    assert_eq!(refusing, 19, "the rules that refuse");
}

#[test]
fn a_long_refusal_gives_way_in_why_and_keeps_what_to_do_next() {
    let (request, mut decision) = decided("break-glass-use-edit.json");
    let words = RefusalWords {
        subject: "alice may not update Deployment prod-payments/api".into(),
        why: "ü".repeat(2000),
        next: "Retry in a moment".into(),
        owner: " (policy owner: team-platform)".into(),
    };
    decision.refuse_with("production", Rule::LedgerUnavailable, words, "");
    let event = only_event(&request, &decision);
    assert_bounded(&event);
    assert!(
        event
            .note
            .starts_with("alice may not update Deployment prod-payments/api: üü")
    );
    assert!(
        event.note.ends_with(
            "… (policy \"production\", rule LedgerUnavailable). Retry in a moment (policy owner: team-platform)."
        ),
        "{}",
        event.note
    );
}

#[test]
fn a_verdict_refusing_in_words_has_an_event_in_those_words() {
    let (request, mut decision) = decided("record-resolve-by-bob.json");
    let words = RefusalWords {
        subject: "bob may not resolve BackportRequirement prod-payments/deployment-api-4f1c2a9b7e"
            .into(),
        why: "only an opener of the policy (group sre-oncall) may resolve its records".into(),
        next: "Ask an opener to run driftgate backlog resolve".into(),
        owner: String::new(),
    };
    let verdict = driftgate::decision::PolicyVerdict::enforced_refusal(
        "production".into(),
        Rule::ResolveRefused,
        words.clone(),
    );
    assert_eq!(
        verdict.message.as_deref(),
        Some(words.sentence("production", Rule::ResolveRefused).as_str())
    );
    decision.record.verdicts = vec![verdict];
    let event = only_event(&request, &decision);
    assert_eq!(
        event.note,
        "bob may not resolve BackportRequirement prod-payments/deployment-api-4f1c2a9b7e: only an opener of the \
         policy (group sre-oncall) may resolve its records (policy \"production\", rule ResolveRefused). Ask an \
         opener to run driftgate backlog resolve."
    );
}

/// A verdict refusing in words keeps them for its Event: a long `why` gives way there, and
/// the policy, the rule and what to do next stay whole. Made from its message alone, the note
/// would be the message cut at the end, what to do next lost.
#[test]
fn a_verdict_refusing_in_words_keeps_what_to_do_next_when_its_why_is_long() {
    let (request, mut decision) = decided("record-resolve-by-bob.json");
    let words = RefusalWords {
        subject: "bob may not resolve BackportRequirement prod-payments/deployment-api-4f1c2a9b7e"
            .into(),
        why: "w".repeat(2 * MAX_NOTE_BYTES),
        next: "Ask an opener to run driftgate backlog resolve".into(),
        owner: String::new(),
    };
    decision.record.verdicts = vec![driftgate::decision::PolicyVerdict::enforced_refusal(
        "production".into(),
        Rule::ResolveRefused,
        words,
    )];
    let event = only_event(&request, &decision);
    assert_bounded(&event);
    assert!(
        event.note.ends_with(
            "(policy \"production\", rule ResolveRefused). Ask an opener to run driftgate backlog resolve."
        ),
        "{}",
        event.note
    );
}
