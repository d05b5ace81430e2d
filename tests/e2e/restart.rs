//! State that survives a restart: the gauges derived from backport records are the records'
//! as soon as a restarted driftgate is ready, not zero until its next expiry check.

use std::time::Duration;

use crate::harness::Driftgate;
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
            (now.0 == 1.0 && now.1 == 1.0).then_some(now)
        },
    );
    assert!(before.2 > 0.0, "{before:?}");
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
