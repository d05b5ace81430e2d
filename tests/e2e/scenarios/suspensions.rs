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

use crate::harness::argocd::{ARGOCD_NAMESPACE, ArgoApply, argocd};
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

/// Where [`each_spelling_flux_honours_stops_the_real_flux_and_is_judged_a_suspension`] applies its
/// ConfigMaps: a `prod-*` namespace, guarded by the example policy, whose controller is Flux.
const SKIP_NS: &str = "prod-skip-e2e";
const SKIP_REASON: &str = "INC-2424: flux would undo the hotfix to this object";
const RECONCILE_KEY: &str = "kustomize.toolkit.fluxcd.io/reconcile";
const SSA_KEY: &str = "kustomize.toolkit.fluxcd.io/ssa";

/// Git for that test: its namespace, and ConfigMaps `control` and each of `names`, all holding
/// `VERSION: version`.
fn skip_revision(names: &[&str], version: u32) -> String {
    let mut manifests = format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {SKIP_NS}\n");
    for name in ["control"].iter().chain(names) {
        manifests.push_str(&format!(
            "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: {SKIP_NS}\ndata:\n  VERSION: \"{version}\"\n"
        ));
    }
    manifests
}

fn version_of(name: &str) -> Value {
    super::get_json(&format!("configmap/{name}"), SKIP_NS)["data"]["VERSION"].clone()
}

/// The ledger's suspension record of ConfigMap `name` in [`SKIP_NS`], once it is in `phase`.
async fn skip_record(name: &str, phase: &str) -> Value {
    super::eventually(
        &format!("the suspension record of ConfigMap {name} in phase {phase}"),
        || async {
            let listed = super::get_json("backportrequirements", SKIP_NS);
            listed["items"]
                .as_array()?
                .iter()
                .find(|r| {
                    r["spec"]["scope"] == "Suspension"
                        && r["spec"]["object"]["kind"] == "ConfigMap"
                        && r["spec"]["object"]["name"] == name
                        && r["status"]["phase"] == phase
                })
                .cloned()
        },
    )
    .await
}

/// Issue 24, section 4: Flux's kustomize-controller skips an object whose labels or annotations
/// hold `reconcile: disabled` or `ssa: Ignore`, values in any case. Each form, put by hand on a
/// ConfigMap Flux applies in a guarded namespace, is judged as a suspension: refused for bob,
/// admitted for alice with an expiry and a reason (a `Suspended` warning, Event and ledger
/// record), also when alice adds `ssa: Ignore` under a window she opened on the object, and
/// refused when it comes with another change. Then the real Flux applies a new revision to
/// `control` and leaves every suspended ConfigMap as it was (each also carries an open window,
/// which would refuse Flux's dry run and fail the whole revision had Flux not skipped it), and
/// once bob resumes each with `driftgate resume`, Flux applies the revision to it.
#[tokio::test]
async fn each_spelling_flux_honours_stops_the_real_flux_and_is_judged_a_suspension() {
    install_crypto_provider();
    shared();
    let name = "skip-e2e";
    // name, where, key, value as put by hand; `folded` is "diſabled" with a long s, which Go's
    // strings.EqualFold (and so Flux) reads as "disabled".
    let forms: [(&str, &str, &str, &str); 4] = [
        ("annotated", "annotations", RECONCILE_KEY, "Disabled"),
        ("labelled", "labels", RECONCILE_KEY, "disabled"),
        ("folded", "annotations", RECONCILE_KEY, "di\u{17f}abled"),
        ("ignored", "annotations", SSA_KEY, "Ignore"),
    ];
    let names: Vec<&str> = forms.iter().map(|f| f.0).collect();
    let first = flux().publish(name, &skip_revision(&names, 1));
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
    let expiry = driftgate::timefmt::format_expiry(
        jiff::Timestamp::now()
            .checked_add(jiff::SignedDuration::from_mins(60))
            .unwrap()
            .round(jiff::Unit::Second)
            .unwrap(),
    );
    let marks = |place: &str, key: &str, value: &str, window: bool| {
        let mut metadata = json!({"labels": {}, "annotations": {}});
        metadata[place][key] = json!(value);
        if window {
            metadata["labels"]["driftgate.dev/break-glass"] = json!(expiry);
            metadata["annotations"]["driftgate.dev/break-glass-reason"] = json!(SKIP_REASON);
        }
        json!({"metadata": metadata}).to_string()
    };

    // bob, no opener, may not stop Flux in any spelling.
    for (cm, place, key, value) in forms {
        let patch = kubectl(
            BOB,
            &[
                "patch",
                "configmap",
                cm,
                "-n",
                SKIP_NS,
                "--type=merge",
                "-p",
                &marks(place, key, value, false),
            ],
        );
        assert_denied(
            &patch,
            &format!(
                "bob may not suspend ConfigMap {SKIP_NS}/{cm}: a suspension is a break-glass window, which only group sre-oncall may open"
            ),
            "SuspensionRefused",
        );
    }

    // alice suspends the first three, with the expiry and the reason in the same write.
    for (cm, place, key, value) in &forms[..3] {
        let patch = kubectl(
            ALICE,
            &[
                "patch",
                "configmap",
                cm,
                "-n",
                SKIP_NS,
                "--type=merge",
                "-p",
                &marks(place, key, value, true),
            ],
        )
        .ok();
        let how = match *place {
            "labels" => format!("label {key}"),
            _ => format!("annotation {key}"),
        };
        assert!(
            patch.stderr.contains(&format!(
                "driftgate: ConfigMap {SKIP_NS}/{cm} suspended ({how}) until "
            )),
            "{}",
            patch.stderr
        );
    }
    // The fourth under a window she opens on it first: ssa: Ignore with another change is
    // refused (it would be recorded as an ordinary change), alone it is a suspension.
    driftgate_cli(
        ALICE,
        &[
            "break-glass",
            "open",
            "configmap/ignored",
            "-n",
            SKIP_NS,
            "--for",
            "1h",
            "--reason",
            SKIP_REASON,
        ],
    )
    .ok();
    let mixed = kubectl(
        ALICE,
        &[
            "patch",
            "configmap",
            "ignored",
            "-n",
            SKIP_NS,
            "--type=merge",
            "-p",
            &json!({"metadata": {"annotations": {SSA_KEY: "Ignore"}}, "data": {"HOTFIX": "on"}})
                .to_string(),
        ],
    );
    assert_denied(
        &mixed,
        &format!(
            "alice may not suspend ConfigMap {SKIP_NS}/ignored: a write that suspends the GitOps controller may change nothing else, and this one also changes data.HOTFIX"
        ),
        "SuspensionRefused",
    );
    let annotate = kubectl(
        ALICE,
        &[
            "annotate",
            "configmap",
            "ignored",
            "-n",
            SKIP_NS,
            &format!("{SSA_KEY}=Ignore"),
        ],
    )
    .ok();
    assert!(
        annotate.stderr.contains(&format!(
            "driftgate: ConfigMap {SKIP_NS}/ignored suspended (annotation {SSA_KEY}) until "
        )),
        "{}",
        annotate.stderr
    );
    for cm in &names {
        wait_for_event(
            SKIP_NS,
            "Suspended",
            "ConfigMap",
            cm,
            "alice suspended the GitOps controller's reconciliation of ConfigMap",
        )
        .await;
        let record = skip_record(cm, "Open").await;
        assert_eq!(record["spec"]["window"]["opener"], ALICE.user, "{record}");
    }

    // Git moves on: Flux applies the revision to `control` and skips every suspended one.
    let reviewed_before = shared().log_tail(usize::MAX).lines().count();
    let second = flux().publish(name, &skip_revision(&names, 2));
    let start = Instant::now();
    while flux().kustomization(name)["status"]["lastAppliedRevision"] != second.as_str() {
        assert!(
            start.elapsed() < APPLIED,
            "Flux did not apply {second} (a suspended ConfigMap it did not skip would be refused, as its window holds Flux); kustomization: {}; log: {}",
            flux().kustomization(name)["status"],
            flux().log().display()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    eprintln!(
        "the real Flux applied the revision past the four suspended ConfigMaps in {:.1} s",
        start.elapsed().as_secs_f64()
    );
    assert_eq!(version_of("control"), "2");
    // Two more intervals: Flux dry-runs `control` on each, and sends nothing at all, not even a
    // dry run, for a suspended ConfigMap (driftgate logs every review it gets).
    tokio::time::sleep(Duration::from_secs(10)).await;
    let log = shared().log_tail(usize::MAX);
    let flux_reviews = |cm: &str| {
        let object = format!(
            "kind=ConfigMap subresource= namespace={SKIP_NS} name={cm} user=system:serviceaccount:flux-system:kustomize-controller"
        );
        log.lines()
            .skip(reviewed_before)
            .filter(|line| line.contains(&object))
            .count()
    };
    assert!(
        flux_reviews("control") >= 2,
        "Flux's reviews of control: {}",
        flux_reviews("control")
    );
    eprintln!(
        "meanwhile driftgate reviewed {} writes (dry runs and applies) of control by the real Flux, and none of the suspended ConfigMaps",
        flux_reviews("control")
    );
    for cm in &names {
        assert_eq!(version_of(cm), "1", "Flux applied suspended ConfigMap {cm}");
        assert_eq!(flux_reviews(cm), 0, "Flux wrote suspended ConfigMap {cm}");
    }

    // bob resumes each (resuming is free); driftgate resume undoes whichever form it finds, and
    // Flux applies the revision to it.
    for (cm, place, key, _) in forms {
        let resume =
            driftgate_cli(BOB, &["resume", &format!("configmap/{cm}"), "-n", SKIP_NS]).ok();
        assert!(resume.stdout.contains("resumed"), "{}", resume.stdout);
        let live = super::get_json(&format!("configmap/{cm}"), SKIP_NS);
        assert!(
            live["metadata"][place].get(key).is_none(),
            "{cm}: {key} left: {live}"
        );
        let record = skip_record(cm, "Resumed").await;
        assert_eq!(record["status"]["resumedBy"], BOB.user, "{record}");
    }
    let resumed = Instant::now();
    for cm in &names {
        super::eventually(&format!("Flux applying revision 2 to {cm}"), || async {
            (version_of(cm) == "2").then_some(())
        })
        .await;
    }
    eprintln!(
        "once resumed, the real Flux applied the revision to all four in {:.1} s",
        resumed.elapsed().as_secs_f64()
    );
}

/// Git for [`argo_cd_3_stops_automated_sync_on_enabled_false_and_driftgate_judges_it_a_suspension`]:
/// its namespace (outside every policy: Argo CD is no controller of the example policy's) and a
/// ConfigMap.
pub(super) fn argo_revision(namespace: &str, log_level: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {namespace}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: {namespace}\ndata:\n  LOG_LEVEL: {log_level}\n"
    )
}

/// Application `name`'s sync status: the revision its last sync applied, that sync's phase, and
/// whether it is in sync with Git.
fn argo_state(name: &str) -> String {
    control_plane()
        .kubectl(
            ADMIN,
            &[
                "get",
                "application",
                name,
                "-n",
                ARGOCD_NAMESPACE,
                "-o",
                "jsonpath={.status.operationState.syncResult.revision} {.status.operationState.phase} {.status.sync.status} {.status.sync.revision}",
            ],
        )
        .stdout
        .trim()
        .to_owned()
}

pub(super) async fn wait_argo_state(name: &str, want: &str, within: Duration) {
    let start = Instant::now();
    while argo_state(name) != want {
        assert!(
            start.elapsed() < within,
            "Application {name} is not `{want}` within {within:?} (now `{}`); log: {}",
            argo_state(name),
            argocd().log().display()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Issue 24, section 4, for Argo CD: its v3 controller stops automated sync on
/// `spec.syncPolicy.automated.enabled: false` (absent means on), which driftgate judges as a
/// suspension: refused for bob, and for alice without an expiry; admitted with one. While it
/// holds, the real application-controller sees Git's new commit (OutOfSync) and does not sync
/// it; once bob resumes with `driftgate resume` (`enabled` back to true), it syncs.
#[tokio::test]
async fn argo_cd_3_stops_automated_sync_on_enabled_false_and_driftgate_judges_it_a_suspension() {
    install_crypto_provider();
    shared();
    let name = "argocd-suspend-e2e";
    let first = argocd().publish(name, &argo_revision(name, "info"));
    argocd().application(name, name, ArgoApply::ClientSide);
    wait_argo_state(
        name,
        &format!("{first} Succeeded Synced {first}"),
        Duration::from_secs(180),
    )
    .await;
    let settings = || super::get_json("configmap/settings", name)["data"]["LOG_LEVEL"].clone();
    assert_eq!(settings(), "info");

    let off = |window: bool| {
        let mut patch = json!({"spec": {"syncPolicy": {"automated": {"enabled": false}}}});
        if window {
            let expiry = driftgate::timefmt::format_expiry(
                jiff::Timestamp::now()
                    .checked_add(jiff::SignedDuration::from_mins(60))
                    .unwrap()
                    .round(jiff::Unit::Second)
                    .unwrap(),
            );
            patch["metadata"] = json!({
                "labels": {"driftgate.dev/break-glass": expiry},
                "annotations": {"driftgate.dev/break-glass-reason": REASON},
            });
        }
        patch.to_string()
    };
    let patch = |who, window| {
        kubectl(
            who,
            &[
                "patch",
                "application",
                name,
                "-n",
                ARGOCD_NAMESPACE,
                "--type=merge",
                "-p",
                &off(window),
            ],
        )
    };
    assert_denied(
        &patch(BOB, true),
        &format!(
            "bob may not suspend Application {ARGOCD_NAMESPACE}/{name}: a suspension is a break-glass window, which only group sre-oncall may open"
        ),
        "SuspensionRefused",
    );
    assert_denied(
        &patch(ALICE, false),
        &format!("alice may not suspend Application {ARGOCD_NAMESPACE}/{name}: it has no expiry"),
        "SuspensionRefused",
    );
    let suspended = patch(ALICE, true).ok();
    assert!(
        suspended.stderr.contains(&format!(
            "driftgate: Application {ARGOCD_NAMESPACE}/{name} suspended (spec.syncPolicy.automated.enabled) until "
        )),
        "{}",
        suspended.stderr
    );
    wait_for_event(
        ARGOCD_NAMESPACE,
        "Suspended",
        "Application",
        name,
        "alice suspended the GitOps controller's reconciliation of Application",
    )
    .await;

    // Git moves on: Argo CD sees the commit and, its automated sync off, leaves it unsynced.
    let second = argocd().publish(name, &argo_revision(name, "debug"));
    wait_argo_state(
        name,
        &format!("{first} Succeeded OutOfSync {second}"),
        Duration::from_secs(60),
    )
    .await;
    let start = Instant::now();
    while start.elapsed() < SUSPENDED_FOR {
        assert_eq!(settings(), "info", "Argo CD synced while suspended");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // bob resumes it: automated sync back on, and Argo CD syncs the commit.
    driftgate_cli(
        BOB,
        &[
            "resume",
            &format!("application/{name}"),
            "-n",
            ARGOCD_NAMESPACE,
        ],
    )
    .ok();
    let live = super::get_json(&format!("application/{name}"), ARGOCD_NAMESPACE);
    assert_eq!(
        live["spec"]["syncPolicy"]["automated"]["enabled"], true,
        "{live}"
    );
    assert!(
        live["metadata"]["labels"]
            .get("driftgate.dev/break-glass")
            .is_none(),
        "{live}"
    );
    let resumed = Instant::now();
    wait_argo_state(
        name,
        &format!("{second} Succeeded Synced {second}"),
        Duration::from_secs(60),
    )
    .await;
    eprintln!(
        "once resumed, the real Argo CD synced the waiting commit in {:.1} s",
        resumed.elapsed().as_secs_f64()
    );
    assert_eq!(settings(), "debug");
    wait_for_event(
        ARGOCD_NAMESPACE,
        "Resumed",
        "Application",
        name,
        "bob resumed the GitOps controller's reconciliation of Application",
    )
    .await;
}
