//! Issue 24, section 5: an operator's custom resource that owns claims, directly and through
//! the StatefulSet it owns, with the real kube-controller-manager's StatefulSet controller and
//! garbage collector, and the shared driftgate as driftgate's service account with the chart's
//! RBAC. Flux is played with `kubectl` as its identity (one exact delete at a time); the real
//! Flux pruning a StatefulSet is `real_flux::pruning_a_statefulset_whose_claims_go_with_it_…`.

use std::time::{Duration, Instant};

use crate::harness::chart::NAMESPACE;
use crate::harness::{ADMIN, ALICE, FLUX, control_plane, install_crypto_provider, shared};

use super::real_flux::{claim_owned_by_statefulset, read_back, statefulset_with_claims};
use super::{assert_denied, establish_crd, eventually, flux_apply, kubectl, show};

/// A kind no other test names.
const CRD: &str = "databases.cascade.e2e.driftgate.dev";
const CRD_MANIFEST: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: databases.cascade.e2e.driftgate.dev}
spec:
  group: cascade.e2e.driftgate.dev
  names: {kind: Database, plural: databases, singular: database, listKind: DatabaseList}
  scope: Namespaced
  versions:
    - name: v1
      served: true
      storage: true
      schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
"#;

/// How long the garbage collector may take to act on a kind it learnt of a moment ago (it reads
/// discovery again every 30 s).
const COLLECTED: Duration = Duration::from_secs(120);

#[tokio::test]
async fn an_operators_resource_is_not_deleted_while_it_would_take_protected_claims_with_it() {
    install_crypto_provider();
    shared();
    let ns = "prod-cascade-operator";
    establish_crd(CRD_MANIFEST, CRD);
    flux_apply(&format!(
        "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {ns}}}\n---\n\
         apiVersion: cascade.e2e.driftgate.dev/v1\nkind: Database\nmetadata: {{name: orders, namespace: {ns}}}\nspec: {{size: 1Gi}}\n---\n\
         apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: settings, namespace: {ns}}}\ndata: {{key: value}}\n"
    ))
    .ok();
    let database = read_back("database/orders", ns).expect("the Database");
    let owner = format!(
        "ownerReferences: [{{apiVersion: cascade.e2e.driftgate.dev/v1, kind: Database, name: orders, uid: {}, controller: true}}]",
        database["metadata"]["uid"].as_str().unwrap()
    );
    // What the operator makes for it: a StatefulSet whose claims go with it, and a claim of its
    // own (its WAL), each owned by the Database.
    let statefulset = statefulset_with_claims(ns, "orders").replacen(
        &format!("name: orders\n  namespace: {ns}\n"),
        &format!("name: orders\n  namespace: {ns}\n  {owner}\n"),
        1,
    );
    flux_apply(&statefulset).ok();
    control_plane().apply(
        ADMIN,
        &format!(
            "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: wal\n  namespace: {ns}\n  {owner}\nspec:\n  accessModes: [ReadWriteOnce]\n  resources: {{requests: {{storage: 1Gi}}}}\n"
        ),
    );
    claim_owned_by_statefulset(ns, "orders", "data-orders-0").await;

    // Until driftgate may list Databases, it cannot tell whether deleting anything in the
    // namespace would take the claims (a Database's owners are unknown): refused, saying what
    // to grant.
    let delete_settings = || {
        control_plane().kubectl(
            FLUX,
            &["delete", "configmap/settings", "-n", ns, "--wait=false"],
        )
    };
    let out = show(delete_settings());
    assert_denied(
        &out,
        &format!(
            "Controller flux (system:serviceaccount:flux-system:kustomize-controller) may not delete ConfigMap {ns}/settings: \
             driftgate could not tell whether the garbage collector would then delete PersistentVolumeClaims data-orders-0 and wal, \
             which the policy protects from deletion by anyone, the GitOps controller included \
             (driftgate may not list {CRD} in {ns}: grant its ClusterRole list on {CRD} (the chart's rbac.deletionCascade))"
        ),
        "DeletionProtected",
    );
    // As the chart does with rbac.deletionCascade listing the kind.
    control_plane().apply(
        ADMIN,
        &format!(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {{name: driftgate-e2e-cascade}}\n\
             rules: [{{apiGroups: [cascade.e2e.driftgate.dev], resources: [databases], verbs: [list]}}]\n---\n\
             apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {{name: driftgate-e2e-cascade}}\n\
             roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: driftgate-e2e-cascade}}\n\
             subjects: [{{kind: ServiceAccount, name: driftgate, namespace: {NAMESPACE}}}]\n"
        ),
    );
    // Then a delete that takes nothing protected goes through.
    eventually(
        "the ConfigMap's delete once driftgate may list Databases",
        || async { delete_settings().success().then_some(()) },
    )
    .await;

    // Pruning the Database would take both claims: refused, each named, the one through the
    // StatefulSet it owns said so.
    let delete_database = || {
        control_plane().kubectl(
            FLUX,
            &["delete", "database/orders", "-n", ns, "--wait=false"],
        )
    };
    let out = show(delete_database());
    assert_denied(
        &out,
        &format!(
            "Controller flux (system:serviceaccount:flux-system:kustomize-controller) may not delete Database {ns}/orders: \
             the garbage collector would then delete PersistentVolumeClaims data-orders-0 (through StatefulSet orders) and wal, which it owns, \
             and the policy protects them from deletion by anyone"
        ),
        "DeletionProtected",
    );
    assert!(
        out.stderr.contains(&format!(
            "kubectl annotate persistentvolumeclaim/data-orders-0 persistentvolumeclaim/wal -n {ns} driftgate.dev/allow-deletion=true"
        )) && out.stderr.contains(&format!(
            "kubectl delete databases.cascade.e2e.driftgate.dev/orders -n {ns} --cascade=orphan"
        )),
        "{}",
        out.stderr
    );
    for target in [
        "database/orders",
        "statefulset/orders",
        "pvc/data-orders-0",
        "pvc/wal",
    ] {
        let object = read_back(target, ns).unwrap_or_else(|| panic!("{target} is still there"));
        assert!(
            object["metadata"]["deletionTimestamp"].is_null(),
            "{target} is not being deleted: {object:#}"
        );
    }

    // One claim marked is not enough: the other is named.
    kubectl(
        ALICE,
        &[
            "annotate",
            "pvc/wal",
            "-n",
            ns,
            "driftgate.dev/allow-deletion=true",
        ],
    )
    .ok();
    let out = show(delete_database());
    assert_denied(
        &out,
        &format!(
            "Controller flux (system:serviceaccount:flux-system:kustomize-controller) may not delete Database {ns}/orders: \
             the garbage collector would then delete PersistentVolumeClaim data-orders-0 (through StatefulSet orders), which it owns"
        ),
        "DeletionProtected",
    );
    // Both marked: the delete is admitted, and the garbage collector deletes the StatefulSet
    // and both claims.
    kubectl(
        ALICE,
        &[
            "annotate",
            "pvc/data-orders-0",
            "-n",
            ns,
            "driftgate.dev/allow-deletion=true",
        ],
    )
    .ok();
    show(delete_database()).ok();
    let start = Instant::now();
    while ["statefulset/orders", "pvc/data-orders-0", "pvc/wal"]
        .iter()
        .any(|target| read_back(target, ns).is_some())
    {
        assert!(
            start.elapsed() < COLLECTED,
            "the garbage collector did not delete what the Database owned; kube-controller-manager's log: {}",
            control_plane().controller_manager_log().display()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    eprintln!(
        "the garbage collector deleted the StatefulSet and both claims {:.1}s after the Database",
        start.elapsed().as_secs_f64()
    );
}
