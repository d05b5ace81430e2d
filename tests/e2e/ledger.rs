//! The backport ledger against a real API server: a break-glass change is recorded in a
//! `BackportRequirement` before it is admitted, the window's expiry moves the record to
//! `AwaitingBackport`, and the GitOps controller's next write settles it (`Backported` or
//! `Reverted`), each with its Event, exactly once even with two replicas.
//!
//! Every test has its own namespace (`ledger-*`, which the shared driftgate's example policy
//! does not guard), its own policy (tests/e2e/ledger-policy.yaml for that namespace alone) and
//! its own driftgate(s), registered for that namespace only, so tests run in parallel without
//! seeing each other's records, Events or metrics.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::harness::forge;
use crate::harness::proxy::{Mode, Proxy};
use crate::harness::{
    ADMIN, ALICE, DRIFTGATE, Driftgate, FLUX, KubectlOutput, control_plane, repo_path,
    webhook_configuration,
};

const BIN: &str = env!("CARGO_BIN_EXE_driftgate");

/// The expiry check interval of the tests' driftgates: expiry is noticed within a second.
pub(crate) const TICK: &[&str] = &["--expiry-check-interval", "1s"];

/// How long after a window's end its record must be `AwaitingBackport`: a few expiry checks,
/// with room for a loaded machine.
const EXPIRY_NOTICED_WITHIN: Duration = Duration::from_secs(15);

/// The window of most tests (the seed scenario's is 20s): long enough for alice's change on a
/// loaded machine, short because the tests wait for it to end.
const WINDOW: &str = "8s";

/// One test's namespace and policy (also used by `faults.rs`).
pub(crate) struct Scene {
    pub(crate) ns: String,
    pub(crate) policy: PathBuf,
}

impl Scene {
    /// Creates namespace `ns` (before any webhook guards it) and writes its policy, the template
    /// with `break_glass_extra` (lines of YAML) added to `spec.breakGlass`.
    pub(crate) fn new(ns: &str, break_glass_extra: &[&str]) -> Scene {
        let control_plane = control_plane();
        control_plane
            .kubectl(ADMIN, &["create", "namespace", ns])
            .ok();
        let template = std::fs::read_to_string(repo_path("tests/e2e/ledger-policy.yaml"))
            .expect("the ledger policy template reads");
        let extra: String = break_glass_extra
            .iter()
            .map(|line| format!("    {line}\n"))
            .collect();
        let policy_text = template
            .replace("__NAMESPACE__", ns)
            .replace("__NAME__", ns)
            .replace("    # __BREAK_GLASS_EXTRA__\n", &extra);
        let policy = control_plane.dir().join(format!("{ns}-policy.yaml"));
        std::fs::write(&policy, policy_text).expect("the policy is written");
        Scene {
            ns: ns.to_owned(),
            policy,
        }
    }

    /// A driftgate with this scene's policy, registered (configuration `driftgate-e2e-NAME`)
    /// for this namespace only.
    pub(crate) fn start(&self, name: &str, extra_args: &[&str]) -> Driftgate {
        let driftgate = Driftgate::start(name, &self.policy, extra_args);
        self.register(&driftgate, name);
        driftgate
    }

    /// [`Scene::start`], requiring the API server's client certificate (`--client-ca-file`):
    /// every review it reads is the API server's, so dry runs and refusals count too.
    pub(crate) fn start_authenticated(&self, name: &str, extra_args: &[&str]) -> Driftgate {
        let client_ca = control_plane()
            .webhook_client_ca_file()
            .display()
            .to_string();
        self.start(
            name,
            &[extra_args, &["--client-ca-file", &client_ca]].concat(),
        )
    }

    pub(crate) fn register(&self, driftgate: &Driftgate, name: &str) {
        let mut configuration = webhook_configuration(
            &format!("driftgate-e2e-{name}"),
            &driftgate.webhook_url(),
            driftgate.ca_pem(),
        );
        configuration["webhooks"][0]["namespaceSelector"] =
            json!({"matchLabels": {"kubernetes.io/metadata.name": self.ns}});
        driftgate.register_probing(configuration, &self.ns);
    }

    /// Flux's server-side apply of Deployment `api` with `replicas`, as kustomize-controller
    /// sends it; `extra` such as `--force-conflicts` or `--dry-run=server`.
    pub(crate) fn flux_apply(&self, replicas: u32, extra: &[&str]) -> KubectlOutput {
        let manifest = format!(
            r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: api
  namespace: {ns}
spec:
  replicas: {replicas}
  selector:
    matchLabels: {{app: api}}
  template:
    metadata:
      labels: {{app: api}}
    spec:
      containers:
        - name: api
          image: registry.example/payments-api:1.4.2
"#,
            ns = self.ns
        );
        let mut args = vec![
            "apply",
            "--server-side",
            "--field-manager=kustomize-controller",
        ];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["-f", "-"]);
        control_plane().kubectl_with_stdin(FLUX, &args, Some(&manifest))
    }

    /// `driftgate break-glass open deployment/api` as alice, which must succeed.
    pub(crate) fn open_window(&self, duration: &str, reason: &str) {
        let out = Command::new(BIN)
            .args(["break-glass", "open", "deployment/api", "-n", &self.ns])
            .args(["--for", duration, "--reason", reason])
            .arg("--kubeconfig")
            .arg(control_plane().kubeconfig(ALICE))
            .env_remove("KUBECONFIG")
            .output()
            .expect("driftgate break-glass runs");
        assert!(
            out.status.success(),
            "driftgate break-glass open failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// `kubectl scale deployment/api --replicas=N` as alice.
    pub(crate) fn alice_scale(&self, replicas: u32, extra: &[&str]) -> KubectlOutput {
        let replicas = format!("--replicas={replicas}");
        let mut args = vec!["scale", "deployment/api", "-n", &self.ns, &replicas];
        args.extend_from_slice(extra);
        control_plane().kubectl(ALICE, &args)
    }

    pub(crate) fn replicas(&self) -> String {
        control_plane()
            .kubectl(
                ADMIN,
                &[
                    "get",
                    "deployment/api",
                    "-n",
                    &self.ns,
                    "-o",
                    "jsonpath={.spec.replicas}",
                ],
            )
            .ok()
            .stdout
    }

    /// Every BackportRequirement in the namespace.
    pub(crate) fn records(&self) -> Vec<Value> {
        let out = control_plane()
            .kubectl(
                ADMIN,
                &["get", "backportrequirements", "-n", &self.ns, "-o", "json"],
            )
            .ok();
        let list: Value = serde_json::from_str(&out.stdout).expect("a list as JSON");
        list["items"].as_array().cloned().unwrap_or_default()
    }

    /// The namespace's only record.
    #[track_caller]
    pub(crate) fn record(&self) -> Value {
        let mut records = self.records();
        assert_eq!(records.len(), 1, "one record expected: {records:#?}");
        records.remove(0)
    }

    /// Events (events.k8s.io) about Deployment `api` with `reason`.
    fn events(&self, reason: &str) -> Vec<Value> {
        let out = control_plane()
            .kubectl(
                ADMIN,
                &["get", "events.events.k8s.io", "-n", &self.ns, "-o", "json"],
            )
            .ok();
        let list: Value = serde_json::from_str(&out.stdout).expect("a list as JSON");
        list["items"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|e| {
                e["reason"] == reason
                    && e["regarding"]["kind"] == "Deployment"
                    && e["regarding"]["name"] == "api"
            })
            .collect()
    }

    /// Waits for the namespace's record to reach `phase`, and returns it.
    pub(crate) fn wait_for_phase(
        &self,
        phase: &str,
        timeout: Duration,
        driftgates: &[&Driftgate],
    ) -> Value {
        wait_for(
            &format!("the record in {} to be {phase}", self.ns),
            timeout,
            driftgates,
            || {
                let records = self.records();
                records
                    .iter()
                    .any(|r| r["status"]["phase"] == phase)
                    .then(|| {
                        assert_eq!(records.len(), 1, "one record expected: {records:#?}");
                        records[0].clone()
                    })
            },
        )
    }

    /// Waits until the namespace's record is `AwaitingBackport`, at most
    /// [`EXPIRY_NOTICED_WITHIN`] after its window ended, and returns it.
    pub(crate) fn wait_for_expiry(&self, driftgates: &[&Driftgate]) -> Value {
        let left = until_expiry(&self.record());
        self.wait_for_phase("AwaitingBackport", left + EXPIRY_NOTICED_WITHIN, driftgates)
    }

    /// Waits until one Event of `reason` about Deployment `api` exists, and returns it.
    fn wait_for_event(&self, reason: &str, driftgates: &[&Driftgate]) -> Value {
        wait_for(
            &format!("a {reason} Event on deployment {}/api", self.ns),
            Duration::from_secs(15),
            driftgates,
            || self.events(reason).into_iter().next(),
        )
    }
}

/// Polls `probe` every 100 ms until it gives a value; on timeout panics with the driftgates'
/// logs.
#[track_caller]
pub(crate) fn wait_for<T>(
    what: &str,
    timeout: Duration,
    driftgates: &[&Driftgate],
    mut probe: impl FnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = probe() {
            return value;
        }
        if Instant::now() > deadline {
            let logs: Vec<String> = driftgates.iter().map(|d| d.log_tail(30)).collect();
            panic!(
                "timed out after {timeout:?} waiting for {what}; driftgate's log:\n{}",
                logs.join("\n-----\n")
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// How long until `record`'s window ends (zero once it has).
fn until_expiry(record: &Value) -> Duration {
    let expires: jiff::Timestamp = record["spec"]["window"]["expiresAt"]
        .as_str()
        .and_then(|t| t.parse().ok())
        .expect("the record has an expiry");
    Duration::try_from(expires.duration_since(jiff::Timestamp::now())).unwrap_or_default()
}

/// The phases of a record's `status.transitions`, with their reasons.
fn transitions(record: &Value) -> Vec<(String, String)> {
    record["status"]["transitions"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|t| {
            (
                t["phase"].as_str().unwrap_or_default().to_owned(),
                t["reason"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

fn pairs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
    expected
        .iter()
        .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
        .collect()
}

/// The seed scenario: Flux's Deployment, alice's window and scale, the window's expiry, and
/// Flux re-applying the old replica count from Git.
#[test]
fn an_emergency_change_flux_reverts_is_recorded_expired_and_reported_reverted() {
    let scene = Scene::new("ledger-seed", &[]);
    let driftgate = scene.start("ledger-seed", TICK);
    let dg = &[&driftgate];
    scene.flux_apply(2, &[]).ok();

    let reason = "INC-1: api saturated, scaling out";
    scene.open_window("20s", reason);
    let scaled = scene.alice_scale(5, &[]).ok();
    assert!(
        scaled.stderr.contains("backport it to Git"),
        "alice is warned: {}",
        scaled.stderr
    );

    let record = scene.record();
    let spec = &record["spec"];
    assert_eq!(spec["window"]["opener"], "alice", "{record:#}");
    assert_eq!(spec["window"]["reason"], reason, "{record:#}");
    assert_eq!(spec["object"]["kind"], "Deployment", "{record:#}");
    assert_eq!(spec["object"]["name"], "api", "{record:#}");
    let changes = spec["changes"].as_array().expect("changes");
    assert_eq!(changes.len(), 1, "{record:#}");
    assert_eq!(changes[0]["user"], "alice", "{record:#}");
    assert_eq!(changes[0]["subresource"], "scale", "{record:#}");
    assert_eq!(
        changes[0]["fields"][0]["path"], "spec.replicas",
        "{record:#}"
    );
    assert!(
        changes[0]["fields"][0]["digest"]
            .as_str()
            .is_some_and(|d| d.starts_with("sha256:")),
        "{record:#}"
    );
    assert_eq!(
        transitions(&record),
        pairs(&[("Open", "Opened")]),
        "{record:#}"
    );

    let awaiting = scene.wait_for_expiry(dg);
    assert_eq!(
        transitions(&awaiting),
        pairs(&[("Open", "Opened"), ("AwaitingBackport", "Expired")]),
        "{awaiting:#}"
    );
    let expired = scene.wait_for_event("BreakGlassExpired", dg);
    assert_eq!(expired["type"], "Normal", "{expired:#}");
    assert!(
        expired["note"]
            .as_str()
            .unwrap_or_default()
            .contains("alice"),
        "{expired:#}"
    );

    // Git still says 2: Flux takes spec.replicas back, as it does, by force.
    scene.flux_apply(2, &["--force-conflicts"]).ok();
    assert_eq!(scene.replicas(), "2");
    let reverted = scene.wait_for_phase("Reverted", Duration::from_secs(15), dg);
    assert_eq!(
        reverted["status"]["revertedFields"],
        json!(["spec.replicas"]),
        "{reverted:#}"
    );
    assert_eq!(
        transitions(&reverted),
        pairs(&[
            ("Open", "Opened"),
            ("AwaitingBackport", "Expired"),
            ("Reverted", "ControllerRevertedChange")
        ]),
        "{reverted:#}"
    );
    let event = scene.wait_for_event("EmergencyChangeReverted", dg);
    assert_eq!(event["type"], "Warning", "{event:#}");
    let note = event["note"].as_str().unwrap_or_default();
    for words in ["spec.replicas", "alice", reason] {
        assert!(note.contains(words), "the note names {words:?}: {note}");
    }
    assert_eq!(
        driftgate.counter("driftgate_emergency_changes_reverted_total", &[]),
        1.0
    );
}

/// Git caught up: Flux applies the fixed replica count, and the record is `Backported`.
/// `kubectl get backportrequirements -A` shows the columns an on-call engineer needs.
#[test]
fn an_emergency_change_git_caught_up_with_is_confirmed_backported() {
    let scene = Scene::new("ledger-backport", &[]);
    let driftgate = scene.start("ledger-backport", TICK);
    let dg = &[&driftgate];
    scene.flux_apply(2, &[]).ok();
    let reason = "INC-2: api saturated, scaling out";
    scene.open_window(WINDOW, reason);
    scene.alice_scale(5, &[]).ok();

    let table = control_plane()
        .kubectl(ADMIN, &["get", "backportrequirements", "-A"])
        .ok()
        .stdout;
    let mut lines = table.lines();
    let header: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        [
            "NAMESPACE",
            "NAME",
            "PHASE",
            "KIND",
            "OBJECT",
            "OPENER",
            "REASON",
            "EXPIRES",
            "AGE"
        ],
        "{table}"
    );
    let row = lines
        .find(|l| l.starts_with("ledger-backport "))
        .unwrap_or_else(|| panic!("a row for ledger-backport:\n{table}"));
    let expires = scene.record()["spec"]["window"]["expiresAt"]
        .as_str()
        .expect("an expiry")
        .to_owned();
    for words in ["Open", "Deployment", "api", "alice", reason, &expires] {
        assert!(row.contains(words), "the row shows {words:?}:\n{table}");
    }
    assert!(
        !row.contains("<invalid>") && !row.contains("<none>"),
        "every column has a value:\n{table}"
    );

    scene.wait_for_expiry(dg);
    // The fix was merged in Git: Flux applies 5.
    scene.flux_apply(5, &["--force-conflicts"]).ok();
    let backported = scene.wait_for_phase("Backported", Duration::from_secs(15), dg);
    assert_eq!(
        transitions(&backported),
        pairs(&[
            ("Open", "Opened"),
            ("AwaitingBackport", "Expired"),
            ("Backported", "ControllerCarriedChange")
        ]),
        "{backported:#}"
    );
    let event = scene.wait_for_event("BackportConfirmed", dg);
    assert_eq!(event["type"], "Normal", "{event:#}");
    assert!(scene.events("EmergencyChangeReverted").is_empty());
    assert_eq!(
        driftgate.counter("driftgate_emergency_changes_reverted_total", &[]),
        0.0
    );
}

/// `breakGlass.refuseRevertsFor`: while the record is young, Flux may not undo the change,
/// neither for real nor in its server-side dry run; carrying it is admitted.
#[test]
fn refuse_reverts_for_refuses_flux_undoing_a_young_emergency_change() {
    let scene = Scene::new("ledger-refuse", &["refuseRevertsFor: 1h"]);
    let driftgate = scene.start("ledger-refuse", TICK);
    let dg = &[&driftgate];
    scene.flux_apply(2, &[]).ok();
    scene.open_window(WINDOW, "INC-3: api saturated, scaling out");
    scene.alice_scale(5, &[]).ok();
    scene.wait_for_expiry(dg);

    for extra in [
        &["--force-conflicts"][..],
        &["--force-conflicts", "--dry-run=server"],
    ] {
        let refused = scene.flux_apply(2, extra).failed();
        for words in [
            "may not revert the emergency change recorded in BackportRequirement",
            "spec.replicas",
            "alice",
            "rule RevertRefused",
        ] {
            assert!(
                refused.stderr.contains(words),
                "{extra:?}: the refusal says {words:?}:\n{}",
                refused.stderr
            );
        }
    }
    assert_eq!(scene.replicas(), "5");
    assert_eq!(scene.record()["status"]["phase"], "AwaitingBackport");
    // The refusal is its own rule in the metrics (and so in the audit annotation and the log),
    // and the real write, not its dry run, has a Warning Event.
    assert_eq!(
        driftgate.counter(
            "driftgate_admission_reviews_total",
            &["decision=\"denied\"", "rule=\"RevertRefused\""]
        ),
        2.0,
        "the write and its dry run"
    );
    let event = scene.wait_for_event("RevertRefused", dg);
    assert_eq!(event["type"], "Warning", "{event:#}");
    assert!(
        event["note"]
            .as_str()
            .is_some_and(|note| note.contains("rule RevertRefused")),
        "{event:#}"
    );
    assert_one_event(&scene, "RevertRefused");

    scene.flux_apply(5, &["--force-conflicts"]).ok();
    scene.wait_for_phase("Backported", Duration::from_secs(15), dg);
}

/// A dry run under a window changes nothing, so nothing is recorded; a controller's one dry
/// run settles nothing either, when a real write of another value follows it.
#[test]
fn dry_runs_record_nothing_and_a_real_write_after_a_dry_run_decides() {
    let scene = Scene::new("ledger-dry-run", &[]);
    let driftgate = scene.start("ledger-dry-run", TICK);
    let dg = &[&driftgate];
    scene.flux_apply(2, &[]).ok();
    scene.open_window(WINDOW, "INC-6: api saturated, scaling out");
    let changes = || {
        scene.record()["spec"]["changes"]
            .as_array()
            .map_or(0, Vec::len)
    };
    assert_eq!(changes(), 0);

    scene.alice_scale(7, &["--dry-run=server"]).ok();
    control_plane()
        .kubectl(
            ALICE,
            &[
                "patch",
                "deployment/api",
                "-n",
                &scene.ns,
                "--dry-run=server",
                "-p",
                r#"{"spec":{"minReadySeconds":30}}"#,
            ],
        )
        .ok();
    assert_eq!(changes(), 0, "dry runs are not recorded");
    scene.alice_scale(5, &[]).ok();
    assert_eq!(changes(), 1);
    scene.alice_scale(9, &["--dry-run=server"]).ok();
    assert_eq!(changes(), 1, "dry runs are not recorded");
    assert_eq!(scene.replicas(), "5");

    scene.wait_for_expiry(dg);
    // Flux's dry run with the fixed count would confirm the backport, and its real apply of the
    // old count reverts it: only the real write counts.
    scene
        .flux_apply(5, &["--force-conflicts", "--dry-run=server"])
        .ok();
    scene.flux_apply(2, &["--force-conflicts"]).ok();
    let settled = scene.wait_for_phase("Reverted", Duration::from_secs(15), dg);
    assert_eq!(
        transitions(&settled),
        pairs(&[
            ("Open", "Opened"),
            ("AwaitingBackport", "Expired"),
            ("Reverted", "ControllerRevertedChange")
        ]),
        "{settled:#}"
    );
    scene.wait_for_event("EmergencyChangeReverted", dg);
    assert!(scene.events("BackportConfirmed").is_empty());
}

/// Flux skips the apply when its dry run shows no change: once Git has the emergency values,
/// only its dry runs arrive. The second one carrying them confirms the backport.
/// A dry run leaves nothing stored to confirm it by, so only the API server's word for it,
/// authenticated by its client certificate (`--client-ca-file`), may settle a record.
#[test]
fn two_controller_dry_runs_carrying_the_values_confirm_the_backport() {
    let scene = Scene::new("ledger-dry-runs", &[]);
    let driftgate = scene.start_authenticated("ledger-dry-runs", TICK);
    let dg = &[&driftgate];
    scene.flux_apply(2, &[]).ok();
    scene.open_window(WINDOW, "INC-14: api saturated, scaling out");
    scene.alice_scale(5, &[]).ok();
    scene.wait_for_expiry(dg);

    let dry_run = || {
        scene
            .flux_apply(5, &["--force-conflicts", "--dry-run=server"])
            .ok();
    };
    dry_run();
    // The first is remembered on the record, which still awaits backport.
    let start = std::time::Instant::now();
    while scene.record()["status"]["dryRunMatch"].is_null() {
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "the dry run was not remembered: {:#}",
            scene.record()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let record = scene.record();
    assert_eq!(record["status"]["phase"], "AwaitingBackport", "{record:#}");
    assert_eq!(
        record["status"]["dryRunMatch"]["user"],
        "system:serviceaccount:flux-system:kustomize-controller"
    );
    // A reconcile later (more than a second), the next dry run confirms it.
    std::thread::sleep(Duration::from_millis(1100));
    dry_run();
    let settled = scene.wait_for_phase("Backported", Duration::from_secs(15), dg);
    assert_eq!(
        transitions(&settled),
        pairs(&[
            ("Open", "Opened"),
            ("AwaitingBackport", "Expired"),
            ("Backported", "ControllerFoundNothingToApply")
        ]),
        "{settled:#}"
    );
    let event = scene.wait_for_event("BackportConfirmed", dg);
    assert!(
        event["note"]
            .as_str()
            .is_some_and(|note| note.contains("twice and applied nothing between")),
        "{event:#}"
    );
    assert_eq!(scene.replicas(), "5", "dry runs change nothing");
}

/// The Events of `reason` about Deployment `api`, each once: one Event object, not a series.
#[track_caller]
fn assert_one_event(scene: &Scene, reason: &str) {
    let events = scene.events(reason);
    assert_eq!(events.len(), 1, "one {reason} Event: {events:#?}");
    assert!(
        events[0]["series"].is_null() && events[0]["deprecatedCount"].as_i64().unwrap_or(1) <= 1,
        "published once, not repeated: {events:#?}"
    );
}

/// The sum of a metric over several driftgates.
fn total(driftgates: &[&Driftgate], name: &str, labels: &[&str]) -> f64 {
    driftgates.iter().map(|d| d.counter(name, labels)).sum()
}

/// Two replicas against one API server, both called for every write (one webhook
/// configuration each) and both running the expiry check: the change is recorded once, and
/// each transition and each Event happens once.
#[test]
fn two_replicas_record_transition_and_report_each_thing_once() {
    let scene = Scene::new("ledger-replicas", &[]);
    let a = Driftgate::start("ledger-replicas-a", &scene.policy, TICK);
    let b = Driftgate::start("ledger-replicas-b", &scene.policy, TICK);
    scene.register(&a, "ledger-replicas-a");
    scene.register(&b, "ledger-replicas-b");
    let both = &[&a, &b];
    scene.flux_apply(2, &[]).ok();
    scene.open_window(WINDOW, "INC-4: api saturated, scaling out");
    scene.alice_scale(5, &[]).ok();

    let record = scene.record();
    let changes = record["spec"]["changes"].as_array().expect("changes");
    assert_eq!(changes.len(), 1, "recorded once: {record:#}");
    assert_eq!(
        transitions(&record),
        pairs(&[("Open", "Opened")]),
        "{record:#}"
    );

    scene.wait_for_expiry(both);
    // Both have run an expiry check that saw the record awaiting backport: neither will try to
    // expire it again.
    wait_for(
        "both replicas to count the record as awaiting backport",
        Duration::from_secs(10),
        both,
        || {
            both.iter()
                .all(|d| d.counter("driftgate_backport_pending", &[]) == 1.0)
                .then_some(())
        },
    );
    scene.wait_for_event("BreakGlassExpired", both);
    // A second Event would already be queued; give it a few ticks to show.
    std::thread::sleep(Duration::from_secs(2));
    assert_one_event(&scene, "BreakGlassExpired");
    assert_eq!(
        total(
            both,
            "driftgate_events_published_total",
            &["reason=\"BreakGlassExpired\""]
        ),
        1.0
    );

    scene.flux_apply(2, &["--force-conflicts"]).ok();
    let reverted = scene.wait_for_phase("Reverted", Duration::from_secs(15), both);
    scene.wait_for_event("EmergencyChangeReverted", both);
    // Both replicas judged the write; the loser's conditioned patch fails at once.
    std::thread::sleep(Duration::from_secs(2));
    let reverted_now = scene.record();
    assert_eq!(
        reverted_now, reverted,
        "nothing changed the record after it was settled"
    );
    assert_eq!(
        transitions(&reverted),
        pairs(&[
            ("Open", "Opened"),
            ("AwaitingBackport", "Expired"),
            ("Reverted", "ControllerRevertedChange")
        ]),
        "{reverted:#}"
    );
    assert_one_event(&scene, "EmergencyChangeReverted");
    assert_eq!(
        total(both, "driftgate_emergency_changes_reverted_total", &[]),
        1.0
    );
    assert_eq!(
        total(
            both,
            "driftgate_events_published_total",
            &["reason=\"EmergencyChangeReverted\""]
        ),
        1.0
    );
}

/// The API server unreachable for driftgate (but not for anyone else) while alice changes the
/// object under an open window: driftgate cannot record the change, so it refuses it, saying
/// so and to retry; once driftgate reaches the API server again, the same change is admitted
/// and recorded.
#[test]
fn a_break_glass_change_that_cannot_be_recorded_is_refused_until_it_can() {
    let scene = Scene::new("ledger-unreachable", &[]);
    let proxy = Proxy::to_api_server();
    let driftgate = Driftgate::start_with_kubeconfig(
        "ledger-unreachable",
        &scene.policy,
        &proxy.kubeconfig_for(DRIFTGATE),
        TICK,
    );
    scene.register(&driftgate, "ledger-unreachable");
    let dg = &[&driftgate];
    scene.flux_apply(2, &[]).ok();
    scene.open_window("90s", "INC-5: api saturated, scaling out");

    let patch = |replicas: u32| {
        control_plane().kubectl(
            ALICE,
            &[
                "patch",
                "deployment/api",
                "-n",
                &scene.ns,
                "-p",
                &format!(r#"{{"spec":{{"replicas":{replicas}}}}}"#),
            ],
        )
    };
    for mode in [Mode::Refuse, Mode::Hang] {
        proxy.set(mode);
        let refused = patch(4).failed();
        assert_refused_unrecorded(&format!("{mode:?}"), &refused.stderr, &driftgate);
        let refused = scene.alice_scale(5, &[]).failed();
        assert!(
            refused.stderr.contains("Retry") || refused.stderr.contains("retry"),
            "{mode:?}: the refusal of the scale says to retry:\n{}",
            refused.stderr
        );
    }
    assert_eq!(scene.replicas(), "2", "nothing was admitted unrecorded");
    assert_eq!(scene.record()["spec"]["changes"], json!([]));
    assert_eq!(
        driftgate.counter(
            "driftgate_admission_reviews_total",
            &["decision=\"denied\"", "rule=\"LedgerUnavailable\""]
        ),
        2.0,
        "alice's patch, refused once per mode, is counted by its own rule"
    );

    proxy.set(Mode::Forward);
    // As the refusal says: retry in a moment.
    wait_for(
        "alice's scale to be admitted once driftgate reaches the API server",
        Duration::from_secs(20),
        dg,
        || scene.alice_scale(5, &[]).success().then_some(()),
    );
    assert_eq!(scene.replicas(), "5");
    let record = scene.record();
    let changes = record["spec"]["changes"].as_array().expect("changes");
    assert_eq!(changes.len(), 1, "{record:#}");
    assert_eq!(
        changes[0]["fields"][0]["path"], "spec.replicas",
        "{record:#}"
    );
}

/// Sleeps until `record`'s window has ended, plus `after`.
fn sleep_past_expiry(record: &Value, after: Duration) {
    std::thread::sleep(until_expiry(record) + after);
}

/// Driftgate looks after the records of the namespaces its policies guard, not those of
/// another installation (or another test's driftgate); and Flux writing between a window's end
/// and the next expiry check is judged all the same (`refuseRevertsFor` included).
#[test]
fn a_window_ends_for_its_own_driftgate_and_for_no_other() {
    let scene = Scene::new("ledger-own", &["refuseRevertsFor: 1h"]);
    // Its expiry check never comes round during the test.
    let driftgate = scene.start("ledger-own", &["--expiry-check-interval", "1h"]);
    let other_scene = Scene::new("ledger-other", &[]);
    let other = Driftgate::start("ledger-other", &other_scene.policy, TICK);
    scene.flux_apply(2, &[]).ok();
    scene.open_window("5s", "INC-7: api saturated, scaling out");
    scene.alice_scale(5, &[]).ok();

    // The other driftgate checks expiry every second; a few checks pass after the window ends.
    sleep_past_expiry(&scene.record(), Duration::from_secs(3));
    let record = scene.record();
    assert_eq!(
        transitions(&record),
        pairs(&[("Open", "Opened")]),
        "another namespace's driftgate left the record alone: {record:#}"
    );
    assert!(scene.events("BreakGlassExpired").is_empty());
    assert_eq!(
        total(&[&other], "driftgate_events_published_total", &[]),
        0.0
    );
    assert_eq!(
        other.counter("driftgate_break_glass_windows_open", &[])
            + other.counter("driftgate_backport_pending", &[]),
        0.0,
        "its gauges count only its own namespaces"
    );

    // Flux writes before its own driftgate's next expiry check: the record is judged all the
    // same, so the revert is refused (refuseRevertsFor), and the backport is recorded with the
    // window's expiry first.
    let dg = &[&driftgate];
    let refused = scene.flux_apply(2, &["--force-conflicts"]).failed();
    assert!(
        refused.stderr.contains("rule RevertRefused"),
        "{}",
        refused.stderr
    );
    assert_eq!(scene.replicas(), "5");
    scene.flux_apply(5, &["--force-conflicts"]).ok();
    let backported = scene.wait_for_phase("Backported", Duration::from_secs(15), dg);
    assert_eq!(
        transitions(&backported),
        pairs(&[
            ("Open", "Opened"),
            ("AwaitingBackport", "Expired"),
            ("Backported", "ControllerCarriedChange")
        ]),
        "{backported:#}"
    );
    scene.wait_for_event("BreakGlassExpired", dg);
    scene.wait_for_event("BackportConfirmed", dg);
    assert_one_event(&scene, "BreakGlassExpired");
    assert_one_event(&scene, "BackportConfirmed");
}

/// A window opened again after the last one ended (before the expiry check noticed) is a new
/// record; the old one is expired then, with its Event.
#[test]
fn a_window_opened_after_the_last_one_ended_has_its_own_record() {
    let scene = Scene::new("ledger-reopen", &[]);
    let driftgate = scene.start("ledger-reopen", &["--expiry-check-interval", "1h"]);
    let dg = &[&driftgate];
    scene.flux_apply(2, &[]).ok();
    scene.open_window("5s", "INC-8: api saturated, scaling out");
    scene.alice_scale(5, &[]).ok();
    sleep_past_expiry(&scene.record(), Duration::from_millis(500));
    scene.open_window("30s", "INC-8: still saturated, scaling out more");
    scene.alice_scale(6, &[]).ok();

    let mut records = scene.records();
    assert_eq!(records.len(), 2, "one record per window: {records:#?}");
    records.sort_by_key(|r| r["spec"]["window"]["expiresAt"].as_str().map(str::to_owned));
    let (first, second) = (&records[0], &records[1]);
    assert_eq!(
        transitions(first),
        pairs(&[("Open", "Opened"), ("AwaitingBackport", "Expired")]),
        "{first:#}"
    );
    assert_eq!(
        transitions(second),
        pairs(&[("Open", "Opened")]),
        "{second:#}"
    );
    for (record, reason) in [
        (first, "INC-8: api saturated, scaling out"),
        (second, "INC-8: still saturated, scaling out more"),
    ] {
        assert_eq!(record["spec"]["window"]["reason"], reason, "{record:#}");
        let changes = record["spec"]["changes"].as_array().expect("changes");
        assert_eq!(changes.len(), 1, "{record:#}");
    }
    scene.wait_for_event("BreakGlassExpired", dg);
    assert_one_event(&scene, "BreakGlassExpired");
}

/// The refusal of a break-glass change driftgate could not record in its ledger says so, that
/// the change was not made, and to retry.
pub(crate) fn assert_refused_unrecorded(what: &str, stderr: &str, driftgate: &Driftgate) {
    for words in [
        "could not record this break-glass change",
        "so it was not made",
        "Retry",
    ] {
        assert!(
            stderr.contains(words),
            "{what}: the refusal says {words:?}:\n{stderr}\ndriftgate's log:\n{}",
            driftgate.log_tail(10)
        );
    }
}

/// A review is a claim: anyone who reaches driftgate's port can POST one. Forged reviews that
/// name Flux (a real apply carrying alice's values, two dry runs a reconcile apart) settle
/// nothing: the record stays AwaitingBackport, with no dry-run mark and no BackportConfirmed
/// Event, since the object as the API server stored it shows no such write. Then the real
/// Flux's apply, which the API server stores, settles it.
#[test]
fn forged_flux_reviews_settle_nothing_and_the_real_apply_does() {
    let scene = Scene::new("ledger-forged", &[]);
    let driftgate = scene.start("ledger-forged", TICK);
    let dg = &[&driftgate];
    scene.flux_apply(2, &[]).ok();
    scene.open_window(WINDOW, "INC-24: api saturated, scaling out");
    scene.alice_scale(5, &[]).ok();
    scene.wait_for_expiry(dg);

    let live: Value = serde_json::from_str(
        &control_plane()
            .kubectl(
                ADMIN,
                &["get", "deployment/api", "-n", &scene.ns, "-o", "json"],
            )
            .ok()
            .stdout,
    )
    .expect("the Deployment as JSON");
    // What Flux would send if Git had alice's 5: its own Apply entry owning spec.replicas.
    let mut claimed = live.clone();
    claimed["spec"]["replicas"] = json!(5);
    claimed["metadata"]["managedFields"] = json!([{
        "manager": "kustomize-controller", "operation": "Apply", "apiVersion": "apps/v1",
        "time": "2026-12-02T00:00:00Z", "fieldsType": "FieldsV1",
        "fieldsV1": {"f:spec": {"f:replicas": {}}},
    }]);
    let forge_apply = |dry_run: bool| {
        let mut request = forge::request(
            forge::DEPLOYMENT,
            "UPDATE",
            &scene.ns,
            "api",
            FLUX,
            (claimed.clone(), live.clone()),
            forge::apply_options("kustomize-controller"),
        );
        request["dryRun"] = json!(dry_run);
        let answer = forge::forge(&driftgate, request);
        assert_eq!(answer["allowed"], true, "{answer:#}");
    };
    forge_apply(false);
    forge_apply(true);
    std::thread::sleep(Duration::from_millis(1100));
    forge_apply(true);
    // Longer than driftgate reads a write back (about 6 s), and several expiry ticks.
    std::thread::sleep(Duration::from_secs(8));
    let record = scene.record();
    assert_eq!(record["status"]["phase"], "AwaitingBackport", "{record:#}");
    assert!(record["status"]["dryRunMatch"].is_null(), "{record:#}");
    assert!(scene.events("BackportConfirmed").is_empty());
    assert_eq!(scene.replicas(), "5");

    // The real apply, stored by the API server, settles it.
    scene.flux_apply(5, &["--force-conflicts"]).ok();
    let backported = scene.wait_for_phase("Backported", Duration::from_secs(15), dg);
    assert_eq!(
        transitions(&backported).last(),
        Some(&(
            "Backported".to_owned(),
            "ControllerCarriedChange".to_owned()
        )),
        "{backported:#}"
    );
}
