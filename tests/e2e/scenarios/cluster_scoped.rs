//! Issue 14, section 3: a policy guards cluster-scoped objects (`clusterScoped`), on the real
//! API server, with a driftgate of its own: its policy guards ClusterRoles and CRDs, and its
//! webhook configuration (the chart's gate webhook with `webhook.clusterScoped`) is narrowed to
//! this test's objects, since other tests create ClusterRoles and CRDs of their own.

use std::process::Command;

use serde_json::json;

use driftgate::ledger::phase::phase_of;
use driftgate::ledger::record::Phase;

use crate::harness::chart::{NAMESPACE, cluster_scoped_webhook_configuration};
use crate::harness::{
    ADMIN, ALICE, BOB, Driftgate, FLUX, control_plane, driftgate_cli, install_crypto_provider,
};

use super::{assert_denied, eventually, flux_apply, kubectl, records, show};

const ROLE: &str = "e2e-cluster-viewer";
/// A kind no other test names: kubectl resolves `widget` to whichever CRD serves one.
const CRD: &str = "gadgets.e2e-cluster.example.com";
/// A ValidatingWebhookConfiguration this test writes, to see whether the API server sends it.
const PROBE_CONFIGURATION: &str = "e2e-cluster-probe";

const POLICY: &str = r#"apiVersion: driftgate.dev/v1alpha1
kind: GatePolicy
metadata: {name: platform}
spec:
  owner: "team-platform"
  # No namespace of any test: this policy is about cluster-scoped objects.
  namespaces: {include: ["e2e-cluster-unused"]}
  controllers:
    - name: flux
      usernames: ["system:serviceaccount:flux-system:kustomize-controller"]
      fieldManagers: ["kustomize-controller"]
  breakGlass:
    maxDuration: 1h
    openers: {groups: ["sre-oncall"]}
  deletions: {}
  clusterScoped:
    resources:
      - {group: rbac.authorization.k8s.io, kind: ClusterRole}
      - {group: apiextensions.k8s.io, kind: CustomResourceDefinition}
"#;

/// What bob and alice may do to this test's objects by RBAC, so that what stops them is
/// driftgate (escalate: a ClusterRole's rules may grant what its editor lacks).
const RBAC: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: e2e-cluster-editor}
rules:
  - apiGroups: [rbac.authorization.k8s.io]
    resources: [clusterroles]
    resourceNames: [e2e-cluster-viewer]
    verbs: [get, update, patch, delete, escalate]
  - apiGroups: [apiextensions.k8s.io]
    resources: [customresourcedefinitions]
    resourceNames: [gadgets.e2e-cluster.example.com]
    verbs: [get, update, patch, delete]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: e2e-cluster-editor}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: e2e-cluster-editor}
subjects:
  - {apiGroup: rbac.authorization.k8s.io, kind: User, name: bob}
  - {apiGroup: rbac.authorization.k8s.io, kind: Group, name: sre-oncall}
"#;

fn cluster_role(verbs: &str) -> String {
    format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {{name: {ROLE}}}\nrules:\n  - {{apiGroups: [\"\"], resources: [pods], verbs: {verbs}}}\n"
    )
}

fn crd(annotations: &str) -> String {
    format!(
        r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: {CRD}
  annotations: {annotations}
spec:
  group: e2e-cluster.example.com
  scope: Namespaced
  names: {{kind: ClusterScopedGadget, plural: gadgets, singular: gadget, listKind: ClusterScopedGadgetList}}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}
"#
    )
}

/// `driftgate policy check FILE`, as anyone runs it before committing a policy.
fn policy_check(text: &str, name: &str) -> std::process::Output {
    let path = control_plane().dir().join(name);
    std::fs::write(&path, text).expect("the policy is written");
    Command::new(env!("CARGO_BIN_EXE_driftgate"))
        .args(["policy", "check"])
        .arg(&path)
        .output()
        .expect("driftgate policy check runs")
}

#[tokio::test]
async fn a_policy_guards_cluster_roles_and_crds_with_windows_on_the_object() {
    install_crypto_provider();
    let control_plane = control_plane();
    control_plane.apply(ADMIN, RBAC);

    // A policy that lists webhook configurations is refused at load, saying why.
    let refused = policy_check(
        &POLICY.replace(
            "      - {group: apiextensions.k8s.io, kind: CustomResourceDefinition}\n",
            "      - {group: admissionregistration.k8s.io, kind: ValidatingWebhookConfiguration}\n",
        ),
        "cluster-scoped-webhooks.yaml",
    );
    let said = String::from_utf8_lossy(&refused.stdout).into_owned()
        + &String::from_utf8_lossy(&refused.stderr);
    eprintln!("{said}");
    assert!(!refused.status.success(), "{said}");
    assert!(
        said.contains("spec.clusterScoped.resources[1]: admissionregistration.k8s.io/ValidatingWebhookConfiguration cannot be guarded: the API server never calls admission webhooks for ValidatingWebhookConfiguration"),
        "{said}"
    );
    let checked = policy_check(POLICY, "cluster-scoped.yaml");
    assert!(
        checked.status.success(),
        "{}",
        String::from_utf8_lossy(&checked.stderr)
    );

    let policy = control_plane.dir().join("cluster-scoped.yaml");
    let driftgate = Driftgate::start("cluster-scoped", &policy, &[]);
    let mut configuration = cluster_scoped_webhook_configuration(
        "driftgate-e2e-cluster-scoped",
        &driftgate.webhook_url(),
        driftgate.ca_pem(),
        &[
            ("rbac.authorization.k8s.io", &["clusterroles"]),
            ("apiextensions.k8s.io", &["customresourcedefinitions"]),
        ],
    );
    let webhook = &mut configuration["webhooks"][0];
    // Only the chart's clusterScoped rules (the shared driftgate sees the namespaced writes),
    // and one the chart refuses to render: webhook configurations, to see that the API server
    // never sends them.
    let rules = webhook["rules"]
        .as_array_mut()
        .expect("the webhook has rules");
    rules.retain(|r| {
        r["resources"] != json!(["namespaces", "namespaces/status", "namespaces/finalize"])
            && r["scope"] == "Cluster"
    });
    assert_eq!(rules.len(), 2, "{rules:?}");
    rules.push(
        json!({"apiGroups": ["admissionregistration.k8s.io"], "apiVersions": ["*"],
        "operations": ["CREATE", "UPDATE", "DELETE"],
        "resources": ["validatingwebhookconfigurations"], "scope": "Cluster"}),
    );
    webhook["matchConditions"]
        .as_array_mut()
        .expect("the webhook has matchConditions")
        .push(json!({"name": "this-test-only", "expression": format!(
            "request.name in ['{ROLE}', '{CRD}', '{PROBE_CONFIGURATION}']"
        )}));
    driftgate.register_with_probe(configuration, || {
        control_plane.kubectl(
            ADMIN,
            &[
                "create",
                "clusterrole",
                ROLE,
                "--verb=get",
                "--resource=pods",
                "--dry-run=server",
            ],
        );
    });

    // Flux creates the ClusterRole: the controller's write is the desired state.
    show(flux_apply(&cluster_role("[get]"))).ok();

    // Bob's edit is refused, with the whole sentence and the command to open a window.
    let patch = r#"[{"op": "add", "path": "/rules/0/verbs/-", "value": "list"}]"#;
    let bob = kubectl(
        BOB,
        &["patch", "clusterrole", ROLE, "--type=json", "-p", patch],
    );
    assert_denied(
        &bob,
        &format!(
            "bob may not update ClusterRole {ROLE}: only its controllers (flux) write here (policy \"platform\", rule NotPermitted). Change it in Git, or, in an emergency, open a break-glass window (group sre-oncall may): driftgate break-glass open clusterroles.rbac.authorization.k8s.io/{ROLE} --for 1h --reason \"INC-…: what and why\" (policy owner: team-platform)."
        ),
        "NotPermitted",
    );

    // Alice opens a window on the object with the command the refusal gave, without -n.
    let target = format!("clusterroles.rbac.authorization.k8s.io/{ROLE}");
    let opened = show(driftgate_cli(
        ALICE,
        &[
            "break-glass",
            "open",
            &target,
            "--for",
            "30m",
            "--reason",
            "INC-14: pods unreadable",
        ],
    ))
    .ok();
    assert!(
        opened.stdout.contains(&format!(
            "break-glass window open on clusterrole/{ROLE} (cluster-scoped) until"
        )) && opened
            .stdout
            .contains("controller flux is held off it until then")
            && opened.stdout.contains("backlog -A"),
        "{}",
        opened.stdout
    );

    // Her edit is admitted under it, and recorded in driftgate's own namespace.
    let alice = kubectl(
        ALICE,
        &["patch", "clusterrole", ROLE, "--type=json", "-p", patch],
    )
    .ok();
    assert!(
        alice.stderr.contains(&format!(
            "driftgate: alice changed ClusterRole {ROLE} under the break-glass window on the object"
        )),
        "{}",
        alice.stderr
    );
    let recorded = records(NAMESPACE).await;
    let record = recorded
        .iter()
        .find(|r| r.spec.object.kind == "ClusterRole" && r.spec.object.name == ROLE)
        .unwrap_or_else(|| panic!("no record of ClusterRole {ROLE} in {NAMESPACE}: {recorded:#?}"));
    assert_eq!(record.spec.policy, "platform");
    assert_eq!(record.spec.changes.len(), 1, "{record:#?}");
    assert!(
        record.spec.changes[0]
            .fields
            .iter()
            .any(|f| f.path.starts_with("rules")),
        "{record:#?}"
    );
    let backlog = show(driftgate_cli(ALICE, &["backlog", "-n", NAMESPACE])).ok();
    assert!(backlog.stdout.contains(ROLE), "{}", backlog.stdout);
    let listed = show(driftgate_cli(
        ADMIN,
        &["break-glass", "list", "-A", "-o", "json"],
    ))
    .ok();
    assert!(
        listed
            .stdout
            .contains(&format!("\"object\": \"clusterrole/{ROLE}\"")),
        "{}",
        listed.stdout
    );

    // The window holds Flux off the object until it closes.
    let held = show(flux_apply(&cluster_role("[get]")));
    assert_denied(
        &held,
        &format!(
            "Controller flux (system:serviceaccount:flux-system:kustomize-controller) may not update ClusterRole {ROLE} while the break-glass window on the object"
        ),
        "ControllerHeld",
    );

    // Alice closes the window; Git catches up with her change, and Flux's apply of it settles
    // the record, which driftgate found in its own namespace.
    show(driftgate_cli(ALICE, &["break-glass", "close", &target])).ok();
    show(flux_apply(&cluster_role("[get, list]"))).ok();
    let phase = eventually(
        "the record of the ClusterRole's window backported",
        || async {
            records(NAMESPACE)
                .await
                .iter()
                .find(|r| r.spec.object.name == ROLE)
                .map(phase_of)
                .filter(|phase| *phase == Phase::Backported)
        },
    )
    .await;
    assert_eq!(phase, Phase::Backported);

    // A CRD: Flux creates it; its prune is refused without the allow annotation, and admitted
    // once Git marks it.
    show(flux_apply(&crd("{}"))).ok();
    let prune = kubectl(FLUX, &["delete", "crd", CRD, "--wait=false"]);
    assert_denied(
        &prune,
        &format!(
            "Controller flux (system:serviceaccount:flux-system:kustomize-controller) may not delete CustomResourceDefinition {CRD}: the policy protects every CustomResourceDefinition from deletion by anyone, the GitOps controller included, unless deleting it is a deliberate act (policy \"platform\", rule DeletionProtected). If it is meant, mark it first, in Git or with kubectl annotate customresourcedefinitions.apiextensions.k8s.io/{CRD} driftgate.dev/allow-deletion=true"
        ),
        "DeletionProtected",
    );
    show(flux_apply(&crd("{driftgate.dev/allow-deletion: \"true\"}"))).ok();
    kubectl(FLUX, &["delete", "crd", CRD, "--wait=false"]).ok();
    let gone = control_plane.kubectl(
        ADMIN,
        &[
            "get",
            "crd",
            CRD,
            "-o",
            "jsonpath={.metadata.deletionTimestamp}",
        ],
    );
    assert!(
        !gone.success() || !gone.stdout.trim().is_empty(),
        "CRD {CRD} is neither deleted nor being deleted: {}{}",
        gone.stdout,
        gone.stderr
    );

    // The API server never sends a webhook configuration to a webhook, even one whose rules
    // name them: writing one changes nothing driftgate counts, while a ClusterRole write is sent.
    let before = driftgate.reviews();
    let probe = json!({"apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": PROBE_CONFIGURATION}, "webhooks": []});
    control_plane.apply(ADMIN, &probe.to_string());
    kubectl(
        ADMIN,
        &[
            "delete",
            "validatingwebhookconfiguration",
            PROBE_CONFIGURATION,
        ],
    )
    .ok();
    assert_eq!(
        driftgate.reviews(),
        before,
        "a webhook configuration was sent"
    );
    let control = kubectl(
        BOB,
        &[
            "patch",
            "clusterrole",
            ROLE,
            "--type=json",
            "-p",
            patch,
            "--dry-run=server",
        ],
    );
    assert!(!control.success());
    assert!(
        driftgate.reviews() > before,
        "the ClusterRole write was not sent"
    );

    // The admin removes the test's objects once this driftgate no longer sees them.
    driftgate.unregister("driftgate-e2e-cluster-scoped");
    kubectl(
        ADMIN,
        &["delete", "clusterrole", ROLE, "--ignore-not-found"],
    )
    .ok();
    control_plane
        .kubectl(
            ADMIN,
            &[
                "delete",
                "clusterrole,clusterrolebinding",
                "e2e-cluster-editor",
            ],
        )
        .ok();
}
