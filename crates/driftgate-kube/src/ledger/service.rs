//! The ledger at run time, the I/O around its pure plans: the record cache (a reflector), the
//! upkeep task, and the plans of [`plan`](driftgate_core::ledger::plan), [`controller`](driftgate_core::ledger::controller) and
//! [`upkeep`](driftgate_core::ledger::upkeep) applied through [`RecordWriter`].
//!
//! Writes of records happen before the answer (a change without a record is refused); the
//! judgement of a controller write is synchronous only when the policy may refuse the write,
//! and its status transition and Event happen in the background. Every status transition is a
//! patch conditioned on the record's resourceVersion, so with several replicas exactly one
//! makes it, and only that one emits the Event.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use arc_swap::ArcSwap;
use futures::StreamExt;
use jiff::Timestamp;
use kube::ResourceExt;
use kube::api::Api;
use kube::core::DynamicObject;
use kube::core::admission::Operation;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::event_sink::EventSink;
use crate::kube_state::{
    NamespaceCache, ReadBack, ReadStoredError, ResourceCatalog, StoredReader, read_stored,
};
use crate::ledger::writes::RecordWriter;
use crate::metrics::Metrics;
use driftgate_core::decision::ledger_guard::LedgerGuard;
use driftgate_core::decision::{Decision, PolicyVerdict, Rule};
use driftgate_core::ledger::argocd::{
    ArgoSettings, NotSynced, SyncedInputs, SyncedProof, judge_synced, recorded_objects,
    synced_settlement, tracking_of,
};
use driftgate_core::ledger::claims::{
    Claimed, Shown, WriteKind, carried_by, claimed_fields, claims_of, makes_claims,
};
use driftgate_core::ledger::controller::{
    StoredWrite, WrittenObject, plan_controller_write, plan_stored_settlements,
};
use driftgate_core::ledger::phase::{awaiting_since, is_suspension};
use driftgate_core::ledger::plan::{
    LedgerAnswer, LedgerTask, RecordingPlan, Refusal, StoredChange, ledger_tasks, plan_recording,
    record_key, unrecorded_warning, waits_for_stored,
};
use driftgate_core::ledger::record::BackportRequirement;
use driftgate_core::ledger::upkeep::{is_managed, plan_expiry, plan_retention, record_gauges};
use driftgate_core::policy::{BreakGlassRules, PolicySet};
use driftgate_core::reading::Reading;
use driftgate_core::request::{
    AdmittedWrite, Landed, RequestFacts, ReviewObject, StoredAddress, WholeFacts,
};

/// How long one read for Argo CD's evidence may take.
const ARGOCD_READ_TIMEOUT: Duration = Duration::from_secs(5);

/// Where an object Argo CD's evidence reads is stored: group, version and plural of its kind.
fn argocd_address(
    (group, version, plural): (&str, &str, &str),
    namespace: &str,
    name: &str,
) -> StoredAddress {
    StoredAddress {
        group: group.to_owned(),
        version: version.to_owned(),
        plural: plural.to_owned(),
        namespace: Some(namespace.to_owned()),
        name: name.to_owned(),
    }
}

/// Argo CD's Applications, and the ConfigMaps holding its settings.
const APPLICATIONS: (&str, &str, &str) = ("argoproj.io", "v1alpha1", "applications");
const CONFIG_MAPS: (&str, &str, &str) = ("", "v1", "configmaps");

/// Why Argo CD's status settles no record this check (logged, never a refusal).
#[derive(Debug, thiserror::Error)]
enum ArgoEvidenceError {
    #[error("reading {plural} {namespace}/{name} failed: {source}")]
    Read {
        plural: String,
        namespace: String,
        name: String,
        #[source]
        source: ReadStoredError,
    },
    #[error(
        "the cluster's resources are not known yet (API discovery), so the recorded kind cannot be read"
    )]
    NoDiscovery,
    #[error("the object {0} is gone")]
    Gone(String),
    #[error("there is no Application {0}")]
    NoApplication(String),
    #[error("Argo CD's status proves nothing: {0}")]
    NotProven(#[from] NotSynced),
}

/// Why a break-glass change could not be recorded: the write is refused with it
/// (`LedgerUnavailable`), or, for a change the API server already stored, it is logged.
#[derive(Debug, thiserror::Error)]
enum RecordingError {
    #[error(
        "driftgate does not know its own namespace, where records of cluster-scoped objects are kept (serve --service-account system:serviceaccount:NS:NAME)"
    )]
    NoHome,
    #[error("listing the records in {namespace} failed: {source}")]
    List {
        namespace: String,
        #[source]
        source: kube::Error,
    },
    #[error("writing the record in {namespace} failed: {source}")]
    Write {
        namespace: String,
        #[source]
        source: kube::Error,
    },
    #[error("the API server did not answer within {0:?}")]
    TimedOut(Duration),
}

/// How often the expiry task looks at the records by default (`serve --expiry-check-interval`).
/// Expiry is noticed within this time.
pub const DEFAULT_EXPIRY_CHECK_INTERVAL: Duration = Duration::from_secs(10);

/// How long recording one break-glass change may take by default; see
/// [`Ledger::with_write_timeout`].
pub const DEFAULT_WRITE_TIMEOUT: Duration = Duration::from_secs(3);

/// How long a settled record is kept by default (`serve --record-retention`).
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(30 * 86_400);

/// When the background task looks at the records, and what it deletes.
#[derive(Clone, Debug)]
pub struct Upkeep {
    /// Expiry is noticed within this time.
    pub expiry_interval: Duration,
    /// A record settled (Backported or Resolved) this long ago is deleted; None keeps it.
    pub retention: Option<Duration>,
    /// Where Argo CD's status is read as evidence for records awaiting backport of objects it
    /// tracks (every expiry check); None: not read.
    pub argocd: Option<ArgoCdStatus>,
}

/// Argo CD's namespace (its Applications and settings) and how to find the resource of a
/// recorded kind, to read what [`driftgate_core::ledger::argocd`] judges.
#[derive(Clone)]
pub struct ArgoCdStatus {
    pub namespace: String,
    pub resources: ResourceCatalog,
}

impl std::fmt::Debug for ArgoCdStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArgoCdStatus")
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

/// At most this many records awaiting backport are looked up in Argo CD per expiry check (a
/// few reads each): a backlog cannot turn the check into a burst of requests.
const ARGOCD_RECORDS_PER_CHECK: usize = 20;

#[derive(Clone)]
pub struct Ledger {
    inner: Option<Arc<Connected>>,
    metrics: Arc<Metrics>,
    write_timeout: Duration,
    /// Who may write records and their CRD; the decision judges those writes with it.
    guard: Arc<ArcSwap<LedgerGuard>>,
    /// Set while driftgate is still asking the API server who it is: not ready until it knows.
    identity_pending: Arc<AtomicBool>,
}

struct Connected {
    writer: RecordWriter,
    store: Store<BackportRequirement>,
    ready: AtomicBool,
    /// Notified once, when the records first sync.
    synced: Notify,
    /// The policies being served: the expiry check and the gauges look only at records in
    /// namespaces they guard.
    policies: Arc<ArcSwap<PolicySet>>,
    namespaces: NamespaceCache,
    retention: Option<Duration>,
    /// The Ledger's guard, whose writer (`system:serviceaccount:NS:NAME`) names driftgate's
    /// own namespace: where the records of cluster-scoped objects are kept.
    guard: Arc<ArcSwap<LedgerGuard>>,
    /// Whether every review comes from the API server, authenticated by its client
    /// certificate: only then is a dry run's word enough to settle a record.
    authenticated_callers: AtomicBool,
    /// Admitted writes read back: settlements and record moves rest on what was stored.
    reader: StoredReader,
    client: kube::Client,
    argocd: Option<ArgoCdStatus>,
}

impl Ledger {
    /// Without a cluster there is nowhere to record; break-glass changes are admitted with a
    /// warning that says so (development only).
    pub fn disabled(metrics: Arc<Metrics>) -> Ledger {
        Ledger {
            inner: None,
            metrics,
            write_timeout: DEFAULT_WRITE_TIMEOUT,
            guard: Arc::default(),
            identity_pending: Arc::default(),
        }
    }

    /// Whether every review comes from the authenticated API server (`serve --client-ca`): then
    /// a controller's dry runs, which leave nothing stored to confirm them by, may settle a
    /// record. Without it they settle nothing: anyone who reaches the port could claim one.
    pub fn with_authenticated_callers(self, authenticated: bool) -> Ledger {
        if let Some(inner) = &self.inner {
            inner
                .authenticated_callers
                .store(authenticated, Ordering::Relaxed);
        }
        self
    }

    /// Judges writes of records and of their CRD with `guard`.
    pub fn with_guard(self, guard: LedgerGuard) -> Ledger {
        self.guard.store(Arc::new(guard));
        self
    }

    pub fn guard(&self) -> Arc<LedgerGuard> {
        self.guard.load_full()
    }

    /// Asks the API server who driftgate is (a SelfSubjectReview), retrying until it answers,
    /// and makes that identity the guard's writer. Not ready until then: without it, driftgate's
    /// own writes of records would be refused wherever its records webhook sees them.
    pub fn learn_writer(
        &self,
        client: kube::Client,
        shutdown: CancellationToken,
    ) -> JoinHandle<()> {
        self.identity_pending.store(true, Ordering::Relaxed);
        let (guard, pending) = (self.guard.clone(), self.identity_pending.clone());
        tokio::spawn(async move {
            let mut delay = Duration::from_millis(200);
            loop {
                let asked = tokio::select! {
                    () = shutdown.cancelled() => return,
                    asked = crate::ledger::identity::who_am_i(client.clone()) => asked,
                };
                match asked {
                    Ok(writer) => {
                        tracing::info!(%writer, "backport records are written only by driftgate's own identity");
                        let mut known = LedgerGuard::clone(&guard.load());
                        known.writer = Some(writer);
                        guard.store(Arc::new(known));
                        pending.store(false, Ordering::Relaxed);
                        return;
                    }
                    Err(error) => {
                        tracing::warn!(%error, "cannot tell driftgate's own identity yet (or set --service-account); retrying")
                    }
                }
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = tokio::time::sleep(delay) => {}
                }
                delay = (delay * 2).min(Duration::from_secs(10));
            }
        })
    }

    /// Recording a break-glass change (a few API calls) gives up after `timeout`, and the
    /// change is refused with driftgate's own message. Keep it below the request timeout: a
    /// hung API server would otherwise make the review time out, and the person would read
    /// only that the webhook failed.
    pub fn with_write_timeout(mut self, timeout: Duration) -> Ledger {
        self.write_timeout = timeout;
        self
    }

    /// Starts the record cache and the upkeep task, which looks at the records every
    /// `upkeep.expiry_interval` for windows that expired and settled records past retention.
    ///
    /// Records are watched in every namespace, but the expiry check and the gauges consider
    /// only those in namespaces that `policies` guard (with break-glass rules): another
    /// driftgate installation's records are its own business.
    pub fn spawn(
        client: kube::Client,
        events: EventSink,
        metrics: Arc<Metrics>,
        policies: Arc<ArcSwap<PolicySet>>,
        namespaces: NamespaceCache,
        upkeep: Upkeep,
        shutdown: CancellationToken,
    ) -> (Ledger, Vec<JoinHandle<()>>) {
        let (store, writer) = reflector::store();
        let guard: Arc<ArcSwap<LedgerGuard>> = Arc::default();
        let connected = Arc::new(Connected {
            writer: RecordWriter {
                client: client.clone(),
                events,
                metrics: metrics.clone(),
            },
            store,
            ready: AtomicBool::new(false),
            synced: Notify::new(),
            policies,
            namespaces,
            retention: upkeep.retention,
            guard: guard.clone(),
            authenticated_callers: AtomicBool::new(false),
            reader: StoredReader::new(Some(client.clone())),
            client: client.clone(),
            argocd: upkeep.argocd.clone(),
        });
        let api: Api<BackportRequirement> = Api::all(client);
        let watcher_task = tokio::spawn(connected.clone().watch(api, writer, shutdown.clone()));
        let upkeep_task = tokio::spawn(connected.clone().upkeep(upkeep.expiry_interval, shutdown));
        (
            Ledger {
                inner: Some(connected),
                metrics,
                write_timeout: DEFAULT_WRITE_TIMEOUT,
                guard,
                identity_pending: Arc::default(),
            },
            vec![watcher_task, upkeep_task],
        )
    }

    /// Every record as cached (all namespaces), once the cache has synced; None before, or
    /// without a cluster. The PolicyReports are planned from it.
    pub fn records(&self) -> Option<Vec<Arc<BackportRequirement>>> {
        let inner = self.inner.as_ref()?;
        inner
            .ready
            .load(Ordering::Relaxed)
            .then(|| inner.store.state())
    }

    /// Whether records are kept (a cluster is connected).
    pub fn is_connected(&self) -> bool {
        self.inner.is_some()
    }

    /// Ready once the records are synced (or when there is no cluster) and driftgate knows its
    /// own identity.
    pub fn is_ready(&self) -> bool {
        !self.identity_pending.load(Ordering::Relaxed)
            && self
                .inner
                .as_ref()
                .is_none_or(|inner| inner.ready.load(Ordering::Relaxed))
    }

    /// What the ledger says of `decision` before it is answered: break-glass changes it
    /// admits are recorded, and a controller's write is judged against records awaiting
    /// backport. Changes nothing in the decision: it returns the refusal (a record could not be
    /// written, or the policy refuses reverts) or the warning, for the caller to apply.
    /// `reading` says whether the review's objects can still fall back when read whole.
    pub async fn judge<R: Reading>(
        &self,
        reading: R,
        facts: &RequestFacts<'_>,
        decision: &Decision,
        policies: &PolicySet,
        now: Timestamp,
    ) -> Result<LedgerAnswer, R::Fallback> {
        if !decision.allowed {
            return Ok(LedgerAnswer::Admit);
        }
        let Some(inner) = &self.inner else {
            return Ok(match unrecorded_warning(facts, decision) {
                Some(warning) => LedgerAnswer::Warn(warning),
                None => LedgerAnswer::Admit,
            });
        };
        let refusal = self
            .refusal(inner, reading, facts, decision, policies, now)
            .await?;
        Ok(refusal.map_or(LedgerAnswer::Admit, LedgerAnswer::Refuse))
    }

    /// Does the ledger's part for each verdict (reading the decision, not changing it) and
    /// returns why the write must be refused, if it must. The objects are read whole before
    /// the first work that cannot be taken back; in one pass that may fall back, and then
    /// nothing has been done.
    async fn refusal<R: Reading>(
        &self,
        inner: &Arc<Connected>,
        reading: R,
        facts: &RequestFacts<'_>,
        decision: &Decision,
        policies: &PolicySet,
        now: Timestamp,
    ) -> Result<Option<Refusal>, R::Fallback> {
        for task in ledger_tasks(facts, decision, policies) {
            let refusal = match task {
                LedgerTask::JudgeControllerWrite { verdict, rules } => inner
                    .judge_controller_write(
                        reading,
                        facts,
                        &decision.record.object.kind,
                        verdict,
                        rules,
                        now,
                    )?,
                LedgerTask::Record { verdict, rules } => {
                    let whole = reading.whole(facts)?;
                    if waits_for_stored(verdict.rule) {
                        inner.record_once_stored(whole, decision, verdict, rules, now);
                        None
                    } else {
                        self.record(inner, whole, decision, verdict, rules, now)
                            .await
                            // Resuming is always allowed: a resume the ledger could not record
                            // is still made (the record stays Open or Expired, and says so).
                            .filter(|_| verdict.rule != Rule::Resumed)
                    }
                }
            };
            if refusal.is_some() {
                return Ok(refusal);
            }
        }
        Ok(None)
    }

    /// Records one break-glass verdict within the write timeout; a refusal when it could not.
    async fn record(
        &self,
        inner: &Arc<Connected>,
        facts: WholeFacts<'_, '_>,
        decision: &Decision,
        verdict: &PolicyVerdict,
        rules: &BreakGlassRules,
        now: Timestamp,
    ) -> Option<Refusal> {
        let recorded = tokio::time::timeout(
            self.write_timeout,
            inner.record(facts, decision, verdict, rules, now),
        )
        .await
        .map_err(|_| RecordingError::TimedOut(self.write_timeout))
        .and_then(|written| written);
        let Err(error) = recorded else {
            Metrics::count_result(&self.metrics.ledger_writes, true);
            return None;
        };
        Metrics::count_result(&self.metrics.ledger_writes, false);
        tracing::warn!(%error, uid = %facts.request().uid(), rule = %verdict.rule, "could not write the backport record");
        Some(Refusal::unrecorded(
            &decision.record,
            &verdict.policy,
            &error.to_string(),
        ))
    }
}

impl Connected {
    /// Keeps the record cache: ready (and the gauges set) once the records first sync, the
    /// gauges refreshed whenever a record changes.
    async fn watch(
        self: Arc<Self>,
        api: Api<BackportRequirement>,
        writer: reflector::store::Writer<BackportRequirement>,
        shutdown: CancellationToken,
    ) {
        let stream = watcher(api, watcher::Config::default())
            .default_backoff()
            .reflect(writer)
            .touched_objects();
        let mut stream = std::pin::pin!(stream);
        let ready = self.store.wait_until_ready();
        tokio::pin!(ready);
        let mut synced = false;
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                result = &mut ready, if !synced => {
                    synced = true;
                    if result.is_ok() {
                        // The gauges are the records' before readiness, so a restarted
                        // driftgate never reports 0 while records are pending.
                        self.refresh_gauges();
                        self.ready.store(true, Ordering::Relaxed);
                        self.synced.notify_one();
                    }
                }
                item = stream.next() => match item {
                    // A record changed: the gauges follow at once, not at the next check.
                    Some(Ok(_)) if synced => self.refresh_gauges(),
                    Some(Ok(_)) => {}
                    Some(Err(error)) => tracing::warn!(%error, "watching BackportRequirements failed; retrying"),
                    None => return,
                },
            }
        }
    }

    /// Every `interval`, from the first sync: windows that ended expire, settled records past
    /// retention are deleted, and the gauges refreshed.
    async fn upkeep(self: Arc<Self>, interval: Duration, shutdown: CancellationToken) {
        // The first check right after the records sync: windows that ended while driftgate
        // was down are noticed at start, not one interval later.
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = self.synced.notified() => {}
        }
        let mut ticker = tokio::time::interval(interval);
        // A tick missed while a check ran long is not made up in a burst.
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = ticker.tick() => {}
            }
            if self.ready.load(Ordering::Relaxed) {
                self.expire_windows().await;
                self.settle_by_argocd_status().await;
                self.delete_past_retention().await;
                self.refresh_gauges();
            }
        }
    }

    /// Lists the records of the verdict's window and writes what recording it takes.
    async fn record(
        self: &Arc<Self>,
        facts: WholeFacts<'_, '_>,
        decision: &Decision,
        verdict: &PolicyVerdict,
        rules: &BreakGlassRules,
        now: Timestamp,
    ) -> Result<(), RecordingError> {
        let mut key = record_key(&facts, decision, verdict);
        if key.namespace.is_empty() {
            // A cluster-scoped object: its records are kept in driftgate's own namespace.
            key.namespace = self.home().ok_or(RecordingError::NoHome)?;
        }
        let listed = self
            .writer
            .list(&key.namespace, &key.label_selector())
            .await
            .map_err(|source| RecordingError::List {
                namespace: key.namespace.clone(),
                source,
            })?;
        let plan = plan_recording(&key, &facts, decision, verdict, rules, &listed, now);
        // The objects are read into JSON (before the answer) only for a write that claims
        // something: an append or a new record; a dry run records nothing.
        let claims = if makes_claims(&plan.write) && AdmittedWrite::of(&facts).is_some() {
            let as_json =
                |o: Option<ReviewObject<'_>>| o.and_then(|o| serde_json::to_value(o.whole()).ok());
            let fields = claimed_fields(
                &decision.record.changed_fields,
                as_json(facts.old_object()).as_ref(),
                as_json(facts.object()).as_ref(),
            );
            claims_of(&plan.write, &fields)
        } else {
            Vec::new()
        };
        let kind = match facts.request().operation() {
            Operation::Create => WriteKind::Create,
            Operation::Delete => WriteKind::Delete,
            _ => WriteKind::Update,
        };
        self.writer
            .record(&key.namespace, plan, now)
            .await
            .map_err(|source| RecordingError::Write {
                namespace: key.namespace.clone(),
                source,
            })?;
        let selector = key.label_selector();
        self.settle_claims_once_read_back(&facts, key.namespace, selector, (kind, claims));
        Ok(())
    }

    /// What was just recorded on the review's word is confirmed (or withdrawn) by the object
    /// the API server stores, read back in the background once the write has been answered.
    fn settle_claims_once_read_back(
        self: &Arc<Self>,
        facts: &RequestFacts<'_>,
        namespace: String,
        selector: String,
        (kind, claims): (WriteKind, Vec<Claimed>),
    ) {
        if claims.is_empty() {
            return;
        }
        let Some(write) = AdmittedWrite::of(facts) else {
            return;
        };
        let this = self.clone();
        tokio::spawn(async move {
            let shows = |live: &DynamicObject| {
                serde_json::to_value(live).is_ok_and(|stored| carried_by(&stored, &claims))
            };
            let read_back = this.reader.read_back_showing(&write, shows).await;
            let stored;
            let shown = match &read_back {
                ReadBack::Stored(object) => match serde_json::to_value(object) {
                    Ok(value) => {
                        stored = value;
                        Shown::Stored(&stored)
                    }
                    Err(_) => return,
                },
                ReadBack::Gone => Shown::Gone,
                ReadBack::NeverStored => Shown::NeverStored,
                ReadBack::Unreadable => return,
            };
            let now = Timestamp::now();
            if let Err(error) = this
                .writer
                .settle_claims(&namespace, &selector, &claims, (kind, shown), now)
                .await
            {
                tracing::warn!(%error, object = %write.address.name, "could not confirm a recorded break-glass change against the object stored; it stays a claim");
            }
        });
    }

    /// Writes what `verdict` calls for once the API server shows the change it records (a
    /// window extended or amended, a suspension resumed), in the background: a review alone is
    /// a claim. A change that never lands writes nothing.
    fn record_once_stored(
        self: &Arc<Self>,
        facts: WholeFacts<'_, '_>,
        decision: &Decision,
        verdict: &PolicyVerdict,
        rules: &BreakGlassRules,
        now: Timestamp,
    ) {
        let change = StoredChange::of(&facts, decision, verdict, rules, now);
        let Some(write) = AdmittedWrite::of(&facts) else {
            return;
        };
        let this = self.clone();
        tokio::spawn(async move {
            let carried = |live: &DynamicObject| {
                serde_json::to_value(live).is_ok_and(|v| change.is_carried_by(&v))
            };
            let ReadBack::Stored(live) = this.reader.read_back_showing(&write, carried).await
            else {
                return;
            };
            if !carried(&live) {
                tracing::info!(object = %write.address.name, rule = %change.rule, user = %change.user, "the object as stored does not carry the change a review claimed: no record is changed");
                return;
            }
            if let Err(error) = this.write_stored_change(&change).await {
                tracing::warn!(%error, object = %write.address.name, rule = %change.rule, "could not record a change the API server stored");
            }
        });
    }

    async fn write_stored_change(&self, change: &StoredChange) -> Result<(), RecordingError> {
        let now = Timestamp::now();
        let mut namespace = change.key.namespace.clone();
        if namespace.is_empty() {
            namespace = self.home().ok_or(RecordingError::NoHome)?;
        }
        let listed = self
            .writer
            .list(&namespace, &change.key.label_selector())
            .await
            .map_err(|source| RecordingError::List {
                namespace: namespace.clone(),
                source,
            })?;
        let plan = RecordingPlan {
            expire: Vec::new(),
            write: change.plan(&listed, now),
        };
        self.writer
            .record(&namespace, plan, now)
            .await
            .map_err(|source| RecordingError::Write { namespace, source })
    }

    /// driftgate's own namespace, from its service account's username; None while it is not
    /// known, or when driftgate runs as another kind of user.
    fn home(&self) -> Option<String> {
        let guard = self.guard.load();
        let writer = guard.writer.as_deref()?;
        crate::ledger::identity::service_account_namespace(writer).map(str::to_owned)
    }

    /// The controller's write, against records awaiting backport for this object: the
    /// settlements start in the background (they do not hold up the write); the refusal, when
    /// the policy refuses reverts and this write is one, is returned.
    fn judge_controller_write<R: Reading>(
        self: &Arc<Self>,
        reading: R,
        facts: &RequestFacts<'_>,
        kind: &str,
        verdict: &PolicyVerdict,
        rules: &BreakGlassRules,
        now: Timestamp,
    ) -> Result<Option<Refusal>, R::Fallback> {
        let Some(mut written) = WrittenObject::of(facts) else {
            return Ok(None);
        };
        if written.namespace.is_empty() {
            let Some(home) = self.home() else {
                return Ok(None);
            };
            written.namespace = home;
        }
        // Filtered inside the store: every controller write asks, and few objects have records.
        let awaiting = self.store.state_filter(|r| written.awaited_by(r, now));
        // Only then are the objects read whole: most controller writes never pay for it.
        if awaiting.is_empty() {
            return Ok(None);
        }
        let facts = reading.whole(facts)?;
        let plan = plan_controller_write(&facts, kind, verdict, rules, &awaiting, now);
        if plan.refusal.is_some() {
            return Ok(plan.refusal);
        }
        if facts.request().dry_run() {
            // A dry run leaves nothing in the API server to confirm it by: only the
            // authenticated API server's word for it may settle a record.
            if self.authenticated_callers.load(Ordering::Relaxed) {
                for settlement in plan.settlements {
                    let this = self.clone();
                    tokio::spawn(async move { this.writer.settle(settlement, now).await });
                }
                for mark in plan.dry_run_marks {
                    let this = self.clone();
                    tokio::spawn(async move { this.writer.mark_dry_run(mark, now).await });
                }
            }
        } else if let Some(mut write) = StoredWrite::of(&facts, kind) {
            // A cluster-scoped object's records are in driftgate's own namespace.
            write.written.namespace = written.namespace;
            let this = self.clone();
            tokio::spawn(async move { this.settle_as_stored(write).await });
        }
        Ok(None)
    }

    /// Settles the records awaiting an admitted controller write on the object as the API
    /// server stored it. A write that never lands (refused by another webhook, or never made:
    /// a forged review) settles nothing.
    async fn settle_as_stored(self: Arc<Self>, write: StoredWrite) {
        let Some(live) = self.reader.read_back(&write.admitted).await else {
            return;
        };
        let stored = match &live {
            Some(object) => Landed::Object(object),
            None => Landed::Gone,
        };
        let now = Timestamp::now();
        let awaiting = self
            .store
            .state_filter(|r| write.written.awaited_by(r, now));
        for settlement in plan_stored_settlements(&write, stored, &awaiting) {
            self.writer.settle(settlement, now).await;
        }
    }

    /// The records this driftgate looks after: those in namespaces its policies guard, and in
    /// its own namespace those of cluster-scoped objects when a policy guards such kinds.
    fn managed_records(&self) -> Vec<Arc<BackportRequirement>> {
        let policies = self.policies.load();
        let home = self.home().filter(|_| {
            policies
                .policies()
                .iter()
                .any(|p| p.break_glass.is_some() && p.cluster_scoped.is_some())
        });
        self.store
            .state()
            .into_iter()
            .filter(|record| {
                record
                    .metadata
                    .namespace
                    .as_deref()
                    .is_some_and(|namespace| {
                        home.as_deref() == Some(namespace)
                            || is_managed(
                                &policies,
                                namespace,
                                self.namespaces.get(namespace).as_deref(),
                            )
                    })
            })
            .collect()
    }

    /// Windows whose expiry passed move to AwaitingBackport, once, by whichever replica wins.
    async fn expire_windows(&self) {
        let now = Timestamp::now();
        let records = self.managed_records();
        for expiry in plan_expiry(&records, now) {
            if let Err(error) = self.writer.expire(&expiry, now).await {
                tracing::warn!(%error, record = %expiry.record.name_any(), "could not mark an expired window");
            }
        }
    }

    /// Records awaiting backport of objects Argo CD tracks, settled on what Argo CD reports when
    /// it writes nothing ([`driftgate_core::ledger::argocd`]): the object, its Application and Argo CD's
    /// settings, read from the API server, never from a review.
    async fn settle_by_argocd_status(&self) {
        let Some(argocd) = &self.argocd else {
            return;
        };
        let now = Timestamp::now();
        let policies = self.policies.load_full();
        // Only where a policy guards Applications is their status Argo CD's word.
        let labels = self.labels_of(&argocd.namespace);
        if !policies.policies().iter().any(|p| {
            driftgate_core::ledger::argocd::guards_applications(p, &argocd.namespace, &labels)
        }) {
            return;
        }
        let awaiting: Vec<_> = self
            .managed_records()
            .into_iter()
            .filter(|r| !is_suspension(r) && awaiting_since(r, now).is_some())
            .take(ARGOCD_RECORDS_PER_CHECK)
            .collect();
        // Argo CD's settings, read at most once per check, by the first object Argo CD tracks:
        // every proof reads the same two ConfigMaps.
        let mut settings = None;
        for record in awaiting {
            let Some(policy) = policies
                .policies()
                .iter()
                .find(|p| p.name == record.spec.policy)
            else {
                continue;
            };
            match self
                .argocd_proof(argocd, &mut settings, &record, policy, &policies)
                .await
            {
                Ok(Some((proof, regarding))) => {
                    let settlement = synced_settlement(&record, &proof, regarding);
                    self.writer.settle(settlement, Timestamp::now()).await;
                }
                Ok(None) => {}
                Err(why) => {
                    tracing::debug!(record = %record.name_any(), %why, "Argo CD's status does not settle the record")
                }
            }
        }
    }

    /// Argo CD's proof for every object `record` changed, and the object its Event is about;
    /// Ok(None) when an object is not Argo CD's, Err saying why when the proof fails.
    async fn argocd_proof(
        &self,
        argocd: &ArgoCdStatus,
        settings: &mut Option<ArgoSettings>,
        record: &BackportRequirement,
        policy: &driftgate_core::policy::GatePolicy,
        policies: &PolicySet,
    ) -> Result<Option<(SyncedProof, k8s_openapi::api::core::v1::ObjectReference)>, ArgoEvidenceError>
    {
        let namespace = record.metadata.namespace.clone().unwrap_or_default();
        let served = argocd
            .resources
            .served()
            .await
            .ok_or(ArgoEvidenceError::NoDiscovery)?;
        let mut proven = None;
        for recorded in &recorded_objects(record) {
            let group = recorded
                .api_version
                .rsplit_once('/')
                .map_or("", |(group, _)| group);
            let Some(kind) = served
                .kinds
                .iter()
                .find(|k| k.group == group && k.kind == recorded.kind && k.namespaced)
            else {
                return Ok(None);
            };
            let at = (
                kind.group.as_str(),
                kind.version.as_str(),
                kind.resource.as_str(),
            );
            let object = self
                .get_json(argocd_address(at, &namespace, &recorded.name))
                .await?
                .ok_or_else(|| ArgoEvidenceError::Gone(format!("{namespace}/{}", recorded.name)))?;
            let Some(tracking) = tracking_of(&object) else {
                return Ok(None);
            };
            let app_namespace = tracking
                .application_namespace
                .clone()
                .unwrap_or_else(|| argocd.namespace.clone());
            let labels = self.labels_of(&app_namespace);
            let application_guarded = policies.policies().iter().any(|p| {
                driftgate_core::ledger::argocd::guards_applications(p, &app_namespace, &labels)
            });
            let application = self
                .get_json(argocd_address(
                    APPLICATIONS,
                    &app_namespace,
                    &tracking.application,
                ))
                .await?
                .ok_or_else(|| {
                    ArgoEvidenceError::NoApplication(format!(
                        "{app_namespace}/{}",
                        tracking.application
                    ))
                })?;
            let read = match settings.take() {
                Some(read) => read,
                None => self.argocd_settings(&argocd.namespace).await?,
            };
            let settings = &*settings.insert(read);
            let inputs = SyncedInputs {
                object: &object,
                application: &application,
                settings,
                application_guarded,
            };
            let proof = judge_synced(record, recorded, policy, &inputs)?;
            let regarding = k8s_openapi::api::core::v1::ObjectReference {
                api_version: Some(recorded.api_version.clone()),
                kind: Some(recorded.kind.clone()),
                name: Some(recorded.name.clone()),
                namespace: Some(namespace.clone()),
                uid: Some(recorded.uid.clone()),
                ..Default::default()
            };
            proven.get_or_insert((proof, regarding));
        }
        Ok(proven)
    }

    /// `namespace`'s labels as cached; none when unknown (a policy that selects namespaces by
    /// label then does not count: only what is known to be guarded is trusted).
    fn labels_of(&self, namespace: &str) -> std::collections::BTreeMap<String, String> {
        self.namespaces
            .get(namespace)
            .and_then(|ns| ns.metadata.labels.clone())
            .unwrap_or_default()
    }

    /// argocd-cm's and argocd-cmd-params-cm's data in `namespace` (empty when absent).
    async fn argocd_settings(&self, namespace: &str) -> Result<ArgoSettings, ArgoEvidenceError> {
        let data =
            |object: Option<serde_json::Value>| -> std::collections::BTreeMap<String, String> {
                object
                    .and_then(|o| serde_json::from_value(o["data"].clone()).ok())
                    .unwrap_or_default()
            };
        let read = |name: &str| self.get_json(argocd_address(CONFIG_MAPS, namespace, name));
        Ok(ArgoSettings {
            argocd_cm: data(read("argocd-cm").await?),
            cmd_params: data(read("argocd-cmd-params-cm").await?),
        })
    }

    /// One object as JSON, read through [`read_stored`]; Ok(None) when it does not exist.
    async fn get_json(
        &self,
        address: StoredAddress,
    ) -> Result<Option<serde_json::Value>, ArgoEvidenceError> {
        let read = read_stored(self.client.clone(), &address, ARGOCD_READ_TIMEOUT)
            .await
            .map_err(|source| ArgoEvidenceError::Read {
                plural: address.plural.clone(),
                namespace: address.namespace.clone().unwrap_or_default(),
                name: address.name.clone(),
                source,
            })?;
        Ok(read.and_then(|o| serde_json::to_value(o).ok()))
    }

    /// Deletes records settled longer than the retention ago.
    async fn delete_past_retention(&self) {
        let Some(retention) = self.retention else {
            return;
        };
        let records = self.managed_records();
        for deletion in plan_retention(&records, retention, Timestamp::now()) {
            self.writer.delete(&deletion).await;
        }
    }

    /// Sets the gauges from the records (the thin sink of [`record_gauges`]).
    fn refresh_gauges(&self) {
        let gauges = record_gauges(&self.managed_records(), Timestamp::now());
        let metrics = &self.writer.metrics;
        metrics
            .break_glass_windows_open
            .set(gauges.windows_open as i64);
        metrics.backport_pending.set(gauges.pending as i64);
        metrics
            .backport_oldest_pending_seconds
            .set(gauges.oldest_pending_seconds);
        metrics
            .backport_oldest_unlinked_seconds
            .set(gauges.oldest_unlinked_seconds);
        metrics
            .backport_oldest_linked_seconds
            .set(gauges.oldest_linked_seconds);
    }
}
