//! `serve --policy-reports` on the real API server (issue 15, section 5): a driftgate of this
//! test's own (the shared one runs without the flag), as driftgate's service account with the
//! chart's RBAC for `policyReports.enabled`, guarding namespace [`NS`] alone.
//!
//! First without the PolicyReport CRD: it writes nothing, says why once, and keeps serving.
//! Then, with a record awaiting backport, a denial and an open window in the namespace, the
//! test installs the CRD (tests/fixtures/crds/, the upstream schema, wgpolicyk8s.io/v1alpha2)
//! and the namespace's PolicyReport shows exactly those, results and summary. Only forgeries.rs
//! also uses the wgpolicyk8s.io group; `harness::policy_report_crd` lets one test at a time hold
//! the CRD and removes it when that test ends, passed or failed.

use std::time::Duration;

use serde_json::Value;

use crate::harness::policy_report_crd::{NAME as CRD, PolicyReportCrd};
use crate::harness::{ADMIN, control_plane};
use crate::ledger::{Scene, wait_for};

const NS: &str = "reports-e2e";
/// What the log says, once, while the CRD is absent.
const ABSENT: &str = "no PolicyReport is written because the PolicyReport CRD";
/// Generous for a loaded machine: the report is planned every second.
const WITHIN: Duration = Duration::from_secs(60);

fn log(driftgate: &crate::harness::Driftgate) -> String {
    std::fs::read_to_string(driftgate.dir().join("serve.log")).unwrap_or_default()
}

fn report() -> Option<Value> {
    let out = control_plane().kubectl(
        ADMIN,
        &[
            "get",
            "policyreports.wgpolicyk8s.io",
            "driftgate",
            "-n",
            NS,
            "-o",
            "json",
            "--show-managed-fields",
        ],
    );
    out.success()
        .then(|| serde_json::from_str(&out.stdout).expect("kubectl prints JSON"))
}

fn phases(scene: &Scene) -> Vec<String> {
    let mut phases: Vec<String> = scene
        .records()
        .iter()
        .map(|r| r["status"]["phase"].as_str().unwrap_or_default().to_owned())
        .collect();
    phases.sort();
    phases
}

#[test]
fn the_namespace_policy_report_shows_a_denial_an_open_window_and_a_pending_backport() {
    // forgeries.rs installs the CRD too; whoever holds it removes it when letting go.
    let crd = PolicyReportCrd::hold();
    assert!(!crd.installed(), "no other test leaves {CRD} installed");
    let scene = Scene::new(NS, &[]);
    // The cluster's deployment controller writes the Deployment's status here; listed among
    // the policy's Kubernetes controllers, so that the only denial is the test's own.
    let policy = std::fs::read_to_string(&scene.policy).expect("the policy reads");
    let with_deployment_controller = policy.replace(
        "        - \"system:kube-controller-manager\"\n",
        "        - \"system:kube-controller-manager\"\n        - \"system:serviceaccount:kube-system:deployment-controller\"\n",
    );
    assert_ne!(policy, with_deployment_controller);
    std::fs::write(&scene.policy, with_deployment_controller).expect("the policy is written");
    // Denials are reported only from the authenticated API server: a refusal leaves nothing
    // stored to confirm it by.
    let driftgate = scene.start_authenticated(
        "reports",
        &[
            "--expiry-check-interval",
            "1s",
            "--policy-reports",
            "--policy-report-interval",
            "1s",
        ],
    );
    let dg = &[&driftgate];
    wait_for("the log to say the CRD is absent", WITHIN, dg, || {
        log(&driftgate).contains(ABSENT).then_some(())
    });
    // Still serving: Flux's write is reviewed and admitted.
    scene.flux_apply(2, &[]).ok();

    // A record awaiting backport: alice's change under a 5 s window.
    scene.open_window("5s", "INC-1501: api saturated, scaling out");
    scene.alice_scale(3, &[]).ok();
    wait_for("the record to await backport", WITHIN, dg, || {
        (phases(&scene) == ["AwaitingBackport"]).then_some(())
    });
    // A denial: alice's change without a window.
    let denied = scene.alice_scale(4, &[]).failed();
    assert!(denied.stderr.contains("denied"), "{}", denied.stderr);
    // An open window.
    scene.open_window("2m", "INC-1502: still saturated, window kept open");
    wait_for("the second window's record", WITHIN, dg, || {
        (phases(&scene) == ["AwaitingBackport", "Open"]).then_some(())
    });
    assert_eq!(
        log(&driftgate).matches(ABSENT).count(),
        1,
        "said once, not every interval:\n{}",
        log(&driftgate)
    );
    assert!(report().is_none());

    crd.install();
    let by_alice = |r: &Value| r["result"] == "fail" && r["properties"]["user"] == "alice";
    let report = wait_for_report(&driftgate, |r| {
        r["summary"]["warn"] == 2 && r["results"].as_array().unwrap().iter().any(by_alice)
    });
    let results = report["results"].as_array().expect("results");
    // Every denial this driftgate made is there (alice's, and the admin's dry-run probe of
    // the webhook's registration), and the summary counts the results.
    let denials_counted = driftgate.counter(
        "driftgate_admission_reviews_total",
        &["decision=\"denied\""],
    );
    let fails = results.iter().filter(|r| r["result"] == "fail").count();
    assert_eq!(fails as f64, denials_counted, "{report:#}");
    assert_eq!(
        report["summary"],
        serde_json::json!({"pass": 0, "fail": fails, "warn": 2, "error": 0, "skip": 0}),
        "{report:#}"
    );
    let by_rule = |rule: &str| {
        results
            .iter()
            .find(|r| r["rule"] == rule && r["result"] == "warn")
    };
    let outcome = |rule: &str| by_rule(rule).map(|r| r["result"].as_str().unwrap());
    assert_eq!(outcome("BackportPending"), Some("warn"), "{report:#}");
    assert_eq!(outcome("BreakGlassWindowOpen"), Some("warn"), "{report:#}");
    let by_rule = |rule: &str| by_rule(rule).unwrap();
    // The denial, under the rule that refused it (the expired window's label is still there).
    let denial = results
        .iter()
        .find(|r| by_alice(r))
        .expect("alice's denial");
    let rule = denial["rule"].as_str().unwrap();
    assert_eq!(
        driftgate.counter(
            "driftgate_admission_reviews_total",
            &["decision=\"denied\"", &format!("rule=\"{rule}\"")]
        ),
        1.0,
        "{denial:#}"
    );
    let results: Vec<&Value> = results
        .iter()
        .filter(|r| r["result"] == "warn" || by_alice(r))
        .collect();
    for result in results {
        assert_eq!(result["source"], "driftgate", "{result:#}");
        assert_eq!(result["policy"], NS, "{result:#}");
        assert_eq!(result["resources"][0]["kind"], "Deployment", "{result:#}");
        assert_eq!(result["resources"][0]["name"], "api", "{result:#}");
        assert_eq!(result["resources"][0]["namespace"], NS, "{result:#}");
        assert!(
            result["timestamp"]["seconds"].as_i64() > Some(0),
            "{result:#}"
        );
    }
    let pending = by_rule("BackportPending");
    let message = pending["message"].as_str().unwrap();
    assert!(message.contains("INC-1501"), "{message}");
    assert!(message.contains("driftgate backport "), "{message}");
    assert_eq!(pending["properties"]["opener"], "alice");
    let open = by_rule("BreakGlassWindowOpen");
    assert!(
        open["message"].as_str().unwrap().contains("INC-1502"),
        "{open:#}"
    );
    assert_eq!(denial["properties"]["user"], "alice", "{denial:#}");
    assert_eq!(denial["properties"]["operation"], "UPDATE", "{denial:#}");
    assert_eq!(denial["scored"], true, "{denial:#}");
    // The message is the refusal alice read (its start: the report bounds it).
    let said = denial["message"].as_str().unwrap();
    let refusal = said
        .strip_prefix("UPDATE by alice denied: ")
        .expect("who and what first");
    let start: String = refusal.chars().take(60).collect();
    assert!(
        denied.stderr.contains(&start),
        "{said}\nvs\n{}",
        denied.stderr
    );
    let managers: Vec<&str> = report["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["manager"].as_str().unwrap())
        .collect();
    assert_eq!(managers, ["driftgate"], "{report:#}");

    // Unchanged content is not written again.
    let version = report["metadata"]["resourceVersion"].clone();
    let writes = driftgate.counter(
        "driftgate_policy_report_writes_total",
        &["result=\"success\""],
    );
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        report_now()["metadata"]["resourceVersion"],
        version,
        "rewritten with nothing changed"
    );
    assert_eq!(
        driftgate.counter(
            "driftgate_policy_report_writes_total",
            &["result=\"success\""]
        ),
        writes
    );
    assert_eq!(log(&driftgate).matches(ABSENT).count(), 1);
}

/// Waits for the report to be `wanted`; on timeout, says what it was and what driftgate logged
/// (but its reviews).
fn wait_for_report(
    driftgate: &crate::harness::Driftgate,
    wanted: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = std::time::Instant::now() + WITHIN;
    let mut last = None;
    while std::time::Instant::now() < deadline {
        last = report();
        if let Some(report) = last.as_ref().filter(|r| wanted(r)) {
            return report.clone();
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let log: Vec<String> = log(driftgate)
        .lines()
        .filter(|l| !l.contains(" review uid="))
        .map(str::to_owned)
        .collect();
    panic!(
        "the PolicyReport in {NS} is not as expected within {WITHIN:?}: {last:#?}\ndriftgate's log:\n{}",
        log.join("\n")
    );
}

fn report_now() -> Value {
    report().expect("the report exists")
}
