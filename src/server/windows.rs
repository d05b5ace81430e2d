//! `driftgate_break_glass_windows_open`, from the windows recent decisions saw.
//!
//! Approximate by design until the backport ledger keeps exact records: a window that nobody
//! wrote under since this replica started is not counted.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use jiff::Timestamp;

use driftgate_core::decision::{Decision, Rule, WindowScope};
use driftgate_kube::metrics::Metrics;

pub struct WindowTracker {
    /// Window key (`namespace` or `namespace/Kind/name`) to its expiry.
    open: Mutex<HashMap<String, Timestamp>>,
    metrics: Arc<Metrics>,
}

impl WindowTracker {
    pub fn new(metrics: Arc<Metrics>) -> Self {
        WindowTracker {
            open: Mutex::new(HashMap::new()),
            metrics,
        }
    }

    /// Updates the known windows from a (non-dry-run) decision and refreshes the gauge.
    pub fn observe(&self, decision: &Decision, now: Timestamp) {
        let object = &decision.record.object;
        let object_key = format!("{}/{}/{}", object.namespace, object.kind, object.name);
        let key = |scope: WindowScope| match scope {
            WindowScope::Object => object_key.clone(),
            WindowScope::Namespace => object.namespace.clone(),
        };
        let mut changed = false;
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        for verdict in decision
            .record
            .verdicts
            .iter()
            .filter(|v| v.allowed || v.rule == Rule::ControllerHeld)
        {
            if verdict.rule == Rule::BreakGlassClosed {
                changed |= open.remove(&object_key).is_some();
                // The Namespace object's own label is its namespace-wide window.
                changed |= object.kind == "Namespace" && open.remove(&object.name).is_some();
            }
            for window in [&verdict.window, &verdict.new_window].into_iter().flatten() {
                let key = if object.kind == "Namespace" && object.group.is_empty() {
                    object.name.clone()
                } else {
                    key(window.scope)
                };
                open.insert(key, window.expires_at);
                changed = true;
            }
        }
        let before = open.len();
        open.retain(|_, expiry| *expiry > now);
        if changed || open.len() != before {
            self.metrics.break_glass_windows_open.set(open.len() as i64);
        }
    }
}
