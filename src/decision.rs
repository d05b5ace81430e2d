//! The decision: `request + policies + namespace + parent + now -> Decision`, with no I/O.
//!
//! A write is guarded by every policy whose scope matches it and admitted only if every one of
//! them admits it. For one policy the rules run in a fixed order (see [`Rule`]); the first that
//! applies decides. Everything the service later needs for side effects (Events, the backport
//! record) is in [`DecisionRecord`], so this module never talks to anything.

use std::cell::OnceCell;
use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::authentication::v1::UserInfo;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionResponse, Operation};
use serde::Serialize;

use crate::cascade::{DeletionCascade, Dependent, orphans_dependents};
use crate::deletions::{RecentDeletes, within};
use crate::diff::{changed_paths, changed_status_paths};
use crate::fieldpath::FieldPath;
use crate::ledger::guard::LedgerGuard;
use crate::ownership::forged_ownership;
use crate::policy::document::GuardedOperation;
use crate::policy::scope::{NamespaceScope, may_carry_suspension};
use crate::policy::{
    BreakGlassRules, DeletionRules, GatePolicy, NamespaceLabels, PolicyMode, PolicySet,
};
use crate::request::{
    RequestEnvelope, RequestFacts, ReviewObject, is_namespace_object, scope_namespace,
};
use crate::silence::ControllerSilence;
use crate::text::{MAX_NAME_CHARS, MAX_REASON_CHARS, MAX_WARNING_CHARS, echo, warning};
use crate::timefmt::{WindowDuration, human_utc, parse_expiry};

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
    /// driftgate's own identity wrote one of its backport records (see `ledger::guard`).
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
    /// A GatePolicy object written compiles (see `policy::admission`).
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
const NOTHING_FOLLOWS: RuleProperties = RuleProperties {
    refusal_points_to_git: false,
    judges_a_controllers_write: false,
    announced_when_admitted: false,
    recorded: false,
    suspension: false,
    refusal_event: RefusalEvent::WriteDenied,
};

/// A window's change, announced and recorded.
const WINDOW_CHANGE: RuleProperties = RuleProperties {
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

/// Where a break-glass window was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum WindowScope {
    Object,
    Namespace,
}

/// A break-glass window as read from a label (and its reason annotation).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BreakGlassWindow {
    pub scope: WindowScope,
    pub label_value: String,
    pub expires_at: Timestamp,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// What one policy said.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyVerdict {
    pub policy: String,
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

/// Inputs to a decision besides the policies.
#[derive(Clone, Copy, Debug)]
pub struct DecisionInput<'a> {
    /// The request, described once per review.
    pub request: &'a RequestFacts<'a>,
    /// Metadata of the request's Namespace; `None` when unknown, which closes namespace windows.
    pub namespace: Option<&'a ObjectMeta>,
    /// For a subresource request (`scale`): the parent object as stored, whose labels carry the
    /// window. `None`: no object window applies.
    pub parent: Option<&'a DynamicObject>,
    /// The request's resource as API discovery knows it; `None`: not known (no cluster, or a
    /// resource discovery has not seen), which fails closed: a subresource of an unknown kind
    /// is in scope, and `status` is judged.
    pub resource: Option<&'a DiscoveredResource>,
    /// For a DELETE: the controllers' recent deletes in its namespace, by policy. `None` (no
    /// tally, as in `eval`): no `controllerLimit` applies.
    pub recent_deletes: Option<&'a RecentDeletes>,
    pub now: Timestamp,
    /// When the policies' GitOps controllers last wrote, as the server saw it; `None`: not
    /// known (`eval`, tests), and refusals say nothing about a stopped controller.
    pub silence: Option<&'a ControllerSilence>,
}

/// What every policy looks at, computed once per request.
struct Facts<'a> {
    input: &'a DecisionInput<'a>,
    about: &'a RequestFacts<'a>,
    operation: Option<GuardedOperation>,
    /// The subresource the write is judged as: "" for the object itself.
    subresource: &'a str,
    /// A subresource write judged as a write to the object itself, because its effect reaches
    /// beyond the subresource (labels, annotations, finalizers, owners, spec, ownership): the
    /// API server keeps such changes through `status` of Services and Namespaces, through
    /// `namespaces/finalize`, `pods/resize` and others (tests/SECURITY.md).
    through: Option<&'a str>,
    /// The namespace that scopes the write; for a Namespace object, its own name.
    namespace: Option<&'a str>,
    /// The kind of the object written (for a subresource, of its parent); the resource's name
    /// when the kind could not be resolved.
    kind: &'a str,
    /// Whether `kind` was resolved: false for a subresource whose parent kind neither discovery
    /// nor the parent object told.
    kind_known: bool,
    /// Whether `.status` counts as a change: where the resource has no status subresource.
    judge_status: bool,
    user: &'a UserInfo,
    changes: OnceCell<Changes>,
    /// For a DELETE: the protected objects the garbage collector would delete with the object,
    /// as the server read them; None when not read (no cluster, `eval`).
    cascade: Option<&'a DeletionCascade>,
}

/// What an UPDATE changed.
#[derive(Default)]
struct Changes {
    paths: Vec<FieldPath>,
    /// How `managedFields` changed beyond the API server's bookkeeping (then `paths` holds
    /// `metadata.managedFields` too).
    forged_ownership: Option<String>,
}

/// The changes of an UPDATE: the fields that differ, `.status` where it is judged, and
/// `metadata.managedFields` when ownership changed beyond the API server's bookkeeping. A
/// subresource write cannot forge ownership (the API server starts from the stored
/// managedFields there, tests/SECURITY.md), so its managedFields are its own bookkeeping.
fn effective_changes(
    old: &DynamicObject,
    new: &DynamicObject,
    field_manager: Option<&str>,
    judge_status: bool,
    through_subresource: bool,
) -> Changes {
    let mut paths = changed_paths(old, new);
    if judge_status {
        paths.extend(changed_status_paths(old, new));
    }
    if through_subresource {
        return Changes {
            paths,
            forged_ownership: None,
        };
    }
    let forged_ownership = forged_ownership(
        old.metadata.managed_fields.as_deref(),
        new.metadata.managed_fields.as_deref(),
        field_manager,
        &paths,
    );
    if forged_ownership.is_some() {
        paths.push(FieldPath::new(["metadata", "managedFields"]));
    }
    Changes {
        paths,
        forged_ownership,
    }
}

/// The kind a request writes: the request's own for the object itself; for a subresource, the
/// parent's, from discovery or the parent object. Never guessed: `false` when unknown, with the
/// resource's name in its place.
fn resolve_kind<'a>(input: &DecisionInput<'a>, subresource: &str) -> (&'a str, bool) {
    let request = input.request.request();
    if subresource.is_empty() {
        return (&request.kind().kind, true);
    }
    let parent_kind = input
        .parent
        .and_then(|p| p.types.as_ref())
        .map(|t| t.kind.as_str());
    match input.resource.map(|r| r.kind.as_str()).or(parent_kind) {
        Some(kind) if !kind.is_empty() => (kind, true),
        _ => (&request.resource().resource, false),
    }
}

impl<'a> Facts<'a> {
    fn new(input: &'a DecisionInput<'a>) -> Self {
        let about = input.request;
        let request = about.request();
        let subresource = about.subresource();
        let (kind, kind_known) = resolve_kind(input, subresource);
        let mut facts = Facts {
            input,
            about,
            operation: about.guarded_operation(),
            subresource,
            through: None,
            namespace: about.scope_namespace(),
            kind,
            kind_known,
            judge_status: subresource.is_empty() && input.resource.is_none_or(|r| !r.has_status),
            user: request.user_info(),
            changes: OnceCell::new(),
            cascade: None,
        };
        // Judged by effect, not by path: a subresource write that carries the whole object and
        // changes more than the subresource's own part is a write to the object.
        if facts.carries_whole_object() && !facts.changes().is_empty() {
            facts.through = Some(subresource);
            facts.subresource = "";
            // The objects are the parent itself, so they name its kind.
            facts.kind = &request.kind().kind;
            facts.kind_known = true;
        }
        facts
    }

    /// A subresource UPDATE whose objects are the parent itself (`status`, `finalize`,
    /// `resize`), not another kind (`Scale`). Unresolved parents count unless the objects are
    /// of another group or a Scale.
    fn carries_whole_object(&self) -> bool {
        let request = self.request();
        let same_kind = if self.kind_known {
            request.kind().kind == self.kind
        } else {
            request.kind().group == request.resource().group && request.kind().kind != "Scale"
        };
        !self.subresource.is_empty()
            && request.operation() == Operation::Update
            && self.about.object().is_some()
            && self.about.old_object().is_some()
            && same_kind
    }

    /// The envelope: who, what, where, which operation.
    fn request(&self) -> RequestEnvelope<'a> {
        self.about.request()
    }

    fn group(&self) -> &str {
        &self.request().resource().group
    }

    /// Changed field paths of an UPDATE; empty for other operations.
    fn changes(&self) -> &[FieldPath] {
        &self.all_changes().paths
    }

    fn all_changes(&self) -> &Changes {
        self.changes.get_or_init(|| {
            match (
                &self.request().operation(),
                self.about.old_object(),
                self.about.object(),
            ) {
                (Operation::Update, Some(old), Some(new)) => {
                    let through_subresource = !self.about.subresource().is_empty();
                    effective_changes(
                        old.whole(),
                        new.whole(),
                        self.about.field_manager(),
                        self.judge_status,
                        through_subresource,
                    )
                }
                _ => Changes::default(),
            }
        })
    }

    fn is_update(&self) -> bool {
        self.operation == Some(GuardedOperation::Update)
    }

    /// The stored object whose labels may carry a window: `oldObject` for the object itself,
    /// the caller-supplied parent for a subresource. A CREATE has none.
    fn stored_meta(&self) -> Option<&'a ObjectMeta> {
        if self.subresource.is_empty() {
            match self.request().operation() {
                Operation::Update | Operation::Delete => {
                    self.about.old_object().map(|o| o.metadata())
                }
                _ => None,
            }
        } else {
            self.input.parent.map(|p| &p.metadata)
        }
    }

    /// The object as it will be after an UPDATE of the object itself.
    fn new_meta(&self) -> Option<&'a ObjectMeta> {
        self.about.object().map(|o| o.metadata())
    }

    /// "Deployment prod-payments/api", "Deployment prod-payments/api (scale)", "Service
    /// prod-payments/api (through status)".
    fn object_words(&self) -> String {
        self.about
            .object_words(self.kind, self.subresource, self.through)
    }

    /// "bob may not update Deployment prod-payments/api": the subject of most refusals.
    fn may_not(&self) -> String {
        format!(
            "{} may not {} {}",
            self.about.who(),
            self.about.operation_word(),
            self.object_words()
        )
    }

    /// The command an opener would run, for denial messages.
    fn open_command(&self) -> String {
        let name = echo(self.request().name(), MAX_NAME_CHARS);
        if self.is_namespace_object() {
            // The namespace-wide window is on the Namespace itself, named as kubectl names it.
            return format!(
                "driftgate break-glass open namespace/{name} --for 1h --reason \"{REASON_PLACEHOLDER}\""
            );
        }
        let target = format!("{}/{name}", self.target_type());
        let Some(ns) = self.namespace else {
            // A cluster-scoped object: its window is on the object, found without -n.
            return format!(
                "driftgate break-glass open {target} --for 1h --reason \"{REASON_PLACEHOLDER}\""
            );
        };
        format!(
            "driftgate break-glass open {target} -n {ns} --for 1h --reason \"{REASON_PLACEHOLDER}\""
        )
    }

    /// How kubectl names the type: `deployment` for the core and apps groups, whose kinds are
    /// unambiguous, and the fully qualified resource otherwise
    /// (`services.serving.knative.dev`), so that a Knative Service never resolves to the core
    /// Service.
    fn target_type(&self) -> String {
        let group = self.group();
        let resource = &self.request().resource().resource;
        if !group.is_empty() && group != "apps" {
            format!("{resource}.{group}")
        } else if self.kind_known {
            self.kind.to_lowercase()
        } else {
            resource.clone()
        }
    }

    fn is_namespace_object(&self) -> bool {
        self.about.is_namespace_object()
    }
}

/// The state of the break-glass label on one object.
#[derive(Clone, Debug)]
enum WindowState {
    Absent,
    Open(BreakGlassWindow),
    Expired(BreakGlassWindow),
    TooLong(BreakGlassWindow),
    Malformed { value: String, problem: String },
}

impl WindowState {
    /// The window, whatever its state; None when there is no readable label.
    fn window(&self) -> Option<&BreakGlassWindow> {
        match self {
            WindowState::Open(w) | WindowState::Expired(w) | WindowState::TooLong(w) => Some(w),
            WindowState::Absent | WindowState::Malformed { .. } => None,
        }
    }
}

fn window_state(
    meta: &ObjectMeta,
    rules: &BreakGlassRules,
    now: Timestamp,
    scope: WindowScope,
) -> WindowState {
    let Some(value) = meta.labels.as_ref().and_then(|l| l.get(&rules.label)) else {
        return WindowState::Absent;
    };
    let expires_at = match parse_expiry(value) {
        Ok(at) => at,
        Err(error) => {
            return WindowState::Malformed {
                value: value.clone(),
                problem: error.to_string(),
            };
        }
    };
    let window = BreakGlassWindow {
        scope,
        label_value: value.clone(),
        expires_at,
        reason: reason_of(meta, rules),
    };
    if expires_at <= now {
        WindowState::Expired(window)
    } else if expires_at > latest_expiry(now, rules.max_duration) {
        WindowState::TooLong(window)
    } else {
        WindowState::Open(window)
    }
}

/// How far a window's expiry may lie beyond `maxDuration` from this replica's clock. The CLI
/// computes the expiry from the opener's clock, and every replica checks it against its own; a
/// window opened at exactly `maxDuration` must not be refused by a replica whose clock is a few
/// seconds behind, nor leave the controller unheld there (WindowTooLong).
pub const EXPIRY_CLOCK_TOLERANCE: jiff::SignedDuration = jiff::SignedDuration::from_secs(60);

/// The latest expiry a window may have now: `maxDuration` from now, plus the clock tolerance.
fn latest_expiry(now: Timestamp, max: WindowDuration) -> Timestamp {
    now.checked_add(max.as_signed())
        .and_then(|t| t.checked_add(EXPIRY_CLOCK_TOLERANCE))
        .unwrap_or(Timestamp::MAX)
}

fn reason_of(meta: &ObjectMeta, rules: &BreakGlassRules) -> Option<String> {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(&rules.reason_annotation))
        .map(|r| r.trim())
        .filter(|r| !r.is_empty())
        .map(str::to_owned)
}

fn describe_window(window: &BreakGlassWindow) -> String {
    describe_window_within(window, MAX_REASON_CHARS)
}

/// [`describe_window`] with at most `reason_chars` of the reason.
fn describe_window_within(window: &BreakGlassWindow, reason_chars: usize) -> String {
    let place = match window.scope {
        WindowScope::Object => "on the object",
        WindowScope::Namespace => "on the namespace",
    };
    match &window.reason {
        Some(reason) => format!(
            "the break-glass window {place} (until {}, reason \"{}\")",
            human_utc(window.expires_at),
            echo(reason, reason_chars)
        ),
        None => format!(
            "the break-glass window {place} (until {}, no reason given)",
            human_utc(window.expires_at)
        ),
    }
}

/// The windows that may cover this write: on the stored object, and on its namespace.
fn windows(facts: &Facts<'_>, rules: &BreakGlassRules) -> Vec<WindowState> {
    let now = facts.input.now;
    let mut states = Vec::with_capacity(2);
    if let Some(meta) = facts.stored_meta() {
        states.push(window_state(meta, rules, now, WindowScope::Object));
    }
    if rules.namespace_wide
        && let Some(ns) = facts.input.namespace
    {
        states.push(window_state(ns, rules, now, WindowScope::Namespace));
    }
    states
}

fn open_window(states: &[WindowState]) -> Option<&BreakGlassWindow> {
    states.iter().find_map(|s| match s {
        WindowState::Open(w) => Some(w),
        _ => None,
    })
}

/// A verdict before the policy's mode is applied.
struct RuleOutcome {
    rule: Rule,
    admit: bool,
    message: Option<String>,
    warning: Option<String>,
    matched: Option<String>,
    window: Option<BreakGlassWindow>,
    new_window: Option<BreakGlassWindow>,
    refusal: Option<RefusalWords>,
}

impl RuleOutcome {
    fn admit(rule: Rule) -> Self {
        RuleOutcome {
            rule,
            admit: true,
            message: None,
            warning: None,
            matched: None,
            window: None,
            new_window: None,
            refusal: None,
        }
    }

    /// A refusal by `rule` of `policy` in `words`, with `detail` in its message only.
    fn refuse(rule: Rule, policy: &GatePolicy, words: RefusalWords, detail: &str) -> Self {
        RuleOutcome {
            admit: false,
            message: Some(words.message(&policy.name, rule, detail)),
            refusal: Some(words),
            ..RuleOutcome::admit(rule)
        }
    }
}

/// What an UPDATE does to the break-glass label and reason.
enum BreakGlassChange {
    Opened(BreakGlassWindow),
    Extended(BreakGlassWindow),
    Amended(Option<BreakGlassWindow>),
    Closed,
}

/// Whether a subresource request's decision could change with its parent's break-glass window:
/// a person refused for want of a window, or a controller that a window would hold. Only then
/// is the parent worth a GET.
pub fn needs_parent(policies: &PolicySet, decision: &Decision) -> bool {
    if decision.record.object.subresource.is_empty() {
        return false;
    }
    decision.record.verdicts.iter().any(|verdict| {
        let rules = policies
            .policies()
            .iter()
            .find(|p| p.name == verdict.policy)
            .and_then(|p| p.break_glass.as_ref());
        match (verdict.rule, rules) {
            (Rule::NotPermitted, Some(_)) => true,
            (Rule::Controller, Some(rules)) => rules.hold_controller && held(policies, verdict),
            _ => false,
        }
    })
}

/// The delegation that admits an UPDATE: one of the writer's whose `fields` cover every
/// change (there is at least one), through one of its subresources. Never a change to the
/// break-glass label or reason, which only the break-glass rules judge (rule 6).
fn delegated(policy: &GatePolicy, facts: &Facts<'_>) -> Option<RuleOutcome> {
    if !facts.is_update() {
        return None;
    }
    let changes = facts.changes();
    if changes.is_empty() {
        return None;
    }
    if let Some(rules) = policy.break_glass.as_ref()
        && changes.iter().any(|path| is_break_glass_path(path, rules))
    {
        return None;
    }
    let delegation = policy.delegations.iter().find(|delegation| {
        delegation.identity.matches(facts.user)
            && delegation
                .subresources
                .iter()
                .any(|s| s == facts.subresource)
            && changes
                .iter()
                .all(|path| delegation.fields.iter().any(|f| f.covers(path)))
    })?;
    let mut outcome = RuleOutcome::admit(Rule::Delegation);
    outcome.matched = Some(delegation.name.clone());
    Some(outcome)
}

/// Whether the controller a verdict matched is one that windows hold.
fn held(policies: &PolicySet, verdict: &PolicyVerdict) -> bool {
    policies
        .policies()
        .iter()
        .filter(|p| p.name == verdict.policy)
        .flat_map(|p| &p.controllers)
        .find(|c| verdict.matched.as_deref() == Some(c.name.as_str()))
        .is_none_or(|c| c.held_by_windows)
}

/// Decides the whole request against every policy, with no identity trusted to write backport
/// records (`driftgate eval`); `serve` uses [`decide_with_ledger`].
pub fn decide(policies: &PolicySet, input: &DecisionInput<'_>) -> Decision {
    decide_with_ledger(policies, input, &LedgerGuard::default())
}

/// [`decide`], with `ledger` saying who writes backport records and their CRD: writes of those
/// are judged by `ledger::guard` alone, in every namespace.
pub fn decide_with_ledger(
    policies: &PolicySet,
    input: &DecisionInput<'_>,
    ledger: &LedgerGuard,
) -> Decision {
    decide_with_cascade(policies, input, ledger, None)
}

/// [`decide_with_ledger`], with `cascade` the protected objects a DELETE would take with it, as
/// the server read them for the [`cascade_query`]: each is judged as if it were deleted itself.
pub fn decide_with_cascade<'a>(
    policies: &PolicySet,
    input: &'a DecisionInput<'a>,
    ledger: &LedgerGuard,
    cascade: Option<&'a DeletionCascade>,
) -> Decision {
    let mut facts = Facts::new(input);
    facts.cascade = cascade;
    if let Some(verdict) = crate::policy::admission::judge(input.request) {
        return assemble(&facts, vec![verdict]);
    }
    if let Some(verdict) = crate::ledger::guard::judge(policies, ledger, input.request, input.now) {
        return assemble(&facts, vec![verdict]);
    }
    let mut verdicts = Vec::new();
    for policy in policies.policies() {
        if let Some(outcome) = evaluate(policy, &facts) {
            verdicts.push(with_silence(apply_mode(policy, outcome), policy, input));
        }
    }
    assemble(&facts, verdicts)
}

/// A person told to change the object in Git is also told when the policy's GitOps controller
/// looks stopped, because then Git does not reach the cluster (see `silence`). The message only:
/// the Event's words stay the same for every repeat of the write.
fn with_silence(
    mut verdict: PolicyVerdict,
    policy: &GatePolicy,
    input: &DecisionInput<'_>,
) -> PolicyVerdict {
    let Some(silence) = input.silence.filter(|_| !verdict.allowed) else {
        return verdict;
    };
    if let (true, Some(message), Some(sentence)) = (
        verdict.rule.properties().refusal_points_to_git,
        verdict.message.as_mut(),
        silence.sentence(policy, input.now),
    ) {
        message.push(' ');
        message.push_str(&sentence);
    }
    verdict
}

fn in_scope(policy: &GatePolicy, facts: &Facts<'_>) -> bool {
    let Some(operation) = facts.operation else {
        return false;
    };
    policy.guards_operation(operation)
        && policy.guards_subresource(facts.subresource)
        && if facts.namespace.is_none() {
            guards_cluster_object(policy, facts)
        } else {
            guards_namespace(policy, facts)
                && if facts.kind_known {
                    policy.guards_resource(
                        facts.group(),
                        facts.kind,
                        &facts.request().resource().resource,
                    )
                } else {
                    policy.guards_unresolved_resource(
                        facts.group(),
                        &facts.request().resource().resource,
                    )
                }
        }
}

/// Whether the write is of a cluster-scoped object (not a Namespace, which scopes itself) of a
/// kind the policy's `clusterScoped` lists. `resources` does not apply: no namespace selects it.
fn guards_cluster_object(policy: &GatePolicy, facts: &Facts<'_>) -> bool {
    facts.namespace.is_none()
        && facts.kind_known
        && policy.guards_cluster_kind(facts.group(), facts.kind)
}

fn guards_namespace(policy: &GatePolicy, facts: &Facts<'_>) -> bool {
    namespace_scope(policy, facts).guarded
}

/// Which of the policy's rules judge the write's namespace (none for a cluster-scoped object):
/// the one definition the keeper and the envelope-first path read too (`policy::scope`).
fn namespace_scope(policy: &GatePolicy, facts: &Facts<'_>) -> NamespaceScope {
    let Some(namespace) = facts.namespace else {
        return NamespaceScope::default();
    };
    policy.namespace_scope(namespace, namespace_labels(facts.input.namespace))
}

/// The labels of the Namespace as cached; unknown without it.
fn namespace_labels(namespace: Option<&ObjectMeta>) -> NamespaceLabels<'_> {
    match namespace {
        Some(meta) => NamespaceLabels::Known(meta.labels.as_ref().unwrap_or(empty_labels())),
        None => NamespaceLabels::Unknown,
    }
}

fn empty_labels() -> &'static BTreeMap<String, String> {
    static EMPTY: BTreeMap<String, String> = BTreeMap::new();
    &EMPTY
}

/// The rules for one policy, in order. `None`: the policy does not guard this write.
fn evaluate(policy: &GatePolicy, facts: &Facts<'_>) -> Option<RuleOutcome> {
    // Nothing outside where the policy judges at all: the blast-radius keeper leaves those
    // namespaces out of the webhook, so no rule may depend on them.
    if !namespace_scope(policy, facts).judged() && !guards_cluster_object(policy, facts) {
        return None;
    }
    // 1. Destructive deletes, whatever `resources` and `operations` guard.
    if let Some(refusal) = refuse_deletion(policy, facts) {
        return Some(refusal);
    }
    // Then suspensions of the GitOps controller, in the policy's namespaces and in those that
    // hold the GitOps objects.
    if let Some(outcome) = judge_suspension(policy, facts) {
        return Some(outcome);
    }
    if !in_scope(policy, facts) {
        return None;
    }
    let user = facts.user;
    let who = facts.about.who();

    // An UPDATE must show both sides, or no rule can tell what it changes: fail closed.
    if facts.is_update()
        && let Some(missing) = missing_object(facts.about)
    {
        let words = RefusalWords {
            subject: facts.may_not(),
            why: format!(
                "the review carries no {missing}, so driftgate cannot tell what the write changes"
            ),
            next: "The API server always sends both; if this keeps happening, check what sits between it and driftgate".to_owned(),
            owner: owner_suffix(policy),
        };
        return Some(RuleOutcome::refuse(Rule::Unreadable, policy, words, ""));
    }

    // 2. A field manager is chosen by the client: one that names a controller is only believed
    //    from that controller's identity.
    if let Some(raw_fm) = facts.about.field_manager() {
        let fm = echo(raw_fm, MAX_NAME_CHARS);
        let claimed: Vec<_> = policy
            .controllers
            .iter()
            .filter(|c| c.field_managers.is_match(raw_fm))
            .collect();
        if !claimed.is_empty() && !claimed.iter().any(|c| c.identity.matches(user)) {
            let words = RefusalWords {
                subject: format!("{} with field manager \"{fm}\"", facts.may_not()),
                why: format!("it belongs to controller {}", claimed[0].name),
                next: "Writing as the controller would hand it ownership of your change and hide the drift from it; \
                       use your own field manager, and change the object in Git"
                    .to_owned(),
                owner: owner_suffix(policy),
            };
            return Some(RuleOutcome::refuse(
                Rule::FieldManagerSpoofing,
                policy,
                words,
                "",
            ));
        }
    }

    let rules = policy.break_glass.as_ref();

    // 3. The controller's writes are the desired state, unless a window holds the object (and
    //    the controller is one that windows hold: GitOps, not Kubernetes' own).
    let controller = policy.controllers.iter().find(|c| {
        c.identity.matches(user)
            && match facts.about.field_manager() {
                None => true,
                Some(fm) => c.field_manager_patterns.is_empty() || c.field_managers.is_match(fm),
            }
    });
    if let Some(controller) = controller {
        if let Some(rules) = rules.filter(|r| r.hold_controller && controller.held_by_windows) {
            let states = windows(facts, rules);
            if let Some(window) = open_window(&states) {
                if closes_window_only(facts, rules) {
                    let mut outcome = RuleOutcome::admit(Rule::BreakGlassClosed);
                    outcome.matched = Some(controller.name.clone());
                    outcome.window = Some(window.clone());
                    return Some(outcome);
                }
                // A window holds the controller off what Git declares, not off the fields the
                // policy delegates to the same identity: Argo CD's application-controller
                // writes an Application's status and `operation` through the object itself,
                // and held off them it would never sync the emergency change.
                if let Some(outcome) = delegated(policy, facts) {
                    return Some(outcome);
                }
                let words = RefusalWords {
                    subject: format!(
                        "Controller {} ({who}) may not {} {} while {} holds it",
                        controller.name,
                        facts.about.operation_word(),
                        facts.object_words(),
                        describe_window(window),
                    ),
                    why: String::new(),
                    next: format!(
                        "Backport the emergency change to Git, then close the window (remove the label {}) so the controller can reconcile again",
                        rules.label
                    ),
                    owner: String::new(),
                };
                let mut outcome = RuleOutcome::refuse(Rule::ControllerHeld, policy, words, "");
                outcome.matched = Some(controller.name.clone());
                outcome.window = Some(window.clone());
                return Some(outcome);
            }
        }
        let mut outcome = RuleOutcome::admit(Rule::Controller);
        outcome.matched = Some(controller.name.clone());
        return Some(outcome);
    }

    // 4. Delegations: named identities limited to named fields.
    if facts.is_update() {
        if let Some(outcome) = delegated(policy, facts) {
            return Some(outcome);
        }
        // 5. Nothing that matters changed.
        if facts.changes().is_empty() {
            return Some(RuleOutcome::admit(Rule::NoEffectiveChange));
        }
    }

    let Some(rules) = rules else {
        return Some(not_permitted(policy, facts, None));
    };

    // 6. Changes to the break-glass label or reason must follow the break-glass rules, whether
    //    or not other fields change in the same write.
    let mut new_window = None;
    if facts.is_update() && facts.subresource.is_empty() {
        let changes = facts.changes();
        let touched = changes
            .iter()
            .filter(|p| is_break_glass_path(p, rules))
            .count();
        if touched > 0 {
            match break_glass_change(facts, rules) {
                Err(problem) => {
                    return Some(refuse_window_change(facts, policy, problem));
                }
                Ok(change) => {
                    let (rule, window) = match change {
                        BreakGlassChange::Opened(w) => (Rule::BreakGlassOpened, Some(w)),
                        BreakGlassChange::Extended(w) => (Rule::BreakGlassExtended, Some(w)),
                        BreakGlassChange::Amended(w) => (Rule::BreakGlassAmended, w),
                        BreakGlassChange::Closed => (Rule::BreakGlassClosed, None),
                    };
                    if touched == changes.len() {
                        let mut outcome = RuleOutcome::admit(rule);
                        if let Some(w) = &window {
                            outcome.warning = Some(warning(format!(
                                "driftgate: break-glass window open on {} until {} ({}); {}every change made in it must be backported to Git.",
                                facts.object_words(),
                                human_utc(w.expires_at),
                                w.label_value,
                                held_controllers(policy, rules),
                            )));
                        }
                        outcome.new_window = window;
                        // The window as it was, so that a close can say what it closed.
                        outcome.window = facts.stored_meta().and_then(|meta| {
                            window_state(meta, rules, facts.input.now, WindowScope::Object)
                                .window()
                                .cloned()
                        });
                        return Some(outcome);
                    }
                    new_window = window;
                }
            }
        }
    }

    // 7. An open window admits its openers.
    let states = windows(facts, rules);
    if let Some(window) = open_window(&states) {
        if rules.openers.matches(user) {
            let mut outcome = RuleOutcome::admit(Rule::BreakGlassWindow);
            // The API server keeps 256 characters of a warning: the sentence is short, and the
            // reason gives way, so that the instruction at its end survives.
            let object = facts.object_words();
            let text = |reason_chars| {
                format!(
                    "driftgate: {who} changed {object} under {}; backport it to Git before the window closes.",
                    describe_window_within(window, reason_chars),
                )
            };
            let without_reason = text(0).chars().count();
            let reason_chars =
                MAX_REASON_CHARS.min(MAX_WARNING_CHARS.saturating_sub(without_reason + 1));
            outcome.warning = Some(warning(text(reason_chars)));
            outcome.window = Some(window.clone());
            outcome.new_window = new_window;
            return Some(outcome);
        }
        let mut outcome = not_permitted(policy, facts, Some(window));
        outcome.window = Some(window.clone());
        return Some(outcome);
    }
    for state in &states {
        if let WindowState::TooLong(window) = state {
            let words = RefusalWords {
                subject: facts.may_not(),
                why: format!(
                    "its break-glass label {} expires at {}, more than the policy's maxDuration of {} from now, so it cannot have been opened through driftgate",
                    window.label_value,
                    human_utc(window.expires_at),
                    rules.max_duration,
                ),
                next: format!(
                    "Close it and open a new window with {}",
                    facts.open_command()
                ),
                owner: owner_suffix(policy),
            };
            let mut outcome = RuleOutcome::refuse(Rule::WindowTooLong, policy, words, "");
            outcome.window = Some(window.clone());
            return Some(outcome);
        }
    }
    for state in &states {
        if let WindowState::Expired(window) = state {
            let words = RefusalWords {
                subject: facts.may_not(),
                why: format!("{} expired", describe_window(window)),
                next: format!(
                    "Change it in Git, or open a new window: {}",
                    facts.open_command()
                ),
                owner: owner_suffix(policy),
            };
            let mut outcome = RuleOutcome::refuse(Rule::WindowExpired, policy, words, "");
            outcome.window = Some(window.clone());
            return Some(outcome);
        }
    }
    let malformed = states.iter().find_map(|s| match s {
        WindowState::Malformed { value, problem } => Some((value, problem)),
        _ => None,
    });
    let mut outcome = not_permitted(policy, facts, None);
    if let (Some((_, problem)), Some(message)) = (malformed, outcome.message.as_mut()) {
        message.push_str(&format!(
            " The break-glass label present is ignored: {problem}."
        ));
    }
    Some(outcome)
}

/// The refusal of a delete the policy's `deletions` stop, if this is one: a protected kind
/// without the allow annotation or an opener's open window, or a controller's delete beyond
/// the limit. Otherwise the other rules judge it.
fn refuse_deletion(policy: &GatePolicy, facts: &Facts<'_>) -> Option<RuleOutcome> {
    let rules = policy.deletions.as_ref()?;
    if facts.request().operation() != Operation::Delete
        || !facts.subresource.is_empty()
        || !(guards_namespace(policy, facts) || guards_cluster_object(policy, facts))
    {
        return None;
    }
    let protected = rules.protects(
        facts.group(),
        facts.kind,
        &facts.request().resource().resource,
    ) && !rules.exempt.matches(facts.user)
        && !allowed_by_annotation(facts, rules)
        && !opener_under_window(policy, facts);
    if protected {
        return Some(deletion_protected(policy, facts, rules));
    }
    if let Some(refusal) = refuse_cascade(policy, facts, rules) {
        return Some(refusal);
    }
    deletion_over_limit(policy, facts)
}

fn allowed_by_annotation(facts: &Facts<'_>, rules: &DeletionRules) -> bool {
    facts
        .stored_meta()
        .is_some_and(|meta| marked_for_deletion(meta, rules))
}

/// Whether the deleter is an opener of the policy's windows and one is open on the object or
/// its namespace: a deletion window.
fn opener_under_window(policy: &GatePolicy, facts: &Facts<'_>) -> bool {
    policy.break_glass.as_ref().is_some_and(|rules| {
        rules.openers.matches(facts.user) && open_window(&windows(facts, rules)).is_some()
    })
}

fn deletion_protected(
    policy: &GatePolicy,
    facts: &Facts<'_>,
    rules: &DeletionRules,
) -> RuleOutcome {
    let name = echo(facts.request().name(), MAX_NAME_CHARS);
    let annotate = match facts.namespace {
        _ if facts.is_namespace_object() => format!(
            "kubectl annotate namespace/{name} {}=true",
            rules.allow_annotation
        ),
        Some(namespace) => format!(
            "kubectl annotate {}/{name} -n {namespace} {}=true",
            facts.target_type(),
            rules.allow_annotation
        ),
        None => format!(
            "kubectl annotate {}/{name} {}=true",
            facts.target_type(),
            rules.allow_annotation
        ),
    };
    let window = match &policy.break_glass {
        Some(rules) => format!(
            ", or delete it under a break-glass window ({} may open one: {})",
            rules.openers.describe(),
            facts.open_command()
        ),
        None => String::new(),
    };
    let controller = controller_of(policy, facts);
    let words = RefusalWords {
        subject: deleter_may_not(controller, facts),
        why: format!(
            "the policy protects every {} from deletion by anyone, the GitOps controller included, unless deleting it is a deliberate act",
            facts.kind
        ),
        next: format!(
            "If it is meant, mark it first, in Git or with {annotate}{window}; if the controller is pruning it, check the last change in Git"
        ),
        owner: owner_suffix(policy),
    };
    let mut outcome = RuleOutcome::refuse(Rule::DeletionProtected, policy, words, "");
    outcome.matched = controller.map(|c| c.name.clone());
    outcome
}

/// "Controller flux (system:serviceaccount:…) may not delete …" for a controller of the policy,
/// "bob may not delete …" for anyone else.
fn deleter_may_not(controller: Option<&crate::policy::Controller>, facts: &Facts<'_>) -> String {
    match controller {
        Some(controller) => format!(
            "Controller {} ({}) may not delete {}",
            controller.name,
            facts.about.who(),
            facts.object_words()
        ),
        None => facts.may_not(),
    }
}

/// What the server must read for the cascade of a DELETE: the namespace, the deleted object's
/// uid and the rules of the policies that judge its cascade, whose protected kinds it lists.
#[derive(Debug)]
pub struct CascadeQuery<'p> {
    pub namespace: String,
    /// None: the review carries no uid, so nothing can be found to be owned by it.
    pub deleted_uid: Option<String>,
    pub rules: Vec<&'p DeletionRules>,
}

impl CascadeQuery<'_> {
    /// Whether a policy that judges the cascade protects `group/kind` (or `group/resource`).
    pub fn protects(&self, group: &str, kind: &str, resource: &str) -> bool {
        self.rules
            .iter()
            .any(|rules| rules.protects(group, kind, resource))
    }
}

/// The cascade to read before deciding this request, if any policy judges one (see
/// [`cascade_rules`]).
pub fn cascade_query<'p>(
    policies: &'p PolicySet,
    input: &DecisionInput<'_>,
) -> Option<CascadeQuery<'p>> {
    // Every review asks: the facts (which diff a subresource UPDATE) are only made for a DELETE.
    if input.request.request().operation() != Operation::Delete
        || policies.policies().iter().all(|p| p.deletions.is_none())
    {
        return None;
    }
    let facts = Facts::new(input);
    let rules: Vec<_> = policies
        .policies()
        .iter()
        .filter_map(|policy| cascade_rules(policy, &facts))
        .collect();
    if rules.is_empty() {
        return None;
    }
    Some(CascadeQuery {
        namespace: facts.namespace?.to_owned(),
        deleted_uid: facts.about.object_uid().map(str::to_owned),
        rules,
    })
}

/// The policy's `deletions`, when it judges what this DELETE takes with it: the delete of a
/// namespaced object of a kind the policy guards (its `resources`: objects declared in Git,
/// pruned by the controller or deleted by people; not the run-time objects Kubernetes'
/// controllers delete as an owner's spec says, such as Pods and ReplicaSets in the example
/// policy), in a namespace it guards, by anyone but `deletions.exempt`, that does not orphan
/// the object's dependents. A cluster-scoped object's dependents may be in any namespace, and
/// are not looked for.
fn cascade_rules<'p>(policy: &'p GatePolicy, facts: &Facts<'_>) -> Option<&'p DeletionRules> {
    let rules = policy.deletions.as_ref()?;
    let request = facts.request();
    let judged = request.operation() == Operation::Delete
        && facts.subresource.is_empty()
        && !facts.is_namespace_object()
        && facts.namespace.is_some()
        && facts.kind_known
        && guards_namespace(policy, facts)
        && policy.guards_resource(facts.group(), facts.kind, &request.resource().resource)
        && !rules.exempt.matches(facts.user)
        && !orphans_dependents(
            request.options(),
            facts.about.old_object().map(|o| o.metadata()),
        );
    judged.then_some(rules)
}

/// The refusal of a delete whose cascade would take protected objects with it that carry no
/// allow annotation and are not deleted by an opener under a window on them or their
/// namespace: each is judged as if it were deleted itself. A cascade that could not be read is
/// refused (fail closed), saying why.
fn refuse_cascade(
    policy: &GatePolicy,
    facts: &Facts<'_>,
    rules: &DeletionRules,
) -> Option<RuleOutcome> {
    let cascade = facts.cascade?;
    cascade_rules(policy, facts)?;
    let controller = controller_of(policy, facts);
    let namespace = facts.namespace.unwrap_or_default();
    let name = echo(facts.request().name(), MAX_NAME_CHARS);
    let orphan = format!(
        "kubectl delete {}/{name} -n {namespace} --cascade=orphan",
        facts.target_type()
    );
    let words = match cascade {
        DeletionCascade::Unreadable(problem) => RefusalWords {
            subject: deleter_may_not(controller, facts),
            why: format!(
                "driftgate could not read the objects the policy protects from deletion in {namespace} to see whether the garbage collector would delete any of them with it ({})",
                echo(problem, MAX_PROBLEM_CHARS)
            ),
            next: format!(
                "Retry; if it keeps failing, check that driftgate may list them. To delete it alone and keep what it owns: {orphan}"
            ),
            owner: owner_suffix(policy),
        },
        DeletionCascade::Read(dependents) => {
            let reached: Vec<&Dependent> = dependents
                .iter()
                .filter(|d| {
                    rules.protects(&d.kind.group, &d.kind.kind, &d.resource)
                        && !marked_for_deletion(&d.meta, rules)
                        && !opener_under_window_on(policy, facts, &d.meta)
                })
                .collect();
            if reached.is_empty() {
                return None;
            }
            cascade_words(policy, facts, rules, controller, &reached, &orphan)
        }
    };
    let mut outcome = RuleOutcome::refuse(Rule::DeletionProtected, policy, words, "");
    outcome.matched = controller.map(|c| c.name.clone());
    Some(outcome)
}

/// At most this many characters of an API error in a refusal.
const MAX_PROBLEM_CHARS: usize = 300;
/// At most this many protected objects are named in one refusal.
const MAX_NAMED_DEPENDENTS: usize = 5;

/// The refusal's words for protected objects the cascade would (or may) delete: those it
/// surely deletes are named; without any, those it may delete, with why driftgate cannot tell.
fn cascade_words(
    policy: &GatePolicy,
    facts: &Facts<'_>,
    rules: &DeletionRules,
    controller: Option<&crate::policy::Controller>,
    reached: &[&Dependent],
    orphan: &str,
) -> RefusalWords {
    let surely: Vec<&Dependent> = reached
        .iter()
        .copied()
        .filter(|d| d.undetermined.is_none())
        .collect();
    let named = if surely.is_empty() {
        reached
    } else {
        &surely[..]
    };
    let namespace = facts.namespace.unwrap_or_default();
    let (it, each) = if named.len() == 1 {
        ("it", "it")
    } else {
        ("them", "each")
    };
    let annotate = format!(
        "kubectl annotate {} -n {namespace} {}=true",
        named
            .iter()
            .take(MAX_NAMED_DEPENDENTS)
            .map(|d| format!(
                "{}/{}",
                kubectl_type(&d.kind.group, &d.kind.kind, &d.resource),
                echo(d.name(), MAX_NAME_CHARS)
            ))
            .collect::<Vec<_>>()
            .join(" "),
        rules.allow_annotation
    );
    let window = match &policy.break_glass {
        Some(window) if window.namespace_wide => format!(
            ", or delete it under a break-glass window on the namespace ({} may open one: driftgate break-glass open namespace/{namespace} --for 1h --reason \"{REASON_PLACEHOLDER}\")",
            window.openers.describe()
        ),
        _ => String::new(),
    };
    let mark = format!("mark {each} first, in Git or with {annotate}{window}");
    let (why, next) = if surely.is_empty() {
        let problems: std::collections::BTreeSet<&str> = named
            .iter()
            .filter_map(|d| d.undetermined.as_deref())
            .collect();
        (
            format!(
                "driftgate could not tell whether the garbage collector would then delete {}, which the policy protects from deletion by anyone, the GitOps controller included ({})",
                dependent_words(named),
                echo(
                    &problems.into_iter().collect::<Vec<_>>().join("; "),
                    MAX_PROBLEM_CHARS
                )
            ),
            format!(
                "Retry once driftgate can read what owns {it}; if the delete is meant, {mark}; to delete it alone and keep what it owns: {orphan}"
            ),
        )
    } else {
        (
            format!(
                "the garbage collector would then delete {}, which it owns, and the policy protects {it} from deletion by anyone, the GitOps controller included, unless deleting {it} is a deliberate act",
                dependent_words(named)
            ),
            format!(
                "If that is meant, {mark}; to delete it alone and keep what it owns: {orphan}; if the controller is pruning it, check the last change in Git"
            ),
        )
    };
    RefusalWords {
        subject: deleter_may_not(controller, facts),
        why,
        next,
        owner: owner_suffix(policy),
    }
}

/// "PersistentVolumeClaim data-web-0", "PersistentVolumeClaims data-web-0 and data-web-1",
/// "PersistentVolumeClaim data-db-0 (through StatefulSet db)": grouped by kind, at most
/// [`MAX_NAMED_DEPENDENTS`] named.
fn dependent_words(dependents: &[&Dependent]) -> String {
    let mut by_kind: Vec<(&str, Vec<String>)> = Vec::new();
    for dependent in dependents.iter().take(MAX_NAMED_DEPENDENTS) {
        let mut name = echo(dependent.name(), MAX_NAME_CHARS).into_owned();
        if !dependent.through.is_empty() {
            name.push_str(&format!(" (through {})", dependent.through.join(", ")));
        }
        match by_kind
            .iter_mut()
            .find(|(kind, _)| *kind == dependent.kind.kind)
        {
            Some((_, names)) => names.push(name),
            None => by_kind.push((&dependent.kind.kind, vec![name])),
        }
    }
    let groups: Vec<String> = by_kind
        .into_iter()
        .map(|(kind, names)| {
            let noun = if names.len() == 1 {
                kind.to_owned()
            } else {
                plural(kind)
            };
            format!("{noun} {}", and_list(&names))
        })
        .collect();
    let mut words = and_list(&groups);
    if dependents.len() > MAX_NAMED_DEPENDENTS {
        words.push_str(&format!(
            ", and {} more",
            dependents.len() - MAX_NAMED_DEPENDENTS
        ));
    }
    words
}

/// "a", "a and b", "a, b and c".
fn and_list(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

/// The plural of a kind's name, as English makes it: Claims, Policies, Classes.
fn plural(kind: &str) -> String {
    if kind.ends_with('s') || kind.ends_with('x') || kind.ends_with("ch") || kind.ends_with("sh") {
        format!("{kind}es")
    } else if let Some(stem) = kind.strip_suffix('y')
        && !stem.ends_with(['a', 'e', 'i', 'o', 'u'])
    {
        format!("{stem}ies")
    } else {
        format!("{kind}s")
    }
}

/// How kubectl names a type: the lowercase kind for the core and apps groups, else the fully
/// qualified resource (as [`Facts::target_type`]).
fn kubectl_type(group: &str, kind: &str, resource: &str) -> String {
    if group.is_empty() || group == "apps" {
        kind.to_lowercase()
    } else {
        format!("{resource}.{group}")
    }
}

/// Whether `meta` carries the policy's allow annotation, "true".
fn marked_for_deletion(meta: &ObjectMeta, rules: &DeletionRules) -> bool {
    meta.annotations
        .as_ref()
        .and_then(|annotations| annotations.get(&rules.allow_annotation))
        .is_some_and(|value| value == "true")
}

/// Whether the deleter is an opener and a window is open on `meta` (an object the delete would
/// take with it) or, namespace-wide, on the namespace.
fn opener_under_window_on(policy: &GatePolicy, facts: &Facts<'_>, meta: &ObjectMeta) -> bool {
    let Some(rules) = policy.break_glass.as_ref() else {
        return false;
    };
    if !rules.openers.matches(facts.user) {
        return false;
    }
    let now = facts.input.now;
    let mut states = vec![window_state(meta, rules, now, WindowScope::Object)];
    if rules.namespace_wide
        && let Some(ns) = facts.input.namespace
    {
        states.push(window_state(ns, rules, now, WindowScope::Namespace));
    }
    open_window(&states).is_some()
}

/// A controller's delete beyond `controllerLimit` deletes within its period in the namespace.
fn deletion_over_limit(policy: &GatePolicy, facts: &Facts<'_>) -> Option<RuleOutcome> {
    let (controller, limit) = policy.deletion_limit_for(facts.user)?;
    let recent = facts.input.recent_deletes?.get(&policy.name)?;
    let count = within(recent, limit.per.as_signed(), facts.input.now);
    if count < limit.deletes as usize {
        return None;
    }
    let namespace = facts.namespace.unwrap_or_default();
    let words = RefusalWords {
        subject: format!(
            "Controller {} ({}) may not delete {}",
            controller.name,
            facts.about.who(),
            facts.object_words()
        ),
        why: format!(
            "it deleted {count} objects in {namespace} within {}, the policy's limit (spec.deletions.controllerLimit: {} per {})",
            limit.per, limit.deletes, limit.per
        ),
        next: "A prune this large is stopped in case a change in Git removed more than it meant to: check the last revision; if the deletes are meant, they go on once the period has passed, or raise the limit".to_owned(),
        owner: owner_suffix(policy),
    };
    let mut outcome = RuleOutcome::refuse(Rule::DeletionLimit, policy, words, "");
    outcome.matched = Some(controller.name.clone());
    Some(outcome)
}

/// The policy's controller this request comes from, by identity (a delete has no field manager).
fn controller_of<'p>(
    policy: &'p GatePolicy,
    facts: &Facts<'_>,
) -> Option<&'p crate::policy::Controller> {
    policy
        .controllers
        .iter()
        .find(|c| c.identity.matches(facts.user))
}

/// What an UPDATE does to the suspensions its object carries.
enum SuspensionChange {
    /// A suspension starts, or the window of one that holds changes: judged as opening one.
    Suspends,
    /// A suspension ends, and none starts.
    Resumes,
}

/// The verdict on a write that suspends or resumes the GitOps controller's reconciliation (by
/// the policy's `suspensions`), judged like opening a window on the object itself: by an
/// opener, with an expiry within `maxDuration` and a reason. Resuming is always admitted, and
/// the controller's own writes go to the other rules. A suspension that also changes other
/// fields in the policy's own scope is refused: judged by the other rules, it would be recorded
/// as an ordinary change. `None`: not a suspension, or a resume that also changes other fields
/// in the policy's own scope (the other rules judge those).
fn judge_suspension<'a>(policy: &GatePolicy, facts: &Facts<'a>) -> Option<RuleOutcome> {
    let (rules, break_glass) = (policy.suspensions.as_ref()?, policy.break_glass.as_ref()?);
    // A write through a subresource that changes more than it (`facts.through`: an annotation
    // through `deployments/status`) is the object's own write, and may suspend as one.
    if !facts.is_update() || !facts.subresource.is_empty() {
        return None;
    }
    let (Some(old), Some(new)) = (facts.about.old_object(), facts.about.object()) else {
        return None;
    };
    // In the policy's own scope, or where the GitOps objects are.
    let guarded = in_scope(policy, facts);
    let gitops_objects = namespace_scope(policy, facts).suspensions
        && may_carry_suspension(facts.group(), facts.kind);
    if !guarded && !gitops_objects {
        return None;
    }
    let (group, kind) = (facts.group(), facts.kind);
    // Suspension annotations are in the head; only a suspension field needs the whole object.
    let has_field = rules.has_field(group, kind);
    let read = |object: ReviewObject<'a>| match has_field {
        true => object.whole(),
        false => object.head(),
    };
    let before = rules.suspensions(group, kind, read(old));
    let after = rules.suspensions(group, kind, read(new));
    if before.is_empty() && after.is_empty() {
        return None;
    }
    let window_changed = facts
        .changes()
        .iter()
        .any(|p| is_break_glass_path(p, break_glass));
    let change =
        if after.iter().any(|s| !before.contains(s)) || (!after.is_empty() && window_changed) {
            SuspensionChange::Suspends
        } else if before.iter().any(|s| !after.contains(s)) {
            SuspensionChange::Resumes
        } else {
            return None;
        };
    let others: Vec<&FieldPath> = facts
        .changes()
        .iter()
        .filter(|p| !is_break_glass_path(p, break_glass) && !rules.covers(group, kind, p))
        .collect();
    // Outside the policy's own scope only the suspension is guarded: the rest is not judged.
    let judged_alone = others.is_empty() || !guarded;
    match change {
        SuspensionChange::Resumes => judged_alone.then(|| resumed(facts, break_glass)),
        SuspensionChange::Suspends => {
            if controller_of(policy, facts).is_some() {
                return None;
            }
            // In its own scope, a suspension that came with other changes would be judged
            // (and recorded) as an ordinary change, and the controller would stop unrecorded.
            // Whoever may not open a window hears that instead (below).
            if !judged_alone && break_glass.openers.matches(facts.user) {
                return Some(refuse_suspension(policy, facts, mixed_suspension(&others)));
            }
            match suspension_window(facts, break_glass) {
                Err(problem) => Some(refuse_suspension(policy, facts, problem)),
                Ok(window) => Some(suspended(facts, break_glass, &after, window)),
            }
        }
    }
}

/// Why a write that suspends and changes `others` too is refused.
fn mixed_suspension(others: &[&FieldPath]) -> WindowProblem {
    const SHOWN: usize = 3;
    let mut fields: Vec<String> = others
        .iter()
        .take(SHOWN)
        .map(|p| echo(&p.to_string(), MAX_NAME_CHARS).into_owned())
        .collect();
    if others.len() > SHOWN {
        fields.push(format!("{} more", others.len() - SHOWN));
    }
    WindowProblem {
        problem: format!(
            "a write that suspends the GitOps controller may change nothing else, and this one also changes {}; suspend it on its own first, then make the change under its window",
            fields.join(", ")
        ),
        detail: String::new(),
    }
}

/// The window a suspension opens: the break-glass label and reason on the object as written,
/// set by an opener, as opening a window needs them.
fn suspension_window(
    facts: &Facts<'_>,
    rules: &BreakGlassRules,
) -> Result<BreakGlassWindow, WindowProblem> {
    let refuse = |problem: String| WindowProblem {
        problem,
        detail: String::new(),
    };
    if !rules.openers.matches(facts.user) {
        return Err(refuse(format!(
            "a suspension is a break-glass window, which only {} may open",
            rules.openers.describe()
        )));
    }
    let new = facts
        .new_meta()
        .ok_or_else(|| refuse("the request carries no object".to_owned()))?;
    let now = facts.input.now;
    let window = match window_state(new, rules, now, WindowScope::Object) {
        WindowState::Open(window) => window,
        WindowState::Absent => {
            return Err(refuse(format!(
                "it has no expiry: a suspension is a break-glass window, and needs the label {} with its expiry (e.g. 20261130T0930Z, at most maxDuration {} from now) and the reason annotation {}",
                rules.label, rules.max_duration, rules.reason_annotation
            )));
        }
        WindowState::Malformed { problem, .. } => {
            return Err(refuse(format!("the label {}: {problem}", rules.label)));
        }
        WindowState::Expired(window) => {
            return Err(refuse(format!(
                "the expiry {} ({}) is not in the future",
                window.label_value,
                human_utc(window.expires_at)
            )));
        }
        WindowState::TooLong(window) => {
            return Err(WindowProblem {
                problem: format!(
                    "the expiry {} ({}) is more than maxDuration {} from now",
                    window.label_value,
                    human_utc(window.expires_at),
                    rules.max_duration
                ),
                detail: format!(
                    "; the latest allowed is {}",
                    human_utc(latest_expiry(now, rules.max_duration))
                ),
            });
        }
    };
    if rules.require_reason && window.reason.is_none() {
        return Err(refuse(format!(
            "a reason is required: set the annotation {} in the same request (e.g. \"{REASON_EXAMPLE}\")",
            rules.reason_annotation
        )));
    }
    if let Some(problem) = reason_problem(window.reason.as_deref(), rules) {
        return Err(refuse(problem));
    }
    Ok(window)
}

/// `driftgate suspend kustomization/NAME -n NS …` and its resume, for messages.
fn suspend_commands(facts: &Facts<'_>) -> (String, String) {
    let target = format!(
        "{}/{}",
        facts.kind.to_lowercase(),
        echo(facts.request().name(), MAX_NAME_CHARS)
    );
    let ns = facts.namespace.unwrap_or("default");
    (
        format!("driftgate suspend {target} -n {ns} --for 1h --reason \"{REASON_PLACEHOLDER}\""),
        format!("driftgate resume {target} -n {ns}"),
    )
}

fn refuse_suspension(policy: &GatePolicy, facts: &Facts<'_>, why: WindowProblem) -> RuleOutcome {
    let (suspend, resume) = suspend_commands(facts);
    let words = RefusalWords {
        subject: format!(
            "{} may not suspend {}",
            facts.about.who(),
            facts.object_words()
        ),
        why: why.problem,
        next: format!(
            "Suspend it with {suspend} ({} may), and resume it with {resume}",
            policy
                .break_glass
                .as_ref()
                .map_or_else(String::new, |rules| rules.openers.describe())
        ),
        owner: owner_suffix(policy),
    };
    RuleOutcome::refuse(Rule::SuspensionRefused, policy, words, &why.detail)
}

fn suspended(
    facts: &Facts<'_>,
    rules: &BreakGlassRules,
    by: &[crate::policy::suspensions::Suspension],
    window: BreakGlassWindow,
) -> RuleOutcome {
    let (_, resume) = suspend_commands(facts);
    let how: Vec<String> = by.iter().map(ToString::to_string).collect();
    let mut outcome = RuleOutcome::admit(Rule::Suspended);
    outcome.warning = Some(warning(format!(
        "driftgate: {} suspended ({}) until {} ({}); resume it with {resume} before then, or it is reported as a forgotten suspension.",
        facts.object_words(),
        how.join(", "),
        human_utc(window.expires_at),
        window.label_value,
    )));
    outcome.window = facts.stored_meta().and_then(|meta| {
        window_state(meta, rules, facts.input.now, WindowScope::Object)
            .window()
            .cloned()
    });
    outcome.new_window = Some(window);
    outcome
}

fn resumed(facts: &Facts<'_>, rules: &BreakGlassRules) -> RuleOutcome {
    let mut outcome = RuleOutcome::admit(Rule::Resumed);
    outcome.window = facts.stored_meta().and_then(|meta| {
        window_state(meta, rules, facts.input.now, WindowScope::Object)
            .window()
            .cloned()
    });
    outcome
}

/// Which side of an UPDATE the review lacks, if any.
fn missing_object(request: &RequestFacts<'_>) -> Option<&'static str> {
    match (request.old_object(), request.object()) {
        (None, None) => Some("object and no oldObject"),
        (None, Some(_)) => Some("oldObject"),
        (Some(_), None) => Some("object"),
        (Some(_), Some(_)) => None,
    }
}

fn owner_suffix(policy: &GatePolicy) -> String {
    match &policy.owner {
        Some(owner) => format!(" (policy owner: {owner})"),
        None => String::new(),
    }
}

/// Who writes in a policy's namespaces, as every refusal and its Event say it: one wording for
/// one controller or several (a policy's controllers include Kubernetes' own, which are no
/// GitOps controller).
pub fn only_writers(controllers: &[&str]) -> String {
    match controllers {
        [] => "no one writes here directly".to_owned(),
        names => format!("only its controllers ({}) write here", names.join(", ")),
    }
}

/// 8. The default: only the policy's controllers write here.
fn not_permitted(
    policy: &GatePolicy,
    facts: &Facts<'_>,
    window: Option<&BreakGlassWindow>,
) -> RuleOutcome {
    let controllers: Vec<_> = policy.controllers.iter().map(|c| c.name.as_str()).collect();
    let writers = only_writers(&controllers);
    let how = match (&policy.break_glass, window) {
        (Some(rules), Some(window)) => format!(
            "{} is open, but only {} may use it. Change it in Git, or ask an opener",
            capitalized(&describe_window(window)),
            rules.openers.describe()
        ),
        (Some(rules), None) => format!(
            "Change it in Git, or, in an emergency, open a break-glass window ({} may): {}",
            rules.openers.describe(),
            facts.open_command()
        ),
        (None, _) => "Change it in Git".to_owned(),
    };
    let words = RefusalWords {
        subject: facts.may_not(),
        why: writers,
        next: how,
        owner: owner_suffix(policy),
    };
    let mut outcome = RuleOutcome::refuse(Rule::NotPermitted, policy, words, "");
    let message = outcome.message.as_mut().expect("a refusal has a message");
    if let Some(forged) = &facts.all_changes().forged_ownership {
        message.push_str(&format!(
            " The write changes field ownership ({forged}): who owns a field decides what the controller's next apply resets or prunes."
        ));
    }
    if !facts.kind_known {
        message.push_str(&format!(
            " driftgate could not resolve the kind behind resource \"{}\" from API discovery, so it judged the write as guarded (fail closed).",
            facts.target_type()
        ));
    }
    outcome
}

/// `text` with its first letter upper-cased, to start a sentence.
fn capitalized(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

fn is_break_glass_path(path: &FieldPath, rules: &BreakGlassRules) -> bool {
    let s = path.segments();
    s.len() == 3
        && s[0] == "metadata"
        && ((s[1] == "labels" && s[2] == rules.label)
            || (s[1] == "annotations" && s[2] == rules.reason_annotation))
}

/// What a reason should look like, in messages.
const REASON_EXAMPLE: &str = "INC-4711: api scaled to 8, checkout p99 over 2 s";

/// Whether `reason` is the hint's placeholder, copied rather than replaced.
pub fn is_placeholder_reason(reason: &str) -> bool {
    let placeholder = REASON_PLACEHOLDER
        .split_once(": ")
        .map_or(REASON_PLACEHOLDER, |(_, rest)| rest);
    reason.contains('…') || reason.to_lowercase().contains(placeholder)
}

/// Why a window's reason is not acceptable: the hint's placeholder copied verbatim, or not the
/// policy's `reasonPattern`.
fn reason_problem(reason: Option<&str>, rules: &BreakGlassRules) -> Option<String> {
    let reason = reason?;
    if is_placeholder_reason(reason) {
        return Some(format!(
            "the reason \"{}\" is the placeholder from driftgate's hint; say what the emergency is and why (e.g. \"{REASON_EXAMPLE}\")",
            echo(reason, MAX_REASON_CHARS)
        ));
    }
    let pattern = rules.reason_pattern.as_ref()?;
    (!pattern.is_match(reason)).then(|| {
        format!(
            "the reason \"{}\" does not match the policy's reasonPattern {} (e.g. a ticket id)",
            echo(reason, MAX_REASON_CHARS),
            pattern.as_str()
        )
    })
}

/// Whether an UPDATE only removes the break-glass label (and perhaps the reason).
fn closes_window_only(facts: &Facts<'_>, rules: &BreakGlassRules) -> bool {
    if !facts.is_update() || !facts.subresource.is_empty() {
        return false;
    }
    let changes = facts.changes();
    let only_metadata =
        !changes.is_empty() && changes.iter().all(|p| is_break_glass_path(p, rules));
    let label_removed = facts.new_meta().is_some_and(|m| {
        m.labels
            .as_ref()
            .is_none_or(|labels| !labels.contains_key(&rules.label))
    });
    only_metadata && label_removed
}

/// Why the break-glass rules do not allow a change to a window.
struct WindowProblem {
    problem: String,
    /// What changes with the time of the request: the message says it, the Event not.
    detail: String,
}

/// The refusal of a change to a window (rule 6).
fn refuse_window_change(facts: &Facts<'_>, policy: &GatePolicy, why: WindowProblem) -> RuleOutcome {
    let words = RefusalWords {
        subject: format!(
            "{} may not change the break-glass window on {}",
            facts.about.who(),
            facts.object_words()
        ),
        why: why.problem,
        next: String::new(),
        owner: owner_suffix(policy),
    };
    RuleOutcome::refuse(Rule::BreakGlassRefused, policy, words, &why.detail)
}

/// What a window holds off, for its opening warning: `controller flux is held off it until
/// then; `, or nothing when the policy holds no controller (`holdController: false`, or
/// every controller `heldByWindows: false`).
fn held_controllers(policy: &GatePolicy, rules: &BreakGlassRules) -> String {
    let held: Vec<&str> = policy
        .controllers
        .iter()
        .filter(|c| rules.hold_controller && c.held_by_windows)
        .map(|c| c.name.as_str())
        .collect();
    match held.as_slice() {
        [] => String::new(),
        [one] => format!("controller {one} is held off it until then; "),
        many => format!(
            "controllers {} are held off it until then; ",
            many.join(", ")
        ),
    }
}

/// Rule 6: opening, extending, amending or closing a window.
fn break_glass_change(
    facts: &Facts<'_>,
    rules: &BreakGlassRules,
) -> Result<BreakGlassChange, WindowProblem> {
    let refuse = |problem: String| WindowProblem {
        problem,
        detail: String::new(),
    };
    let (Some(old), Some(new)) = (facts.stored_meta(), facts.new_meta()) else {
        return Err(refuse("the request carries no object".to_owned()));
    };
    let label = |m: &'_ ObjectMeta| m.labels.as_ref().and_then(|l| l.get(&rules.label)).cloned();
    let (old_label, new_label) = (label(old), label(new));
    let is_opener = rules.openers.matches(facts.user);
    let not_opener = || {
        refuse(format!(
            "only {} may open, extend or amend a window",
            rules.openers.describe()
        ))
    };
    let now = facts.input.now;
    let reason = reason_of(new, rules);
    match (&old_label, &new_label) {
        (Some(old_value), None) => {
            // Closing hands the object back to the controller: openers may, the controller may
            // (handled before this rule), others may not. A label that holds no window any
            // more (past its expiry, or not an expiry) hands nothing back: removing it is
            // tidying up, which anyone who may write the object may do.
            let holds_window = parse_expiry(old_value).is_ok_and(|expiry| expiry > now);
            if is_opener || !holds_window {
                Ok(BreakGlassChange::Closed)
            } else {
                Err(refuse(format!(
                    "only {} or the controller may close a window",
                    rules.openers.describe()
                )))
            }
        }
        (old_value, Some(value)) if old_value.as_ref() == Some(value) => {
            if !is_opener {
                return Err(not_opener());
            }
            if rules.require_reason && reason.is_none() {
                return Err(refuse(format!(
                    "the reason annotation {} cannot be removed while the window is open",
                    rules.reason_annotation
                )));
            }
            if let Some(problem) = reason_problem(reason.as_deref(), rules) {
                return Err(refuse(problem));
            }
            let window = match window_state(new, rules, now, WindowScope::Object) {
                WindowState::Open(w) => Some(w),
                _ => None,
            };
            Ok(BreakGlassChange::Amended(window))
        }
        (_, Some(value)) => {
            if !is_opener {
                return Err(not_opener());
            }
            let expires_at = parse_expiry(value)
                .map_err(|e| refuse(format!("the label {}: {e}", rules.label)))?;
            let latest = latest_expiry(now, rules.max_duration);
            if expires_at <= now {
                return Err(refuse(format!(
                    "the expiry {value} ({}) is not in the future",
                    human_utc(expires_at)
                )));
            }
            if expires_at > latest {
                return Err(WindowProblem {
                    problem: format!(
                        "the expiry {value} ({}) is more than maxDuration {} from now",
                        human_utc(expires_at),
                        rules.max_duration,
                    ),
                    detail: format!("; the latest allowed is {}", human_utc(latest)),
                });
            }
            if rules.require_reason && reason.is_none() {
                return Err(refuse(format!(
                    "a reason is required: set the annotation {} in the same request (e.g. \"{REASON_EXAMPLE}\")",
                    rules.reason_annotation
                )));
            }
            if let Some(problem) = reason_problem(reason.as_deref(), rules) {
                return Err(refuse(problem));
            }
            let window = BreakGlassWindow {
                scope: WindowScope::Object,
                label_value: value.clone(),
                expires_at,
                reason,
            };
            let was_open = matches!(
                window_state(old, rules, now, WindowScope::Object),
                WindowState::Open(_)
            );
            Ok(if was_open {
                BreakGlassChange::Extended(window)
            } else {
                BreakGlassChange::Opened(window)
            })
        }
        (None, None) => {
            // Only the reason annotation changed, with no window: harmless for openers.
            if is_opener {
                Ok(BreakGlassChange::Amended(None))
            } else {
                Err(not_opener())
            }
        }
    }
}

fn apply_mode(policy: &GatePolicy, outcome: RuleOutcome) -> PolicyVerdict {
    let audit = policy.mode == PolicyMode::Audit;
    let would_deny = !outcome.admit && audit;
    let warning = if would_deny {
        outcome.message.as_ref().map(|m| {
            warning(format!(
                "driftgate audit (policy \"{}\" would deny in Enforce mode): {m}",
                policy.name
            ))
        })
    } else {
        outcome.warning
    };
    PolicyVerdict {
        policy: policy.name.clone(),
        mode: policy.mode,
        rule: outcome.rule,
        allowed: outcome.admit || audit,
        would_deny,
        message: outcome.message,
        warning,
        matched: outcome.matched,
        window: outcome.window,
        new_window: outcome.new_window,
        refusal: outcome.refusal,
    }
}

fn assemble(facts: &Facts<'_>, verdicts: Vec<PolicyVerdict>) -> Decision {
    let request = facts.request();
    let allowed = verdicts.iter().all(|v| v.allowed);
    let deciding: Vec<&PolicyVerdict> = if !allowed {
        verdicts.iter().filter(|v| !v.allowed).collect()
    } else if verdicts.iter().any(|v| v.would_deny) {
        verdicts.iter().filter(|v| v.would_deny).collect()
    } else {
        verdicts.iter().collect()
    };
    let rule = deciding.first().map_or(Rule::OutOfScope, |v| v.rule);
    let message = if allowed {
        String::new()
    } else {
        deciding
            .iter()
            .filter_map(|v| v.message.as_deref())
            .collect::<Vec<_>>()
            .join(" ")
    };
    let warnings: Vec<String> = verdicts.iter().filter_map(|v| v.warning.clone()).collect();
    let mut audit_annotations = BTreeMap::new();
    let decision_word = match (allowed, verdicts.iter().any(|v| v.would_deny)) {
        (false, _) => "denied",
        (true, true) => "allowed-audit",
        (true, false) => "allowed",
    };
    audit_annotations.insert(AUDIT_DECISION.to_owned(), decision_word.to_owned());
    audit_annotations.insert(AUDIT_RULE.to_owned(), rule.as_str().to_owned());
    if !deciding.is_empty() {
        let names: Vec<&str> = deciding.iter().map(|v| v.policy.as_str()).collect();
        audit_annotations.insert(AUDIT_POLICY.to_owned(), names.join(","));
    }
    let changed_fields = facts
        .changes
        .get()
        .map(|changes| changes.paths.iter().map(ToString::to_string).collect())
        .unwrap_or_default();
    let record = DecisionRecord {
        uid: request.uid().to_owned(),
        operation: facts.about.operation_name().to_owned(),
        user: facts.about.username().to_owned(),
        groups: facts.user.groups.clone().unwrap_or_default(),
        field_manager: facts.about.field_manager().map(str::to_owned),
        dry_run: request.dry_run(),
        object: ObjectRef {
            group: request.resource().group.clone(),
            version: request.resource().version.clone(),
            kind: facts.kind.to_owned(),
            resource: request.resource().resource.clone(),
            subresource: facts.subresource.to_owned(),
            namespace: facts.namespace.unwrap_or("").to_owned(),
            name: request.name().to_owned(),
        },
        rule,
        verdicts,
        changed_fields,
    };
    Decision {
        allowed,
        message,
        warnings,
        audit_annotations,
        record,
    }
}

/// Whether any policy may guard this write, judged from the review's envelope alone: its
/// objects may be unread (`None`). Conservative: true whenever [`decide`] could find the write
/// in scope. A subresource write may be judged as a write to the object itself, and its kind
/// is not known from the envelope (`kind` is the subresource's, such as `Scale`), so any
/// subresource write in a guarded namespace counts; so does any write of a guarded Namespace.
/// `namespace` is the Namespace as cached (for a Namespace object, itself), which the decision
/// is given too: both ask `policy::scope` where the policies judge.
pub fn may_guard<'r>(
    policies: &PolicySet,
    request: impl Into<RequestEnvelope<'r>>,
    namespace: Option<&ObjectMeta>,
) -> bool {
    let request = request.into();
    // driftgate's own records are guarded in every namespace, and their CRD cluster-wide.
    crate::ledger::guard::guards(request)
        || crate::policy::admission::guards(request)
        || policies
            .policies()
            .iter()
            .any(|policy| may_guard_with(policy, request, namespace))
}

fn may_guard_with(
    policy: &GatePolicy,
    request: RequestEnvelope<'_>,
    namespace: Option<&ObjectMeta>,
) -> bool {
    let operation = match request.operation() {
        Operation::Create => GuardedOperation::Create,
        Operation::Update => GuardedOperation::Update,
        Operation::Delete => GuardedOperation::Delete,
        Operation::Connect => return false,
    };
    let deletion = deletion_guards(policy, request);
    let Some(name) = scope_namespace(request) else {
        // A cluster-scoped object: its kind is in the envelope (a subresource's parent kind
        // may not be, so any subresource counts where the policy guards cluster-scoped kinds).
        if !deletion && !policy.guards_operation(operation) {
            return false;
        }
        let subresource = request.sub_resource().unwrap_or("");
        return policy.guards_cluster_kind(&request.kind().group, &request.kind().kind)
            || (!subresource.is_empty() && policy.cluster_scoped.is_some());
    };
    // Where the decision's rules judge at all (`policy::scope`), with the same labels.
    let scope = policy.namespace_scope(name, namespace_labels(namespace));
    if scope.suspensions && suspension_guards(request) {
        return true;
    }
    if !scope.guarded || (!deletion && !policy.guards_operation(operation)) {
        return false;
    }
    // A Namespace object's kind may be left out of `resources` and still be judged through
    // its subresources and windows; a protected kind's delete is judged whatever they say.
    if is_namespace_object(request) || deletion {
        return true;
    }
    let resource = request.resource();
    match request.sub_resource().unwrap_or("") {
        "" => {
            policy.guards_subresource("")
                && policy.guards_resource(&resource.group, &request.kind().kind, &resource.resource)
        }
        _ => true,
    }
}

/// Whether the suspension rules may judge this write where the GitOps objects are: an UPDATE
/// of an object that may carry a suspension, itself or through a subresource (an annotation
/// written through `status` is judged as the object's own write, and may suspend or resume).
fn suspension_guards(request: RequestEnvelope<'_>) -> bool {
    request.operation() == Operation::Update
        && may_carry_suspension(&request.kind().group, &request.kind().kind)
}

/// Whether the policy's `deletions` may stop this delete, whatever else it guards: its kind
/// from the envelope, its namespace guarded or not known yet (labels may select it). A kind it
/// protects, or one of its `resources`, whose cascade it judges whatever `operations` say.
fn deletion_guards(policy: &GatePolicy, request: RequestEnvelope<'_>) -> bool {
    let Some(rules) = &policy.deletions else {
        return false;
    };
    let (kind, resource) = (request.kind(), request.resource());
    request.operation() == Operation::Delete
        && request.sub_resource().unwrap_or("").is_empty()
        && (rules.protects(&kind.group, &kind.kind, &resource.resource)
            || policy.guards_resource(&resource.group, &kind.kind, &resource.resource))
}

/// The decision for a write that [`may_guard`] but whose object could not be read (`problem`
/// says why): every policy that may guard it refuses (an Audit policy only warns), since
/// nothing can be said about what the write changes.
pub fn unreadable(policies: &PolicySet, input: &DecisionInput<'_>, problem: &str) -> Decision {
    let facts = Facts::new(input);
    let verdicts = policies
        .policies()
        .iter()
        .filter(|policy| may_guard_with(policy, input.request.request(), input.namespace))
        .map(|policy| {
            let words = RefusalWords {
                subject: facts.may_not(),
                why: format!(
                    "driftgate could not read the object in the request ({problem}), so it cannot tell what the change does"
                ),
                next: "Send the object as valid Kubernetes JSON; if the API server sent this request, report it to driftgate's maintainers".to_owned(),
                owner: owner_suffix(policy),
            };
            apply_mode(
                policy,
                RuleOutcome::refuse(Rule::Unreadable, policy, words, ""),
            )
        })
        .collect();
    assemble(&facts, verdicts)
}
