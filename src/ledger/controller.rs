//! A controller's write judged against the records awaiting backport for its object, purely:
//! the request, the verdict, the records and the clock come in; out come the records it
//! settles (with their Events) and, when the policy refuses reverts, the refusal.

use std::sync::Arc;

use jiff::Timestamp;
use kube::ResourceExt;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, Operation};
use serde_json::Value;

use crate::decision::{PolicyVerdict, Rule};
use crate::events::{EventReason, PlannedEvent};
use crate::ledger::evidence::{Evidence, judge};
use crate::ledger::phase::{PhaseChange, awaiting_since, phase_of, window_ended};
use crate::ledger::plan::{Refusal, object_uid, regarding_of};
use crate::ledger::record::{BackportRequirement, Phase};
use crate::policy::BreakGlassRules;

/// The object a write is to, as records name it: None without a uid (nothing to look up).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WrittenObject {
    pub namespace: String,
    pub uid: String,
}

impl WrittenObject {
    pub fn of(request: &AdmissionRequest<DynamicObject>) -> Option<WrittenObject> {
        let uid = object_uid(request);
        (!uid.is_empty()).then(|| WrittenObject {
            namespace: request.namespace.clone().unwrap_or_default(),
            uid,
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

/// What a controller's write does to the records awaiting it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ControllerPlan {
    /// The records settled, in the background (they do not hold up the write).
    pub settlements: Vec<Settlement>,
    /// The policy refuses the write: it reverts a change its `refuseRevertsFor` still holds.
    /// Judging stops at the first such record; those judged before it are settled still.
    pub refusal: Option<Refusal>,
}

/// Judges the controller's write against `awaiting`, the records [`WrittenObject::awaited_by`].
pub fn plan_controller_write(
    request: &AdmissionRequest<DynamicObject>,
    verdict: &PolicyVerdict,
    rules: &BreakGlassRules,
    awaiting: &[Arc<BackportRequirement>],
    now: Timestamp,
) -> ControllerPlan {
    let mut plan = ControllerPlan::default();
    let Some(written) = WrittenObject::of(request) else {
        return plan;
    };
    let object = match (&request.operation, &request.object) {
        (Operation::Delete, _) | (_, None) => None,
        (_, Some(object)) => serde_json::to_value(object).ok(),
    };
    let controller_fields = controller_fields(request);
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
            plan.refusal = Some(Refusal {
                policy: verdict.policy.clone(),
                rule: Rule::RevertRefused,
                message: revert_refused_message(verdict, &written.namespace, record, fields),
            });
            return plan;
        }
        // A dry run writes nothing, so it settles nothing: Flux dry-runs every object on
        // every reconcile, and its dry run of Git's values says nothing about what it
        // will write (the webhook promises `sideEffects: NoneOnDryRun`, too). It is
        // refused above like the real write, so that Flux reports the refusal.
        if request.dry_run {
            continue;
        }
        if let Some(settlement) = settlement(request, record, evidence) {
            plan.settlements.push(settlement);
        }
    }
    plan
}

/// The controller's own field set: only what it manages is evidence of what Git holds.
fn controller_fields(request: &AdmissionRequest<DynamicObject>) -> Option<Value> {
    let manager = request
        .options
        .as_ref()
        .and_then(|o| o.0.get("fieldManager"))
        .and_then(Value::as_str)?;
    request
        .object
        .as_ref()?
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
    request: &AdmissionRequest<DynamicObject>,
    record: &Arc<BackportRequirement>,
    evidence: Evidence,
) -> Option<Settlement> {
    let controller_user = request.user_info.username.as_deref().unwrap_or_default();
    let opener = record.spec.window.opener_words();
    let reason = record.spec.window.reason_words();
    let name = record.name_any();
    let (reason, note) = match &evidence {
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
    let event = PlannedEvent::new(reason, note, regarding_of(request));
    // The transition says what its Event says.
    let change = match evidence {
        Evidence::Reverted(fields) => PhaseChange::reverted(fields, event.note.clone()),
        _ => PhaseChange::backported(event.note.clone()),
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
