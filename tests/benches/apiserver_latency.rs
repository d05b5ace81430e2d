//! What a user feels on the real control plane: the latency of Flux-identity server-side
//! applies of a Deployment in a protected namespace, sent with a kube-rs client to a real
//! kube-apiserver (the e2e harness's, v1.35.4, with etcd), in three configurations:
//!
//! 1. no admission webhook or policy;
//! 2. driftgate (the release binary, `policies/example.yaml`) registered through the Helm
//!    chart's ValidatingWebhookConfiguration (failurePolicy Fail);
//! 3. a ValidatingAdmissionPolicy in CEL equivalent to the example's production policy as far
//!    as CEL can go (no time check on break-glass windows).
//!
//! Each configuration is checked before it is measured (bob is refused by it, Flux admitted;
//! for the CEL policy also the break-glass branch), and a refused or wrongly admitted write
//! stops the benchmark: otherwise the comparison would mean nothing. The configurations
//! alternate over several rounds, rotating their order, so that a drift of the machine's load
//! spreads over all three; besides the pooled percentiles it reports each round's Flux p50
//! differences (driftgate − none, CEL − none, driftgate − CEL) as a median and range over the
//! rounds, which a drift between rounds does not move. A second, shorter series is bob's
//! `kubectl edit`-like patch: admitted without a gate, refused by driftgate and by the CEL policy
//! (the cost of the denial path).
//!
//! `cargo bench --bench apiserver_latency -- [--writes 500] [--denied 100] [--rounds 10]
//! [--warmup 20] [--wait-load 1.0] [--wait-max 600] [--no-record]`
//!
//! Prints a markdown table and, unless `--no-record`, writes the run's raw output to
//! `tests/benches/results/apiserver-latency.txt` and a markdown section to
//! `tests/benches/results/apiserver-latency.md`. It is a benchmark: nothing here asserts a time.

#[path = "../e2e/harness/mod.rs"]
mod harness;

use std::fmt::Write as _;
use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};
use tokio::runtime::Runtime;

use harness::{
    ADMIN, ALICE, BOB, Driftgate, FLUX, control_plane, repo_path, webhook_configuration,
};

/// Guarded by the example policy's production policy (`prod-*`).
const NAMESPACE: &str = "prod-latency";
const DEPLOYMENT: &str = "api";
/// A ConfigMap that carries a break-glass label, for checking the CEL policy's window branch.
const WINDOWED: &str = "windowed";
const WEBHOOK_CONFIGURATION: &str = "driftgate-latency";
const VAP: &str = "driftgate-latency-production";
/// How the API server words a refusal by each gate.
const DRIFTGATE_DENIAL: &str = "admission webhook \"gate.driftgate.dev\" denied the request";
const VAP_DENIAL: &str = "ValidatingAdmissionPolicy 'driftgate-latency-production'";
const FLUX_FIELD_MANAGER: &str = "kustomize-controller";
const BREAK_GLASS_LABEL: &str = "driftgate.dev/break-glass";
/// How long a configuration change may take to reach the API server's admission chain.
const SWITCH_DEADLINE: Duration = Duration::from_secs(60);

/// The example policy's production policy in CEL, as far as CEL can go. Kept: the scope
/// (namespaces `prod-*` but `prod-sandbox`, and `payments`; every kind but the excluded run-time
/// ones; the object and its `scale`), the controllers' usernames, the HPA's `scale`, and
/// break-glass: a `sre-oncall` member may write while the label is on the stored object or on
/// its Namespace. Left out: the window's expiry (CEL here has no clock), field managers, the
/// HPA's field limit, opening and closing windows, holding the controller off, the ledger.
const VAP_MANIFEST: &str = r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: driftgate-latency-production}
spec:
  failurePolicy: Fail
  matchConstraints:
    matchPolicy: Equivalent
    resourceRules:
      - apiGroups: ["*"]
        apiVersions: ["*"]
        operations: [CREATE, UPDATE, DELETE]
        resources: ["*", "*/scale"]
        scope: Namespaced
    excludeResourceRules:
      - {apiGroups: [""], apiVersions: ["*"], operations: ["*"], resources: [events, pods, endpoints, persistentvolumeclaims]}
      - {apiGroups: [events.k8s.io], apiVersions: ["*"], operations: ["*"], resources: [events]}
      - {apiGroups: [coordination.k8s.io], apiVersions: ["*"], operations: ["*"], resources: [leases]}
      - {apiGroups: [apps], apiVersions: ["*"], operations: ["*"], resources: [replicasets, controllerrevisions]}
      - {apiGroups: [batch], apiVersions: ["*"], operations: ["*"], resources: [jobs]}
      - {apiGroups: [discovery.k8s.io], apiVersions: ["*"], operations: ["*"], resources: [endpointslices]}
      - {apiGroups: [driftgate.dev], apiVersions: ["*"], operations: ["*"], resources: ["*"]}
  matchConditions:
    - name: protected-namespace
      expression: >-
        (request.namespace.startsWith('prod-') && request.namespace != 'prod-sandbox')
        || request.namespace == 'payments'
  variables:
    - name: controller
      expression: >-
        request.userInfo.username in [
          'system:serviceaccount:flux-system:kustomize-controller',
          'system:serviceaccount:flux-system:helm-controller',
          'system:serviceaccount:kube-system:namespace-controller',
          'system:serviceaccount:kube-system:generic-garbage-collector',
          'system:serviceaccount:kube-system:root-ca-cert-publisher',
          'system:serviceaccount:kube-system:service-account-controller']
    - name: hpaScale
      expression: >-
        request.userInfo.username == 'system:serviceaccount:kube-system:horizontal-pod-autoscaler'
        && request.subResource == 'scale'
    - name: windowOpen
      expression: >-
        (oldObject != null && has(oldObject.metadata.labels)
          && 'driftgate.dev/break-glass' in oldObject.metadata.labels)
        || (namespaceObject != null && has(namespaceObject.metadata.labels)
          && 'driftgate.dev/break-glass' in namespaceObject.metadata.labels)
    - name: opener
      expression: "has(request.userInfo.groups) && 'sre-oncall' in request.userInfo.groups"
  validations:
    - expression: "variables.controller || variables.hpaScale || (variables.windowOpen && variables.opener)"
      messageExpression: >-
        request.userInfo.username + ' may not ' + request.operation.lowerAscii() + ' '
        + request.kind.kind + ' ' + request.namespace + '/' + request.name
        + ': only its controllers (flux, kubernetes) write here (policy production, CEL).'
        + ' Change it in Git, or, in an emergency, open a break-glass window (group sre-oncall may).'
      reason: Forbidden
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: driftgate-latency-production}
spec:
  policyName: driftgate-latency-production
  validationActions: [Deny]
"#;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Gate {
    None,
    Driftgate,
    Vap,
}

impl Gate {
    const ALL: [Gate; 3] = [Gate::None, Gate::Driftgate, Gate::Vap];

    fn label(self) -> &'static str {
        match self {
            Gate::None => "no webhook",
            Gate::Driftgate => "driftgate (chart webhook, failurePolicy Fail)",
            Gate::Vap => "ValidatingAdmissionPolicy (CEL)",
        }
    }

    fn key(self) -> &'static str {
        match self {
            Gate::None => "none",
            Gate::Driftgate => "driftgate",
            Gate::Vap => "vap",
        }
    }

    /// What the API server says when this gate refuses bob; None: nothing refuses him.
    fn denial(self) -> Option<&'static str> {
        match self {
            Gate::None => None,
            Gate::Driftgate => Some(DRIFTGATE_DENIAL),
            Gate::Vap => Some(VAP_DENIAL),
        }
    }
}

struct Options {
    /// Measured Flux writes per configuration, over all rounds.
    writes: usize,
    /// Measured bob writes per configuration, over all rounds.
    denied: usize,
    rounds: usize,
    /// Unmeasured writes of each series (Flux, bob) after each switch of configuration.
    warmup: usize,
    /// Before measuring, wait until the 1-minute load average is below this.
    wait_load: Option<f64>,
    wait_max: Duration,
    record: bool,
    /// The arguments as given, for the command line in the results.
    args: Vec<String>,
}

impl Options {
    fn parse() -> Options {
        let mut options = Options {
            writes: 500,
            denied: 100,
            rounds: 10,
            warmup: 20,
            wait_load: None,
            wait_max: Duration::from_secs(600),
            record: true,
            args: Vec::new(),
        };
        // `cargo bench` passes `--bench` to a benchmark without the libtest harness.
        let mut args = std::env::args().skip(1).filter(|a| a != "--bench");
        while let Some(arg) = args.next() {
            options.args.push(arg.clone());
            if arg == "--no-record" {
                options.record = false;
                continue;
            }
            let value = args
                .next()
                .unwrap_or_else(|| panic!("{arg} needs a value; see the file's header"));
            options.args.push(value.clone());
            let number = || -> f64 {
                value
                    .parse()
                    .unwrap_or_else(|_| panic!("{arg} takes a number, not {value:?}"))
            };
            match arg.as_str() {
                "--writes" => options.writes = number() as usize,
                "--denied" => options.denied = number() as usize,
                "--rounds" => options.rounds = number() as usize,
                "--warmup" => options.warmup = number() as usize,
                "--wait-load" => options.wait_load = Some(number()),
                "--wait-max" => options.wait_max = Duration::from_secs_f64(number()),
                other => panic!("unknown argument {other}; see the file's header"),
            }
        }
        assert!(
            options.rounds > 0 && options.writes >= options.rounds,
            "--writes must be at least --rounds, which must be at least 1"
        );
        options
    }

    fn command(&self) -> String {
        let mut command = "cargo bench --bench apiserver_latency".to_owned();
        if !self.args.is_empty() {
            command.push_str(" -- ");
            command.push_str(&self.args.join(" "));
        }
        command
    }
}

/// Everything printed, kept for the raw results file.
#[derive(Default)]
struct Output {
    text: String,
}

impl Output {
    fn line(&mut self, line: impl AsRef<str>) {
        println!("{}", line.as_ref());
        self.text.push_str(line.as_ref());
        self.text.push('\n');
    }
}

fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(f64::NAN)
}

fn command_output(program: &str, args: &[&str]) -> String {
    Command::new(program)
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}

struct Machine {
    nproc: String,
    cpu: String,
    memory: String,
    kube_apiserver: String,
    commit: String,
}

impl Machine {
    fn describe() -> Machine {
        let cpu = command_output("lscpu", &[])
            .lines()
            .find_map(|l| l.strip_prefix("Model name:").map(|m| m.trim().to_owned()))
            .unwrap_or_else(|| "unknown".into());
        let memory = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|m| {
                let kib: f64 = m
                    .lines()
                    .find_map(|l| l.strip_prefix("MemTotal:"))?
                    .split_whitespace()
                    .next()?
                    .parse()
                    .ok()?;
                Some(format!("{:.0} GiB", kib / 1024.0 / 1024.0))
            })
            .unwrap_or_else(|| "unknown".into());
        let apiserver = harness::testenv::binaries().kube_apiserver();
        let kube_apiserver = command_output(apiserver.to_str().unwrap_or_default(), &["--version"]);
        let dir = env!("CARGO_MANIFEST_DIR");
        let mut commit = command_output("git", &["-C", dir, "rev-parse", "--short", "HEAD"]);
        if !command_output(
            "git",
            &["-C", dir, "status", "--porcelain", "--untracked-files=no"],
        )
        .is_empty()
        {
            commit.push_str(" (with uncommitted changes)");
        }
        Machine {
            nproc: command_output("nproc", &[]),
            cpu,
            memory,
            kube_apiserver,
            commit,
        }
    }
}

/// Latencies in milliseconds, in the order measured.
#[derive(Clone, Default)]
struct Series(Vec<f64>);

struct Summary {
    n: usize,
    mean: f64,
    p50: f64,
    p90: f64,
    p99: f64,
    max: f64,
}

impl Series {
    fn push(&mut self, elapsed: Duration) {
        self.0.push(elapsed.as_secs_f64() * 1000.0);
    }

    fn extend(&mut self, other: &Series) {
        self.0.extend_from_slice(&other.0);
    }

    /// Nearest-rank percentiles.
    fn summary(&self) -> Summary {
        let mut sorted = self.0.clone();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let rank = |p: f64| sorted[((p / 100.0 * n as f64).ceil() as usize).clamp(1, n) - 1];
        Summary {
            n,
            mean: sorted.iter().sum::<f64>() / n as f64,
            p50: rank(50.0),
            p90: rank(90.0),
            p99: rank(99.0),
            max: sorted[n - 1],
        }
    }
}

impl Summary {
    fn line(&self) -> String {
        format!(
            "n={} mean={:.2} p50={:.2} p90={:.2} p99={:.2} max={:.2} ms",
            self.n, self.mean, self.p50, self.p90, self.p99, self.max
        )
    }
}

/// The clients, the objects' names and driftgate: what every step needs.
struct Bench {
    runtime: Runtime,
    flux: Api<Deployment>,
    bob: Api<Deployment>,
    alice: Api<Deployment>,
    bob_configmaps: Api<ConfigMap>,
    alice_configmaps: Api<ConfigMap>,
    driftgate: Driftgate,
    webhook_configuration: Value,
    /// Makes every write different from the one before.
    sequence: u64,
}

/// The Deployment as Git declares it, with image tag `sequence`: every Flux write is a real
/// change (a new ResourceVersion, a write to etcd), as a rollout of a new version is.
fn flux_manifest(sequence: u64) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": DEPLOYMENT, "namespace": NAMESPACE},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "api"}},
            "template": {
                "metadata": {"labels": {"app": "api"}},
                "spec": {"containers": [{
                    "name": "api",
                    "image": format!("registry.example/payments-api:1.4.{sequence}"),
                    "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                }]},
            },
        },
    })
}

/// bob's hotfix, as `kubectl set image` or `kubectl edit` sends it: a strategic merge patch.
fn bob_patch(sequence: u64) -> Value {
    json!({"spec": {"template": {"spec": {"containers": [{
        "name": "api",
        "image": format!("registry.example/payments-api:hotfix-{sequence}"),
    }]}}}})
}

fn edit_params(dry_run: bool) -> PatchParams {
    PatchParams {
        dry_run,
        field_manager: Some("kubectl-edit".into()),
        ..PatchParams::default()
    }
}

fn flux_params(dry_run: bool) -> PatchParams {
    let params = PatchParams::apply(FLUX_FIELD_MANAGER).force();
    if dry_run { params.dry_run() } else { params }
}

impl Bench {
    fn next(&mut self) -> u64 {
        self.sequence += 1;
        self.sequence
    }

    /// One Flux server-side apply, timed from the client's call to its answer.
    fn flux_write(&mut self, dry_run: bool) -> Result<Duration, kube::Error> {
        let manifest = flux_manifest(self.next());
        let params = flux_params(dry_run);
        let started = Instant::now();
        self.runtime
            .block_on(
                self.flux
                    .patch(DEPLOYMENT, &params, &Patch::Apply(&manifest)),
            )
            .map(|_| started.elapsed())
    }

    /// One bob patch of the Deployment, timed; Ok(Err) when a gate refused it.
    fn bob_write(&mut self, dry_run: bool) -> (Duration, Result<(), kube::Error>) {
        let patch = bob_patch(self.next());
        let params = edit_params(dry_run);
        let started = Instant::now();
        let result = self.runtime.block_on(self.bob.patch(
            DEPLOYMENT,
            &params,
            &Patch::Strategic(&patch),
        ));
        (started.elapsed(), result.map(|_| ()))
    }

    /// A dry-run patch of `target` by `api`'s user: admitted, or refused with what message.
    fn dry_run<K>(&self, api: &Api<K>, target: &str, patch: Value) -> Result<(), String>
    where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        self.runtime
            .block_on(api.patch(target, &edit_params(true), &Patch::Strategic(&patch)))
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    fn bob_dry_run(&mut self) -> Result<(), String> {
        let patch = bob_patch(self.next());
        self.dry_run(&self.bob, DEPLOYMENT, patch)
    }

    /// Which gate refused bob's dry run, if any.
    fn gate_refusing_bob(&mut self) -> Result<Gate, String> {
        match self.bob_dry_run() {
            Ok(()) => Ok(Gate::None),
            Err(e) if e.contains(DRIFTGATE_DENIAL) => Ok(Gate::Driftgate),
            Err(e) if e.contains(VAP_DENIAL) => Ok(Gate::Vap),
            Err(e) => Err(e),
        }
    }

    /// Removes both gates, waits until nothing refuses bob and driftgate is no longer asked,
    /// then installs `gate` and waits until it is the one refusing bob.
    fn switch_to(&mut self, gate: Gate) {
        self.driftgate.unregister(WEBHOOK_CONFIGURATION);
        control_plane()
            .kubectl(
                ADMIN,
                &[
                    "delete",
                    "validatingadmissionpolicybinding,validatingadmissionpolicy",
                    VAP,
                    "--ignore-not-found",
                ],
            )
            .ok();
        // Three admitted probes in a row, none of them reviewed by driftgate: the API server's
        // admission chain has dropped both.
        self.wait_until("no gate refuses bob and driftgate is not called", |bench| {
            let before = bench.driftgate.reviews();
            let clear = (0..3).all(|_| matches!(bench.gate_refusing_bob(), Ok(Gate::None)));
            clear && bench.driftgate.reviews() == before
        });
        match gate {
            Gate::None => {}
            Gate::Driftgate => {
                // Waits until the API server calls this driftgate.
                self.driftgate.register(self.webhook_configuration.clone());
            }
            Gate::Vap => {
                control_plane().apply(ADMIN, VAP_MANIFEST);
            }
        }
        self.wait_until(&format!("{} refuses bob", gate.label()), |bench| {
            bench.gate_refusing_bob().ok() == Some(gate)
        });
        self.check(gate);
    }

    /// The gate does what the comparison assumes: Flux is admitted, bob refused (checked by
    /// [`Bench::switch_to`]); for the CEL policy also its break-glass branch.
    fn check(&mut self, gate: Gate) {
        if let Err(e) = self.flux_write(true) {
            panic!("{}: Flux's dry-run apply was refused: {e}", gate.label());
        }
        if gate != Gate::Vap {
            return;
        }
        let label_patch = |user: &str| json!({"metadata": {"annotations": {"edited-by": user}}});
        let refused = self.dry_run(&self.alice, DEPLOYMENT, label_patch("alice"));
        assert!(
            refused.as_ref().is_err_and(|e| e.contains(VAP_DENIAL)),
            "the CEL policy let alice edit a Deployment without a window: {refused:?}"
        );
        let admitted = self.dry_run(&self.alice_configmaps, WINDOWED, label_patch("alice"));
        assert!(
            admitted.is_ok(),
            "the CEL policy refused alice (sre-oncall) under a break-glass label: {admitted:?}"
        );
        let refused = self.dry_run(&self.bob_configmaps, WINDOWED, label_patch("bob"));
        assert!(
            refused.as_ref().is_err_and(|e| e.contains(VAP_DENIAL)),
            "the CEL policy let bob (no opener) write under a break-glass label: {refused:?}"
        );
    }

    fn wait_until(&mut self, what: &str, mut ready: impl FnMut(&mut Bench) -> bool) {
        let deadline = Instant::now() + SWITCH_DEADLINE;
        while !ready(self) {
            assert!(
                Instant::now() < deadline,
                "timed out after {SWITCH_DEADLINE:?} waiting until {what}; driftgate's log:\n{}",
                self.driftgate.log_tail(20)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `flux` measured Flux writes after `warmup` unmeasured ones, then (after as many
    /// unmeasured ones) `bob` measured writes by bob, each refused exactly when `gate` should
    /// refuse it.
    fn measure(&mut self, gate: Gate, warmup: usize, flux: usize, bob: usize) -> (Series, Series) {
        let mut flux_series = Series::default();
        for i in 0..warmup + flux {
            let elapsed = self
                .flux_write(false)
                .unwrap_or_else(|e| panic!("{}: Flux's apply was refused: {e}", gate.label()));
            if i >= warmup {
                flux_series.push(elapsed);
            }
        }
        let mut bob_series = Series::default();
        // bob's series gets its own warm-up: the first patches after the Flux series are slower
        // (a new connection, the strategic-merge path's first use).
        let bob_warmup = if bob > 0 { warmup } else { 0 };
        for i in 0..bob_warmup + bob {
            let (elapsed, result) = self.bob_write(false);
            match (gate.denial(), result) {
                (None, Ok(())) => {}
                (Some(denial), Err(e)) if e.to_string().contains(denial) => {}
                (_, result) => panic!("{}: bob's patch: {result:?}", gate.label()),
            }
            if i >= bob_warmup {
                bob_series.push(elapsed);
            }
        }
        (flux_series, bob_series)
    }
}

/// Sets the cluster up: the namespace, the Deployment and the windowed ConfigMap (before any
/// gate), driftgate started but not registered, the clients.
fn setup() -> Bench {
    harness::install_crypto_provider();
    let control_plane = control_plane();
    let expiry = jiff::Timestamp::now() + jiff::SignedDuration::from_hours(2);
    let expiry = expiry.strftime("%Y%m%dT%H%MZ").to_string();
    control_plane.apply(
        ADMIN,
        &format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {NAMESPACE}\n"),
    );
    control_plane.apply(
        FLUX,
        &format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {WINDOWED}\n  namespace: {NAMESPACE}\n  \
             labels: {{{BREAK_GLASS_LABEL}: \"{expiry}\"}}\n  \
             annotations: {{driftgate.dev/break-glass-reason: \"INC-1: latency benchmark\"}}\ndata: {{k: v}}\n"
        ),
    );
    let driftgate = Driftgate::start("latency", &repo_path("policies/example.yaml"), &[]);
    let webhook_configuration = webhook_configuration(
        WEBHOOK_CONFIGURATION,
        &driftgate.webhook_url(),
        driftgate.ca_pem(),
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime starts");
    let (flux, bob, alice) = runtime.block_on(async {
        (
            control_plane.client(FLUX).await,
            control_plane.client(BOB).await,
            control_plane.client(ALICE).await,
        )
    });
    let mut bench = Bench {
        runtime,
        flux: Api::namespaced(flux, NAMESPACE),
        bob: Api::namespaced(bob.clone(), NAMESPACE),
        alice: Api::namespaced(alice.clone(), NAMESPACE),
        bob_configmaps: Api::namespaced(bob, NAMESPACE),
        alice_configmaps: Api::namespaced(alice, NAMESPACE),
        driftgate,
        webhook_configuration,
        sequence: 0,
    };
    bench
        .flux_write(false)
        .expect("Flux creates the Deployment");
    bench
}

fn wait_for_quiet(out: &mut Output, options: &Options) {
    let Some(limit) = options.wait_load else {
        return;
    };
    let started = Instant::now();
    while load_average() >= limit && started.elapsed() < options.wait_max {
        std::thread::sleep(Duration::from_secs(10));
    }
    out.line(format!(
        "waited {:.0}s for the 1-minute load average to fall below {limit}: it is {:.2}{}",
        started.elapsed().as_secs_f64(),
        load_average(),
        if load_average() >= limit {
            " (gave up waiting)"
        } else {
            ""
        }
    ));
}

/// The Flux p50 differences taken within each round (the three configurations ran back to back,
/// so a drift of the machine's speed between rounds cancels), as median and range over the
/// rounds: what each gate adds to the no-webhook p50, and driftgate's p50 over the CEL policy's.
struct PairedP50 {
    driftgate: Vec<f64>,
    vap: Vec<f64>,
    driftgate_over_vap: Vec<f64>,
}

impl PairedP50 {
    /// `rounds[r][i]`: round r's p50 of `Gate::ALL[i]`.
    fn of(rounds: &[[f64; 3]]) -> PairedP50 {
        PairedP50 {
            driftgate: rounds.iter().map(|r| r[1] - r[0]).collect(),
            vap: rounds.iter().map(|r| r[2] - r[0]).collect(),
            driftgate_over_vap: rounds.iter().map(|r| r[1] - r[2]).collect(),
        }
    }

    /// "median (min..max) ms over N rounds".
    fn spread(values: &[f64]) -> String {
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let median = if n % 2 == 1 {
            sorted[n / 2]
        } else {
            (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
        };
        format!(
            "{} ms ({}..{}) over {n} rounds",
            signed(median),
            signed(sorted[0]),
            signed(sorted[n - 1])
        )
    }

    fn line(&self) -> String {
        format!(
            "Paired within rounds, median (range) of each round's Flux p50 difference: driftgate adds {}, the CEL policy adds {}; driftgate minus the CEL policy: {}",
            Self::spread(&self.driftgate),
            Self::spread(&self.vap),
            Self::spread(&self.driftgate_over_vap)
        )
    }
}

fn ms(value: f64) -> String {
    format!("{value:.2}")
}

fn signed(value: f64) -> String {
    format!("{value:+.2}")
}

/// The sum and count of histogram `metric` over the series whose labels contain `filter`, in
/// Prometheus text.
fn sum_and_count(metrics: &str, metric: &str, filter: &str) -> (f64, f64) {
    let total = |suffix: &str| -> f64 {
        let name = format!("{metric}{suffix}");
        metrics
            .lines()
            .filter_map(|line| {
                let (series, value) = line.rsplit_once(' ')?;
                let matches = series == name
                    || (series.starts_with(&format!("{name}{{")) && series.contains(filter));
                matches.then(|| value.parse::<f64>().ok()).flatten()
            })
            .sum()
    };
    (total("_sum"), total("_count"))
}

/// Where the time of a webhook call goes, from both ends: the API server's own histograms of
/// its calls to driftgate and of its CEL policy checks, and driftgate's of its handling. Every
/// review of the run counts (probes, warm-ups, driftgate's own Event writes included).
fn server_side_view(driftgate: &Driftgate) -> (String, String) {
    let apiserver = control_plane()
        .kubectl(ADMIN, &["get", "--raw", "/metrics"])
        .ok()
        .stdout;
    let own = driftgate.metrics();
    let mut raw = String::new();
    for line in apiserver.lines().chain(own.lines()) {
        let wanted = line.starts_with("apiserver_admission_webhook_admission_duration_seconds")
            && line.contains("gate.driftgate.dev")
            || line.starts_with("apiserver_validating_admission_policy_check_duration_seconds")
            || line.starts_with("driftgate_admission_duration_seconds");
        if wanted {
            raw.push_str(line);
            raw.push('\n');
        }
    }
    let mean = |(sum, count): (f64, f64)| {
        if count > 0.0 {
            format!("{:.2} ms over {count} calls", sum / count * 1000.0)
        } else {
            "no calls".to_owned()
        }
    };
    let webhook = sum_and_count(
        &apiserver,
        "apiserver_admission_webhook_admission_duration_seconds",
        "name=\"gate.driftgate.dev\"",
    );
    let cel = sum_and_count(
        &apiserver,
        "apiserver_validating_admission_policy_check_duration_seconds",
        VAP,
    );
    let handling = sum_and_count(&own, "driftgate_admission_duration_seconds", "");
    let summary = format!(
        "mean time per call as the API server measured its calls to driftgate: {}; as driftgate measured its handling (body read to answer): {}; the API server's CEL policy checks that refused (its histogram holds no others): {}",
        mean(webhook),
        mean(handling),
        mean(cel)
    );
    (summary, raw)
}

fn main() {
    let options = Options::parse();
    let mut out = Output::default();
    let started = jiff::Timestamp::now();
    let machine = Machine::describe();
    let mut bench = setup();
    out.line(format!("apiserver_latency {started}"));
    out.line(format!("command: {}", options.command()));
    out.line(format!(
        "machine: nproc {}, CPU {}, memory {}; {}; driftgate {}",
        machine.nproc, machine.cpu, machine.memory, machine.kube_apiserver, machine.commit
    ));
    out.line(format!(
        "per configuration: {} Flux writes and {} bob writes measured over {} rounds, {} warm-up writes of each series after each switch",
        options.writes, options.denied, options.rounds, options.warmup
    ));
    wait_for_quiet(&mut out, &options);
    let load_start = load_average();

    let mut flux: Vec<Series> = vec![Series::default(); Gate::ALL.len()];
    let mut bob: Vec<Series> = vec![Series::default(); Gate::ALL.len()];
    let mut rounds_text = Vec::new();
    // Each round's Flux p50 per configuration, for differences taken within a round.
    let mut round_p50: Vec<[f64; 3]> = Vec::new();
    for round in 0..options.rounds {
        let mut p50s = [f64::NAN; 3];
        // Spread the writes over the rounds; the first rounds take any remainder.
        let share =
            |total: usize| total / options.rounds + usize::from(round < total % options.rounds);
        for offset in 0..Gate::ALL.len() {
            // Rotate the order each round so no configuration always runs first or last.
            let index = (round + offset) % Gate::ALL.len();
            let gate = Gate::ALL[index];
            bench.switch_to(gate);
            let load_before = load_average();
            let reviews_before = bench.driftgate.reviews();
            let (flux_round, bob_round) = bench.measure(
                gate,
                options.warmup,
                share(options.writes),
                share(options.denied),
            );
            let reviewed = bench.driftgate.reviews() - reviews_before;
            let warmups = if bob_round.0.is_empty() { 1 } else { 2 };
            let sent = (warmups * options.warmup + flux_round.0.len() + bob_round.0.len()) as f64;
            // driftgate must have reviewed every write it was registered for, and none other.
            match gate {
                Gate::Driftgate => assert!(
                    reviewed >= sent,
                    "driftgate reviewed {reviewed} of the {sent} writes sent while registered"
                ),
                _ => assert!(
                    reviewed == 0.0,
                    "driftgate reviewed {reviewed} writes while not registered"
                ),
            }
            let text = format!(
                "round {} {:<9} load {:.2}->{:.2} driftgate reviews {:>4}  flux {}  bob {}",
                round + 1,
                gate.key(),
                load_before,
                load_average(),
                reviewed,
                flux_round.summary().line(),
                if bob_round.0.is_empty() {
                    "-".to_owned()
                } else {
                    bob_round.summary().line()
                },
            );
            out.line(&text);
            rounds_text.push(text);
            p50s[index] = flux_round.summary().p50;
            flux[index].extend(&flux_round);
            bob[index].extend(&bob_round);
        }
        round_p50.push(p50s);
    }
    let paired = PairedP50::of(&round_p50);
    // Leave no gate behind for whoever reuses the cluster (the process ends here anyway).
    bench.switch_to(Gate::None);
    let (server_side, server_side_raw) = server_side_view(&bench.driftgate);
    let load_end = load_average();
    let finished = jiff::Timestamp::now();

    let base = flux[0].summary();
    let mut table = String::new();
    table.push_str("| configuration | Flux writes | p50 ms | p90 ms | p99 ms | max ms | added p50 ms | added p99 ms |\n");
    table.push_str("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for (gate, series) in Gate::ALL.iter().zip(&flux) {
        let s = series.summary();
        let (added_p50, added_p99) = if *gate == Gate::None {
            ("—".to_owned(), "—".to_owned())
        } else {
            (signed(s.p50 - base.p50), signed(s.p99 - base.p99))
        };
        let _ = writeln!(
            table,
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            gate.label(),
            s.n,
            ms(s.p50),
            ms(s.p90),
            ms(s.p99),
            ms(s.max),
            added_p50,
            added_p99
        );
    }
    let mut denied_table = String::new();
    if options.denied > 0 {
        let bob_base = bob[0].summary();
        denied_table.push_str("| configuration | bob's patch | writes | p50 ms | p90 ms | p99 ms | max ms | p50 vs no webhook |\n");
        denied_table.push_str("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n");
        for (gate, series) in Gate::ALL.iter().zip(&bob) {
            let s = series.summary();
            let _ = writeln!(
                denied_table,
                "| {} | {} | {} | {} | {} | {} | {} | {} |",
                gate.label(),
                if *gate == Gate::None {
                    "admitted, stored"
                } else {
                    "refused"
                },
                s.n,
                ms(s.p50),
                ms(s.p90),
                ms(s.p99),
                ms(s.max),
                if *gate == Gate::None {
                    "—".to_owned()
                } else {
                    signed(s.p50 - bob_base.p50)
                }
            );
        }
    }
    out.line("");
    out.line("Flux server-side applies of a Deployment in a protected namespace:");
    out.line("");
    out.line(table.trim_end());
    if !denied_table.is_empty() {
        out.line("");
        out.line("bob's strategic-merge patch of the same Deployment:");
        out.line("");
        out.line(denied_table.trim_end());
    }
    out.line("");
    out.line(&server_side);
    out.line(paired.line());
    out.line(format!(
        "1-minute load average: {load_start:.2} when measuring began, {load_end:.2} at the end; finished {finished}"
    ));

    if !options.record {
        return;
    }
    let results = repo_path("tests/benches/results");
    std::fs::create_dir_all(&results).expect("the results directory is created");
    let mut raw = out.text.clone();
    raw.push_str("\nEvery measured latency in ms, in the order measured (rounds concatenated):\n");
    for (gate, series) in Gate::ALL.iter().zip(&flux) {
        let values: Vec<String> = series.0.iter().map(|v| format!("{v:.3}")).collect();
        let _ = writeln!(raw, "flux {}: {}", gate.key(), values.join(" "));
    }
    for (gate, series) in Gate::ALL.iter().zip(&bob) {
        let values: Vec<String> = series.0.iter().map(|v| format!("{v:.3}")).collect();
        let _ = writeln!(raw, "bob {}: {}", gate.key(), values.join(" "));
    }
    raw.push_str("\nThe API server's and driftgate's histograms at the end of the run:\n");
    raw.push_str(&server_side_raw);
    std::fs::write(results.join("apiserver-latency.txt"), raw)
        .expect("the raw results are written");

    let driftgate = flux[1].summary();
    let vap = flux[2].summary();
    let markdown = format!(
        r#"## `apiserver_latency`: what a user feels on the real control plane

`tests/benches/apiserver_latency.rs`. A kube-rs client, as Flux's kustomize-controller, makes
sequential server-side applies (`fieldManager: {FLUX_FIELD_MANAGER}`, force) of Deployment
`{NAMESPACE}/{DEPLOYMENT}`, each with a new image tag (a real update stored in etcd), against the
e2e harness's kube-apiserver and etcd on loopback ({apiserver}). Three configurations: no
admission webhook or policy; driftgate (release build, `policies/example.yaml`) registered through
the Helm chart's ValidatingWebhookConfiguration (failurePolicy Fail, every namespaced write); and
a ValidatingAdmissionPolicy in CEL equivalent to the production policy as far as CEL goes (scope,
controller usernames, HPA `scale`, a `sre-oncall` member under a break-glass label; no expiry
check). Before each configuration is measured the benchmark checks that it refuses bob and admits
Flux (and, for the CEL policy, that alice is admitted under a break-glass label and refused
without one), and that driftgate reviewed every write while registered and none otherwise. Time is
taken around each client call. The configurations alternate over {rounds} rounds in rotating
order, with {warmup} unmeasured writes (of each series) after each switch.

Run {started} on {nproc} vCPU `{cpu}`, {memory}, driftgate {commit}; the machine is shared, and
the 1-minute load average was {load_start:.2} when measuring began and {load_end:.2} at the end.

```sh
CARGO_TARGET_DIR=… {command}
```

{table}
{denied}{paired}

In numbers, over all rounds pooled: driftgate adds {dg_p50} ms at p50 and {dg_p99} ms at p99 to a Flux write; the
CEL policy adds {vap_p50} ms and {vap_p99} ms. The raw output of this run, every latency
included, is in `tests/benches/results/apiserver-latency.txt` with the histograms behind this
line: {server_side}. Per-round figures:

```
{rounds_text}
```

What it means: the webhook's cost is the API server's round trip to it (an HTTP/2 connection
over TLS that it keeps open, the AdmissionReview serialized with both objects, driftgate's parse
and decision) on top of the write itself; the CEL policy runs inside the API server. Both are
measured on one loopback machine with no network between the API server and driftgate: in a
cluster, add the pod network's round trip to driftgate's figures. The p99 of 500 writes is their
fifth slowest: on a shared 2-core machine it moves by tens of milliseconds between runs for the
no-webhook configuration itself, so read the added p99 against the per-round figures above; the
medians are steadier. When driftgate's calls were slow, the time was not spent inside driftgate:
compare the API server's view of its calls with driftgate's own in the histograms of the raw file.

driftgate sets TCP_NODELAY on webhook connections because of this benchmark: without it, an
answer written right after a 13-byte HTTP/2 WINDOW_UPDATE was held by Nagle's algorithm until the
API server's delayed ACK (~40 ms), and about one write in fifty took ~50 ms;
`apiserver-latency-without-nodelay.txt` is such a run (made before that change, at a higher load).
"#,
        apiserver = machine.kube_apiserver,
        rounds = options.rounds,
        warmup = options.warmup,
        nproc = machine.nproc,
        cpu = machine.cpu,
        memory = machine.memory,
        commit = machine.commit,
        command = options.command(),
        table = table,
        denied = if denied_table.is_empty() {
            String::new()
        } else {
            format!(
                "bob's strategic-merge patch of the same Deployment (admitted and stored without a \
                 gate, refused by both gates, so the refused rows skip the write to etcd):\n\n{denied_table}\n"
            )
        },
        dg_p50 = signed(driftgate.p50 - base.p50),
        dg_p99 = signed(driftgate.p99 - base.p99),
        vap_p50 = signed(vap.p50 - base.p50),
        vap_p99 = signed(vap.p99 - base.p99),
        rounds_text = rounds_text.join("\n"),
        server_side = server_side,
        paired = paired.line(),
    );
    std::fs::write(results.join("apiserver-latency.md"), markdown)
        .expect("the markdown section is written");
    println!("wrote {}", results.display());
}
