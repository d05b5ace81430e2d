//! `driftgate scan`, the pure part: which fields of an object, by its `metadata.managedFields`,
//! belong to someone other than the policy's controllers and delegations. That is the drift
//! that was there before driftgate (or beside it, in Audit mode): a person's `kubectl edit`, a
//! controller nobody listed, and the field two managers fight over.
//!
//! managedFields name a field manager, never a user, so this judges managers: a controller's are
//! its `fieldManagers`, or (when it lists none) the names its usernames write as
//! ([`ControllerManagers`]). A delegation is recognised by its fields alone: only admission
//! sees who wrote, and driftgate's gate already holds delegations to their identities.

use std::collections::BTreeSet;

use globset::GlobSet;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
use serde::Serialize;
use serde_json::Value;

use crate::fieldpath::FieldPath;
use crate::ledger::evidence::owns;
use crate::policy::{Controller, Delegation, GatePolicy};

/// The field manager of every controller kube-controller-manager runs: its clients' User-Agent,
/// whichever controller (and service account) writes.
pub const KUBE_CONTROLLER_MANAGER: &str = "kube-controller-manager";

/// The service account Argo CD's application-controller runs as, and the field manager its
/// syncs write with (client-side and server-side apply alike: Argo CD's `ArgoCDSSAManager`),
/// which is not named after the account.
const ARGOCD_APPLICATION_CONTROLLER: &str = "argocd-application-controller";
pub const ARGOCD_FIELD_MANAGER: &str = "argocd-controller";

/// The annotation the deployment controller keeps on every Deployment (through `status`).
const REVISION_ANNOTATION: &str = "deployment.kubernetes.io/revision";

/// How one controller's writes are recognised in managedFields.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ControllerManagers {
    pub controller: String,
    /// The managers (or manager patterns) that are this controller.
    pub managers: Vec<String>,
    /// Where `managers` come from, in words (`scan` prints it).
    pub matched_on: String,
    #[serde(skip)]
    patterns: Option<GlobSet>,
}

impl ControllerManagers {
    /// The policy's `fieldManagers`; without them, the names the usernames write as: a service
    /// account `system:serviceaccount:NS:NAME` as `NAME` (Flux's controllers name their field
    /// manager after their service account), Argo CD's application-controller also as
    /// `argocd-controller` (its syncs), and any kube-system service account or
    /// `system:kube-controller-manager` as `kube-controller-manager`.
    pub fn of(controller: &Controller) -> ControllerManagers {
        if !controller.field_manager_patterns.is_empty() {
            return ControllerManagers {
                controller: controller.name.clone(),
                managers: controller.field_manager_patterns.clone(),
                matched_on: "its fieldManagers".to_owned(),
                patterns: Some(controller.field_managers.clone()),
            };
        }
        let managers: BTreeSet<String> = controller
            .identity
            .username_patterns()
            .iter()
            .flat_map(|username| managers_of_username(username))
            .collect();
        let matched_on = if managers.is_empty() {
            "nothing: it lists no fieldManagers and no service account to derive one from; list its fieldManagers".to_owned()
        } else {
            "its usernames (it lists no fieldManagers)".to_owned()
        };
        ControllerManagers {
            controller: controller.name.clone(),
            managers: managers.into_iter().collect(),
            matched_on,
            patterns: None,
        }
    }

    fn matches(&self, manager: &str) -> bool {
        match &self.patterns {
            Some(patterns) => patterns.is_match(manager),
            None => self.managers.iter().any(|m| m == manager),
        }
    }
}

/// The field managers a username writes as, when they can be told: Argo CD's
/// application-controller syncs as `argocd-controller` and writes the rest (an Application's
/// status) under its account's name.
fn managers_of_username(username: &str) -> Vec<String> {
    let Some(manager) = manager_of_username(username) else {
        return Vec::new();
    };
    if manager == ARGOCD_APPLICATION_CONTROLLER {
        vec![ARGOCD_FIELD_MANAGER.to_owned(), manager]
    } else {
        vec![manager]
    }
}

/// The field manager a username writes as, when it can be told; never for a glob.
fn manager_of_username(username: &str) -> Option<String> {
    if username.contains(['*', '?', '[', '{']) {
        return None;
    }
    if username == "system:kube-controller-manager" {
        return Some(KUBE_CONTROLLER_MANAGER.to_owned());
    }
    let (namespace, name) = username
        .strip_prefix("system:serviceaccount:")?
        .split_once(':')?;
    Some(if namespace == "kube-system" {
        KUBE_CONTROLLER_MANAGER.to_owned()
    } else {
        name.to_owned()
    })
}

/// The object a report is about, as the caller listed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    pub api_version: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

/// What one object holds that is not the controllers'.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectReport {
    #[serde(flatten)]
    pub object: ObjectRef,
    pub policy: String,
    pub findings: Vec<Finding>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(
    tag = "finding",
    rename_all = "camelCase",
    rename_all_fields = "camelCase"
)]
pub enum Finding {
    /// No managedFields entry (of those it has) is a controller's: it was never applied by one.
    NeverApplied { managers: Vec<String> },
    /// A field the controller's Apply entry declares that another manager also owns, or that a
    /// delegation is there to manage: each write of one undoes the other's.
    Fight {
        field: String,
        controller: String,
        controller_manager: String,
        /// The other manager owning the field, if one does now.
        manager: Option<String>,
        operation: Option<String>,
        /// The delegation whose fields cover it, if any.
        delegation: Option<String>,
    },
    /// Fields a manager that is neither a controller nor a delegation owns.
    Drift {
        manager: String,
        operation: String,
        subresource: Option<String>,
        time: Option<String>,
        fields: Vec<String>,
    },
}

/// Why an object's managedFields could not be read.
#[derive(Debug, thiserror::Error)]
#[error("{kind} {namespace}/{name}: metadata.managedFields cannot be read: {source}")]
pub struct UnreadableManagedFields {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub source: serde_json::Error,
}

/// Scans objects against one policy.
pub struct Scanner<'p> {
    policy: &'p GatePolicy,
    controllers: Vec<ControllerManagers>,
}

impl<'p> Scanner<'p> {
    pub fn new(policy: &'p GatePolicy) -> Scanner<'p> {
        let controllers = policy
            .controllers
            .iter()
            .map(ControllerManagers::of)
            .collect();
        Scanner {
            policy,
            controllers,
        }
    }

    /// What each controller is matched on.
    pub fn controllers(&self) -> &[ControllerManagers] {
        &self.controllers
    }

    /// `object` (as JSON) judged by its managedFields; `None` when it is clean.
    pub fn scan(
        &self,
        about: ObjectRef,
        object: &Value,
    ) -> Result<Option<ObjectReport>, UnreadableManagedFields> {
        let entries = managed_fields(object).map_err(|source| UnreadableManagedFields {
            kind: about.kind.clone(),
            namespace: about.namespace.clone(),
            name: about.name.clone(),
            source,
        })?;
        let mut findings = Vec::new();
        // No entries at all (kube-controller-manager's ServiceAccount `default` has none) say
        // nothing of who wrote the object; the caller counts such objects.
        if !entries.is_empty() && !entries.iter().any(|e| self.controller_of(e).is_some()) {
            let managers = entries.iter().map(|e| manager(e).to_owned()).collect();
            findings.push(Finding::NeverApplied { managers });
        }
        let fights = self.fights(object, &entries);
        for entry in entries.iter().filter(|e| self.controller_of(e).is_none()) {
            // A fought field is reported once, as the fight.
            let fields: Vec<String> = owned_fields(entry, object)
                .into_iter()
                .filter(|path| self.is_drift(path))
                .map(|path| path.to_string())
                .filter(|path| !fights.iter().any(|f| fought_by(f, entry, path)))
                .collect();
            if !fields.is_empty() {
                findings.push(drift(entry, fields));
            }
        }
        findings.splice(0..0, fights);
        Ok((!findings.is_empty()).then(|| ObjectReport {
            object: about,
            policy: self.policy.name.clone(),
            findings,
        }))
    }

    fn controller_of(&self, entry: &ManagedFieldsEntry) -> Option<&ControllerManagers> {
        self.controllers.iter().find(|c| c.matches(manager(entry)))
    }

    /// Whether no rule explains a field owned by a manager that is no controller.
    fn is_drift(&self, path: &FieldPath) -> bool {
        !is_bookkeeping(path) && !self.is_window_key(path) && self.delegation_of(path).is_none()
    }

    /// A window's label and reason: `break-glass list` reports windows.
    fn is_window_key(&self, path: &FieldPath) -> bool {
        self.policy.break_glass.as_ref().is_some_and(|rules| {
            *path == FieldPath::new(["metadata", "labels", rules.label.as_str()])
                || *path
                    == FieldPath::new(["metadata", "annotations", rules.reason_annotation.as_str()])
        })
    }

    fn delegation_of(&self, path: &FieldPath) -> Option<&Delegation> {
        self.policy
            .delegations
            .iter()
            .find(|d| d.fields.iter().any(|f| f.covers(path)))
    }

    /// Every field a controller's Apply entry declares that another manager (not the same
    /// controller) owns too, or that a delegation covers.
    fn fights(&self, object: &Value, entries: &[ManagedFieldsEntry]) -> Vec<Finding> {
        let mut fights = Vec::new();
        for (index, entry) in entries.iter().enumerate() {
            let Some(controller) = self.controller_of(entry) else {
                continue;
            };
            if entry.operation.as_deref() != Some("Apply") {
                continue;
            }
            for path in owned_fields(entry, object) {
                let delegation = self.delegation_of(&path).map(|d| d.name.clone());
                let others: Vec<&ManagedFieldsEntry> = entries
                    .iter()
                    .enumerate()
                    .filter(|(i, other)| {
                        *i != index
                            && !controller.matches(manager(other))
                            && other
                                .fields_v1
                                .as_ref()
                                .is_some_and(|set| owns(&set.0, object, &path))
                    })
                    .map(|(_, other)| other)
                    .collect();
                let fight = |other: Option<&ManagedFieldsEntry>| Finding::Fight {
                    field: path.to_string(),
                    controller: controller.controller.clone(),
                    controller_manager: manager(entry).to_owned(),
                    manager: other.map(|o| manager(o).to_owned()),
                    operation: other.and_then(|o| o.operation.clone()),
                    delegation: delegation.clone(),
                };
                if others.is_empty() && delegation.is_some() {
                    fights.push(fight(None));
                }
                fights.extend(others.into_iter().map(|o| fight(Some(o))));
            }
        }
        fights
    }
}

/// Kubernetes' own bookkeeping, never drift: `status` (the controllers' through the status
/// subresource) and the deployment controller's revision annotation.
fn is_bookkeeping(path: &FieldPath) -> bool {
    path.starts_with(&["status"])
        || path.starts_with(&["metadata", "annotations", REVISION_ANNOTATION])
}

fn fought_by(fight: &Finding, entry: &ManagedFieldsEntry, path: &str) -> bool {
    matches!(fight, Finding::Fight { field, manager: Some(m), operation, .. }
        if field == path && m == manager(entry) && *operation == entry.operation)
}

fn drift(entry: &ManagedFieldsEntry, fields: Vec<String>) -> Finding {
    Finding::Drift {
        manager: manager(entry).to_owned(),
        operation: entry.operation.clone().unwrap_or_default(),
        subresource: entry.subresource.clone().filter(|s| !s.is_empty()),
        time: entry.time.as_ref().map(|t| t.0.to_string()),
        fields,
    }
}

fn manager(entry: &ManagedFieldsEntry) -> &str {
    entry.manager.as_deref().unwrap_or("")
}

/// Whether `object` has any managedFields entry: without one, scan cannot tell who wrote it.
pub fn has_managed_fields(object: &Value) -> bool {
    object
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .is_some_and(|entries| !entries.is_empty())
}

fn managed_fields(object: &Value) -> Result<Vec<ManagedFieldsEntry>, serde_json::Error> {
    match object.pointer("/metadata/managedFields") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(list) => serde_json::from_value(list.clone()),
    }
}

/// The fields an entry owns, as paths into `object`: every leaf of its `fieldsV1` (an element
/// of a list by its index in `object`, or by its key as written when `object` lacks it). The
/// walk uses an explicit stack, so an object of any depth is safe.
pub fn owned_fields(entry: &ManagedFieldsEntry, object: &Value) -> Vec<FieldPath> {
    let Some(fields) = entry.fields_v1.as_ref() else {
        return Vec::new();
    };
    let mut owned = Vec::new();
    let mut stack: Vec<(&Value, Option<&Value>, Vec<String>)> =
        vec![(&fields.0, Some(object), Vec::new())];
    while let Some((set, node, path)) = stack.pop() {
        let Value::Object(children) = set else {
            continue;
        };
        let mut below = children.iter().filter(|(key, _)| key.as_str() != ".");
        if below.clone().next().is_none() {
            if !path.is_empty() {
                owned.push(FieldPath(path));
            }
            continue;
        }
        for (key, child) in below.by_ref() {
            let (segment, next) = step(key, node);
            let mut child_path = path.clone();
            child_path.push(segment);
            stack.push((child, next, child_path));
        }
    }
    owned.sort();
    owned
}

/// One `fieldsV1` key (`f:name`, `k:{"name":"app"}`, `v:"value"`, `i:0`) as a path segment, and
/// the node of `object` it leads to.
fn step<'a>(key: &str, node: Option<&'a Value>) -> (String, Option<&'a Value>) {
    if let Some(name) = key.strip_prefix("f:") {
        return (name.to_owned(), node.and_then(|n| n.get(name)));
    }
    if let Some(index) = key.strip_prefix("i:") {
        return (
            index.to_owned(),
            node.and_then(|n| n.get(index.parse::<usize>().ok()?)),
        );
    }
    let list = node.and_then(Value::as_array);
    let index = list.and_then(|list| list.iter().position(|e| element_is(key, e)));
    match (list, index) {
        (Some(list), Some(index)) => (index.to_string(), list.get(index)),
        _ => (key.to_owned(), None),
    }
}

fn element_is(key: &str, element: &Value) -> bool {
    if let Some(keys) = key.strip_prefix("k:") {
        serde_json::from_str::<serde_json::Map<String, Value>>(keys)
            .is_ok_and(|keys| keys.iter().all(|(k, v)| element.get(k) == Some(v)))
    } else if let Some(value) = key.strip_prefix("v:") {
        serde_json::from_str::<Value>(value).is_ok_and(|v| &v == element)
    } else {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::PolicySet;
    use serde_json::json;

    const POLICY: &str = r#"
apiVersion: driftgate.dev/v1alpha1
kind: GatePolicy
metadata: { name: shop }
spec:
  namespaces: { include: ["shop"] }
  controllers:
    - name: flux
      usernames: ["system:serviceaccount:flux-system:kustomize-controller"]
      fieldManagers: ["kustomize-controller"]
    - name: kubernetes
      usernames:
        - "system:serviceaccount:kube-system:root-ca-cert-publisher"
        - "system:kube-controller-manager"
      heldByWindows: false
  delegations:
    - name: hpa
      usernames: ["system:serviceaccount:kube-system:horizontal-pod-autoscaler"]
      subresources: ["scale"]
      fields: ["spec.replicas"]
  breakGlass:
    maxDuration: 4h
    openers: { groups: ["sre-oncall"] }
"#;

    fn policy() -> GatePolicy {
        PolicySet::from_yaml("test.yaml", POLICY)
            .unwrap()
            .into_policies()
            .remove(0)
    }

    fn about() -> ObjectRef {
        ObjectRef {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            namespace: "shop".into(),
            name: "api".into(),
        }
    }

    fn entry(manager: &str, operation: &str, subresource: &str, fields: Value) -> Value {
        let mut entry = json!({
            "manager": manager, "operation": operation, "apiVersion": "apps/v1",
            "time": "2026-11-30T09:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": fields,
        });
        if !subresource.is_empty() {
            entry["subresource"] = json!(subresource);
        }
        entry
    }

    /// A Deployment with two containers, as the API server returns it, with these entries.
    fn deployment(entries: Vec<Value>) -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {
                "name": "api", "namespace": "shop",
                "labels": {"app": "api", "driftgate.dev/break-glass": "20261130T1000Z"},
                "annotations": {"deployment.kubernetes.io/revision": "2"},
                "managedFields": entries,
            },
            "spec": {
                "replicas": 3,
                "template": {"spec": {"containers": [
                    {"name": "app", "image": "shop/api:2", "resources": {"limits": {"memory": "1Gi"}}},
                    {"name": "sidecar", "image": "proxy:1"},
                ]}},
            },
            "status": {"replicas": 3},
        })
    }

    fn flux(with_replicas: bool) -> Value {
        let mut spec = json!({"f:template": {"f:spec": {"f:containers": {
            "k:{\"name\":\"app\"}": {".": {}, "f:name": {}, "f:image": {}},
            "k:{\"name\":\"sidecar\"}": {".": {}, "f:name": {}, "f:image": {}},
        }}}});
        if with_replicas {
            spec["f:replicas"] = json!({});
        }
        entry(
            "kustomize-controller",
            "Apply",
            "",
            json!({"f:metadata": {"f:labels": {"f:app": {}}}, "f:spec": spec}),
        )
    }

    fn kubernetes_bookkeeping() -> Value {
        entry(
            "kube-controller-manager",
            "Update",
            "status",
            json!({"f:metadata": {"f:annotations": {"f:deployment.kubernetes.io/revision": {}}},
                   "f:status": {"f:replicas": {}}}),
        )
    }

    fn scan(object: &Value) -> Option<ObjectReport> {
        Scanner::new(&policy()).scan(about(), object).unwrap()
    }

    #[test]
    fn the_controllers_and_kubernetes_bookkeeping_alone_are_clean() {
        assert_eq!(
            scan(&deployment(vec![flux(false), kubernetes_bookkeeping()])),
            None
        );
    }

    #[test]
    fn a_person_s_edit_is_drift_with_its_manager_time_and_fields_but_not_its_status() {
        let edit = entry(
            "kubectl-edit",
            "Update",
            "",
            json!({"f:spec": {"f:template": {"f:spec": {"f:containers": {
                "k:{\"name\":\"app\"}": {"f:resources": {"f:limits": {"f:memory": {}}}},
            }}}}, "f:status": {"f:replicas": {}}}),
        );
        let report = scan(&deployment(vec![flux(false), edit])).unwrap();
        assert_eq!(report.policy, "shop");
        assert_eq!(
            report.findings,
            [Finding::Drift {
                manager: "kubectl-edit".into(),
                operation: "Update".into(),
                subresource: None,
                time: Some("2026-11-30T09:00:00Z".into()),
                fields: vec!["spec.template.spec.containers[0].resources.limits.memory".into()],
            }]
        );
    }

    #[test]
    fn the_hpa_on_replicas_through_scale_is_a_delegation_not_drift() {
        let hpa = entry(
            "kube-controller-manager",
            "Update",
            "scale",
            json!({"f:spec": {"f:replicas": {}}}),
        );
        assert_eq!(scan(&deployment(vec![flux(false), hpa])), None);
        // Whoever the manager is: managedFields name no user, the gate judged the identity.
        let scaled_by_hand = entry(
            "kubectl-scale",
            "Update",
            "scale",
            json!({"f:spec": {"f:replicas": {}}}),
        );
        assert_eq!(scan(&deployment(vec![flux(false), scaled_by_hand])), None);
    }

    #[test]
    fn replicas_declared_by_the_controller_and_delegated_to_the_hpa_is_a_fight() {
        let report = scan(&deployment(vec![flux(true)])).unwrap();
        assert_eq!(
            report.findings,
            [Finding::Fight {
                field: "spec.replicas".into(),
                controller: "flux".into(),
                controller_manager: "kustomize-controller".into(),
                manager: None,
                operation: None,
                delegation: Some("hpa".into()),
            }]
        );
    }

    #[test]
    fn a_field_the_controller_applies_and_another_manager_owns_is_one_fight_naming_both() {
        let patch = entry(
            "kubectl-patch",
            "Update",
            "",
            json!({"f:spec": {"f:template": {"f:spec": {"f:containers": {
                "k:{\"name\":\"sidecar\"}": {"f:image": {}},
            }}}}}),
        );
        let report = scan(&deployment(vec![flux(false), patch])).unwrap();
        assert_eq!(
            report.findings,
            [Finding::Fight {
                field: "spec.template.spec.containers[1].image".into(),
                controller: "flux".into(),
                controller_manager: "kustomize-controller".into(),
                manager: Some("kubectl-patch".into()),
                operation: Some("Update".into()),
                delegation: None,
            }],
            "the fought field is not reported again as drift"
        );
    }

    #[test]
    fn an_object_no_controller_ever_applied_is_said_so_and_its_fields_are_drift() {
        let create = entry(
            "kubectl-create",
            "Update",
            "",
            json!({"f:metadata": {"f:labels": {"f:app": {}}}}),
        );
        let report = scan(&deployment(vec![create])).unwrap();
        assert_eq!(
            report.findings[0],
            Finding::NeverApplied {
                managers: vec!["kubectl-create".into()]
            }
        );
        assert!(matches!(&report.findings[1], Finding::Drift { fields, .. }
            if fields == &["metadata.labels.app".to_owned()]));
        let bare = json!({"metadata": {"name": "default"}});
        assert_eq!(scan(&bare), None, "no managedFields: nothing to judge");
        assert!(!has_managed_fields(&bare));
        assert!(has_managed_fields(&deployment(vec![flux(false)])));
    }

    #[test]
    fn a_window_label_is_reported_by_break_glass_list_not_as_drift() {
        let label = entry(
            "kubectl-label",
            "Update",
            "",
            json!({"f:metadata": {"f:labels": {"f:driftgate.dev/break-glass": {}}}}),
        );
        assert_eq!(scan(&deployment(vec![flux(false), label])), None);
    }

    #[test]
    fn a_controller_without_field_managers_is_matched_on_its_service_accounts() {
        let policy = policy();
        let scanner = Scanner::new(&policy);
        let [flux, kubernetes] = scanner.controllers() else {
            panic!("two controllers");
        };
        assert_eq!(flux.managers, ["kustomize-controller"]);
        assert_eq!(flux.matched_on, "its fieldManagers");
        assert_eq!(kubernetes.managers, [KUBE_CONTROLLER_MANAGER]);
        assert_eq!(
            kubernetes.matched_on,
            "its usernames (it lists no fieldManagers)"
        );
        assert_eq!(
            managers_of_username("system:serviceaccount:argocd:argocd-application-controller"),
            ["argocd-controller", "argocd-application-controller"]
        );
        assert_eq!(
            managers_of_username("system:serviceaccount:flux-system:kustomize-controller"),
            ["kustomize-controller"]
        );
        assert_eq!(manager_of_username("alice"), None);
        assert_eq!(manager_of_username("system:serviceaccount:x:*"), None);
    }

    /// What Argo CD's real application-controller writes (the client-side apply capture, its
    /// sync as `argocd-controller` and the deployment controller's status): clean under a
    /// policy that names Argo CD by its service account only, and a later `kubectl patch` is
    /// drift. Named after the account alone, every Argo CD object would be never-applied.
    #[test]
    fn argo_cd_is_recognised_by_its_service_account_as_argocd_controller() {
        let policy = PolicySet::from_yaml(
            "test.yaml",
            &POLICY.replace(
                "    - name: flux\n      usernames: [\"system:serviceaccount:flux-system:kustomize-controller\"]\n      fieldManagers: [\"kustomize-controller\"]\n",
                "    - name: argocd\n      usernames: [\"system:serviceaccount:argocd:argocd-application-controller\"]\n",
            ),
        )
        .unwrap()
        .into_policies()
        .remove(0);
        let scanner = Scanner::new(&policy);
        assert_eq!(
            scanner.controllers()[0].managers,
            ["argocd-application-controller", "argocd-controller"]
        );
        let review: Value = serde_json::from_str(include_str!(
            "../../../tests/fixtures/argocd-real-apply.json"
        ))
        .unwrap();
        let mut object = review["request"]["object"].clone();
        assert_eq!(scanner.scan(about(), &object).unwrap(), None);
        object["metadata"]["managedFields"]
            .as_array_mut()
            .unwrap()
            .push(entry(
                "kubectl-patch",
                "Update",
                "",
                json!({"f:spec": {"f:template": {"f:metadata": {"f:labels": {"f:hotfix": {}}}}}}),
            ));
        let report = scanner.scan(about(), &object).unwrap().unwrap();
        assert!(
            matches!(&report.findings[..], [Finding::Drift { manager, .. }] if manager == "kubectl-patch"),
            "{report:?}"
        );
    }

    #[test]
    fn unreadable_managed_fields_name_the_object() {
        let object = json!({"metadata": {"managedFields": "not a list"}});
        let error = Scanner::new(&policy()).scan(about(), &object).unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("Deployment shop/api: metadata.managedFields cannot be read"),
            "{error}"
        );
    }

    #[test]
    fn owned_fields_are_leaves_with_list_elements_by_index() {
        let object = json!({"metadata": {"finalizers": ["a", "b"]},
                            "spec": {"ports": [{"port": 80}, {"port": 443}], "args": ["x"]}});
        let entry: ManagedFieldsEntry = serde_json::from_value(entry(
            "m",
            "Update",
            "",
            json!({"f:metadata": {"f:finalizers": {"v:\"b\"": {}}},
                   "f:spec": {"f:ports": {"k:{\"port\":443}": {".": {}, "f:port": {}}},
                              "f:args": {"i:0": {}},
                              "f:gone": {"k:{\"name\":\"x\"}": {"f:y": {}}}}}),
        ))
        .unwrap();
        let owned: Vec<String> = owned_fields(&entry, &object)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            owned,
            [
                "metadata.finalizers[1]",
                "spec.args[0]",
                "spec.gone[k:{\"name\":\"x\"}].y",
                "spec.ports[1].port",
            ]
        );
    }
}
