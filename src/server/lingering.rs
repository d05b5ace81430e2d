//! `driftgate_break_glass_labels_expired`: the I/O edge of [`driftgate_core::lingering`], whose
//! labels the effects of each review feed (`remember` in `server::effects`).

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::server::state::AppState;
use driftgate_kube::metrics::PolicyLabels;

/// Every `interval`, sets `driftgate_break_glass_labels_expired` from the labels reviews showed:
/// a label expires with time, not with a write.
pub fn spawn(
    state: Arc<AppState>,
    interval: Duration,
    shutdown: CancellationToken,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = ticks.tick() => {}
            }
            let effects = &state.effects;
            let policies = effects.policies.load();
            let counts = effects
                .lingering
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .expired(&policies, (effects.clock)());
            for (policy, count) in counts {
                effects
                    .metrics
                    .break_glass_labels_expired
                    .get_or_create(&PolicyLabels { policy })
                    .set(count);
            }
        }
    })
}
