//! `driftgate_controller_last_write_timestamp_seconds`, and the last writes that refusals read:
//! the I/O edge of [`driftgate_core::silence`].
//!
//! Each replica keeps the writes it reviews in memory (read by every decision without a lock)
//! and, with a records namespace (`serve --controller-silence-namespace`), shares them through
//! the durable records of [`driftgate_core::silence::record`]: every [`record_interval`] it reads them
//! all back (every replica's writes, and those from before its start) and records the writes it
//! saw that they do not hold yet, and deletes those of controllers it knew that the policies no
//! longer configure. Without one, it knows only what it reviewed since its start.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use crate::throttle::Throttle;
use driftgate_core::decision::Decision;
use driftgate_core::policy::PolicySet;
use driftgate_core::silence::record::{
    RecordUpdate, forward, new_record, read_record, record_interval, record_name, selector,
};
use driftgate_core::silence::{ControllerKey, ControllerSilence, SilenceChanges};

pub struct SilenceTracker {
    /// Read by every decision without a lock; replaced whole by each change.
    current: ArcSwap<ControllerSilence>,
    /// Serializes writers, so that no write is lost between a copy and its store.
    writer: Mutex<()>,
    silent_after: Duration,
    metrics: Arc<Metrics>,
    /// When a write of each controller was last read back to confirm it.
    confirmed_at: Mutex<std::collections::BTreeMap<ControllerKey, Timestamp>>,
}

/// How often one controller's writes are read back, at most.
const CONFIRM_EVERY: jiff::SignedDuration = jiff::SignedDuration::from_secs(10);

impl SilenceTracker {
    pub fn new(silent_after: Duration, metrics: Arc<Metrics>) -> Self {
        SilenceTracker {
            current: ArcSwap::from_pointee(ControllerSilence::new(silent_after)),
            writer: Mutex::new(()),
            silent_after,
            metrics,
            confirmed_at: Mutex::default(),
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
        self.change(|silence| silence.observe(policies, decision, now));
    }

    /// Records that `writers` wrote at `at`, as the API server showed it (forward only).
    pub fn observe_stored(&self, policies: &PolicySet, writers: Vec<ControllerKey>, at: Timestamp) {
        self.change(|silence| silence.observe_writers(policies, writers, at));
    }

    /// Whether to read back a write of `writers` to confirm it: at most one every
    /// [`CONFIRM_EVERY`] per controller (the gauge counts in seconds, a silence in minutes), so
    /// that a controller's burst of writes is not a burst of reads.
    pub fn should_confirm(&self, writers: &[ControllerKey], now: Timestamp) -> bool {
        let mut asked = self.confirmed_at.lock().unwrap_or_else(|e| e.into_inner());
        let mut any = false;
        for key in writers {
            let due = asked
                .get(key)
                .is_none_or(|last| now.duration_since(*last) >= CONFIRM_EVERY);
            if due {
                asked.insert(key.clone(), now);
                any = true;
            }
        }
        any
    }

    /// Takes in the records' last writes (forward only), and sets the gauge.
    pub fn merge_recorded(&self, policies: &PolicySet, records: Vec<(ControllerKey, Timestamp)>) {
        self.change(|silence| silence.merge_recorded(policies, records));
    }

    /// Notes that the record of `key` is gone.
    fn mark_deleted(&self, key: &ControllerKey) {
        self.change(|silence| {
            silence.mark_deleted(key);
            SilenceChanges::default()
        });
    }

    /// Notes that the record of `key` holds `at`.
    fn mark_recorded(&self, key: &ControllerKey, at: Timestamp) {
        self.change(|silence| {
            silence.mark_recorded(key, at);
            SilenceChanges::default()
        });
    }

    fn change(&self, apply: impl FnOnce(&mut ControllerSilence) -> SilenceChanges) {
        let _writer = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        let mut next = ControllerSilence::clone(&self.current.load());
        let changes = apply(&mut next);
        self.current.store(Arc::new(next));
        for (key, at) in changes.written {
            self.metrics.set_controller_last_write(&key, at);
        }
        for key in changes.forgotten {
            self.metrics.forget_controller(&key);
        }
    }
}

/// One sync may take this long (a hung API server costs a tick, never a review).
const SYNC_TIMEOUT: Duration = Duration::from_secs(10);

/// Tries at one record before giving up until the next tick: each conflict means another
/// replica wrote it meanwhile, and its write is read back first.
const ATTEMPTS: usize = 3;

/// Reads and writes the records in one namespace for this replica.
struct Records {
    api: Api<Lease>,
    instance: String,
    policies: Arc<ArcSwap<PolicySet>>,
    tracker: Arc<SilenceTracker>,
    metrics: Arc<Metrics>,
    throttle: Throttle,
}

/// Starts the sync of `tracker` with the records in `namespace`: at once, then every
/// [`record_interval`], and a last time on `shutdown` (so that a restart keeps the latest
/// write).
pub fn spawn_records(
    client: kube::Client,
    namespace: &str,
    instance: String,
    policies: Arc<ArcSwap<PolicySet>>,
    tracker: Arc<SilenceTracker>,
    shutdown: CancellationToken,
) -> JoinHandle<()> {
    let interval = record_interval(tracker.silent_after);
    let mut records = Records {
        api: Api::namespaced(client, namespace),
        instance,
        policies,
        metrics: tracker.metrics.clone(),
        tracker,
        throttle: Throttle::default(),
    };
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => break,
                _ = ticks.tick() => records.sync().await,
            }
        }
        records.sync().await;
    })
}

impl Records {
    async fn sync(&mut self) {
        let outcome = tokio::time::timeout(SYNC_TIMEOUT, self.sync_once()).await;
        let error = match outcome {
            Ok(Ok(())) => {
                Metrics::count_result(&self.metrics.controller_silence_records, true);
                if self.throttle.success() {
                    tracing::info!(
                        "the controllers' last-write records are read and written again"
                    );
                }
                return;
            }
            Ok(Err(error)) => error.to_string(),
            Err(_) => format!("no answer within {SYNC_TIMEOUT:?}"),
        };
        Metrics::count_result(&self.metrics.controller_silence_records, false);
        if let Some(suppressed) = self.throttle.failure() {
            tracing::warn!(
                %error,
                suppressed,
                "could not read or write the controllers' last-write records (Leases); this replica's silences rest on the writes it reviews \
                 (repeated failures are logged once a minute; `suppressed` counts those not logged)"
            );
        }
    }

    /// Reads every record, then records what this replica saw that they do not hold.
    async fn sync_once(&self) -> Result<(), kube::Error> {
        let leases = self
            .api
            .list(&ListParams::default().labels(&selector()))
            .await?;
        let records = leases
            .items
            .iter()
            .filter_map(|lease| match read_record(lease) {
                Ok(record) => Some((record.key, record.last_write)),
                Err(error) => {
                    tracing::debug!(%error, "a Lease with the record label is not a record; ignored");
                    None
                }
            })
            .collect();
        let policies = self.policies.load_full();
        self.tracker.merge_recorded(&policies, records);
        for (key, at) in self.tracker.snapshot().unrecorded() {
            let held = self.write_forward(&key, at).await?;
            if held > at {
                self.tracker
                    .merge_recorded(&policies, vec![(key.clone(), held)]);
            }
            self.tracker.mark_recorded(&key, held);
        }
        for key in self.tracker.snapshot().retired() {
            match self
                .api
                .delete(&record_name(&key), &DeleteParams::default())
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(error) => return Err(error),
            }
            tracing::info!(policy = %key.policy, controller = %key.controller, "deleted the last-write record of a controller no longer configured");
            self.tracker.mark_deleted(&key);
        }
        Ok(())
    }

    /// Moves the record of `key` forward to `at`, and returns what it holds then (`at`, or a
    /// later write another replica recorded).
    async fn write_forward(
        &self,
        key: &ControllerKey,
        at: Timestamp,
    ) -> Result<Timestamp, kube::Error> {
        let name = record_name(key);
        let silent_after = self.tracker.silent_after;
        let mut last_error = None;
        for _ in 0..ATTEMPTS {
            let written = match self.api.get_opt(&name).await? {
                None => {
                    let record = new_record(key, at, silent_after, &self.instance);
                    self.api.create(&PostParams::default(), &record).await
                }
                Some(existing) => match forward(&existing, key, at, silent_after, &self.instance) {
                    RecordUpdate::Keep(held) => return Ok(held),
                    RecordUpdate::Replace(next) => {
                        self.api.replace(&name, &PostParams::default(), &next).await
                    }
                },
            };
            match written {
                Ok(_) => return Ok(at),
                // Created or replaced by another replica meanwhile: read it again.
                Err(kube::Error::Api(status)) if status.code == 409 => {
                    last_error = Some(kube::Error::Api(status));
                }
                Err(error) => return Err(error),
            }
        }
        Err(last_error.expect("a conflict ended every attempt"))
    }
}
