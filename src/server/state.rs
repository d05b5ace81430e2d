//! What the server shares between requests, split by what each stage may touch: the HTTP stage
//! and the admin port ([`ServingState`]), the review ([`ReviewState`]: what a decision reads)
//! and the effects of a decision ([`EffectsState`]: what they write). A handle that two parts
//! need (the policies, the metrics, the silence tracker) is shared, one clone in each.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use arc_swap::ArcSwap;
use jiff::Timestamp;

use driftgate_core::deletions::DeletionTally;
use driftgate_core::lingering::LingeringLabels;
use driftgate_core::policy::PolicySet;
use driftgate_core::reports::RecentDenials;
use driftgate_core::silence::DEFAULT_SILENCE_AFTER;
use driftgate_kube::event_sink::EventSink;
use driftgate_kube::kube_state::{NamespaceCache, ParentLookup, ResourceCatalog, StoredReader};
use driftgate_kube::ledger::service::Ledger;
use driftgate_kube::metrics::Metrics;
use driftgate_kube::tasks::cascade::CascadeReader;
use driftgate_kube::tasks::gatepolicies::GatePolicyHealth;
use driftgate_kube::tasks::reload::PolicyStatus;
use driftgate_kube::tasks::silence::SilenceTracker;

use crate::server::body::{BodyBudget, DEFAULT_BODY_BUDGET};
use crate::server::windows::WindowTracker;

/// The target of every stage's log lines: the server's, as log filters
/// (`RUST_LOG=driftgate::server=debug`) and those who read the lines name it.
pub const LOG_TARGET: &str = "driftgate::server";

/// Where the decision's "now" comes from; tests pin it.
pub type Clock = Arc<dyn Fn() -> Timestamp + Send + Sync>;

/// Everything a review needs, shared by every request, in the part each stage takes.
pub struct AppState {
    pub serving: ServingState,
    pub review: ReviewState,
    pub effects: EffectsState,
}

/// What the HTTP stage and the admin port touch: whether this pod takes reviews, the bytes
/// bodies may hold, and whether a policy is loaded at all.
pub struct ServingState {
    /// Cleared when shutdown starts, so the API server's endpoints drop this pod first.
    pub accepting: AtomicBool,
    /// Bytes of request bodies that may be held at once.
    pub body_budget: BodyBudget,
    /// Whether the policies hold a valid set at all (not when the policy was bad from the start).
    pub policy_status: Arc<PolicyStatus>,
    /// The GatePolicy source, when `serve --gatepolicies` reads one.
    pub gatepolicies: Option<Arc<GatePolicyHealth>>,
    pub metrics: Arc<Metrics>,
}

/// What a decision reads: the policies, the cluster as cached, the ledger's guard and records.
pub struct ReviewState {
    /// Swapped whole on reload: a review sees one policy set from start to end.
    pub policies: Arc<ArcSwap<PolicySet>>,
    pub namespaces: NamespaceCache,
    pub parents: ParentLookup,
    /// Kinds and status subresources from API discovery; disabled without a cluster.
    pub resources: ResourceCatalog,
    /// What a DELETE would take with it through ownerReferences; disabled without a cluster.
    pub cascades: CascadeReader,
    /// Backport records; disabled without a cluster.
    pub ledger: Ledger,
    /// The controllers' recent deletes, read for `deletions.controllerLimit`.
    pub deletions: Arc<Mutex<DeletionTally>>,
    /// When each policy's GitOps controller last wrote, read for refusals.
    pub silence: Arc<SilenceTracker>,
    pub clock: Clock,
}

/// What the effects of a decision write: Events, metrics and the in-memory trackers (for
/// gauges, refusals and reports), and what confirms a review's claims against the API server.
pub struct EffectsState {
    pub events: EventSink,
    pub metrics: Arc<Metrics>,
    /// Approximate open windows, used only when the ledger (which counts them exactly) is off.
    pub windows: WindowTracker,
    /// Whether the ledger keeps records (a cluster is connected): then `windows` is not fed.
    pub ledger_connected: bool,
    /// When each policy's GitOps controller last wrote, for the gauge and for refusals.
    pub silence: Arc<SilenceTracker>,
    /// The controllers' recent deletes, for `deletions.controllerLimit`. Each replica counts
    /// the deletes it reviews.
    pub deletions: Arc<Mutex<DeletionTally>>,
    /// Break-glass labels seen on reviewed objects, for the expired-label gauge.
    pub lingering: RwLock<LingeringLabels>,
    /// The recent denials per namespace, for the PolicyReports (`serve --policy-reports`).
    pub denials: Option<Arc<Mutex<RecentDenials>>>,
    /// Whether every review comes from the API server: true only when the webhook port
    /// requires a client certificate (`serve --client-ca-file`), so every review reached the
    /// handler through a handshake that verified the caller. Otherwise a review is only a claim
    /// (anyone who reaches the port can POST one): what it says changes nothing durable until
    /// the API server shows it.
    pub caller_authenticated: bool,
    /// Reads admitted writes back, to confirm what a review claimed.
    pub stored: StoredReader,
    /// Reads the object of a controller's delete while it is reviewed (without client
    /// authentication); None without a cluster.
    pub api: Option<kube::Client>,
    /// The policies as served when a confirmation, in the background, comes back.
    pub policies: Arc<ArcSwap<PolicySet>>,
    pub clock: Clock,
}

impl AppState {
    pub fn new(
        policies: Arc<ArcSwap<PolicySet>>,
        namespaces: NamespaceCache,
        parents: ParentLookup,
        events: EventSink,
        metrics: Arc<Metrics>,
    ) -> Self {
        let silence = Arc::new(SilenceTracker::new(DEFAULT_SILENCE_AFTER, metrics.clone()));
        let deletions: Arc<Mutex<DeletionTally>> = Arc::default();
        let clock: Clock = Arc::new(Timestamp::now);
        let ledger = Ledger::disabled(metrics.clone());
        AppState {
            serving: ServingState {
                accepting: AtomicBool::new(true),
                body_budget: BodyBudget::new(
                    DEFAULT_BODY_BUDGET,
                    metrics.webhook_body_bytes_in_flight.clone(),
                ),
                policy_status: Arc::new(PolicyStatus::valid()),
                gatepolicies: None,
                metrics: metrics.clone(),
            },
            effects: EffectsState {
                events,
                windows: WindowTracker::new(metrics.clone()),
                ledger_connected: ledger.is_connected(),
                silence: silence.clone(),
                deletions: deletions.clone(),
                lingering: RwLock::default(),
                denials: None,
                caller_authenticated: false,
                stored: StoredReader::new(None),
                api: None,
                policies: policies.clone(),
                clock: clock.clone(),
                metrics,
            },
            review: ReviewState {
                policies,
                namespaces,
                parents,
                resources: ResourceCatalog::disabled(),
                cascades: CascadeReader::disabled(),
                ledger,
                deletions,
                silence,
                clock,
            },
        }
    }

    /// The reloader's status of the policies, when they may not have loaded.
    pub fn with_policy_status(mut self, status: Arc<PolicyStatus>) -> Self {
        self.serving.policy_status = status;
        self
    }

    /// The GatePolicy source's health, when `serve --gatepolicies` reads one.
    pub fn with_gatepolicies(mut self, health: Option<Arc<GatePolicyHealth>>) -> Self {
        self.serving.gatepolicies = health;
        self
    }

    pub fn with_resources(mut self, resources: ResourceCatalog) -> Self {
        self.review.resources = resources;
        self
    }

    pub fn with_cascades(mut self, cascades: CascadeReader) -> Self {
        self.review.cascades = cascades;
        self
    }

    pub fn with_ledger(mut self, ledger: Ledger) -> Self {
        self.effects.ledger_connected = ledger.is_connected();
        self.review.ledger = ledger;
        self
    }

    pub fn with_body_budget(mut self, bytes: usize) -> Self {
        let in_flight = self.serving.metrics.webhook_body_bytes_in_flight.clone();
        self.serving.body_budget = BodyBudget::new(bytes, in_flight);
        self
    }

    /// How long a GitOps controller may be silent before refusals say it may be down.
    pub fn with_silence_after(mut self, silent_after: Duration) -> Self {
        let silence = Arc::new(SilenceTracker::new(
            silent_after,
            self.effects.metrics.clone(),
        ));
        self.review.silence = silence.clone();
        self.effects.silence = silence;
        self
    }

    /// Keeps each denial in `denials` (bounded) for the PolicyReports.
    pub fn with_denials(mut self, denials: Arc<Mutex<RecentDenials>>) -> Self {
        self.effects.denials = Some(denials);
        self
    }

    /// Reads what reviews claim from the API server through `client`; `caller_authenticated`
    /// when every caller is the API server, verified by its client certificate.
    pub fn with_read_back(
        mut self,
        client: Option<kube::Client>,
        caller_authenticated: bool,
    ) -> Self {
        self.effects.stored = StoredReader::new(client.clone());
        self.effects.api = client;
        self.effects.caller_authenticated = caller_authenticated;
        self
    }

    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.review.clock = clock.clone();
        self.effects.clock = clock;
        self
    }
}
