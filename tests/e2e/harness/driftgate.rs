//! `driftgate serve` as a real process against the test control plane, and its registration as
//! a validating webhook.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::control_plane::{ADMIN, DRIFTGATE, Identity, KubectlOutput, control_plane, free_port};
use super::log_file::wait_for_quiet_file;
use super::process::Guarded;

const BIN: &str = env!("CARGO_BIN_EXE_driftgate");
/// driftgate's `RUST_LOG` unless the test run sets one: info, and the review lines that `serve`
/// writes at debug (writes no policy guards).
const E2E_LOG_FILTER: &str = "info,driftgate::server=debug";

/// Runs the driftgate binary as `who` (`break-glass open …`), with that identity's kubeconfig
/// as `--kubeconfig` after `args`.
pub fn driftgate_cli(who: Identity, args: &[&str]) -> KubectlOutput {
    let out = Command::new(BIN)
        .args(args)
        .arg("--kubeconfig")
        .arg(control_plane().kubeconfig(who))
        .env_remove("KUBECONFIG")
        .stdin(Stdio::null())
        .output()
        .expect("the driftgate binary runs");
    KubectlOutput {
        program: "driftgate",
        args: args.iter().map(|s| (*s).to_owned()).collect(),
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

pub fn repo_path(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(relative)
}

/// Where a started driftgate's serving certificate comes from.
enum Certificates {
    /// `driftgate certs dev` files, passed as --tls-cert/--tls-key.
    DevFiles,
    /// Runtime mode: the flags the test passes.
    Runtime,
}

/// A running `driftgate serve`, with the webhook configurations it registered. Dropping it
/// deletes those configurations first (a `failurePolicy: Fail` webhook that no longer answers
/// would refuse every write it matches), then stops the process.
pub struct Driftgate {
    name: String,
    process: Mutex<Guarded>,
    dir: PathBuf,
    webhook: SocketAddr,
    admin: SocketAddr,
    ca_pem: String,
    registered: Mutex<Vec<String>>,
}

/// The example policy's driftgate, started and registered with [`webhook_configuration`] by the
/// first test that asks for it, for the rest of the test binary.
///
/// It requires the API server's client certificate (`--client-ca-file`, the harness's webhook
/// client CA): every scenario through it is a review that came through a verified handshake.
/// The driftgates tests start themselves do not, as the chart by default does not, though the
/// API server presents its certificate to them too.
///
/// Its webhook sees every write outside kube-system. A test that runs its own driftgate (another
/// policy) should register it with a `namespaceSelector` that matches only that test's
/// namespaces, and use namespaces the example policy does not guard (not `prod-*`, `payments`
/// or `staging-*`): this one then admits them as out of scope.
pub fn shared() -> &'static Driftgate {
    static SHARED: LazyLock<Driftgate> = LazyLock::new(|| {
        let client_ca = control_plane().webhook_client_ca_file();
        let driftgate = Driftgate::start(
            "shared",
            &repo_path("policies/example.yaml"),
            &["--client-ca-file", &client_ca.display().to_string()],
        );
        driftgate.register(webhook_configuration(
            "driftgate-e2e-shared",
            &driftgate.webhook_url(),
            driftgate.ca_pem(),
        ));
        driftgate
    });
    &SHARED
}

/// The ValidatingWebhookConfiguration the Helm chart installs (rendered by helm), pointed at a
/// loopback driftgate: every write (and `scale`) outside kube-system and driftgate's namespace,
/// dry runs included, failing closed.
pub fn webhook_configuration(name: &str, url: &str, ca_pem: &[u8]) -> Value {
    super::chart::webhook_configuration(name, url, ca_pem)
}

/// The chart's records webhook alone (driftgate's backport records in every namespace, and
/// their CRD), pointed at a loopback driftgate.
pub fn records_webhook_configuration(name: &str, url: &str, ca_pem: &[u8]) -> Value {
    super::chart::records_webhook_configuration(name, url, ca_pem)
}

/// The chart's policies webhook (`policies.driftgate.dev`) alone: GatePolicy writes, which are
/// cluster-scoped, so every such write is sent to the driftgate that registers it.
pub fn policies_webhook_configuration(name: &str, url: &str, ca_pem: &[u8]) -> Value {
    super::chart::policies_webhook_configuration(name, url, ca_pem)
}

/// What a driftgate's log says when an address it was given is in use (`Error::Listen`).
const PORT_TAKEN: &str = "Address already in use";

impl Driftgate {
    /// Starts `driftgate serve --policy POLICY` on loopback with fresh certificates from
    /// `driftgate certs dev`, as the [`DRIFTGATE`] identity, and waits for `/readyz` (which
    /// needs the namespace cache synced). `extra_args` go last (e.g. `--request-timeout 1s`).
    pub fn start(name: &str, policy: &Path, extra_args: &[&str]) -> Driftgate {
        Self::start_as(name, policy, DRIFTGATE, extra_args)
    }

    /// [`Driftgate::start`] with another identity for its kubeconfig.
    pub fn start_as(name: &str, policy: &Path, who: Identity, extra_args: &[&str]) -> Driftgate {
        Self::start_with_kubeconfig(name, policy, &control_plane().kubeconfig(who), extra_args)
    }

    /// [`Driftgate::start`] with a kubeconfig file of the test's making (for example one whose
    /// server is a proxy the test can interrupt).
    pub fn start_with_kubeconfig(
        name: &str,
        policy: &Path,
        kubeconfig: &Path,
        extra_args: &[&str],
    ) -> Driftgate {
        Self::ready(|| Self::spawn_with_kubeconfig(name, policy, kubeconfig, extra_args))
    }

    /// Starts driftgate with `spawn` and waits for `/readyz`. Its ports were free a moment before
    /// it binds them ([`free_port`]): an outgoing connection of another test may take one as
    /// its source port meanwhile, and driftgate then exits saying the address is in use. Such a
    /// start is tried again on fresh ports, up to three starts; any other exit fails the test.
    fn ready(spawn: impl Fn() -> Driftgate) -> Driftgate {
        const STARTS: usize = 3;
        for start in 1..=STARTS {
            let driftgate = spawn();
            if driftgate.ready_unless_port_taken(Duration::from_secs(30)) {
                return driftgate;
            }
            if start == STARTS {
                // Exited: fails with its log.
                driftgate.lock_process().assert_running();
            }
            eprintln!(
                "driftgate {}: a port was taken before it could bind it; starting again on others:\n{}",
                driftgate.name,
                driftgate.log_tail(3)
            );
        }
        unreachable!("the last start returns or fails")
    }

    /// Waits for `/readyz` as [`Driftgate::wait_until_ready`] does; false when driftgate exited
    /// because one of its addresses was in use.
    fn ready_unless_port_taken(&self, timeout: Duration) -> bool {
        self.wait_for("/readyz answers 200", timeout, || {
            if self.lock_process().exited().is_some() && self.log_tail(40).contains(PORT_TAKEN) {
                return Some(false);
            }
            self.answers_ready().then_some(true)
        })
    }

    /// [`Driftgate::start_with_kubeconfig`] without waiting for readiness: for a driftgate that
    /// cannot reach the API server at its start.
    pub fn spawn_with_kubeconfig(
        name: &str,
        policy: &Path,
        kubeconfig: &Path,
        extra_args: &[&str],
    ) -> Driftgate {
        Self::spawn_serving(name, policy, kubeconfig, Certificates::DevFiles, extra_args)
    }

    /// Starts `driftgate serve` in runtime-certificate mode, as `who`: no certificate files;
    /// `runtime_args` (`--tls-secret NS/NAME`, `--webhook-configuration`, …) say where the
    /// Secret and the caBundle are. Waits for `/readyz`. [`Driftgate::ca_pem`] is empty: the
    /// CA is whatever driftgate writes into the configuration.
    pub fn start_with_runtime_certs(
        name: &str,
        policy: &Path,
        who: Identity,
        runtime_args: &[&str],
    ) -> Driftgate {
        Self::ready(|| {
            Self::spawn_serving(
                name,
                policy,
                &control_plane().kubeconfig(who),
                Certificates::Runtime,
                runtime_args,
            )
        })
    }

    fn spawn_serving(
        name: &str,
        policy: &Path,
        kubeconfig: &Path,
        certificates: Certificates,
        extra_args: &[&str],
    ) -> Driftgate {
        let control_plane = control_plane();
        static STARTED: AtomicUsize = AtomicUsize::new(0);
        let dir = control_plane.dir().join(format!(
            "driftgate-{name}-{}",
            STARTED.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("driftgate's directory is created");
        let webhook: SocketAddr = ([127, 0, 0, 1], free_port()).into();
        let admin: SocketAddr = ([127, 0, 0, 1], free_port()).into();
        let mut serve = Command::new(BIN);
        serve.arg("serve").arg("--policy").arg(policy);
        let ca_pem = match certificates {
            Certificates::DevFiles => Self::dev_certificates(&dir, &mut serve),
            Certificates::Runtime => String::new(),
        };
        serve
            .arg("--addr")
            .arg(webhook.to_string())
            .arg("--admin-addr")
            .arg(admin.to_string())
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["--instance", &format!("driftgate-e2e-{name}")])
            // Tests stop it; nothing routes to it that needs draining.
            .args(["--shutdown-delay", "0s", "--shutdown-grace", "2s"])
            .args(extra_args)
            // Review lines of writes no policy guards are at debug: scenarios read those too.
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or(E2E_LOG_FILTER.into()),
            );
        // No cleanup of `dir` when it exits: its log is there, and a driftgate that exits at
        // its start must still say why when the test reads it (the scratch directory goes with
        // the test binary).
        let process = Guarded::spawn(
            &format!("driftgate serve ({name})"),
            &serve,
            &dir.join("serve.log"),
            None,
            Duration::from_secs(5),
        );
        Driftgate {
            name: name.to_owned(),
            process: Mutex::new(process),
            dir,
            webhook,
            admin,
            ca_pem,
            registered: Mutex::default(),
        }
    }

    /// Fresh certificates from `driftgate certs dev` in `dir`, passed to `serve` as files;
    /// returns the CA (PEM).
    fn dev_certificates(dir: &Path, serve: &mut Command) -> String {
        let certs = dir.join("certs");
        let out = Command::new(BIN)
            .args(["certs", "dev", "--out"])
            .arg(&certs)
            .stdin(Stdio::null())
            .output()
            .expect("driftgate certs dev runs");
        assert!(
            out.status.success(),
            "driftgate certs dev failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let ca_pem = std::fs::read_to_string(certs.join("ca.crt")).expect("ca.crt reads");
        serve
            .arg("--tls-cert")
            .arg(certs.join("tls.crt"))
            .arg("--tls-key")
            .arg(certs.join("tls.key"));
        ca_pem
    }

    /// Waits until `/readyz` answers 200.
    pub fn wait_until_ready(&self, timeout: Duration) {
        self.wait_until("/readyz answers 200", timeout, || self.answers_ready());
    }

    fn answers_ready(&self) -> bool {
        self.admin_get("/readyz").is_ok_and(|(code, _)| code == 200)
    }

    /// `https://127.0.0.1:PORT/validate`
    pub fn webhook_url(&self) -> String {
        format!("https://{}/validate", self.webhook)
    }

    /// The webhook port's address.
    pub fn webhook_addr(&self) -> SocketAddr {
        self.webhook
    }

    /// The development CA that signed the serving certificate: the webhook's `caBundle`.
    pub fn ca_pem(&self) -> &[u8] {
        self.ca_pem.as_bytes()
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The end of the process's log (`RUST_LOG`, default [`E2E_LOG_FILTER`]: one line per
    /// review, out-of-scope ones included), once it has stopped growing.
    pub fn log_tail(&self, lines: usize) -> String {
        self.wait_for_quiet_log();
        self.lock_process().log_tail(lines)
    }

    /// Waits (up to 3 s) until the log has not grown for four of its writer's intervals.
    /// driftgate writes its log on a thread of its own, off the request path, in batches
    /// (`log_queue::FLUSH_INTERVAL` apart): a review's line reaches the file a moment after the
    /// API server has its answer, and a test reading the log straight after kubectl returns
    /// would miss it now and then.
    fn wait_for_quiet_log(&self) {
        wait_for_quiet_file(&self.dir.join("serve.log"));
    }

    fn lock_process(&self) -> std::sync::MutexGuard<'_, Guarded> {
        self.process.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A plain HTTP/1.1 GET on the admin port: status and body.
    pub fn admin_get(&self, path: &str) -> std::io::Result<(u16, String)> {
        super::admin::admin_get(self.admin, path)
    }

    /// The Prometheus text from `/metrics`.
    pub fn metrics(&self) -> String {
        match self.admin_get("/metrics") {
            Ok((200, body)) => body,
            other => panic!("GET /metrics of driftgate {}: {other:?}", self.name),
        }
    }

    /// The sum of a counter's samples whose labels contain every `label="value"` in `labels`.
    pub fn counter(&self, name: &str, labels: &[&str]) -> f64 {
        super::admin::counter_sum(&self.metrics(), name, labels)
    }

    /// How many AdmissionReviews it has answered.
    pub fn reviews(&self) -> f64 {
        self.counter("driftgate_admission_reviews_total", &[])
    }

    /// Creates (or replaces) `configuration`, a ValidatingWebhookConfiguration pointing here,
    /// and waits until the API server calls this webhook: a server-side dry-run ConfigMap
    /// create by the admin in `default`, repeated until this driftgate has counted a review.
    /// (A configuration whose selector leaves out `default` needs [`Driftgate::register_probing`].)
    pub fn register(&self, configuration: Value) {
        self.register_probing(configuration, "default");
    }

    /// [`Driftgate::register`], probing with a dry-run ConfigMap in `probe_namespace`.
    pub fn register_probing(&self, configuration: Value, probe_namespace: &str) {
        let control_plane = control_plane();
        let probe = format!("driftgate-e2e-probe-{}", self.name);
        self.register_with_probe(configuration, || {
            control_plane.kubectl(
                ADMIN,
                &[
                    "create",
                    "configmap",
                    &probe,
                    "-n",
                    probe_namespace,
                    "--dry-run=server",
                ],
            );
        });
    }

    /// [`Driftgate::register`] for a configuration that a plain ConfigMap would not match (an
    /// `objectSelector`, say): `probe` makes one write (a server-side dry run, so nothing is
    /// left behind) that the configuration does match, and is repeated until this driftgate
    /// has counted a review.
    pub fn register_with_probe(&self, configuration: Value, mut probe: impl FnMut()) {
        let name = configuration["metadata"]["name"]
            .as_str()
            .expect("the configuration has a name")
            .to_owned();
        control_plane().apply(ADMIN, &configuration.to_string());
        self.registered
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(name.clone());
        self.wait_until(
            &format!("the API server calls webhook {name}"),
            Duration::from_secs(30),
            || {
                let before = self.reviews();
                // Fails (or succeeds) without this webhook until the API server's webhook
                // informer has seen the configuration; only the count tells.
                probe();
                self.reviews() > before
            },
        );
    }

    /// The `driftgate serve` process's PID, for its CPU time and memory in /proc.
    pub fn pid(&self) -> Option<u32> {
        self.lock_process().pid()
    }

    /// Kills the process (SIGKILL: a crash), leaving its webhook configurations registered, as
    /// the API server sees a driftgate that died.
    pub fn kill(&self) {
        self.lock_process().kill();
    }

    /// Deletes a ValidatingWebhookConfiguration this driftgate registered.
    pub fn unregister(&self, name: &str) {
        control_plane()
            .kubectl(
                ADMIN,
                &[
                    "delete",
                    "validatingwebhookconfiguration",
                    name,
                    "--ignore-not-found",
                ],
            )
            .ok();
        self.registered
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|n| n != name);
    }

    /// Polls `ready` every 100 ms, failing with driftgate's log if it exits or time runs out.
    fn wait_until(&self, what: &str, timeout: Duration, mut ready: impl FnMut() -> bool) {
        self.wait_for(what, timeout, || ready().then_some(()));
    }

    /// Polls `probe` every 100 ms until it gives a value, failing with driftgate's log if it
    /// has exited without one or time runs out. `probe` sees an exit first (it may read the log).
    fn wait_for<T>(
        &self,
        what: &str,
        timeout: Duration,
        mut probe: impl FnMut() -> Option<T>,
    ) -> T {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(value) = probe() {
                return value;
            }
            self.lock_process().assert_running();
            assert!(
                Instant::now() < deadline,
                "driftgate {}: timed out after {timeout:?} waiting until {what}; its log:\n{}",
                self.name,
                self.log_tail(40)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Driftgate {
    fn drop(&mut self) {
        let names = std::mem::take(&mut *self.registered.lock().unwrap_or_else(|e| e.into_inner()));
        for name in names {
            let _ = control_plane().kubectl(
                ADMIN,
                &[
                    "delete",
                    "validatingwebhookconfiguration",
                    &name,
                    "--ignore-not-found",
                ],
            );
        }
        self.lock_process().stop(Duration::from_secs(5));
    }
}
