//! The admin port: `GET /healthz`, `GET /readyz` (whether every part of the state is ready to
//! decide) and `GET /metrics`.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::server::state::AppState;

/// `GET /healthz`, `GET /readyz`, `GET /metrics` on the plain-HTTP admin port.
pub fn admin_router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(state)
}

async fn readyz(State(state): State<Arc<AppState>>) -> Response {
    let serving = &state.serving;
    if !serving.accepting.load(Ordering::Relaxed) {
        return (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n").into_response();
    }
    if let Some(problems) = serving.policy_status.unavailable() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("no valid policy loaded, so no review can be decided:\n{problems}\n"),
        )
            .into_response();
    }
    if !state.review.namespaces.has_synced() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "namespace cache not synced with the API server yet\n",
        )
            .into_response();
    }
    if let Some(reason) = serving.gatepolicies.as_ref().and_then(|g| g.not_listed()) {
        return (StatusCode::SERVICE_UNAVAILABLE, format!("{reason}\n")).into_response();
    }
    if !state.review.ledger.is_ready() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "backport records not synced with the API server yet\n",
        )
            .into_response();
    }
    // A failed reload keeps serving the last good policy, so it does not make the pod unready;
    // the body says so (and the driftgate_policy_valid gauge, whose alert stays while it does).
    let count = state.review.policies.load().policies().len();
    // A refused GatePolicy is refused for its own namespaces only; the pod serves the rest.
    let refused_objects = match serving.gatepolicies.as_ref().and_then(|g| g.problems()) {
        Some(problems) => format!(
            "refused GatePolicy objects (each keeps its last good generation, if any):\n{problems}\n"
        ),
        None => String::new(),
    };
    match serving.policy_status.problems() {
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
        state.serving.metrics.encode(),
    )
        .into_response()
}
