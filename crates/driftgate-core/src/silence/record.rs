//! The durable, shared record of each (policy, controller)'s last write: one
//! `coordination.k8s.io/v1` Lease per pair in driftgate's namespace. Pure: what a record holds,
//! how it is named, and how a write moves it (only forward in time); `server::silence` reads
//! and writes them.
//!
//! Why a Lease: it is the API's small object for "who was last seen alive, and when" --
//! `renewTime` (microseconds) is the controller's last write, `leaseDurationSeconds` how long it
//! may stay silent (`--controller-silence-after`), so the CLI reads the same threshold as the
//! server -- every cluster serves it, a namespaced Role can grant it, and nothing else acts on
//! a Lease that no component campaigns for. A ConfigMap would do, with the times as strings; a
//! CRD would need installing before driftgate could start.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use sha2::{Digest, Sha256};

use super::{ControllerKey, Silence};

/// The label every record carries, for listing them.
pub const RECORD_LABEL: &str = "driftgate.dev/record";
/// Its value.
pub const RECORD_KIND: &str = "controller-silence";
/// The policy's and controller's names, in full (annotations), and as labels when they are
/// valid label values (for `kubectl get leases -l`).
pub const POLICY_KEY: &str = "driftgate.dev/policy";
pub const CONTROLLER_KEY: &str = "driftgate.dev/controller";

/// A write is recorded at most this often by each replica, whatever the threshold.
pub const MAX_RECORD_INTERVAL: Duration = Duration::from_secs(30);

/// `kubectl get leases -l` for every record.
pub fn selector() -> String {
    format!("{RECORD_LABEL}={RECORD_KIND}")
}

/// How often a replica records its writes and reads the others': at most
/// [`MAX_RECORD_INTERVAL`], and a quarter of the threshold below two minutes, so that a
/// replica's last write reaches the record well before the silence would be said (e2e tests use
/// thresholds of seconds). Never under a second.
pub fn record_interval(silent_after: Duration) -> Duration {
    (silent_after / 4).clamp(Duration::from_secs(1), MAX_RECORD_INTERVAL)
}

/// `driftgate-silence-POLICY-CONTROLLER-HASH`: readable, at most 63 characters (a DNS label,
/// valid for any object), and distinct for distinct pairs (the hash covers both names whole).
pub fn record_name(key: &ControllerKey) -> String {
    let digest = Sha256::digest(format!("{}\0{}", key.policy, key.controller));
    let hash: String = digest[..4].iter().map(|b| format!("{b:02x}")).collect();
    let policy = slug(&key.policy, 20);
    let controller = slug(&key.controller, 12);
    format!("driftgate-silence-{policy}-{controller}-{hash}")
}

/// Lower-case alphanumerics and `-`, at most `max`, no `-` at either end; `x` when nothing is
/// left.
fn slug(name: &str, max: usize) -> String {
    let mapped: String = name
        .chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9') => c,
            _ => '-',
        })
        .take(max)
        .collect();
    let trimmed = mapped.trim_matches('-');
    if trimmed.is_empty() {
        "x".to_owned()
    } else {
        trimmed.to_owned()
    }
}

/// Whether `value` may be a label value: at most 63 of `[A-Za-z0-9._-]`, alphanumeric at both
/// ends.
fn is_label_value(value: &str) -> bool {
    let bytes = value.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
}

/// What one record says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SilenceRecord {
    pub key: ControllerKey,
    pub last_write: Timestamp,
    /// The threshold of the replica that last wrote it; None when the record has none.
    pub silent_after: Option<SignedDuration>,
}

impl SilenceRecord {
    /// The silence this record shows at `now`: past its threshold only.
    pub fn silence(&self, now: Timestamp) -> Option<Silence> {
        let silent_for = now.duration_since(self.last_write);
        (silent_for > self.silent_after?).then(|| Silence {
            controller: self.key.controller.clone(),
            last_write: self.last_write,
            silent_for,
        })
    }
}

/// Why a Lease with the record label is not a record (edited by hand, or of a future version).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("Lease {name} has no annotation {key}: it does not say whose silence it records")]
    MissingAnnotation { name: String, key: &'static str },
    #[error("Lease {name} has no spec.renewTime: it records no last write")]
    NoRenewTime { name: String },
}

/// Reads a record.
pub fn read_record(lease: &Lease) -> Result<SilenceRecord, RecordError> {
    let name = lease.metadata.name.clone().unwrap_or_default();
    let annotation = |key: &'static str| {
        lease
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(key))
            .cloned()
            .ok_or_else(|| RecordError::MissingAnnotation {
                name: name.clone(),
                key,
            })
    };
    let key = ControllerKey {
        policy: annotation(POLICY_KEY)?,
        controller: annotation(CONTROLLER_KEY)?,
    };
    let spec = lease.spec.as_ref();
    let last_write = spec
        .and_then(|s| s.renew_time.as_ref())
        .map(|t| t.0)
        .ok_or_else(|| RecordError::NoRenewTime { name: name.clone() })?;
    let silent_after = spec
        .and_then(|s| s.lease_duration_seconds)
        .filter(|s| *s > 0)
        .map(|s| SignedDuration::from_secs(i64::from(s)));
    Ok(SilenceRecord {
        key,
        last_write,
        silent_after,
    })
}

/// A new record of `key`'s write at `at`, by replica `instance`, with this replica's threshold.
pub fn new_record(
    key: &ControllerKey,
    at: Timestamp,
    silent_after: Duration,
    instance: &str,
) -> Lease {
    let mut labels = std::collections::BTreeMap::from([
        (RECORD_LABEL.to_owned(), RECORD_KIND.to_owned()),
        (
            "app.kubernetes.io/managed-by".to_owned(),
            "driftgate".to_owned(),
        ),
    ]);
    for (label, value) in [(POLICY_KEY, &key.policy), (CONTROLLER_KEY, &key.controller)] {
        if is_label_value(value) {
            labels.insert(label.to_owned(), value.clone());
        }
    }
    let annotations = std::collections::BTreeMap::from([
        (POLICY_KEY.to_owned(), key.policy.clone()),
        (CONTROLLER_KEY.to_owned(), key.controller.clone()),
    ]);
    Lease {
        metadata: ObjectMeta {
            name: Some(record_name(key)),
            labels: Some(labels),
            annotations: Some(annotations),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            // The replica that wrote it last, for whoever reads the Lease by hand.
            holder_identity: Some(instance.to_owned()),
            lease_duration_seconds: Some(duration_seconds(silent_after)),
            renew_time: Some(MicroTime(at)),
            ..LeaseSpec::default()
        }),
    }
}

/// Whole seconds, rounded up (a Lease counts in seconds; a shorter threshold would say silent
/// sooner than the server does), within an i32.
fn duration_seconds(duration: Duration) -> i32 {
    let seconds = duration.as_secs() + u64::from(duration.subsec_nanos() > 0);
    i32::try_from(seconds).unwrap_or(i32::MAX)
}

/// What a write of `at` does to an existing record.
#[derive(Clone, Debug, PartialEq)]
pub enum RecordUpdate {
    /// The record already holds this write or a later one (another replica's): keep it.
    Keep(Timestamp),
    /// Replace it with this (the same resourceVersion, so a concurrent write conflicts).
    Replace(Box<Lease>),
}

/// Moves `existing` forward to `at`, never back; a record that cannot be read is rewritten.
pub fn forward(
    existing: &Lease,
    key: &ControllerKey,
    at: Timestamp,
    silent_after: Duration,
    instance: &str,
) -> RecordUpdate {
    if let Ok(record) = read_record(existing)
        && record.key == *key
        && record.last_write >= at
    {
        return RecordUpdate::Keep(record.last_write);
    }
    let mut next = new_record(key, at, silent_after, instance);
    next.metadata.resource_version = existing.metadata.resource_version.clone();
    RecordUpdate::Replace(Box::new(next))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(policy: &str, controller: &str) -> ControllerKey {
        ControllerKey {
            policy: policy.into(),
            controller: controller.into(),
        }
    }

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    #[test]
    fn names_are_bounded_readable_and_distinct() {
        let name = record_name(&key("production", "flux"));
        assert!(
            name.starts_with("driftgate-silence-production-flux-"),
            "{name}"
        );
        assert_eq!(name.len(), "driftgate-silence-production-flux-".len() + 8);
        let long = key(&"p".repeat(300), &"Ärger Controller!".repeat(20));
        let name = record_name(&long);
        assert!(name.len() <= 63, "{name}");
        assert!(
            name.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        );
        assert_ne!(
            record_name(&key("a-b", "c")),
            record_name(&key("a", "b-c")),
            "the hash tells apart pairs the slugs join the same way"
        );
        assert_eq!(slug("--", 10), "x");
    }

    #[test]
    fn a_record_reads_back_what_was_written() {
        let flux = key("production", "flux");
        let lease = new_record(
            &flux,
            at("2026-12-01T03:00:00.123456Z"),
            Duration::from_millis(1500),
            "driftgate-0",
        );
        let labels = lease.metadata.labels.as_ref().unwrap();
        assert_eq!(labels[RECORD_LABEL], RECORD_KIND);
        assert_eq!(labels[POLICY_KEY], "production");
        assert_eq!(
            read_record(&lease),
            Ok(SilenceRecord {
                key: flux,
                last_write: at("2026-12-01T03:00:00.123456Z"),
                silent_after: Some(SignedDuration::from_secs(2)),
            })
        );
        let odd = new_record(
            &key("p", "has spaces"),
            at("2026-12-01T03:00:00Z"),
            Duration::from_secs(60),
            "i",
        );
        assert!(!odd.metadata.labels.unwrap().contains_key(CONTROLLER_KEY));
    }

    #[test]
    fn a_lease_without_the_annotations_or_a_time_is_no_record() {
        let mut lease = new_record(
            &key("p", "flux"),
            at("2026-12-01T03:00:00Z"),
            Duration::from_secs(60),
            "i",
        );
        lease.spec.as_mut().unwrap().renew_time = None;
        assert!(matches!(
            read_record(&lease),
            Err(RecordError::NoRenewTime { .. })
        ));
        lease.metadata.annotations = None;
        assert!(matches!(
            read_record(&lease),
            Err(RecordError::MissingAnnotation {
                key: POLICY_KEY,
                ..
            })
        ));
    }

    #[test]
    fn a_record_only_moves_forward() {
        let flux = key("production", "flux");
        let mut existing = new_record(
            &flux,
            at("2026-12-01T03:00:10Z"),
            Duration::from_secs(60),
            "a",
        );
        existing.metadata.resource_version = Some("42".into());
        let threshold = Duration::from_secs(60);
        assert_eq!(
            forward(&existing, &flux, at("2026-12-01T03:00:05Z"), threshold, "b"),
            RecordUpdate::Keep(at("2026-12-01T03:00:10Z"))
        );
        assert_eq!(
            forward(&existing, &flux, at("2026-12-01T03:00:10Z"), threshold, "b"),
            RecordUpdate::Keep(at("2026-12-01T03:00:10Z"))
        );
        let RecordUpdate::Replace(next) =
            forward(&existing, &flux, at("2026-12-01T03:00:20Z"), threshold, "b")
        else {
            panic!("a later write replaces the record");
        };
        assert_eq!(next.metadata.resource_version.as_deref(), Some("42"));
        assert_eq!(
            read_record(&next).unwrap().last_write,
            at("2026-12-01T03:00:20Z")
        );
        assert_eq!(next.spec.unwrap().holder_identity.as_deref(), Some("b"));
    }

    #[test]
    fn the_record_says_silent_past_its_own_threshold() {
        let record = SilenceRecord {
            key: key("production", "flux"),
            last_write: at("2026-12-01T03:00:00Z"),
            silent_after: Some(SignedDuration::from_mins(30)),
        };
        assert_eq!(record.silence(at("2026-12-01T03:30:00Z")), None);
        let silence = record.silence(at("2026-12-01T06:12:00Z")).unwrap();
        assert_eq!(
            silence.silent_for,
            SignedDuration::from_secs(3 * 3600 + 12 * 60)
        );
        let without = SilenceRecord {
            silent_after: None,
            ..record
        };
        assert_eq!(without.silence(at("2026-12-09T00:00:00Z")), None);
    }

    #[test]
    fn the_interval_is_well_under_the_threshold_and_bounded() {
        assert_eq!(
            record_interval(Duration::from_secs(30 * 60)),
            MAX_RECORD_INTERVAL
        );
        assert_eq!(
            record_interval(Duration::from_secs(6)),
            Duration::from_millis(1500)
        );
        assert_eq!(
            record_interval(Duration::from_secs(2)),
            Duration::from_secs(1)
        );
    }
}
