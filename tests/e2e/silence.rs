//! A stopped controller is seen (issue 14, section 2), on the real API server: a driftgate of its
//! own with `--controller-silence-after 3s`, Flux played by `kubectl apply --server-side
//! --field-manager=kustomize-controller` as its identity. Flux writes, and the gauge of its last
//! write appears; Flux stops; past the threshold bob's refused write says that Flux may be down,
//! and the gauge is older than the threshold. The rules of it (what counts as a write, which
//! refusals say it) are tested in tests/silence.rs and crates/driftgate-core/src/silence.rs. Then the same with Flux's
//! real kustomize-controller, suspended and resumed. And a real stop: a kustomize-controller of
//! the test's own (the shared one serves every real-Flux test) killed, with driftgate's durable
//! records (`--controller-silence-namespace`): a second replica that reviews nothing agrees,
//! `driftgate backlog` says Flux may be down, and a restarted driftgate still knows the last write.

use std::time::{Duration, Instant, SystemTime};

use crate::harness::chart::NAMESPACE as DRIFTGATE_NAMESPACE;
use crate::harness::flux::{FLUX_NAMESPACE, flux};
use crate::harness::{ADMIN, ALICE, BOB, Driftgate, KubectlOutput, control_plane, driftgate_cli};
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
pub(crate) fn flux_last_write(driftgate: &Driftgate, policy: &str) -> Option<f64> {
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
    // The API server's reviews, authenticated: Flux's dry runs count (without client
    // authentication only the writes the API server stores do).
    let driftgate = scene.start_authenticated("silence", &["--controller-silence-after", "3s"]);
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
pub(crate) fn bob_told_flux_may_be_down(ns: &str, value: &str) -> (bool, String) {
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
    let driftgate = scene.start_authenticated(
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

/// The record (Lease in driftgate's namespace) of `policy`'s flux: its renewTime as Unix
/// seconds and its leaseDurationSeconds, once it exists.
pub(crate) fn flux_record(policy: &str) -> Option<(f64, i64)> {
    let selector = format!(
        "driftgate.dev/record=controller-silence,driftgate.dev/policy={policy},driftgate.dev/controller=flux"
    );
    let out = control_plane()
        .kubectl(
            ADMIN,
            &[
                "get",
                "leases",
                "-n",
                DRIFTGATE_NAMESPACE,
                "-l",
                &selector,
                "-o",
                "json",
            ],
        )
        .ok();
    let list: serde_json::Value = serde_json::from_str(&out.stdout).expect("kubectl prints JSON");
    let items = list["items"].as_array()?;
    assert!(
        items.len() <= 1,
        "one record per policy and controller: {items:#?}"
    );
    let spec = &items.first()?["spec"];
    let renewed: jiff::Timestamp = spec["renewTime"].as_str()?.parse().ok()?;
    Some((
        renewed.as_microsecond() as f64 / 1e6,
        spec["leaseDurationSeconds"].as_i64()?,
    ))
}

/// Lets the group sre-oncall (alice) read the records, as the chart README's on-call Role does;
/// bob may not.
fn grant_on_call_the_records() {
    control_plane()
        .apply(
            ADMIN,
            &format!(
                r#"apiVersion: v1
kind: List
items:
  - apiVersion: rbac.authorization.k8s.io/v1
    kind: Role
    metadata: {{name: driftgate-controller-silence, namespace: {DRIFTGATE_NAMESPACE}}}
    rules:
      - apiGroups: [coordination.k8s.io]
        resources: [leases]
        verbs: [list]
  - apiVersion: rbac.authorization.k8s.io/v1
    kind: RoleBinding
    metadata: {{name: driftgate-controller-silence, namespace: {DRIFTGATE_NAMESPACE}}}
    roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: driftgate-controller-silence}}
    subjects:
      - {{apiGroup: rbac.authorization.k8s.io, kind: Group, name: sre-oncall}}
"#
            ),
        )
        .ok();
}

/// Gauge values are milliseconds, records microseconds.
pub(crate) fn same_time(a: f64, b: f64) -> bool {
    (a - b).abs() < 0.002
}

/// A real stop (issue 14's proof): a kustomize-controller of the test's own reconciles every 2s
/// and the gauge advances; killed, the gauge stays behind until it is older than the threshold,
/// bob's refusal says Flux may be down, and so does `driftgate backlog`. A second driftgate that
/// reviews nothing knows the same last write from the record, and so does the first once
/// restarted.
#[test]
fn a_killed_kustomize_controller_is_seen_by_every_replica_by_backlog_and_after_a_restart() {
    let threshold = 6.0;
    let ns = "silence-stop";
    let args = [
        "--controller-silence-after",
        "6s",
        "--controller-silence-namespace",
        DRIFTGATE_NAMESPACE,
    ];
    let scene = Scene::new(ns, &[]);
    let driftgate = scene.start_authenticated(ns, &args);
    // Registered nowhere: it reviews nothing, and knows Flux only from the record.
    let peer = Driftgate::start("silence-stop-peer", &scene.policy, &args);
    grant_on_call_the_records();

    flux().publish(ns, &namespace_with_api(ns));
    let mut own = flux().start_own(ns);
    flux().kustomize_own(ns, "2s", ns);
    let log = own.log.display().to_string();
    let wait = |what: &str, check: &mut dyn FnMut() -> Option<f64>| -> f64 {
        let deadline = Instant::now() + FIRST_APPLY;
        loop {
            if let Some(value) = check() {
                return value;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; the controller's log: {log}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    let first = wait("the own controller's first write", &mut || {
        flux_last_write(&driftgate, ns)
    });
    let moved = wait("its next interval", &mut || {
        flux_last_write(&driftgate, ns).filter(|at| *at > first)
    });
    let peer_saw = wait("the peer to read a write from the record", &mut || {
        flux_last_write(&peer, ns).filter(|at| *at >= first)
    });
    eprintln!(
        "silence: own kustomize-controller wrote at {first:.3}, then {moved:.3}; the peer read {peer_saw:.3} from the record"
    );

    own.process.kill();
    let killed_at = unix_now();
    let last = wait(
        "the gauge to fall behind by more than the threshold",
        &mut || flux_last_write(&driftgate, ns).filter(|at| unix_now() - at > threshold),
    );
    let (told, message) = bob_told_flux_may_be_down(ns, "killed");
    assert!(told, "{message}");
    assert!(message.contains("rule NotPermitted"), "{message}");
    // A review the API server had in flight at the kill may be decided a moment later.
    assert!(
        last <= killed_at + 1.0,
        "no write after the kill: {last} > {killed_at}"
    );
    let recorded = wait("the record to hold the last write", &mut || {
        flux_record(ns)
            .map(|(at, _)| at)
            .filter(|at| same_time(*at, last))
    });
    assert_eq!(
        flux_record(ns).map(|(_, after)| after),
        Some(6),
        "the threshold is on the record"
    );
    let peer_last = wait("the peer to agree", &mut || {
        flux_last_write(&peer, ns).filter(|at| same_time(*at, last))
    });
    eprintln!(
        "silence: killed at {killed_at:.3}; last write {last:.3} ({:.1}s old), recorded {recorded:.6}, the peer says {peer_last:.3}; bob was told: {}",
        unix_now() - last,
        message.trim()
    );

    // backlog: alice may read the records, bob may not.
    let sentence = format!("flux has not written in policy \"{ns}\"'s namespaces for");
    let alice = driftgate_cli(
        ALICE,
        &[
            "backlog",
            "-n",
            ns,
            "--driftgate-namespace",
            DRIFTGATE_NAMESPACE,
        ],
    )
    .ok();
    let lines: Vec<&str> = alice.stdout.lines().collect();
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with(&sentence) && l.ends_with("; it may be down.")),
        "{}",
        alice.stdout
    );
    let nothing = format!("Nothing to backport in {ns} namespace.");
    assert_eq!(lines.last(), Some(&nothing.as_str()), "{}", alice.stdout);
    let json = driftgate_cli(
        ALICE,
        &[
            "backlog",
            "-n",
            ns,
            "--driftgate-namespace",
            DRIFTGATE_NAMESPACE,
            "-o",
            "json",
        ],
    )
    .ok();
    let json: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    let silent = json["silentControllers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["policy"] == ns)
        .unwrap_or_else(|| panic!("{json:#}"));
    assert_eq!(silent["controller"], "flux");
    assert_eq!(silent["silentAfterSeconds"], 6);
    assert!(
        silent["silentForSeconds"].as_i64().unwrap() >= 6,
        "{silent}"
    );
    assert_eq!(json["items"], serde_json::json!([]));
    let bob = driftgate_cli(
        BOB,
        &[
            "backlog",
            "-n",
            ns,
            "--driftgate-namespace",
            DRIFTGATE_NAMESPACE,
        ],
    )
    .ok();
    assert_eq!(
        bob.stdout,
        format!("Nothing to backport in {ns} namespace.\n")
    );
    assert_eq!(
        bob.stderr.trim_end(),
        format!(
            "Cannot tell whether a GitOps controller looks stopped: bob may not list leases.coordination.k8s.io in namespace {DRIFTGATE_NAMESPACE} (Kubernetes RBAC)."
        )
    );
    eprintln!("silence: alice's backlog: {}", alice.stdout.trim());

    // A restart forgets nothing: the record is read back at start.
    drop(driftgate);
    let restarted = scene.start_authenticated(ns, &args);
    let after_restart = wait("the restarted driftgate to read the record", &mut || {
        flux_last_write(&restarted, ns)
    });
    assert!(
        same_time(after_restart, last),
        "{after_restart} after the restart, {last} before"
    );
    let (told, message) = bob_told_flux_may_be_down(ns, "restarted");
    assert!(told, "{message}");
    eprintln!("silence: restarted, the gauge says {after_restart:.3}");

    // The policy drops flux (renamed): its record is deleted, so backlog no longer calls it
    // stopped.
    let policy = std::fs::read_to_string(&scene.policy).unwrap();
    std::fs::write(
        &scene.policy,
        policy.replace("- name: flux", "- name: gitops"),
    )
    .unwrap();
    wait("the record to be deleted", &mut || {
        flux_record(ns).is_none().then_some(0.0)
    });
    // Each replica reloads on its own tick: the peer may have deleted it first.
    wait("the series to be gone", &mut || {
        flux_last_write(&restarted, ns).is_none().then_some(0.0)
    });
    let alice = driftgate_cli(
        ALICE,
        &[
            "backlog",
            "-n",
            ns,
            "--driftgate-namespace",
            DRIFTGATE_NAMESPACE,
        ],
    )
    .ok();
    assert!(!alice.stdout.contains(&sentence), "{}", alice.stdout);
}
