//! What driftgate reads from the cluster: Namespace labels (a reflector) and, for a `scale`
//! request, the parent object (one GET, only when a decision needs its window).
//!
//! CONTRACT (implementation pending).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::core::DynamicObject;
use kube::core::admission::AdmissionRequest;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;

/// Namespace objects kept current by a list/watch. Cheap to clone.
#[derive(Clone)]
pub struct NamespaceCache {
    _private: (),
}

impl NamespaceCache {
    /// Starts the reflector. Not ready until the first list has synced; if the watch fails and
    /// cannot resume, the cache is no longer trusted (`get` returns None) until it resyncs.
    pub fn spawn(
        client: kube::Client,
        metrics: Arc<Metrics>,
        shutdown: CancellationToken,
    ) -> (NamespaceCache, JoinHandle<()>) {
        let _ = (client, metrics, shutdown);
        unimplemented!("kube_state: pending")
    }

    /// A cache for running without a cluster: ready, and never knows any namespace.
    pub fn disabled() -> NamespaceCache {
        unimplemented!("kube_state: pending")
    }

    pub fn is_ready(&self) -> bool {
        unimplemented!("kube_state: pending")
    }

    /// The Namespace, when the cache is synced and trusted; None otherwise (fail closed).
    pub fn get(&self, name: &str) -> Option<Arc<Namespace>> {
        let _ = name;
        unimplemented!("kube_state: pending")
    }
}

/// GETs the parent of a subresource request through the request's own resource
/// (group/version/plural), so no discovery round trip is needed.
#[derive(Clone)]
pub struct ParentLookup {
    _private: (),
}

impl ParentLookup {
    /// With `client` None, every lookup returns None.
    pub fn new(client: Option<kube::Client>, timeout: Duration, metrics: Arc<Metrics>) -> Self {
        let _ = (client, timeout, metrics);
        unimplemented!("kube_state: pending")
    }

    /// The parent object as stored, or None (no client, not found, error, timeout): then no
    /// object window applies. Counts `driftgate_parent_lookups_total{result}`.
    pub async fn fetch(&self, request: &AdmissionRequest<DynamicObject>) -> Option<DynamicObject> {
        let _ = request;
        unimplemented!("kube_state: pending")
    }
}
