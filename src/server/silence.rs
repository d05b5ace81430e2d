//! `driftgate_controller_last_write_timestamp_seconds`, and the last writes that refusals read:
//! the I/O edge of [`crate::silence`].
//!
//! Per replica and from its start: a replica that has not yet seen a controller write has no
//! series for it, and its refusals say nothing about that controller.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use jiff::Timestamp;

use crate::decision::Decision;
use crate::metrics::Metrics;
use crate::policy::PolicySet;
use crate::silence::ControllerSilence;

pub struct SilenceTracker {
    /// Read by every decision without a lock; replaced whole by [`SilenceTracker::observe`].
    current: ArcSwap<ControllerSilence>,
    /// Serializes writers, so that no write is lost between a copy and its store.
    writer: Mutex<()>,
    metrics: Arc<Metrics>,
}

impl SilenceTracker {
    pub fn new(silent_after: Duration, metrics: Arc<Metrics>) -> Self {
        SilenceTracker {
            current: ArcSwap::from_pointee(ControllerSilence::new(silent_after)),
            writer: Mutex::new(()),
            metrics,
        }
    }

    /// The last writes as they are now, for a decision.
    pub fn snapshot(&self) -> Arc<ControllerSilence> {
        self.current.load_full()
    }

    /// Records the controller writes `decision` shows, and sets the gauge.
    pub fn observe(&self, policies: &PolicySet, decision: &Decision, now: Timestamp) {
        if !self.current.load().would_change(policies, decision, now) {
            return;
        }
        let _writer = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        let mut next = ControllerSilence::clone(&self.current.load());
        let changes = next.observe(policies, decision, now);
        self.current.store(Arc::new(next));
        for (key, at) in changes.written {
            self.metrics.set_controller_last_write(&key, at);
        }
        for key in changes.forgotten {
            self.metrics.forget_controller(&key);
        }
    }
}
