//! The review stage: a body read (in one pass, or whole), its scope judged from the envelope,
//! the decision with what the cluster adds (the resource from discovery, the recent deletes,
//! the cascade, the parent of a subresource), then the ledger's answer applied. How the review
//! was read ([`Reading`]) is decided once, by the reader; every step after the decision asks
//! it, not the facts, whether the decision still stands.

use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Namespace;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, Operation};

use driftgate_core::decision::{
    Decision, DecisionInput, cascade_query, decide_with_cascade, may_guard, needs_parent,
    unreadable,
};
use driftgate_core::policy::PolicySet;
use driftgate_core::reading::{LazyRead, ReadReview, read_lazily};
pub use driftgate_core::reading::{OnePass, Reading, Whole};
use driftgate_core::request::{RequestFacts, scope_namespace};
use driftgate_core::review::lazy::parse_lazily;
use driftgate_core::review::{ReviewError, SHALLOW_DEPTH, parse_envelope, stack_for};
use driftgate_kube::kube_state::Parent;

use crate::server::state::{LOG_TARGET, ReviewState};

/// The Namespace a review's scope was judged with, from the cache.
pub type ScopeNamespace = Option<Arc<Namespace>>;

/// A decision that stands, and the time it was made at.
pub struct Decided {
    pub decision: Decision,
    pub now: Timestamp,
}

/// The review read in one pass, and the Namespace that scoped it; None when an object's head
/// is not readable, for [`read_whole`] to say why.
pub fn read_one_pass<'b>(
    state: &ReviewState,
    policies: &PolicySet,
    body: &'b [u8],
) -> Option<(LazyRead<'b>, ScopeNamespace)> {
    let in_scope = |request: &AdmissionRequest<DynamicObject>| scope(state, policies, request);
    parse_lazily(body).and_then(|envelope| read_lazily(envelope, in_scope))
}

/// The review read whole, with any depth; an error when the body is not an AdmissionReview.
pub fn read_whole(
    state: &ReviewState,
    policies: &PolicySet,
    body: &[u8],
) -> Result<ReadReview<ScopeNamespace>, ReviewError> {
    let envelope = parse_envelope(body)?;
    let read =
        driftgate_core::reading::read_whole(envelope, |request| scope(state, policies, request));
    if let Some(error) = &read.unreadable {
        tracing::warn!(target: LOG_TARGET, uid = %read.request.uid, %error, "could not read the object of a review");
    }
    Ok(read)
}

/// Whether a policy may guard the write, judged from the envelope alone (both ways of reading
/// a review ask here first), and the Namespace that scopes it, from the cache: the request's
/// namespace, or for a Namespace object the object itself.
fn scope(
    state: &ReviewState,
    policies: &PolicySet,
    request: &AdmissionRequest<DynamicObject>,
) -> (bool, ScopeNamespace) {
    let namespace = scope_namespace(request.into()).and_then(|name| state.namespaces.get(name));
    let guarded = may_guard(policies, request, namespace.as_ref().map(|ns| &ns.metadata));
    (guarded, namespace)
}

/// Decides a review read whole, refusing a guarded write whose objects could not be read.
pub async fn decide_whole(
    state: &ReviewState,
    whole: Whole,
    policies: &PolicySet,
    read: &ReadReview<ScopeNamespace>,
    facts: &RequestFacts<'_>,
) -> Decided {
    if let Some(problem) = &read.unreadable {
        let now = (state.clock)();
        let input = DecisionInput {
            request: facts,
            resource: None,
            namespace: read.namespace.as_ref().map(|ns| &ns.metadata),
            parent: None,
            recent_deletes: None,
            now,
            silence: None,
        };
        let decision = unreadable(policies, &input, &problem.to_string());
        return Decided { decision, now };
    }
    let depth = read.request.depth();
    let namespace = read.namespace.as_deref();
    let decided = if depth > SHALLOW_DEPTH {
        // The decision and the ledger walk, serialize and clone objects recursively.
        let review = decide(state, whole, policies, namespace, facts);
        GrownStack::new(review, stack_for(depth)).await
    } else {
        decide(state, whole, policies, namespace, facts).await
    };
    // Read whole, a review never falls back.
    let Ok(decided) = decided;
    decided
}

/// The decision for one request, fetching the parent of a subresource only when a window on it
/// could change the outcome, with the ledger's answer (a break-glass change recorded before it
/// is admitted, a controller's write judged against records awaiting backport) applied. The
/// policies and the Namespace are those its scope was judged with. Read in one pass, the
/// decision may fall back, and is then void: the caller reads the review whole.
pub async fn decide<R: Reading>(
    state: &ReviewState,
    reading: R,
    policies: &PolicySet,
    namespace: Option<&Namespace>,
    facts: &RequestFacts<'_>,
) -> Result<Decided, R::Fallback> {
    let now = (state.clock)();
    let mut decision = decide_with_cluster(state, facts, policies, namespace, now).await;
    reading.stands(facts)?;
    state
        .ledger
        .judge(reading, facts, &decision, policies, now)
        .await?
        .apply_to(&mut decision);
    Ok(Decided { decision, now })
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

/// The policies' decision with what the cluster adds: the resource from discovery, the
/// recent deletes, the cascade of a DELETE, and the parent of a subresource when its window
/// could change the outcome.
async fn decide_with_cluster(
    state: &ReviewState,
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
        silence: Some(&*silence),
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
