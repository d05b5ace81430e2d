//! A controller's write judged against the records awaiting backport for its object, purely:
//! the request, the verdict, the records and the clock come in; out come the records it
//! settles (with their Events) and, when the policy refuses reverts, the refusal.
//!
//! A review is a claim: anyone who reaches the webhook's port can POST one that names Flux.
//! It may refuse a write (an answer changes nothing durable), but a real write settles a
//! record only as the API server stored it ([`plan_stored_settlements`], on the object read
//! back), and dry runs, which leave nothing stored, settle only when the caller is the
//! authenticated API server.

use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube_core::DynamicObject;
use kube_core::ResourceExt;
use kube_core::admission::Operation;
use serde_json::Value;

use crate::decision::{PolicyVerdict, Rule};
use crate::events::{EventReason, PlannedEvent};
use crate::ledger::evidence::{Evidence, judge};
use crate::ledger::plan::Refusal;
use crate::policy::BreakGlassRules;
use crate::records::phase::{PhaseChange, awaiting_since, phase_of, window_ended};
use crate::records::record::{BackportRequirement, DryRunMatch, Phase};
use crate::request::{AdmittedWrite, Landed, RequestFacts};

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
        // A real write settles nothing here: what it carries is only claimed until the API
        // server stores it, and the object is read back for that (`plan_stored_settlements`).
    }
    plan
}

/// A controller's real write, admitted: what to read back to settle records on what the API
/// server stored rather than on what a review claimed.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredWrite {
    pub admitted: AdmittedWrite,
    pub written: WrittenObject,
    /// The controller's field manager: its managedFields entry says which fields it set.
    pub field_manager: Option<String>,
    /// The controller, as Events name it.
    pub who: String,
    /// The object its Events are about.
    pub regarding: ObjectReference,
}

impl StoredWrite {
    /// None for a dry run or a write without an object uid (nothing to look up).
    pub fn of(facts: &RequestFacts<'_>, kind: &str) -> Option<StoredWrite> {
        Some(StoredWrite {
            admitted: AdmittedWrite::of(facts)?,
            written: WrittenObject::of(facts)?,
            field_manager: facts.field_manager().map(str::to_owned),
            who: facts.who().to_owned(),
            regarding: facts.regarding(kind).unwrap_or_default(),
        })
    }
}

/// The records `awaiting` that the object as stored settles. Only what the controller's own
/// managedFields entry owns is evidence: a forged review that names Flux leaves the fields
/// with the manager that set them (driftgate refuses forged ownership), so it settles nothing.
pub fn plan_stored_settlements(
    write: &StoredWrite,
    stored: Landed<'_>,
    awaiting: &[Arc<BackportRequirement>],
) -> Vec<Settlement> {
    let evidence_of = |record: &BackportRequirement| match stored {
        Landed::NotYet => Evidence::Nothing,
        Landed::Gone => Evidence::Reverted(vec!["(object deleted)".to_owned()]),
        Landed::Object(object) => {
            let Some(fields) = managed_fields_of(object, write.field_manager.as_deref()) else {
                return Evidence::Nothing;
            };
            match serde_json::to_value(object) {
                Ok(value) => judge(&record.spec, &write.written.uid, &value, Some(&fields)),
                Err(_) => Evidence::Nothing,
            }
        }
    };
    awaiting
        .iter()
        .filter_map(|record| {
            let evidence = evidence_of(record);
            settlement(&write.who, &write.regarding, record, evidence, Proof::Write)
        })
        .collect()
}

/// The field set (`fieldsV1`) of `manager`'s entry on the object itself (no subresource).
fn managed_fields_of(object: &DynamicObject, manager: Option<&str>) -> Option<Value> {
    let manager = manager?;
    object
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
        Some(mark) if now.duration_since(mark.time.0) >= DISTINCT_DRY_RUNS => settlement(
            facts.who(),
            &facts.regarding(kind).unwrap_or_default(),
            record,
            Evidence::Backported,
            Proof::DryRuns,
        )
        .map(|settlement| DryRunStep::Confirm(Box::new(settlement))),
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
    managed_fields_of(facts.object()?.whole(), facts.field_manager())
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
    controller_user: &str,
    regarding: &ObjectReference,
    record: &Arc<BackportRequirement>,
    evidence: Evidence,
    proof: Proof,
) -> Option<Settlement> {
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
    let event = PlannedEvent::new(reason, note, regarding.clone());
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
    use crate::records::record::{
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
            landed: None,
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
        let since = at("2026-11-30T10:00:00Z");
        plan_for(
            &request,
            record,
            since + jiff::SignedDuration::from_mins(minutes),
        )
    }

    /// The controller plan of `request` (Flux's) against `record` at `now`.
    fn plan_for(
        request: &kube_core::admission::AdmissionRequest<kube_core::DynamicObject>,
        record: Arc<BackportRequirement>,
        now: Timestamp,
    ) -> ControllerPlan {
        let decision = decision(request, Rule::Controller, None);
        let policies = policies();
        plan_controller_write(
            &RequestFacts::new(request),
            &decision.record.object.kind,
            &decision.record.verdicts[0],
            rules(&policies),
            &[record],
            now,
        )
    }

    /// Flux's real write of Deployment api (from resourceVersion 41), to be read back.
    fn flux_write() -> StoredWrite {
        let mut request = update(FLUX, "Deployment", "dep-uid", 5);
        request.options = Some(k8s_openapi::apimachinery::pkg::runtime::RawExtension(
            json!({"fieldManager": "kustomize-controller"}),
        ));
        let write = StoredWrite::of(&RequestFacts::new(&request), "Deployment");
        write.expect("a real write with a uid is read back")
    }

    /// Deployment api as the API server stores it: `replicas` at `resource_version`, with
    /// `spec.replicas` in the managedFields entry of `owner`.
    fn live(replicas: u32, resource_version: &str, owner: &str) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {
                "name": "api", "namespace": "prod-payments", "uid": "dep-uid",
                "resourceVersion": resource_version,
                "managedFields": [
                    {"manager": owner, "operation": "Update", "apiVersion": "apps/v1",
                     "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}}}},
                    {"manager": "kustomize-controller", "operation": "Apply", "apiVersion": "apps/v1",
                     "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:labels": {}}}},
                ],
            },
            "spec": {"replicas": replicas},
        }))
        .unwrap()
    }

    /// The settlements of `live` read back after [`flux_write`], for `record`.
    fn settled_as_stored(
        record: Arc<BackportRequirement>,
        live: Option<&DynamicObject>,
    ) -> Vec<Settlement> {
        let write = flux_write();
        plan_stored_settlements(&write, write.admitted.landed(live), &[record])
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
        // Without the held record, the same write is admitted.
        let plan = plan_controller_write(
            &RequestFacts::new(&request),
            &decision.record.object.kind,
            &decision.record.verdicts[0],
            rules(&policies),
            &records[..1],
            at("2026-11-30T11:00:00Z"),
        );
        assert_eq!(plan, ControllerPlan::default());
    }

    #[test]
    fn a_revert_after_the_hold_settles_the_record_reverted_with_its_event() {
        // Admitted once the hold is over, and settled on the object as stored, which Flux's
        // entry now owns with other values.
        assert_eq!(judged(2, false, 60), ControllerPlan::default());
        let settled = settled_as_stored(
            awaiting("2026-11-30T10:00:00Z"),
            Some(&live(2, "42", "kustomize-controller")),
        );
        let [settlement] = &settled[..] else {
            panic!("{settled:?}")
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
    fn a_write_carrying_the_recorded_values_confirms_the_backport_once_stored() {
        // The review alone settles nothing: it is a claim.
        assert_eq!(judged(5, false, 5), ControllerPlan::default());
        let settled = settled_as_stored(
            awaiting("2026-11-30T10:00:00Z"),
            Some(&live(5, "42", "kustomize-controller")),
        );
        let [settlement] = &settled[..] else {
            panic!("{settled:?}")
        };
        assert_eq!(settlement.event.reason, EventReason::BackportConfirmed);
        assert_eq!(
            (settlement.change.phase, settlement.change.reason),
            (Phase::Backported, "ControllerCarriedChange")
        );
        assert_eq!(
            settlement.event.regarding.kind.as_deref(),
            Some("Deployment")
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

    #[test]
    fn a_forged_controller_write_settles_nothing_as_the_api_server_shows_it() {
        // Nothing stored after the claimed write: still resourceVersion 41.
        let record = awaiting("2026-11-30T10:00:00Z");
        assert_eq!(
            settled_as_stored(record.clone(), Some(&live(5, "41", "kubectl-edit"))),
            []
        );
        // Stored since, by someone else: the emergency value is alice's manager's, not Flux's.
        assert_eq!(
            settled_as_stored(record.clone(), Some(&live(5, "43", "kubectl-edit"))),
            []
        );
        // Nor does a claimed revert: the value is still alice's.
        assert_eq!(
            settled_as_stored(record.clone(), Some(&live(5, "43", "kubectl-scale"))),
            []
        );
        // Without an entry of the claimed manager there is no evidence at all.
        let mut write = flux_write();
        write.field_manager = Some("someone-else".into());
        let object = live(5, "43", "kustomize-controller");
        assert_eq!(
            plan_stored_settlements(&write, write.admitted.landed(Some(&object)), &[record]),
            []
        );
    }

    #[test]
    fn a_stored_object_gone_or_replaced_reverts_and_one_not_yet_written_waits() {
        let write = flux_write().admitted;
        let object = live(5, "41", "kustomize-controller");
        assert_eq!(write.landed(Some(&object)), Landed::NotYet);
        assert_eq!(write.landed(None), Landed::Gone);
        let mut replaced = live(5, "50", "kustomize-controller");
        replaced.metadata.uid = Some("another-uid".into());
        assert_eq!(write.landed(Some(&replaced)), Landed::Gone);
        let newer = live(5, "42", "kustomize-controller");
        assert_eq!(write.landed(Some(&newer)), Landed::Object(&newer));
        let settled = settled_as_stored(awaiting("2026-11-30T10:00:00Z"), None);
        assert!(
            matches!(&settled[..], [s] if s.change.phase == Phase::Reverted),
            "{settled:?}"
        );
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

    /// Only what the controller manages is evidence, in its reviews too: a dry run carrying the
    /// recorded replicas where Flux's own managedFields entry does not own `spec.replicas` (the
    /// HPA's, say) proves nothing about Git and is not remembered.
    #[test]
    fn a_dry_run_carrying_a_value_the_controller_does_not_manage_is_not_remembered() {
        let mut request = update(FLUX, "Deployment", "dep-uid", 5);
        request.dry_run = true;
        request.options = Some(k8s_openapi::apimachinery::pkg::runtime::RawExtension(
            json!({"fieldManager": "kustomize-controller"}),
        ));
        let owning = |fields: Value| {
            let mut request = request.clone();
            let object = request.object.as_mut().unwrap();
            object.metadata.managed_fields = Some(vec![
                serde_json::from_value(json!({
                    "manager": "kustomize-controller", "operation": "Apply", "apiVersion": "apps/v1",
                    "time": "2026-11-30T10:04:00Z", "fieldsType": "FieldsV1", "fieldsV1": fields,
                }))
                .unwrap(),
            ]);
            plan_for(
                &request,
                awaiting("2026-11-30T10:00:00Z"),
                at("2026-11-30T10:05:00Z"),
            )
        };
        let unmanaged = owning(json!({"f:spec": {"f:template": {}}}));
        assert_eq!(unmanaged, ControllerPlan::default());
        let managed = owning(json!({"f:spec": {"f:replicas": {}}}));
        assert_eq!(managed.dry_run_marks.len(), 1, "{managed:?}");
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
        assert_eq!(
            judged_against(record.clone(), 2, false, 60),
            ControllerPlan::default()
        );
        let settled = settled_as_stored(record, Some(&live(2, "42", "kustomize-controller")));
        let [settlement] = &settled[..] else {
            panic!("{settled:?}")
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
    /// The settlements of Flux's write of 5 replicas as stored with these managedFields.
    fn judged_with_managed_fields(entries: Value) -> Vec<Settlement> {
        let mut stored = live(5, "42", "kustomize-controller");
        stored.metadata.managed_fields = Some(serde_json::from_value(entries).unwrap());
        settled_as_stored(awaiting("2026-11-30T10:00:00Z"), Some(&stored))
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
        assert_eq!(not_flux, []);
        // Flux's own entry owns it: Git has the value.
        let flux = judged_with_managed_fields(json!([
            entry("kubectl-edit", "", template),
            entry("kustomize-controller", "", replicas),
        ]));
        let [settlement] = &flux[..] else {
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
