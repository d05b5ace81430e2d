//! A stopped controller is seen (issue 14, section 2), on the real API server: a driftgate of its
//! own with `--controller-silence-after 3s`, Flux played by `kubectl apply --server-side
//! --field-manager=kustomize-controller` as its identity. Flux writes, and the gauge of its last
//! write appears; Flux stops; past the threshold bob's refused write says that Flux may be down,
//! and the gauge is older than the threshold. The rules of it (what counts as a write, which
//! refusals say it) are tested in tests/silence.rs and src/silence.rs.

use std::time::{Duration, SystemTime};

use crate::harness::{BOB, Driftgate, KubectlOutput, control_plane};
use crate::ledger::Scene;

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
