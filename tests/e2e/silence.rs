//! A stopped controller is seen (issue 14, section 2), on the real API server: a driftgate of its
//! own with `--controller-silence-after 3s`, Flux played by `kubectl apply --server-side
//! --field-manager=kustomize-controller` as its identity. Flux writes, and the gauge of its last
//! write appears; Flux stops; past the threshold bob's refused write says that Flux may be down,
//! and the gauge is older than the threshold. The rules of it (what counts as a write, which
//! refusals say it) are tested in tests/silence.rs and src/silence.rs. Then the same with Flux's
//! real kustomize-controller, suspended and resumed: the one controller of the test binary
//! serves every real-Flux test, so it is one Kustomization that stops, not the process.

use std::time::{Duration, Instant, SystemTime};

use crate::harness::flux::{FLUX_NAMESPACE, flux};
use crate::harness::{ALICE, BOB, Driftgate, KubectlOutput, control_plane, driftgate_cli};
use crate::ledger::Scene;
use crate::scenarios::namespace_with_api;

/// How long the real Flux's first reconcile of a new Kustomization may take (its caches start
/// with the first test that uses it), as in scenarios/real_flux.rs.
const FIRST_APPLY: Duration = Duration::from_secs(120);

const THRESHOLD_SECONDS: f64 = 3.0;

const GAUGE: &str = "driftgate_controller_last_write_timestamp_seconds";

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// The gauge's value for `policy`'s controller flux, if the series exists.
fn flux_last_write(driftgate: &Driftgate, policy: &str) -> Option<f64> {
    let series = format!("{GAUGE}{{policy=\"{policy}\",controller=\"flux\"}} ");
    driftgate
        .metrics()
        .lines()
        .find_map(|line| line.strip_prefix(&series)?.parse().ok())
}

/// Bob's annotation of Deployment `api`: refused, since only the controllers write here.
fn bob_annotates(ns: &str, value: &str) -> KubectlOutput {
    let annotation = format!("bob/note={value}");
    control_plane()
        .kubectl(
            BOB,
            &[
                "annotate",
                "deployment/api",
                "-n",
                ns,
                &annotation,
                "--overwrite",
            ],
        )
        .failed()
}

#[test]
fn a_stopped_flux_is_named_in_bobs_refusal_once_silent_past_the_threshold() {
    let ns = "silence-stopped";
    let scene = Scene::new(ns, &[]);
    let driftgate = scene.start("silence", &["--controller-silence-after", "3s"]);
    // The registration probe is the admin's: a fresh driftgate has seen nothing of Flux.
    assert_eq!(
        flux_last_write(&driftgate, ns),
        None,
        "no write from flux yet"
    );

    let before = unix_now();
    scene.flux_apply(1, &[]).ok();
    // A dry run counts too: the real Flux dry-runs every object on every interval.
    scene.flux_apply(1, &["--dry-run=server"]).ok();
    let after = unix_now();
    let wrote = flux_last_write(&driftgate, ns).expect("the gauge appears with flux's write");
    assert!(
        before - 1.0 <= wrote && wrote <= after + 1.0,
        "flux wrote between {before} and {after}, the gauge says {wrote}"
    );

    // Flux stops. Once the threshold has passed, bob's refused write says so.
    let quiet_until = wrote + THRESHOLD_SECONDS + 1.0;
    let wait = quiet_until - unix_now();
    if wait > 0.0 {
        std::thread::sleep(Duration::from_secs_f64(wait));
    }
    let refused = bob_annotates(ns, "late");
    let message = &refused.stderr;
    for part in [
        "bob may not update Deployment silence-stopped/api",
        "rule NotPermitted",
        "Change it in Git",
        "flux has not written in policy \"silence-stopped\"'s namespaces for",
        "it may be down, and then a change in Git does not reach the cluster until it is back.",
    ] {
        assert!(message.contains(part), "{message}\nshould say {part:?}");
    }
    let last = flux_last_write(&driftgate, ns).expect("the series stays");
    eprintln!(
        "silence: gauge {last:.3}, {:.1}s old; bob was told: {}",
        unix_now() - last,
        message.trim()
    );
    assert_eq!(
        last, wrote,
        "nothing from flux since, bob's write is not flux's"
    );
    assert!(
        unix_now() - last > THRESHOLD_SECONDS,
        "the gauge ({last}) is older than the threshold"
    );

    // Flux writes again: the gauge moves on.
    scene.flux_apply(1, &["--dry-run=server"]).ok();
    let again = flux_last_write(&driftgate, ns).expect("the series stays");
    assert!(again > wrote, "{again} after {wrote}");
}

/// Polls `check` every 200 ms until it returns Some, failing after `within`.
fn wait_for<T>(what: &str, within: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {within:?} waiting for {what}; kustomize-controller log: {}",
            flux().log().display()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Bob's refusal, and whether it says that flux may be down.
fn bob_told_flux_may_be_down(ns: &str, value: &str) -> (bool, String) {
    let refused = bob_annotates(ns, value);
    let says = refused.stderr.contains(&format!(
        "flux has not written in policy \"{ns}\"'s namespaces for"
    ));
    (says, refused.stderr)
}

/// Suspends or resumes Kustomization `name` as an on-call engineer must: the shared driftgate's
/// example policy judges suspensions in flux-system (a window with an expiry and a reason).
fn suspend(name: &str, suspended: bool) {
    let target = format!("kustomization/{name}");
    let args: Vec<&str> = if suspended {
        vec![
            "suspend",
            &target,
            "-n",
            FLUX_NAMESPACE,
            "--for",
            "4h",
            "--reason",
            "INC-14: stopping Flux to see the silence gauge",
        ]
    } else {
        vec!["resume", &target, "-n", FLUX_NAMESPACE]
    };
    driftgate_cli(ALICE, &args).ok();
}

/// The real kustomize-controller, reconciling every 2s: its dry runs keep the gauge moving;
/// suspended (the controller stops writing there, as a stopped one would), the gauge stays
/// behind until it is older than the threshold and bob is told Flux may be down; resumed, the
/// gauge moves again and bob is no longer told.
#[test]
fn the_real_flux_suspended_crosses_the_threshold_and_resumed_is_seen_again() {
    const SILENT_AFTER: &str = "6s";
    let threshold = 6.0;
    let ns = "silence-real-flux";
    let scene = Scene::new(ns, &[]);
    let driftgate = scene.start(
        "silence-real-flux",
        &["--controller-silence-after", SILENT_AFTER],
    );
    flux().publish(ns, &namespace_with_api(ns));
    flux().kustomize(ns, "2s");
    let first = wait_for("flux's first write", FIRST_APPLY, || {
        flux_last_write(&driftgate, ns)
    });
    // Running, Flux writes on every interval (a dry run of each object at least).
    let moved = wait_for("flux's next interval", FIRST_APPLY, || {
        flux_last_write(&driftgate, ns).filter(|at| *at > first)
    });
    eprintln!("silence: the real Flux wrote at {first:.3}, then at {moved:.3}");

    suspend(ns, true);
    let started = Instant::now();
    let last = wait_for(
        "the gauge to fall behind by more than the threshold",
        FIRST_APPLY,
        || flux_last_write(&driftgate, ns).filter(|at| unix_now() - at > threshold),
    );
    let (told, message) = bob_told_flux_may_be_down(ns, "suspended");
    assert!(told, "{message}");
    assert!(message.contains("rule NotPermitted"), "{message}");
    assert_eq!(
        flux_last_write(&driftgate, ns),
        Some(last),
        "a suspended Flux writes nothing"
    );
    eprintln!(
        "silence: suspended, the gauge crossed {SILENT_AFTER} after {:.1}s; bob was told: {}",
        started.elapsed().as_secs_f64(),
        message.trim()
    );

    suspend(ns, false);
    wait_for("flux's write after the resume", FIRST_APPLY, || {
        flux_last_write(&driftgate, ns).filter(|at| *at > last)
    });
    let message = wait_for("bob's refusal without the silence", FIRST_APPLY, || {
        let (told, message) = bob_told_flux_may_be_down(ns, "resumed");
        (!told).then_some(message)
    });
    assert!(message.contains("rule NotPermitted"), "{message}");
    // Left running, it would reconcile every 2s for the other tests' whole run.
    suspend(ns, true);
}
