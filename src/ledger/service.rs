//! The ledger at run time: records written before a break-glass change is admitted, windows
//! that expire noticed from the records themselves, and the controller's next write judged.
//!
//! Writes of records happen before the answer (a change without a record is refused); the
//! judgement of a controller write is synchronous only when the policy may refuse the write,
//! and its status transition and Event happen in the background. Every status transition is a
//! patch conditioned on the record's resourceVersion, so with several replicas exactly one
//! makes it, and only that one emits the Event.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use arc_swap::ArcSwap;
use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, Operation};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::decision::{Decision, DecisionRecord, PolicyVerdict, Rule, WindowScope};
use crate::events::{EventReason, EventSink, PlannedEvent};
use crate::kube_state::NamespaceCache;
use crate::ledger::evidence::{Evidence, digest, judge, value_at};
use crate::ledger::guard::LedgerGuard;
use crate::ledger::record::{
    BackportRequirement, BackportRequirementSpec, BackportStatus, Phase, RecordScope,
    RecordedChange, RecordedField, RecordedObject, RecordedWindow, Transition,
};
use crate::metrics::Metrics;
use crate::policy::{BreakGlassRules, NamespaceLabels, PolicySet};
use crate::timefmt::human_utc;

static NO_LABELS: BTreeMap<String, String> = BTreeMap::new();

/// Labels on every record, so that the records of one object are one LIST away.
pub const OBJECT_UID_LABEL: &str = "driftgate.dev/object-uid";
pub const FIELD_MANAGER: &str = "driftgate";

/// How often the expiry task looks at the records by default (`serve --expiry-check-interval`).
/// Expiry is noticed within this time.
pub const DEFAULT_EXPIRY_CHECK_INTERVAL: Duration = Duration::from_secs(10);

/// How long recording one break-glass change may take by default; see
/// [`Ledger::with_write_timeout`].
pub const DEFAULT_WRITE_TIMEOUT: Duration = Duration::from_secs(3);

/// How long a settled record is kept by default (`serve --record-retention`).
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(30 * 86_400);

/// When the background task looks at the records, and what it deletes.
#[derive(Clone, Copy, Debug)]
pub struct Upkeep {
    /// Expiry is noticed within this time.
    pub expiry_interval: Duration,
    /// A record settled (Backported or Resolved) this long ago is deleted; None keeps it.
    pub retention: Option<Duration>,
}

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
    client: kube::Client,
    store: Store<BackportRequirement>,
    ready: AtomicBool,
    /// Notified once, when the records first sync.
    synced: Notify,
    events: EventSink,
    metrics: Arc<Metrics>,
    /// The policies being served: the expiry check and the gauges look only at records in
    /// namespaces they guard.
    policies: Arc<ArcSwap<PolicySet>>,
    namespaces: NamespaceCache,
    retention: Option<Duration>,
}

fn time(at: Timestamp) -> Time {
    Time(at)
}

/// A record name: `<kind>-<name>-<hash>` where the hash is of the object's uid and the window's
/// first label value, so that two replicas recording the same window pick the same name.
pub fn record_name(kind: &str, name: &str, uid: &str, label_value: &str) -> String {
    let hash = Sha256::digest(format!("{uid}/{label_value}").as_bytes());
    let suffix: String = hash.iter().take(5).map(|b| format!("{b:02x}")).collect();
    let mut prefix: String = format!("{}-{}", kind.to_lowercase(), name)
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    prefix.truncate(253 - 11);
    format!("{}-{suffix}", prefix.trim_end_matches(['-', '.']))
}

/// The record's phase, `Open` before any status was written.
pub fn phase_of(record: &BackportRequirement) -> Phase {
    record.status.as_ref().map(|s| s.phase).unwrap_or_default()
}

/// Since when a record has awaited the controller: since its transition to AwaitingBackport,
/// or, for an Open record whose window has ended before the expiry check noticed, since the
/// end of its window. None while the window is open or once the record is settled.
pub fn awaiting_since(record: &BackportRequirement, now: Timestamp) -> Option<Timestamp> {
    match phase_of(record) {
        Phase::AwaitingBackport => phase_since(record),
        Phase::Open => {
            let ended = record.spec.window.expires_at.0;
            (ended <= now).then_some(ended)
        }
        _ => None,
    }
}

/// When the record last changed phase (its creation, if never).
pub fn phase_since(record: &BackportRequirement) -> Option<Timestamp> {
    record
        .status
        .as_ref()
        .and_then(|s| s.transitions.last())
        .map(|t| t.time.0)
        .or_else(|| record.metadata.creation_timestamp.as_ref().map(|t| t.0))
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
        let connected = Arc::new(Connected {
            client: client.clone(),
            store,
            ready: AtomicBool::new(false),
            synced: Notify::new(),
            events,
            metrics: metrics.clone(),
            policies,
            namespaces,
            retention: upkeep.retention,
        });
        let api: Api<BackportRequirement> = Api::all(client);
        let watch = connected.clone();
        let watch_shutdown = shutdown.clone();
        let watcher_task = tokio::spawn(async move {
            let stream = watcher(api, watcher::Config::default())
                .default_backoff()
                .reflect(writer)
                .touched_objects();
            let mut stream = std::pin::pin!(stream);
            let ready = watch.store.wait_until_ready();
            tokio::pin!(ready);
            let mut synced = false;
            loop {
                tokio::select! {
                    () = watch_shutdown.cancelled() => return,
                    result = &mut ready, if !synced => {
                        synced = true;
                        if result.is_ok() {
                            // The gauges are the records' before readiness, so a restarted
                            // driftgate never reports 0 while records are pending.
                            watch.refresh_gauges();
                            watch.ready.store(true, Ordering::Relaxed);
                            watch.synced.notify_one();
                        }
                    }
                    item = stream.next() => match item {
                        // A record changed: the gauges follow at once, not at the next check.
                        Some(Ok(_)) if synced => watch.refresh_gauges(),
                        Some(Ok(_)) => {}
                        Some(Err(error)) => tracing::warn!(%error, "watching BackportRequirements failed; retrying"),
                        None => return,
                    },
                }
            }
        });
        let expiry = connected.clone();
        let expiry_task = tokio::spawn(async move {
            // The first check right after the records sync: windows that ended while driftgate
            // was down are noticed at start, not one interval later.
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = expiry.synced.notified() => {}
            }
            let mut ticker = tokio::time::interval(upkeep.expiry_interval);
            // A tick missed while a check ran long is not made up in a burst.
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    _ = ticker.tick() => {}
                }
                if expiry.ready.load(Ordering::Relaxed) {
                    expiry.expire_windows().await;
                    expiry.delete_past_retention().await;
                    expiry.refresh_gauges();
                }
            }
        });
        (
            Ledger {
                inner: Some(connected),
                metrics,
                write_timeout: DEFAULT_WRITE_TIMEOUT,
                guard: Arc::default(),
                identity_pending: Arc::default(),
            },
            vec![watcher_task, expiry_task],
        )
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

    /// Records what `decision` admits under break-glass before it is answered, and judges a
    /// controller's write against records awaiting backport. May turn the decision into a
    /// refusal: when a record cannot be written, or when the policy refuses reverts.
    pub async fn apply(
        &self,
        request: &AdmissionRequest<DynamicObject>,
        decision: &mut Decision,
        policies: &PolicySet,
        now: Timestamp,
    ) {
        if !decision.allowed {
            return;
        }
        let Some(inner) = &self.inner else {
            if !request.dry_run
                && decision
                    .record
                    .verdicts
                    .iter()
                    .any(|v| is_break_glass_write(v.rule))
            {
                decision.warnings.push(
                    "driftgate runs without a cluster: this break-glass change is not recorded in a backport ledger."
                        .to_owned(),
                );
            }
            return;
        };
        if let Some(refusal) = self.refusal(inner, request, decision, policies, now).await {
            decision.refuse(&refusal.policy, refusal.rule, refusal.message);
        }
    }

    /// Does the ledger's part for each verdict (reading the decision, not changing it) and
    /// returns why the write must be refused, if it must.
    async fn refusal(
        &self,
        inner: &Arc<Connected>,
        request: &AdmissionRequest<DynamicObject>,
        decision: &Decision,
        policies: &PolicySet,
        now: Timestamp,
    ) -> Option<Refusal> {
        for verdict in &decision.record.verdicts {
            let rules = policies
                .policies()
                .iter()
                .find(|p| p.name == verdict.policy)
                .and_then(|p| p.break_glass.as_ref());
            let Some(rules) = rules else { continue };
            if verdict.rule == Rule::Controller {
                if let Some(message) = inner.judge_controller_write(request, verdict, rules, now) {
                    return Some(Refusal {
                        policy: verdict.policy.clone(),
                        rule: Rule::RevertRefused,
                        message,
                    });
                }
                continue;
            }
            if request.dry_run || !is_break_glass_write(verdict.rule) {
                continue;
            }
            let recorded = tokio::time::timeout(
                self.write_timeout,
                inner.record(request, decision, verdict, rules, now),
            )
            .await
            .map_err(|_| {
                format!(
                    "the API server did not answer within {:?}",
                    self.write_timeout
                )
            })
            .and_then(|written| written.map_err(|e| e.to_string()));
            if let Err(error) = recorded {
                Metrics::count_result(&self.metrics.ledger_writes, false);
                tracing::warn!(%error, uid = %request.uid, "could not write the backport record; refusing the break-glass change");
                return Some(Refusal {
                    policy: verdict.policy.clone(),
                    rule: Rule::LedgerUnavailable,
                    message: unrecorded_message(&decision.record, &verdict.policy, &error),
                });
            }
            Metrics::count_result(&self.metrics.ledger_writes, true);
        }
        None
    }
}

/// A record of a window with no changes yet; `opened` is who opened it and when, when driftgate
/// saw it being opened.
fn new_record(
    object: RecordedObject,
    scope: RecordScope,
    window: &crate::decision::BreakGlassWindow,
    policy: &str,
    opened: Option<(&str, Timestamp)>,
) -> BackportRequirementSpec {
    BackportRequirementSpec {
        object,
        scope,
        window: RecordedWindow {
            opener: opened.map(|(user, _)| user.to_owned()),
            reason: window.reason.clone(),
            opened_at: opened.map(|(_, at)| time(at)),
            expires_at: time(window.expires_at),
            label_value: window.label_value.clone(),
        },
        policy: policy.to_owned(),
        changes: Vec::new(),
    }
}

fn is_break_glass_write(rule: Rule) -> bool {
    matches!(
        rule,
        Rule::BreakGlassOpened
            | Rule::BreakGlassExtended
            | Rule::BreakGlassAmended
            | Rule::BreakGlassClosed
            | Rule::BreakGlassWindow
    )
}

/// Why the ledger refuses a write the policies admitted: the policy whose verdict it
/// overturns, by which rule, and the message for the person refused.
struct Refusal {
    policy: String,
    rule: Rule,
    message: String,
}

/// The refusal of a break-glass change that could not be recorded (`error` says why).
fn unrecorded_message(record: &DecisionRecord, policy: &str, error: &str) -> String {
    let object = &record.object;
    let who = match record.user.as_str() {
        "" => "an anonymous client",
        user => user,
    };
    let place = match object.namespace.as_str() {
        "" => object.name.clone(),
        namespace => format!("{namespace}/{}", object.name),
    };
    format!(
        "driftgate could not record this break-glass change by {} to {} {place} in its backport ledger ({error}), so it was not made (policy \"{policy}\", rule {}). \
         Retry in a moment; if it keeps failing, driftgate cannot reach the API server.",
        who,
        object.kind,
        Rule::LedgerUnavailable,
    )
}

/// The uid of the object written: from the object, or the old object for a DELETE.
fn object_uid(request: &AdmissionRequest<DynamicObject>) -> String {
    request
        .object
        .as_ref()
        .or(request.old_object.as_ref())
        .and_then(|o| o.metadata.uid.clone())
        .unwrap_or_default()
}

fn api_version(group: &str, version: &str) -> String {
    if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    }
}

impl Connected {
    fn api(&self, namespace: &str) -> Api<BackportRequirement> {
        Api::namespaced(self.client.clone(), namespace)
    }

    /// Writes what one break-glass verdict needs, before the write is admitted.
    async fn record(
        &self,
        request: &AdmissionRequest<DynamicObject>,
        decision: &Decision,
        verdict: &PolicyVerdict,
        rules: &BreakGlassRules,
        now: Timestamp,
    ) -> Result<(), kube::Error> {
        let object = &decision.record.object;
        let namespace = object.namespace.clone();
        let is_namespace_object = object.group.is_empty() && object.kind == "Namespace";
        // Which window this write belongs to.
        let scope = match verdict.window.as_ref().or(verdict.new_window.as_ref()) {
            Some(w) if w.scope == WindowScope::Namespace => RecordScope::Namespace,
            _ if is_namespace_object => RecordScope::Namespace,
            _ => RecordScope::Object,
        };
        let (window_object, window_uid) = match scope {
            RecordScope::Object => (
                RecordedObject {
                    api_version: api_version(&object.group, &object.version),
                    kind: object.kind.clone(),
                    name: object.name.clone(),
                    uid: object_uid(request),
                },
                object_uid(request),
            ),
            RecordScope::Namespace => {
                // The Namespace's uid is known only when the Namespace itself is written.
                let uid = if is_namespace_object {
                    object_uid(request)
                } else {
                    String::new()
                };
                (
                    RecordedObject {
                        api_version: "v1".into(),
                        kind: "Namespace".into(),
                        name: namespace.clone(),
                        uid: uid.clone(),
                    },
                    format!("namespace-{namespace}"),
                )
            }
        };
        let api = self.api(&namespace);
        let open = api
            .list(
                &ListParams::default()
                    .labels(&format!("{OBJECT_UID_LABEL}={}", label_safe(&window_uid))),
            )
            .await?
            .items
            .into_iter()
            .filter(|r| phase_of(r) == Phase::Open && r.spec.scope == scope);
        // A record is one window. One whose window has ended, and which the expiry check has
        // not got to yet, is expired now: a window opened after it gets a record of its own.
        let mut existing = None;
        for record in open {
            if record.spec.window.expires_at.0 > now {
                existing = existing.or(Some(record));
            } else if let Err(error) = self.expire(&record, now).await {
                tracing::warn!(%error, record = %record.name_any(), "could not mark an expired window");
            }
        }

        match verdict.rule {
            Rule::BreakGlassClosed => {
                if let Some(record) = existing {
                    self.transition(
                        &record,
                        Phase::AwaitingBackport,
                        "Closed",
                        &format!("{} closed the window", decision.record.user),
                        Vec::new(),
                        now,
                    )
                    .await?;
                }
                Ok(())
            }
            Rule::BreakGlassOpened | Rule::BreakGlassExtended | Rule::BreakGlassAmended => {
                let Some(window) = verdict.new_window.as_ref() else {
                    return Ok(());
                };
                match existing {
                    Some(record) => {
                        let patch = json!({"spec": {"window": {
                            "expiresAt": time(window.expires_at),
                            "labelValue": window.label_value,
                            "reason": window.reason,
                        }}});
                        api.patch(
                            &record.name_any(),
                            &PatchParams::default(),
                            &Patch::Merge(&patch),
                        )
                        .await?;
                        Ok(())
                    }
                    None => {
                        let spec = new_record(
                            window_object,
                            scope,
                            window,
                            &verdict.policy,
                            Some((&decision.record.user, now)),
                        );
                        let opened = format!(
                            "{} opened the window until {}",
                            decision.record.user,
                            human_utc(window.expires_at)
                        );
                        self.create(&api, &window_uid, spec, "Opened", &opened, now)
                            .await
                            .map(|_| ())
                    }
                }
            }
            Rule::BreakGlassWindow => {
                let Some(window) = verdict.window.as_ref() else {
                    return Ok(());
                };
                let record = match existing {
                    Some(record) => record,
                    // The window was opened where driftgate could not see it (before it was
                    // installed, or while the webhook was bypassed): record it now.
                    None => {
                        let spec = new_record(window_object, scope, window, &verdict.policy, None);
                        let found = format!(
                            "{} changed the object under a window (until {}) that was opened where driftgate did not see it",
                            decision.record.user,
                            human_utc(window.expires_at)
                        );
                        self.create(&api, &window_uid, spec, "WindowFound", &found, now)
                            .await?
                    }
                };
                let change = recorded_change(request, decision, scope, rules, now);
                self.append(&api, record, change).await
            }
            _ => Ok(()),
        }
    }

    /// Appends `change` to `record` unless it holds the change already (by request uid). The
    /// append is conditioned on the record's resourceVersion, and on a conflict the record is
    /// read again and checked again: several replicas called for the same request (the API
    /// server calls validating webhooks in parallel), or a retry of a request whose answer was
    /// lost, record the change once.
    async fn append(
        &self,
        api: &Api<BackportRequirement>,
        mut record: BackportRequirement,
        change: RecordedChange,
    ) -> Result<(), kube::Error> {
        const ATTEMPTS: usize = 5;
        for attempt in 1..=ATTEMPTS {
            if record.spec.changes.iter().any(|c| same_write(c, &change)) {
                return Ok(());
            }
            let patch = json!([
                {"op": "replace", "path": "/metadata/resourceVersion", "value": record.metadata.resource_version},
                {"op": "add", "path": "/spec/changes/-", "value": change},
            ]);
            let patch: json_patch::Patch =
                serde_json::from_value(patch).expect("a valid JSON patch");
            match api
                .patch(
                    &record.name_any(),
                    &PatchParams::default(),
                    &Patch::<()>::Json(patch),
                )
                .await
            {
                Ok(_) => return Ok(()),
                Err(kube::Error::Api(status)) if status.code == 409 && attempt < ATTEMPTS => {
                    record = api.get(&record.name_any()).await?;
                }
                Err(error) => return Err(error),
            }
        }
        unreachable!("the last attempt returns")
    }

    /// Creates the record of a window, in phase Open with its first transition (`reason`,
    /// `message`); a record of the same window that exists already (another replica, or a retry
    /// of this request) is returned as it is.
    async fn create(
        &self,
        api: &Api<BackportRequirement>,
        window_uid: &str,
        spec: BackportRequirementSpec,
        reason: &str,
        message: &str,
        now: Timestamp,
    ) -> Result<BackportRequirement, kube::Error> {
        let name = record_name(
            &spec.object.kind,
            &spec.object.name,
            window_uid,
            &spec.window.label_value,
        );
        let mut record = BackportRequirement::new(&name, spec);
        record.metadata.labels = Some(BTreeMap::from([(
            OBJECT_UID_LABEL.to_owned(),
            label_safe(window_uid),
        )]));
        match api
            .create(
                &PostParams {
                    field_manager: Some(FIELD_MANAGER.into()),
                    ..Default::default()
                },
                &record,
            )
            .await
        {
            Ok(created) => Ok(self.mark_open(api, created, reason, message, now).await),
            // Another replica (or a retry of this request) recorded the same window.
            Err(kube::Error::Api(status)) if status.code == 409 => api.get(&name).await,
            Err(error) => Err(error),
        }
    }

    /// Writes a new record's status, phase Open: the API server ignores the status of a create
    /// (it is a subresource), and without it `kubectl get backportrequirements` shows no phase.
    /// Retried when the record changed meanwhile (another replica appended a change); a failure
    /// is only logged, since the record itself exists and reads as Open without a status.
    async fn mark_open(
        &self,
        api: &Api<BackportRequirement>,
        mut record: BackportRequirement,
        reason: &str,
        message: &str,
        now: Timestamp,
    ) -> BackportRequirement {
        for _ in 0..3 {
            if record
                .status
                .as_ref()
                .is_some_and(|s| !s.transitions.is_empty())
            {
                return record;
            }
            match self
                .transition(&record, Phase::Open, reason, message, Vec::new(), now)
                .await
            {
                Ok(Some(written)) => return written,
                Ok(None) => match api.get(&record.name_any()).await {
                    Ok(latest) => record = latest,
                    Err(error) => {
                        tracing::warn!(%error, record = %record.name_any(), "could not read a new record back");
                        return record;
                    }
                },
                Err(error) => {
                    tracing::warn!(%error, record = %record.name_any(), "could not write a new record's status");
                    return record;
                }
            }
        }
        record
    }

    /// Moves a record to `phase`, conditioned on its resourceVersion. Returns the record as
    /// written when this call made the transition, None when it did not (somebody else did, or
    /// the record changed meanwhile).
    async fn transition(
        &self,
        record: &BackportRequirement,
        phase: Phase,
        reason: &str,
        message: &str,
        reverted_fields: Vec<String>,
        now: Timestamp,
    ) -> Result<Option<BackportRequirement>, kube::Error> {
        let mut status = record.status.clone().unwrap_or_default();
        status.phase = phase;
        status.transitions.push(Transition {
            phase,
            time: time(now),
            reason: reason.to_owned(),
            message: message.to_owned(),
        });
        if !reverted_fields.is_empty() {
            status.reverted_fields = reverted_fields;
        }
        let patch = json!({
            "metadata": {"resourceVersion": record.metadata.resource_version},
            "status": status,
        });
        let namespace = record.metadata.namespace.clone().unwrap_or_default();
        match self
            .api(&namespace)
            .patch_status(
                &record.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(written) => Ok(Some(written)),
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// The controller's write, against records awaiting backport for this object. Returns a
    /// refusal message when the policy refuses reverts and this write is one.
    fn judge_controller_write(
        self: &Arc<Self>,
        request: &AdmissionRequest<DynamicObject>,
        verdict: &PolicyVerdict,
        rules: &BreakGlassRules,
        now: Timestamp,
    ) -> Option<String> {
        let uid = object_uid(request);
        if uid.is_empty() {
            return None;
        }
        let namespace = request.namespace.clone().unwrap_or_default();
        // Filtered inside the store: every controller write asks, and few objects have records.
        let awaiting: Vec<Arc<BackportRequirement>> = self.store.state_filter(|r| {
            r.metadata.namespace.as_deref() == Some(namespace.as_str())
                && awaiting_since(r, now).is_some()
                && (r.spec.object.uid == uid
                    || r.spec
                        .changes
                        .iter()
                        .any(|c| c.object.as_ref().is_some_and(|o| o.uid == uid)))
        });
        if awaiting.is_empty() {
            return None;
        }
        let object = match (&request.operation, &request.object) {
            (Operation::Delete, _) | (_, None) => None,
            (_, Some(object)) => serde_json::to_value(object).ok(),
        };
        // The controller's own field set: only what it manages is evidence of what Git holds.
        let field_manager = request
            .options
            .as_ref()
            .and_then(|o| o.0.get("fieldManager"))
            .and_then(Value::as_str);
        let controller_fields: Option<Value> = field_manager.and_then(|manager| {
            request
                .object
                .as_ref()?
                .metadata
                .managed_fields
                .as_ref()?
                .iter()
                .find(|entry| {
                    entry.manager.as_deref() == Some(manager)
                        && entry.subresource.as_deref().unwrap_or("").is_empty()
                })
                .and_then(|entry| entry.fields_v1.as_ref())
                .map(|fields| fields.0.clone())
        });
        for record in awaiting {
            let evidence = match &object {
                Some(object) => judge(&record.spec, &uid, object, controller_fields.as_ref()),
                None => Evidence::Reverted(vec!["(object deleted)".to_owned()]),
            };
            let reverted = matches!(evidence, Evidence::Reverted(_));
            if reverted
                && let Some(hold) = rules.refuse_reverts_for
                && awaiting_since(&record, now).is_some_and(|since| {
                    since
                        .checked_add(hold.as_signed())
                        .is_ok_and(|until| until > now)
                })
            {
                let Evidence::Reverted(fields) = &evidence else {
                    unreachable!()
                };
                return Some(format!(
                    "Controller {} may not revert the emergency change recorded in BackportRequirement {}/{} (fields {}, opened by {}, reason \"{}\") (policy \"{}\", rule {}). \
                     Backport the change to Git, or resolve the record: driftgate backlog resolve {} -n {} --note \"…\".",
                    verdict.matched.as_deref().unwrap_or("?"),
                    namespace,
                    record.name_any(),
                    fields.join(", "),
                    record.spec.window.opener_words(),
                    record.spec.window.reason_words(),
                    verdict.policy,
                    Rule::RevertRefused,
                    record.name_any(),
                    namespace,
                ));
            }
            // A dry run writes nothing, so it settles nothing: Flux dry-runs every object on
            // every reconcile, and its dry run of Git's values says nothing about what it
            // will write (the webhook promises `sideEffects: NoneOnDryRun`, too). It is
            // refused above like the real write, so that Flux reports the refusal.
            if request.dry_run || matches!(evidence, Evidence::Nothing) {
                continue;
            }
            // The transition and its Event do not hold up the controller's write.
            let this = self.clone();
            let regarding = regarding_of(request);
            let user = request.user_info.username.clone().unwrap_or_default();
            tokio::spawn(async move {
                this.settle(&record, evidence, regarding, &user, now).await;
            });
        }
        None
    }

    async fn settle(
        &self,
        record: &BackportRequirement,
        evidence: Evidence,
        regarding: ObjectReference,
        controller_user: &str,
        now: Timestamp,
    ) {
        let opener = record.spec.window.opener_words().into_owned();
        let reason = record.spec.window.reason_words().into_owned();
        let (phase, why, fields, event) = match evidence {
            Evidence::Backported => (
                Phase::Backported,
                "ControllerCarriedChange",
                Vec::new(),
                PlannedEvent::new(
                    EventReason::BackportConfirmed,
                    format!(
                        "The GitOps controller ({controller_user}) applied the values of the emergency change made under {opener}'s break-glass window (reason \"{reason}\"): Git has caught up. Record {}.",
                        record.name_any()
                    ),
                    regarding,
                ),
            ),
            Evidence::Reverted(fields) => (
                Phase::Reverted,
                "ControllerRevertedChange",
                fields.clone(),
                PlannedEvent::new(
                    EventReason::EmergencyChangeReverted,
                    format!(
                        "The GitOps controller ({controller_user}) reverted the emergency change to {} made under {opener}'s break-glass window (reason \"{reason}\"): Git does not have it. Record {}.",
                        fields.join(", "),
                        record.name_any()
                    ),
                    regarding,
                ),
            ),
            Evidence::Nothing => return,
        };
        // A record whose window ended since the last expiry check is expired first (with its
        // Event), then settled; each step is conditioned on the record's resourceVersion, and
        // a conflict is read again: another replica may have made the step already.
        let api = self.api(record.metadata.namespace.as_deref().unwrap_or_default());
        let mut record = record.clone();
        for _ in 0..4 {
            let step = match phase_of(&record) {
                Phase::Open if record.spec.window.expires_at.0 <= now => {
                    self.expire(&record, now).await
                }
                Phase::AwaitingBackport => {
                    match self
                        .transition(&record, phase, why, &event.note, fields.clone(), now)
                        .await
                    {
                        Ok(Some(_)) => {
                            if phase == Phase::Reverted {
                                self.metrics.emergency_changes_reverted.inc();
                            }
                            self.events.publish(event);
                            return;
                        }
                        other => other,
                    }
                }
                // Settled already, or the window was extended meanwhile.
                _ => return,
            };
            record = match step {
                Ok(Some(written)) => written,
                Ok(None) => match api.get(&record.name_any()).await {
                    Ok(latest) => latest,
                    Err(error) => {
                        tracing::warn!(%error, record = %record.name_any(), "could not read a record back");
                        return;
                    }
                },
                Err(error) => {
                    tracing::warn!(%error, record = %record.name_any(), "could not record the backport outcome");
                    return;
                }
            };
        }
    }

    /// The records this driftgate looks after: those in namespaces its policies guard.
    fn managed_records(&self) -> Vec<Arc<BackportRequirement>> {
        let policies = self.policies.load();
        let guarding: Vec<_> = policies
            .policies()
            .iter()
            .filter(|p| p.break_glass.is_some())
            .collect();
        self.store
            .state()
            .into_iter()
            .filter(|record| {
                let Some(namespace) = record.metadata.namespace.as_deref() else {
                    return false;
                };
                let known = self.namespaces.get(namespace);
                let labels = match known.as_ref().map(|ns| &ns.metadata.labels) {
                    Some(Some(labels)) => NamespaceLabels::Known(labels),
                    Some(None) => NamespaceLabels::Known(&NO_LABELS),
                    None => NamespaceLabels::Unknown,
                };
                guarding
                    .iter()
                    .any(|p| p.guards_namespace(namespace, labels))
            })
            .collect()
    }

    /// Windows whose expiry passed move to AwaitingBackport, once, by whichever replica wins.
    async fn expire_windows(&self) {
        let now = Timestamp::now();
        for record in self.managed_records() {
            if phase_of(&record) != Phase::Open || record.spec.window.expires_at.0 > now {
                continue;
            }
            if let Err(error) = self.expire(&record, now).await {
                tracing::warn!(%error, record = %record.name_any(), "could not mark an expired window");
            }
        }
    }

    /// Deletes records settled (Backported or Resolved) longer than the retention ago, each
    /// conditioned on the version looked at: a record changed meanwhile is looked at again at
    /// the next check. The only deletion of records driftgate's webhook admits.
    async fn delete_past_retention(&self) {
        let Some(retention) = self.retention else {
            return;
        };
        let now = Timestamp::now();
        for record in self.managed_records() {
            if !past_retention(&record, retention, now) {
                continue;
            }
            let namespace = record.metadata.namespace.clone().unwrap_or_default();
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    resource_version: record.metadata.resource_version.clone(),
                    uid: record.metadata.uid.clone(),
                }),
                ..DeleteParams::default()
            };
            match self
                .api(&namespace)
                .delete(&record.name_any(), &params)
                .await
            {
                Ok(_) => {
                    tracing::info!(record = %record.name_any(), %namespace, phase = phase_of(&record).word(), "deleted a settled backport record past its retention")
                }
                Err(kube::Error::Api(status)) if matches!(status.code, 404 | 409) => {}
                Err(error) => {
                    tracing::warn!(%error, record = %record.name_any(), "could not delete a settled record past its retention")
                }
            }
        }
    }

    /// Moves an Open record whose window has ended to AwaitingBackport and publishes its
    /// BreakGlassExpired Event. Returns the record as written, or None when this call did not
    /// make the transition (another replica did, or the record changed meanwhile).
    async fn expire(
        &self,
        record: &BackportRequirement,
        now: Timestamp,
    ) -> Result<Option<BackportRequirement>, kube::Error> {
        let message = format!(
            "the window ended at {} with {} change(s) not yet seen in Git",
            human_utc(record.spec.window.expires_at.0),
            record.spec.changes.len()
        );
        let written = self
            .transition(
                record,
                Phase::AwaitingBackport,
                "Expired",
                &message,
                Vec::new(),
                now,
            )
            .await?;
        if written.is_some() {
            let note = format!(
                "The break-glass window opened by {} (reason \"{}\") expired at {}; {} change(s) made in it must be backported to Git, or the controller will revert them. Record {}.",
                record.spec.window.opener_words(),
                record.spec.window.reason_words(),
                human_utc(record.spec.window.expires_at.0),
                record.spec.changes.len(),
                record.name_any(),
            );
            let regarding = ObjectReference {
                api_version: Some(record.spec.object.api_version.clone()),
                kind: Some(record.spec.object.kind.clone()),
                name: Some(record.spec.object.name.clone()),
                namespace: (record.spec.scope == RecordScope::Object)
                    .then(|| record.metadata.namespace.clone())
                    .flatten(),
                uid: Some(record.spec.object.uid.clone()).filter(|u| !u.is_empty()),
                ..ObjectReference::default()
            };
            self.events.publish(PlannedEvent::new(
                EventReason::BreakGlassExpired,
                note,
                regarding,
            ));
        }
        Ok(written)
    }

    /// Sets the gauges from the records (the thin sink of [`record_gauges`]).
    fn refresh_gauges(&self) {
        let gauges = record_gauges(&self.managed_records(), Timestamp::now());
        self.metrics
            .break_glass_windows_open
            .set(gauges.windows_open as i64);
        self.metrics.backport_pending.set(gauges.pending as i64);
        self.metrics
            .backport_oldest_pending_seconds
            .set(gauges.oldest_pending_seconds);
    }
}

/// What the gauges derived from records say.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RecordGauges {
    /// Records whose window is open now.
    pub windows_open: usize,
    /// Records awaiting backport: AwaitingBackport, or Open with their window ended (the
    /// expiry check has not moved them yet, e.g. when the window ended while driftgate was down).
    pub pending: usize,
    /// The age of the oldest pending record, since it began awaiting; 0 without one.
    pub oldest_pending_seconds: f64,
}

/// The gauges from the records alone: nothing kept in memory, so a restart changes nothing.
pub fn record_gauges(records: &[Arc<BackportRequirement>], now: Timestamp) -> RecordGauges {
    let windows_open = records
        .iter()
        .filter(|r| phase_of(r) == Phase::Open && r.spec.window.expires_at.0 > now)
        .count();
    let pending: Vec<_> = records
        .iter()
        .filter(|r| match phase_of(r) {
            Phase::AwaitingBackport => true,
            Phase::Open => r.spec.window.expires_at.0 <= now,
            _ => false,
        })
        .collect();
    let oldest_pending_seconds = pending
        .iter()
        .filter_map(|r| awaiting_since(r, now))
        .map(|since| (now - since).get_seconds() as f64)
        .fold(0.0, f64::max);
    RecordGauges {
        windows_open,
        pending: pending.len(),
        oldest_pending_seconds,
    }
}

/// Whether a record settled (Backported or Resolved) at least `retention` before `now`.
pub fn past_retention(record: &BackportRequirement, retention: Duration, now: Timestamp) -> bool {
    matches!(phase_of(record), Phase::Backported | Phase::Resolved)
        && phase_since(record).is_some_and(|since| {
            jiff::SignedDuration::try_from(retention)
                .ok()
                .and_then(|keep| since.checked_add(keep).ok())
                .is_some_and(|until| until <= now)
        })
}

/// The Event's object for a controller's write: the object written.
fn regarding_of(request: &AdmissionRequest<DynamicObject>) -> ObjectReference {
    ObjectReference {
        api_version: Some(api_version(&request.kind.group, &request.kind.version)),
        kind: Some(request.kind.kind.clone()),
        name: Some(request.name.clone()),
        namespace: request.namespace.clone(),
        uid: Some(object_uid(request)).filter(|u| !u.is_empty()),
        ..ObjectReference::default()
    }
}

/// Label values allow 63 characters of `[A-Za-z0-9._-]`; uids fit, namespace keys are trimmed.
fn label_safe(value: &str) -> String {
    let mut out: String = value
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '-'
            }
        })
        .collect();
    out.truncate(63);
    out.trim_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_owned()
}

/// Whether two recorded changes are one write: one request (retried), or one write reviewed by
/// several webhooks (each call has its own request uid, but the same object and the same
/// resourceVersion before the change).
fn same_write(a: &RecordedChange, b: &RecordedChange) -> bool {
    a.request_uid == b.request_uid
        || (!a.resource_version.is_empty()
            && a.resource_version == b.resource_version
            && a.operation == b.operation
            && a.subresource == b.subresource
            && a.object.as_ref().map(|o| &o.uid) == b.object.as_ref().map(|o| &o.uid))
}

/// What one admitted change under a window did, with digests of the new values.
fn recorded_change(
    request: &AdmissionRequest<DynamicObject>,
    decision: &Decision,
    scope: RecordScope,
    rules: &BreakGlassRules,
    now: Timestamp,
) -> RecordedChange {
    let object = &decision.record.object;
    let new = request
        .object
        .as_ref()
        .and_then(|o| serde_json::to_value(o).ok())
        .unwrap_or(Value::Null);
    let is_secret = object.group.is_empty() && object.kind == "Secret";
    let fields = decision
        .record
        .changed_fields
        .iter()
        .filter_map(|path| {
            let parsed = crate::fieldpath::FieldPath::parse(path).ok()?;
            let value = value_at(&new, &parsed);
            Some(RecordedField {
                path: path.clone(),
                digest: digest(value),
                value: if rules.record_values && !is_secret {
                    value.cloned()
                } else {
                    None
                },
            })
        })
        .collect();
    RecordedChange {
        time: time(now),
        user: decision.record.user.clone(),
        operation: decision.record.operation.clone(),
        object: (scope == RecordScope::Namespace).then(|| RecordedObject {
            api_version: api_version(&object.group, &object.version),
            kind: object.kind.clone(),
            name: object.name.clone(),
            uid: object_uid(request),
        }),
        subresource: object.subresource.clone(),
        request_uid: request.uid.clone(),
        resource_version: match request.operation {
            Operation::Create => String::new(),
            _ => request
                .old_object
                .as_ref()
                .and_then(|o| o.metadata.resource_version.clone())
                .unwrap_or_default(),
        },
        fields,
    }
}

impl Phase {
    pub fn word(self) -> &'static str {
        match self {
            Phase::Open => "Open",
            Phase::AwaitingBackport => "AwaitingBackport",
            Phase::Backported => "Backported",
            Phase::Reverted => "Reverted",
            Phase::Resolved => "Resolved",
        }
    }
}

impl BackportStatus {
    pub fn phase_word(&self) -> &'static str {
        self.phase.word()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record_of(user: &str, namespace: &str) -> DecisionRecord {
        DecisionRecord {
            uid: "u".into(),
            operation: "UPDATE".into(),
            user: user.into(),
            groups: Vec::new(),
            field_manager: None,
            dry_run: false,
            object: crate::decision::ObjectRef {
                group: "apps".into(),
                version: "v1".into(),
                kind: "Deployment".into(),
                resource: "deployments".into(),
                subresource: String::new(),
                namespace: namespace.into(),
                name: "api".into(),
            },
            rule: Rule::BreakGlassWindow,
            verdicts: Vec::new(),
            changed_fields: Vec::new(),
        }
    }

    #[test]
    fn an_unrecorded_change_names_the_user_object_policy_and_rule_and_says_retry() {
        let message = unrecorded_message(
            &record_of("alice", "prod-payments"),
            "production",
            "connection refused",
        );
        assert_eq!(
            message,
            "driftgate could not record this break-glass change by alice to Deployment prod-payments/api in its backport ledger \
             (connection refused), so it was not made (policy \"production\", rule LedgerUnavailable). \
             Retry in a moment; if it keeps failing, driftgate cannot reach the API server."
        );
        let anonymous = unrecorded_message(&record_of("", ""), "production", "timeout");
        assert!(
            anonymous.contains("by an anonymous client to Deployment api in"),
            "{anonymous}"
        );
    }

    fn change(request_uid: &str, resource_version: &str, subresource: &str) -> RecordedChange {
        RecordedChange {
            time: time(Timestamp::UNIX_EPOCH),
            user: "alice".into(),
            operation: "UPDATE".into(),
            object: None,
            subresource: subresource.into(),
            request_uid: request_uid.into(),
            resource_version: resource_version.into(),
            fields: Vec::new(),
        }
    }

    fn settled(phase: Phase, at: &str) -> BackportRequirement {
        let mut record = BackportRequirement::new(
            "r",
            new_record(
                RecordedObject {
                    api_version: "apps/v1".into(),
                    kind: "Deployment".into(),
                    name: "api".into(),
                    uid: "u".into(),
                },
                RecordScope::Object,
                &crate::decision::BreakGlassWindow {
                    scope: WindowScope::Object,
                    label_value: "20261130T0900Z".into(),
                    expires_at: "2026-11-30T09:00:00Z".parse().unwrap(),
                    reason: None,
                },
                "prod",
                None,
            ),
        );
        record.status = Some(BackportStatus {
            phase,
            transitions: vec![Transition {
                phase,
                time: time(at.parse().unwrap()),
                reason: "x".into(),
                message: String::new(),
            }],
            ..BackportStatus::default()
        });
        record
    }

    #[test]
    fn gauges_come_from_the_records_alone() {
        // settled() records' windows end at 2026-11-30T09:00:00Z.
        let records: Vec<Arc<BackportRequirement>> = [
            settled(Phase::Open, "2026-11-30T08:50:00Z"),
            settled(Phase::AwaitingBackport, "2026-11-29T09:00:00Z"),
            settled(Phase::Backported, "2026-11-29T09:00:00Z"),
            settled(Phase::Resolved, "2026-11-29T09:00:00Z"),
        ]
        .into_iter()
        .map(Arc::new)
        .collect();
        let before_end: Timestamp = "2026-11-30T08:59:00Z".parse().unwrap();
        assert_eq!(
            record_gauges(&records, before_end),
            RecordGauges {
                windows_open: 1,
                pending: 1,
                oldest_pending_seconds: 86_340.0,
            }
        );
        // The window ended and no expiry check has run (driftgate was down): pending since
        // its end, beside the record already awaiting.
        let after_end: Timestamp = "2026-11-30T09:01:00Z".parse().unwrap();
        assert_eq!(
            record_gauges(&records, after_end),
            RecordGauges {
                windows_open: 0,
                pending: 2,
                oldest_pending_seconds: 86_460.0,
            }
        );
        assert_eq!(
            record_gauges(&records[2..], after_end),
            RecordGauges {
                windows_open: 0,
                pending: 0,
                oldest_pending_seconds: 0.0,
            }
        );
    }

    #[test]
    fn retention_deletes_only_records_settled_long_enough_ago() {
        let day = Duration::from_secs(86_400);
        let now: Timestamp = "2026-12-31T10:00:00Z".parse().unwrap();
        for phase in [Phase::Backported, Phase::Resolved] {
            assert!(past_retention(
                &settled(phase, "2026-12-30T10:00:00Z"),
                day,
                now
            ));
            assert!(!past_retention(
                &settled(phase, "2026-12-30T10:00:01Z"),
                day,
                now
            ));
        }
        // Unsettled records are never deleted, however old.
        for phase in [Phase::Open, Phase::AwaitingBackport, Phase::Reverted] {
            assert!(!past_retention(
                &settled(phase, "2025-01-01T00:00:00Z"),
                day,
                now
            ));
        }
    }

    #[test]
    fn one_write_reviewed_by_two_webhooks_is_one_change() {
        // A retry of one request.
        assert!(same_write(&change("r1", "", ""), &change("r1", "", "")));
        // Two webhooks, one write: their own request uids, the same object version.
        assert!(same_write(
            &change("r1", "41", "scale"),
            &change("r2", "41", "scale")
        ));
        // Two writes.
        assert!(!same_write(
            &change("r1", "41", "scale"),
            &change("r2", "42", "scale")
        ));
        assert!(!same_write(
            &change("r1", "41", ""),
            &change("r2", "41", "scale")
        ));
        // CREATEs have no version before them: only the request uid tells.
        assert!(!same_write(&change("r1", "", ""), &change("r2", "", "")));
        let mut other_object = change("r2", "41", "");
        other_object.object = Some(RecordedObject {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            name: "b".into(),
            uid: "u2".into(),
        });
        let mut one_object = change("r1", "41", "");
        one_object.object = Some(RecordedObject {
            uid: "u1".into(),
            ..other_object.object.clone().unwrap()
        });
        assert!(!same_write(&one_object, &other_object));
    }
}
