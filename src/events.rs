//! Kubernetes Events for decisions: published from a bounded queue by a background task, so a
//! slow or failing API server never delays or changes a decision.
//!
//! CONTRACT (implementation pending).

use std::sync::Arc;

use kube::core::DynamicObject;
use kube::core::admission::AdmissionRequest;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::decision::Decision;
use crate::metrics::Metrics;

/// The reporting controller in every Event.
pub const REPORTING_CONTROLLER: &str = "driftgate.dev/webhook";

/// Hands Events for decisions to the background publisher. Cheap to clone.
#[derive(Clone)]
pub struct EventSink {
    _private: (),
}

impl EventSink {
    /// Starts the publisher. With `client` None, Events are written to the log instead.
    /// `instance` is the pod name (reporting instance); `capacity` bounds the queue.
    pub fn spawn(
        client: Option<kube::Client>,
        instance: String,
        capacity: usize,
        metrics: Arc<Metrics>,
        shutdown: CancellationToken,
    ) -> (EventSink, JoinHandle<()>) {
        let _ = (client, instance, capacity, metrics, shutdown);
        unimplemented!("events: pending")
    }

    /// Queues the Events a decision calls for; never blocks. Nothing for dry-run requests.
    /// A full queue drops the Event and counts `driftgate_events_dropped_total{reason="queue_full"}`.
    pub fn record(&self, request: &AdmissionRequest<DynamicObject>, decision: &Decision) {
        let _ = (request, decision);
        unimplemented!("events: pending")
    }
}
