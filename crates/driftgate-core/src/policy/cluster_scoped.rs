//! The cluster-scoped kinds a policy guards (`spec.clusterScoped`), and what Kubernetes' own
//! types say about the kinds a policy may name there: which are cluster-scoped, which are
//! namespaced, and which the API server never sends to an admission webhook.

use std::any::TypeId;

use k8s_openapi::{ClusterResourceScope, Resource};

/// A kind as Kubernetes' own API serves it (from k8s-openapi's types).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BuiltInKind {
    /// "" for the core group.
    pub group: &'static str,
    pub kind: &'static str,
    /// The resource's name in URLs and webhook rules: `clusterroles`.
    pub plural: &'static str,
    pub cluster_scoped: bool,
}

fn built_in<T: Resource>() -> BuiltInKind
where
    T::Scope: 'static,
{
    BuiltInKind {
        group: T::GROUP,
        kind: T::KIND,
        plural: T::URL_PATH_SEGMENT,
        cluster_scoped: TypeId::of::<T::Scope>() == TypeId::of::<ClusterResourceScope>(),
    }
}

macro_rules! built_ins {
    ($($path:path),* $(,)?) => {
        vec![$(built_in::<$path>()),*]
    };
}

/// The stored kinds of Kubernetes' own API groups (reviews and other create-only kinds left
/// out: nothing is stored to guard).
pub fn built_in_kinds() -> Vec<BuiltInKind> {
    use k8s_openapi::api::*;
    built_ins![
        admissionregistration::v1::MutatingWebhookConfiguration,
        admissionregistration::v1::ValidatingAdmissionPolicy,
        admissionregistration::v1::ValidatingAdmissionPolicyBinding,
        admissionregistration::v1::ValidatingWebhookConfiguration,
        admissionregistration::v1beta1::MutatingAdmissionPolicy,
        admissionregistration::v1beta1::MutatingAdmissionPolicyBinding,
        k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
        k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService,
        apps::v1::ControllerRevision,
        apps::v1::DaemonSet,
        apps::v1::Deployment,
        apps::v1::ReplicaSet,
        apps::v1::StatefulSet,
        autoscaling::v2::HorizontalPodAutoscaler,
        batch::v1::CronJob,
        batch::v1::Job,
        certificates::v1::CertificateSigningRequest,
        certificates::v1beta1::ClusterTrustBundle,
        coordination::v1::Lease,
        core::v1::ConfigMap,
        core::v1::Endpoints,
        core::v1::Event,
        core::v1::LimitRange,
        core::v1::Namespace,
        core::v1::Node,
        core::v1::PersistentVolume,
        core::v1::PersistentVolumeClaim,
        core::v1::Pod,
        core::v1::PodTemplate,
        core::v1::ReplicationController,
        core::v1::ResourceQuota,
        core::v1::Secret,
        core::v1::Service,
        core::v1::ServiceAccount,
        discovery::v1::EndpointSlice,
        events::v1::Event,
        flowcontrol::v1::FlowSchema,
        flowcontrol::v1::PriorityLevelConfiguration,
        networking::v1::IPAddress,
        networking::v1::Ingress,
        networking::v1::IngressClass,
        networking::v1::NetworkPolicy,
        networking::v1::ServiceCIDR,
        node::v1::RuntimeClass,
        policy::v1::PodDisruptionBudget,
        rbac::v1::ClusterRole,
        rbac::v1::ClusterRoleBinding,
        rbac::v1::Role,
        rbac::v1::RoleBinding,
        resource::v1::DeviceClass,
        resource::v1::ResourceClaim,
        resource::v1::ResourceClaimTemplate,
        resource::v1::ResourceSlice,
        scheduling::v1::PriorityClass,
        storage::v1::CSIDriver,
        storage::v1::CSINode,
        storage::v1::CSIStorageCapacity,
        storage::v1::StorageClass,
        storage::v1::VolumeAttachment,
    ]
}

/// The group whose configuration objects the API server never sends to admission webhooks:
/// a webhook could otherwise lock itself, or every other webhook, in place.
pub const ADMISSION_CONFIGURATION_GROUP: &str = "admissionregistration.k8s.io";

/// What `clusterScoped` guards when it lists no resources: definitions of new APIs and
/// cluster-wide permissions, the objects a GitOps repository of a platform holds.
pub const DEFAULT_CLUSTER_SCOPED: &[(&str, &str)] = &[
    ("apiextensions.k8s.io", "CustomResourceDefinition"),
    ("rbac.authorization.k8s.io", "ClusterRole"),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
];

/// One guarded cluster-scoped kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterKind {
    /// "" for the core group.
    pub group: String,
    pub kind: String,
}

impl std::fmt::Display for ClusterKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let group = if self.group.is_empty() {
            "core"
        } else {
            &self.group
        };
        write!(f, "{group}/{}", self.kind)
    }
}

/// The cluster-scoped kinds one policy guards.
#[derive(Clone, Debug, Default)]
pub struct ClusterScopedRules {
    pub kinds: Vec<ClusterKind>,
}

impl ClusterScopedRules {
    /// Whether a write of `group`/`kind` outside any namespace is this policy's.
    pub fn guards(&self, group: &str, kind: &str) -> bool {
        let group = if group == "core" { "" } else { group };
        self.kinds
            .iter()
            .any(|k| k.group == group && k.kind == kind)
    }
}

/// Why `group`/`kind` cannot be guarded as cluster-scoped, as a sentence; None when it can.
/// Kinds of groups Kubernetes does not serve itself are custom resources, which a policy may
/// name before their CRD is installed.
pub fn problem(group: &str, kind: &str, known: &[BuiltInKind]) -> Option<String> {
    let shown = ClusterKind {
        group: group.to_owned(),
        kind: kind.to_owned(),
    };
    if group == ADMISSION_CONFIGURATION_GROUP {
        return Some(format!(
            "{shown} cannot be guarded: the API server never calls admission webhooks for ValidatingWebhookConfiguration, MutatingWebhookConfiguration, ValidatingAdmissionPolicy, MutatingAdmissionPolicy or their bindings, so driftgate would never see these writes; limit who may write them with RBAC, or guard driftgate's own webhook configuration with a ValidatingAdmissionPolicy (the API server does evaluate those for webhook configurations)"
        ));
    }
    if group.is_empty() && kind == "Namespace" {
        return Some(
            "core/Namespace is guarded already: a Namespace that spec.namespaces selects is judged as a write in that namespace (its windows, its deletions); list the namespaces there instead".to_owned(),
        );
    }
    let in_group: Vec<&BuiltInKind> = known.iter().filter(|k| k.group == group).collect();
    if in_group.is_empty() {
        return None;
    }
    match in_group.iter().find(|k| k.kind == kind) {
        Some(k) if k.cluster_scoped => None,
        Some(_) => Some(format!(
            "{shown} is namespaced: spec.namespaces and spec.resources guard it, in the namespaces the policy selects"
        )),
        None => {
            let cluster: Vec<&str> = in_group
                .iter()
                .filter(|k| k.cluster_scoped)
                .map(|k| k.kind)
                .collect();
            let near = crate::policy::reading::nearest_field(kind, &cluster)
                .map(|near| format!("did you mean {near}? "))
                .unwrap_or_default();
            let list = if cluster.is_empty() {
                "none".to_owned()
            } else {
                cluster.join(", ")
            };
            Some(format!(
                "{shown} is not a kind Kubernetes serves; {near}the cluster-scoped kinds of {} are: {list}",
                if group.is_empty() { "core" } else { group }
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubernetes_types_say_which_kinds_are_cluster_scoped() {
        let known = built_in_kinds();
        let find = |group: &str, kind: &str| {
            *known
                .iter()
                .find(|k| k.group == group && k.kind == kind)
                .unwrap()
        };
        let role = find("rbac.authorization.k8s.io", "ClusterRole");
        assert_eq!((role.plural, role.cluster_scoped), ("clusterroles", true));
        let crd = find("apiextensions.k8s.io", "CustomResourceDefinition");
        assert_eq!(
            (crd.plural, crd.cluster_scoped),
            ("customresourcedefinitions", true)
        );
        assert!(!find("rbac.authorization.k8s.io", "Role").cluster_scoped);
        assert!(!find("", "ConfigMap").cluster_scoped);
    }

    #[test]
    fn each_kind_that_cannot_be_guarded_says_why() {
        let known = built_in_kinds();
        let said = |group, kind| problem(group, kind, &known).unwrap_or_default();
        assert!(problem("rbac.authorization.k8s.io", "ClusterRole", &known).is_none());
        assert!(problem("example.com", "Widget", &known).is_none());
        assert!(
            said(
                "admissionregistration.k8s.io",
                "ValidatingWebhookConfiguration"
            )
            .contains("never calls admission webhooks")
        );
        assert!(said("", "Namespace").contains("guarded already"));
        assert!(said("rbac.authorization.k8s.io", "Role").contains("is namespaced"));
        assert!(
            said("rbac.authorization.k8s.io", "ClusterRol").contains("did you mean ClusterRole?")
        );
    }

    const POLICY: &str = r#"apiVersion: driftgate.dev/v1alpha1
kind: GatePolicy
metadata: {name: platform}
spec:
  namespaces: {include: ["prod-*"]}
  controllers: [{name: flux, usernames: [flux]}]
  breakGlass: {maxDuration: 1h, openers: {groups: [sre]}}
  deletions: {}
"#;

    #[test]
    fn without_a_list_the_platform_kinds_are_guarded_and_crds_protected_from_deletion() {
        let text = format!("{POLICY}  clusterScoped: {{}}\n");
        let set = crate::policy::PolicySet::from_yaml("inline", &text).unwrap();
        let policy = &set.policies()[0];
        assert!(policy.guards_cluster_kind("rbac.authorization.k8s.io", "ClusterRole"));
        assert!(policy.guards_cluster_kind("rbac.authorization.k8s.io", "ClusterRoleBinding"));
        assert!(policy.guards_cluster_kind("apiextensions.k8s.io", "CustomResourceDefinition"));
        assert!(!policy.guards_cluster_kind("scheduling.k8s.io", "PriorityClass"));
        let deletions = policy.deletions.as_ref().unwrap();
        assert!(deletions.protects(
            "apiextensions.k8s.io",
            "CustomResourceDefinition",
            "customresourcedefinitions"
        ));
        // Without clusterScoped, the deletion defaults stay PVCs and Namespaces.
        let set = crate::policy::PolicySet::from_yaml("inline", POLICY).unwrap();
        let policy = &set.policies()[0];
        assert!(!policy.guards_cluster_kind("rbac.authorization.k8s.io", "ClusterRole"));
        assert!(!policy.deletions.as_ref().unwrap().protects(
            "apiextensions.k8s.io",
            "CustomResourceDefinition",
            "customresourcedefinitions"
        ));
    }

    #[test]
    fn every_entry_that_cannot_be_guarded_is_one_problem_at_its_line() {
        let text = format!(
            "{POLICY}  clusterScoped:\n    resources:\n      - {{group: rbac.authorization.k8s.io, kind: ClusterRole}}\n      - {{group: admissionregistration.k8s.io, kind: ValidatingWebhookConfiguration}}\n      - {{kind: Namespace}}\n      - {{group: rbac.authorization.k8s.io, kind: Role}}\n      - {{group: rbac.authorization.k8s.io, kind: ClusterRol}}\n      - {{group: rbac.authorization.k8s.io, kind: ClusterRole}}\n      - {{group: example.com, kind: Widget}}\n      - {{group: core, kind: PersistentVolume}}\n"
        );
        let errors = crate::policy::PolicySet::from_yaml("inline", &text)
            .unwrap_err()
            .0;
        let found: Vec<(u64, &str)> = errors.iter().map(|e| (e.line, e.field.as_str())).collect();
        assert_eq!(
            found,
            [
                (12, "spec.clusterScoped.resources[1]"),
                (13, "spec.clusterScoped.resources[2]"),
                (14, "spec.clusterScoped.resources[3]"),
                (15, "spec.clusterScoped.resources[4]"),
                (16, "spec.clusterScoped.resources[5]"),
            ],
            "{errors:#?}"
        );
        assert!(errors[0].problem.contains("never calls admission webhooks"));
        assert!(errors[0].problem.contains("ValidatingAdmissionPolicy"));
        assert!(errors[1].problem.contains("guarded already"));
        assert!(errors[2].problem.contains("is namespaced"));
        assert!(errors[3].problem.contains("did you mean ClusterRole?"));
        assert_eq!(
            errors[4].problem,
            "rbac.authorization.k8s.io/ClusterRole is listed twice"
        );
    }
}
