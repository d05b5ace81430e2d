//! The API server unreachable for driftgate (but not for anyone else), through the harness's
//! TCP proxy: while driftgate runs, and from its start. Ordinary decisions need nothing from
//! the API server and continue (Flux admitted, bob denied); a break-glass change must be
//! recorded before it is admitted, so it is refused with a message to retry, and admitted once
//! driftgate reaches the API server again.
//!
//! The other faults (bad input, slow clients, rotation, reloads, SIGTERM) need no cluster and
//! are in `tests/faults.rs`.

use std::time::{Duration, Instant};

use crate::harness::proxy::{Mode, Proxy};
use crate::harness::{
    ALICE, BOB, DRIFTGATE, Driftgate, Identity, KubectlOutput, control_plane, driftgate_cli,
};
use crate::ledger::{Scene, TICK, assert_refused_unrecorded, wait_for};

/// A patch of the Deployment's replicas (the object itself, not its `scale` subresource).
fn patch(who: Identity, scene: &Scene, replicas: u32) -> KubectlOutput {
    control_plane().kubectl(
        who,
        &[
            "patch",
            "deployment/api",
            "-n",
            &scene.ns,
            "-p",
            &format!(r#"{{"spec":{{"replicas":{replicas}}}}}"#),
        ],
    )
}

fn assert_bob_denied(scene: &Scene, what: &str, driftgate: &Driftgate) {
    let denied = patch(BOB, scene, 7).failed();
    assert!(
        denied.stderr.contains("bob may not update Deployment")
            && denied.stderr.contains("NotPermitted"),
        "{what}: bob's edit is denied by the policy, not by an error:\n{}\ndriftgate's log:\n{}",
        denied.stderr,
        driftgate.log_tail(10)
    );
}

/// `/readyz` over `window`: every distinct status seen, in order.
fn readiness_over(driftgate: &Driftgate, window: Duration) -> Vec<(u16, String)> {
    let deadline = Instant::now() + window;
    let mut seen: Vec<(u16, String)> = Vec::new();
    while Instant::now() < deadline {
        let now = driftgate
            .admin_get("/readyz")
            .map(|(code, body)| (code, body.trim().to_owned()))
            .unwrap_or((0, "no answer".into()));
        if seen.last() != Some(&now) {
            seen.push(now);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    seen
}

#[test]
fn with_the_api_server_unreachable_decisions_continue_and_break_glass_changes_are_refused() {
    let scene = Scene::new("faults-unreachable", &[]);
    let proxy = Proxy::to_api_server();
    let driftgate = Driftgate::start_with_kubeconfig(
        "faults-unreachable",
        &scene.policy,
        &proxy.kubeconfig_for(DRIFTGATE),
        TICK,
    );
    scene.register(&driftgate, "faults-unreachable");
    scene.flux_apply(2, &[]).ok();

    for mode in [Mode::Refuse, Mode::Hang] {
        proxy.set(mode);
        // Flux keeps deploying, bob is still told no: neither needs the API server.
        let started = Instant::now();
        scene.flux_apply(3, &[]).ok();
        assert_bob_denied(&scene, &format!("{mode:?}"), &driftgate);
        eprintln!(
            "{mode:?}: Flux admitted and bob denied in {:?}",
            started.elapsed()
        );
    }
    // Still ready: once synced, an outage distrusts the namespace cache (no namespace windows)
    // but does not make the pod unready. Unready, every replica would leave the webhook's
    // Service at once and every guarded write, Flux's included, would fail.
    let readiness = readiness_over(&driftgate, Duration::from_secs(3));
    eprintln!("readiness while the API server is unreachable: {readiness:?}");
    assert!(
        readiness.iter().all(|(code, _)| *code == 200),
        "{readiness:?}"
    );
    assert!(
        driftgate
            .metrics()
            .contains("driftgate_namespace_cache_ready 0"),
        "the namespace cache is distrusted while unreachable"
    );
    assert_eq!(scene.replicas(), "3");

    proxy.set(Mode::Forward);
    wait_for(
        "the window to open once driftgate reaches the API server",
        Duration::from_secs(30),
        &[&driftgate],
        || {
            // Opening is itself recorded, so it waits for driftgate to be connected again.
            let open = driftgate_cli(
                ALICE,
                &[
                    "break-glass",
                    "open",
                    "deployment/api",
                    "-n",
                    &scene.ns,
                    "--for",
                    "90s",
                    "--reason",
                    "INC-6: api saturated, scaling out",
                ],
            );
            open.success().then_some(())
        },
    );

    // Opening may have been refused unrecorded too, while driftgate was reconnecting.
    let unrecorded = || {
        driftgate.counter(
            "driftgate_admission_reviews_total",
            &["decision=\"denied\"", "rule=\"LedgerUnavailable\""],
        )
    };
    let unrecorded_before = unrecorded();
    for mode in [Mode::Refuse, Mode::Hang] {
        proxy.set(mode);
        let started = Instant::now();
        let refused = patch(ALICE, &scene, 5).failed();
        let took = started.elapsed();
        assert_refused_unrecorded(
            &format!("{mode:?}: alice's change"),
            &refused.stderr,
            &driftgate,
        );
        // Through `scale`, the window is on the parent, which driftgate cannot read either:
        // refused too, also saying to retry.
        let refused = scene.alice_scale(5, &[]).failed();
        assert!(
            refused.stderr.contains("retry in a moment"),
            "{mode:?}: the refusal of the scale says to retry:\n{}",
            refused.stderr
        );
        // bob, with no window of his own, is denied by the policy as before.
        assert_bob_denied(
            &scene,
            &format!("{mode:?} under alice's window"),
            &driftgate,
        );
        eprintln!("{mode:?}: alice's break-glass change refused in {took:?}");
    }
    assert_eq!(scene.replicas(), "3", "nothing was admitted unrecorded");
    assert_eq!(
        unrecorded() - unrecorded_before,
        2.0,
        "alice's patch, refused once per mode, is counted by its own rule"
    );

    proxy.set(Mode::Forward);
    let back = Instant::now();
    wait_for(
        "alice's change to be admitted once driftgate reaches the API server",
        Duration::from_secs(30),
        &[&driftgate],
        || scene.alice_scale(5, &[]).success().then_some(()),
    );
    eprintln!(
        "API server back: alice's retried change admitted {:?} later",
        back.elapsed()
    );
    assert_eq!(scene.replicas(), "5");
    let record = scene.record();
    assert_eq!(
        record["spec"]["changes"].as_array().map(Vec::len),
        Some(1),
        "the change admitted is recorded once: {record:#}"
    );
}

#[test]
fn with_the_api_server_unreachable_at_start_driftgate_decides_but_is_not_ready() {
    let scene = Scene::new("faults-unreachable-start", &[]);
    let proxy = Proxy::to_api_server();
    proxy.set(Mode::Refuse);
    let driftgate = Driftgate::spawn_with_kubeconfig(
        "faults-unreachable-start",
        &scene.policy,
        &proxy.kubeconfig_for(DRIFTGATE),
        TICK,
    );
    // It keeps running, serving the webhook port, and says why it is not ready.
    std::thread::sleep(Duration::from_secs(3));
    let readiness = readiness_over(&driftgate, Duration::from_secs(2));
    eprintln!("readiness at a start without the API server: {readiness:?}");
    assert!(
        readiness
            .iter()
            .all(|(code, body)| *code == 503 && body.contains("not synced with the API server")),
        "{readiness:?}\n{}",
        driftgate.log_tail(20)
    );
    // The API server itself reaches the webhook (registered by URL, so readiness does not
    // route it): decisions are made.
    scene.register(&driftgate, "faults-unreachable-start");
    scene.flux_apply(2, &[]).ok();
    assert_bob_denied(&scene, "unreachable since the start", &driftgate);
    assert_eq!(scene.replicas(), "2");

    let back = Instant::now();
    proxy.set(Mode::Forward);
    driftgate.wait_until_ready(Duration::from_secs(60));
    eprintln!(
        "ready {:?} after the API server became reachable",
        back.elapsed()
    );
}
