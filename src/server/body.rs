//! The limits on request bodies: the most one body may hold, and a budget of the bytes that
//! bodies hold at once.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Large enough for a review carrying two objects (old and new) at the API server's limit for
/// a request body (3 MiB; etcd stores at most 1.5 MiB by default), and its envelope.
pub const MAX_BODY_BYTES: usize = 7 * 1024 * 1024;

/// The default of `serve --max-body-bytes-in-flight`: room for three reviews at the body limit
/// beside the share kept for small ones, which keeps the memory of bodies (read, copied once,
/// parsed) well under the chart's 256 MiB limit.
pub const DEFAULT_BODY_BUDGET: usize = 32 * 1024 * 1024;

/// How long a request waits for room in the body budget before it is answered 503.
pub const BODY_BUDGET_WAIT: Duration = Duration::from_secs(1);

/// Bodies of at most this size are the API server's usual reviews; a share of the body budget
/// is kept for them, so that large bodies (a forged client's, almost complete and never
/// finished) cannot hold them up.
pub const SMALL_BODY_BYTES: usize = 64 * 1024;

/// A bound on the bytes that request bodies hold at once, across every connection and HTTP/2
/// stream: a request reserves its announced length (the body limit when it announces none)
/// before its body is read, and holds it until it is answered. A quarter of the budget is kept
/// for small bodies.
#[derive(Clone)]
pub struct BodyBudget {
    large: Arc<Semaphore>,
    small: Arc<Semaphore>,
    total: usize,
    in_flight: Gauge,
}

/// Bytes reserved under the budget, given back when dropped.
pub struct BodyReservation {
    _permit: OwnedSemaphorePermit,
    bytes: usize,
    in_flight: Gauge,
}

impl BodyBudget {
    /// `bytes` must leave room for one body at the limit beside the small share (see
    /// `serve --max-body-bytes-in-flight`); the large share is never less than that.
    pub fn new(bytes: usize, in_flight: Gauge) -> Self {
        let small = bytes / 4;
        BodyBudget {
            large: Arc::new(Semaphore::new((bytes - small).max(MAX_BODY_BYTES))),
            small: Arc::new(Semaphore::new(small.max(SMALL_BODY_BYTES))),
            total: bytes,
            in_flight,
        }
    }

    pub fn total(&self) -> usize {
        self.total
    }

    /// Waits until `bytes` (at most the body limit) fit in the budget.
    pub async fn reserve(&self, bytes: usize) -> BodyReservation {
        let share = if bytes <= SMALL_BODY_BYTES {
            &self.small
        } else {
            &self.large
        };
        let permits = u32::try_from(bytes).unwrap_or(u32::MAX);
        let permit = share
            .clone()
            .acquire_many_owned(permits)
            .await
            .expect("the body budget is never closed");
        self.in_flight.inc_by(bytes as i64);
        BodyReservation {
            _permit: permit,
            bytes,
            in_flight: self.in_flight.clone(),
        }
    }
}

impl Drop for BodyReservation {
    fn drop(&mut self) {
        self.in_flight.dec_by(self.bytes as i64);
    }
}
