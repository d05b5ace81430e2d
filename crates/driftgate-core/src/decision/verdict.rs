//! What a decision says: the rules, what follows from each, and the verdicts and decision that
//! carry them to the API server, the audit log, metrics, Events and the ledger.

use std::collections::BTreeMap;

use kube_core::admission::AdmissionResponse;
use serde::Serialize;

use crate::policy::{GatePolicy, PolicyIndex, PolicyMode, PolicySet};
use crate::request::RequestEnvelope;
use crate::window::BreakGlassWindow;

/// Audit annotation keys. The API server prefixes each with the webhook's name
/// (`gate.driftgate.dev/decision`); a key that already holds a `/` would be dropped by it.
pub const AUDIT_DECISION: &str = "decision";

pub const AUDIT_POLICY: &str = "policy";

pub const AUDIT_RULE: &str = "rule";

/// The reason in driftgate's hints: what to replace, never a reason itself.
pub const REASON_PLACEHOLDER: &str = "INC-…: what and why";

/// The rule that decided, in the order they are tried.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum Rule {
    /// No policy guards this write (namespace, kind, operation or subresource), or CONNECT.
    OutOfScope,
    /// A delete of a kind the policy's `deletions` protect, without the allow annotation or
    /// an open window for an opener: refused whoever asks, the controllers included.
    DeletionProtected,
    /// A controller's delete beyond the policy's `deletions.controllerLimit` in the namespace.
    DeletionLimit,
    /// A suspension of the GitOps controller's reconciliation (policy `suspensions`) by an
    /// opener, with an expiry within `maxDuration` and a reason: a break-glass window.
    Suspended,
    /// A suspension without what opening a window needs (an opener, an expiry, a reason).
    SuspensionRefused,
    /// A suspension lifted (or left to lapse): always admitted.
    Resumed,
    /// The GitOps controller's own write suspends by a field that the configuration it last
    /// applied from Git declares unsuspended: a write from a stale copy of the object (Argo
    /// CD's normalization), refused.
    SuspensionAgainstGit,
    /// The request names a controller's field manager but is not that controller.
    FieldManagerSpoofing,
    /// The controller's write is the desired state.
    Controller,
    /// The controller was refused because a break-glass window holds the object.
    ControllerHeld,
    /// A delegated identity changed only its delegated fields.
    Delegation,
    /// Nothing that matters changed.
    NoEffectiveChange,
    BreakGlassOpened,
    BreakGlassExtended,
    BreakGlassClosed,
    /// Only the reason of a window changed.
    BreakGlassAmended,
    /// An attempt to open, extend, amend or close a window that the rules do not allow.
    BreakGlassRefused,
    /// An opener's change under an open window.
    BreakGlassWindow,
    WindowExpired,
    /// The window's expiry is further away than `maxDuration`: not opened through driftgate.
    WindowTooLong,
    NotPermitted,
    /// A guarded review driftgate cannot judge: an object it could not read, or an UPDATE
    /// without both objects. Refused (fail closed).
    Unreadable,
    /// driftgate's own identity wrote one of its backport records (see `decision::ledger_guard`).
    LedgerWriter,
    /// An opener of the record's policy resolved it, with a note, their name and the time.
    RecordResolved,
    /// Only labels or annotations that are not driftgate's changed, on a record or its CRD.
    LedgerMetadata,
    /// The namespace controller deleted a record with its namespace.
    RecordDeletedWithNamespace,
    /// Somebody other than driftgate created a record.
    RecordForged,
    /// A record was deleted other than by driftgate's retention after it settled.
    RecordErased,
    /// A record's spec, phase or driftgate labels were changed by somebody other than driftgate.
    RecordTampered,
    /// A move to Resolved that is not an opener's resolution with a note, name and time.
    ResolveRefused,
    /// An identity named by `--ledger-crd-admin-*` changed or deleted the records' CRD.
    LedgerCrdAdmin,
    /// Anybody else tried to change or delete the records' CRD.
    LedgerCrdProtected,
    /// A GatePolicy object written compiles (see `decision::policy_objects`).
    PolicyCompiled,
    /// A GatePolicy object written does not compile: refused with every problem.
    PolicyRefused,
    /// The controller's write would undo an emergency change still awaiting backport, and the
    /// policy's `refuseRevertsFor` still holds it (see `ledger::controller`).
    RevertRefused,
    /// A break-glass change that could not be recorded in the backport ledger: refused, since
    /// an unrecorded emergency change would never be backported.
    LedgerUnavailable,
}

impl Rule {
    pub fn as_str(self) -> &'static str {
        match self {
            Rule::OutOfScope => "OutOfScope",
            Rule::DeletionProtected => "DeletionProtected",
            Rule::DeletionLimit => "DeletionLimit",
            Rule::Suspended => "Suspended",
            Rule::SuspensionRefused => "SuspensionRefused",
            Rule::Resumed => "Resumed",
            Rule::SuspensionAgainstGit => "SuspensionAgainstGit",
            Rule::FieldManagerSpoofing => "FieldManagerSpoofing",
            Rule::Controller => "Controller",
            Rule::ControllerHeld => "ControllerHeld",
            Rule::Delegation => "Delegation",
            Rule::NoEffectiveChange => "NoEffectiveChange",
            Rule::BreakGlassOpened => "BreakGlassOpened",
            Rule::BreakGlassExtended => "BreakGlassExtended",
            Rule::BreakGlassClosed => "BreakGlassClosed",
            Rule::BreakGlassAmended => "BreakGlassAmended",
            Rule::BreakGlassRefused => "BreakGlassRefused",
            Rule::BreakGlassWindow => "BreakGlassWindow",
            Rule::WindowExpired => "WindowExpired",
            Rule::WindowTooLong => "WindowTooLong",
            Rule::NotPermitted => "NotPermitted",
            Rule::Unreadable => "Unreadable",
            Rule::LedgerWriter => "LedgerWriter",
            Rule::RecordResolved => "RecordResolved",
            Rule::LedgerMetadata => "LedgerMetadata",
            Rule::RecordDeletedWithNamespace => "RecordDeletedWithNamespace",
            Rule::RecordForged => "RecordForged",
            Rule::RecordErased => "RecordErased",
            Rule::RecordTampered => "RecordTampered",
            Rule::ResolveRefused => "ResolveRefused",
            Rule::LedgerCrdAdmin => "LedgerCrdAdmin",
            Rule::LedgerCrdProtected => "LedgerCrdProtected",
            Rule::PolicyCompiled => "PolicyCompiled",
            Rule::PolicyRefused => "PolicyRefused",
            Rule::RevertRefused => "RevertRefused",
            Rule::LedgerUnavailable => "LedgerUnavailable",
        }
    }
}

/// What the rest of driftgate does with a verdict of a rule, stated for every rule in
/// [`Rule::properties`]: a new rule does not compile until it says each (`..NOTHING_FOLLOWS`
/// says "none of these").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RuleProperties {
    /// Its refusal tells the person to change the object in Git, which a stopped GitOps
    /// controller would not apply (the refusal then says the controller may be down).
    pub refusal_points_to_git: bool,
    /// Its `matched` names the controller whose write it judged (the controller-silence
    /// tracker counts it as that controller's write); otherwise a delegation's name, or none.
    pub judges_a_controllers_write: bool,
    /// Admitted, it changes a break-glass window or a suspension: announced by an Event.
    pub announced_when_admitted: bool,
    /// Admitted (and not a dry run), it is a break-glass change the backport ledger records.
    pub recorded: bool,
    /// It suspends or resumes the GitOps controller: its record is the suspension's.
    pub suspension: bool,
    /// The Event its refusal is reported with.
    pub refusal_event: RefusalEvent,
}

/// The Event a refusal is reported with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RefusalEvent {
    /// `WriteDenied`, the Event of most refusals.
    WriteDenied,
    /// `ControllerHeld`: the controller was held off by a window.
    ControllerHeld,
    /// `RevertRefused`: the controller would have undone a change awaiting backport.
    RevertRefused,
    /// `LedgerUnavailable`: the change could not be recorded.
    LedgerUnavailable,
    /// No Event: a GatePolicy's author sees its refusal when applying it.
    None,
}

/// The properties of a rule that has none of them (its refusals are `WriteDenied`).
pub(super) const NOTHING_FOLLOWS: RuleProperties = RuleProperties {
    refusal_points_to_git: false,
    judges_a_controllers_write: false,
    announced_when_admitted: false,
    recorded: false,
    suspension: false,
    refusal_event: RefusalEvent::WriteDenied,
};

/// A window's change, announced and recorded.
pub(super) const WINDOW_CHANGE: RuleProperties = RuleProperties {
    announced_when_admitted: true,
    recorded: true,
    ..NOTHING_FOLLOWS
};

impl Rule {
    /// What follows from a verdict of this rule (see [`RuleProperties`]).
    pub const fn properties(self) -> RuleProperties {
        match self {
            Rule::OutOfScope
            | Rule::DeletionProtected
            | Rule::DeletionLimit
            | Rule::SuspensionRefused
            | Rule::Delegation
            | Rule::NoEffectiveChange
            | Rule::BreakGlassRefused
            | Rule::WindowTooLong
            | Rule::Unreadable
            | Rule::LedgerWriter
            | Rule::RecordResolved
            | Rule::LedgerMetadata
            | Rule::RecordDeletedWithNamespace
            | Rule::RecordForged
            | Rule::RecordErased
            | Rule::RecordTampered
            | Rule::ResolveRefused
            | Rule::LedgerCrdAdmin
            | Rule::LedgerCrdProtected
            | Rule::PolicyCompiled => NOTHING_FOLLOWS,
            Rule::NotPermitted | Rule::WindowExpired | Rule::FieldManagerSpoofing => {
                RuleProperties {
                    refusal_points_to_git: true,
                    ..NOTHING_FOLLOWS
                }
            }
            Rule::Controller => RuleProperties {
                judges_a_controllers_write: true,
                ..NOTHING_FOLLOWS
            },
            Rule::ControllerHeld => RuleProperties {
                judges_a_controllers_write: true,
                refusal_event: RefusalEvent::ControllerHeld,
                ..NOTHING_FOLLOWS
            },
            Rule::RevertRefused => RuleProperties {
                judges_a_controllers_write: true,
                refusal_event: RefusalEvent::RevertRefused,
                ..NOTHING_FOLLOWS
            },
            Rule::SuspensionAgainstGit => RuleProperties {
                judges_a_controllers_write: true,
                ..NOTHING_FOLLOWS
            },
            Rule::BreakGlassOpened | Rule::BreakGlassExtended | Rule::BreakGlassWindow => {
                WINDOW_CHANGE
            }
            // The controller may close a window too (its `matched` then names it).
            Rule::BreakGlassClosed => RuleProperties {
                judges_a_controllers_write: true,
                ..WINDOW_CHANGE
            },
            // Only the reason changed: recorded, announced by nobody.
            Rule::BreakGlassAmended => RuleProperties {
                recorded: true,
                ..NOTHING_FOLLOWS
            },
            Rule::Suspended | Rule::Resumed => RuleProperties {
                suspension: true,
                ..WINDOW_CHANGE
            },
            Rule::PolicyRefused => RuleProperties {
                refusal_event: RefusalEvent::None,
                ..NOTHING_FOLLOWS
            },
            Rule::LedgerUnavailable => RuleProperties {
                refusal_event: RefusalEvent::LedgerUnavailable,
                ..NOTHING_FOLLOWS
            },
        }
    }
}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What one policy said.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyVerdict {
    /// The policy's name, for output (messages, Events, logs, records).
    pub policy: String,
    /// Where the policy is in the set the review was decided with; None for a verdict made
    /// without one (driftgate's own objects, tests). See [`PolicyVerdict::policy_in`].
    #[serde(skip)]
    pub policy_index: Option<PolicyIndex>,
    pub mode: PolicyMode,
    pub rule: Rule,
    /// After the mode: an Audit policy always admits.
    pub allowed: bool,
    /// The rule denied, and the policy is in Audit mode.
    pub would_deny: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
    /// The controller or delegation that matched, by name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub matched: Option<String>,
    /// The window that was used, held the controller, or was refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window: Option<BreakGlassWindow>,
    /// For an open/extend/amend/close: the window as it will be after this write.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub new_window: Option<BreakGlassWindow>,
    /// For a refusal: the words its message is made of, which its Event repeats. None for an
    /// admission, and for a refusal given only as a message ([`PolicyVerdict::enforced`]).
    #[serde(skip)]
    pub refusal: Option<RefusalWords>,
}

/// A refusal in parts, so that the message for the person refused and the Event that reports
/// it say the same: who may not do what, why, and what to do next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefusalWords {
    /// Who may not do what: "bob may not update Deployment prod-payments/api".
    pub subject: String,
    /// Why the rule refuses, the same for every repeat of the write: "only its controllers
    /// (flux, kubernetes) write here". Empty when `subject` says why.
    pub why: String,
    /// What to do next, without the final period: "Change it in Git, or …". Empty when `why`
    /// says it.
    pub next: String,
    /// " (policy owner: team-payments)", or "".
    pub owner: String,
}

impl RefusalWords {
    /// The refusal as an Event says it: `subject: why (policy "p", rule R). next.`
    pub fn sentence(&self, policy: &str, rule: Rule) -> String {
        self.message(policy, rule, "")
    }

    /// The refusal as the person refused reads it: the [`sentence`](Self::sentence) with
    /// `detail` after `why`, for what may change with the time of the request (an Event
    /// leaves it out, so that repeats of the write form one Event series).
    pub fn message(&self, policy: &str, rule: Rule, detail: &str) -> String {
        let mut text = self.subject.clone();
        if !self.why.is_empty() {
            text.push_str(": ");
            text.push_str(&self.why);
        }
        text.push_str(detail);
        text.push_str(&format!(" (policy \"{policy}\", rule {rule})"));
        if !self.next.is_empty() {
            text.push_str(". ");
            text.push_str(&self.next);
        }
        text.push_str(&self.owner);
        text.push('.');
        text
    }
}

impl PolicyVerdict {
    /// A verdict of driftgate on its own objects (records, GatePolicies): refused when it carries
    /// a message, and always Enforce, whatever the policy's mode (Audit concerns workloads).
    pub fn enforced(policy: String, rule: Rule, message: Option<String>) -> PolicyVerdict {
        PolicyVerdict {
            policy,
            policy_index: None,
            mode: PolicyMode::Enforce,
            rule,
            allowed: message.is_none(),
            would_deny: false,
            message,
            warning: None,
            matched: None,
            window: None,
            new_window: None,
            refusal: None,
        }
    }

    /// [`PolicyVerdict::enforced`] refusing in `words`, which its Event then repeats.
    pub fn enforced_refusal(policy: String, rule: Rule, words: RefusalWords) -> PolicyVerdict {
        let message = words.message(&policy, rule, "");
        PolicyVerdict {
            refusal: Some(words),
            ..PolicyVerdict::enforced(policy, rule, Some(message))
        }
    }

    /// The policy this verdict is of in `policies`: at its index, where the decision put it.
    /// The name there is compared, so that a verdict of another set (never on the review's
    /// path) cannot find a wrong policy; the set is searched by name only for such a verdict,
    /// or one made without an index.
    pub fn policy_in<'p>(&self, policies: &'p PolicySet) -> Option<&'p GatePolicy> {
        let indexed = self
            .policy_index
            .and_then(|index| policies.at(index))
            .filter(|policy| policy.name == self.policy);
        indexed.or_else(|| policies.policies().iter().find(|p| p.name == self.policy))
    }
}

/// The object a request writes, for records and messages.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    pub group: String,
    pub version: String,
    pub kind: String,
    pub resource: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub subresource: String,
    pub namespace: String,
    pub name: String,
}

/// Everything later side effects need to know; built without I/O.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DecisionRecord {
    pub uid: String,
    pub operation: String,
    pub user: String,
    pub groups: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field_manager: Option<String>,
    pub dry_run: bool,
    pub object: ObjectRef,
    /// The rule that decided: the first denying policy's, else the first would-deny, else the
    /// first policy's; `OutOfScope` when no policy guards the write.
    pub rule: Rule,
    pub verdicts: Vec<PolicyVerdict>,
    /// Field paths an UPDATE changed (computed only when a rule needed them).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub changed_fields: Vec<String>,
}

/// The outcome of one admission review.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Decision {
    pub allowed: bool,
    /// One or more sentences for the person whose write was refused; empty when admitted.
    pub message: String,
    pub warnings: Vec<String>,
    pub audit_annotations: BTreeMap<String, String>,
    pub record: DecisionRecord,
}

impl Decision {
    /// The audit annotation `decision`: `allowed`, `allowed-audit` or `denied`.
    pub fn verdict_word(&self) -> &'static str {
        match self
            .audit_annotations
            .get(AUDIT_DECISION)
            .map(String::as_str)
        {
            Some("denied") => "denied",
            Some("allowed-audit") => "allowed-audit",
            _ => "allowed",
        }
    }

    /// The AdmissionResponse for `request` (same uid), with warnings and audit annotations.
    pub fn to_response<'r>(&self, request: impl Into<RequestEnvelope<'r>>) -> AdmissionResponse {
        let mut response = request.into().response();
        if !self.allowed {
            response = response.deny(&self.message);
            response.result.code = 403;
            response.result.reason = "Forbidden".to_owned();
        }
        if !self.warnings.is_empty() {
            response.warnings = Some(self.warnings.clone());
        }
        response.audit_annotations = self
            .audit_annotations
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        response
    }

    /// Refuses this decision by `rule` on behalf of `policy`, for what is only known after the
    /// policies decided (the ledger's refusals). The one way to turn a decision into a refusal,
    /// so that the message, the decision record (logs, metrics, Events) and the audit
    /// annotations name the same rule. `message` names the user, the object, the policy and the
    /// rule, and says what to do next; the Event repeats it whole. Prefer
    /// [`Decision::refuse_with`], whose Event leaves out what varies between repeats.
    pub fn refuse(&mut self, policy: &str, rule: Rule, message: String) {
        self.refuse_as(policy, rule, message, None);
    }

    /// [`Decision::refuse`] in `words`, with `detail` (an API error, a time) in the message
    /// only: the Event says the words alone.
    pub fn refuse_with(&mut self, policy: &str, rule: Rule, words: RefusalWords, detail: &str) {
        let message = words.message(policy, rule, detail);
        self.refuse_as(policy, rule, message, Some(words));
    }

    fn refuse_as(
        &mut self,
        policy: &str,
        rule: Rule,
        message: String,
        words: Option<RefusalWords>,
    ) {
        if let Some(verdict) = self.record.verdicts.iter_mut().find(|v| v.policy == policy) {
            verdict.rule = rule;
            verdict.allowed = false;
            verdict.would_deny = false;
            verdict.message = Some(message.clone());
            verdict.refusal = words;
        }
        self.allowed = false;
        self.message = message;
        self.record.rule = rule;
        self.audit_annotations
            .insert(AUDIT_DECISION.to_owned(), "denied".to_owned());
        self.audit_annotations
            .insert(AUDIT_RULE.to_owned(), rule.as_str().to_owned());
        self.audit_annotations
            .insert(AUDIT_POLICY.to_owned(), policy.to_owned());
    }
}

/// What API discovery says about the resource a request names (`group`/`resource`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiscoveredResource {
    /// The kind the resource serves: for `rollouts` (and so `rollouts/scale`) `Rollout`, never
    /// the `Scale` that a scale request carries.
    pub kind: String,
    /// Whether `status` is a subresource. Without one the API server stores `.status` written
    /// through the object itself, so there it is judged like any other field.
    pub has_status: bool,
}
