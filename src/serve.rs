//! `driftgate serve`: the webhook over TLS and the admin port, wired to the cluster.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use arc_swap::ArcSwap;
use axum_server::tls_rustls::RustlsAcceptor;
use clap::Args;
use hyper_util::rt::TokioTimer;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use axum_server::tls_rustls::RustlsConfig;

use crate::error::{Error, Result};
use crate::server::client_auth::{
    ClientAuth, ClientAuthSettings, ExpectedNames, HandshakeLog, spawn_client_ca_reloader,
};
use crate::server::connections::ConnectionLimit;
use crate::server::tls::{
    CertSlot, TlsFiles, install_crypto_provider, load_rustls_config, server_config_with_resolver,
    spawn_tls_reloader,
};
use crate::server::{AppState, MAX_BODY_BYTES, admin_router, router};
use driftgate_core::decision::ledger_guard::LedgerGuard;
use driftgate_core::policy::PolicySet;
use driftgate_core::reports::{DEFAULT_DENIAL_LIMITS, RecentDenials};
use driftgate_core::timefmt::{flag_duration, positive_flag_duration};
use driftgate_kube::blast_radius::{GateSelectorArgs, KeeperInputs, spawn_selector_keeper};
use driftgate_kube::event_sink::EventSink;
use driftgate_kube::kube_state::{
    NamespaceCache, ParentLookup, ResourceCatalog, client_config, client_for,
};
use driftgate_kube::leader::{LeaderArgs, Leadership};
use driftgate_kube::ledger::service::{Ledger, Upkeep};
use driftgate_kube::metrics::Metrics;
use driftgate_kube::runtime_certs::{RuntimeCertArgs, RuntimeCerts};
use driftgate_kube::tasks::cascade::CascadeReader;
use driftgate_kube::tasks::gatepolicies::{GatePolicyHealth, GatePolicyWatch, PolicySources};
use driftgate_kube::tasks::reload::{PolicyStatus, load_at_start, spawn_policy_reloader};
use driftgate_kube::tasks::reports::ReportInputs;

pub const DEV_CERT_DIR: &str = "certs-dev";
pub const DEV_POLICY: &str = "policies/example.yaml";

/// HTTP/2 streams one connection may have open at once.
pub const MAX_CONCURRENT_STREAMS: u32 = 32;

#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Development defaults: certificates in certs-dev/ (generated when missing),
    /// policies/example.yaml, 127.0.0.1:8443 and 127.0.0.1:8080, and no cluster unless
    /// --kubeconfig or --context names one (never the current kube context by accident: a
    /// local try must not watch, record or post Events in a real cluster).
    #[arg(long)]
    pub dev: bool,
    /// Policy file or directory (watched for changes).
    #[arg(long, value_name = "PATH", required_unless_present = "dev")]
    pub policy: Option<PathBuf>,
    /// Serving certificate chain (PEM), reloaded when it changes.
    #[arg(long, value_name = "FILE", required_unless_present_any = ["dev", "tls_secret"])]
    pub tls_cert: Option<PathBuf>,
    /// Serving private key (PEM), reloaded when it changes.
    #[arg(long, value_name = "FILE", required_unless_present_any = ["dev", "tls_secret"])]
    pub tls_key: Option<PathBuf>,
    /// Runtime mode: the CA and certificate kept and rotated in a Secret (boxed: many flags).
    #[command(flatten)]
    pub runtime_certs: Box<RuntimeCertArgs>,
    /// Who may call the webhook port (boxed: `serve`'s flags are many).
    #[command(flatten)]
    pub client_auth: Box<ClientAuthArgs>,
    /// Address of the TLS webhook port.
    #[arg(long, value_name = "ADDR")]
    pub addr: Option<SocketAddr>,
    /// Address of the plain-HTTP admin port (/healthz, /readyz, /metrics).
    #[arg(long, value_name = "ADDR")]
    pub admin_addr: Option<SocketAddr>,
    /// Kubeconfig to use; default: in-cluster config, then $KUBECONFIG or ~/.kube/config.
    #[arg(long, value_name = "FILE", conflicts_with = "no_kube")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (default: the current one).
    #[arg(long, value_name = "NAME", conflicts_with = "no_kube")]
    pub context: Option<String>,
    /// Run without a cluster: no namespace labels (namespace windows stay closed), no parent
    /// lookups, Events written to the log.
    #[arg(long)]
    pub no_kube: bool,
    /// Serve every policy in Audit, whatever its `mode` says: nothing is refused, and what
    /// would be is reported (WouldDeny Events and counts, PolicyReports). The chart sets it
    /// unless `enforcement: Enforce`, so that a first install observes before it enforces.
    #[arg(long)]
    pub audit_only: bool,
    /// Also read policies from GatePolicy objects (driftgate.dev/v1alpha1, cluster-scoped),
    /// beside --policy, and write their status. Needs a cluster.
    #[arg(long, conflicts_with = "no_kube")]
    pub gatepolicies: bool,
    /// Answer within this time, shorter than the webhook's timeoutSeconds (default 5s in the
    /// chart). Durations are written such as 500ms, 1.5s, 2m or 30d; the timeouts and intervals
    /// refuse 0, which would cut every request off or poll without pause.
    #[arg(long, value_name = "DURATION", default_value = "4s", value_parser = positive_flag_duration)]
    pub request_timeout: Duration,
    /// Close a new connection whose TLS handshake, or then first request headers, take longer
    /// than this (slow clients).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = positive_flag_duration)]
    pub header_timeout: Duration,
    /// Close a kept-alive connection idle for this long. Keep it above the API server's idle
    /// timeout for webhook connections (90s), so that the API server closes first and never
    /// sends a review on a connection we are closing.
    #[arg(long, value_name = "DURATION", default_value = "120s", value_parser = positive_flag_duration)]
    pub idle_timeout: Duration,
    /// On SIGTERM, fail readiness and keep serving this long, so that endpoints stop routing
    /// here before the listener closes; 0 closes at once (no Service routes here, as in tests).
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = flag_duration)]
    pub shutdown_delay: Duration,
    /// Then wait this long for in-flight reviews before closing connections; 0 closes them at
    /// once.
    #[arg(long, value_name = "DURATION", default_value = "20s", value_parser = flag_duration)]
    pub shutdown_grace: Duration,
    /// How often the policy and certificate files are checked for changes.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = positive_flag_duration)]
    pub reload_interval: Duration,
    /// How often the backport records are checked for break-glass windows that expired; an
    /// expiry is noticed (record AwaitingBackport, BreakGlassExpired Event) within this time.
    /// Suspensions are listed and counted (and, with --resume-expired-suspensions, resumed) as
    /// often.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = positive_flag_duration)]
    pub expiry_check_interval: Duration,
    /// Argo CD's namespace, where its Applications and settings (argocd-cm,
    /// argocd-cmd-params-cm) are read every expiry check for the records awaiting backport of
    /// objects Argo CD tracks: when Git already has an emergency change, Argo CD writes nothing,
    /// and its Application's status (Synced at a new revision, compared with the change in
    /// place) settles the record instead. Read only where a policy in Enforce mode guards
    /// Applications there; empty turns it off.
    #[arg(long, value_name = "NAMESPACE", default_value = "argocd")]
    pub argocd_namespace: String,
    /// Resume suspensions past their expiry (the leader, every expiry check): one patch that
    /// undoes each suspension found and removes the window's label and reason. Needs patch on
    /// the suspendable kinds (the chart's suspensions.autoResume grants it). Off: an expired
    /// suspension is only counted (driftgate_suspensions{state="expired"}) for the alert.
    #[arg(long)]
    pub resume_expired_suspensions: bool,
    /// How long a GitOps controller (one that break-glass windows hold) may go without a write
    /// in a policy's namespaces, dry runs included, before a refusal that points to Git adds that
    /// it may be down. Set it to a few of its reconcile intervals, and to the same as the
    /// DriftgateControllerSilent alert (the chart passes controllerSilence.afterSeconds to both).
    #[arg(long, value_name = "DURATION", default_value = "30m", value_parser = positive_flag_duration)]
    pub controller_silence_after: Duration,
    /// The namespace (driftgate's own; the chart passes the release namespace) of the durable
    /// records of each controller's last write, one coordination.k8s.io Lease per policy and
    /// controller: every replica records the writes it sees there and reads the others', so the
    /// gauge and refusals agree across replicas and survive restarts, and `driftgate backlog`
    /// can read them. Without it, each replica knows only the writes it reviewed since its start.
    #[arg(long, value_name = "NAMESPACE", conflicts_with = "no_kube")]
    pub controller_silence_namespace: Option<String>,
    /// Publish a wgpolicyk8s.io/v1alpha2 PolicyReport named driftgate in each guarded namespace
    /// (the leader, only when its content changed): open break-glass windows, backports
    /// pending and reverted, and the last denials this replica saw there (at most 20, within
    /// 1h). Needs the PolicyReport CRD (Kyverno and policy-reporter ship it); without it
    /// nothing is written and the log says so once.
    #[arg(long, conflicts_with = "no_kube")]
    pub policy_reports: bool,
    /// How often the PolicyReports are planned (and the changed ones written).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = positive_flag_duration)]
    pub policy_report_interval: Duration,
    /// Close new connections to the webhook port at once while this many are open (each costs
    /// ~12 KiB before its handshake, ~60 KiB kept alive after a review; the API server keeps a
    /// few per replica). Counted in driftgate_webhook_connections_refused_total.
    #[arg(long, value_name = "N", default_value_t = 2048, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections: u32,
    /// Bytes of request bodies held at once, across all connections and HTTP/2 streams (e.g.
    /// 32Mi); a quarter is kept for bodies up to 64 KiB. A request that finds no room within 1s
    /// is answered 503. Counted in driftgate_webhook_body_bytes_in_flight and
    /// driftgate_webhook_body_budget_refused_total.
    #[arg(long, value_name = "BYTES", default_value = "32Mi", value_parser = parse_body_budget)]
    pub max_body_bytes_in_flight: usize,
    /// How many Events may wait for the API server before new ones are dropped.
    #[arg(long, value_name = "N", default_value_t = 1024)]
    pub event_queue: usize,
    /// Log lines as JSON (one object per line) or as text.
    #[arg(long, value_enum, default_value = "text")]
    pub log_format: LogFormat,
    /// Log lines that may wait to be written to stderr (by a thread of their own, every 50 ms or
    /// when half this many wait, so that a slow reader of stderr never holds a review and no
    /// review wakes the writer); beyond them new lines are dropped and counted in
    /// driftgate_log_lines_dropped_total. At a few hundred bytes a line, the default holds a
    /// few MiB.
    #[arg(long, value_name = "N", default_value_t = 8192, value_parser = clap::value_parser!(u32).range(1..))]
    pub log_queue_lines: u32,
    /// Who writes backport records and their CRD, and how long settled records are kept.
    #[command(flatten)]
    pub ledger: Box<LedgerArgs>,
    /// The gate webhook's namespaceSelector, kept to the namespaces policies guard.
    #[command(flatten)]
    pub gate_selector: Box<GateSelectorArgs>,
    /// Which replica writes the webhook configuration.
    #[command(flatten)]
    pub leader: Box<LeaderArgs>,
    /// The reporting instance in Events (and the leader Lease's holder); default: $POD_NAME,
    /// then the host name.
    #[arg(long, value_name = "NAME", env = "POD_NAME")]
    pub instance: Option<String>,
}

/// `serve`'s flags for authenticating the webhook's caller.
#[derive(Debug, Clone, Args)]
pub struct ClientAuthArgs {
    /// CA certificates (PEM bundle) that sign the API server's client certificate for webhooks.
    /// With it, the webhook port requires a client certificate that chains to one of them and
    /// names one of --client-name: any other caller fails the TLS handshake, before a review is
    /// read. The API server presents one when its admission configuration names a kubeconfig
    /// for webhooks. Reloaded when it changes.
    #[arg(long, value_name = "FILE")]
    pub client_ca_file: Option<PathBuf>,
    /// A name the caller's client certificate must carry, exactly, as its subject CN or a DNS
    /// or URI SAN; repeat for more. Default: kube-apiserver.
    #[arg(long, value_name = "NAME", requires = "client_ca_file", value_parser = non_empty_name)]
    pub client_name: Vec<String>,
}

impl ClientAuthArgs {
    /// The callers the webhook port accepts; None: anyone.
    pub fn settings(&self) -> Option<ClientAuthSettings> {
        self.client_ca_file
            .clone()
            .map(|ca_file| ClientAuthSettings {
                ca_file,
                names: ExpectedNames::new(&self.client_name),
            })
    }
}

/// `serve`'s flags for the ledger's guard and upkeep (boxed: `serve`'s flags are many).
#[derive(Debug, Clone, Args)]
pub struct LedgerArgs {
    /// driftgate's own username as the API server authenticates it (the chart passes
    /// system:serviceaccount:NAMESPACE:SERVICEACCOUNT): the only identity that creates
    /// backport records, moves their phase and deletes them. Default: asked from the API server
    /// at start (a SelfSubjectReview).
    #[arg(long, value_name = "USERNAME")]
    pub service_account: Option<String>,
    /// A user that may change or delete the backport records' CRD (deleting it deletes every
    /// record); repeat for more. Nobody else may.
    #[arg(long, value_name = "USERNAME")]
    pub ledger_crd_admin_user: Vec<String>,
    /// A group whose members may change or delete the backport records' CRD; repeat for more.
    #[arg(long, value_name = "GROUP")]
    pub ledger_crd_admin_group: Vec<String>,
    /// Delete a backport record this long after it settled (Backported or Resolved); 0 keeps
    /// settled records for ever.
    #[arg(long, value_name = "DURATION", default_value = "30d", value_parser = flag_duration)]
    pub record_retention: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// `serve`'s log writer. Dropping it writes out the lines still queued (for up to a second):
/// keep it until the process ends, past the last line (the fatal error's included).
#[must_use = "dropping the log writer stops the writing of log lines"]
pub struct LogWriter {
    _flush_on_drop: driftgate_kube::log_queue::LogQueueGuard,
    /// How many lines were dropped because the queue was full.
    pub dropped: driftgate_kube::log_queue::DroppedLines,
}

/// The thread that writes the log.
const LOG_THREAD: &str = "driftgate-log";

/// Logs go to stderr from a thread of their own, so that a slow reader of stderr never holds a
/// review, through a queue of `queue_lines` (full: lines are dropped) written out in batches
/// ([`driftgate_kube::log_queue`]: no review wakes the writer); `RUST_LOG` filters them
/// (default `info`). An error when that thread cannot be started.
pub fn init_logging(format: LogFormat, queue_lines: u32) -> std::io::Result<LogWriter> {
    use driftgate_kube::log_queue::{FLUSH_INTERVAL, LogQueue};
    let (queue, guard) = LogQueue::start(
        std::io::stderr(),
        queue_lines as usize,
        FLUSH_INTERVAL,
        LOG_THREAD,
    )?;
    let dropped = queue.dropped();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colours only on a terminal: in a pod, stderr goes to `kubectl logs` and log collectors,
    // where escape codes would break every field (`namespace=prod` no longer matches).
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(move || queue.clone());
    let _ = match format {
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
        LogFormat::Text => builder.try_init(),
    };
    log_panics(format);
    Ok(LogWriter {
        _flush_on_drop: guard,
        dropped,
    })
}

/// With `--log-format json`, a panic (a bug) is logged as one JSON line like every other,
/// through the log's queue: Rust's own report is lines of text on stderr, which a log collector
/// parsing JSON takes apart or drops. With the log off (`RUST_LOG=off`), Rust's report stays.
pub fn log_panics(format: LogFormat) {
    if format != LogFormat::Json {
        return;
    }
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let thread = std::thread::current();
        // The log's own thread cannot write its panic: Rust's report says it.
        if !tracing::enabled!(tracing::Level::ERROR) || thread.name() == Some(LOG_THREAD) {
            return report(info);
        }
        let payload = info.payload();
        let panic = (payload.downcast_ref::<&str>().copied())
            .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
            .unwrap_or("(no message)");
        let location = info.location().map(|l| l.to_string()).unwrap_or_default();
        let thread = thread.name().unwrap_or("(unnamed)");
        // As Rust's report: captured only when RUST_BACKTRACE asks for it.
        let backtrace = std::backtrace::Backtrace::capture();
        if backtrace.status() == std::backtrace::BacktraceStatus::Captured {
            tracing::error!(panic, location, thread, %backtrace, "a thread panicked");
        } else {
            tracing::error!(panic, location, thread, "a thread panicked");
        }
    }));
}

/// A byte count, plain or with a Ki/Mi/Gi suffix, with room for one body at the limit beside
/// the quarter kept for small ones.
fn parse_body_budget(value: &str) -> std::result::Result<usize, String> {
    let (digits, unit) = match value.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => value.split_at(at),
        None => (value, ""),
    };
    let scale: usize = match unit {
        "" => 1,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        _ => return Err(format!("\"{value}\" is not a byte count such as 32Mi")),
    };
    let bytes = digits
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(scale))
        .ok_or_else(|| format!("\"{value}\" is not a byte count such as 32Mi"))?;
    let least = MIN_BODY_BUDGET;
    if bytes < least {
        return Err(format!(
            "must be at least {}Mi: room for one review at the {} MiB body limit beside the quarter kept for small ones",
            least >> 20,
            MAX_BODY_BYTES >> 20
        ));
    }
    Ok(bytes)
}

/// The smallest body budget: three quarters of it hold one body at the limit.
const MIN_BODY_BUDGET: usize = (MAX_BODY_BYTES / 3 * 4 + (1 << 20) - 1) & !((1 << 20) - 1);

/// How long recording a break-glass change may take: a second less than the request timeout
/// (which bounds the whole review), at least half of it.
pub fn ledger_write_timeout(request_timeout: Duration) -> Duration {
    request_timeout
        .saturating_sub(Duration::from_secs(1))
        .max(request_timeout / 2)
}

/// A `--client-name`: an empty one would match no certificate.
fn non_empty_name(value: &str) -> std::result::Result<String, String> {
    if value.is_empty() {
        return Err(
            "must not be empty: the name a caller's certificate carries, such as kube-apiserver"
                .into(),
        );
    }
    Ok(value.to_owned())
}

/// Where the serving certificate comes from.
#[derive(Debug, Clone)]
pub enum TlsSource {
    Files(TlsFiles),
    Secret(RuntimeCerts),
}

/// The settings after `--dev` defaults are applied.
#[derive(Debug, Clone)]
pub struct ServeSettings {
    pub policy: PathBuf,
    pub tls: TlsSource,
    /// With `--client-ca-file`: the callers the webhook port accepts.
    pub client_auth: Option<ClientAuthSettings>,
    pub addr: SocketAddr,
    pub admin_addr: SocketAddr,
    pub args: ServeArgs,
}

impl ServeArgs {
    pub fn settings(&self) -> Result<ServeSettings> {
        let runtime = self.runtime_certs.settings()?;
        let (policy, tls, addr, admin) = if let Some(runtime) = runtime {
            (
                self.policy
                    .clone()
                    .ok_or(Error::MissingFlag { flag: "--policy" })?,
                TlsSource::Secret(runtime),
                self.addr.unwrap_or(([0, 0, 0, 0], 8443).into()),
                self.admin_addr.unwrap_or(([0, 0, 0, 0], 8080).into()),
            )
        } else if self.dev {
            let policy = self.policy.clone().unwrap_or_else(|| DEV_POLICY.into());
            // Checked before certificates are made: run outside a checkout, --dev would serve
            // nothing and make certs-dev/ wherever it was started.
            if self.policy.is_none() && !policy.exists() {
                return Err(Error::DevPolicyMissing { path: policy });
            }
            let certs =
                driftgate_core::certs::ensure_dev_certs(std::path::Path::new(DEV_CERT_DIR))?;
            (
                policy,
                TlsSource::Files(TlsFiles {
                    cert: self.tls_cert.clone().unwrap_or(certs.cert),
                    key: self.tls_key.clone().unwrap_or(certs.key),
                }),
                self.addr.unwrap_or(([127, 0, 0, 1], 8443).into()),
                self.admin_addr.unwrap_or(([127, 0, 0, 1], 8080).into()),
            )
        } else {
            // clap enforces these without --dev.
            let missing = |flag| Error::MissingFlag { flag };
            (
                self.policy.clone().ok_or_else(|| missing("--policy"))?,
                TlsSource::Files(TlsFiles {
                    cert: self.tls_cert.clone().ok_or_else(|| missing("--tls-cert"))?,
                    key: self.tls_key.clone().ok_or_else(|| missing("--tls-key"))?,
                }),
                self.addr.unwrap_or(([0, 0, 0, 0], 8443).into()),
                self.admin_addr.unwrap_or(([0, 0, 0, 0], 8080).into()),
            )
        };
        let client_auth = self.client_auth.settings();
        Ok(ServeSettings {
            policy,
            tls,
            client_auth,
            addr,
            admin_addr: admin,
            args: self.clone(),
        })
    }
}

/// A kube client per the flags; with `--dev`, only when `--kubeconfig` or `--context` names a
/// cluster.
async fn kube_client(args: &ServeArgs) -> Result<Option<kube::Client>> {
    if args.no_kube {
        return Ok(None);
    }
    if args.dev && args.kubeconfig.is_none() && args.context.is_none() {
        tracing::info!(
            "--dev: no cluster (pass --kubeconfig or --context to use one); Events go to the log, namespace windows stay closed"
        );
        return Ok(None);
    }
    let config = match (
        client_config(args.kubeconfig.as_deref(), args.context.as_deref()).await,
        args.dev,
    ) {
        (Ok(config), _) => config,
        (Err(error), true) => {
            tracing::info!(%error, "--dev without a cluster: Events go to the log, namespace windows stay closed");
            return Ok(None);
        }
        (Err(error), false) => {
            return Err(Error::ClusterRequired {
                source: Box::new(error.into()),
            });
        }
    };
    Ok(client_for(config).map(Some)?)
}

fn instance_name(args: &ServeArgs) -> String {
    args.instance
        .clone()
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_owned())
        })
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "driftgate".to_owned())
}

/// Who may write backport records and their CRD, as far as the flags tell. Without
/// `--service-account` the writer is asked from the API server (see [`Ledger::learn_writer`]).
fn ledger_guard(args: &ServeArgs) -> LedgerGuard {
    LedgerGuard {
        writer: args.ledger.service_account.clone(),
        crd_admin_users: args.ledger.ledger_crd_admin_user.clone(),
        crd_admin_groups: args.ledger.ledger_crd_admin_group.clone(),
    }
}

/// With `--gatepolicies`, the watch of GatePolicy objects (feeding `sources`), and its health for
/// readiness; None without the flag.
fn gatepolicy_source(
    args: &ServeArgs,
    client: Option<&kube::Client>,
    sources: &Arc<PolicySources>,
    metrics: &Arc<Metrics>,
    leader: tokio::sync::watch::Receiver<bool>,
    tasks: &mut Vec<tokio::task::JoinHandle<()>>,
    shutdown: &CancellationToken,
) -> Result<Option<Arc<GatePolicyHealth>>> {
    if !args.gatepolicies {
        return Ok(None);
    }
    let Some(client) = client else {
        return Err(Error::GatePoliciesWithoutCluster);
    };
    let health = Arc::new(GatePolicyHealth::default());
    let watch = GatePolicyWatch {
        client: client.clone(),
        sources: sources.clone(),
        health: health.clone(),
        metrics: metrics.clone(),
        leader,
        resync: args.reload_interval.max(Duration::from_secs(10)),
    };
    tasks.push(watch.spawn(shutdown.clone()));
    Ok(Some(health))
}

/// Runs until SIGTERM or SIGINT, then drains: readiness fails first, in-flight reviews finish,
/// kept-alive connections are closed.
pub async fn serve(args: ServeArgs, log: &LogWriter) -> Result<()> {
    install_crypto_provider();
    raise_open_files_limit();
    let settings = args.settings()?;
    let metrics = Arc::new(Metrics::new());
    metrics.log_lines_dropped.attach(log.dropped.clone());
    // Read before anything else: a client CA file that does not load is a fatal error.
    let client_auth = match &settings.client_auth {
        Some(settings) => Some(Arc::new(ClientAuth::load(settings, &metrics)?)),
        None => None,
    };
    let policies = Policies::load(&args, &settings, &metrics);
    let mut startup = Startup {
        client: kube_client(&args).await?,
        metrics,
        shutdown: CancellationToken::new(),
        tasks: Vec::new(),
    };
    // Only the leader writes the webhook configuration (its namespaceSelector and caBundle) and
    // GatePolicy statuses; without a Lease, this replica does. A stopping replica steps down at
    // SIGTERM, not after draining its reviews: a running one takes the Lease at once.
    let step_down = startup.shutdown.child_token();
    let leading = startup.leadership(&args, &step_down);
    let tls_config = startup
        .tls_config(&settings, client_auth.as_ref(), &leading)
        .await?;
    let reads = startup.cluster_reads();
    let (events, events_task) = EventSink::spawn(
        startup.client.clone(),
        instance_name(&args),
        args.event_queue,
        startup.metrics.clone(),
        startup.shutdown.clone(),
    );
    let ledger = startup.ledger(&args, &events, &policies.set, &reads);
    startup.suspensions(&args, &policies.set, &events, &leading);
    let gatepolicies = gatepolicy_source(
        &args,
        startup.client.as_ref(),
        &policies.sources,
        &startup.metrics,
        leading.clone(),
        &mut startup.tasks,
        &startup.shutdown,
    )?;
    if let (None, Some(client)) = (&args.ledger.service_account, &startup.client) {
        let task = ledger.learn_writer(client.clone(), startup.shutdown.clone());
        startup.tasks.push(task);
    }
    // The gate is armed only once the webhook port serves (blast_radius::HoldReason::NotServing).
    let (serving, serving_seen) = tokio::sync::watch::channel(false);
    startup.selector_keeper(&args, &policies, &reads, &leading, serving_seen);
    let denials = startup.reports(&args, &ledger, &policies.set, &reads, &leading);
    // With a client CA every review comes through a handshake that verified the API server;
    // without one, every review is a claim, confirmed by reading back what the API server stored.
    let caller_authenticated = client_auth.is_some();
    let mut state = AppState::new(
        policies.set.clone(),
        reads.namespaces,
        reads.parents,
        events,
        startup.metrics.clone(),
    )
    .with_policy_status(policies.status.clone())
    .with_gatepolicies(gatepolicies)
    .with_ledger(ledger.with_authenticated_callers(caller_authenticated))
    .with_resources(reads.resources)
    .with_cascades(reads.cascades)
    .with_body_budget(args.max_body_bytes_in_flight)
    .with_silence_after(args.controller_silence_after)
    .with_read_back(startup.client.clone(), caller_authenticated);
    if let Some(denials) = denials {
        state = state.with_denials(denials);
    }
    let state = Arc::new(state);
    startup.state_tasks(&args, &state, &policies.set);
    let force_reload = Arc::new(Notify::new());
    startup.tasks.push(spawn_policy_reloader(
        policies.seen,
        policies.sources,
        policies.status,
        args.reload_interval,
        force_reload.clone(),
        startup.metrics.clone(),
        startup.shutdown.clone(),
    ));

    let ports = Ports::serve(&args, &settings, tls_config, &state, &startup).await?;
    tracing::info!(webhook = %ports.bound, admin = %settings.admin_addr, policy = %settings.policy.display(), cluster = startup.client.is_some(), caller_authenticated = client_auth.is_some(), audit_only = args.audit_only, "driftgate serving");
    let _ = serving.send(true);
    log_client_auth(client_auth.as_deref());
    if args.dev {
        print_dev_hint(ports.bound);
    }

    wait_for_signal(force_reload).await;
    ports
        .drain(&args, &state, step_down, startup, events_task)
        .await;
    Ok(())
}

/// The policies `serve` serves: the set every review reads, its load status, where it comes
/// from, and what the first load saw (for the reloader).
struct Policies {
    set: Arc<ArcSwap<PolicySet>>,
    status: Arc<PolicyStatus>,
    sources: Arc<PolicySources>,
    seen: driftgate_kube::tasks::reload::Seen,
}

impl Policies {
    /// A bad policy leaves the process up and not ready, polling the file (never a crash loop):
    /// until it loads, the set is empty and every review is answered 503 (see reload.rs).
    fn load(args: &ServeArgs, settings: &ServeSettings, metrics: &Arc<Metrics>) -> Policies {
        let set = Arc::new(ArcSwap::from_pointee(PolicySet::default()));
        let status = Arc::new(PolicyStatus::default());
        // The files' set joined with the GatePolicy objects' (none without --gatepolicies).
        let sources = Arc::new(PolicySources::new(set.clone(), args.audit_only));
        if args.audit_only {
            tracing::info!(
                "--audit-only: every policy is served in Audit; nothing is refused, what would be is reported"
            );
        }
        let seen = load_at_start(settings.policy.clone(), sources.as_ref(), &status, metrics);
        Policies {
            set,
            status,
            sources,
            seen,
        }
    }
}

/// What `serve` has started so far: the cluster client (none with --no-kube or --dev), the
/// metrics, the token that stops the background tasks, and their handles, awaited at the end.
struct Startup {
    client: Option<kube::Client>,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// What the webhook reads from the cluster while it decides (each disabled without a client).
struct ClusterReads {
    namespaces: NamespaceCache,
    parents: ParentLookup,
    resources: ResourceCatalog,
    cascades: CascadeReader,
}

impl Startup {
    fn leadership(
        &mut self,
        args: &ServeArgs,
        step_down: &CancellationToken,
    ) -> tokio::sync::watch::Receiver<bool> {
        match (
            &self.client,
            args.leader.lease_settings(instance_name(args)),
        ) {
            (Some(client), Some(lease)) => {
                let (leading, task) = Leadership::spawn(
                    client.clone(),
                    lease,
                    self.metrics.clone(),
                    step_down.clone(),
                );
                self.tasks.push(task);
                leading
            }
            _ => Leadership::sole(),
        }
    }

    /// The webhook port's TLS configuration, kept current by a reloader (files) or by the
    /// runtime certificates' rotation (a Secret), and the client CA's reloader.
    async fn tls_config(
        &mut self,
        settings: &ServeSettings,
        client_auth: Option<&Arc<ClientAuth>>,
        leading: &tokio::sync::watch::Receiver<bool>,
    ) -> Result<RustlsConfig> {
        let args = &settings.args;
        if let Some(client_auth) = client_auth {
            self.tasks.push(spawn_client_ca_reloader(
                client_auth.clone(),
                args.reload_interval,
                self.metrics.clone(),
                self.shutdown.clone(),
            ));
        }
        Ok(match &settings.tls {
            TlsSource::Files(files) => {
                let config = load_rustls_config(files, client_auth).await?;
                self.tasks.push(spawn_tls_reloader(
                    config.clone(),
                    files.clone(),
                    client_auth.cloned(),
                    args.reload_interval,
                    self.metrics.clone(),
                    self.shutdown.clone(),
                ));
                config
            }
            TlsSource::Secret(runtime) => {
                let client = self
                    .client
                    .clone()
                    .ok_or(driftgate_kube::runtime_certs::RuntimeCertError::NoCluster)?;
                let slot = Arc::new(CertSlot::default());
                self.tasks.extend(driftgate_kube::runtime_certs::spawn(
                    client,
                    runtime.clone(),
                    slot.clone(),
                    leading.clone(),
                    self.metrics.clone(),
                    self.shutdown.clone(),
                ));
                wait_for_certificate(&slot, &runtime.name).await;
                RustlsConfig::from_config(server_config_with_resolver(slot, client_auth))
            }
        })
    }

    fn cluster_reads(&mut self) -> ClusterReads {
        let Some(client) = self.client.clone() else {
            return ClusterReads {
                namespaces: NamespaceCache::disabled(),
                parents: ParentLookup::new(None, Duration::from_secs(2), self.metrics.clone()),
                resources: ResourceCatalog::disabled(),
                cascades: CascadeReader::disabled(),
            };
        };
        let (namespaces, task) =
            NamespaceCache::spawn(client.clone(), self.metrics.clone(), self.shutdown.clone());
        self.tasks.push(task);
        let parents = ParentLookup::new(
            Some(client.clone()),
            Duration::from_secs(2),
            self.metrics.clone(),
        );
        let resources = ResourceCatalog::new(client.clone(), Duration::from_millis(1500));
        // Read before the first review needs it; a review that comes first waits for it.
        let first = resources.clone();
        self.tasks
            .push(tokio::spawn(async move { first.refresh(true).await }));
        // What a DELETE would take with it: a few metadata lists, within the parent lookup's time.
        let cascades = CascadeReader::new(client, resources.clone(), Duration::from_secs(2));
        ClusterReads {
            namespaces,
            parents,
            resources,
            cascades,
        }
    }

    fn ledger(
        &mut self,
        args: &ServeArgs,
        events: &EventSink,
        policies: &Arc<ArcSwap<PolicySet>>,
        reads: &ClusterReads,
    ) -> Ledger {
        let ledger = match &self.client {
            Some(client) => {
                let upkeep = Upkeep {
                    expiry_interval: args.expiry_check_interval,
                    retention: Some(args.ledger.record_retention).filter(|d| !d.is_zero()),
                    argocd: Some(args.argocd_namespace.clone())
                        .filter(|namespace| !namespace.is_empty())
                        .map(|namespace| driftgate_kube::ledger::service::ArgoCdStatus {
                            namespace,
                            resources: reads.resources.clone(),
                        }),
                };
                let (ledger, tasks) = Ledger::spawn(
                    client.clone(),
                    events.clone(),
                    self.metrics.clone(),
                    policies.clone(),
                    reads.namespaces.clone(),
                    upkeep,
                    self.shutdown.clone(),
                );
                self.tasks.extend(tasks);
                // Recording gives up in time for driftgate's own refusal to reach the person.
                ledger.with_write_timeout(ledger_write_timeout(args.request_timeout))
            }
            None => Ledger::disabled(self.metrics.clone()),
        };
        ledger.with_guard(ledger_guard(args))
    }

    /// Suspensions past their expiry are noticed as windows are: every expiry check; and
    /// resumed then, by the leader, when asked to.
    fn suspensions(
        &mut self,
        args: &ServeArgs,
        policies: &Arc<ArcSwap<PolicySet>>,
        events: &EventSink,
        leading: &tokio::sync::watch::Receiver<bool>,
    ) {
        let Some(client) = &self.client else {
            return;
        };
        let auto_resume = args.resume_expired_suspensions.then(|| {
            driftgate_kube::tasks::suspensions::AutoResume {
                leading: leading.clone(),
                events: events.clone(),
            }
        });
        self.tasks.push(driftgate_kube::tasks::suspensions::spawn(
            client.clone(),
            policies.clone(),
            self.metrics.clone(),
            args.expiry_check_interval,
            auto_resume,
            self.shutdown.clone(),
        ));
    }

    fn selector_keeper(
        &mut self,
        args: &ServeArgs,
        policies: &Policies,
        reads: &ClusterReads,
        leading: &tokio::sync::watch::Receiver<bool>,
        serving: tokio::sync::watch::Receiver<bool>,
    ) {
        let (Some(client), Some(gate)) = (&self.client, args.gate_selector.gate_webhook()) else {
            return;
        };
        let inputs = KeeperInputs {
            gate,
            policies: policies.set.clone(),
            policy_status: policies.status.clone(),
            namespaces: reads.namespaces.clone(),
            leading: leading.clone(),
            serving,
            metrics: self.metrics.clone(),
        };
        self.tasks.push(spawn_selector_keeper(
            client.clone(),
            inputs,
            self.shutdown.clone(),
        ));
    }

    /// The PolicyReports' writer, and the refusals it reports from (none without
    /// --policy-reports).
    fn reports(
        &mut self,
        args: &ServeArgs,
        ledger: &Ledger,
        policies: &Arc<ArcSwap<PolicySet>>,
        reads: &ClusterReads,
        leading: &tokio::sync::watch::Receiver<bool>,
    ) -> Option<Arc<std::sync::Mutex<RecentDenials>>> {
        if !args.policy_reports {
            return None;
        }
        let denials = Arc::new(std::sync::Mutex::new(RecentDenials::new(
            DEFAULT_DENIAL_LIMITS,
        )));
        if let Some(client) = &self.client {
            let inputs = ReportInputs {
                ledger: ledger.clone(),
                policies: policies.clone(),
                namespaces: reads.namespaces.clone(),
                denials: denials.clone(),
                leading: leading.clone(),
                metrics: self.metrics.clone(),
                interval: args.policy_report_interval,
            };
            self.tasks.push(driftgate_kube::tasks::reports::spawn(
                client.clone(),
                inputs,
                self.shutdown.clone(),
            ));
        }
        Some(denials)
    }

    /// The tasks that read the webhook's own state: the controller-silence records and the
    /// lingering-label gauge.
    fn state_tasks(
        &mut self,
        args: &ServeArgs,
        state: &Arc<AppState>,
        policies: &Arc<ArcSwap<PolicySet>>,
    ) {
        if let (Some(client), Some(namespace)) = (&self.client, &args.controller_silence_namespace)
        {
            self.tasks
                .push(driftgate_kube::tasks::silence::spawn_records(
                    client.clone(),
                    namespace,
                    instance_name(args),
                    policies.clone(),
                    state.effects.silence.clone(),
                    self.shutdown.clone(),
                ));
        }
        self.tasks.push(crate::server::lingering::spawn(
            state.clone(),
            args.expiry_check_interval,
            self.shutdown.clone(),
        ));
    }
}

/// The two listening ports: the webhook's (TLS) and the admin port.
struct Ports {
    bound: SocketAddr,
    handle: axum_server::Handle<SocketAddr>,
    webhook: tokio::task::JoinHandle<std::io::Result<()>>,
    admin: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Ports {
    /// After the signal: readiness off and the Lease given up at once, then in-flight reviews
    /// finished within the grace, then the admin port, the Event queue and every task.
    async fn drain(
        self,
        args: &ServeArgs,
        state: &AppState,
        step_down: CancellationToken,
        startup: Startup,
        events_task: tokio::task::JoinHandle<()>,
    ) {
        tracing::info!(delay = ?args.shutdown_delay, grace = ?args.shutdown_grace, "shutting down: readiness off, then finishing in-flight reviews");
        state.serving.accepting.store(false, Ordering::Relaxed);
        step_down.cancel();
        tokio::time::sleep(args.shutdown_delay).await;
        self.handle.graceful_shutdown(Some(args.shutdown_grace));
        let _ = self.webhook.await;
        startup.shutdown.cancel();
        let _ = self.admin.await;
        let _ = events_task.await;
        for task in startup.tasks {
            let _ = task.await;
        }
        tracing::info!("driftgate stopped");
    }

    async fn serve(
        args: &ServeArgs,
        settings: &ServeSettings,
        tls_config: RustlsConfig,
        state: &Arc<AppState>,
        startup: &Startup,
    ) -> Result<Ports> {
        let metrics = &startup.metrics;
        let handle = axum_server::Handle::new();
        // A slow client is cut off at --header-timeout whether it is slow in the TLS handshake
        // or in its first request's headers (axum-server's own handshake limit is a fixed 10 s).
        let acceptor = RustlsAcceptor::new(tls_config)
            .handshake_timeout(args.header_timeout)
            .acceptor(ConnectionLimit::new(
                args.max_connections as usize,
                metrics.webhook_connections_open.clone(),
                metrics.webhook_connections_refused.clone(),
            ));
        let acceptor = HandshakeLog::new(acceptor, metrics);
        let mut server = axum_server::from_tcp(listen(settings.addr)?)
            .map_err(|source| Error::Listen {
                addr: settings.addr,
                source,
            })?
            .acceptor(acceptor)
            .handle(handle.clone());
        // The API server calls over HTTP/1.1 with pooled keep-alive connections: keep them
        // open. hyper's header read timer also runs while a kept-alive connection waits for its
        // next request, so it is the idle timeout; slow headers on a new connection are bounded
        // by the first-request timeout instead.
        server
            .http_builder()
            .http1()
            .timer(TokioTimer::new())
            .keep_alive(true)
            .header_read_timeout(Some(args.idle_timeout));
        // Every stream is a request whose body may wait for the body budget; the budget bounds
        // their memory, this bounds how many one connection may hold open (hyper's default: 200).
        server
            .http_builder()
            .http2()
            .max_concurrent_streams(MAX_CONCURRENT_STREAMS);
        let server = server.first_request_timeout(args.header_timeout);
        let app = router(state.clone(), args.request_timeout);
        let webhook = tokio::spawn(server.serve(app.into_make_service()));

        let admin_listener = tokio::net::TcpListener::bind(settings.admin_addr)
            .await
            .map_err(|source| Error::AdminListen {
                addr: settings.admin_addr,
                source,
            })?;
        let admin_shutdown = startup.shutdown.clone();
        let admin_app = admin_router(state.clone());
        let admin = tokio::spawn(async move {
            axum::serve(admin_listener, admin_app.into_make_service())
                .with_graceful_shutdown(async move { admin_shutdown.cancelled().await })
                .await
        });

        let Some(bound) = handle.listening().await else {
            // The server task ended before listening: surface its error.
            return match webhook.await {
                Ok(Err(source)) => Err(Error::Listen {
                    addr: settings.addr,
                    source,
                }),
                _ => Err(Error::ListenerEnded {
                    addr: settings.addr,
                }),
            };
        };
        Ok(Ports {
            bound,
            handle,
            webhook,
            admin,
        })
    }
}

fn print_dev_hint(bound: SocketAddr) {
    let fixture = "tests/fixtures/kubectl-edit.json";
    let ca = std::path::Path::new(DEV_CERT_DIR).join("ca.crt");
    println!(
        "driftgate is serving https://localhost:{}/validate; try: curl --cacert {} -H 'Content-Type: application/json' --data @{fixture} https://localhost:{}/validate",
        bound.port(),
        ca.display(),
        bound.port()
    );
}

/// Says once, at start, who may call the webhook port (`driftgate_webhook_client_auth` says it
/// too).
fn log_client_auth(client_auth: Option<&ClientAuth>) {
    match client_auth {
        Some(auth) => tracing::info!(
            client_ca_file = %auth.ca_file().display(),
            client_names = %auth.names(),
            "webhook callers are authenticated: the TLS handshake requires a client certificate \
             from the client CAs that names one of client_names; other callers fail it"
        ),
        None => tracing::info!(
            "webhook callers are not authenticated (no --client-ca-file): anyone who can reach \
             the webhook port can send reviews; restrict who can with a NetworkPolicy, or have \
             the API server present a client certificate (chart README, \"Authenticating the \
             API server\")"
        ),
    }
}

/// Runtime mode listens once the Secret's certificate is loaded: a handshake before that
/// would fail for want of a certificate.
async fn wait_for_certificate(slot: &CertSlot, secret: &str) {
    let mut waited = Duration::ZERO;
    while !slot.is_loaded() {
        if waited == Duration::from_secs(10) {
            tracing::warn!(
                secret,
                "still waiting for the certificate Secret to be created and read"
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        waited += Duration::from_millis(100);
    }
}

/// The webhook's listening socket, with a listen queue of 1024 rather than the standard
/// library's 128: when many connections arrive at once (API servers reconnecting after a
/// restart), a short queue overflows and the kernel makes the excess wait for SYN-ACK
/// retransmits, seconds each, before driftgate even sees them.
fn listen(addr: SocketAddr) -> Result<std::net::TcpListener> {
    let cannot = |source| Error::Listen { addr, source };
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()
    } else {
        tokio::net::TcpSocket::new_v6()
    }
    .map_err(cannot)?;
    // A restarted driftgate rebinds at once, even with connections of the last one in TIME_WAIT.
    socket.set_reuseaddr(true).map_err(cannot)?;
    socket.bind(addr).map_err(cannot)?;
    let listener = socket.listen(1024).map_err(cannot)?;
    listener.into_std().map_err(cannot)
}

/// Every connection holds a descriptor, and the soft limit is often 1024 while the hard limit is
/// far higher: without this, a burst of connections (slow or idle clients) would make accept
/// fail and keep the API server's own connections out.
fn raise_open_files_limit() {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) => tracing::debug!(limit, "open files limit"),
        Err(error) => tracing::warn!(
            %error,
            "could not raise the open files limit; beyond it new connections wait until others close"
        ),
    }
}

/// Waits for SIGTERM or SIGINT; SIGHUP forces a policy reload and keeps waiting.
async fn wait_for_signal(force_reload: Arc<Notify>) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut hup)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::hangup()),
    ) else {
        // Without signal handlers, Ctrl-C is still honoured.
        let _ = tokio::signal::ctrl_c().await;
        return;
    };
    loop {
        tokio::select! {
            _ = term.recv() => return,
            _ = tokio::signal::ctrl_c() => return,
            _ = hup.recv() => {
                tracing::info!("SIGHUP: reloading the policy");
                force_reload.notify_one();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_budgets_are_byte_counts_with_room_for_one_review() {
        assert_eq!(parse_body_budget("32Mi"), Ok(32 << 20));
        assert_eq!(parse_body_budget("1Gi"), Ok(1 << 30));
        assert_eq!(parse_body_budget("10485760"), Ok(10 << 20));
        assert_eq!(MIN_BODY_BUDGET, 10 << 20);
        for bad in ["9Mi", "32MB", "", "Mi", "-1"] {
            assert!(parse_body_budget(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn recording_gives_up_before_the_review_times_out() {
        assert_eq!(
            ledger_write_timeout(Duration::from_secs(4)),
            Duration::from_secs(3)
        );
        assert_eq!(
            ledger_write_timeout(Duration::from_secs(1)),
            Duration::from_millis(500)
        );
    }
}
