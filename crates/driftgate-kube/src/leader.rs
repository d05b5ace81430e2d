//! Leader election on a `coordination.k8s.io` Lease: of several replicas, only the leader writes
//! the webhook configuration (the gate's namespaceSelector; the caBundle).
//!
//! The election is kube-lease-manager's (built on kube's Lease API: the holder renews before
//! `leaseDurationSeconds` runs out; anyone may take a Lease that is empty or expired; locks are
//! server-side applies, so of two replicas racing for it exactly one wins). This module only
//! turns driftgate's flags into its parameters and publishes "leading" on a `watch` channel and
//! in `driftgate_leader`.
//!
//! What a partitioned leader does: it keeps writing until it learns it lost the Lease, while its
//! successor writes too. Every write driftgate makes under the Lease is a server-side apply of
//! state computed from what both replicas read (the policies, the namespaces, the Secret), so two
//! writers for a moment write the same thing.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::api::coordination::v1::Lease;
use kube::runtime::{WatchStreamExt, watcher};
use kube_lease_manager::{LeaseCreateMode, LeaseManager, LeaseManagerBuilder};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;

/// `serve`'s flags for the leader Lease. Without `--leader-lease` this replica writes as if it
/// led (one replica, or development).
#[derive(Clone, Debug, clap::Args)]
pub struct LeaderArgs {
    /// The coordination.k8s.io Lease the replicas elect their leader with.
    #[arg(long, value_name = "NAME", requires = "leader_lease_namespace")]
    pub leader_lease: Option<String>,
    /// The Lease's namespace (the chart passes the release namespace).
    #[arg(long, value_name = "NAMESPACE", env = "POD_NAMESPACE")]
    pub leader_lease_namespace: Option<String>,
    /// How long a Lease not renewed stays its holder's: a dead leader's successor starts
    /// writing within this (and a third of it).
    #[arg(long, value_name = "DURATION", default_value = "15s", value_parser = parse_lease_duration)]
    pub leader_lease_duration: Duration,
}

impl LeaderArgs {
    /// The Lease to campaign for as `identity`, when the flags name one.
    pub fn lease_settings(&self, identity: String) -> Option<LeaseSettings> {
        Some(LeaseSettings {
            namespace: self.leader_lease_namespace.clone()?,
            name: self.leader_lease.clone()?,
            identity,
            duration: self.leader_lease_duration,
        })
    }
}

/// Why a `--leader-lease-duration` is refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum LeaseDurationError {
    #[error(transparent)]
    Unreadable(#[from] driftgate_core::timefmt::FlagDurationError),
    #[error(
        "\"{value}\" is not whole seconds of at least 2s: a Lease counts in seconds and is renewed every third of it; write e.g. 15s"
    )]
    NotWholeSeconds { value: String },
}

/// A whole number of seconds, at least 2 (the Lease stores seconds; renewals come every third).
fn parse_lease_duration(value: &str) -> Result<Duration, LeaseDurationError> {
    let duration = driftgate_core::timefmt::positive_flag_duration(value)?;
    if duration < Duration::from_secs(2) || duration.subsec_nanos() != 0 {
        return Err(LeaseDurationError::NotWholeSeconds {
            value: value.to_owned(),
        });
    }
    Ok(duration)
}

/// Which Lease, held by whom, for how long.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseSettings {
    pub namespace: String,
    pub name: String,
    /// This replica (the pod name).
    pub identity: String,
    /// How long a Lease not renewed stays its holder's; also how long a dead leader's
    /// successor waits.
    pub duration: Duration,
}

impl LeaseSettings {
    /// Renewals come `grace` before the Lease would expire: a third of its duration.
    fn grace_seconds(&self) -> u64 {
        (self.duration.as_secs() / 3).max(1)
    }
}

/// The leader election of this replica.
pub struct Leadership;

impl Leadership {
    /// Campaigns for the Lease until `shutdown`, then releases it when held. The receiver is
    /// true while this replica leads.
    pub fn spawn(
        client: kube::Client,
        settings: LeaseSettings,
        metrics: Arc<Metrics>,
        shutdown: CancellationToken,
    ) -> (watch::Receiver<bool>, JoinHandle<()>) {
        let (leading, receiver) = watch::channel(false);
        metrics.leader.set(0);
        let task = tokio::spawn(campaign(client, settings, leading, metrics, shutdown));
        (receiver, task)
    }

    /// For a replica that writes without an election (no Lease configured): always leading.
    /// The channel is closed at once; a closed channel keeps its last value.
    pub fn sole() -> watch::Receiver<bool> {
        watch::channel(true).1
    }
}

/// How long to wait before asking again for a Lease the API server would not give us.
const RETRY: Duration = Duration::from_secs(2);

async fn campaign(
    client: kube::Client,
    settings: LeaseSettings,
    leading: watch::Sender<bool>,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) {
    // kube-lease-manager's standby sleeps until the expiry it last read: a leader that releases
    // the Lease as it stops (a rolling update, `kubectl delete pod`) would be succeeded only
    // then, and usually by its own replacement pod, which reads the Lease fresh. Watching the
    // Lease, a standby that sees it released starts a new round at once (a new manager reads
    // the Lease afresh and takes it).
    let mut released = released_leases(client.clone(), &settings);
    loop {
        let Some(manager) = manager(client.clone(), &settings, &shutdown).await else {
            return;
        };
        let (mut state, elector) = manager.watch().await;
        let next = loop {
            publish(&leading, &metrics, &settings, *state.borrow_and_update());
            let standby = !*state.borrow();
            tokio::select! {
                () = shutdown.cancelled() => break Round::Stop,
                changed = state.changed() => if changed.is_err() { break Round::Stop },
                Some(()) = released.next(), if standby => break Round::Again,
            }
        };
        if next == Round::Stop {
            publish(&leading, &metrics, &settings, false);
        }
        // Closing the channel makes kube-lease-manager release the Lease (when held) and return.
        drop(state);
        match elector.await {
            Ok(Ok(_)) => {}
            Ok(Err(error)) => {
                tracing::warn!(%error, lease = %settings.name, "releasing the leader Lease failed; another replica takes over when it expires")
            }
            Err(error) => tracing::warn!(%error, "the leader election task failed"),
        }
        if next == Round::Stop {
            return;
        }
        tracing::info!(lease = %settings.name, namespace = %settings.namespace, "the leader released the Lease: campaigning for it now");
    }
}

/// What a standby does once a round of the election ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Round {
    /// Shut down (or the election task ended): release the Lease when held.
    Stop,
    /// The Lease was seen released: campaign again with a fresh read of it.
    Again,
}

/// One item each time the watched Lease is seen with no holder (released, as
/// kube-lease-manager does on shutdown). Watch failures are retried with backoff and logged.
fn released_leases(client: kube::Client, settings: &LeaseSettings) -> BoxStream<'static, ()> {
    let api: kube::Api<Lease> = kube::Api::namespaced(client, &settings.namespace);
    let by_name = watcher::Config::default().fields(&format!("metadata.name={}", settings.name));
    let lease = settings.name.clone();
    watcher(api, by_name)
        .default_backoff()
        .filter_map(move |event| {
            let released = match event {
                Ok(watcher::Event::Apply(lease) | watcher::Event::InitApply(lease)) => {
                    is_released(&lease)
                }
                Ok(_) => false,
                Err(error) => {
                    tracing::warn!(%error, %lease, "watching the leader Lease failed; a released Lease is then noticed when it would have expired");
                    false
                }
            };
            std::future::ready(released.then_some(()))
        })
        .boxed()
}

/// Whether nobody holds the Lease (kube-lease-manager clears the holder when it releases).
fn is_released(lease: &Lease) -> bool {
    lease
        .spec
        .as_ref()
        .and_then(|spec| spec.holder_identity.as_deref())
        .is_none_or(str::is_empty)
}

/// The Lease manager, once the Lease could be read or created (retried until `shutdown`).
async fn manager(
    client: kube::Client,
    settings: &LeaseSettings,
    shutdown: &CancellationToken,
) -> Option<LeaseManager> {
    loop {
        let built = LeaseManagerBuilder::new(client.clone(), &settings.name)
            .with_namespace(&settings.namespace)
            .with_identity(&settings.identity)
            .with_duration(settings.duration.as_secs())
            .with_grace(settings.grace_seconds())
            .with_field_manager(format!("driftgate-leader-{}", settings.identity))
            .with_create_mode(LeaseCreateMode::AutoCreate)
            .build()
            .await;
        match built {
            Ok(manager) => return Some(manager),
            Err(error) => {
                tracing::warn!(%error, lease = %settings.name, namespace = %settings.namespace, "reading or creating the leader Lease failed; retrying")
            }
        }
        tokio::select! {
            () = shutdown.cancelled() => return None,
            () = tokio::time::sleep(RETRY) => {}
        }
    }
}

fn publish(
    leading: &watch::Sender<bool>,
    metrics: &Metrics,
    settings: &LeaseSettings,
    now_leading: bool,
) {
    let changed =
        leading.send_if_modified(|was| std::mem::replace(was, now_leading) != now_leading);
    metrics.leader.set(i64::from(now_leading));
    if changed {
        if now_leading {
            tracing::info!(lease = %settings.name, namespace = %settings.namespace, identity = %settings.identity, "leading: this replica writes the webhook configuration");
        } else {
            tracing::info!(lease = %settings.name, namespace = %settings.namespace, identity = %settings.identity, "no longer leading: another replica writes the webhook configuration");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_durations_are_whole_seconds_of_at_least_two() {
        assert_eq!(parse_lease_duration("15s"), Ok(Duration::from_secs(15)));
        assert_eq!(parse_lease_duration("1m"), Ok(Duration::from_secs(60)));
        for bad in ["1s", "0s", "fifteen", "2.5s", "1500ms"] {
            assert!(parse_lease_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn renewals_leave_a_third_of_the_lease_and_never_none() {
        let settings = |seconds| LeaseSettings {
            namespace: "driftgate".to_owned(),
            name: "driftgate-leader".to_owned(),
            identity: "pod-a".to_owned(),
            duration: Duration::from_secs(seconds),
        };
        assert_eq!(settings(15).grace_seconds(), 5);
        assert_eq!(settings(4).grace_seconds(), 1);
        // kube-lease-manager panics unless 0 < grace < duration.
        assert_eq!(settings(2).grace_seconds(), 1);
    }

    #[test]
    fn a_lease_without_a_holder_is_released() {
        use k8s_openapi::api::coordination::v1::LeaseSpec;
        let held_by = |holder: Option<&str>| Lease {
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_owned),
                ..LeaseSpec::default()
            }),
            ..Lease::default()
        };
        assert!(is_released(&held_by(None)));
        assert!(is_released(&held_by(Some(""))));
        assert!(is_released(&Lease::default()));
        assert!(!is_released(&held_by(Some("driftgate-7d9f-abcde"))));
    }
}
