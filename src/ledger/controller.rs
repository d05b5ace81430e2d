//! A controller's write judged against the records awaiting backport for its object, purely:
//! the request, the verdict, the records and the clock come in; out come the records it
//! settles (with their Events) and, when the policy refuses reverts, the refusal.

use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::core::admission::Operation;
use serde_json::Value;

use crate::decision::{PolicyVerdict, Rule};
use crate::events::{EventReason, PlannedEvent};
use crate::ledger::evidence::{Evidence, judge};
use crate::ledger::phase::{PhaseChange, awaiting_since, phase_of, window_ended};
use crate::ledger::plan::Refusal;
use crate::ledger::record::{BackportRequirement, DryRunMatch, Phase};
use crate::policy::BreakGlassRules;
use crate::request::RequestFacts;

/// The object a write is to, as records name it: None without a uid (nothing to look up).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WrittenObject {
    pub namespace: String,
    pub uid: String,
}

impl WrittenObject {
    pub fn of(facts: &RequestFacts<'_>) -> Option<WrittenObject> {
        let uid = facts.object_uid().filter(|uid| !uid.is_empty())?;
        Some(WrittenObject {
            namespace: facts.scope_namespace().unwrap_or_default().to_owned(),
            uid: uid.to_owned(),
        })
    }

    /// Whether `record` awaits backport of a change to this object (as the whole record's
    /// object, or as one change of a namespace-wide window).
    pub fn awaited_by(&self, record: &BackportRequirement, now: Timestamp) -> bool {
        record.metadata.namespace.as_deref() == Some(self.namespace.as_str())
            && awaiting_since(record, now).is_some()
            && (record.spec.object.uid == self.uid
                || record
                    .spec
                    .changes
                    .iter()
                    .any(|c| c.object.as_ref().is_some_and(|o| o.uid == self.uid)))
    }
}

/// A record the controller's write settles: its move, and the Event for it.
#[derive(Clone, Debug, PartialEq)]
pub struct Settlement {
    pub record: Arc<BackportRequirement>,
    pub change: PhaseChange,
    pub event: PlannedEvent,
}

/// A record a controller's dry run half proves backported: the mark to write on it.
#[derive(Clone, Debug, PartialEq)]
pub struct DryRunMark {
    pub record: Arc<BackportRequirement>,
    pub mark: DryRunMatch,
}

/// What a controller's write does to the records awaiting it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ControllerPlan {
    /// The records settled, in the background (they do not hold up the write).
    pub settlements: Vec<Settlement>,
    /// The records a dry run carried the values of for the first time, in the background.
    pub dry_run_marks: Vec<DryRunMark>,
    /// The policy refuses the write: it reverts a change its `refuseRevertsFor` still holds.
    /// A refused write never happens, so it settles nothing, not even records judged before.
    pub refusal: Option<Refusal>,
}

/// Judges the controller's write against `awaiting`, the records [`WrittenObject::awaited_by`];
/// `kind` is the kind the decision resolved for the object written (its Events are about it).
pub fn plan_controller_write(
    facts: &RequestFacts<'_>,
    kind: &str,
    verdict: &PolicyVerdict,
    rules: &BreakGlassRules,
    awaiting: &[Arc<BackportRequirement>],
    now: Timestamp,
) -> ControllerPlan {
    let mut plan = ControllerPlan::default();
    let Some(written) = WrittenObject::of(facts) else {
        return plan;
    };
    let request = facts.request();
    let object = match (&request.operation(), facts.object()) {
        (Operation::Delete, _) | (_, None) => None,
        (_, Some(object)) => serde_json::to_value(object.whole()).ok(),
    };
    let controller_fields = controller_fields(facts);
    for record in awaiting {
        let evidence = match &object {
            Some(object) => judge(
                &record.spec,
                &written.uid,
                object,
                controller_fields.as_ref(),
            ),
            None => Evidence::Reverted(vec!["(object deleted)".to_owned()]),
        };
        if let Evidence::Reverted(fields) = &evidence
            && holds_reverts(record, rules, now)
        {
            return ControllerPlan {
                settlements: Vec::new(),
                dry_run_marks: Vec::new(),
                refusal: Some(Refusal {
                    policy: verdict.policy.clone(),
                    rule: Rule::RevertRefused,
                    message: revert_refused_message(verdict, &written.namespace, record, fields),
                }),
            };
        }
        // A dry run is refused above like the real write, so that Flux reports the refusal.
        // Otherwise one dry run settles nothing: a real write of other values may follow it.
        if request.dry_run() {
            match dry_run_step(facts, kind, record, &written, &evidence, now) {
                Some(DryRunStep::Confirm(settlement)) => plan.settlements.push(*settlement),
                Some(DryRunStep::Mark(mark)) => plan.dry_run_marks.push(mark),
                None => {}
            }
            continue;
        }
        if let Some(settlement) = settlement(facts, kind, record, evidence, Proof::Write) {
            plan.settlements.push(settlement);
        }
    }
    plan
}

/// How far apart two dry runs must be to be two: the API server calls every webhook
/// configuration for one request, and separately registered replicas of driftgate see the same
/// dry run within milliseconds, while a controller's reconciles are its interval apart.
const DISTINCT_DRY_RUNS: jiff::SignedDuration = jiff::SignedDuration::from_secs(1);

/// What a controller's dry run does to a record it is judged against.
enum DryRunStep {
    /// An earlier dry run carried the values too, and nothing was applied since.
    Confirm(Box<Settlement>),
    /// The first dry run carrying the values: remembered on the record.
    Mark(DryRunMark),
}

/// Flux dry-runs every object on every reconcile and skips the apply when the dry run shows no
/// change: once Git has the emergency values, only dry runs reach the webhook. Two dry runs by
/// the controller that both carry every recorded value prove it, as the record still awaits
/// backport: any real write between them was judged and would have settled it.
fn dry_run_step(
    facts: &RequestFacts<'_>,
    kind: &str,
    record: &Arc<BackportRequirement>,
    written: &WrittenObject,
    evidence: &Evidence,
    now: Timestamp,
) -> Option<DryRunStep> {
    if *evidence != Evidence::Backported {
        return None;
    }
    let earlier = record
        .status
        .as_ref()
        .and_then(|s| s.dry_run_match.as_ref())
        .filter(|m| m.object_uid == written.uid);
    match earlier {
        Some(mark) if now.duration_since(mark.time.0) >= DISTINCT_DRY_RUNS => {
            settlement(facts, kind, record, Evidence::Backported, Proof::DryRuns)
                .map(|settlement| DryRunStep::Confirm(Box::new(settlement)))
        }
        // The same dry run seen twice (two webhook configurations), or a dry run a moment after.
        Some(_) => None,
        None => Some(DryRunStep::Mark(DryRunMark {
            record: record.clone(),
            mark: DryRunMatch {
                time: Time(now),
                user: facts.username().to_owned(),
                object_uid: written.uid.clone(),
            },
        })),
    }
}

/// What a Backported settlement rests on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Proof {
    /// A real write carrying the values.
    Write,
    /// Two dry runs carrying them, nothing applied between.
    DryRuns,
}

/// The controller's own field set: only what it manages is evidence of what Git holds.
fn controller_fields(facts: &RequestFacts<'_>) -> Option<Value> {
    let manager = facts.field_manager()?;
    facts
        .object()?
        .whole()
        .metadata
        .managed_fields
        .as_ref()?
        .iter()
        .find(|entry| {
            entry.manager.as_deref() == Some(manager)
                && entry.subresource.as_deref().unwrap_or("").is_empty()
        })
        .and_then(|entry| entry.fields_v1.as_ref())
        .map(|fields| fields.0.clone())
}

/// Whether the policy still refuses reverts of `record`: for `refuseRevertsFor` since it
/// began awaiting.
fn holds_reverts(record: &BackportRequirement, rules: &BreakGlassRules, now: Timestamp) -> bool {
    let Some(hold) = rules.refuse_reverts_for else {
        return false;
    };
    awaiting_since(record, now).is_some_and(|since| {
        since
            .checked_add(hold.as_signed())
            .is_ok_and(|until| until > now)
    })
}

fn revert_refused_message(
    verdict: &PolicyVerdict,
    namespace: &str,
    record: &BackportRequirement,
    fields: &[String],
) -> String {
    format!(
        "Controller {} may not revert the emergency change recorded in BackportRequirement {}/{} (fields {}, opened by {}, reason \"{}\") (policy \"{}\", rule {}). \
         Backport the change to Git, or resolve the record: driftgate backlog resolve {} -n {} --note \"…\".",
        verdict.matched.as_deref().unwrap_or("?"),
        namespace,
        record.name_any(),
        fields.join(", "),
        record.spec.window.opener_words(),
        record.spec.window.reason_words(),
        verdict.policy,
        Rule::RevertRefused,
        record.name_any(),
        namespace,
    )
}

/// The move `evidence` calls for, with its Event; None when it proves nothing.
fn settlement(
    facts: &RequestFacts<'_>,
    kind: &str,
    record: &Arc<BackportRequirement>,
    evidence: Evidence,
    proof: Proof,
) -> Option<Settlement> {
    let controller_user = facts.who();
    let opener = record.spec.window.opener_words();
    let reason = record.spec.window.reason_words();
    let name = record.name_any();
    let (reason, note) = match &evidence {
        Evidence::Backported if proof == Proof::DryRuns => (
            EventReason::BackportConfirmed,
            format!(
                "The GitOps controller ({controller_user}) dry-ran the values of the emergency change made under {opener}'s break-glass window (reason \"{reason}\") twice and applied nothing between: Git has caught up. Record {name}."
            ),
        ),
        Evidence::Backported => (
            EventReason::BackportConfirmed,
            format!(
                "The GitOps controller ({controller_user}) applied the values of the emergency change made under {opener}'s break-glass window (reason \"{reason}\"): Git has caught up. Record {name}."
            ),
        ),
        Evidence::Reverted(fields) => (
            EventReason::EmergencyChangeReverted,
            format!(
                "The GitOps controller ({controller_user}) reverted the emergency change to {} made under {opener}'s break-glass window (reason \"{reason}\"): Git does not have it. Record {name}.",
                fields.join(", "),
            ),
        ),
        Evidence::Nothing => return None,
    };
    let event = PlannedEvent::new(reason, note, facts.regarding(kind).unwrap_or_default());
    // The transition says what its Event says.
    let change = match (evidence, proof) {
        (Evidence::Reverted(fields), _) => PhaseChange::reverted(fields, event.note.clone()),
        (_, Proof::DryRuns) => PhaseChange::backported_by_dry_runs(event.note.clone()),
        (_, Proof::Write) => PhaseChange::backported(event.note.clone()),
    };
    Some(Settlement {
        record: record.clone(),
        change,
        event,
    })
}

/// The next step of settling a record, as last read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SettleStep {
    /// Its window ended since the last expiry check: expire it first (with its Event).
    Expire,
    /// It awaits backport: make the settlement's move.
    Settle,
    /// Settled already, or its window was extended meanwhile.
    Done,
}

pub fn settle_step(record: &BackportRequirement, now: Timestamp) -> SettleStep {
    if window_ended(record, now) {
        SettleStep::Expire
    } else if phase_of(record) == Phase::AwaitingBackport {
        SettleStep::Settle
    } else {
        SettleStep::Done
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::evidence::digest;
    use crate::ledger::plan::tests::{at, decision, open_record, policies, rules, update};
    use crate::ledger::record::{
        BackportStatus, RecordScope, RecordedChange, RecordedField, RecordedObject, Transition,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use serde_json::json;

    const FLUX: &str = "system:serviceaccount:flux-system:kustomize-controller";

    /// The record of alice's change of Deployment api to 5 replicas, awaiting backport since `since`.
    fn awaiting(since: &str) -> Arc<BackportRequirement> {
        let mut record = open_record("deployment-api-1", "2026-11-30T10:00:00Z");
        record.spec.changes.push(RecordedChange {
            time: Time(at("2026-11-30T09:10:00Z")),
            user: "alice".into(),
            operation: "UPDATE".into(),
            object: None,
            subresource: String::new(),
            request_uid: "r".into(),
            resource_version: "41".into(),
            fields: vec![RecordedField {
                path: "spec.replicas".into(),
                digest: digest(Some(&json!(5))),
                value: None,
            }],
        });
        record.status = Some(BackportStatus {
            phase: Phase::AwaitingBackport,
            transitions: vec![Transition {
                phase: Phase::AwaitingBackport,
                time: Time(at(since)),
                reason: "Expired".into(),
                message: String::new(),
            }],
            ..BackportStatus::default()
        });
        Arc::new(record)
    }

    /// Flux writing Deployment api with `replicas`, judged `minutes` after the record began awaiting.
    fn judged(replicas: u32, dry_run: bool, minutes: i64) -> ControllerPlan {
        judged_against(awaiting("2026-11-30T10:00:00Z"), replicas, dry_run, minutes)
    }

    /// [`judged`] against `record`.
    fn judged_against(
        record: Arc<BackportRequirement>,
        replicas: u32,
        dry_run: bool,
        minutes: i64,
    ) -> ControllerPlan {
        let mut request = update(FLUX, "Deployment", "dep-uid", replicas);
        request.dry_run = dry_run;
        let decision = decision(&request, Rule::Controller, None);
        let policies = policies();
        let since = at("2026-11-30T10:00:00Z");
        let now = since + jiff::SignedDuration::from_mins(minutes);
        let records = [record];
        plan_controller_write(
            &RequestFacts::new(&request),
            &decision.record.object.kind,
            &decision.record.verdicts[0],
            rules(&policies),
            &records,
            now,
        )
    }

    #[test]
    fn a_revert_the_policy_still_holds_is_refused_naming_the_record_and_what_to_do() {
        let plan = judged(2, false, 30);
        assert_eq!(plan.settlements, []);
        assert_eq!(
            plan.refusal,
            Some(Refusal {
                policy: "production".into(),
                rule: Rule::RevertRefused,
                message: "Controller flux may not revert the emergency change recorded in BackportRequirement prod-payments/deployment-api-1 \
                          (fields spec.replicas, opened by alice, reason \"INC-7\") (policy \"production\", rule RevertRefused). \
                          Backport the change to Git, or resolve the record: driftgate backlog resolve deployment-api-1 -n prod-payments --note \"…\"."
                    .into(),
            })
        );
        // Its dry run is refused too (so that Flux reports it), and settles nothing.
        let dry = judged(2, true, 30);
        assert_eq!(dry.refusal.map(|r| r.rule), Some(Rule::RevertRefused));
        assert_eq!(dry.settlements, []);
    }

    #[test]
    fn a_refused_write_settles_no_record_not_even_one_judged_before_the_held_one() {
        // Flux writes replicas 2: it reverts the old record (hold over, judged first) and the
        // new one (still held). The write is refused, so the old record's revert never happened.
        let request = update(FLUX, "Deployment", "dep-uid", 2);
        let decision = decision(&request, Rule::Controller, None);
        let policies = policies();
        let mut held = BackportRequirement::clone(&awaiting("2026-11-30T10:50:00Z"));
        held.metadata.name = Some("deployment-api-2".into());
        let records = [awaiting("2026-11-30T10:00:00Z"), Arc::new(held)];
        let plan = plan_controller_write(
            &RequestFacts::new(&request),
            &decision.record.object.kind,
            &decision.record.verdicts[0],
            rules(&policies),
            &records,
            at("2026-11-30T11:00:00Z"),
        );
        assert_eq!(plan.settlements, []);
        assert!(plan.refusal.is_some_and(|r| {
            r.message
                .contains("BackportRequirement prod-payments/deployment-api-2")
        }));
        // Without the held record, the same write settles the old one.
        let plan = plan_controller_write(
            &RequestFacts::new(&request),
            &decision.record.object.kind,
            &decision.record.verdicts[0],
            rules(&policies),
            &records[..1],
            at("2026-11-30T11:00:00Z"),
        );
        assert_eq!(plan.settlements.len(), 1);
    }

    #[test]
    fn a_revert_after_the_hold_settles_the_record_reverted_with_its_event() {
        let plan = judged(2, false, 60);
        assert_eq!(plan.refusal, None);
        let [settlement] = &plan.settlements[..] else {
            panic!("{plan:?}")
        };
        assert_eq!(settlement.record.name_any(), "deployment-api-1");
        assert_eq!(
            settlement.event.reason,
            EventReason::EmergencyChangeReverted
        );
        assert_eq!(
            settlement.event.note,
            format!(
                "The GitOps controller ({FLUX}) reverted the emergency change to spec.replicas made under alice's break-glass window \
                 (reason \"INC-7\"): Git does not have it. Record deployment-api-1."
            )
        );
        assert_eq!(
            settlement.change,
            PhaseChange::reverted(vec!["spec.replicas".into()], settlement.event.note.clone())
        );
        let regarding = &settlement.event.regarding;
        assert_eq!(
            (
                regarding.kind.as_deref(),
                regarding.uid.as_deref(),
                regarding.namespace.as_deref()
            ),
            (Some("Deployment"), Some("dep-uid"), Some("prod-payments"))
        );
    }

    #[test]
    fn a_write_carrying_the_recorded_values_confirms_the_backport() {
        let plan = judged(5, false, 5);
        assert_eq!(plan.refusal, None);
        assert_eq!(plan.dry_run_marks, []);
        let [settlement] = &plan.settlements[..] else {
            panic!("{plan:?}")
        };
        assert_eq!(settlement.event.reason, EventReason::BackportConfirmed);
        assert_eq!(
            (settlement.change.phase, settlement.change.reason),
            (Phase::Backported, "ControllerCarriedChange")
        );
        assert_eq!(
            settlement.event.note,
            format!(
                "The GitOps controller ({FLUX}) applied the values of the emergency change made under alice's break-glass window \
                 (reason \"INC-7\"): Git has caught up. Record deployment-api-1."
            )
        );
        assert_eq!(settlement.change.message, settlement.event.note);
    }

    /// `awaiting`'s record with a dry run of `object_uid` remembered at `time`.
    fn marked(object_uid: &str, time: Timestamp) -> Arc<BackportRequirement> {
        let mut record = BackportRequirement::clone(&awaiting("2026-11-30T10:00:00Z"));
        let status = record.status.as_mut().unwrap();
        status.dry_run_match = Some(DryRunMatch {
            time: Time(time),
            user: FLUX.into(),
            object_uid: object_uid.into(),
        });
        Arc::new(record)
    }

    #[test]
    fn a_first_dry_run_carrying_the_values_is_remembered_and_settles_nothing() {
        let plan = judged(5, true, 5);
        assert_eq!((plan.settlements, plan.refusal), (vec![], None));
        let [mark] = &plan.dry_run_marks[..] else {
            panic!("{:?}", plan.dry_run_marks)
        };
        assert_eq!(mark.record.name_any(), "deployment-api-1");
        assert_eq!(
            mark.mark,
            DryRunMatch {
                time: Time(at("2026-11-30T10:05:00Z")),
                user: FLUX.into(),
                object_uid: "dep-uid".into(),
            }
        );
        // A mark of another object (a namespace-wide window) is replaced, not confirmed.
        let other = judged_against(marked("other-uid", at("2026-11-30T10:01:00Z")), 5, true, 5);
        assert_eq!(other.settlements, []);
        assert_eq!(other.dry_run_marks.len(), 1);
        // A dry run of other values proves nothing and is not remembered.
        assert_eq!(judged(2, true, 60), ControllerPlan::default());
    }

    #[test]
    fn a_second_dry_run_carrying_the_values_confirms_the_backport_with_its_own_words() {
        let plan = judged_against(marked("dep-uid", at("2026-11-30T10:00:05Z")), 5, true, 5);
        assert_eq!(plan.dry_run_marks, []);
        let [settlement] = &plan.settlements[..] else {
            panic!("{plan:?}")
        };
        assert_eq!(settlement.event.reason, EventReason::BackportConfirmed);
        assert_eq!(
            (settlement.change.phase, settlement.change.reason),
            (Phase::Backported, "ControllerFoundNothingToApply")
        );
        assert_eq!(
            settlement.event.note,
            format!(
                "The GitOps controller ({FLUX}) dry-ran the values of the emergency change made under alice's break-glass window \
                 (reason \"INC-7\") twice and applied nothing between: Git has caught up. Record deployment-api-1."
            )
        );
        assert_eq!(settlement.change.message, settlement.event.note);
    }

    #[test]
    fn the_same_dry_run_seen_by_two_webhooks_is_not_two_dry_runs() {
        // Remembered half a second before: another webhook configuration's call for the same
        // dry run, not a reconcile later.
        let record = marked("dep-uid", at("2026-11-30T10:04:59.5Z"));
        assert_eq!(
            judged_against(record, 5, true, 5),
            ControllerPlan::default()
        );
    }

    #[test]
    fn a_dry_run_of_one_value_then_a_real_write_of_another_is_a_revert() {
        // The race the ledger's e2e tests found: the dry run is remembered, and the real write
        // that follows it with the old count reverts the change.
        let first = judged(5, true, 60);
        assert_eq!(first.dry_run_marks.len(), 1);
        let record = marked("dep-uid", at("2026-11-30T11:00:00Z"));
        let real = judged_against(record, 2, false, 60);
        let [settlement] = &real.settlements[..] else {
            panic!("{real:?}")
        };
        assert_eq!(settlement.change.phase, Phase::Reverted);
    }

    #[test]
    fn deleting_the_object_reverts_every_recorded_change() {
        let mut request = update(FLUX, "Deployment", "dep-uid", 5);
        request.operation = Operation::Delete;
        request.object = None;
        let decision = decision(&request, Rule::Controller, None);
        let policies = policies();
        let records = [awaiting("2026-11-30T10:00:00Z")];
        let plan = plan_controller_write(
            &RequestFacts::new(&request),
            &decision.record.object.kind,
            &decision.record.verdicts[0],
            rules(&policies),
            &records,
            at("2026-11-30T10:10:00Z"),
        );
        assert!(
            plan.refusal
                .is_some_and(|r| r.message.contains("(fields (object deleted),")),
        );
    }

    #[test]
    fn the_records_awaited_are_those_of_the_object_in_its_namespace_awaiting_backport() {
        let request = update(FLUX, "Deployment", "dep-uid", 5);
        let written = WrittenObject::of(&RequestFacts::new(&request)).unwrap();
        let now = at("2026-11-30T10:30:00Z");
        assert!(written.awaited_by(&awaiting("2026-11-30T10:00:00Z"), now));
        let mut elsewhere = BackportRequirement::clone(&awaiting("2026-11-30T10:00:00Z"));
        elsewhere.metadata.namespace = Some("prod-other".into());
        assert!(!written.awaited_by(&elsewhere, now));
        // An open window is not awaiting yet; once it ended, it is.
        let open = open_record("open", "2026-11-30T11:00:00Z");
        assert!(!written.awaited_by(&open, now));
        assert!(written.awaited_by(&open, at("2026-11-30T11:00:00Z")));
        let mut request = request;
        request.object.as_mut().unwrap().metadata.uid = None;
        request.old_object.as_mut().unwrap().metadata.uid = None;
        assert_eq!(WrittenObject::of(&RequestFacts::new(&request)), None);
    }

    #[test]
    fn a_namespace_wide_record_awaits_the_objects_it_recorded_changes_of() {
        let request = update(FLUX, "Deployment", "dep-uid", 5);
        let written = WrittenObject::of(&RequestFacts::new(&request)).unwrap();
        let now = at("2026-11-30T10:30:00Z");
        let mut record = BackportRequirement::clone(&awaiting("2026-11-30T10:00:00Z"));
        record.spec.scope = RecordScope::Namespace;
        record.spec.object = RecordedObject {
            api_version: "v1".into(),
            kind: "Namespace".into(),
            name: "prod-payments".into(),
            uid: "ns-uid".into(),
        };
        let object = |uid: &str| RecordedObject {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            name: "api".into(),
            uid: uid.into(),
        };
        record.spec.changes[0].object = Some(object("dep-uid"));
        assert!(written.awaited_by(&record, now));
        record.spec.changes[0].object = Some(object("worker-uid"));
        assert!(!written.awaited_by(&record, now));
    }

    /// Flux's write of Deployment api with 5 replicas (the recorded value), carrying `entries`
    /// as its managedFields and naming its field manager.
    fn judged_with_managed_fields(entries: Value) -> ControllerPlan {
        let mut request = update(FLUX, "Deployment", "dep-uid", 5);
        request.options =
            Some(serde_json::from_value(json!({"fieldManager": "kustomize-controller"})).unwrap());
        request.object.as_mut().unwrap().metadata.managed_fields =
            Some(serde_json::from_value(entries).unwrap());
        let decision = decision(&request, Rule::Controller, None);
        let policies = policies();
        let records = [awaiting("2026-11-30T10:00:00Z")];
        plan_controller_write(
            &RequestFacts::new(&request),
            &decision.record.object.kind,
            &decision.record.verdicts[0],
            rules(&policies),
            &records,
            at("2026-11-30T10:05:00Z"),
        )
    }

    #[test]
    fn only_the_controllers_own_entry_says_which_values_are_from_git() {
        let entry = |manager: &str, subresource: &str, fields: Value| {
            json!({"manager": manager, "operation": "Update", "subresource": subresource,
                "apiVersion": "apps/v1", "fieldsType": "FieldsV1", "fieldsV1": fields})
        };
        let replicas = json!({"f:spec": {"f:replicas": {}}});
        let template = json!({"f:spec": {"f:template": {}}});
        // Flux's entry for the object does not own spec.replicas; its scale entry and
        // kubectl-edit's do: the value Flux carried is not Git's, and settles nothing.
        let not_flux = judged_with_managed_fields(json!([
            entry("kustomize-controller", "scale", replicas.clone()),
            entry("kubectl-edit", "", replicas.clone()),
            entry("kustomize-controller", "", template.clone()),
        ]));
        assert_eq!(not_flux, ControllerPlan::default());
        // Flux's own entry owns it: Git has the value.
        let flux = judged_with_managed_fields(json!([
            entry("kubectl-edit", "", template),
            entry("kustomize-controller", "", replicas),
        ]));
        let [settlement] = &flux.settlements[..] else {
            panic!("{flux:?}")
        };
        assert_eq!(settlement.change.phase, Phase::Backported);
    }

    #[test]
    fn settling_expires_an_ended_window_first_and_stops_once_settled() {
        let now = at("2026-11-30T10:30:00Z");
        assert_eq!(
            settle_step(&open_record("r", "2026-11-30T10:00:00Z"), now),
            SettleStep::Expire
        );
        assert_eq!(
            settle_step(&open_record("r", "2026-11-30T11:00:00Z"), now),
            SettleStep::Done
        );
        assert_eq!(
            settle_step(&awaiting("2026-11-30T10:00:00Z"), now),
            SettleStep::Settle
        );
        let mut settled = BackportRequirement::clone(&awaiting("2026-11-30T10:00:00Z"));
        settled.status.as_mut().unwrap().phase = Phase::Backported;
        assert_eq!(settle_step(&settled, now), SettleStep::Done);
    }
}
