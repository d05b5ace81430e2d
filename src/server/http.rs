//! The HTTP stage: `POST /validate` and its limits (the body's size, the bytes bodies hold at
//! once, the request's time, closing connections while draining), and [`validate`], the one
//! request pipeline read top to bottom: http (the body) → review (read, scope, decide, parent,
//! ledger) → effects (the deletes counted before the answer; Events, metrics, the log line and
//! the trackers with it).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, FailedToBufferBody};
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderValue, StatusCode, Version, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use tower_http::timeout::TimeoutLayer;

use driftgate_kube::metrics::ReviewLabels;

use crate::server::body::{BODY_BUDGET_WAIT, MAX_BODY_BYTES};
use crate::server::effects;
use crate::server::review::{self, Decided};
use crate::server::state::{AppState, LOG_TARGET, ServingState};

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
    if http1 && !state.serving.accepting.load(Ordering::Relaxed) {
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

/// One review, stage by stage. It is read in one pass first; what that pass cannot read, or
/// whose decision fell back (a rule asked for what it could not read), is read whole and
/// decided again. Nothing before the fallback has had an effect.
async fn validate(
    State(state): State<Arc<AppState>>,
    body: std::result::Result<Bytes, BytesRejection>,
) -> Response {
    let started = Instant::now();
    // http: a policy to decide with, and the whole body within the limit.
    let body = match accepted_body(&state.serving, body) {
        Ok(body) => body,
        Err(unaccepted) => return unaccepted.answer(&state.serving),
    };
    let policies = state.review.policies.load();
    // review, in one pass.
    if let Some((read, namespace)) = review::read_one_pass(&state.review, &policies, &body) {
        // The one description of the request, for the decision, its Events and the log line.
        let facts = read.facts();
        let reviewed = review::decide(
            &state.review,
            review::OnePass,
            &policies,
            namespace.as_deref(),
            &facts,
        )
        .await;
        if let Ok(decided) = reviewed {
            return answer(&state, &policies, &facts, decided, started).await;
        }
    }
    // review, read whole.
    let read = match review::read_whole(&state.review, &policies, &body) {
        Ok(read) => read,
        Err(error) => return bad_request(&state.serving, error.to_string()),
    };
    let (facts, whole) = read.facts();
    let decided = review::decide_whole(&state.review, whole, &policies, &read, &facts).await;
    answer(&state, &policies, &facts, decided, started).await
}

/// effects: the deletes counted before the answer, then what the decision calls for.
async fn answer(
    state: &AppState,
    policies: &driftgate_core::policy::PolicySet,
    facts: &driftgate_core::request::RequestFacts<'_>,
    Decided { decision, now }: Decided,
    started: Instant,
) -> Response {
    effects::count_deletes(&state.effects, facts, &decision, policies, now).await;
    effects::answer(&state.effects, policies, facts, &decision, started)
}

/// Why the HTTP stage answers a request itself, before any review.
enum Unaccepted {
    /// No valid policy has loaded (what the reloader says is wrong).
    NoPolicy(String),
    /// The body is over [`MAX_BODY_BYTES`].
    TooLarge,
    /// The body could not be read.
    Unread(BytesRejection),
}

impl Unaccepted {
    fn answer(self, serving: &ServingState) -> Response {
        match self {
            Unaccepted::NoPolicy(problems) => no_policy(serving, &problems),
            Unaccepted::TooLarge => too_large(serving, &format!("over {MAX_BODY_BYTES} bytes")),
            Unaccepted::Unread(error) => bad_request(
                serving,
                format!(
                    "The request body could not be read ({error}); send the whole AdmissionReview."
                ),
            ),
        }
    }
}

/// The body, when a policy is loaded to decide it with and it was read whole within the limit.
fn accepted_body(
    serving: &ServingState,
    body: std::result::Result<Bytes, BytesRejection>,
) -> std::result::Result<Bytes, Unaccepted> {
    if let Some(problems) = serving.policy_status.unavailable() {
        return Err(Unaccepted::NoPolicy(problems));
    }
    body.map_err(|error| match error {
        BytesRejection::FailedToBufferBody(FailedToBufferBody::LengthLimitError(_)) => {
            Unaccepted::TooLarge
        }
        error => Unaccepted::Unread(error),
    })
}

pub(crate) fn bad_request(state: &ServingState, message: String) -> Response {
    refuse(state, StatusCode::BAD_REQUEST, message)
}

/// Answers a request that is not a review we can read, counted as `decision="invalid"`.
fn refuse(state: &ServingState, status: StatusCode, message: String) -> Response {
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
    tracing::warn!(target: LOG_TARGET, error = %message, status = status.as_u16(), "refused a request that is not an AdmissionReview");
    (status, format!("{message}\n")).into_response()
}

/// The answer while no valid policy has loaded: driftgate cannot tell which writes are
/// guarded, so it decides none. Admitting would let guarded writes through unseen; refusing
/// would refuse every write the webhook sees, unguarded ones too. A 503 leaves it to the
/// webhook's failurePolicy, as if driftgate were down (Fail: refused, with this reason in the
/// API server's error; Ignore: admitted, as the operator chose). It comes as a metav1 Status,
/// whose message the API server passes on to the writer (tests/e2e/restart.rs shows it).
fn no_policy(state: &ServingState, problems: &str) -> Response {
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
    tracing::warn!(target: LOG_TARGET, "answered a review 503: no valid policy loaded");
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

fn too_large(state: &ServingState, size: &str) -> Response {
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
        return too_large(&state.serving, &format!("{length} bytes"));
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
    let serving = &state.serving;
    let budget = &serving.body_budget;
    let Ok(reservation) = tokio::time::timeout(BODY_BUDGET_WAIT, budget.reserve(bytes)).await
    else {
        serving.metrics.webhook_body_budget_refused.inc();
        tracing::warn!(target: LOG_TARGET, bytes, "refused a request: the body budget stayed full");
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
