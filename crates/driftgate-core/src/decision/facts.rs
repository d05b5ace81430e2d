//! What every rule of the decision reads, computed once per request ([`Facts`]), the inputs it
//! is computed from ([`DecisionInput`]), and what a rule answers ([`RuleOutcome`]). The rule
//! families (`break_glass`, `deletion`, `suspension`, the scope) and the decision's own steps
//! read these; none of them reads the decision's module back.

use std::cell::OnceCell;
use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::authentication::v1::UserInfo;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube_core::DynamicObject;
use kube_core::admission::Operation;

use crate::cascade::DeletionCascade;
use crate::diff::{changed_paths, changed_status_paths};
use crate::fieldpath::FieldPath;
use crate::ownership::forged_ownership;
use crate::policy::document::GuardedOperation;
use crate::policy::{GatePolicy, PolicySet};
use crate::request::{RequestEnvelope, RequestFacts};
use crate::text::{MAX_NAME_CHARS, echo};

use super::verdict::*;
use crate::window::BreakGlassWindow;

/// The times of the controllers' recent deletes in one namespace, by policy: what a decision
/// about a delete there reads (`deletions::DeletionTally::recent`).
pub type RecentDeletes = BTreeMap<String, Vec<Timestamp>>;

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
    pub silence: Option<&'a dyn StoppedControllers>,
}

/// What a refusal asks of the controllers' silence tracker (`silence::ControllerSilence`): the
/// sentence a refused person reads when the policy's GitOps controller looks stopped, or None.
/// A trait, so that the decision does not import the tracker, which reads decisions.
pub trait StoppedControllers: std::fmt::Debug + Sync {
    fn sentence(&self, policy: &GatePolicy, now: Timestamp) -> Option<String>;
}

/// What every policy looks at, computed once per request.
pub(super) struct Facts<'a> {
    pub(super) input: &'a DecisionInput<'a>,
    pub(super) about: &'a RequestFacts<'a>,
    pub(super) operation: Option<GuardedOperation>,
    /// The subresource the write is judged as: "" for the object itself.
    pub(super) subresource: &'a str,
    /// A subresource write judged as a write to the object itself, because its effect reaches
    /// beyond the subresource (labels, annotations, finalizers, owners, spec, ownership): the
    /// API server keeps such changes through `status` of Services and Namespaces, through
    /// `namespaces/finalize`, `pods/resize` and others (tests/SECURITY.md).
    pub(super) through: Option<&'a str>,
    /// The namespace that scopes the write; for a Namespace object, its own name.
    pub(super) namespace: Option<&'a str>,
    /// The kind of the object written (for a subresource, of its parent); the resource's name
    /// when the kind could not be resolved.
    pub(super) kind: &'a str,
    /// Whether `kind` was resolved: false for a subresource whose parent kind neither discovery
    /// nor the parent object told.
    pub(super) kind_known: bool,
    /// Whether `.status` counts as a change: where the resource has no status subresource.
    pub(super) judge_status: bool,
    pub(super) user: &'a UserInfo,
    pub(super) changes: OnceCell<Changes>,
    /// For a DELETE: the protected objects the garbage collector would delete with the object,
    /// as the server read them; None when not read (no cluster, `eval`).
    pub(super) cascade: Option<&'a DeletionCascade>,
}

/// What an UPDATE changed.
#[derive(Default)]
pub(super) struct Changes {
    pub(super) paths: Vec<FieldPath>,
    /// How `managedFields` changed beyond the API server's bookkeeping (then `paths` holds
    /// `metadata.managedFields` too).
    pub(super) forged_ownership: Option<String>,
}

/// The changes of an UPDATE: the fields that differ, `.status` where it is judged, and
/// `metadata.managedFields` when ownership changed beyond the API server's bookkeeping. A
/// subresource write cannot forge ownership (the API server starts from the stored
/// managedFields there, tests/SECURITY.md), so its managedFields are its own bookkeeping.
pub(super) fn effective_changes(
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
pub(super) fn resolve_kind<'a>(input: &DecisionInput<'a>, subresource: &str) -> (&'a str, bool) {
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
    pub(super) fn new(input: &'a DecisionInput<'a>) -> Self {
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
    pub(super) fn carries_whole_object(&self) -> bool {
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
    pub(super) fn request(&self) -> RequestEnvelope<'a> {
        self.about.request()
    }

    pub(super) fn group(&self) -> &str {
        &self.request().resource().group
    }

    /// Changed field paths of an UPDATE; empty for other operations.
    pub(super) fn changes(&self) -> &[FieldPath] {
        &self.all_changes().paths
    }

    pub(super) fn all_changes(&self) -> &Changes {
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

    pub(super) fn is_update(&self) -> bool {
        self.operation == Some(GuardedOperation::Update)
    }

    /// The stored object whose labels may carry a window: `oldObject` for the object itself,
    /// the caller-supplied parent for a subresource. A CREATE has none.
    pub(super) fn stored_meta(&self) -> Option<&'a ObjectMeta> {
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
    pub(super) fn new_meta(&self) -> Option<&'a ObjectMeta> {
        self.about.object().map(|o| o.metadata())
    }

    /// "Deployment prod-payments/api", "Deployment prod-payments/api (scale)", "Service
    /// prod-payments/api (through status)".
    pub(super) fn object_words(&self) -> String {
        self.about
            .object_words(self.kind, self.subresource, self.through)
    }

    /// "bob may not update Deployment prod-payments/api": the subject of most refusals.
    pub(super) fn may_not(&self) -> String {
        format!(
            "{} may not {} {}",
            self.about.who(),
            self.about.operation_word(),
            self.object_words()
        )
    }

    /// The command an opener would run, for denial messages.
    pub(super) fn open_command(&self) -> String {
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
    pub(super) fn target_type(&self) -> String {
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

    pub(super) fn is_namespace_object(&self) -> bool {
        self.about.is_namespace_object()
    }
}

/// A verdict before the policy's mode is applied.
pub(super) struct RuleOutcome {
    pub(super) rule: Rule,
    pub(super) admit: bool,
    pub(super) message: Option<String>,
    pub(super) warning: Option<String>,
    pub(super) matched: Option<String>,
    pub(super) window: Option<BreakGlassWindow>,
    pub(super) new_window: Option<BreakGlassWindow>,
    pub(super) refusal: Option<RefusalWords>,
}

impl RuleOutcome {
    pub(super) fn admit(rule: Rule) -> Self {
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
    pub(super) fn refuse(
        rule: Rule,
        policy: &GatePolicy,
        words: RefusalWords,
        detail: &str,
    ) -> Self {
        RuleOutcome {
            admit: false,
            message: Some(words.message(&policy.name, rule, detail)),
            refusal: Some(words),
            ..RuleOutcome::admit(rule)
        }
    }
}

/// Whether the controller a verdict matched is one that windows hold.
pub(super) fn held(policies: &PolicySet, verdict: &PolicyVerdict) -> bool {
    verdict
        .policy_in(policies)
        .into_iter()
        .flat_map(|p| &p.controllers)
        .find(|c| verdict.matched.as_deref() == Some(c.name.as_str()))
        .is_none_or(|c| c.held_by_windows)
}

/// The policy's controller this request comes from, by identity (a delete has no field manager).
pub(super) fn controller_of<'p>(
    policy: &'p GatePolicy,
    facts: &Facts<'_>,
) -> Option<&'p crate::policy::Controller> {
    policy
        .controllers
        .iter()
        .find(|c| c.identity.matches(facts.user))
}
