//! The ledger's upkeep, planned purely from the records and the clock: windows that ended move
//! to AwaitingBackport (with their Event), settled records past retention are deleted, and the
//! gauges are counted. The service's upkeep task applies these plans.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Namespace;
use kube_core::ResourceExt;

use crate::events::{EventReason, PlannedEvent};
use crate::policy::{NamespaceLabels, PolicySet};
use crate::records::phase::{
    PhaseChange, awaiting_since, is_suspension, past_retention, phase_of, suspension_ended,
    window_ended,
};
use crate::records::record::{BackportRequirement, Phase, pull_request_of};
use crate::timefmt::human_utc;

static NO_LABELS: BTreeMap<String, String> = BTreeMap::new();

/// Whether a record in `namespace` is this driftgate's to look after (expire, delete, count):
/// records are watched in every namespace, but another installation's records are its own
/// business. `known` is the Namespace as cached, None when the cache does not know it.
pub fn is_managed(policies: &PolicySet, namespace: &str, known: Option<&Namespace>) -> bool {
    let labels = match known.map(|ns| &ns.metadata.labels) {
        Some(Some(labels)) => NamespaceLabels::Known(labels),
        Some(None) => NamespaceLabels::Known(&NO_LABELS),
        None => NamespaceLabels::Unknown,
    };
    policies
        .policies()
        .iter()
        .filter(|p| p.break_glass.is_some())
        .any(|p| p.namespace_scope(namespace, labels).judged())
}

/// An Open record whose window ended: its move to AwaitingBackport, and the BreakGlassExpired
/// Event published by whichever replica makes the move.
#[derive(Clone, Debug, PartialEq)]
pub struct Expiry<'a> {
    pub record: &'a BackportRequirement,
    pub change: PhaseChange,
    pub event: PlannedEvent,
}

/// The expiry of `record`'s window (whether it ended is for the caller to say).
pub fn expiry_of(record: &BackportRequirement) -> Expiry<'_> {
    let window = &record.spec.window;
    let note = format!(
        "The break-glass window opened by {} (reason \"{}\") expired at {}; {} change(s) made in it must be backported to Git, or the controller will revert them. Record {}.",
        window.opener_words(),
        window.reason_words(),
        human_utc(window.expires_at.0),
        record.spec.changes.len(),
        record.name_any(),
    );
    Expiry {
        record,
        change: PhaseChange::expired(record),
        event: PlannedEvent::new(
            EventReason::BreakGlassExpired,
            note,
            crate::records::record::regarding(record),
        ),
    }
}

/// The windows among `records` that ended by `now` and are still Open, and the suspensions
/// past their expiry still Open.
pub fn plan_expiry(records: &[Arc<BackportRequirement>], now: Timestamp) -> Vec<Expiry<'_>> {
    records
        .iter()
        .filter_map(|r| {
            if window_ended(r, now) {
                Some(expiry_of(r))
            } else if suspension_ended(r, now) {
                Some(suspension_expiry_of(r))
            } else {
                None
            }
        })
        .collect()
}

/// The move of a suspension past its expiry to Expired, and its SuspensionExpired Event.
pub fn suspension_expiry_of(record: &BackportRequirement) -> Expiry<'_> {
    let window = &record.spec.window;
    let object = &record.spec.object;
    let namespace = record.metadata.namespace.clone().unwrap_or_default();
    let note = format!(
        "The suspension of {} {namespace}/{} by {} (reason \"{}\") expired at {} and nobody resumed it: Git is not in charge until it is resumed (driftgate resume {}/{} -n {namespace}). Record {}.",
        object.kind,
        object.name,
        window.opener_words(),
        window.reason_words(),
        human_utc(window.expires_at.0),
        object.kind.to_lowercase(),
        object.name,
        record.name_any(),
    );
    Expiry {
        record,
        change: PhaseChange::suspension_expired(record),
        event: PlannedEvent::new(
            EventReason::SuspensionExpired,
            note,
            crate::records::record::regarding(record),
        ),
    }
}

/// A settled record to delete, conditioned on the uid and version looked at: a record changed
/// meanwhile is looked at again at the next check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Deletion {
    pub namespace: String,
    pub name: String,
    pub uid: Option<String>,
    pub resource_version: Option<String>,
    pub phase: Phase,
}

/// The records among `records` settled (Backported or Resolved) at least `retention` before `now`.
pub fn plan_retention(
    records: &[Arc<BackportRequirement>],
    retention: Duration,
    now: Timestamp,
) -> Vec<Deletion> {
    records
        .iter()
        .filter(|r| past_retention(r, retention, now))
        .map(|r| Deletion {
            namespace: r.metadata.namespace.clone().unwrap_or_default(),
            name: r.name_any(),
            uid: r.metadata.uid.clone(),
            resource_version: r.metadata.resource_version.clone(),
            phase: phase_of(r),
        })
        .collect()
}

/// What the gauges derived from records say.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RecordGauges {
    /// Records whose window is open now.
    pub windows_open: usize,
    /// Records awaiting backport: AwaitingBackport, or Open with their window ended (the
    /// expiry check has not moved them yet, e.g. when the window ended while driftgate was down).
    pub pending: usize,
    /// The age of the oldest pending record, since it began awaiting; 0 without one.
    pub oldest_pending_seconds: f64,
    /// The same among pending records no pull request is linked to (the alert that asks for one),
    /// and among those one is linked to (the alert that it is taking too long).
    pub oldest_unlinked_seconds: f64,
    pub oldest_linked_seconds: f64,
}

/// The gauges from the records alone: nothing kept in memory, so a restart changes nothing.
pub fn record_gauges(records: &[Arc<BackportRequirement>], now: Timestamp) -> RecordGauges {
    // Suspensions have gauges of their own (driftgate_suspensions), from the objects.
    let windows_open = records
        .iter()
        .filter(|r| !is_suspension(r))
        .filter(|r| phase_of(r) == Phase::Open && r.spec.window.expires_at.0 > now)
        .count();
    let pending: Vec<_> = records
        .iter()
        .filter(|r| match phase_of(r) {
            Phase::AwaitingBackport => true,
            Phase::Open => window_ended(r, now),
            _ => false,
        })
        .collect();
    let linked = |r: &&&Arc<BackportRequirement>| pull_request_of(r).is_some();
    RecordGauges {
        windows_open,
        pending: pending.len(),
        oldest_pending_seconds: oldest_awaiting(pending.iter(), now),
        oldest_unlinked_seconds: oldest_awaiting(pending.iter().filter(|r| !linked(r)), now),
        oldest_linked_seconds: oldest_awaiting(pending.iter().filter(linked), now),
    }
}

/// How long the longest-waiting of `records` has awaited backport, in seconds; 0 for none.
fn oldest_awaiting<'r>(
    records: impl Iterator<Item = &'r &'r Arc<BackportRequirement>>,
    now: Timestamp,
) -> f64 {
    records
        .filter_map(|r| awaiting_since(r, now))
        .map(|since| (now - since).get_seconds() as f64)
        .fold(0.0, f64::max)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::phase::tests::record_in;

    fn named(name: &str, phase: Phase, at: &str) -> Arc<BackportRequirement> {
        let mut record = record_in(phase, at);
        record.metadata.name = Some(name.into());
        Arc::new(record)
    }

    #[test]
    fn records_are_managed_where_a_policy_with_break_glass_rules_guards_the_namespace() {
        let policies = crate::ledger::plan::tests::policies();
        assert!(is_managed(&policies, "prod-payments", None));
        assert!(!is_managed(&policies, "team-a", None));
        let without_windows = PolicySet::from_yaml(
            "inline",
            "apiVersion: driftgate.dev/v1alpha1\nkind: GatePolicy\nmetadata: {name: p}\nspec:\n  namespaces: {include: [\"prod-*\"]}\n",
        )
        .unwrap();
        assert!(!is_managed(&without_windows, "prod-payments", None));
        // Suspensions' records are where the GitOps objects are.
        let with_suspensions = PolicySet::from_yaml(
            "inline",
            "apiVersion: driftgate.dev/v1alpha1\nkind: GatePolicy\nmetadata: {name: p}\nspec:\n  namespaces: {include: [\"prod-*\"]}\n  breakGlass: {maxDuration: 4h, openers: {groups: [sre]}}\n  suspensions: {namespaces: [gitops]}\n",
        )
        .unwrap();
        assert!(is_managed(&with_suspensions, "gitops", None));
        assert!(!is_managed(&policies, "gitops", None));
    }

    #[test]
    fn gauges_come_from_the_records_alone() {
        // record_in() records' windows end at 2026-11-30T09:00:00Z.
        let records = [
            named("r", Phase::Open, "2026-11-30T08:50:00Z"),
            named("r", Phase::AwaitingBackport, "2026-11-29T09:00:00Z"),
            named("r", Phase::Backported, "2026-11-29T09:00:00Z"),
            named("r", Phase::Resolved, "2026-11-29T09:00:00Z"),
        ];
        let before_end: Timestamp = "2026-11-30T08:59:00Z".parse().unwrap();
        assert_eq!(
            record_gauges(&records, before_end),
            RecordGauges {
                windows_open: 1,
                pending: 1,
                oldest_pending_seconds: 86_340.0,
                oldest_unlinked_seconds: 86_340.0,
                oldest_linked_seconds: 0.0,
            }
        );
        // The window ended and no expiry check has run (driftgate was down): pending since
        // its end, beside the record already awaiting.
        let after_end: Timestamp = "2026-11-30T09:01:00Z".parse().unwrap();
        assert_eq!(
            record_gauges(&records, after_end),
            RecordGauges {
                windows_open: 0,
                pending: 2,
                oldest_pending_seconds: 86_460.0,
                oldest_unlinked_seconds: 86_460.0,
                oldest_linked_seconds: 0.0,
            }
        );
        assert_eq!(
            record_gauges(&records[2..], after_end),
            RecordGauges {
                windows_open: 0,
                pending: 0,
                oldest_pending_seconds: 0.0,
                oldest_unlinked_seconds: 0.0,
                oldest_linked_seconds: 0.0,
            }
        );
    }

    #[test]
    fn a_linked_pull_request_takes_a_record_out_of_the_unlinked_gauge_only() {
        let mut linked = record_in(Phase::AwaitingBackport, "2026-11-29T09:00:00Z");
        linked.metadata.annotations = Some(BTreeMap::from([(
            crate::records::record::PULL_REQUEST_ANNOTATION.to_owned(),
            "https://git.example/payments/pull/412".to_owned(),
        )]));
        let records = [
            Arc::new(linked),
            named("r", Phase::AwaitingBackport, "2026-11-30T08:00:00Z"),
        ];
        let gauges = record_gauges(&records, "2026-11-30T09:00:00Z".parse().unwrap());
        assert_eq!(gauges.pending, 2);
        assert_eq!(gauges.oldest_pending_seconds, 86_400.0);
        assert_eq!(gauges.oldest_unlinked_seconds, 3_600.0, "the unlinked one");
        assert_eq!(gauges.oldest_linked_seconds, 86_400.0, "the linked one");
    }

    #[test]
    fn expiry_moves_only_open_records_whose_window_ended_and_says_so_in_an_event() {
        let records = [
            named("open", Phase::Open, "2026-11-30T08:00:00Z"),
            named("awaiting", Phase::AwaitingBackport, "2026-11-30T08:30:00Z"),
            named("backported", Phase::Backported, "2026-11-30T08:30:00Z"),
        ];
        assert_eq!(
            plan_expiry(&records, "2026-11-30T08:59:59Z".parse().unwrap()),
            []
        );
        let expired = plan_expiry(&records, "2026-11-30T09:00:00Z".parse().unwrap());
        assert_eq!(expired.len(), 1);
        let expiry = &expired[0];
        assert_eq!(expiry.record.name_any(), "open");
        assert_eq!(
            expiry.change,
            PhaseChange {
                phase: Phase::AwaitingBackport,
                reason: "Expired",
                message:
                    "the window ended at 2026-11-30 09:00 UTC with 0 change(s) not yet seen in Git"
                        .into(),
                reverted_fields: Vec::new(),
                resumed_by: None,
            }
        );
        assert_eq!(expiry.event.reason, EventReason::BreakGlassExpired);
        assert_eq!(
            expiry.event.note,
            "The break-glass window opened by alice (reason \"INC-1\") expired at 2026-11-30 09:00 UTC; \
             0 change(s) made in it must be backported to Git, or the controller will revert them. Record open."
        );
        let regarding = &expiry.event.regarding;
        assert_eq!(
            (
                regarding.kind.as_deref(),
                regarding.name.as_deref(),
                regarding.namespace.as_deref(),
                regarding.uid.as_deref()
            ),
            (Some("Deployment"), Some("api"), Some("prod"), Some("u"))
        );
    }

    #[test]
    fn retention_plans_conditioned_deletions_of_settled_records_only() {
        let day = Duration::from_secs(86_400);
        let records = [
            named("backported", Phase::Backported, "2026-11-29T09:00:00Z"),
            named("resolved-late", Phase::Resolved, "2026-11-30T09:00:01Z"),
            named("reverted", Phase::Reverted, "2026-11-01T09:00:00Z"),
            named("awaiting", Phase::AwaitingBackport, "2026-11-01T09:00:00Z"),
        ];
        let now: Timestamp = "2026-12-01T09:00:00Z".parse().unwrap();
        assert_eq!(
            plan_retention(&records, day, now),
            [Deletion {
                namespace: "prod".into(),
                name: "backported".into(),
                uid: Some("record-uid".into()),
                resource_version: Some("7".into()),
                phase: Phase::Backported,
            }]
        );
    }

    fn suspension_in(phase: Phase) -> Arc<BackportRequirement> {
        let mut record = record_in(phase, "2026-11-30T08:00:00Z");
        record.spec.scope = crate::records::record::RecordScope::Suspension;
        record.metadata.name = Some("kustomization-apps-1".into());
        Arc::new(record)
    }

    #[test]
    fn a_suspension_past_its_expiry_moves_to_expired_with_an_event_saying_how_to_resume() {
        let records = [
            suspension_in(Phase::Open),
            suspension_in(Phase::Expired),
            suspension_in(Phase::Resumed),
        ];
        let before = plan_expiry(&records, "2026-11-30T08:59:59Z".parse().unwrap());
        assert!(before.is_empty(), "not before its expiry");
        let planned = plan_expiry(&records, "2026-11-30T09:30:00Z".parse().unwrap());
        assert_eq!(planned.len(), 1, "only the Open one");
        let expiry = &planned[0];
        assert_eq!(expiry.change.phase, Phase::Expired);
        assert_eq!(expiry.event.reason, EventReason::SuspensionExpired);
        assert_eq!(
            expiry.event.note,
            "The suspension of Deployment prod/api by alice (reason \"INC-1\") expired at 2026-11-30 09:00 UTC and nobody resumed it: Git is not in charge until it is resumed (driftgate resume deployment/api -n prod). Record kustomization-apps-1."
        );
        assert_eq!(expiry.event.regarding.namespace.as_deref(), Some("prod"));
    }

    #[test]
    fn suspensions_count_in_no_backport_gauge() {
        let records = [suspension_in(Phase::Open), suspension_in(Phase::Expired)];
        for now in ["2026-11-30T08:30:00Z", "2026-11-30T09:30:00Z"] {
            let gauges = record_gauges(&records, now.parse().unwrap());
            assert_eq!((gauges.windows_open, gauges.pending), (0, 0), "{now}");
        }
    }
}
