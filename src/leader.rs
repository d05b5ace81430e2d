//! Leader election on a `coordination.k8s.io` Lease: of several replicas, only the leader writes
//! the webhook configuration (the gate's namespaceSelector; the caBundle).
//!
//! The approach is kube-lease-manager's (and client-go's): the holder renews `renewTime`; anyone
//! may take a Lease whose holder is empty or whose `renewTime + leaseDurationSeconds` has
//! passed; every write is a replace at the resourceVersion just read, so of two replicas racing
//! for it exactly one wins (the other gets 409 Conflict). kube-lease-manager itself is not used:
//! it brings rand 0.10, whose getrandom 0.4 and cpufeatures 0.3 duplicate crates already in the
//! tree, which .ci/deny.toml refuses.
//!
//! [`claim`] and [`claimed_spec`] are pure; [`Leadership::spawn`] is the loop that talks to the
//! API server and publishes "leading" on a `watch` channel.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
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

/// A whole number of seconds, at least 2 (the Lease stores seconds; renewals come every third).
fn parse_lease_duration(value: &str) -> Result<Duration, String> {
    let duration = crate::timefmt::WindowDuration::parse(value)
        .map(|d| d.as_signed().unsigned_abs())
        .map_err(|e| e.to_string())?;
    if duration < Duration::from_secs(2) || duration.subsec_nanos() != 0 {
        return Err("must be whole seconds, at least 2s, such as 15s".to_owned());
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

/// What this replica may do with the Lease as it is now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Claim {
    /// It holds the Lease: renew it.
    Renew,
    /// Nobody holds it, or its holder stopped renewing: take it.
    Acquire,
    /// `holder` holds it and renews it in time.
    Wait { holder: String },
}

/// Whether `identity` may hold the Lease whose spec is `spec`, at `now`.
pub fn claim(spec: Option<&LeaseSpec>, identity: &str, now: jiff::Timestamp) -> Claim {
    let Some(spec) = spec else {
        return Claim::Acquire;
    };
    match spec.holder_identity.as_deref() {
        None | Some("") => Claim::Acquire,
        Some(holder) if holder == identity => Claim::Renew,
        Some(holder) => {
            let renewed = spec.renew_time.as_ref().or(spec.acquire_time.as_ref());
            let seconds = i64::from(spec.lease_duration_seconds.unwrap_or(0));
            let expired = renewed.is_none_or(|MicroTime(at)| {
                at.checked_add(jiff::SignedDuration::from_secs(seconds))
                    .is_ok_and(|until| until < now)
            });
            if expired {
                Claim::Acquire
            } else {
                Claim::Wait {
                    holder: holder.to_owned(),
                }
            }
        }
    }
}

/// The spec to write for `claim` (Renew or Acquire), from the one read.
pub fn claimed_spec(
    previous: Option<&LeaseSpec>,
    identity: &str,
    now: jiff::Timestamp,
    duration: Duration,
) -> LeaseSpec {
    let previous = previous.cloned().unwrap_or_default();
    let seconds = i32::try_from(duration.as_secs().max(1)).unwrap_or(i32::MAX);
    let renewing = previous.holder_identity.as_deref() == Some(identity);
    LeaseSpec {
        holder_identity: Some(identity.to_owned()),
        lease_duration_seconds: Some(seconds),
        renew_time: Some(MicroTime(now)),
        acquire_time: if renewing {
            previous.acquire_time.or(Some(MicroTime(now)))
        } else {
            Some(MicroTime(now))
        },
        lease_transitions: Some(
            previous.lease_transitions.unwrap_or(0)
                + i32::from(!renewing && previous.holder_identity.is_some()),
        ),
        ..previous
    }
}

/// The leader election of this replica.
pub struct Leadership;

impl Leadership {
    /// Campaigns for the Lease until `shutdown`, then releases it when held. The receiver is
    /// true while this replica leads: from a successful acquire or renew until two thirds of
    /// the lease duration pass without one (before any other replica may take it over).
    pub fn spawn(
        client: kube::Client,
        settings: LeaseSettings,
        metrics: std::sync::Arc<Metrics>,
        shutdown: CancellationToken,
    ) -> (watch::Receiver<bool>, JoinHandle<()>) {
        let (leading, receiver) = watch::channel(false);
        metrics.leader.set(0);
        let api = Api::<Lease>::namespaced(client, &settings.namespace);
        let task = tokio::spawn(campaign(api, settings, leading, metrics, shutdown));
        (receiver, task)
    }

    /// For a replica that writes without an election (no Lease configured): always leading.
    /// The channel is closed at once; a closed channel keeps its last value.
    pub fn sole() -> watch::Receiver<bool> {
        watch::channel(true).1
    }
}

async fn campaign(
    api: Api<Lease>,
    settings: LeaseSettings,
    leading: watch::Sender<bool>,
    metrics: std::sync::Arc<Metrics>,
    shutdown: CancellationToken,
) {
    let renew_deadline = settings.duration * 2 / 3;
    let retry = (settings.duration / 3).max(Duration::from_millis(200));
    let mut renewed_at: Option<Instant> = None;
    loop {
        let started = Instant::now();
        match try_lead(&api, &settings).await {
            Ok(true) => renewed_at = Some(started),
            Ok(false) => renewed_at = None,
            Err(error) => {
                tracing::warn!(%error, lease = %settings.name, namespace = %settings.namespace, "reading or writing the leader Lease failed; retrying")
            }
        }
        let now_leading = renewed_at.is_some_and(|at| at.elapsed() < renew_deadline);
        publish(&leading, &metrics, &settings, now_leading);
        tokio::select! {
            () = shutdown.cancelled() => break,
            () = tokio::time::sleep(retry) => {}
        }
    }
    if *leading.borrow() {
        publish(&leading, &metrics, &settings, false);
        if let Err(error) = release(&api, &settings).await {
            tracing::warn!(%error, lease = %settings.name, "releasing the leader Lease failed; another replica takes over when it expires");
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

/// One round: whether this replica holds the Lease after it.
async fn try_lead(api: &Api<Lease>, settings: &LeaseSettings) -> Result<bool, kube::Error> {
    let now = jiff::Timestamp::now();
    let Some(mut lease) = api.get_opt(&settings.name).await? else {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(settings.name.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(claimed_spec(
                None,
                &settings.identity,
                now,
                settings.duration,
            )),
        };
        return won(api.create(&PostParams::default(), &lease).await);
    };
    if let Claim::Wait { holder } = claim(lease.spec.as_ref(), &settings.identity, now) {
        tracing::debug!(%holder, lease = %settings.name, "the leader Lease is held");
        return Ok(false);
    }
    lease.spec = Some(claimed_spec(
        lease.spec.as_ref(),
        &settings.identity,
        now,
        settings.duration,
    ));
    // At the resourceVersion just read: a replica that wrote in between wins, this one gets 409.
    won(api
        .replace(&settings.name, &PostParams::default(), &lease)
        .await)
}

/// A write that lost a race (409) is not an error: another replica leads.
fn won(result: Result<Lease, kube::Error>) -> Result<bool, kube::Error> {
    match result {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
        Err(error) => Err(error),
    }
}

/// Empties the holder, so that another replica takes over at once rather than after expiry.
async fn release(api: &Api<Lease>, settings: &LeaseSettings) -> Result<(), kube::Error> {
    let Some(mut lease) = api.get_opt(&settings.name).await? else {
        return Ok(());
    };
    let Some(spec) = lease.spec.as_mut() else {
        return Ok(());
    };
    if spec.holder_identity.as_deref() != Some(settings.identity.as_str()) {
        return Ok(());
    }
    spec.holder_identity = None;
    won(api
        .replace(&settings.name, &PostParams::default(), &lease)
        .await)
    .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> jiff::Timestamp {
        jiff::Timestamp::from_second(1_800_000_000 + seconds).unwrap()
    }

    fn held_by(holder: &str, renewed: i64, duration: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(holder.to_owned()),
            renew_time: Some(MicroTime(at(renewed))),
            acquire_time: Some(MicroTime(at(0))),
            lease_duration_seconds: Some(duration),
            lease_transitions: Some(2),
            ..LeaseSpec::default()
        }
    }

    #[test]
    fn lease_durations_are_whole_seconds_of_at_least_two() {
        assert_eq!(parse_lease_duration("15s"), Ok(Duration::from_secs(15)));
        assert_eq!(parse_lease_duration("1m"), Ok(Duration::from_secs(60)));
        for bad in ["1s", "0s", "fifteen"] {
            assert!(parse_lease_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_lease_renewed_in_time_is_its_holders() {
        let spec = held_by("pod-a", 10, 15);
        assert_eq!(claim(Some(&spec), "pod-a", at(20)), Claim::Renew);
        assert_eq!(
            claim(Some(&spec), "pod-b", at(25)),
            Claim::Wait {
                holder: "pod-a".to_owned()
            }
        );
    }

    #[test]
    fn a_missing_empty_or_expired_lease_is_anyones() {
        assert_eq!(claim(None, "pod-b", at(0)), Claim::Acquire);
        let mut released = held_by("pod-a", 10, 15);
        released.holder_identity = None;
        assert_eq!(claim(Some(&released), "pod-b", at(11)), Claim::Acquire);
        let expired = held_by("pod-a", 10, 15);
        assert_eq!(claim(Some(&expired), "pod-b", at(26)), Claim::Acquire);
        let never_renewed = LeaseSpec {
            holder_identity: Some("pod-a".to_owned()),
            ..LeaseSpec::default()
        };
        assert_eq!(claim(Some(&never_renewed), "pod-b", at(0)), Claim::Acquire);
    }

    #[test]
    fn renewing_keeps_the_acquire_time_and_taking_over_counts_a_transition() {
        let spec = held_by("pod-a", 10, 15);
        let renewed = claimed_spec(Some(&spec), "pod-a", at(20), Duration::from_secs(15));
        assert_eq!(renewed.acquire_time, Some(MicroTime(at(0))));
        assert_eq!(renewed.renew_time, Some(MicroTime(at(20))));
        assert_eq!(renewed.lease_transitions, Some(2));

        let taken = claimed_spec(Some(&spec), "pod-b", at(30), Duration::from_secs(6));
        assert_eq!(taken.holder_identity.as_deref(), Some("pod-b"));
        assert_eq!(taken.acquire_time, Some(MicroTime(at(30))));
        assert_eq!(taken.lease_duration_seconds, Some(6));
        assert_eq!(taken.lease_transitions, Some(3));

        let first = claimed_spec(None, "pod-a", at(0), Duration::from_secs(15));
        assert_eq!(first.lease_transitions, Some(0));
    }
}
