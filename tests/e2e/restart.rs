//! Restarts on the real API server: the gauges derived from backport records are the records'
//! as soon as a restarted driftgate is ready, not zero until its next expiry check; and a
//! driftgate started with a bad policy runs, unready, until the policy is fixed.

use std::time::Duration;

use crate::harness::{ADMIN, DRIFTGATE, Driftgate, control_plane};
use crate::ledger::{Scene, TICK, wait_for};

/// The record gauges of one driftgate: windows open, records awaiting backport, and the age of
/// the oldest of those.
fn gauges(driftgate: &Driftgate) -> (f64, f64, f64) {
    (
        driftgate.counter("driftgate_break_glass_windows_open", &[]),
        driftgate.counter("driftgate_backport_pending", &[]),
        driftgate.counter("driftgate_backport_oldest_pending_seconds", &[]),
    )
}

/// One record awaiting backport and one window open, then driftgate restarted with an expiry
/// check that never comes round during the test: the new process reports both from the records
/// at readiness.
#[test]
fn a_restarted_driftgate_reports_pending_records_and_open_windows_at_once() {
    let scene = Scene::new("restart-gauges", &[]);
    let first = scene.start("restart-gauges-1", TICK);
    scene.flux_apply(2, &[]).ok();
    scene.open_window("5s", "INC-11: api saturated, scaling out");
    scene.alice_scale(5, &[]).ok();
    wait_for(
        "the first window's record to await backport",
        Duration::from_secs(30),
        &[&first],
        || {
            scene
                .records()
                .iter()
                .any(|r| r["status"]["phase"] == "AwaitingBackport")
                .then_some(())
        },
    );
    // A second window, open for longer than the rest of the test, with its own record.
    scene.open_window("100s", "INC-12: api saturated again");
    scene.alice_scale(6, &[]).ok();
    assert_eq!(scene.records().len(), 2, "{:#?}", scene.records());
    let before = wait_for(
        "the first driftgate to count one open window and one pending record",
        Duration::from_secs(15),
        &[&first],
        || {
            let now = gauges(&first);
            // The oldest's age in whole seconds: wait for a second of it.
            (now.0 == 1.0 && now.1 == 1.0 && now.2 >= 1.0).then_some(now)
        },
    );
    drop(first);

    // Readiness waits for the records to sync; the expiry check comes round in an hour.
    let second = scene.start("restart-gauges-2", &["--expiry-check-interval", "1h"]);
    let (open, pending, oldest) = gauges(&second);
    assert_eq!(
        (open, pending),
        (1.0, 1.0),
        "gauges right after the restart (before it: {before:?}); log:\n{}",
        second.log_tail(20)
    );
    assert!(
        oldest >= before.2,
        "the oldest record's age goes on from before the restart: {oldest} < {}",
        before.2
    );
}

/// A driftgate whose policy is bad from its start keeps running, not ready; registered failing
/// closed (as the chart does), the writes the API server sends it are refused with driftgate's
/// reason in the API server's error. Once the file is fixed it is ready and decides, without a
/// restart.
#[test]
fn a_bad_policy_at_start_refuses_writes_with_the_reason_until_it_is_fixed() {
    let scene = Scene::new("restart-badpolicy", &[]);
    let good = std::fs::read_to_string(&scene.policy).expect("the policy reads");
    let bad = good.replace("maxDuration: 2m", "maxDuration: soon");
    assert_ne!(good, bad);
    std::fs::write(&scene.policy, &bad).expect("the bad policy is written");
    let driftgate = Driftgate::spawn_with_kubeconfig(
        "restart-badpolicy",
        &scene.policy,
        &control_plane().kubeconfig(DRIFTGATE),
        &["--reload-interval", "1s"],
    );
    let dg = &[&driftgate];
    let readyz = wait_for("/readyz to answer", Duration::from_secs(30), dg, || {
        driftgate.admin_get("/readyz").ok()
    });
    assert_eq!(readyz.0, 503, "{readyz:?}");
    assert!(
        readyz
            .1
            .contains("spec.breakGlass.maxDuration: \"soon\" is not a duration"),
        "{readyz:?}"
    );
    // Registration counts the reviews it answers (503s included), so it works unready.
    scene.register(&driftgate, "restart-badpolicy");

    let refused = scene.flux_apply(2, &[]).failed();
    eprintln!("what Flux is told: {}", refused.stderr.trim());
    assert!(
        refused
            .stderr
            .contains("driftgate has no valid policy loaded")
            && refused.stderr.contains("spec.breakGlass.maxDuration"),
        "the API server's error carries driftgate's reason:\n{}",
        refused.stderr
    );
    control_plane()
        .kubectl(ADMIN, &["get", "deployment/api", "-n", &scene.ns])
        .failed();
    assert_eq!(driftgate.admin_get("/readyz").map(|r| r.0).ok(), Some(503));

    std::fs::write(&scene.policy, &good).expect("the fixed policy is written");
    driftgate.wait_until_ready(Duration::from_secs(15));
    scene.flux_apply(2, &[]).ok();
    assert_eq!(scene.replicas(), "2");
    let denied = scene.alice_scale(5, &[]).failed();
    assert!(
        denied.stderr.contains("rule NotPermitted"),
        "{}",
        denied.stderr
    );
    assert_eq!(
        driftgate.counter("driftgate_policy_valid", &["source=\"file\""]),
        1.0
    );
}
