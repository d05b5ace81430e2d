//! Which writes a policy judges: its namespaces, kinds, operations and subresources.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube_core::admission::Operation;

use crate::policy::document::GuardedOperation;
use crate::policy::scope::{NamespaceScope, may_carry_suspension};
use crate::policy::{GatePolicy, NamespaceLabels, PolicySet};
use crate::request::{RequestEnvelope, is_namespace_object, scope_namespace};

use super::facts::*;

pub(super) fn in_scope(policy: &GatePolicy, facts: &Facts<'_>) -> bool {
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
pub(super) fn guards_cluster_object(policy: &GatePolicy, facts: &Facts<'_>) -> bool {
    facts.namespace.is_none()
        && facts.kind_known
        && policy.guards_cluster_kind(facts.group(), facts.kind)
}

pub(super) fn guards_namespace(policy: &GatePolicy, facts: &Facts<'_>) -> bool {
    namespace_scope(policy, facts).guarded
}

/// Which of the policy's rules judge the write's namespace (none for a cluster-scoped object):
/// the one definition the keeper and the envelope-first path read too (`policy::scope`).
pub(super) fn namespace_scope(policy: &GatePolicy, facts: &Facts<'_>) -> NamespaceScope {
    let Some(namespace) = facts.namespace else {
        return NamespaceScope::default();
    };
    policy.namespace_scope(namespace, namespace_labels(facts.input.namespace))
}

/// The labels of the Namespace as cached; unknown without it.
pub(super) fn namespace_labels(namespace: Option<&ObjectMeta>) -> NamespaceLabels<'_> {
    match namespace {
        Some(meta) => NamespaceLabels::Known(meta.labels.as_ref().unwrap_or(empty_labels())),
        None => NamespaceLabels::Unknown,
    }
}

pub(super) fn empty_labels() -> &'static BTreeMap<String, String> {
    static EMPTY: BTreeMap<String, String> = BTreeMap::new();
    &EMPTY
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
    crate::decision::ledger_guard::guards(request)
        || crate::decision::policy_objects::guards(request)
        || policies
            .policies()
            .iter()
            .any(|policy| may_guard_with(policy, request, namespace))
}

pub(super) fn may_guard_with(
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
pub(super) fn suspension_guards(request: RequestEnvelope<'_>) -> bool {
    request.operation() == Operation::Update
        && may_carry_suspension(&request.kind().group, &request.kind().kind)
}

/// Whether the policy's `deletions` may stop this delete, whatever else it guards: its kind
/// from the envelope, its namespace guarded or not known yet (labels may select it). A kind it
/// protects, or one of its `resources`, whose cascade it judges whatever `operations` say.
pub(super) fn deletion_guards(policy: &GatePolicy, request: RequestEnvelope<'_>) -> bool {
    let Some(rules) = &policy.deletions else {
        return false;
    };
    let (kind, resource) = (request.kind(), request.resource());
    request.operation() == Operation::Delete
        && request.sub_resource().unwrap_or("").is_empty()
        && (rules.protects(&kind.group, &kind.kind, &resource.resource)
            || policy.guards_resource(&resource.group, &kind.kind, &resource.resource))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cached Namespace without labels is known to have none, which a selector may ask for
    /// (`DoesNotExist`, `NotIn`); without the Namespace they are unknown.
    #[test]
    fn a_namespace_without_labels_is_known_to_have_none() {
        let meta = ObjectMeta::default();
        match namespace_labels(Some(&meta)) {
            NamespaceLabels::Known(labels) => assert!(labels.is_empty(), "{labels:?}"),
            NamespaceLabels::Unknown => panic!("a cached Namespace's labels are known"),
        }
        assert!(matches!(namespace_labels(None), NamespaceLabels::Unknown));
    }
}
