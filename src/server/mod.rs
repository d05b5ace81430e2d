//! The webhook service: `POST /validate` on the TLS port, health and metrics on the admin port.
//!
//! The routers hold no TLS and no sockets, so tests drive them with `tower::ServiceExt::oneshot`.

mod body;
pub mod client_auth;
pub mod connections;
pub mod lingering;
mod polled;
pub mod tls;
pub mod windows;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, FailedToBufferBody};
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderValue, StatusCode, Version, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Namespace;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, Operation};
use tower_http::timeout::TimeoutLayer;

pub use body::{BODY_BUDGET_WAIT, BodyBudget, DEFAULT_BODY_BUDGET, MAX_BODY_BYTES};
use driftgate_core::decision::{
    Decision, DecisionInput, cascade_query, decide_with_cascade, may_guard, needs_parent,
    unreadable,
};
use driftgate_core::deletions::DeletionTally;
use driftgate_core::policy::PolicySet;
use driftgate_core::reading::{ReadReview, read_lazily, read_whole};
use driftgate_core::request::{AdmittedWrite, RequestFacts, scope_namespace};
use driftgate_core::review::lazy::parse_lazily;
use driftgate_core::review::{SHALLOW_DEPTH, parse_envelope, stack_for};
use driftgate_core::silence::DEFAULT_SILENCE_AFTER;
use driftgate_core::text::{MAX_NAME_CHARS, echo};
use driftgate_kube::event_sink::EventSink;
use driftgate_kube::kube_state::{
    NamespaceCache, Parent, ParentLookup, ResourceCatalog, StoredReader,
};
use driftgate_kube::ledger::service::Ledger;
use driftgate_kube::metrics::{Metrics, ReviewLabels};
use driftgate_kube::tasks::cascade::CascadeReader;
use driftgate_kube::tasks::reload::PolicyStatus;
use driftgate_kube::tasks::silence::SilenceTracker;
use windows::WindowTracker;

/// Where the decision's "now" comes from; tests pin it.
pub type Clock = Arc<dyn Fn() -> Timestamp + Send + Sync>;

/// Everything a review needs, shared by every request.
pub struct AppState {
    /// Swapped whole on reload: a review sees one policy set from start to end.
    pub policies: Arc<ArcSwap<PolicySet>>,
    /// Whether `policies` holds a valid set at all (not when the policy was bad from the start).
    pub policy_status: Arc<PolicyStatus>,
    pub namespaces: NamespaceCache,
    pub parents: ParentLookup,
    /// Kinds and status subresources from API discovery; disabled without a cluster.
    pub resources: ResourceCatalog,
    /// What a DELETE would take with it through ownerReferences; disabled without a cluster.
    pub cascades: CascadeReader,
    pub events: EventSink,
    /// Backport records; disabled without a cluster.
    pub ledger: Ledger,
    pub metrics: Arc<Metrics>,
    /// Approximate open windows, used only when the ledger (which counts them exactly) is off.
    pub windows: WindowTracker,
    /// When each policy's GitOps controller last wrote, for the gauge and for refusals.
    pub silence: Arc<SilenceTracker>,
    pub clock: Clock,
    /// Cleared when shutdown starts, so the API server's endpoints drop this pod first.
    pub accepting: AtomicBool,
    /// Bytes of request bodies that may be held at once.
    pub body_budget: BodyBudget,
    /// The GatePolicy source, when `serve --gatepolicies` reads one.
    pub gatepolicies: Option<Arc<driftgate_kube::tasks::gatepolicies::GatePolicyHealth>>,
    /// The controllers' recent deletes, for `deletions.controllerLimit`. Each replica counts
    /// the deletes it reviews.
    pub deletions: Arc<std::sync::Mutex<DeletionTally>>,
    /// Break-glass labels seen on reviewed objects, for the expired-label gauge.
    pub lingering: std::sync::RwLock<driftgate_core::lingering::LingeringLabels>,
    /// The recent denials per namespace, for the PolicyReports (`serve --policy-reports`).
    pub denials: Option<Arc<std::sync::Mutex<driftgate_core::reports::RecentDenials>>>,
    /// Whether every review comes from the API server: true only when the webhook port
    /// requires a client certificate (`serve --client-ca-file`), so every review reached the
    /// handler through a handshake that verified the caller. Otherwise a review is only a claim
    /// (anyone who reaches the port can POST one): what it says changes nothing durable until
    /// the API server shows it.
    pub caller_authenticated: bool,
    /// Reads admitted writes back, to confirm what a review claimed.
    pub stored: StoredReader,
    /// Reads the object of a controller's delete while it is reviewed (without client
    /// authentication), for [`count_deletes`]; None without a cluster.
    pub api: Option<kube::Client>,
}

impl AppState {
    pub fn new(
        policies: Arc<ArcSwap<PolicySet>>,
        namespaces: NamespaceCache,
        parents: ParentLookup,
        events: EventSink,
        metrics: Arc<Metrics>,
    ) -> Self {
        let body_budget = BodyBudget::new(
            DEFAULT_BODY_BUDGET,
            metrics.webhook_body_bytes_in_flight.clone(),
        );
        AppState {
            body_budget,
            policies,
            policy_status: Arc::new(PolicyStatus::valid()),
            namespaces,
            parents,
            resources: ResourceCatalog::disabled(),
            cascades: CascadeReader::disabled(),
            events,
            ledger: Ledger::disabled(metrics.clone()),
            windows: WindowTracker::new(metrics.clone()),
            silence: Arc::new(SilenceTracker::new(DEFAULT_SILENCE_AFTER, metrics.clone())),
            metrics,
            clock: Arc::new(Timestamp::now),
            accepting: AtomicBool::new(true),
            gatepolicies: None,
            deletions: Arc::default(),
            lingering: std::sync::RwLock::default(),
            denials: None,
            caller_authenticated: false,
            stored: StoredReader::new(None),
            api: None,
        }
    }

    /// The reloader's status of `policies`, when they may not have loaded.
    pub fn with_policy_status(mut self, status: Arc<PolicyStatus>) -> Self {
        self.policy_status = status;
        self
    }

    /// The GatePolicy source's health, when `serve --gatepolicies` reads one.
    pub fn with_gatepolicies(
        mut self,
        health: Option<Arc<driftgate_kube::tasks::gatepolicies::GatePolicyHealth>>,
    ) -> Self {
        self.gatepolicies = health;
        self
    }

    pub fn with_resources(mut self, resources: ResourceCatalog) -> Self {
        self.resources = resources;
        self
    }

    pub fn with_cascades(mut self, cascades: CascadeReader) -> Self {
        self.cascades = cascades;
        self
    }

    pub fn with_ledger(mut self, ledger: Ledger) -> Self {
        self.ledger = ledger;
        self
    }

    pub fn with_body_budget(mut self, bytes: usize) -> Self {
        self.body_budget =
            BodyBudget::new(bytes, self.metrics.webhook_body_bytes_in_flight.clone());
        self
    }

    /// How long a GitOps controller may be silent before refusals say it may be down.
    pub fn with_silence_after(mut self, silent_after: Duration) -> Self {
        self.silence = Arc::new(SilenceTracker::new(silent_after, self.metrics.clone()));
        self
    }

    /// Keeps each denial in `denials` (bounded) for the PolicyReports.
    pub fn with_denials(
        mut self,
        denials: Arc<std::sync::Mutex<driftgate_core::reports::RecentDenials>>,
    ) -> Self {
        self.denials = Some(denials);
        self
    }

    /// Reads what reviews claim from the API server through `client`; `caller_authenticated`
    /// when every caller is the API server, verified by its client certificate.
    pub fn with_read_back(
        mut self,
        client: Option<kube::Client>,
        caller_authenticated: bool,
    ) -> Self {
        self.stored = StoredReader::new(client.clone());
        self.api = client;
        self.caller_authenticated = caller_authenticated;
        self
    }

    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }
}

/// `POST /validate`, with the body limit and a request timeout shorter than the webhook's
/// `timeoutSeconds`, so the API server gets our answer (a 408) rather than its own timeout.
pub fn router(state: Arc<AppState>, request_timeout: Duration) -> Router {
    Router::new()
        .route("/validate", post(validate))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            reserve_body_budget,
        ))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            refuse_announced_oversize,
        ))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            request_timeout,
        ))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            close_when_draining,
        ))
        .with_state(state)
}

/// While shutting down (readiness off, still serving), every HTTP/1 answer closes its
/// connection, so the API server sends its next review over a new connection, to a replica
/// that stays. Left open, the connection would be closed when serving stops, and a review sent
/// on it at that instant would be lost (the API server does not retry a POST).
async fn close_when_draining(
    State(state): State<Arc<AppState>>,
    request: Request,
    next: Next,
) -> Response {
    let http1 = request.version() < Version::HTTP_2;
    let mut response = next.run(request).await;
    if http1 && !state.accepting.load(Ordering::Relaxed) {
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

/// `GET /healthz`, `GET /readyz`, `GET /metrics` on the plain-HTTP admin port.
pub fn admin_router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(state)
}

async fn readyz(State(state): State<Arc<AppState>>) -> Response {
    if !state.accepting.load(Ordering::Relaxed) {
        return (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n").into_response();
    }
    if let Some(problems) = state.policy_status.unavailable() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("no valid policy loaded, so no review can be decided:\n{problems}\n"),
        )
            .into_response();
    }
    if !state.namespaces.has_synced() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "namespace cache not synced with the API server yet\n",
        )
            .into_response();
    }
    if let Some(reason) = state.gatepolicies.as_ref().and_then(|g| g.not_listed()) {
        return (StatusCode::SERVICE_UNAVAILABLE, format!("{reason}\n")).into_response();
    }
    if !state.ledger.is_ready() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "backport records not synced with the API server yet\n",
        )
            .into_response();
    }
    // A failed reload keeps serving the last good policy, so it does not make the pod unready;
    // the body says so (and the driftgate_policy_valid gauge, whose alert stays while it does).
    let count = state.policies.load().policies().len();
    // A refused GatePolicy is refused for its own namespaces only; the pod serves the rest.
    let refused_objects = match state.gatepolicies.as_ref().and_then(|g| g.problems()) {
        Some(problems) => format!(
            "refused GatePolicy objects (each keeps its last good generation, if any):\n{problems}\n"
        ),
        None => String::new(),
    };
    match state.policy_status.problems() {
        None => (
            StatusCode::OK,
            format!("ok: {count} policies loaded\n{refused_objects}"),
        )
            .into_response(),
        Some(problems) => (
            StatusCode::OK,
            format!(
                "ok: {count} policies loaded; the policy's current content is refused, the last good one keeps serving:\n{problems}\n{refused_objects}"
            ),
        )
            .into_response(),
    }
}

async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.encode(),
    )
        .into_response()
}

fn bad_request(state: &AppState, message: String) -> Response {
    refuse(state, StatusCode::BAD_REQUEST, message)
}

/// Answers a request that is not a review we can read, counted as `decision="invalid"`.
fn refuse(state: &AppState, status: StatusCode, message: String) -> Response {
    state
        .metrics
        .reviews
        .get_or_create(&ReviewLabels {
            decision: "invalid".into(),
            rule: "".into(),
            policy: "".into(),
            operation: "".into(),
        })
        .inc();
    tracing::warn!(error = %message, status = status.as_u16(), "refused a request that is not an AdmissionReview");
    (status, format!("{message}\n")).into_response()
}

/// The answer while no valid policy has loaded: driftgate cannot tell which writes are
/// guarded, so it decides none. Admitting would let guarded writes through unseen; refusing
/// would refuse every write the webhook sees, unguarded ones too. A 503 leaves it to the
/// webhook's failurePolicy, as if driftgate were down (Fail: refused, with this reason in the
/// API server's error; Ignore: admitted, as the operator chose). It comes as a metav1 Status,
/// whose message the API server passes on to the writer (tests/e2e/restart.rs shows it).
fn no_policy(state: &AppState, problems: &str) -> Response {
    state
        .metrics
        .reviews
        .get_or_create(&ReviewLabels {
            decision: "unavailable".into(),
            rule: "".into(),
            policy: "".into(),
            operation: "".into(),
        })
        .inc();
    tracing::warn!("answered a review 503: no valid policy loaded");
    let message = format!(
        "driftgate has no valid policy loaded, so it decides no write until its policy is fixed: {}",
        problems.replace('\n', "; ")
    );
    let status = serde_json::json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": "ServiceUnavailable",
        "code": 503,
    });
    // No Retry-After: the API server's client would wait and retry within the webhook's
    // timeout, and answer the person "context deadline exceeded" instead of the reason.
    (StatusCode::SERVICE_UNAVAILABLE, axum::Json(status)).into_response()
}

fn too_large(state: &AppState, size: &str) -> Response {
    refuse(
        state,
        StatusCode::PAYLOAD_TOO_LARGE,
        format!(
            "The request body is {size}; driftgate reads at most {MAX_BODY_BYTES} bytes (7 MiB), \
             room for a review of two objects at the API server's 3 MiB request limit, so this is \
             not a review from the API server."
        ),
    )
}

/// Refuses a body whose Content-Length is over the limit before reading a byte of it, so a
/// client announcing 50 MB costs neither the time nor the memory to receive 7 MiB of it.
/// Bodies without a length (chunked) are cut at the limit while they are read.
async fn refuse_announced_oversize(
    State(state): State<Arc<AppState>>,
    request: Request,
    next: Next,
) -> Response {
    if let Some(length) = announced_length(&request)
        && length > MAX_BODY_BYTES as u64
    {
        return too_large(&state, &format!("{length} bytes"));
    }
    next.run(request).await
}

fn announced_length(request: &Request) -> Option<u64> {
    request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok())
}

/// Reserves the request's body in the budget before it is read, and holds it until the answer
/// is made (the body, its parsed objects and the decision live that long). Over HTTP/2 a
/// stream waiting here is not read, so its flow-control window stops its sender.
async fn reserve_body_budget(
    State(state): State<Arc<AppState>>,
    request: Request,
    next: Next,
) -> Response {
    // Past refuse_announced_oversize, an announced length is within the limit.
    let bytes = announced_length(&request).map_or(MAX_BODY_BYTES, |length| length as usize);
    let budget = &state.body_budget;
    let Ok(reservation) = tokio::time::timeout(BODY_BUDGET_WAIT, budget.reserve(bytes)).await
    else {
        state.metrics.webhook_body_budget_refused.inc();
        tracing::warn!(bytes, "refused a request: the body budget stayed full");
        let message = format!(
            "driftgate is reading or reviewing as many request bodies as it holds at once ({} bytes, --max-body-bytes-in-flight), \
             and this request's {bytes} bytes found no room within {BODY_BUDGET_WAIT:?}; retry. \
             If the API server's reviews get this answer, raise --max-body-bytes-in-flight and the pod's memory limit with it.\n",
            budget.total()
        );
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::RETRY_AFTER, "1")],
            message,
        )
            .into_response();
    };
    let response = next.run(request).await;
    drop(reservation);
    response
}

async fn validate(
    State(state): State<Arc<AppState>>,
    body: std::result::Result<Bytes, BytesRejection>,
) -> Response {
    let started = Instant::now();
    if let Some(problems) = state.policy_status.unavailable() {
        return no_policy(&state, &problems);
    }
    let body = match body {
        Ok(body) => body,
        Err(BytesRejection::FailedToBufferBody(FailedToBufferBody::LengthLimitError(_))) => {
            return too_large(&state, &format!("over {MAX_BODY_BYTES} bytes"));
        }
        Err(error) => {
            return bad_request(
                &state,
                format!(
                    "The request body could not be read ({error}); send the whole AdmissionReview."
                ),
            );
        }
    };
    let policies = state.policies.load();
    // One pass over the body first; what it cannot read or judge goes the two-step way.
    let in_scope = |request: &AdmissionRequest<DynamicObject>| scope(&state, &policies, request);
    if let Some((read, namespace)) = parse_lazily(&body).and_then(|e| read_lazily(e, in_scope)) {
        // The one description of the request, for the decision, its Events and the log line.
        let facts = read.facts();
        let decision = review(&state, &policies, namespace.as_deref(), &facts).await;
        if !facts.fell_back() {
            return answer(&state, &policies, &facts, &decision, started);
        }
    }
    let envelope = match parse_envelope(&body) {
        Ok(envelope) => envelope,
        Err(error) => return bad_request(&state, error.to_string()),
    };
    let read = read_whole(envelope, |request| scope(&state, &policies, request));
    if let Some(error) = &read.unreadable {
        tracing::warn!(uid = %read.request.uid, %error, "could not read the object of a review");
    }
    let facts = RequestFacts::new(&read.request);
    let decision = judge(&state, &policies, &read, &facts).await;
    answer(&state, &policies, &facts, &decision, started)
}

/// Publishes what a decision calls for and answers the API server with it.
fn answer(
    state: &AppState,
    policies: &PolicySet,
    facts: &RequestFacts<'_>,
    decision: &Decision,
    started: Instant,
) -> Response {
    // Side effects never delay the answer: `record` only queues.
    state.events.record(facts, decision);
    remember(state, policies, facts, decision);
    let response = decision.to_response(facts.request()).into_review();
    let elapsed = started.elapsed();
    observe(state, facts, decision, elapsed);
    axum::Json(response).into_response()
}

/// What the in-memory trackers keep of one review (for gauges, refusals and reports): each is
/// fed after the decision and never delays it, and each takes an exclusive lock only for the
/// reviews that concern it (every review passes here).
fn remember(state: &AppState, policies: &PolicySet, facts: &RequestFacts<'_>, decision: &Decision) {
    let now = (state.clock)();
    if !facts.request().dry_run() && !state.ledger.is_connected() {
        state.windows.observe(decision, now);
    }
    if state.caller_authenticated {
        // Dry runs count: Flux dry-runs every object on every interval.
        state.silence.observe(policies, decision, now);
    } else {
        confirm_controller_write(state, policies, facts, decision, now);
    }
    let lingering = &state.lingering;
    let concerns = lingering
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .concerns(policies, facts, decision);
    if concerns {
        lingering
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .observe(policies, facts, decision, now);
    }
    // A refused write leaves nothing in the API server to confirm it by: only the
    // authenticated API server's reviews are reported.
    if let Some(denials) = &state.denials
        && state.caller_authenticated
        && let Some(denial) = driftgate_core::reports::denial_of(decision, now)
    {
        denials
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .note(denial);
    }
}

/// A controller's write, claimed by a review that may not come from the API server, moves its
/// last write only as the API server shows it: read back (at most every few seconds per
/// controller), the time of the controller's own managedFields entry. Dry runs and refused
/// writes leave nothing stored, so they move nothing; deletes are confirmed by
/// [`count_deletes`], which reads their object before the answer.
fn confirm_controller_write(
    state: &AppState,
    policies: &PolicySet,
    facts: &RequestFacts<'_>,
    decision: &Decision,
    now: Timestamp,
) {
    if !decision.allowed || facts.request().operation() == Operation::Delete {
        return;
    }
    let writers = driftgate_core::silence::tracked_writers(policies, decision);
    let Some(write) = AdmittedWrite::of(facts).filter(|_| !writers.is_empty()) else {
        return;
    };
    if !state.silence.should_confirm(&writers, now) {
        return;
    }
    let manager = facts.field_manager().map(str::to_owned);
    let (reader, silence) = (state.stored.clone(), state.silence.clone());
    let policies = state.policies.clone();
    tokio::spawn(async move {
        // Gone is no evidence of a create or an update: a forged review naming an object that
        // does not exist, or with another uid, reads back gone at once.
        let Some(Some(live)) = reader.read_back(&write).await else {
            return;
        };
        let Some(written_at) = manager.as_deref().and_then(|m| entry_time(&live, m)) else {
            return;
        };
        silence.observe_stored(&policies.load(), writers, written_at);
    });
}

/// When `manager` last wrote `object` itself (no subresource), as its managedFields say.
fn entry_time(object: &DynamicObject, manager: &str) -> Option<Timestamp> {
    object
        .metadata
        .managed_fields
        .as_ref()?
        .iter()
        .filter(|e| e.manager.as_deref() == Some(manager))
        .filter(|e| e.subresource.as_deref().unwrap_or("").is_empty())
        .filter_map(|e| e.time.as_ref().map(|t| t.0))
        .max()
}

/// Decides a review as read, refusing a guarded write whose objects could not be read.
async fn judge(
    state: &AppState,
    policies: &PolicySet,
    read: &ReadReview<Option<Arc<Namespace>>>,
    facts: &RequestFacts<'_>,
) -> Decision {
    if let Some(problem) = &read.unreadable {
        let input = DecisionInput {
            request: facts,
            resource: None,
            namespace: read.namespace.as_ref().map(|ns| &ns.metadata),
            parent: None,
            recent_deletes: None,
            now: (state.clock)(),
            silence: None,
        };
        return unreadable(policies, &input, &problem.to_string());
    }
    let depth = read.request.depth();
    let namespace = read.namespace.as_deref();
    if depth > SHALLOW_DEPTH {
        // The decision and the ledger walk, serialize and clone objects recursively.
        let review = review(state, policies, namespace, facts);
        return GrownStack::new(review, stack_for(depth)).await;
    }
    review(state, policies, namespace, facts).await
}

/// A future polled on a stack of at least `bytes`, grown on the heap when the thread's is
/// shorter (a tokio worker has 2 MiB).
struct GrownStack<F> {
    inner: std::pin::Pin<Box<F>>,
    bytes: usize,
}

impl<F: Future> GrownStack<F> {
    fn new(inner: F, bytes: usize) -> Self {
        GrownStack {
            inner: Box::pin(inner),
            bytes,
        }
    }
}

impl<F: Future> Future for GrownStack<F> {
    type Output = F::Output;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<F::Output> {
        let this = self.get_mut();
        let bytes = this.bytes;
        stacker::maybe_grow(bytes, bytes, || this.inner.as_mut().poll(cx))
    }
}

/// Whether a policy may guard the write, judged from the envelope alone (both ways of reading
/// a review ask here first), and the Namespace that scopes it, from the cache: the request's
/// namespace, or for a Namespace object the object itself.
fn scope(
    state: &AppState,
    policies: &PolicySet,
    request: &AdmissionRequest<DynamicObject>,
) -> (bool, Option<Arc<Namespace>>) {
    let namespace = scope_namespace(request.into()).and_then(|name| state.namespaces.get(name));
    let guarded = may_guard(policies, request, namespace.as_ref().map(|ns| &ns.metadata));
    (guarded, namespace)
}

/// The decision for one request, fetching the parent of a subresource only when a window on it
/// could change the outcome, and recording break-glass changes before they are admitted. The
/// policies and the Namespace are those its scope was judged with.
async fn review(
    state: &AppState,
    policies: &PolicySet,
    namespace: Option<&Namespace>,
    facts: &RequestFacts<'_>,
) -> Decision {
    let now = (state.clock)();
    let mut decision = decide_with_cluster(state, facts, policies, namespace, now).await;
    // A decision from facts that fell back is void: the caller decides again.
    if facts.fell_back() {
        return decision;
    }
    state
        .ledger
        .apply(facts, &mut decision, policies, now)
        .await;
    if facts.fell_back() {
        return decision;
    }
    // Every review passes here: the lock is taken for deletes only.
    if facts.request().operation() == Operation::Delete && decision.allowed {
        count_deletes(state, facts, &decision, policies, now).await;
    }
    decision
}

/// How long the read of a delete's object may hold up its answer (without client
/// authentication): well within the webhook's timeout, and an answer still comes if it fails.
const DELETE_READ_TIMEOUT: Duration = Duration::from_secs(2);

/// Counts a controller's admitted delete for `deletions.controllerLimit`, and takes it as the
/// controller's write for the silence gauge: at once when the caller is the authenticated API
/// server. Otherwise the review is a claim: the delete counts only if its object was there, as
/// the review names it, when the review was answered (the API server reviews a DELETE before
/// it deletes); it then counts while it is awaited (a burst is reviewed faster than its first
/// delete can be seen gone), for good once the API server shows it gone, and is forgotten if it
/// never goes. A forged review of an object that does not exist would otherwise read back gone
/// at once, fill the tally and stop a real prune.
async fn count_deletes(
    state: &AppState,
    facts: &RequestFacts<'_>,
    decision: &Decision,
    policies: &PolicySet,
    now: Timestamp,
) {
    let deletes = driftgate_core::deletions::counted_deletes(facts, decision, policies);
    if state.caller_authenticated {
        if !deletes.is_empty() {
            state
                .deletions
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .count_all(&deletes, now);
        }
        return;
    }
    // The read is paid only for deletes something counts: the tally, or a controller's
    // silence due for a confirmation.
    let mut writers = driftgate_core::silence::tracked_writers(policies, decision);
    if writers.is_empty() || !state.silence.should_confirm(&writers, now) {
        writers.clear();
    }
    if deletes.is_empty() && writers.is_empty() {
        return;
    }
    let (Some(write), Some(client)) = (AdmittedWrite::of(facts), state.api.clone()) else {
        return;
    };
    let stored = match driftgate_kube::kube_state::read_stored(
        client,
        &write.address,
        DELETE_READ_TIMEOUT,
    )
    .await
    {
        Ok(stored) => stored,
        Err(error) => {
            tracing::debug!(%error, object = %write.address.name, "could not read the object of a controller's delete: the delete is not counted");
            return;
        }
    };
    if !driftgate_core::deletions::existed_when_reviewed(&write, stored.as_ref()) {
        tracing::info!(object = %write.address.name, uid = %write.uid, "a delete was reviewed of an object that is not there as the review names it (forged, or deleted already): it is not counted");
        return;
    }
    // One wait per object: several reviews naming it (forged beside the API server's) count once.
    let tally = state.deletions.clone();
    let counted = !deletes.is_empty()
        && tally
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .await_gone(&write.uid, deletes, now);
    if !counted && writers.is_empty() {
        return;
    }
    let (reader, silence, policies) = (
        state.stored.clone(),
        state.silence.clone(),
        state.policies.clone(),
    );
    tokio::spawn(async move {
        let gone = matches!(reader.read_back(&write).await, Some(None));
        if counted {
            tally
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .end_wait(&write.uid, gone);
        }
        if gone && !writers.is_empty() {
            silence.observe_stored(&policies.load(), writers, Timestamp::now());
        }
    });
}

async fn decide_with_cluster(
    state: &AppState,
    facts: &RequestFacts<'_>,
    policies: &PolicySet,
    namespace: Option<&Namespace>,
    now: Timestamp,
) -> Decision {
    let request = facts.request();
    let namespace_meta = namespace.map(|ns| &ns.metadata);
    let resource = state
        .resources
        .lookup(&request.resource().group, &request.resource().resource)
        .await;
    // Copied out, so that the lock is not held while deciding.
    let recent_deletes = (request.operation() == Operation::Delete)
        .then(|| facts.scope_namespace())
        .flatten()
        .map(|namespace| {
            state
                .deletions
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .recent(namespace)
        });
    let silence = state.silence.snapshot();
    let input = DecisionInput {
        request: facts,
        resource: resource.as_ref(),
        namespace: namespace_meta,
        parent: None,
        recent_deletes: recent_deletes.as_ref(),
        now,
        silence: Some(&silence),
    };
    // What a DELETE would take with it, read only when a policy judges that.
    let cascade = match cascade_query(policies, &input) {
        Some(query) => state.cascades.read(&query).await,
        None => None,
    };
    let decision = decide_with_cascade(policies, &input, &state.ledger.guard(), cascade.as_ref());
    if !needs_parent(policies, &decision) {
        return decision;
    }
    match state.parents.lookup(facts).await {
        Parent::Found(parent) => decide_with_cascade(
            policies,
            &DecisionInput {
                parent: Some(&parent),
                ..input
            },
            &state.ledger.guard(),
            cascade.as_ref(),
        ),
        Parent::Absent => decision,
        Parent::Unreadable(error) => parent_unreadable(decision, &error),
    }
}

/// A refusal decided without the parent, whose window might have admitted the write: the
/// person is told that, and to retry, before the refusal itself (which, read alone, would tell
/// an opener under an open window to open one).
fn parent_unreadable(mut decision: Decision, error: &str) -> Decision {
    if decision.allowed {
        return decision;
    }
    let object = &decision.record.object;
    decision.message = format!(
        "driftgate could not read {} {}/{} to see whether a break-glass window on it allows this change ({error}), so the change was refused. \
         If a window is open on it, retry in a moment; if it keeps failing, driftgate cannot reach the API server. Without the window: {}",
        object.kind, object.namespace, object.name, decision.message
    );
    decision
}

/// Metrics and the one structured log line per review.
fn observe(state: &AppState, request: &RequestFacts<'_>, decision: &Decision, elapsed: Duration) {
    let record = &decision.record;
    let verdict = decision.verdict_word();
    let policy = decision
        .audit_annotations
        .get(driftgate_core::decision::AUDIT_POLICY)
        .map_or("", String::as_str);
    state
        .metrics
        .reviews
        .get_or_create(&ReviewLabels {
            decision: verdict.into(),
            rule: record.rule.as_str().into(),
            policy: match policy {
                "" => "".into(),
                named => named.to_owned().into(),
            },
            operation: request.operation_name().into(),
        })
        .inc();
    state.metrics.review_duration.observe(elapsed.as_secs_f64());
    // Request text is escaped: in the text format a newline in a username would forge a line.
    // Borrowed unless it needs escaping, and built only when the line is logged at all.
    fn text(value: &str) -> std::borrow::Cow<'_, str> {
        echo(value, MAX_NAME_CHARS)
    }
    // A level is part of a log call site, so the line is written out once per level.
    macro_rules! review_line {
        ($level:ident) => {
            tracing::$level!(
                uid = %text(request.request().uid()),
                operation = %record.operation,
                kind = %text(&record.object.kind),
                subresource = %text(&record.object.subresource),
                namespace = %text(&record.object.namespace),
                name = %text(&record.object.name),
                user = %text(&record.user),
                dry_run = record.dry_run,
                decision = verdict,
                policy,
                rule = record.rule.as_str(),
                latency_us = elapsed.as_micros() as u64,
                "review"
            )
        };
    }
    // Writes no policy guards are most of a cluster's (every write outside kube-system reaches
    // driftgate): at info they would be most of the log, and of its cost.
    if record.rule == driftgate_core::decision::Rule::OutOfScope {
        review_line!(debug);
    } else {
        review_line!(info);
    }
}
