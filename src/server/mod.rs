//! The webhook service: `POST /validate` on the TLS port, health and metrics on the admin port.
//!
//! A review passes three stages, each its own module: [`http`] (the body and its limits; its
//! `validate` is the pipeline read top to bottom), [`review`] (read → scope → decide → parent →
//! ledger) and [`effects`] (Events, metrics, the log line, the trackers). Each takes only its
//! part of the shared state ([`state`]).
//!
//! The routers hold no TLS and no sockets, so tests drive them with `tower::ServiceExt::oneshot`.

mod admin;
mod body;
pub mod client_auth;
pub mod connections;
mod effects;
mod http;
pub mod lingering;
mod polled;
mod review;
pub mod state;
pub mod tls;
pub mod windows;

pub use admin::admin_router;
pub use body::{BODY_BUDGET_WAIT, BodyBudget, DEFAULT_BODY_BUDGET, MAX_BODY_BYTES};
pub use http::router;
pub use state::{AppState, Clock, EffectsState, ReviewState, ServingState};
