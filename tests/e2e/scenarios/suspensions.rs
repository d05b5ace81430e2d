//! Issue 14, section 1: suspending the real Flux is a break-glass window. The shared driftgate
//! (the example policy's `gitops` and its `suspensions`) refuses alice's `spec.suspend: true` without an expiry,
//! admits it through `driftgate suspend` (label, reason and suspension in one patch); the real
//! kustomize-controller then stops reconciling (a manual change and a new revision wait), and
//! after `driftgate resume` it reconciles again (the revision applies, the change is undone).
//!
//! A capture webhook keeps the two reviews of the Kustomization the API server sends for
//! alice, and compares them with `tests/fixtures/flux-kustomization-suspend-*.json` on what
//! driftgate decides by (`DRIFTGATE_WRITE_FIXTURES=1` rewrites them), so that the example
//! policy's test suite decides reviews of a real suspension.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::harness::capture::CaptureWebhook;
use crate::harness::flux::{FLUX_NAMESPACE, flux};
use crate::harness::review_fixtures::{compare_or_write, normalise};
use crate::harness::{
    ADMIN, ALICE, BOB, control_plane, driftgate_cli, install_crypto_provider, shared,
};

use super::{assert_denied, kubectl, wait_for_event};

/// The Kustomization and its source.
const NAME: &str = "suspend-e2e";
/// Where its ConfigMap lives: no policy guards it, so the admin's manual change is admitted
/// and only Flux would undo it.
const APPS: &str = "suspend-e2e-apps";
const INTERVAL: &str = "5s";
/// The first reconcile may wait for the controller's caches.
const APPLIED: Duration = Duration::from_secs(120);
/// While suspended, this many intervals pass with nothing reconciled.
const SUSPENDED_FOR: Duration = Duration::from_secs(20);
/// A 20 s suspension is past its expiry, and counted so, within this (expiry checks every 10 s).
const EXPIRED_WITHIN: Duration = Duration::from_secs(90);
const REASON: &str = "INC-1414: flux keeps reverting the hotfix, suspending while we backport";
/// The capture webhook's namespaceSelector, set on flux-system for this test.
const CAPTURE_LABEL: (&str, &str) = ("driftgate-e2e-capture-suspend", "yes");
const REFRESH: &str = "DRIFTGATE_WRITE_FIXTURES=1 cargo test --test e2e suspensions";

fn revision(log_level: &str, extra: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {APPS}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: {APPS}\ndata:\n  LOG_LEVEL: {log_level}\n{extra}"
    )
}

fn kustomization() -> Value {
    let out = control_plane()
        .kubectl(
            ADMIN,
            &[
                "get",
                "kustomization",
                NAME,
                "-n",
                FLUX_NAMESPACE,
                "-o",
                "json",
            ],
        )
        .ok();
    serde_json::from_str(&out.stdout).expect("kubectl prints JSON")
}

fn applied_revision() -> String {
    kustomization()["status"]["lastAppliedRevision"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn settings() -> Value {
    let out = control_plane()
        .kubectl(
            ADMIN,
            &["get", "configmap", "settings", "-n", APPS, "-o", "json"],
        )
        .ok();
    serde_json::from_str::<Value>(&out.stdout).expect("kubectl prints JSON")["data"].clone()
}

/// Waits until the Kustomization has applied `revision`, within `within`.
async fn wait_applied(revision: &str, within: Duration) {
    let start = Instant::now();
    while applied_revision() != revision {
        assert!(
            start.elapsed() < within,
            "Flux did not apply {revision} within {within:?} (last applied {:?}); log: {}",
            applied_revision(),
            flux().log().display()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The first review the capture webhook kept of alice writing the Kustomization with
/// `spec.suspend: true`, by her field manager.
fn captured(capture: &CaptureWebhook, field_manager: &str) -> Value {
    let reviews = capture.reviews();
    reviews
        .iter()
        .find(|r| {
            let request = &r["request"];
            request["userInfo"]["username"] == ALICE.user
                && request["name"] == NAME
                && request["kind"]["kind"] == "Kustomization"
                && request["options"]["fieldManager"] == field_manager
                && request["object"]["spec"]["suspend"] == true
        })
        .cloned()
        .unwrap_or_else(|| {
            panic!(
                "no suspension of {NAME} by alice with field manager {field_manager} was captured ({} reviews)",
                reviews.len()
            )
        })
}

/// The review normalised, with its window's expiry fixed at the fixtures' convention
/// (20261130T1000Z, the suites' now being 09:00) so that it decides the same on every run.
fn fixture_of(review: &Value) -> Value {
    let mut review = normalise(review);
    let labels = &mut review["request"]["object"]["metadata"]["labels"];
    if labels.get("driftgate.dev/break-glass").is_some() {
        labels["driftgate.dev/break-glass"] = json!("20261130T1000Z");
    }
    review
}

/// The ledger's record of the suspension of Kustomization `name`, once it is in `phase`.
async fn suspension_record(name: &str, phase: &str) -> Value {
    super::eventually(
        &format!("the suspension record of {name} in phase {phase}"),
        || async {
            let out = control_plane()
                .kubectl(
                    ADMIN,
                    &[
                        "get",
                        "backportrequirements",
                        "-n",
                        FLUX_NAMESPACE,
                        "-o",
                        "json",
                    ],
                )
                .ok();
            let listed: Value = serde_json::from_str(&out.stdout).expect("kubectl prints JSON");
            listed["items"]
                .as_array()?
                .iter()
                .find(|r| {
                    r["spec"]["scope"] == "Suspension"
                        && r["spec"]["object"]["name"] == name
                        && r["status"]["phase"] == phase
                })
                .cloned()
        },
    )
    .await
}

#[tokio::test]
async fn suspending_the_real_flux_needs_an_expiry_and_it_reconciles_again_once_resumed() {
    install_crypto_provider();
    shared();
    let first = flux().publish(NAME, &revision("info", ""));
    flux().kustomize(NAME, INTERVAL);
    wait_applied(&first, APPLIED).await;
    kubectl(
        ADMIN,
        &[
            "label",
            "namespace",
            FLUX_NAMESPACE,
            &format!("{}={}", CAPTURE_LABEL.0, CAPTURE_LABEL.1),
            "--overwrite",
        ],
    )
    .ok();
    let capture = CaptureWebhook::register(
        "driftgate-e2e-capture-suspend",
        CAPTURE_LABEL,
        FLUX_NAMESPACE,
    );

    // alice suspends Flux as `flux suspend` would, with no expiry: refused, with the command.
    let patch = kubectl(
        ALICE,
        &[
            "patch",
            "kustomization",
            NAME,
            "-n",
            FLUX_NAMESPACE,
            "--type=merge",
            "-p",
            r#"{"spec":{"suspend":true}}"#,
        ],
    );
    assert_denied(
        &patch,
        &format!("alice may not suspend Kustomization {FLUX_NAMESPACE}/{NAME}: it has no expiry"),
        "SuspensionRefused",
    );
    for command in [
        format!(
            "driftgate suspend kustomization/{NAME} -n {FLUX_NAMESPACE} --for 1h --reason \"INC-…: what and why\""
        ),
        format!("driftgate resume kustomization/{NAME} -n {FLUX_NAMESPACE}"),
    ] {
        assert!(
            patch.stderr.contains(&command),
            "{command}: {}",
            patch.stderr
        );
    }
    assert_eq!(kustomization()["spec"]["suspend"], Value::Null);
    wait_for_event(
        FLUX_NAMESPACE,
        "WriteDenied",
        "Kustomization",
        NAME,
        "alice may not suspend Kustomization",
    )
    .await;

    // With driftgate suspend: admitted, with driftgate's warning.
    let suspend = driftgate_cli(
        ALICE,
        &[
            "suspend",
            &format!("kustomization/{NAME}"),
            "-n",
            FLUX_NAMESPACE,
            "--for",
            "1h",
            "--reason",
            REASON,
        ],
    )
    .ok();
    let lines: Vec<&str> = suspend.stdout.lines().collect();
    assert!(
        lines[0].starts_with(&format!(
            "reconciliation of kustomization/{NAME} in namespace {FLUX_NAMESPACE} suspended until "
        )),
        "{}",
        suspend.stdout
    );
    assert!(
        lines[1].starts_with(&format!(
            "driftgate: Kustomization {FLUX_NAMESPACE}/{NAME} suspended (spec.suspend) until "
        )),
        "{}",
        suspend.stdout
    );
    let live = kustomization();
    assert_eq!(live["spec"]["suspend"], true);
    assert_eq!(
        live["metadata"]["annotations"]["driftgate.dev/break-glass-reason"],
        REASON
    );
    let expiry = live["metadata"]["labels"]["driftgate.dev/break-glass"]
        .as_str()
        .expect("the suspension's expiry is set")
        .to_owned();
    let event = wait_for_event(
        FLUX_NAMESPACE,
        "Suspended",
        "Kustomization",
        NAME,
        "alice suspended the GitOps controller's reconciliation of Kustomization",
    )
    .await;
    // Listed with the other windows.
    let list = driftgate_cli(ALICE, &["break-glass", "list", "-n", FLUX_NAMESPACE]).ok();
    let row = list
        .stdout
        .lines()
        .find(|line| line.contains(&format!("kustomization/{NAME} ")))
        .unwrap_or_else(|| panic!("break-glass list lacks the suspension:\n{}", list.stdout));
    assert!(row.contains(" open ") && row.contains("INC-1414"), "{row}");
    let note = event.note.unwrap_or_default();
    assert!(
        note.contains(&format!("label {expiry}, reason \"{REASON}\"")),
        "{note}"
    );
    // Recorded in the ledger: who, why, until, and the change.
    let record = suspension_record(NAME, "Open").await;
    let window = &record["spec"]["window"];
    assert_eq!(
        (&window["opener"], &window["reason"], &window["labelValue"]),
        (&json!(ALICE.user), &json!(REASON), &json!(expiry)),
        "{record}"
    );
    assert_eq!(record["spec"]["object"]["kind"], "Kustomization");
    let changes = record["spec"]["changes"].as_array().expect("changes");
    assert_eq!(changes.len(), 1, "{record}");
    assert!(
        changes[0]["fields"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["path"] == "spec.suspend"),
        "{record}"
    );

    // Flux stops: a manual change survives, and a new revision is not applied.
    kubectl(
        ADMIN,
        &[
            "patch",
            "configmap",
            "settings",
            "-n",
            APPS,
            "--type=merge",
            "-p",
            r#"{"data":{"LOG_LEVEL":"debug"}}"#,
        ],
    )
    .ok();
    let second = flux().publish(NAME, &revision("info", "  FEATURE: \"on\"\n"));
    let start = Instant::now();
    while start.elapsed() < SUSPENDED_FOR {
        assert_eq!(
            applied_revision(),
            first,
            "a suspended Kustomization applied; log: {}",
            flux().log().display()
        );
        assert_eq!(settings()["LOG_LEVEL"], "debug");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // bob resumes it (resuming is always admitted): Flux reconciles again.
    let resume = driftgate_cli(
        BOB,
        &[
            "resume",
            &format!("kustomization/{NAME}"),
            "-n",
            FLUX_NAMESPACE,
        ],
    )
    .ok();
    assert!(resume.stdout.contains("resumed"), "{}", resume.stdout);
    let live = kustomization();
    assert_eq!(live["spec"]["suspend"], false);
    assert!(
        live["metadata"]["labels"]
            .get("driftgate.dev/break-glass")
            .is_none(),
        "{live}"
    );
    let resumed = Instant::now();
    wait_applied(&second, APPLIED).await;
    eprintln!(
        "after the resume, the real Flux applied the waiting revision in {:.1} s",
        resumed.elapsed().as_secs_f64()
    );
    let data = settings();
    assert_eq!(
        (&data["LOG_LEVEL"], &data["FEATURE"]),
        (&json!("info"), &json!("on")),
        "{data}"
    );
    wait_for_event(
        FLUX_NAMESPACE,
        "Resumed",
        "Kustomization",
        NAME,
        &format!("bob resumed the GitOps controller's reconciliation of Kustomization {FLUX_NAMESPACE}/{NAME} (suspended until "),
    )
    .await;
    let record = suspension_record(NAME, "Resumed").await;
    assert_eq!(record["status"]["resumedBy"], BOB.user, "{record}");
    assert!(record["status"]["resumedAt"].is_string(), "{record}");

    let picked = [
        (
            "flux-kustomization-suspend-by-alice.json".to_owned(),
            fixture_of(&captured(&capture, "kubectl-patch")),
        ),
        (
            "flux-kustomization-suspend-with-driftgate.json".to_owned(),
            fixture_of(&captured(&capture, "driftgate-break-glass")),
        ),
    ];
    drop(capture);
    compare_or_write(&picked, "The API server", REFRESH);
}

/// `driftgate_suspensions{policy="gitops",state}` on the shared driftgate's `/metrics` (the
/// example policy's `gitops` judges suspensions in flux-system).
fn suspensions_gauge(state: &str) -> Option<i64> {
    let series = format!("driftgate_suspensions{{policy=\"gitops\",state=\"{state}\"}} ");
    shared()
        .metrics()
        .lines()
        .find_map(|line| line.strip_prefix(&series)?.trim().parse().ok())
}

#[tokio::test]
async fn a_suspension_past_its_expiry_is_counted_for_the_alert_until_it_is_resumed() {
    install_crypto_provider();
    shared();
    let name = "suspend-e2e-expiry";
    let first = flux().publish(
        name,
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: suspend-e2e-expiry-apps\n",
    );
    flux().kustomize(name, INTERVAL);
    let start = Instant::now();
    while flux().kustomization(name)["status"]["lastAppliedRevision"] != first.as_str() {
        assert!(
            start.elapsed() < APPLIED,
            "Flux did not apply {first}; log: {}",
            flux().log().display()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let target = format!("kustomization/{name}");
    driftgate_cli(
        ALICE,
        &[
            "suspend",
            &target,
            "-n",
            FLUX_NAMESPACE,
            "--for",
            "20s",
            "--reason",
            REASON,
        ],
    )
    .ok();
    // Counted at each expiry check (10 s on the shared driftgate): past its expiry, it is
    // `expired` (the alert's series) until somebody resumes it.
    let start = Instant::now();
    while suspensions_gauge("expired") != Some(1) {
        assert!(
            start.elapsed() < EXPIRED_WITHIN,
            "the suspension was not counted as expired within {EXPIRED_WITHIN:?}: {:?}",
            suspensions_gauge("expired")
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    eprintln!(
        "a 20 s suspension was counted expired {:.1} s after driftgate suspend",
        start.elapsed().as_secs_f64()
    );
    assert_eq!(flux().kustomization(name)["spec"]["suspend"], true);
    // The ledger's record says so, and an Event says how to resume it.
    let record = suspension_record(name, "Expired").await;
    assert_eq!(record["spec"]["window"]["opener"], ALICE.user, "{record}");
    wait_for_event(
        FLUX_NAMESPACE,
        "SuspensionExpired",
        "Kustomization",
        name,
        &format!("nobody resumed it: Git is not in charge until it is resumed (driftgate resume kustomization/{name} -n {FLUX_NAMESPACE})"),
    )
    .await;
    let backlog = driftgate_cli(ALICE, &["backlog", "-n", FLUX_NAMESPACE]).ok();
    assert!(
        backlog
            .stdout
            .lines()
            .any(|l| l.contains("Expired") && l.contains(&format!("kustomization/{name} "))),
        "the backlog lists the forgotten suspension:\n{}",
        backlog.stdout
    );
    driftgate_cli(ALICE, &["resume", &target, "-n", FLUX_NAMESPACE]).ok();
    let record = suspension_record(name, "Resumed").await;
    assert_eq!(record["status"]["resumedBy"], ALICE.user, "{record}");
    super::eventually("the resumed suspension no longer counted", || async {
        suspensions_gauge("expired").filter(|n| *n == 0)
    })
    .await;
}
