//! A record's phases and the one way to move between them. Pure: a record (or its status), the
//! step and the clock come in, the status to write comes out; the service and
//! `driftgate backlog resolve` both write what these functions build.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{Value, json};

use crate::records::record::{
    BackportRequirement, BackportStatus, DryRunMatch, Phase, RecordScope, Transition,
};
use crate::timefmt::human_utc;

impl Phase {
    pub fn word(self) -> &'static str {
        match self {
            Phase::Open => "Open",
            Phase::AwaitingBackport => "AwaitingBackport",
            Phase::Backported => "Backported",
            Phase::Reverted => "Reverted",
            Phase::Resolved => "Resolved",
            Phase::Expired => "Expired",
            Phase::Resumed => "Resumed",
            Phase::Withdrawn => "Withdrawn",
        }
    }
}

impl BackportStatus {
    pub fn phase_word(&self) -> &'static str {
        self.phase.word()
    }
}

/// The record's phase, `Open` before any status was written.
pub fn phase_of(record: &BackportRequirement) -> Phase {
    record.status.as_ref().map(|s| s.phase).unwrap_or_default()
}

/// Whether the record has its first transition (a record just created has none: the API server
/// ignores the status of a create).
pub fn has_transitions(record: &BackportRequirement) -> bool {
    record
        .status
        .as_ref()
        .is_some_and(|s| !s.transitions.is_empty())
}

/// When the record last changed phase (its creation, if never).
pub fn phase_since(record: &BackportRequirement) -> Option<Timestamp> {
    record
        .status
        .as_ref()
        .and_then(|s| s.transitions.last())
        .map(|t| t.time.0)
        .or_else(|| record.metadata.creation_timestamp.as_ref().map(|t| t.0))
}

/// Since when a record has awaited the controller: since its transition to AwaitingBackport,
/// or, for an Open record whose window has ended before the expiry check noticed, since the
/// end of its window. None while the window is open or once the record is settled.
pub fn awaiting_since(record: &BackportRequirement, now: Timestamp) -> Option<Timestamp> {
    if is_suspension(record) {
        return None;
    }
    match phase_of(record) {
        Phase::AwaitingBackport => phase_since(record),
        Phase::Open => {
            let ended = record.spec.window.expires_at.0;
            (ended <= now).then_some(ended)
        }
        _ => None,
    }
}

/// Whether a record is Open with its window ended: the expiry check (or the next write that
/// meets it) moves it to AwaitingBackport.
pub fn window_ended(record: &BackportRequirement, now: Timestamp) -> bool {
    !is_suspension(record)
        && phase_of(record) == Phase::Open
        && record.spec.window.expires_at.0 <= now
}

/// Whether a record is a suspension's, which never awaits backport.
pub fn is_suspension(record: &BackportRequirement) -> bool {
    record.spec.scope == RecordScope::Suspension
}

/// Whether a suspension's record is Open past its expiry: the expiry check (or the next write
/// that meets it) moves it to Expired.
pub fn suspension_ended(record: &BackportRequirement, now: Timestamp) -> bool {
    is_suspension(record)
        && phase_of(record) == Phase::Open
        && record.spec.window.expires_at.0 <= now
}

/// Whether a record is settled: nothing more happens to it but its deletion after retention.
pub fn is_settled(phase: Phase) -> bool {
    matches!(
        phase,
        Phase::Backported | Phase::Resolved | Phase::Resumed | Phase::Withdrawn
    )
}

/// Whether a record settled (Backported, Resolved or Resumed) at least `retention` before `now`.
pub fn past_retention(record: &BackportRequirement, retention: Duration, now: Timestamp) -> bool {
    is_settled(phase_of(record))
        && phase_since(record).is_some_and(|since| {
            jiff::SignedDuration::try_from(retention)
                .ok()
                .and_then(|keep| since.checked_add(keep).ok())
                .is_some_and(|until| until <= now)
        })
}

/// A move of a record to a phase: the transition's reason and message, and for `Reverted` the
/// fields the controller undid. Built only by the constructors below, so each reason is written
/// with its own words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PhaseChange {
    pub phase: Phase,
    /// The transition's reason, one CamelCase word (`Opened`, `Expired`, …).
    pub reason: &'static str,
    pub message: String,
    pub reverted_fields: Vec<String>,
    /// For `Resumed`, who resumed the suspension.
    pub resumed_by: Option<String>,
}

impl PhaseChange {
    fn new(phase: Phase, reason: &'static str, message: String) -> PhaseChange {
        PhaseChange {
            phase,
            reason,
            message,
            reverted_fields: Vec::new(),
            resumed_by: None,
        }
    }

    /// A window driftgate saw `user` open, until `expires_at`.
    pub fn opened(user: &str, expires_at: Timestamp) -> PhaseChange {
        let message = format!("{user} opened the window until {}", human_utc(expires_at));
        PhaseChange::new(Phase::Open, "Opened", message)
    }

    /// A window opened where driftgate did not see it, met when `user` changed the object under it.
    pub fn window_found(user: &str, expires_at: Timestamp) -> PhaseChange {
        let message = format!(
            "{user} changed the object under a window (until {}) that was opened where driftgate did not see it",
            human_utc(expires_at)
        );
        PhaseChange::new(Phase::Open, "WindowFound", message)
    }

    /// `user` closed the window before its expiry.
    pub fn closed(user: &str) -> PhaseChange {
        let message = format!("{user} closed the window");
        PhaseChange::new(Phase::AwaitingBackport, "Closed", message)
    }

    /// The record's window ended.
    pub fn expired(record: &BackportRequirement) -> PhaseChange {
        let message = format!(
            "the window ended at {} with {} change(s) not yet seen in Git",
            human_utc(record.spec.window.expires_at.0),
            record.spec.changes.len()
        );
        PhaseChange::new(Phase::AwaitingBackport, "Expired", message)
    }

    /// The controller's write carried the recorded values (`message` as its Event says it).
    pub fn backported(message: String) -> PhaseChange {
        PhaseChange::new(Phase::Backported, "ControllerCarriedChange", message)
    }

    /// Two of the controller's dry runs carried the recorded values with nothing applied between
    /// them: it found nothing to apply (`message` as its Event says it).
    pub fn backported_by_dry_runs(message: String) -> PhaseChange {
        PhaseChange::new(Phase::Backported, "ControllerFoundNothingToApply", message)
    }

    /// Argo CD reported the object Synced at a revision it did not deploy, with the recorded
    /// values in place: it compared Git with them and found nothing to sync (`message` as its
    /// Event says it).
    pub fn backported_by_sync_status(message: String) -> PhaseChange {
        PhaseChange::new(Phase::Backported, "ControllerFoundNothingToSync", message)
    }

    /// The controller's write undid the recorded values of `fields`.
    pub fn reverted(fields: Vec<String>, message: String) -> PhaseChange {
        PhaseChange {
            reverted_fields: fields,
            ..PhaseChange::new(Phase::Reverted, "ControllerRevertedChange", message)
        }
    }

    /// A person resolved the record with `note`.
    pub fn resolved(note: &str) -> PhaseChange {
        PhaseChange::new(Phase::Resolved, "ResolvedByPerson", note.to_owned())
    }

    /// `user` suspended the controller (`how`: which fields or annotations) until `expires_at`.
    pub fn suspended(user: &str, how: &str, expires_at: Timestamp) -> PhaseChange {
        let message = format!(
            "{user} suspended it ({how}) until {}",
            human_utc(expires_at)
        );
        PhaseChange::new(Phase::Open, "Suspended", message)
    }

    /// `user` suspended again, until `expires_at`, a suspension that had outlived its expiry.
    pub fn suspended_again(user: &str, expires_at: Timestamp) -> PhaseChange {
        let message = format!(
            "{user} renewed the expired suspension until {}",
            human_utc(expires_at)
        );
        PhaseChange::new(Phase::Open, "Suspended", message)
    }

    /// The suspension's expiry passed with nobody resuming it.
    pub fn suspension_expired(record: &BackportRequirement) -> PhaseChange {
        let message = format!(
            "the suspension reached its expiry at {} and nobody resumed it: the controller is still not reconciling",
            human_utc(record.spec.window.expires_at.0)
        );
        PhaseChange::new(Phase::Expired, "Expired", message)
    }

    /// The write the record was created for was never stored (`message` says what the API
    /// server showed).
    pub fn withdrawn(message: String) -> PhaseChange {
        PhaseChange::new(Phase::Withdrawn, "NeverStored", message)
    }

    /// `user` resumed the suspension.
    pub fn resumed(user: &str) -> PhaseChange {
        PhaseChange {
            resumed_by: Some(user.to_owned()),
            ..PhaseChange::new(Phase::Resumed, "Resumed", format!("{user} resumed it"))
        }
    }
}

/// `status` (none before the first) after `change` at `now`: the phase, and one transition
/// added after the earlier ones.
pub fn transitioned(
    status: Option<&BackportStatus>,
    change: &PhaseChange,
    now: Timestamp,
) -> BackportStatus {
    let mut status = status.cloned().unwrap_or_default();
    status.phase = change.phase;
    status.transitions.push(Transition {
        phase: change.phase,
        time: Time(now),
        reason: change.reason.to_owned(),
        message: change.message.clone(),
    });
    if !change.reverted_fields.is_empty() {
        status.reverted_fields = change.reverted_fields.clone();
    }
    if let Some(user) = &change.resumed_by {
        status.resumed_by = Some(user.clone());
        status.resumed_at = Some(Time(now));
    }
    status
}

/// `status` with `mark` as its last matching dry run; the phase and transitions unchanged.
pub fn dry_run_matched(status: Option<&BackportStatus>, mark: &DryRunMatch) -> BackportStatus {
    let mut status = status.cloned().unwrap_or_default();
    status.dry_run_match = Some(mark.clone());
    status
}

/// `status` resolved by `resolver` at `at` with `note`: the phase, the note, who and when, and a
/// transition saying the same (the earlier transitions kept).
pub fn resolved(
    status: BackportStatus,
    note: &str,
    resolver: &str,
    at: Timestamp,
) -> BackportStatus {
    let mut status = transitioned(Some(&status), &PhaseChange::resolved(note), at);
    status.resolution_note = Some(note.to_owned());
    status.resolved_by = Some(resolver.to_owned());
    status.resolved_at = Some(Time(at));
    status
}

/// The merge patch of a record's status subresource writing `status`, conditioned on the
/// record's `resource_version`: with several writers, exactly one makes a given step.
pub fn status_patch(resource_version: Option<&str>, status: &BackportStatus) -> Value {
    json!({
        "metadata": {"resourceVersion": resource_version},
        "status": status,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::records::record::{
        BackportRequirementSpec, RecordScope, RecordedObject, RecordedWindow,
    };

    /// A record of `apps/v1 Deployment api` in `prod` whose window ends at 2026-11-30T09:00Z,
    /// with one transition to `phase` at `at`.
    pub(crate) fn record_in(phase: Phase, at: &str) -> BackportRequirement {
        let mut record = BackportRequirement::new(
            "r",
            BackportRequirementSpec {
                object: RecordedObject {
                    api_version: "apps/v1".into(),
                    kind: "Deployment".into(),
                    name: "api".into(),
                    uid: "u".into(),
                },
                scope: RecordScope::Object,
                window: RecordedWindow {
                    opener: Some("alice".into()),
                    reason: Some("INC-1".into()),
                    opened_at: None,
                    expires_at: Time("2026-11-30T09:00:00Z".parse().unwrap()),
                    label_value: "20261130T0900Z".into(),
                },
                policy: "prod".into(),
                changes: Vec::new(),
            },
        );
        record.metadata.namespace = Some("prod".into());
        record.metadata.resource_version = Some("7".into());
        record.metadata.uid = Some("record-uid".into());
        record.status = Some(BackportStatus {
            phase,
            transitions: vec![Transition {
                phase,
                time: Time(at.parse().unwrap()),
                reason: "x".into(),
                message: String::new(),
            }],
            ..BackportStatus::default()
        });
        record
    }

    #[test]
    fn retention_deletes_only_records_settled_long_enough_ago() {
        let day = Duration::from_secs(86_400);
        let now: Timestamp = "2026-12-31T10:00:00Z".parse().unwrap();
        for phase in [Phase::Backported, Phase::Resolved] {
            assert!(past_retention(
                &record_in(phase, "2026-12-30T10:00:00Z"),
                day,
                now
            ));
            assert!(!past_retention(
                &record_in(phase, "2026-12-30T10:00:01Z"),
                day,
                now
            ));
        }
        // Unsettled records are never deleted, however old.
        for phase in [Phase::Open, Phase::AwaitingBackport, Phase::Reverted] {
            assert!(!past_retention(
                &record_in(phase, "2025-01-01T00:00:00Z"),
                day,
                now
            ));
        }
    }

    #[test]
    fn a_transition_keeps_the_history_and_sets_reverted_fields_only_when_given() {
        let record = record_in(Phase::AwaitingBackport, "2026-11-30T09:00:10Z");
        let at: Timestamp = "2026-11-30T09:05:00Z".parse().unwrap();
        let reverted = transitioned(
            record.status.as_ref(),
            &PhaseChange::reverted(vec!["spec.replicas".into()], "undone".into()),
            at,
        );
        assert_eq!(reverted.phase, Phase::Reverted);
        assert_eq!(reverted.reverted_fields, ["spec.replicas"]);
        assert_eq!(
            reverted.transitions,
            [
                record.status.as_ref().unwrap().transitions[0].clone(),
                Transition {
                    phase: Phase::Reverted,
                    time: Time(at),
                    reason: "ControllerRevertedChange".into(),
                    message: "undone".into(),
                }
            ]
        );
        // A later step without fields keeps the fields that were reverted.
        let resolved = transitioned(Some(&reverted), &PhaseChange::resolved("fixed"), at);
        assert_eq!(resolved.reverted_fields, ["spec.replicas"]);
        // The first transition of a record without a status.
        let first = transitioned(None, &PhaseChange::opened("alice", at), at);
        assert_eq!(first.phase, Phase::Open);
        assert_eq!(
            first.transitions[0].message,
            "alice opened the window until 2026-11-30 09:05 UTC"
        );
    }

    #[test]
    fn a_status_patch_is_conditioned_on_the_version_read() {
        let status = BackportStatus::default();
        assert_eq!(
            status_patch(Some("41"), &status),
            json!({"metadata": {"resourceVersion": "41"}, "status": {"phase": "Open", "transitions": []}})
        );
    }

    #[test]
    fn an_open_record_past_its_window_has_ended_and_awaits_since_its_end() {
        let record = record_in(Phase::Open, "2026-11-30T08:00:00Z");
        let before: Timestamp = "2026-11-30T08:59:59Z".parse().unwrap();
        let after: Timestamp = "2026-11-30T09:00:00Z".parse().unwrap();
        assert!(!window_ended(&record, before));
        assert_eq!(awaiting_since(&record, before), None);
        assert!(window_ended(&record, after));
        assert_eq!(awaiting_since(&record, after), Some(after));
        assert!(has_transitions(&record));
        assert!(!has_transitions(&BackportRequirement {
            status: None,
            ..record.clone()
        }));
        let settled = record_in(Phase::Backported, "2026-11-30T08:00:00Z");
        assert!(!window_ended(&settled, after));
        assert_eq!(awaiting_since(&settled, after), None);
    }
}
