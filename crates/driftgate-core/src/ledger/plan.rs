//! The ledger's part in one decision, planned purely: which verdicts it acts on, and for a
//! break-glass write the records to create, expire, change or append to, given the records of
//! the window's object as listed. No client and no clock: the service lists, applies the plan
//! with its retries, and turns a failed write into [`Refusal::unrecorded`].

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube_core::admission::Operation;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::decision::{
    BreakGlassWindow, Decision, DecisionRecord, PolicyVerdict, Rule, WindowScope,
};
use crate::ledger::evidence::{digest, value_at};
use crate::ledger::upkeep::{Expiry, expiry_of};
use crate::policy::{BreakGlassRules, PolicySet};
use crate::records::phase::{PhaseChange, phase_of};
use crate::records::record::{
    BackportRequirement, BackportRequirementSpec, Phase, RecordScope, RecordedChange,
    RecordedField, RecordedObject, RecordedWindow,
};
use crate::request::RequestFacts;

/// Labels on every record, so that the records of one object are one LIST away.
pub const OBJECT_UID_LABEL: &str = "driftgate.dev/object-uid";

/// Why the ledger refuses a write the policies admitted: the policy whose verdict it
/// overturns, by which rule, and the message for the person refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub policy: String,
    pub rule: Rule,
    pub message: String,
}

impl Refusal {
    /// The refusal of a break-glass change that could not be recorded (`error` says why).
    pub fn unrecorded(record: &DecisionRecord, policy: &str, error: &str) -> Refusal {
        Refusal {
            policy: policy.to_owned(),
            rule: Rule::LedgerUnavailable,
            message: unrecorded_message(record, policy, error),
        }
    }

    /// Turns `decision` into this refusal (through the one way to refuse a decision).
    pub fn apply_to(self, decision: &mut Decision) {
        decision.refuse(&self.policy, self.rule, self.message);
    }
}

/// What the ledger says of an admitted write, for the server to apply to its decision: the
/// ledger reads the decision and never changes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LedgerAnswer {
    /// Nothing to add.
    Admit,
    /// Admitted, with a warning for the writer (a break-glass change where no ledger is kept).
    Warn(&'static str),
    /// Refused: the ledger overturns a policy's verdict.
    Refuse(Refusal),
}

impl LedgerAnswer {
    /// Applies the answer to the decision it was given for.
    pub fn apply_to(self, decision: &mut Decision) {
        match self {
            LedgerAnswer::Admit => {}
            LedgerAnswer::Warn(warning) => decision.warnings.push(warning.to_owned()),
            LedgerAnswer::Refuse(refusal) => refusal.apply_to(decision),
        }
    }
}

/// What the ledger does for one verdict of an admitted write.
#[derive(Clone, Copy, Debug)]
pub enum LedgerTask<'a> {
    /// A controller's write, judged against the records awaiting backport for its object.
    JudgeControllerWrite {
        verdict: &'a PolicyVerdict,
        rules: &'a BreakGlassRules,
    },
    /// A break-glass write, recorded before it is admitted.
    Record {
        verdict: &'a PolicyVerdict,
        rules: &'a BreakGlassRules,
    },
}

/// The ledger's tasks for `decision`, in the order of its verdicts: only verdicts of policies
/// with break-glass rules; a dry run records nothing (but a controller's dry run is judged,
/// so that a controller that dry-runs first reports the refusal).
pub fn ledger_tasks<'a>(
    facts: &RequestFacts<'_>,
    decision: &'a Decision,
    policies: &'a PolicySet,
) -> Vec<LedgerTask<'a>> {
    decision
        .record
        .verdicts
        .iter()
        .filter_map(|verdict| {
            let rules = verdict
                .policy_in(policies)
                .and_then(|p| p.break_glass.as_ref())?;
            if verdict.rule == Rule::Controller {
                Some(LedgerTask::JudgeControllerWrite { verdict, rules })
            } else if facts.request().dry_run() || !is_break_glass_write(verdict.rule) {
                None
            } else {
                Some(LedgerTask::Record { verdict, rules })
            }
        })
        .collect()
}

/// The warning for a break-glass change admitted where there is no ledger (no cluster).
pub fn unrecorded_warning(facts: &RequestFacts<'_>, decision: &Decision) -> Option<&'static str> {
    let break_glass = decision
        .record
        .verdicts
        .iter()
        .any(|v| is_break_glass_write(v.rule));
    (!facts.request().dry_run() && break_glass).then_some(
        "driftgate runs without a cluster: this break-glass change is not recorded in a backport ledger.",
    )
}

fn is_break_glass_write(rule: Rule) -> bool {
    rule.properties().recorded
}

/// Whether a verdict suspends or resumes the controller: its record is the suspension's.
pub fn is_suspension_rule(rule: Rule) -> bool {
    rule.properties().suspension
}

/// The record key of `verdict`: a suspension's record is on the object suspended, apart from
/// any break-glass window on it.
pub fn record_key(
    facts: &RequestFacts<'_>,
    decision: &Decision,
    verdict: &PolicyVerdict,
) -> WindowKey {
    let key = WindowKey::of(facts, decision, verdict);
    if is_suspension_rule(verdict.rule) {
        WindowKey {
            scope: RecordScope::Suspension,
            ..key
        }
    } else {
        key
    }
}

/// Which window a break-glass write belongs to, and so which record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WindowKey {
    pub namespace: String,
    pub scope: RecordScope,
    /// What the record is on: the object written, or its Namespace for a namespace-wide window.
    pub object: RecordedObject,
    /// What the record's name and object-uid label are made of: the object's uid, or
    /// `namespace-<name>` for a namespace-wide window.
    pub window_uid: String,
}

impl WindowKey {
    pub fn of(facts: &RequestFacts<'_>, decision: &Decision, verdict: &PolicyVerdict) -> WindowKey {
        let object = &decision.record.object;
        let namespace = object.namespace.clone();
        let is_namespace_object = facts.is_namespace_object();
        let scope = match verdict.window.as_ref().or(verdict.new_window.as_ref()) {
            Some(w) if w.scope == WindowScope::Namespace => RecordScope::Namespace,
            _ if is_namespace_object => RecordScope::Namespace,
            _ => RecordScope::Object,
        };
        let (window_object, window_uid) = match scope {
            RecordScope::Object | RecordScope::Suspension => (
                RecordedObject {
                    api_version: facts.api_version(),
                    kind: object.kind.clone(),
                    name: object.name.clone(),
                    uid: object_uid(facts),
                },
                object_uid(facts),
            ),
            RecordScope::Namespace => (
                RecordedObject {
                    api_version: "v1".into(),
                    kind: "Namespace".into(),
                    name: namespace.clone(),
                    // The Namespace's uid is known only when the Namespace itself is written.
                    uid: if is_namespace_object {
                        object_uid(facts)
                    } else {
                        String::new()
                    },
                },
                format!("namespace-{namespace}"),
            ),
        };
        WindowKey {
            namespace,
            scope,
            object: window_object,
            window_uid,
        }
    }

    /// The label selector of the records of this window's object.
    pub fn label_selector(&self) -> String {
        format!("{OBJECT_UID_LABEL}={}", label_safe(&self.window_uid))
    }

    /// The record of `window` with no changes yet, and its first transition.
    fn new_record(
        &self,
        window: &BreakGlassWindow,
        policy: &str,
        opened: Option<(&str, Timestamp)>,
        first: PhaseChange,
    ) -> NewRecord {
        let spec = new_record(self.object.clone(), self.scope, window, policy, opened);
        // A suspension's record and a window's on the same object with the same expiry label
        // are two records.
        let named_by = match self.scope {
            RecordScope::Suspension => format!("{}/suspension", self.window_uid),
            _ => self.window_uid.clone(),
        };
        let name = record_name(
            &spec.object.kind,
            &spec.object.name,
            &named_by,
            &spec.window.label_value,
        );
        let mut record = BackportRequirement::new(&name, spec);
        record.metadata.labels = Some(BTreeMap::from([(
            OBJECT_UID_LABEL.to_owned(),
            label_safe(&self.window_uid),
        )]));
        NewRecord { record, first }
    }
}

/// A record to create, and its first transition (the API server ignores the status of a
/// create: it is a subresource).
#[derive(Clone, Debug, PartialEq)]
pub struct NewRecord {
    pub record: BackportRequirement,
    pub first: PhaseChange,
}

/// The writes that record one break-glass verdict, in order.
#[derive(Clone, Debug, PartialEq)]
pub struct RecordingPlan<'a> {
    /// Open records of the object whose window ended and which the expiry check has not got to
    /// yet: expired first, so that a window opened after one gets a record of its own.
    pub expire: Vec<Expiry<'a>>,
    pub write: RecordWrite<'a>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum RecordWrite<'a> {
    /// Nothing to write: a close with no open record, or a verdict without its window.
    Nothing,
    /// The open record moves to another phase (the window was closed).
    Transition {
        record: &'a BackportRequirement,
        change: PhaseChange,
    },
    /// The open record's window changed (extended or amended): a merge patch of the record.
    UpdateWindow {
        record: &'a BackportRequirement,
        patch: Value,
    },
    /// An expired suspension was suspended again with a new expiry: the record moves back to
    /// Open, then its window is patched.
    Renew {
        record: &'a BackportRequirement,
        change: PhaseChange,
        patch: Value,
    },
    /// A window was opened: its record is created.
    Create(Box<NewRecord>),
    /// A change under the window is appended to its record.
    Append {
        to: AppendTo<'a>,
        change: RecordedChange,
    },
}

/// The record a change is appended to.
#[derive(Clone, Debug, PartialEq)]
pub enum AppendTo<'a> {
    Existing(&'a BackportRequirement),
    /// The window was opened where driftgate could not see it (before it was installed, or while
    /// the webhook was bypassed): its record is created first.
    New(Box<NewRecord>),
}

/// What recording `verdict` takes, given `listed`, the records of the window's object (by
/// [`WindowKey::label_selector`]).
pub fn plan_recording<'a>(
    key: &WindowKey,
    facts: &RequestFacts<'_>,
    decision: &Decision,
    verdict: &PolicyVerdict,
    rules: &BreakGlassRules,
    listed: &'a [BackportRequirement],
    now: Timestamp,
) -> RecordingPlan<'a> {
    if key.scope == RecordScope::Suspension {
        return RecordingPlan {
            expire: Vec::new(),
            write: plan_suspension(key, facts, decision, verdict, rules, listed, now),
        };
    }
    // A record is one window. One whose window has ended is expired now.
    let (current, ended): (Vec<_>, Vec<_>) = listed
        .iter()
        .filter(|r| phase_of(r) == Phase::Open && r.spec.scope == key.scope)
        .partition(|r| r.spec.window.expires_at.0 > now);
    let existing = current.first().copied();
    let user = decision.record.user.as_str();
    let write = match verdict.rule {
        rule if waits_for_stored(rule) => {
            StoredChange::of(facts, decision, verdict, rules, now).plan(listed, now)
        }
        Rule::BreakGlassClosed => match existing {
            Some(record) => RecordWrite::Transition {
                record,
                change: PhaseChange::closed(user),
            },
            None => RecordWrite::Nothing,
        },
        Rule::BreakGlassOpened => match (verdict.new_window.as_ref(), existing) {
            (None, _) => RecordWrite::Nothing,
            (Some(window), Some(record)) => RecordWrite::UpdateWindow {
                record,
                patch: window_patch(window),
            },
            (Some(window), None) => RecordWrite::Create(Box::new(key.new_record(
                window,
                &verdict.policy,
                Some((user, now)),
                PhaseChange::opened(user, window.expires_at),
            ))),
        },
        Rule::BreakGlassWindow => match verdict.window.as_ref() {
            None => RecordWrite::Nothing,
            Some(window) => RecordWrite::Append {
                to: match existing {
                    Some(record) => AppendTo::Existing(record),
                    None => AppendTo::New(Box::new(key.new_record(
                        window,
                        &verdict.policy,
                        None,
                        PhaseChange::window_found(user, window.expires_at),
                    ))),
                },
                change: recorded_change(facts, decision, key.scope, rules, now),
            },
        },
        _ => RecordWrite::Nothing,
    };
    RecordingPlan {
        expire: ended.into_iter().map(expiry_of).collect(),
        write,
    }
}

/// What a suspension or a resume writes: a suspension's record lasts while the controller is
/// suspended, past its expiry too (Expired, until somebody resumes it), so the one to write
/// is the record of the object's suspension still unresumed, whatever its expiry.
fn plan_suspension<'a>(
    key: &WindowKey,
    facts: &RequestFacts<'_>,
    decision: &Decision,
    verdict: &PolicyVerdict,
    rules: &BreakGlassRules,
    listed: &'a [BackportRequirement],
    now: Timestamp,
) -> RecordWrite<'a> {
    let existing = listed.iter().find(|r| {
        r.spec.scope == RecordScope::Suspension
            && matches!(phase_of(r), Phase::Open | Phase::Expired)
    });
    let user = decision.record.user.as_str();
    match (verdict.rule, existing, verdict.new_window.as_ref()) {
        (Rule::Resumed, _, _) => {
            StoredChange::of(facts, decision, verdict, rules, now).plan(listed, now)
        }
        (Rule::Suspended, Some(record), Some(window)) if phase_of(record) == Phase::Expired => {
            RecordWrite::Renew {
                record,
                change: PhaseChange::suspended_again(user, window.expires_at),
                patch: window_patch(window),
            }
        }
        (Rule::Suspended, Some(record), Some(window)) => RecordWrite::UpdateWindow {
            record,
            patch: window_patch(window),
        },
        (Rule::Suspended, None, Some(window)) => {
            let how: Vec<&str> = decision
                .record
                .changed_fields
                .iter()
                .map(String::as_str)
                .filter(|path| {
                    !path.contains(&rules.label) && !path.contains(&rules.reason_annotation)
                })
                .collect();
            let how = how.join(", ");
            let mut new = key.new_record(
                window,
                &verdict.policy,
                Some((user, now)),
                PhaseChange::suspended(user, &how, window.expires_at),
            );
            new.record
                .spec
                .changes
                .push(recorded_change(facts, decision, key.scope, rules, now));
            RecordWrite::Create(Box::new(new))
        }
        _ => RecordWrite::Nothing,
    }
}

/// The merge patch of a record's window, extended or amended to `window`.
fn window_patch(window: &BreakGlassWindow) -> Value {
    json!({"spec": {"window": {
        "expiresAt": Time(window.expires_at),
        "labelValue": window.label_value,
        "reason": window.reason,
    }}})
}

/// Whether a verdict's record write waits until the API server shows the change. Extending or
/// amending a window and resuming a suspension only amend or move a record, so they are written
/// once the object read back carries them: a review claiming one (anyone who reaches the port
/// can POST one) changes no record. Changes under a window, windows opened and closed, and
/// suspensions are recorded before the answer: nothing admitted goes unrecorded, and the
/// controller's next write, which may follow a close at once, finds the record awaiting it.
pub fn waits_for_stored(rule: Rule) -> bool {
    matches!(
        rule,
        Rule::BreakGlassExtended | Rule::BreakGlassAmended | Rule::Resumed
    )
}

/// A record write that waits until the API server stores the change it records.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredChange {
    pub key: WindowKey,
    pub rule: Rule,
    pub policy: String,
    pub user: String,
    pub new_window: Option<BreakGlassWindow>,
    /// The fields the change sets, as the stored object must carry them.
    pub fields: Vec<RecordedField>,
}

impl StoredChange {
    pub fn of(
        facts: &RequestFacts<'_>,
        decision: &Decision,
        verdict: &PolicyVerdict,
        rules: &BreakGlassRules,
        now: Timestamp,
    ) -> StoredChange {
        let key = record_key(facts, decision, verdict);
        let fields = recorded_change(facts, decision, key.scope, rules, now).fields;
        StoredChange {
            key,
            rule: verdict.rule,
            policy: verdict.policy.clone(),
            user: decision.record.user.clone(),
            new_window: verdict.new_window.clone(),
            fields,
        }
    }

    /// Whether `stored` (the object as the API server has it) carries every field of the
    /// change. A field whose path cannot be read back is not carried.
    pub fn is_carried_by(&self, stored: &Value) -> bool {
        self.fields.iter().all(|field| {
            crate::fieldpath::FieldPath::parse(&field.path)
                .is_ok_and(|path| digest(value_at(stored, &path)) == field.digest)
        })
    }

    /// What to write once the change is carried, given `listed`, the records of the window's
    /// object: the same moves [`plan_recording`] plans for the verdict.
    pub fn plan<'a>(&self, listed: &'a [BackportRequirement], now: Timestamp) -> RecordWrite<'a> {
        let user = self.user.as_str();
        if self.key.scope == RecordScope::Suspension {
            let unresumed = listed.iter().find(|r| {
                r.spec.scope == RecordScope::Suspension
                    && matches!(phase_of(r), Phase::Open | Phase::Expired)
            });
            return match (self.rule, unresumed) {
                (Rule::Resumed, Some(record)) => RecordWrite::Transition {
                    record,
                    change: PhaseChange::resumed(user),
                },
                _ => RecordWrite::Nothing,
            };
        }
        let open = listed.iter().find(|r| {
            phase_of(r) == Phase::Open
                && r.spec.scope == self.key.scope
                && r.spec.window.expires_at.0 > now
        });
        match (self.rule, open, self.new_window.as_ref()) {
            (Rule::BreakGlassExtended | Rule::BreakGlassAmended, Some(record), Some(window)) => {
                RecordWrite::UpdateWindow {
                    record,
                    patch: window_patch(window),
                }
            }
            // A window driftgate has no open record of (opened before it was installed).
            (Rule::BreakGlassExtended | Rule::BreakGlassAmended, None, Some(window)) => {
                RecordWrite::Create(Box::new(self.key.new_record(
                    window,
                    &self.policy,
                    Some((user, now)),
                    PhaseChange::opened(user, window.expires_at),
                )))
            }
            _ => RecordWrite::Nothing,
        }
    }
}

/// Whether `record` holds `change` already (recorded by another replica, or by a retry).
pub fn holds(record: &BackportRequirement, change: &RecordedChange) -> bool {
    record.spec.changes.iter().any(|c| same_write(c, change))
}

/// The JSON patch appending `change` to `record`, conditioned on the record's resourceVersion.
pub fn append_patch(record: &BackportRequirement, change: &RecordedChange) -> json_patch::Patch {
    let patch = json!([
        {"op": "replace", "path": "/metadata/resourceVersion", "value": record.metadata.resource_version},
        {"op": "add", "path": "/spec/changes/-", "value": change},
    ]);
    serde_json::from_value(patch).expect("a valid JSON patch")
}

/// A record name: `<kind>-<name>-<hash>` where the hash is of the object's uid and the window's
/// first label value, so that two replicas recording the same window pick the same name.
pub fn record_name(kind: &str, name: &str, uid: &str, label_value: &str) -> String {
    let hash = Sha256::digest(format!("{uid}/{label_value}").as_bytes());
    let suffix: String = hash.iter().take(5).map(|b| format!("{b:02x}")).collect();
    let mut prefix: String = format!("{}-{}", kind.to_lowercase(), name)
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    prefix.truncate(253 - 11);
    format!("{}-{suffix}", prefix.trim_end_matches(['-', '.']))
}

/// A record of a window with no changes yet; `opened` is who opened it and when, when driftgate
/// saw it being opened.
fn new_record(
    object: RecordedObject,
    scope: RecordScope,
    window: &BreakGlassWindow,
    policy: &str,
    opened: Option<(&str, Timestamp)>,
) -> BackportRequirementSpec {
    BackportRequirementSpec {
        object,
        scope,
        window: RecordedWindow {
            opener: opened.map(|(user, _)| user.to_owned()),
            reason: window.reason.clone(),
            opened_at: opened.map(|(_, at)| Time(at)),
            expires_at: Time(window.expires_at),
            label_value: window.label_value.clone(),
        },
        policy: policy.to_owned(),
        changes: Vec::new(),
    }
}

/// The refusal of a break-glass change that could not be recorded (`error` says why).
fn unrecorded_message(record: &DecisionRecord, policy: &str, error: &str) -> String {
    let object = &record.object;
    let who = match record.user.as_str() {
        "" => crate::request::ANONYMOUS,
        user => user,
    };
    let place = match object.namespace.as_str() {
        "" => object.name.clone(),
        namespace => format!("{namespace}/{}", object.name),
    };
    format!(
        "driftgate could not record this break-glass change by {} to {} {place} in its backport ledger ({error}), so it was not made (policy \"{policy}\", rule {}). \
         Retry in a moment; if it keeps failing, driftgate cannot reach the API server.",
        who,
        object.kind,
        Rule::LedgerUnavailable,
    )
}

/// The uid of the object written, as records name it ("" when it has none yet).
fn object_uid(facts: &RequestFacts<'_>) -> String {
    facts.object_uid().unwrap_or_default().to_owned()
}

/// Label values allow 63 characters of `[A-Za-z0-9._-]`; uids fit, namespace keys are trimmed.
fn label_safe(value: &str) -> String {
    let mut out: String = value
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '-'
            }
        })
        .collect();
    out.truncate(63);
    out.trim_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_owned()
}

/// Whether two recorded changes are one write: one request (retried), or one write reviewed by
/// several webhooks (each call has its own request uid, but the same object and the same
/// resourceVersion before the change).
fn same_write(a: &RecordedChange, b: &RecordedChange) -> bool {
    a.request_uid == b.request_uid
        || (!a.resource_version.is_empty()
            && a.resource_version == b.resource_version
            && a.operation == b.operation
            && a.subresource == b.subresource
            && a.object.as_ref().map(|o| &o.uid) == b.object.as_ref().map(|o| &o.uid))
}

/// What one admitted change under a window did, with digests of the new values.
fn recorded_change(
    facts: &RequestFacts<'_>,
    decision: &Decision,
    scope: RecordScope,
    rules: &BreakGlassRules,
    now: Timestamp,
) -> RecordedChange {
    let object = &decision.record.object;
    let request = facts.request();
    let new = facts
        .object()
        .and_then(|o| serde_json::to_value(o.whole()).ok())
        .unwrap_or(Value::Null);
    let is_secret = object.group.is_empty() && object.kind == "Secret";
    let fields = decision
        .record
        .changed_fields
        .iter()
        .filter_map(|path| {
            let parsed = crate::fieldpath::FieldPath::parse(path).ok()?;
            let value = value_at(&new, &parsed);
            Some(RecordedField {
                path: path.clone(),
                digest: digest(value),
                value: if rules.record_values && !is_secret {
                    value.cloned()
                } else {
                    None
                },
            })
        })
        .collect();
    RecordedChange {
        time: Time(now),
        user: decision.record.user.clone(),
        operation: decision.record.operation.clone(),
        object: (scope == RecordScope::Namespace).then(|| RecordedObject {
            api_version: facts.api_version(),
            kind: object.kind.clone(),
            name: object.name.clone(),
            uid: object_uid(facts),
        }),
        subresource: object.subresource.clone(),
        request_uid: request.uid().to_owned(),
        resource_version: match request.operation() {
            Operation::Create => String::new(),
            _ => facts
                .old_object()
                .and_then(|o| o.metadata().resource_version.clone())
                .unwrap_or_default(),
        },
        fields,
        landed: None,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::decision::ObjectRef;
    use kube_core::DynamicObject;
    use kube_core::ResourceExt;
    use kube_core::admission::AdmissionRequest;

    pub(crate) const POLICY: &str = r#"
apiVersion: driftgate.dev/v1alpha1
kind: GatePolicy
metadata: {name: production}
spec:
  namespaces: {include: ["prod-*"]}
  controllers:
    - {name: flux, usernames: ["system:serviceaccount:flux-system:kustomize-controller"]}
  breakGlass: {maxDuration: 4h, openers: {groups: [sre]}, refuseRevertsFor: 1h, recordValues: true}
"#;

    pub(crate) fn policies() -> PolicySet {
        PolicySet::from_yaml("inline", POLICY).unwrap()
    }

    pub(crate) fn rules(policies: &PolicySet) -> &BreakGlassRules {
        policies.policies()[0].break_glass.as_ref().unwrap()
    }

    pub(crate) fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    /// `user`'s UPDATE of `kind` `name` (uid `uid`) in prod-payments from version 41, setting
    /// `spec.replicas` to `replicas`.
    pub(crate) fn update(
        user: &str,
        kind: &str,
        uid: &str,
        replicas: u32,
    ) -> AdmissionRequest<DynamicObject> {
        let (group, version) = if kind == "Deployment" {
            ("apps", "v1")
        } else {
            ("", "v1")
        };
        let object = |rv: &str, replicas: u32| {
            json!({
                "apiVersion": if group.is_empty() { version.to_owned() } else { format!("{group}/{version}") }, "kind": kind,
                "metadata": {"name": "api", "namespace": "prod-payments", "uid": uid, "resourceVersion": rv},
                "spec": {"replicas": replicas},
            })
        };
        serde_json::from_value(json!({
            "uid": "req-1",
            "kind": {"group": group, "version": version, "kind": kind},
            "resource": {"group": group, "version": version, "resource": format!("{}s", kind.to_lowercase())},
            "name": "api", "namespace": "prod-payments", "operation": "UPDATE",
            "userInfo": {"username": user},
            "object": object("42", replicas),
            "oldObject": object("41", 2),
            "dryRun": false,
        }))
        .unwrap()
    }

    pub(crate) fn window(scope: WindowScope, until: &str) -> BreakGlassWindow {
        BreakGlassWindow {
            scope,
            label_value: "20261130T1000Z".into(),
            expires_at: at(until),
            reason: Some("INC-7".into()),
        }
    }

    /// The decision admitting `request` by `rule` of policy production, with `window` as the
    /// window used (or, for opening rules, the window after the write).
    pub(crate) fn decision(
        request: &AdmissionRequest<DynamicObject>,
        rule: Rule,
        window: Option<BreakGlassWindow>,
    ) -> Decision {
        let mut verdict = PolicyVerdict::enforced("production".into(), rule, None);
        if matches!(rule, Rule::BreakGlassWindow | Rule::Controller) {
            verdict.window = window;
        } else {
            verdict.new_window = window;
        }
        if rule == Rule::Controller {
            verdict.matched = Some("flux".into());
        }
        Decision {
            allowed: true,
            message: String::new(),
            warnings: Vec::new(),
            audit_annotations: BTreeMap::new(),
            record: DecisionRecord {
                uid: request.uid.clone(),
                operation: "UPDATE".into(),
                user: request.user_info.username.clone().unwrap_or_default(),
                groups: Vec::new(),
                field_manager: None,
                dry_run: request.dry_run,
                object: ObjectRef {
                    group: request.kind.group.clone(),
                    version: request.kind.version.clone(),
                    kind: request.kind.kind.clone(),
                    resource: request.resource.resource.clone(),
                    subresource: String::new(),
                    namespace: "prod-payments".into(),
                    name: "api".into(),
                },
                rule,
                verdicts: vec![verdict],
                changed_fields: vec!["spec.replicas".into()],
            },
        }
    }

    /// An Open record of the window on Deployment api (uid `dep-uid`), ending at `until`.
    pub(crate) fn open_record(name: &str, until: &str) -> BackportRequirement {
        let request = update("alice", "Deployment", "dep-uid", 5);
        let decision = decision(&request, Rule::BreakGlassOpened, None);
        let key = WindowKey::of(
            &RequestFacts::new(&request),
            &decision,
            &decision.record.verdicts[0],
        );
        let mut new = key.new_record(
            &window(WindowScope::Object, until),
            "production",
            Some(("alice", at("2026-11-30T08:00:00Z"))),
            PhaseChange::opened("alice", at(until)),
        );
        new.record.metadata.name = Some(name.into());
        new.record.metadata.namespace = Some("prod-payments".into());
        new.record.metadata.resource_version = Some("100".into());
        new.record
    }

    fn plan<'a>(
        request: &AdmissionRequest<DynamicObject>,
        decision: &Decision,
        listed: &'a [BackportRequirement],
        now: &str,
    ) -> RecordingPlan<'a> {
        let policies = policies();
        let verdict = &decision.record.verdicts[0];
        let facts = RequestFacts::new(request);
        let key = record_key(&facts, decision, verdict);
        plan_recording(
            &key,
            &facts,
            decision,
            verdict,
            rules(&policies),
            listed,
            at(now),
        )
    }

    /// `request` as the server reads it (`review::lazy`): the objects reach the plan only
    /// through the facts, never through the envelope.
    fn lazy_body(request: &AdmissionRequest<DynamicObject>) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": request,
        }))
        .unwrap()
    }

    #[test]
    fn opening_a_window_creates_its_record_named_from_the_object_and_window() {
        let request = update("alice", "Deployment", "dep-uid", 5);
        let decision = decision(
            &request,
            Rule::BreakGlassOpened,
            Some(window(WindowScope::Object, "2026-11-30T10:00:00Z")),
        );
        let planned = plan(&request, &decision, &[], "2026-11-30T09:00:00Z");
        assert_eq!(planned.expire, []);
        let RecordWrite::Create(new) = planned.write else {
            panic!("{:?}", planned.write)
        };
        assert_eq!(
            new.record.metadata.name.as_deref(),
            Some(record_name("Deployment", "api", "dep-uid", "20261130T1000Z").as_str())
        );
        assert!(new.record.name_any().starts_with("deployment-api-"));
        assert_eq!(
            new.record.metadata.labels,
            Some(BTreeMap::from([(
                OBJECT_UID_LABEL.to_owned(),
                "dep-uid".to_owned()
            )]))
        );
        let spec = &new.record.spec;
        assert_eq!(
            (spec.scope, spec.policy.as_str()),
            (RecordScope::Object, "production")
        );
        assert_eq!(
            spec.object,
            RecordedObject {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                name: "api".into(),
                uid: "dep-uid".into(),
            }
        );
        assert_eq!(spec.window.opener.as_deref(), Some("alice"));
        assert_eq!(
            spec.window.opened_at,
            Some(Time(at("2026-11-30T09:00:00Z")))
        );
        assert_eq!(spec.window.reason.as_deref(), Some("INC-7"));
        assert_eq!(spec.changes, []);
        assert_eq!(
            new.first,
            PhaseChange::opened("alice", at("2026-11-30T10:00:00Z"))
        );
        assert_eq!(
            new.first.message,
            "alice opened the window until 2026-11-30 10:00 UTC"
        );
    }

    #[test]
    fn extending_changes_the_open_record_and_expires_one_whose_window_ended() {
        let request = update("alice", "Deployment", "dep-uid", 5);
        let extended = window(WindowScope::Object, "2026-11-30T12:00:00Z");
        let decision = decision(&request, Rule::BreakGlassExtended, Some(extended));
        let listed = [
            open_record("ended", "2026-11-30T08:30:00Z"),
            open_record("current", "2026-11-30T10:00:00Z"),
        ];
        let planned = plan(&request, &decision, &listed, "2026-11-30T09:00:00Z");
        let expired: Vec<_> = planned.expire.iter().map(|e| e.record.name_any()).collect();
        assert_eq!(expired, ["ended"]);
        assert_eq!(
            planned.write,
            RecordWrite::UpdateWindow {
                record: &listed[1],
                patch: json!({"spec": {"window": {
                    "expiresAt": "2026-11-30T12:00:00Z",
                    "labelValue": "20261130T1000Z",
                    "reason": "INC-7",
                }}}),
            }
        );
    }

    #[test]
    fn closing_moves_the_open_record_to_awaiting_backport_or_writes_nothing() {
        let request = update("alice", "Deployment", "dep-uid", 5);
        let decision = decision(&request, Rule::BreakGlassClosed, None);
        let listed = [open_record("current", "2026-11-30T10:00:00Z")];
        let planned = plan(&request, &decision, &listed, "2026-11-30T09:00:00Z");
        assert_eq!(
            planned.write,
            RecordWrite::Transition {
                record: &listed[0],
                change: PhaseChange {
                    phase: Phase::AwaitingBackport,
                    reason: "Closed",
                    message: "alice closed the window".into(),
                    reverted_fields: Vec::new(),
                    resumed_by: None,
                },
            }
        );
        // The only record's window had ended: it is expired, and there is nothing to close.
        let planned = plan(&request, &decision, &listed, "2026-11-30T10:00:00Z");
        assert_eq!(planned.expire.len(), 1);
        assert_eq!(planned.write, RecordWrite::Nothing);
    }

    #[test]
    fn a_close_or_extension_is_recorded_only_when_the_stored_object_carries_it() {
        // alice extends her window: the label's new value is what the stored object must show.
        let request = update("alice", "Deployment", "dep-uid", 5);
        let mut decision = decision(
            &request,
            Rule::BreakGlassExtended,
            Some(window(WindowScope::Object, "2026-11-30T12:00:00Z")),
        );
        decision.record.changed_fields = vec!["spec.replicas".into()];
        let verdict = &decision.record.verdicts[0];
        let policies = policies();
        let change = StoredChange::of(
            &RequestFacts::new(&request),
            &decision,
            verdict,
            rules(&policies),
            at("2026-11-30T09:00:00Z"),
        );
        assert!(waits_for_stored(Rule::BreakGlassExtended));
        assert!(change.is_carried_by(&json!({"spec": {"replicas": 5}})));
        // A forged review: the API server still has the old value, or never had the object.
        assert!(!change.is_carried_by(&json!({"spec": {"replicas": 2}})));
        assert!(!change.is_carried_by(&json!({})));
        // Carried: the open record's window is patched, as plan_recording plans it.
        let listed = [open_record("current", "2026-11-30T10:00:00Z")];
        assert!(matches!(
            change.plan(&listed, at("2026-11-30T09:00:01Z")),
            RecordWrite::UpdateWindow { record, .. } if record.metadata.name.as_deref() == Some("current")
        ));
        // Changes and windows opened are still written before the answer.
        for rule in [
            Rule::BreakGlassWindow,
            Rule::BreakGlassOpened,
            Rule::Suspended,
        ] {
            assert!(!waits_for_stored(rule), "{rule}");
        }
    }

    #[test]
    fn a_change_under_a_window_is_appended_with_digests_and_values_the_policy_allows() {
        let request = update("bob", "Deployment", "dep-uid", 5);
        let decision = decision(
            &request,
            Rule::BreakGlassWindow,
            Some(window(WindowScope::Object, "2026-11-30T10:00:00Z")),
        );
        let listed = [open_record("current", "2026-11-30T10:00:00Z")];
        let planned = plan(&request, &decision, &listed, "2026-11-30T09:00:00Z");
        let RecordWrite::Append { to, change } = planned.write else {
            panic!("{:?}", planned.write)
        };
        assert_eq!(to, AppendTo::Existing(&listed[0]));
        assert_eq!(
            change,
            RecordedChange {
                time: Time(at("2026-11-30T09:00:00Z")),
                user: "bob".into(),
                operation: "UPDATE".into(),
                object: None,
                subresource: String::new(),
                request_uid: "req-1".into(),
                resource_version: "41".into(),
                fields: vec![RecordedField {
                    path: "spec.replicas".into(),
                    digest: digest(Some(&json!(5))),
                    value: Some(json!(5)),
                }],
                landed: None,
            }
        );
        // The server's one-pass reading records the same change.
        let body = lazy_body(&request);
        let review = crate::review::lazy::parse_lazily(&body)
            .and_then(|envelope| envelope.read_heads())
            .unwrap();
        let facts = RequestFacts::of_lazy(&review);
        let policies = policies();
        let verdict = &decision.record.verdicts[0];
        let lazily = plan_recording(
            &record_key(&facts, &decision, verdict),
            &facts,
            &decision,
            verdict,
            rules(&policies),
            &listed,
            at("2026-11-30T09:00:00Z"),
        );
        let RecordWrite::Append {
            change: read_lazily,
            ..
        } = lazily.write
        else {
            panic!("{:?}", lazily.write)
        };
        assert_eq!(read_lazily, change);
        // A window opened where driftgate did not see it: its record is created first.
        let planned = plan(&request, &decision, &[], "2026-11-30T09:00:00Z");
        let RecordWrite::Append {
            to: AppendTo::New(new),
            ..
        } = planned.write
        else {
            panic!("{:?}", planned.write)
        };
        assert_eq!(new.record.spec.window.opener, None);
        assert_eq!(
            (new.first.phase, new.first.reason),
            (Phase::Open, "WindowFound")
        );
        assert_eq!(
            new.first.message,
            "bob changed the object under a window (until 2026-11-30 10:00 UTC) that was opened where driftgate did not see it"
        );
    }

    #[test]
    fn a_secret_s_values_are_never_recorded() {
        let request = update("bob", "Secret", "secret-uid", 5);
        let decision = decision(
            &request,
            Rule::BreakGlassWindow,
            Some(window(WindowScope::Object, "2026-11-30T10:00:00Z")),
        );
        let planned = plan(&request, &decision, &[], "2026-11-30T09:00:00Z");
        let RecordWrite::Append { change, .. } = planned.write else {
            panic!("{:?}", planned.write)
        };
        assert_eq!(change.fields[0].digest, digest(Some(&json!(5))));
        assert_eq!(change.fields[0].value, None);
    }

    #[test]
    fn a_namespace_wide_window_is_one_record_on_the_namespace_naming_each_object() {
        let request = update("bob", "Deployment", "dep-uid", 5);
        let decision = decision(
            &request,
            Rule::BreakGlassWindow,
            Some(window(WindowScope::Namespace, "2026-11-30T10:00:00Z")),
        );
        let key = WindowKey::of(
            &RequestFacts::new(&request),
            &decision,
            &decision.record.verdicts[0],
        );
        assert_eq!(
            key,
            WindowKey {
                namespace: "prod-payments".into(),
                scope: RecordScope::Namespace,
                object: RecordedObject {
                    api_version: "v1".into(),
                    kind: "Namespace".into(),
                    name: "prod-payments".into(),
                    uid: String::new(),
                },
                window_uid: "namespace-prod-payments".into(),
            }
        );
        assert_eq!(
            key.label_selector(),
            "driftgate.dev/object-uid=namespace-prod-payments"
        );
        // An object-scoped record of the same object is another window.
        let listed = [open_record("object-window", "2026-11-30T10:00:00Z")];
        let planned = plan(&request, &decision, &listed, "2026-11-30T09:00:00Z");
        let RecordWrite::Append {
            to: AppendTo::New(new),
            change,
        } = planned.write
        else {
            panic!("{:?}", planned.write)
        };
        assert_eq!(new.record.spec.scope, RecordScope::Namespace);
        assert!(
            new.record
                .name_any()
                .starts_with("namespace-prod-payments-")
        );
        assert_eq!(
            change.object.map(|o| (o.kind, o.uid)),
            Some(("Deployment".into(), "dep-uid".into()))
        );
    }

    #[test]
    fn the_ledger_acts_on_break_glass_and_controller_verdicts_of_policies_with_windows() {
        let policies = policies();
        let mut request = update("bob", "Deployment", "dep-uid", 5);
        let mut decision = decision(&request, Rule::BreakGlassWindow, None);
        let controller = PolicyVerdict::enforced("production".into(), Rule::Controller, None);
        let elsewhere =
            PolicyVerdict::enforced("no-such-policy".into(), Rule::BreakGlassWindow, None);
        let delegated = PolicyVerdict::enforced("production".into(), Rule::Delegation, None);
        decision
            .record
            .verdicts
            .extend([controller, elsewhere, delegated]);
        let tasks = |request: &AdmissionRequest<DynamicObject>| -> Vec<(&'static str, Rule)> {
            ledger_tasks(&RequestFacts::new(request), &decision, &policies)
                .into_iter()
                .map(|task| match task {
                    LedgerTask::Record { verdict, .. } => ("record", verdict.rule),
                    LedgerTask::JudgeControllerWrite { verdict, .. } => ("judge", verdict.rule),
                })
                .collect()
        };
        assert_eq!(
            tasks(&request),
            [
                ("record", Rule::BreakGlassWindow),
                ("judge", Rule::Controller)
            ]
        );
        // A dry run records nothing, but a controller's dry run is judged.
        request.dry_run = true;
        assert_eq!(tasks(&request), [("judge", Rule::Controller)]);
        assert_eq!(
            unrecorded_warning(&RequestFacts::new(&request), &decision),
            None
        );
        request.dry_run = false;
        assert!(
            unrecorded_warning(&RequestFacts::new(&request), &decision)
                .is_some_and(|w| w.contains("not recorded"))
        );
    }

    #[test]
    fn amending_a_windows_reason_is_recorded_as_every_change_of_a_window_is() {
        let policies = policies();
        let request = update("alice", "Deployment", "dep-uid", 5);
        let amended = decision(&request, Rule::BreakGlassAmended, None);
        let tasks: Vec<Rule> = ledger_tasks(&RequestFacts::new(&request), &amended, &policies)
            .into_iter()
            .map(|task| match task {
                LedgerTask::Record { verdict, .. } => verdict.rule,
                LedgerTask::JudgeControllerWrite { verdict, .. } => verdict.rule,
            })
            .collect();
        assert_eq!(tasks, [Rule::BreakGlassAmended]);
        assert!(unrecorded_warning(&RequestFacts::new(&request), &amended).is_some());
    }

    #[test]
    fn an_unrecorded_change_names_the_user_object_policy_and_rule_and_says_retry() {
        let request = update("alice", "Deployment", "dep-uid", 5);
        let mut decision = decision(&request, Rule::BreakGlassWindow, None);
        let refusal = Refusal::unrecorded(&decision.record, "production", "connection refused");
        assert_eq!(refusal.rule, Rule::LedgerUnavailable);
        assert_eq!(
            refusal.message,
            "driftgate could not record this break-glass change by alice to Deployment prod-payments/api in its backport ledger \
             (connection refused), so it was not made (policy \"production\", rule LedgerUnavailable). \
             Retry in a moment; if it keeps failing, driftgate cannot reach the API server."
        );
        refusal.apply_to(&mut decision);
        assert!(!decision.allowed);
        assert_eq!(decision.record.rule, Rule::LedgerUnavailable);
        let mut anonymous = decision.record.clone();
        anonymous.user.clear();
        anonymous.object.namespace.clear();
        let message = Refusal::unrecorded(&anonymous, "production", "timeout").message;
        assert!(
            message.contains("by an anonymous client to Deployment api in"),
            "{message}"
        );
    }

    fn change(request_uid: &str, resource_version: &str, subresource: &str) -> RecordedChange {
        RecordedChange {
            time: Time(Timestamp::UNIX_EPOCH),
            user: "alice".into(),
            operation: "UPDATE".into(),
            object: None,
            subresource: subresource.into(),
            request_uid: request_uid.into(),
            resource_version: resource_version.into(),
            fields: Vec::new(),
            landed: None,
        }
    }

    #[test]
    fn one_write_reviewed_by_two_webhooks_is_one_change() {
        // A retry of one request.
        assert!(same_write(&change("r1", "", ""), &change("r1", "", "")));
        // Two webhooks, one write: their own request uids, the same object version.
        assert!(same_write(
            &change("r1", "41", "scale"),
            &change("r2", "41", "scale")
        ));
        // Two writes.
        assert!(!same_write(
            &change("r1", "41", "scale"),
            &change("r2", "42", "scale")
        ));
        assert!(!same_write(
            &change("r1", "41", ""),
            &change("r2", "41", "scale")
        ));
        // CREATEs have no version before them: only the request uid tells.
        assert!(!same_write(&change("r1", "", ""), &change("r2", "", "")));
        let mut other_object = change("r2", "41", "");
        other_object.object = Some(RecordedObject {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            name: "b".into(),
            uid: "u2".into(),
        });
        let mut one_object = change("r1", "41", "");
        one_object.object = Some(RecordedObject {
            uid: "u1".into(),
            ..other_object.object.clone().unwrap()
        });
        assert!(!same_write(&one_object, &other_object));
    }

    #[test]
    fn an_append_is_conditioned_on_the_version_read_and_skipped_when_held() {
        let mut record = open_record("current", "2026-11-30T10:00:00Z");
        let patch = serde_json::to_value(append_patch(&record, &change("r1", "41", ""))).unwrap();
        assert_eq!(
            patch[0],
            json!({"op": "replace", "path": "/metadata/resourceVersion", "value": "100"})
        );
        assert_eq!(
            (patch[1]["op"].as_str(), patch[1]["path"].as_str()),
            (Some("add"), Some("/spec/changes/-"))
        );
        assert!(!holds(&record, &change("r1", "41", "")));
        record.spec.changes.push(change("r2", "41", ""));
        assert!(holds(&record, &change("r1", "41", "")));
    }

    #[test]
    fn record_names_and_labels_are_valid_kubernetes_names() {
        let name = record_name("Deployment", "My_App", "uid", "20261130T1000Z");
        assert!(name.starts_with("deployment-my-app-"), "{name}");
        assert_eq!(name.len(), "deployment-my-app-".len() + 10);
        let long = record_name("ConfigMap", &"a".repeat(300), "uid", "v");
        assert!(long.len() <= 253, "{}", long.len());
        assert_eq!(
            label_safe(&format!("namespace-{}", "x".repeat(80))).len(),
            63
        );
        assert_eq!(label_safe("-a/b-"), "a-b");
    }

    /// alice's suspension (rule Suspended) of the object, until `until`.
    fn suspension(
        user: &str,
        rule: Rule,
        until: &str,
    ) -> (AdmissionRequest<DynamicObject>, Decision) {
        let request = update(user, "Deployment", "dep-uid", 5);
        let mut decision = decision(&request, rule, Some(window(WindowScope::Object, until)));
        decision.record.changed_fields = vec![
            "spec.suspend".into(),
            "metadata.labels.driftgate.dev/break-glass".into(),
            "metadata.annotations.driftgate.dev/break-glass-reason".into(),
        ];
        (request, decision)
    }

    fn created(plan: RecordingPlan<'_>) -> NewRecord {
        match plan.write {
            RecordWrite::Create(new) => *new,
            other => panic!("expected a new record, got {other:?}"),
        }
    }

    #[test]
    fn a_suspension_creates_a_record_of_its_own_with_who_why_until_and_the_change() {
        let (request, decision) = suspension("alice", Rule::Suspended, "2026-11-30T10:00:00Z");
        // A window's record on the same object with the same expiry is another record.
        let window_record = open_record("w", "2026-11-30T10:00:00Z");
        let listed = [window_record.clone()];
        let plan = plan(&request, &decision, &listed, "2026-11-30T09:00:00Z");
        assert!(plan.expire.is_empty());
        let new = created(plan);
        let spec = &new.record.spec;
        assert_eq!(spec.scope, RecordScope::Suspension);
        assert_eq!(spec.window.opener.as_deref(), Some("alice"));
        assert_eq!(spec.window.reason.as_deref(), Some("INC-7"));
        assert_eq!(spec.window.expires_at.0, at("2026-11-30T10:00:00Z"));
        assert_eq!(spec.changes.len(), 1);
        assert_eq!(spec.changes[0].user, "alice");
        assert_eq!(new.first.phase, Phase::Open);
        assert_eq!(new.first.reason, "Suspended");
        assert!(
            new.first
                .message
                .starts_with("alice suspended it (spec.suspend) until "),
            "{}",
            new.first.message
        );
        let same_window = created(super::tests::plan(
            &update("alice", "Deployment", "dep-uid", 5),
            &decision_with(Rule::BreakGlassOpened),
            &[],
            "2026-11-30T09:00:00Z",
        ));
        assert_ne!(new.record.name_any(), same_window.record.name_any());
        assert_eq!(
            new.record
                .labels()
                .get(OBJECT_UID_LABEL)
                .map(String::as_str),
            Some("dep-uid"),
            "listed with the object's other records"
        );
    }

    fn decision_with(rule: Rule) -> Decision {
        let request = update("alice", "Deployment", "dep-uid", 5);
        decision(
            &request,
            rule,
            Some(window(WindowScope::Object, "2026-11-30T10:00:00Z")),
        )
    }

    /// The record a suspension created, in `phase`.
    fn suspension_record(phase: Phase) -> BackportRequirement {
        let (request, decision) = suspension("alice", Rule::Suspended, "2026-11-30T10:00:00Z");
        let mut record = created(plan(&request, &decision, &[], "2026-11-30T09:00:00Z")).record;
        record.metadata.resource_version = Some("7".into());
        record.status = Some(crate::records::record::BackportStatus {
            phase,
            ..Default::default()
        });
        record
    }

    #[test]
    fn a_resume_moves_the_open_or_expired_suspension_to_resumed_naming_who_and_when() {
        for phase in [Phase::Open, Phase::Expired] {
            let listed = [
                open_record("w", "2026-11-30T10:00:00Z"),
                suspension_record(phase),
            ];
            let (request, decision) = suspension("bob", Rule::Resumed, "2026-11-30T10:00:00Z");
            let plan = plan(&request, &decision, &listed, "2026-11-30T11:00:00Z");
            let RecordWrite::Transition { record, change } = plan.write else {
                panic!("expected a transition, got {:?}", plan.write);
            };
            assert_eq!(
                record.spec.scope,
                RecordScope::Suspension,
                "not the window's record"
            );
            let now = at("2026-11-30T11:00:00Z");
            let status = crate::records::phase::transitioned(record.status.as_ref(), &change, now);
            assert_eq!(status.phase, Phase::Resumed);
            assert_eq!(status.resumed_by.as_deref(), Some("bob"));
            assert_eq!(status.resumed_at.map(|t| t.0), Some(now));
            assert_eq!(status.transitions.last().unwrap().message, "bob resumed it");
        }
    }

    #[test]
    fn a_resume_without_a_suspension_record_or_of_a_resumed_one_writes_nothing() {
        for listed in [
            vec![],
            vec![open_record("w", "2026-11-30T10:00:00Z")],
            vec![suspension_record(Phase::Resumed)],
        ] {
            let (request, decision) = suspension("bob", Rule::Resumed, "2026-11-30T10:00:00Z");
            let plan = plan(&request, &decision, &listed, "2026-11-30T09:30:00Z");
            assert_eq!(plan.write, RecordWrite::Nothing);
        }
    }

    #[test]
    fn suspending_again_extends_an_open_suspension_and_renews_an_expired_one() {
        let (request, decision) = suspension("alice", Rule::Suspended, "2026-11-30T12:00:00Z");
        let open = [suspension_record(Phase::Open)];
        let plan_open = plan(&request, &decision, &open, "2026-11-30T09:30:00Z");
        assert!(
            matches!(plan_open.write, RecordWrite::UpdateWindow { .. }),
            "{:?}",
            plan_open.write
        );
        let expired = [suspension_record(Phase::Expired)];
        let plan_expired = plan(&request, &decision, &expired, "2026-11-30T10:30:00Z");
        let RecordWrite::Renew { change, patch, .. } = plan_expired.write else {
            panic!("expected a renewal, got {:?}", plan_expired.write);
        };
        assert_eq!(change.phase, Phase::Open);
        assert!(
            change
                .message
                .starts_with("alice renewed the expired suspension until "),
            "{}",
            change.message
        );
        assert_eq!(
            patch["spec"]["window"]["expiresAt"],
            json!("2026-11-30T12:00:00Z")
        );
        assert!(
            plan_expired.expire.is_empty(),
            "a suspension's record never awaits backport"
        );
    }
}
