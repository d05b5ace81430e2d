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
//! and, with `--peers kyverno,gatekeeper`, the engines users weigh driftgate against, each run as
//! a real process on loopback beside the same API server, built from Go modules on first use by
//! `tests/benches/kyverno/build.sh` and `tests/benches/gatekeeper/build.sh` (minutes, once):
//!
//! 4. Kyverno v1.19.1's admission controller (`--serverIP` mode: it registers its own webhooks)
//!    with the ClusterPolicy `tests/benches/kyverno/policy.yaml`;
//! 5. OPA Gatekeeper v3.23.1 (`--debug-use-fake-pod`, webhook operation only) with the
//!    ConstraintTemplate and Constraint of `tests/benches/gatekeeper/policy.yaml`.
//!
//! Each configuration is checked before it is measured (bob is refused by it, Flux admitted;
//! for the CEL policy and the peers also the break-glass branch), and a refused or wrongly
//! admitted write stops the benchmark: otherwise the comparison would mean nothing. The
//! configurations alternate over several rounds, rotating their order, so that a drift of the
//! machine's load spreads over all of them; besides the pooled percentiles it reports each
//! round's p50 and p99 differences against no webhook (and driftgate minus each other gate) as a
//! median and range over the rounds, which a drift between rounds does not move. A second,
//! shorter series is bob's `kubectl edit`-like patch: admitted without a gate, refused by every
//! gate (the cost of the denial path). For each series it reads the webhook server's CPU time
//! (utime + stime of /proc/PID/stat) and peak RSS (VmHWM, reset before each series), and the API
//! server's CPU time.
//!
//! With `--reconcile N` it then times a Flux-style reconcile of N ConfigMaps in every
//! configuration, interleaved over `--reconcile-rounds` rounds: as kustomize-controller's
//! `ApplyAll` does, a GET and a server-side dry-run apply of every object, 4 at a time (its
//! `--concurrent-ssa` default), then the applies of the changed objects one after the other.
//!
//! `cargo bench --bench apiserver_latency -- [--writes 500] [--denied 100] [--rounds 10]
//! [--warmup 20] [--wait-load 1.0] [--wait-max 600] [--peers kyverno,gatekeeper]
//! [--reconcile 0] [--reconcile-rounds 5] [--no-record]`
//!
//! Prints markdown tables and, unless `--no-record`, writes the run's raw output to
//! `tests/benches/results/apiserver-latency.txt` and a markdown section to
//! `tests/benches/results/apiserver-latency.md` (`apiserver-latency-peers.*` when `--peers` or
//! `--reconcile` is given, so that such a run does not replace the default run's files). It is
//! a benchmark: nothing here asserts a time.

#[path = "../e2e/harness/mod.rs"]
mod harness;

use std::fmt::Write as _;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use base64::Engine;
use base64::prelude::BASE64_STANDARD;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};
use tokio::runtime::Runtime;

use harness::control_plane::free_port;
use harness::process::Guarded;
use harness::{
    ADMIN, ALICE, BOB, Driftgate, FLUX, Identity, control_plane, repo_path, webhook_configuration,
};

/// Guarded by the example policy's production policy (`prod-*`).
const NAMESPACE: &str = "prod-latency";
const DEPLOYMENT: &str = "api";
/// ConfigMaps that carry a break-glass label, for checking the gates' window branch: open for
/// two more hours, ended an hour ago, and ending in six hours (beyond maxDuration, 4h).
const WINDOWED: &str = "windowed";
const EXPIRED: &str = "window-expired";
const TOO_LONG: &str = "window-too-long";
/// The ConfigMaps of the reconcile (`--reconcile N`): `reconciled-0` … `reconciled-{N-1}`.
const RECONCILED: &str = "reconciled";
/// kustomize-controller's `--concurrent-ssa` default: how many objects its `ApplyAll` reads and
/// dry-runs at once.
const FLUX_CONCURRENT_SSA: usize = 4;
const WEBHOOK_CONFIGURATION: &str = "driftgate-latency";
const VAP: &str = "driftgate-latency-production";
/// How the API server words a refusal by each gate.
const DRIFTGATE_DENIAL: &str = "admission webhook \"gate.driftgate.dev\" denied the request";
const VAP_DENIAL: &str = "ValidatingAdmissionPolicy 'driftgate-latency-production'";
const KYVERNO_DENIAL: &str = "admission webhook \"validate.kyverno.svc-fail\" denied the request";
const GATEKEEPER_DENIAL: &str = "admission webhook \"validation.gatekeeper.sh\" denied the request";
const FLUX_FIELD_MANAGER: &str = "kustomize-controller";
const BREAK_GLASS_LABEL: &str = "driftgate.dev/break-glass";
/// How long a configuration change may take to reach the API server's admission chain.
const SWITCH_DEADLINE: Duration = Duration::from_secs(60);

/// Kyverno's ClusterPolicy (the same name as the CEL policy's), the namespace and ConfigMaps it
/// reads, and its identity: a ServiceAccount's name, as in a cluster.
const KYVERNO_POLICY: &str = include_str!("kyverno/policy.yaml");
const KYVERNO_POLICY_NAME: &str = "driftgate-latency-production";
const KYVERNO_SETUP: &str = include_str!("kyverno/setup.yaml");
const KYVERNO: Identity = Identity {
    user: "system:serviceaccount:kyverno:kyverno-admission-controller",
    groups: &["system:serviceaccounts", "system:serviceaccounts:kyverno"],
};
/// Gatekeeper's ConstraintTemplate and Constraint, its namespace, its identity, and the webhook
/// configuration the benchmark registers for it (Gatekeeper's release manifest registers one for
/// its in-cluster Service; this one points at the loopback process).
const GATEKEEPER_POLICY: &str = include_str!("gatekeeper/policy.yaml");
const GATEKEEPER_SETUP: &str = include_str!("gatekeeper/setup.yaml");
const GATEKEEPER_WEBHOOK_CONFIGURATION: &str = "driftgate-latency-gatekeeper";
const GATEKEEPER: Identity = Identity {
    user: "system:serviceaccount:gatekeeper-system:gatekeeper-admin",
    groups: &[
        "system:serviceaccounts",
        "system:serviceaccounts:gatekeeper-system",
    ],
};
/// What a peer's process may reach besides loopback: nothing. Go's HTTP clients send any other
/// request through this proxy, where nothing listens (loopback is never proxied).
const NO_WAY_OUT: &str = "http://127.0.0.1:9";
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
    Kyverno,
    Gatekeeper,
}

impl Gate {
    /// What every run measures; `--peers` adds Kyverno and Gatekeeper.
    const BASE: [Gate; 3] = [Gate::None, Gate::Driftgate, Gate::Vap];

    fn label(self) -> &'static str {
        match self {
            Gate::None => "no webhook",
            Gate::Driftgate => "driftgate (chart webhook, failurePolicy Fail)",
            Gate::Vap => "ValidatingAdmissionPolicy (CEL)",
            Gate::Kyverno => "Kyverno v1.19.1 (ClusterPolicy, its own webhooks)",
            Gate::Gatekeeper => "Gatekeeper v3.23.1 (Rego template, failurePolicy Fail)",
        }
    }

    fn key(self) -> &'static str {
        match self {
            Gate::None => "none",
            Gate::Driftgate => "driftgate",
            Gate::Vap => "vap",
            Gate::Kyverno => "kyverno",
            Gate::Gatekeeper => "gatekeeper",
        }
    }

    /// What the API server says when this gate refuses bob; None: nothing refuses him.
    fn denial(self) -> Option<&'static str> {
        match self {
            Gate::None => None,
            Gate::Driftgate => Some(DRIFTGATE_DENIAL),
            Gate::Vap => Some(VAP_DENIAL),
            Gate::Kyverno => Some(KYVERNO_DENIAL),
            Gate::Gatekeeper => Some(GATEKEEPER_DENIAL),
        }
    }

    /// The webhook the API server calls for this gate (its name in the API server's metrics).
    fn webhook(self) -> Option<&'static str> {
        match self {
            Gate::Driftgate => Some("gate.driftgate.dev"),
            Gate::Kyverno => Some("validate.kyverno.svc-fail"),
            Gate::Gatekeeper => Some("validation.gatekeeper.sh"),
            Gate::None | Gate::Vap => None,
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
    /// Kyverno and Gatekeeper, in the order given.
    peers: Vec<Gate>,
    /// Objects of the Flux-style reconcile; 0: none.
    reconcile: usize,
    reconcile_rounds: usize,
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
            peers: Vec::new(),
            reconcile: 0,
            reconcile_rounds: 5,
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
                "--reconcile" => options.reconcile = number() as usize,
                "--reconcile-rounds" => options.reconcile_rounds = number() as usize,
                "--peers" => {
                    for peer in value.split(',').filter(|p| !p.is_empty()) {
                        let gate = match peer {
                            "kyverno" => Gate::Kyverno,
                            "gatekeeper" => Gate::Gatekeeper,
                            other => panic!("--peers takes kyverno and gatekeeper, not {other:?}"),
                        };
                        if !options.peers.contains(&gate) {
                            options.peers.push(gate);
                        }
                    }
                }
                other => panic!("unknown argument {other}; see the file's header"),
            }
        }
        assert!(
            options.rounds > 0 && options.writes >= options.rounds,
            "--writes must be at least --rounds, which must be at least 1"
        );
        assert!(
            options.reconcile == 0 || options.reconcile_rounds > 0,
            "--reconcile-rounds must be at least 1"
        );
        options
    }

    fn gates(&self) -> Vec<Gate> {
        Gate::BASE.iter().chain(&self.peers).copied().collect()
    }

    fn command(&self) -> String {
        let mut command = "cargo bench --bench apiserver_latency".to_owned();
        if !self.args.is_empty() {
            command.push_str(" -- ");
            command.push_str(&self.args.join(" "));
        }
        command
    }

    /// The results files' stem: a run with peers or a reconcile keeps the default run's files.
    fn results_stem(&self) -> &'static str {
        if self.peers.is_empty() && self.reconcile == 0 {
            "apiserver-latency"
        } else {
            "apiserver-latency-peers"
        }
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

/// A process's CPU time (user + system, all threads) in milliseconds, from /proc/PID/stat.
fn cpu_ms(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command name, which may hold spaces: state is field 3, utime 14.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some(ticks * 1000.0 / clock_ticks_per_second())
}

fn clock_ticks_per_second() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        command_output("getconf", &["CLK_TCK"])
            .parse()
            .unwrap_or(100.0)
    })
}

/// Peak RSS in MB since the last [`reset_peak_rss`] (VmHWM of /proc/PID/status).
fn peak_rss_mb(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(kib / 1024.0)
}

/// Resets VmHWM to the current RSS, as load.sh does (`echo 5 > /proc/PID/clear_refs`); without
/// the permission, the peak is the process's lifetime peak (reported as such).
fn reset_peak_rss(pid: u32) -> bool {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").is_ok()
}

/// The CPU time of the webhook server of a gate and of the API server over one series of writes,
/// and the server's peak RSS during it.
#[derive(Clone, Copy, Default)]
struct Usage {
    /// Webhook server CPU ms per write; NaN when the gate has no server.
    server_cpu: f64,
    server_rss_mb: f64,
    apiserver_cpu: f64,
}

/// Samples a series: call [`Meter::start`] before it and [`Meter::stop`] after.
struct Meter {
    server: Option<u32>,
    apiserver: Option<u32>,
    server_cpu: f64,
    apiserver_cpu: f64,
}

impl Meter {
    fn start(server: Option<u32>, apiserver: Option<u32>) -> Meter {
        if let Some(pid) = server {
            reset_peak_rss(pid);
        }
        Meter {
            server,
            apiserver,
            server_cpu: server.and_then(cpu_ms).unwrap_or(f64::NAN),
            apiserver_cpu: apiserver.and_then(cpu_ms).unwrap_or(f64::NAN),
        }
    }

    /// Per write, over `writes` writes.
    fn stop(self, writes: usize) -> Usage {
        let per = |before: f64, pid: Option<u32>| {
            pid.and_then(cpu_ms)
                .map_or(f64::NAN, |after| (after - before) / writes.max(1) as f64)
        };
        Usage {
            server_cpu: per(self.server_cpu, self.server),
            server_rss_mb: self.server.and_then(peak_rss_mb).unwrap_or(f64::NAN),
            apiserver_cpu: per(self.apiserver_cpu, self.apiserver),
        }
    }
}

/// The kube-apiserver process of the harness's control plane: the one listening on its port.
fn apiserver_pid() -> Option<u32> {
    let port = control_plane().url().rsplit(':').next()?.to_owned();
    let wanted = format!("--secure-port={port}");
    std::fs::read_dir("/proc").ok()?.find_map(|entry| {
        let pid: u32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let mut args = cmdline.split(|b| *b == 0);
        let program = args.next()?;
        (program.ends_with(b"kube-apiserver") && args.any(|a| a == wanted.as_bytes()))
            .then_some(pid)
    })
}

/// `GET path` over HTTP/1.0 (no chunked answer to undo), the body; for the peers' Prometheus
/// endpoints on loopback.
fn http_get(addr: SocketAddr, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    (head.split(' ').nth(1) == Some("200")).then(|| body.to_owned())
}

/// What to install when Go is missing for a peer's build.
const PEER_GO_MISSING: &str = "driftgate bench: --peers builds Kyverno and Gatekeeper from Go modules and needs Go >= 1.26 (go.dev)";

/// Kyverno or Gatekeeper, running on loopback beside the API server.
struct Peer {
    gate: Gate,
    process: Guarded,
    /// Its Prometheus endpoint.
    metrics: SocketAddr,
    /// The counter of admission reviews it answered, and the labels that pick the benchmark's.
    counter: &'static str,
    labels: &'static [&'static str],
    /// What build.sh wrote about the build (build.txt), or that it was cached.
    build: String,
    /// From starting the process to its first policy being accepted.
    ready_after: Duration,
}

impl Peer {
    fn metrics(&self) -> String {
        http_get(self.metrics, "/metrics").unwrap_or_default()
    }

    fn reviews(&self) -> f64 {
        harness::admin::counter_sum(&self.metrics(), self.counter, self.labels)
    }

    fn pid(&self) -> Option<u32> {
        self.process.pid()
    }
}

/// Runs a peer's build.sh (a no-op once built); returns its directory and build.txt.
fn build_peer(name: &str) -> (PathBuf, String) {
    let script = repo_path(&format!("tests/benches/{name}/build.sh"));
    let dir = harness::testenv::run_build_script(&script, PEER_GO_MISSING);
    let build = std::fs::read_to_string(dir.join("build.txt"))
        .unwrap_or_else(|_| format!("{name}: built earlier, no build.txt\n"));
    (dir, build)
}

/// `kubectl apply --server-side` of a file or directory of CRDs, then waits until every one is
/// Established.
fn install_crds(path: &Path) {
    let path = path.display().to_string();
    let plane = control_plane();
    plane
        .kubectl(
            ADMIN,
            &["apply", "--server-side", "--force-conflicts", "-f", &path],
        )
        .ok();
    plane
        .kubectl(
            ADMIN,
            &[
                "wait",
                "--for=condition=Established",
                "--timeout=60s",
                "-f",
                &path,
            ],
        )
        .ok();
}

fn kubectl_stdin_ok(args: &[&str], stdin: &str) -> bool {
    control_plane()
        .kubectl_with_stdin(ADMIN, args, Some(stdin))
        .success()
}

/// Kyverno's admission controller out of the cluster, as its DEVELOPMENT.md runs it
/// (`--serverIP`, the environment of its .vscode/launch.json), with the chart's defaults
/// otherwise (admission reports on, PolicyApplied and PolicySkipped events omitted, `-v=2`).
/// It generates its CA and serving certificate into Secrets and registers its own webhooks,
/// pointed at `https://127.0.0.1:PORT`.
fn start_kyverno() -> Peer {
    let (dir, build) = build_peer("kyverno");
    let plane = control_plane();
    install_crds(&dir.join("crds"));
    plane.apply(ADMIN, KYVERNO_SETUP);
    let port = free_port();
    let metrics = free_port();
    let scratch = plane.dir().join("kyverno");
    std::fs::create_dir_all(&scratch).expect("kyverno's directory is created");
    let mut command = Command::new(dir.join("kyverno"));
    command
        .arg(format!("--kubeconfig={}", plane.kubeconfig(KYVERNO).display()))
        .arg(format!("--serverIP=127.0.0.1:{port}"))
        .arg("--webhookServerHost=127.0.0.1")
        .arg(format!("--webhookServerPort={port}"))
        .arg("--caSecretName=kyverno-svc.kyverno.svc.kyverno-tls-ca")
        .arg("--tlsSecretName=kyverno-svc.kyverno.svc.kyverno-tls-pair")
        .arg("--backgroundServiceAccountName=system:serviceaccount:kyverno:kyverno-background-controller")
        .arg("--reportsServiceAccountName=system:serviceaccount:kyverno:kyverno-reports-controller")
        .arg("--metricsHost=127.0.0.1")
        .arg(format!("--metricsPort={metrics}"))
        .arg("--controllerRuntimeMetricsAddress=0")
        .arg("--omitEvents=PolicyApplied,PolicySkipped")
        .arg("--loggingFormat=text")
        .env_remove("KUBECONFIG")
        .env("KYVERNO_NAMESPACE", "kyverno")
        .env("KYVERNO_SERVICEACCOUNT_NAME", "kyverno-admission-controller")
        .env("KYVERNO_DEPLOYMENT", "kyverno-admission-controller")
        .env("KYVERNO_POD_NAME", "kyverno-admission-controller-bench")
        .env("INIT_CONFIG", "kyverno")
        .env("METRICS_CONFIG", "kyverno-metrics")
        .env("HTTPS_PROXY", NO_WAY_OUT)
        .env("HTTP_PROXY", NO_WAY_OUT)
        .env("NO_PROXY", "127.0.0.1,localhost");
    let started = Instant::now();
    let mut process = Guarded::spawn(
        "kyverno",
        &command,
        &scratch.join("kyverno.log"),
        None,
        Duration::from_secs(5),
    );
    // Ready once its policy webhook is registered and a ClusterPolicy passes it.
    harness::control_plane::wait_for(
        std::slice::from_mut(&mut process),
        "Kyverno takes a ClusterPolicy",
        Duration::from_secs(300),
        || {
            plane
                .kubectl(
                    ADMIN,
                    &[
                        "get",
                        "validatingwebhookconfiguration",
                        "kyverno-policy-validating-webhook-cfg",
                    ],
                )
                .success()
                && kubectl_stdin_ok(&["create", "--dry-run=server", "-f", "-"], KYVERNO_POLICY)
        },
    );
    Peer {
        gate: Gate::Kyverno,
        process,
        metrics: ([127, 0, 0, 1], metrics).into(),
        counter: "kyverno_admission_requests_total",
        labels: &["resource_namespace=\"prod-latency\""],
        build,
        ready_after: started.elapsed(),
    }
}

/// Gatekeeper's manager out of the cluster (`--debug-use-fake-pod`), as its release manifest runs
/// the webhook Deployment (`--operation=webhook`, `http.send` disabled, its namespace exempt) plus
/// the audit Deployment's `generate` (the constraint CRD from the template), but
/// with a serving certificate from the harness's CA for 127.0.0.1 instead of its own rotation
/// (which names the in-cluster Service). The benchmark registers its webhook configuration.
fn start_gatekeeper() -> Peer {
    let (dir, build) = build_peer("gatekeeper");
    let plane = control_plane();
    install_crds(&dir.join("crds.yaml"));
    plane.apply(ADMIN, GATEKEEPER_SETUP);
    let scratch = plane.dir().join("gatekeeper");
    let certs = scratch.join("certs");
    std::fs::create_dir_all(&certs).expect("gatekeeper's directory is created");
    let serving = plane.ca().serving("gatekeeper");
    std::fs::write(certs.join("tls.crt"), &serving.cert).expect("tls.crt is written");
    std::fs::write(certs.join("tls.key"), &serving.key).expect("tls.key is written");
    let port = free_port();
    let health = free_port();
    let metrics = free_port();
    let mut command = Command::new(dir.join("gatekeeper"));
    command
        .arg(format!(
            "--kubeconfig={}",
            plane.kubeconfig(GATEKEEPER).display()
        ))
        .arg(format!("--port={port}"))
        .arg("--host=127.0.0.1")
        .arg(format!("--cert-dir={}", certs.display()))
        .arg("--disable-cert-rotation")
        .arg("--operation=webhook")
        // The release manifest's audit Deployment generates a template's constraint CRD; with
        // the webhook's operation alone the Constraint's kind never exists.
        .arg("--operation=generate")
        .arg("--exempt-namespace=gatekeeper-system")
        .arg("--disable-opa-builtin={http.send}")
        .arg("--debug-use-fake-pod")
        .arg(format!("--health-addr=127.0.0.1:{health}"))
        .arg("--metrics-backend=prometheus")
        .arg(format!("--prometheus-port={metrics}"))
        .arg("--logtostderr")
        .env_remove("KUBECONFIG")
        .env("POD_NAMESPACE", "gatekeeper-system")
        .env("HTTPS_PROXY", NO_WAY_OUT)
        .env("HTTP_PROXY", NO_WAY_OUT)
        .env("NO_PROXY", "127.0.0.1,localhost");
    let started = Instant::now();
    let mut process = Guarded::spawn(
        "gatekeeper",
        &command,
        &scratch.join("gatekeeper.log"),
        None,
        Duration::from_secs(5),
    );
    let health: SocketAddr = ([127, 0, 0, 1], health).into();
    harness::control_plane::wait_for(
        std::slice::from_mut(&mut process),
        "Gatekeeper's /readyz",
        Duration::from_secs(300),
        || http_get(health, "/readyz").is_some(),
    );
    // The Constraint's kind exists once Gatekeeper has compiled the template.
    harness::control_plane::wait_for(
        std::slice::from_mut(&mut process),
        "Gatekeeper takes the ConstraintTemplate and its Constraint",
        Duration::from_secs(120),
        || {
            kubectl_stdin_ok(
                &["apply", "--server-side", "--force-conflicts", "-f", "-"],
                GATEKEEPER_POLICY,
            )
        },
    );
    let url = format!("https://127.0.0.1:{port}/v1/admit");
    let peer = Peer {
        gate: Gate::Gatekeeper,
        process,
        metrics: ([127, 0, 0, 1], metrics).into(),
        counter: "gatekeeper_validation_request_count_total",
        labels: &[],
        build,
        ready_after: started.elapsed(),
    };
    GATEKEEPER_URL.set(url).expect("one Gatekeeper");
    peer
}

static GATEKEEPER_URL: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// The ValidatingWebhookConfiguration of Gatekeeper's release manifest (v3.23:
/// `validation.gatekeeper.sh`, every resource and the subresources it lists, CREATE and UPDATE),
/// pointed at the loopback Gatekeeper, failing closed like driftgate's (the manifest's is
/// failurePolicy Ignore, which would admit a write when Gatekeeper does not answer).
fn gatekeeper_webhook_configuration() -> Value {
    let url = GATEKEEPER_URL.get().expect("Gatekeeper was started");
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": GATEKEEPER_WEBHOOK_CONFIGURATION},
        "webhooks": [{
            "name": "validation.gatekeeper.sh",
            "admissionReviewVersions": ["v1", "v1beta1"],
            "clientConfig": {
                "url": url,
                "caBundle": BASE64_STANDARD.encode(control_plane().ca_pem()),
            },
            "failurePolicy": "Fail",
            "matchPolicy": "Exact",
            "namespaceSelector": {"matchExpressions": [
                {"key": "admission.gatekeeper.sh/ignore", "operator": "DoesNotExist"},
                {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["gatekeeper-system"]},
            ]},
            "rules": [{
                "apiGroups": ["*"],
                "apiVersions": ["*"],
                "operations": ["CREATE", "UPDATE"],
                "resources": [
                    "*", "pods/ephemeralcontainers", "pods/exec", "pods/log", "pods/eviction",
                    "pods/portforward", "pods/proxy", "pods/attach", "pods/binding", "pods/resize",
                    "deployments/scale", "replicasets/scale", "statefulsets/scale",
                    "replicationcontrollers/scale", "services/proxy", "nodes/proxy",
                    "services/status",
                ],
            }],
            "sideEffects": "None",
            "timeoutSeconds": 3,
        }],
    })
}

/// The clients, the objects' names, driftgate and the peers: what every step needs.
struct Bench {
    runtime: Runtime,
    flux: Api<Deployment>,
    flux_configmaps: Api<ConfigMap>,
    bob: Api<Deployment>,
    alice: Api<Deployment>,
    bob_configmaps: Api<ConfigMap>,
    alice_configmaps: Api<ConfigMap>,
    driftgate: Driftgate,
    webhook_configuration: Value,
    peers: Vec<Peer>,
    apiserver: Option<u32>,
    /// What each gate's break-glass checks found, for the results.
    checks: Vec<String>,
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

/// One of the reconcile's ConfigMaps as Git declares it at `revision`.
fn reconciled_manifest(index: usize, revision: u64) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": format!("{RECONCILED}-{index}"),
            "namespace": NAMESPACE,
            "labels": {"app.kubernetes.io/part-of": "payments", "kustomize.toolkit.fluxcd.io/name": "payments"},
        },
        "data": {
            "revision": revision.to_string(),
            "settings.yaml": format!("service: payments-{index}\nreplicas: 2\nlog_level: info\nfeature_flags: [a, b, c]\n"),
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

/// One configuration's measured series: Flux's and bob's latencies, and what they cost.
struct Measured {
    flux: Series,
    bob: Series,
    flux_usage: Usage,
    bob_usage: Usage,
}

impl Bench {
    fn next(&mut self) -> u64 {
        self.sequence += 1;
        self.sequence
    }

    fn peer(&self, gate: Gate) -> Option<&Peer> {
        self.peers.iter().find(|p| p.gate == gate)
    }

    /// The PID of the process that answers `gate`'s webhook; None for no webhook and CEL.
    fn server_pid(&self, gate: Gate) -> Option<u32> {
        match gate {
            Gate::Driftgate => self.driftgate.pid(),
            Gate::Kyverno | Gate::Gatekeeper => self.peer(gate).and_then(Peer::pid),
            Gate::None | Gate::Vap => None,
        }
    }

    /// How many reviews of the benchmark's writes each webhook server has answered so far.
    fn reviews(&self) -> Vec<(Gate, f64)> {
        let mut reviews = vec![(Gate::Driftgate, self.driftgate.reviews())];
        reviews.extend(self.peers.iter().map(|p| (p.gate, p.reviews())));
        reviews
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
            Err(e) => [Gate::Driftgate, Gate::Vap, Gate::Kyverno, Gate::Gatekeeper]
                .into_iter()
                .find(|gate| gate.denial().is_some_and(|d| e.contains(d)))
                .ok_or(e),
        }
    }

    /// Removes every gate, waits until nothing refuses bob and no webhook server is asked about
    /// the benchmark's writes, then installs `gate` and waits until it is the one refusing bob.
    fn switch_to(&mut self, gate: Gate) {
        let plane = control_plane();
        self.driftgate.unregister(WEBHOOK_CONFIGURATION);
        plane
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
        if self.peer(Gate::Kyverno).is_some() {
            plane
                .kubectl(
                    ADMIN,
                    &[
                        "delete",
                        "clusterpolicy",
                        KYVERNO_POLICY_NAME,
                        "--ignore-not-found",
                    ],
                )
                .ok();
        }
        if self.peer(Gate::Gatekeeper).is_some() {
            plane
                .kubectl(
                    ADMIN,
                    &[
                        "delete",
                        "validatingwebhookconfiguration",
                        GATEKEEPER_WEBHOOK_CONFIGURATION,
                        "--ignore-not-found",
                    ],
                )
                .ok();
        }
        // Three admitted probes in a row, none of them reviewed by a webhook server: the API
        // server's admission chain has dropped every gate.
        self.wait_until("no gate refuses bob and no webhook is called", |bench| {
            let before = bench.reviews();
            let clear = (0..3).all(|_| matches!(bench.gate_refusing_bob(), Ok(Gate::None)));
            clear && bench.reviews() == before
        });
        match gate {
            Gate::None => {}
            Gate::Driftgate => {
                // Waits until the API server calls this driftgate.
                self.driftgate.register(self.webhook_configuration.clone());
            }
            Gate::Vap => {
                plane.apply(ADMIN, VAP_MANIFEST);
            }
            Gate::Kyverno => {
                plane.apply(ADMIN, KYVERNO_POLICY);
            }
            Gate::Gatekeeper => {
                plane.apply(ADMIN, &gatekeeper_webhook_configuration().to_string());
            }
        }
        self.wait_until(&format!("{} refuses bob", gate.label()), |bench| {
            bench.gate_refusing_bob().ok() == Some(gate)
        });
        self.check(gate);
    }

    /// The gate does what the comparison assumes: Flux is admitted, bob refused (checked by
    /// [`Bench::switch_to`]); for the CEL policy and the peers also the break-glass branch: alice
    /// (sre-oncall) refused without a window and admitted under one, bob refused under one; and
    /// what each does with a window that has ended or ends beyond maxDuration (the peers must
    /// refuse alice; the CEL policy, which has no clock, is recorded admitting her).
    fn check(&mut self, gate: Gate) {
        if let Err(e) = self.flux_write(true) {
            panic!("{}: Flux's dry-run apply was refused: {e}", gate.label());
        }
        let Some(denial) = gate.denial() else {
            return;
        };
        if gate == Gate::Driftgate {
            // Its break-glass rules are the e2e suite's (tests/e2e); the benchmark only needs it
            // to refuse bob and admit Flux.
            return;
        }
        let edit = |user: &str| json!({"metadata": {"annotations": {"edited-by": user}}});
        let refused = self.dry_run(&self.alice, DEPLOYMENT, edit("alice"));
        assert!(
            refused.as_ref().is_err_and(|e| e.contains(denial)),
            "{}: alice edited a Deployment without a window: {refused:?}",
            gate.label()
        );
        let admitted = self.dry_run(&self.alice_configmaps, WINDOWED, edit("alice"));
        assert!(
            admitted.is_ok(),
            "{}: alice (sre-oncall) was refused under an open break-glass window: {admitted:?}",
            gate.label()
        );
        let refused = self.dry_run(&self.bob_configmaps, WINDOWED, edit("bob"));
        assert!(
            refused.as_ref().is_err_and(|e| e.contains(denial)),
            "{}: bob (no opener) wrote under a break-glass window: {refused:?}",
            gate.label()
        );
        for (object, window) in [
            (EXPIRED, "a window that ended an hour ago"),
            (TOO_LONG, "a window ending in 6h, beyond maxDuration (4h)"),
        ] {
            let result = self.dry_run(&self.alice_configmaps, object, edit("alice"));
            let refused = result.as_ref().is_err_and(|e| e.contains(denial));
            if gate == Gate::Vap {
                assert!(
                    result.is_ok(),
                    "the CEL policy has no clock, yet refused alice under {window}: {result:?}"
                );
            } else {
                assert!(
                    refused,
                    "{}: alice wrote under {window}: {result:?}",
                    gate.label()
                );
            }
            let line = format!(
                "{}: alice under {window}: {}",
                gate.key(),
                if refused { "refused" } else { "admitted" }
            );
            if !self.checks.contains(&line) {
                self.checks.push(line);
            }
        }
    }

    fn wait_until(&mut self, what: &str, mut ready: impl FnMut(&mut Bench) -> bool) {
        let deadline = Instant::now() + SWITCH_DEADLINE;
        while !ready(self) {
            for peer in &mut self.peers {
                peer.process.assert_running();
            }
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
    /// refuse it; the gate's webhook server and the API server metered over each series.
    fn measure(&mut self, gate: Gate, warmup: usize, flux: usize, bob: usize) -> Measured {
        let server = self.server_pid(gate);
        let mut flux_series = Series::default();
        for _ in 0..warmup {
            self.flux_write(false)
                .unwrap_or_else(|e| panic!("{}: Flux's apply was refused: {e}", gate.label()));
        }
        let meter = Meter::start(server, self.apiserver);
        for _ in 0..flux {
            let elapsed = self
                .flux_write(false)
                .unwrap_or_else(|e| panic!("{}: Flux's apply was refused: {e}", gate.label()));
            flux_series.push(elapsed);
        }
        let flux_usage = meter.stop(flux);
        let mut bob_series = Series::default();
        // bob's series gets its own warm-up: the first patches after the Flux series are slower
        // (a new connection, the strategic-merge path's first use).
        let bob_warmup = if bob > 0 { warmup } else { 0 };
        let mut meter = None;
        for i in 0..bob_warmup + bob {
            if i == bob_warmup {
                meter = Some(Meter::start(server, self.apiserver));
            }
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
        let bob_usage = meter.map(|m| m.stop(bob)).unwrap_or_default();
        Measured {
            flux: flux_series,
            bob: bob_series,
            flux_usage,
            bob_usage,
        }
    }

    /// A Flux-style reconcile of the first `objects` ConfigMaps at a new revision, as
    /// kustomize-controller's `ApplyAll` (fluxcd/pkg/ssa) does it: for every object a GET and a
    /// server-side dry-run apply, [`FLUX_CONCURRENT_SSA`] objects at a time; then the apply of
    /// every object whose dry run differs from the stored one (here all: the revision changed),
    /// one after the other. The GETs go to the API server (kustomize-controller reads through a
    /// client without a cache for this); every write must be admitted. Returns the wall time.
    fn reconcile(&mut self, objects: usize) -> Duration {
        let revision = self.next();
        let api = self.flux_configmaps.clone();
        let manifests: Vec<(String, Value)> = (0..objects)
            .map(|i| {
                (
                    format!("{RECONCILED}-{i}"),
                    reconciled_manifest(i, revision),
                )
            })
            .collect();
        let started = Instant::now();
        let result = self.runtime.block_on(async {
            futures::stream::iter(&manifests)
                .map(|(name, manifest)| {
                    let api = api.clone();
                    async move {
                        api.get_opt(name).await?;
                        api.patch(name, &flux_params(true), &Patch::Apply(manifest))
                            .await?;
                        Ok::<_, kube::Error>(())
                    }
                })
                .buffer_unordered(FLUX_CONCURRENT_SSA)
                .try_collect::<Vec<()>>()
                .await?;
            for (name, manifest) in &manifests {
                api.patch(name, &flux_params(false), &Patch::Apply(manifest))
                    .await?;
            }
            Ok::<_, kube::Error>(())
        });
        if let Err(e) = result {
            panic!("the reconcile of {objects} ConfigMaps failed: {e}");
        }
        started.elapsed()
    }
}

/// Sets the cluster up: the namespace, the Deployment, the windowed ConfigMaps and the
/// reconcile's (before any gate), driftgate started but not registered, the peers started with
/// their policies in place but unregistered, the clients.
fn setup(options: &Options) -> Bench {
    harness::install_crypto_provider();
    let control_plane = control_plane();
    let window = |hours: i64| {
        let expiry = jiff::Timestamp::now() + jiff::SignedDuration::from_hours(hours);
        expiry.strftime("%Y%m%dT%H%MZ").to_string()
    };
    control_plane.apply(
        ADMIN,
        &format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {NAMESPACE}\n"),
    );
    for (name, expiry) in [
        (WINDOWED, window(2)),
        (EXPIRED, window(-1)),
        (TOO_LONG, window(6)),
    ] {
        control_plane.apply(
            FLUX,
            &format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: {NAMESPACE}\n  \
                 labels: {{{BREAK_GLASS_LABEL}: \"{expiry}\"}}\n  \
                 annotations: {{driftgate.dev/break-glass-reason: \"INC-1: latency benchmark\"}}\ndata: {{k: v}}\n"
            ),
        );
    }
    let driftgate = Driftgate::start("latency", &repo_path("policies/example.yaml"), &[]);
    let webhook_configuration = webhook_configuration(
        WEBHOOK_CONFIGURATION,
        &driftgate.webhook_url(),
        driftgate.ca_pem(),
    );
    let peers: Vec<Peer> = options
        .peers
        .iter()
        .map(|gate| match gate {
            Gate::Kyverno => start_kyverno(),
            Gate::Gatekeeper => start_gatekeeper(),
            other => unreachable!("{other:?} is not a peer"),
        })
        .collect();
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
        flux: Api::namespaced(flux.clone(), NAMESPACE),
        flux_configmaps: Api::namespaced(flux, NAMESPACE),
        bob: Api::namespaced(bob.clone(), NAMESPACE),
        alice: Api::namespaced(alice.clone(), NAMESPACE),
        bob_configmaps: Api::namespaced(bob, NAMESPACE),
        alice_configmaps: Api::namespaced(alice, NAMESPACE),
        driftgate,
        webhook_configuration,
        peers,
        apiserver: apiserver_pid(),
        checks: Vec::new(),
        sequence: 0,
    };
    bench
        .flux_write(false)
        .expect("Flux creates the Deployment");
    if options.reconcile > 0 {
        bench.reconcile(options.reconcile);
    }
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

/// Median of the finite values; NaN when there are none.
fn median(values: &[f64]) -> f64 {
    let mut sorted: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    }
}

/// "median (min..max)" of the finite values, each with `format`; "—" when there are none.
fn spread_with(values: &[f64], format: impl Fn(f64) -> String, separator: &str) -> String {
    let finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    if finite.is_empty() {
        return "—".to_owned();
    }
    let min = finite.iter().copied().fold(f64::INFINITY, f64::min);
    let max = finite.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!(
        "{} ({}{separator}{})",
        format(median(&finite)),
        format(min),
        format(max)
    )
}

/// Signed milliseconds, "+0.75 (−3.38..+3.36)".
fn paired(values: &[f64]) -> String {
    spread_with(values, signed, "..")
}

fn plain(values: &[f64], decimals: usize) -> String {
    spread_with(values, |v| format!("{v:.decimals$}"), "–")
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
/// its calls to each webhook and of its CEL policy checks, and driftgate's of its handling.
/// Every review of the run counts (probes, checks, warm-ups and the reconcile included).
fn server_side_view(bench: &Bench, gates: &[Gate]) -> (String, String) {
    let apiserver = control_plane()
        .kubectl(ADMIN, &["get", "--raw", "/metrics"])
        .ok()
        .stdout;
    let own = bench.driftgate.metrics();
    let webhooks: Vec<&str> = gates.iter().filter_map(|g| g.webhook()).collect();
    let mut raw = String::new();
    for line in apiserver.lines().chain(own.lines()) {
        let wanted = line.starts_with("apiserver_admission_webhook_admission_duration_seconds")
            && webhooks
                .iter()
                .any(|w| line.contains(&format!("name=\"{w}\"")))
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
    let mut parts = Vec::new();
    for gate in gates {
        if let Some(webhook) = gate.webhook() {
            let calls = sum_and_count(
                &apiserver,
                "apiserver_admission_webhook_admission_duration_seconds",
                &format!("name=\"{webhook}\""),
            );
            parts.push(format!(
                "the API server's calls to {} ({webhook}): {}",
                gate.key(),
                mean(calls)
            ));
        }
    }
    let handling = sum_and_count(&own, "driftgate_admission_duration_seconds", "");
    parts.push(format!(
        "driftgate's own handling (body read to answer): {}",
        mean(handling)
    ));
    let cel = sum_and_count(
        &apiserver,
        "apiserver_validating_admission_policy_check_duration_seconds",
        VAP,
    );
    parts.push(format!(
        "the API server's CEL policy checks that refused (its histogram holds no others): {}",
        mean(cel)
    ));
    (format!("mean time per call: {}", parts.join("; ")), raw)
}

/// Per configuration, every round's figures, in the order of [`Options::gates`].
#[derive(Clone, Default)]
struct Rounds {
    flux_p50: Vec<f64>,
    flux_p99: Vec<f64>,
    bob_p50: Vec<f64>,
    bob_p99: Vec<f64>,
    flux_usage: Vec<Usage>,
    bob_usage: Vec<Usage>,
    reconcile_ms: Vec<f64>,
    reconcile_usage: Vec<Usage>,
}

/// Each round's difference of `figure` between configuration `a` and `b` (same round).
fn differences(rounds: &[Rounds], a: usize, b: usize, figure: fn(&Rounds) -> &[f64]) -> Vec<f64> {
    figure(&rounds[a])
        .iter()
        .zip(figure(&rounds[b]))
        .map(|(x, y)| x - y)
        .collect()
}

fn main() {
    let options = Options::parse();
    let gates = options.gates();
    let mut out = Output::default();
    let started = jiff::Timestamp::now();
    let machine = Machine::describe();
    let mut bench = setup(&options);
    out.line(format!("apiserver_latency {started}"));
    out.line(format!("command: {}", options.command()));
    out.line(format!(
        "machine: nproc {}, CPU {}, memory {}; {}; driftgate {}",
        machine.nproc, machine.cpu, machine.memory, machine.kube_apiserver, machine.commit
    ));
    out.line(format!("uptime: {}", command_output("uptime", &[])));
    for peer in &bench.peers {
        out.line(format!(
            "{}: ready {:.1}s after its start; {}",
            peer.gate.key(),
            peer.ready_after.as_secs_f64(),
            peer.build.trim().replace('\n', "; ")
        ));
    }
    out.line(format!(
        "per configuration: {} Flux writes and {} bob writes measured over {} rounds, {} warm-up writes of each series after each switch",
        options.writes, options.denied, options.rounds, options.warmup
    ));
    if options.reconcile > 0 {
        out.line(format!(
            "then a reconcile of {} ConfigMaps per configuration in each of {} rounds",
            options.reconcile, options.reconcile_rounds
        ));
    }
    wait_for_quiet(&mut out, &options);
    let load_start = load_average();
    let uptime_start = command_output("uptime", &[]);

    let mut flux: Vec<Series> = vec![Series::default(); gates.len()];
    let mut bob: Vec<Series> = vec![Series::default(); gates.len()];
    let mut rounds: Vec<Rounds> = vec![Rounds::default(); gates.len()];
    let mut rounds_text = Vec::new();
    for round in 0..options.rounds {
        // Spread the writes over the rounds; the first rounds take any remainder.
        let share =
            |total: usize| total / options.rounds + usize::from(round < total % options.rounds);
        for offset in 0..gates.len() {
            // Rotate the order each round so no configuration always runs first or last.
            let index = (round + offset) % gates.len();
            let gate = gates[index];
            bench.switch_to(gate);
            let load_before = load_average();
            let reviews_before = bench.reviews();
            let measured = bench.measure(
                gate,
                options.warmup,
                share(options.writes),
                share(options.denied),
            );
            let reviews_after = bench.reviews();
            let warmups = if measured.bob.0.is_empty() { 1 } else { 2 };
            let sent =
                (warmups * options.warmup + measured.flux.0.len() + measured.bob.0.len()) as f64;
            // The gate's server must have reviewed every write sent while it was registered,
            // and no other server any.
            let mut reviewed = 0.0;
            for ((server, before), (_, after)) in reviews_before.iter().zip(&reviews_after) {
                let count = after - before;
                if *server == gate {
                    reviewed = count;
                    assert!(
                        count >= sent,
                        "{} reviewed {count} of the {sent} writes sent while registered",
                        server.key()
                    );
                } else {
                    assert!(
                        count == 0.0,
                        "{} reviewed {count} writes while not registered",
                        server.key()
                    );
                }
            }
            let usage_text = |u: &Usage| {
                format!(
                    "server cpu {:.3} ms/write rss {:.1} MB, apiserver cpu {:.3} ms/write",
                    u.server_cpu, u.server_rss_mb, u.apiserver_cpu
                )
            };
            let text = format!(
                "round {} {:<10} load {:.2}->{:.2} reviews {:>4}  flux {} [{}]  bob {} [{}]",
                round + 1,
                gate.key(),
                load_before,
                load_average(),
                reviewed,
                measured.flux.summary().line(),
                usage_text(&measured.flux_usage),
                if measured.bob.0.is_empty() {
                    "-".to_owned()
                } else {
                    measured.bob.summary().line()
                },
                usage_text(&measured.bob_usage),
            );
            out.line(&text);
            rounds_text.push(text);
            let r = &mut rounds[index];
            r.flux_p50.push(measured.flux.summary().p50);
            r.flux_p99.push(measured.flux.summary().p99);
            if !measured.bob.0.is_empty() {
                r.bob_p50.push(measured.bob.summary().p50);
                r.bob_p99.push(measured.bob.summary().p99);
            }
            r.flux_usage.push(measured.flux_usage);
            r.bob_usage.push(measured.bob_usage);
            flux[index].extend(&measured.flux);
            bob[index].extend(&measured.bob);
        }
    }
    let mut reconcile_text = Vec::new();
    let reconcile_rounds = if options.reconcile > 0 {
        options.reconcile_rounds
    } else {
        0
    };
    for round in 0..reconcile_rounds {
        for offset in 0..gates.len() {
            let index = (round + offset) % gates.len();
            let gate = gates[index];
            bench.switch_to(gate);
            // Unmeasured, as after each switch above: the API server's first calls to a webhook
            // open its connection.
            bench.reconcile(options.warmup.min(options.reconcile));
            let load_before = load_average();
            let meter = Meter::start(bench.server_pid(gate), bench.apiserver);
            let wall = bench.reconcile(options.reconcile);
            // Per reconcile, not per object.
            let usage = meter.stop(1);
            let text = format!(
                "reconcile round {} {:<10} load {:.2}->{:.2} objects {} wall {:.1} ms  server cpu {:.0} ms rss {:.1} MB  apiserver cpu {:.0} ms",
                round + 1,
                gate.key(),
                load_before,
                load_average(),
                options.reconcile,
                wall.as_secs_f64() * 1000.0,
                usage.server_cpu,
                usage.server_rss_mb,
                usage.apiserver_cpu
            );
            out.line(&text);
            reconcile_text.push(text);
            rounds[index].reconcile_ms.push(wall.as_secs_f64() * 1000.0);
            rounds[index].reconcile_usage.push(usage);
        }
    }
    // Leave no gate behind for whoever reuses the cluster (the process ends here anyway).
    bench.switch_to(Gate::None);
    let (server_side, server_side_raw) = server_side_view(&bench, &gates);
    let load_end = load_average();
    let uptime_end = command_output("uptime", &[]);
    let ephemeral_reports = if bench.peer(Gate::Kyverno).is_some() {
        let listed = control_plane().kubectl(
            ADMIN,
            &[
                "get",
                "ephemeralreports.reports.kyverno.io",
                "-A",
                "--no-headers",
            ],
        );
        Some(listed.stdout.lines().count())
    } else {
        None
    };
    let finished = jiff::Timestamp::now();

    // Flux writes: pooled percentiles, and the per-round differences against no webhook.
    let base = flux[0].summary();
    let mut table = String::new();
    table.push_str("| configuration | Flux writes | p50 ms | p90 ms | p99 ms | max ms | added p50 ms, pooled | added p99 ms, pooled | added p50 ms, paired per round | added p99 ms, paired per round |\n");
    table.push_str("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for (index, (gate, series)) in gates.iter().zip(&flux).enumerate() {
        let s = series.summary();
        let (added_p50, added_p99, paired_p50, paired_p99) = if *gate == Gate::None {
            (
                "—".to_owned(),
                "—".to_owned(),
                "—".to_owned(),
                "—".to_owned(),
            )
        } else {
            (
                signed(s.p50 - base.p50),
                signed(s.p99 - base.p99),
                paired(&differences(&rounds, index, 0, |r| &r.flux_p50)),
                paired(&differences(&rounds, index, 0, |r| &r.flux_p99)),
            )
        };
        let _ = writeln!(
            table,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            gate.label(),
            s.n,
            ms(s.p50),
            ms(s.p90),
            ms(s.p99),
            ms(s.max),
            added_p50,
            added_p99,
            paired_p50,
            paired_p99
        );
    }
    let mut denied_table = String::new();
    if options.denied > 0 {
        let bob_base = bob[0].summary();
        denied_table.push_str("| configuration | bob's patch | writes | p50 ms | p90 ms | p99 ms | max ms | p50 vs no webhook, pooled | p50 vs no webhook, paired per round | p99 vs no webhook, paired per round |\n");
        denied_table
            .push_str("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
        for (index, (gate, series)) in gates.iter().zip(&bob).enumerate() {
            let s = series.summary();
            let none = *gate == Gate::None;
            let _ = writeln!(
                denied_table,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                gate.label(),
                if none { "admitted, stored" } else { "refused" },
                s.n,
                ms(s.p50),
                ms(s.p90),
                ms(s.p99),
                ms(s.max),
                if none {
                    "—".to_owned()
                } else {
                    signed(s.p50 - bob_base.p50)
                },
                if none {
                    "—".to_owned()
                } else {
                    paired(&differences(&rounds, index, 0, |r| &r.bob_p50))
                },
                if none {
                    "—".to_owned()
                } else {
                    paired(&differences(&rounds, index, 0, |r| &r.bob_p99))
                },
            );
        }
    }
    // What each series cost the webhook server and the API server, median (range) over rounds.
    let mut usage_table = String::new();
    usage_table.push_str("| configuration | server CPU ms per Flux write | server CPU ms per refused write | server peak RSS MB | API server CPU ms per Flux write | API server CPU ms per bob write |\n");
    usage_table.push_str("| --- | ---: | ---: | ---: | ---: | ---: |\n");
    for (gate, r) in gates.iter().zip(&rounds) {
        let pick =
            |usages: &[Usage], f: fn(&Usage) -> f64| -> Vec<f64> { usages.iter().map(f).collect() };
        let rss: Vec<f64> = pick(&r.flux_usage, |u| u.server_rss_mb)
            .into_iter()
            .chain(pick(&r.bob_usage, |u| u.server_rss_mb))
            .collect();
        let _ = writeln!(
            usage_table,
            "| {} | {} | {} | {} | {} | {} |",
            gate.label(),
            plain(&pick(&r.flux_usage, |u| u.server_cpu), 3),
            if *gate == Gate::None {
                "—".to_owned()
            } else {
                plain(&pick(&r.bob_usage, |u| u.server_cpu), 3)
            },
            plain(&rss, 1),
            plain(&pick(&r.flux_usage, |u| u.apiserver_cpu), 3),
            plain(&pick(&r.bob_usage, |u| u.apiserver_cpu), 3),
        );
    }
    let driftgate_index = gates
        .iter()
        .position(|g| *g == Gate::Driftgate)
        .expect("driftgate is measured");
    let versus: Vec<String> = gates
        .iter()
        .enumerate()
        .filter(|(_, g)| !matches!(g, Gate::None | Gate::Driftgate))
        .map(|(index, g)| {
            format!(
                "driftgate minus {}: Flux p50 {} ms, bob p50 {} ms",
                g.key(),
                paired(&differences(&rounds, driftgate_index, index, |r| &r.flux_p50)),
                paired(&differences(&rounds, driftgate_index, index, |r| &r.bob_p50)),
            )
        })
        .collect();
    let paired_line = format!(
        "Paired within rounds, median (range) over {} rounds: {}",
        options.rounds,
        versus.join("; ")
    );
    let mut reconcile_table = String::new();
    if options.reconcile > 0 {
        let _ = writeln!(
            reconcile_table,
            "| configuration | wall ms, median (range) | added ms vs no webhook, paired per round | server CPU ms per reconcile | server peak RSS MB | API server CPU ms per reconcile | wall ms per round |"
        );
        reconcile_table.push_str("| --- | ---: | ---: | ---: | ---: | ---: | --- |\n");
        for (index, (gate, r)) in gates.iter().zip(&rounds).enumerate() {
            let pick =
                |f: fn(&Usage) -> f64| -> Vec<f64> { r.reconcile_usage.iter().map(f).collect() };
            let _ = writeln!(
                reconcile_table,
                "| {} | {} | {} | {} | {} | {} | {} |",
                gate.label(),
                plain(&r.reconcile_ms, 0),
                if *gate == Gate::None {
                    "—".to_owned()
                } else {
                    spread_with(
                        &differences(&rounds, index, 0, |r| &r.reconcile_ms),
                        |v| format!("{v:+.0}"),
                        "..",
                    )
                },
                plain(&pick(|u| u.server_cpu), 0),
                plain(&pick(|u| u.server_rss_mb), 1),
                plain(&pick(|u| u.apiserver_cpu), 0),
                r.reconcile_ms
                    .iter()
                    .map(|v| format!("{v:.0}"))
                    .collect::<Vec<_>>()
                    .join(", "),
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
    out.line("What each series cost, median (range) over the rounds:");
    out.line("");
    out.line(usage_table.trim_end());
    if !reconcile_table.is_empty() {
        out.line("");
        out.line(format!(
            "Flux-style reconcile of {} ConfigMaps ({} at a time: GET and dry-run apply; then the applies one by one):",
            options.reconcile, FLUX_CONCURRENT_SSA
        ));
        out.line("");
        out.line(reconcile_table.trim_end());
    }
    out.line("");
    out.line(&server_side);
    out.line(&paired_line);
    for check in &bench.checks {
        out.line(format!("checked: {check}"));
    }
    if let Some(count) = ephemeral_reports {
        out.line(format!(
            "Kyverno's EphemeralReports left at the end (admission reports are on, as in its chart; no reports controller runs to aggregate them): {count}"
        ));
    }
    out.line(format!(
        "1-minute load average: {load_start:.2} when measuring began, {load_end:.2} at the end; finished {finished}"
    ));
    out.line(format!("uptime at the start: {uptime_start}"));
    out.line(format!("uptime at the end: {uptime_end}"));

    if !options.record {
        return;
    }
    let results = repo_path("tests/benches/results");
    std::fs::create_dir_all(&results).expect("the results directory is created");
    let stem = options.results_stem();
    let mut raw = out.text.clone();
    raw.push_str("\nEvery measured latency in ms, in the order measured (rounds concatenated):\n");
    for (gate, series) in gates.iter().zip(&flux) {
        let values: Vec<String> = series.0.iter().map(|v| format!("{v:.3}")).collect();
        let _ = writeln!(raw, "flux {}: {}", gate.key(), values.join(" "));
    }
    for (gate, series) in gates.iter().zip(&bob) {
        let values: Vec<String> = series.0.iter().map(|v| format!("{v:.3}")).collect();
        let _ = writeln!(raw, "bob {}: {}", gate.key(), values.join(" "));
    }
    raw.push_str("\nThe API server's and driftgate's histograms at the end of the run:\n");
    raw.push_str(&server_side_raw);
    std::fs::write(results.join(format!("{stem}.txt")), raw).expect("the raw results are written");

    let peers_text = if options.peers.is_empty() {
        String::new()
    } else {
        format!(
            "\nThe peers ran on loopback beside the API server for the whole run (idle while not \
             registered), each built from its Go module by its `build.sh`:\n\n{}\n",
            bench
                .peers
                .iter()
                .map(|p| format!(
                    "- {}: ready {:.1}s after its start. {}",
                    p.gate.label(),
                    p.ready_after.as_secs_f64(),
                    p.build.trim().replace('\n', "; ")
                ))
                .collect::<Vec<_>>()
                .join("\n")
        )
    };
    let markdown = format!(
        r#"## `apiserver_latency`: what a user feels on the real control plane

`tests/benches/apiserver_latency.rs`. A kube-rs client, as Flux's kustomize-controller, makes
sequential server-side applies (`fieldManager: {FLUX_FIELD_MANAGER}`, force) of Deployment
`{NAMESPACE}/{DEPLOYMENT}`, each with a new image tag (a real update stored in etcd), against the
e2e harness's kube-apiserver and etcd on loopback ({apiserver}). Configurations: {configurations}.
Before each configuration is measured the benchmark checks that it refuses bob and admits Flux
(and, for the CEL policy and the peers, the break-glass branch), and that the gate's webhook
server reviewed every write while registered and no other server any. Time is taken around each
client call. The configurations alternate over {rounds} rounds in rotating order, with {warmup}
unmeasured writes (of each series) after each switch.
{peers_text}
Run {started} on {nproc} vCPU `{cpu}`, {memory}, driftgate {commit}; the machine is shared, and
the 1-minute load average was {load_start:.2} when measuring began and {load_end:.2} at the end
(`uptime`: {uptime_start} / {uptime_end}).

```sh
CARGO_TARGET_DIR=… {command}
```

{table}
{denied}What each series cost, median (range) over the rounds (server: the gate's webhook process,
utime + stime of /proc/PID/stat, peak RSS from VmHWM reset before each series; API server: the
same for kube-apiserver):

{usage_table}
{reconcile}{paired}

{checks}
The raw output of this run, every latency included, is in `tests/benches/results/{stem}.txt` with
the histograms behind this line: {server_side}. Per-round figures:

```
{rounds_text}
```
"#,
        apiserver = machine.kube_apiserver,
        configurations = gates
            .iter()
            .map(|g| g.label())
            .collect::<Vec<_>>()
            .join("; "),
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
                 gate, refused by every gate, so the refused rows skip the write to etcd):\n\n{denied_table}\n"
            )
        },
        reconcile = if reconcile_table.is_empty() {
            String::new()
        } else {
            format!(
                "A Flux-style reconcile of {} ConfigMaps, as kustomize-controller's `ApplyAll` does it \
                 (a GET and a server-side dry-run apply of every object, {} at a time, then the \
                 applies one after the other), {} rounds, the configurations interleaved:\n\n{reconcile_table}\n```\n{}\n```\n\n",
                options.reconcile,
                FLUX_CONCURRENT_SSA,
                options.reconcile_rounds,
                reconcile_text.join("\n")
            )
        },
        paired = paired_line,
        checks = bench
            .checks
            .iter()
            .map(|c| format!("- checked: {c}\n"))
            .collect::<String>(),
        rounds_text = rounds_text.join("\n"),
        server_side = server_side,
    );
    std::fs::write(results.join(format!("{stem}.md")), markdown)
        .expect("the markdown section is written");
    println!("wrote {}", results.display());
}
