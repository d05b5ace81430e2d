//! Kubernetes Events for decisions, published: [`EventSink`] queues the Events that
//! `driftgate_core::events` plans, and a background task publishes them through kube-runtime's
//! [`Recorder`], which turns repeats of an identical Event into an Event series (one object with
//! a count) instead of a flood. A slow or failing API server never delays or changes a decision.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use driftgate_core::decision::Decision;
use driftgate_core::events::{EventType, PlannedEvent, REPORTING_CONTROLLER, planned_events};
use driftgate_core::request::RequestFacts;
use kube::runtime::events::{self, Event, Recorder, Reporter};
use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TrySendError;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::metrics::{Metrics, ReasonLabels};
use crate::throttle::Throttle;

/// One Event publish may take this long; a hung API server then costs the queue this much per
/// Event rather than stopping it.
const PUBLISH_TIMEOUT: Duration = Duration::from_secs(5);

/// On shutdown, what is already queued may be published for this long.
const DRAIN_GRACE: Duration = Duration::from_secs(5);

/// kube-runtime's Recorder forgets an Event series 6 minutes after its last occurrence
/// (`CACHE_TTL` in kube-runtime's events.rs); a Recorder idle that long holds nothing worth
/// keeping.
const RECORDER_IDLE: Duration = Duration::from_secs(6 * 60);

/// At most this many Recorders (one per distinct note) are kept; beyond it the least recently
/// used is dropped, which at worst starts a new Event where a series would have continued.
const MAX_RECORDERS: usize = 512;

/// The Event as kube-runtime's Recorder publishes it.
pub fn recorder_event(planned: &PlannedEvent) -> Event {
    Event {
        type_: match planned.type_ {
            EventType::Normal => events::EventType::Normal,
            EventType::Warning => events::EventType::Warning,
        },
        reason: planned.reason.as_str().to_owned(),
        note: Some(planned.note.clone()),
        action: planned.action.to_owned(),
        secondary: None,
    }
}

/// Hands Events for decisions to the background publisher. Cheap to clone.
#[derive(Clone)]
pub struct EventSink {
    queue: mpsc::Sender<PlannedEvent>,
    metrics: Arc<Metrics>,
}

impl EventSink {
    /// Starts the publisher. With `client` None, Events are written to the log instead.
    /// `instance` is the pod name (reporting instance); `capacity` bounds the queue (at least 1).
    ///
    /// Must be called inside a Tokio runtime. The task stops on `shutdown` after publishing what
    /// is already queued, for at most a few seconds.
    pub fn spawn(
        client: Option<kube::Client>,
        instance: String,
        capacity: usize,
        metrics: Arc<Metrics>,
        shutdown: CancellationToken,
    ) -> (EventSink, JoinHandle<()>) {
        let (queue, receiver) = mpsc::channel(capacity.max(1));
        let publisher = match client {
            Some(client) => Publisher::Api(Box::new(ApiPublisher {
                client,
                reporter: Reporter {
                    controller: REPORTING_CONTROLLER.to_owned(),
                    instance: Some(instance),
                },
                recorders: HashMap::new(),
                throttle: Throttle::default(),
                metrics: metrics.clone(),
            })),
            None => Publisher::Log,
        };
        let task = tokio::spawn(run(receiver, publisher, metrics.clone(), shutdown));
        (EventSink { queue, metrics }, task)
    }

    /// Queues the Events a decision calls for; never blocks. Nothing for dry-run requests.
    /// A full queue drops the Event and counts `driftgate_events_dropped_total{reason="queue_full"}`;
    /// after shutdown, `{reason="shutdown"}`.
    pub fn record(&self, request: &RequestFacts<'_>, decision: &Decision) {
        for event in planned_events(request, decision) {
            self.publish(event);
        }
    }

    /// Queues one Event (the ledger's transitions); never blocks, drops and counts when full.
    pub fn publish(&self, event: PlannedEvent) {
        match self.queue.try_send(event) {
            Ok(()) => {}
            Err(TrySendError::Full(event)) => {
                tracing::debug!(reason = %event.reason, "Event queue full; Event dropped");
                count_dropped(&self.metrics, "queue_full");
            }
            Err(TrySendError::Closed(_)) => count_dropped(&self.metrics, "shutdown"),
        }
    }
}

fn count_dropped(metrics: &Metrics, why: &str) {
    metrics
        .events_dropped
        .get_or_create(&ReasonLabels {
            reason: why.to_owned(),
        })
        .inc();
}

async fn run(
    mut receiver: mpsc::Receiver<PlannedEvent>,
    mut publisher: Publisher,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) {
    loop {
        let event = tokio::select! {
            biased;
            () = shutdown.cancelled() => break,
            event = receiver.recv() => match event {
                Some(event) => event,
                // Every sink is gone: nothing more can arrive.
                None => return,
            },
        };
        publisher.publish(event).await;
    }
    // Events queued before shutdown describe writes that happened; publish them if the API
    // server answers quickly, and count the rest.
    receiver.close();
    let drained = tokio::time::timeout(DRAIN_GRACE, async {
        while let Some(event) = receiver.recv().await {
            publisher.publish(event).await;
        }
    })
    .await;
    if drained.is_err() {
        while receiver.try_recv().is_ok() {
            count_dropped(&metrics, "shutdown");
        }
    }
}

enum Publisher {
    Api(Box<ApiPublisher>),
    /// No cluster: Events go to the log, and nothing is counted as published.
    Log,
}

impl Publisher {
    async fn publish(&mut self, event: PlannedEvent) {
        match self {
            Publisher::Api(api) => api.publish(event).await,
            Publisher::Log => {
                let regarding = &event.regarding;
                tracing::info!(
                    reason = event.reason.as_str(),
                    event_type = ?event.type_,
                    action = event.action,
                    note = %event.note,
                    regarding.api_version = regarding.api_version.as_deref().unwrap_or(""),
                    regarding.kind = regarding.kind.as_deref().unwrap_or(""),
                    regarding.namespace = regarding.namespace.as_deref().unwrap_or(""),
                    regarding.name = regarding.name.as_deref().unwrap_or(""),
                    regarding.uid = regarding.uid.as_deref().unwrap_or(""),
                    "Kubernetes Event (no cluster connection: logged, not published)"
                );
            }
        }
    }
}

/// Publishes through kube-runtime's Recorder.
///
/// The Recorder keys its series cache by type, reason, action, reporter and regarding object,
/// but NOT by note (see `EventKey` in kube-runtime 5's events.rs): with one Recorder, carol's
/// denial would be counted into the series of bob's earlier denial of the same object and shown
/// with bob's note, and a second change under a window would be shown with the first change's
/// fields. So there is one Recorder per distinct note: identical Events still aggregate into a
/// series, and different ones stay apart.
struct ApiPublisher {
    client: kube::Client,
    reporter: Reporter,
    recorders: HashMap<String, (Recorder, Instant)>,
    throttle: Throttle,
    metrics: Arc<Metrics>,
}

impl ApiPublisher {
    async fn publish(&mut self, planned: PlannedEvent) {
        let recorder = self.recorder_for(&planned.note);
        let event = recorder_event(&planned);
        let outcome = tokio::time::timeout(
            PUBLISH_TIMEOUT,
            recorder.publish(&event, &planned.regarding),
        )
        .await;
        let error = match outcome {
            Ok(Ok(())) => {
                self.metrics
                    .events_published
                    .get_or_create(&ReasonLabels {
                        reason: planned.reason.as_str().to_owned(),
                    })
                    .inc();
                if self.throttle.success() {
                    tracing::info!("Kubernetes Events are being published again");
                }
                return;
            }
            Ok(Err(error)) => error.to_string(),
            Err(_) => format!("no answer within {PUBLISH_TIMEOUT:?}"),
        };
        count_dropped(&self.metrics, "api_error");
        // The Recorder may remember an Event the API server never stored (or has since deleted),
        // and would keep PATCHing it; a fresh Recorder starts over with a create.
        self.recorders.remove(&planned.note);
        match self.throttle.failure() {
            Some(suppressed) => tracing::warn!(
                %error,
                reason = planned.reason.as_str(),
                suppressed,
                "could not publish a Kubernetes Event; it is dropped \
                 (repeated failures are logged once a minute; `suppressed` counts those not logged)"
            ),
            None => tracing::debug!(%error, reason = planned.reason.as_str(), "Event dropped"),
        }
    }

    fn recorder_for(&mut self, note: &str) -> Recorder {
        let now = Instant::now();
        self.recorders
            .retain(|_, (_, used)| now.duration_since(*used) < RECORDER_IDLE);
        if !self.recorders.contains_key(note) && self.recorders.len() >= MAX_RECORDERS {
            let oldest = self
                .recorders
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(key, _)| key.clone());
            if let Some(oldest) = oldest {
                self.recorders.remove(&oldest);
            }
        }
        let (recorder, used) = self.recorders.entry(note.to_owned()).or_insert_with(|| {
            (
                Recorder::new(self.client.clone(), self.reporter.clone()),
                now,
            )
        });
        *used = now;
        recorder.clone()
    }
}
