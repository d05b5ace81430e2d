//! The rules of deletions: protected kinds, the cascade a delete starts, and the controllers'
//! deletion limit.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube_core::admission::Operation;

use crate::cascade::{DeletionCascade, Dependent, orphans_dependents};
use crate::policy::{DeletionRules, GatePolicy, PolicySet};
use crate::text::{MAX_NAME_CHARS, echo};

use jiff::Timestamp;

use crate::window::{WindowScope, window_state};

use super::facts::*;
use super::verdict::*;
use super::{scope::*, window::*, words::*};

/// How many of `times` fall within `per` before `now`.
pub fn within(times: &[Timestamp], per: jiff::SignedDuration, now: Timestamp) -> usize {
    let since = now - per;
    times.iter().filter(|t| **t > since).count()
}

/// The refusal of a delete the policy's `deletions` stop, if this is one: a protected kind
/// without the allow annotation or an opener's open window, or a controller's delete beyond
/// the limit. Otherwise the other rules judge it.
pub(super) fn refuse_deletion(policy: &GatePolicy, facts: &Facts<'_>) -> Option<RuleOutcome> {
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

pub(super) fn allowed_by_annotation(facts: &Facts<'_>, rules: &DeletionRules) -> bool {
    facts
        .stored_meta()
        .is_some_and(|meta| marked_for_deletion(meta, rules))
}

/// Whether the deleter is an opener of the policy's windows and one is open on the object or
/// its namespace: a deletion window.
pub(super) fn opener_under_window(policy: &GatePolicy, facts: &Facts<'_>) -> bool {
    policy.break_glass.as_ref().is_some_and(|rules| {
        rules.openers.matches(facts.user) && open_window(&windows(facts, rules)).is_some()
    })
}

pub(super) fn deletion_protected(
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
/// `cascade_rules`).
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
pub(super) fn cascade_rules<'p>(
    policy: &'p GatePolicy,
    facts: &Facts<'_>,
) -> Option<&'p DeletionRules> {
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
pub(super) fn refuse_cascade(
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

/// Whether `meta` carries the policy's allow annotation, "true".
pub(super) fn marked_for_deletion(meta: &ObjectMeta, rules: &DeletionRules) -> bool {
    meta.annotations
        .as_ref()
        .and_then(|annotations| annotations.get(&rules.allow_annotation))
        .is_some_and(|value| value == "true")
}

/// Whether the deleter is an opener and a window is open on `meta` (an object the delete would
/// take with it) or, namespace-wide, on the namespace.
pub(super) fn opener_under_window_on(
    policy: &GatePolicy,
    facts: &Facts<'_>,
    meta: &ObjectMeta,
) -> bool {
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
pub(super) fn deletion_over_limit(policy: &GatePolicy, facts: &Facts<'_>) -> Option<RuleOutcome> {
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
