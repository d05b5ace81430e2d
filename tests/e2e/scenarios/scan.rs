//! Issue 15, section 4: `driftgate scan` on the real API server. Objects in namespaces of this
//! test's own (`scan-*`, which the shared driftgate does not guard, so every write lands) are
//! written by several managers: Flux's server-side apply, the HPA through `scale`, a person's
//! `kubectl patch` and `kubectl create`, a forgotten script applying a field Flux applies too,
//! and kube-controller-manager's own bookkeeping (status, revision, `kube-root-ca.crt`). `scan`
//! reads them back with this test's policy and reports exactly the drift, in table and JSON.

use std::path::PathBuf;

use serde_json::Value;

use crate::harness::{
    ADMIN, HPA, KubectlOutput, control_plane, driftgate_cli, install_crypto_provider, repo_path,
    shared,
};

use super::{api_deployment, eventually, flux_apply, kubectl, namespace_with_api, show};

/// This test's policy: guards Deployments and ConfigMaps in `scan-*`; Flux by its field
/// manager, Kubernetes' controllers by their usernames only (scan derives their manager), the
/// HPA as a delegation on `spec.replicas`.
pub const POLICY: &str = r#"
apiVersion: driftgate.dev/v1alpha1
kind: GatePolicy
metadata:
  name: scan-test
spec:
  mode: Audit
  namespaces:
    include: ["scan-*"]
  resources:
    include: ["apps/Deployment", "core/ConfigMap"]
  controllers:
    - name: flux
      usernames: ["system:serviceaccount:flux-system:kustomize-controller"]
      fieldManagers: ["kustomize-controller"]
    - name: kubernetes
      usernames:
        - "system:serviceaccount:kube-system:root-ca-cert-publisher"
        - "system:serviceaccount:kube-system:deployment-controller"
  delegations:
    - name: hpa
      usernames: ["system:serviceaccount:kube-system:horizontal-pod-autoscaler"]
      subresources: ["scale"]
      fields: ["spec.replicas"]
"#;

fn policy_file() -> PathBuf {
    let path = control_plane().dir().join("scan-policy.yaml");
    std::fs::write(&path, POLICY).expect("the scan policy is written");
    path
}

fn scan(args: &[&str]) -> KubectlOutput {
    let policy = policy_file();
    let mut all = vec!["scan", "--policy", policy.to_str().unwrap()];
    all.extend(args);
    show(driftgate_cli(ADMIN, &all))
}

/// Deployment `name` as Git declares it, without `spec.replicas` (the HPA decides them).
fn scaled_deployment(ns: &str, name: &str) -> String {
    api_deployment(ns, 1)
        .replace("  replicas: 1\n", "")
        .replace("name: api\n", &format!("name: {name}\n"))
        .replace("app: api", &format!("app: {name}"))
}

fn config_map(ns: &str, name: &str, data: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: {ns}\ndata: {data}\n"
    )
}

/// Waits until kube-controller-manager has written `kube-root-ca.crt` in `ns`, so what scan
/// lists does not change under it.
async fn equipped(ns: &str) {
    eventually(&format!("kube-root-ca.crt in {ns}"), || async {
        control_plane().namespace_equipped(ns).then_some(())
    })
    .await;
}

/// Waits until the deployment controller has written `status` (and the revision annotation) of
/// `deployment/NAME` through the status subresource, the bookkeeping scan must not report.
async fn status_written(ns: &str, name: &str) {
    eventually(
        &format!("the deployment controller's status of {name}"),
        || async {
            let target = format!("deployment/{name}");
            let args = [
                "get",
                &target,
                "-n",
                ns,
                "-o",
                "json",
                "--show-managed-fields",
            ];
            let out = control_plane().kubectl(ADMIN, &args).ok();
            let object: Value = serde_json::from_str(&out.stdout).ok()?;
            object["metadata"]["managedFields"]
                .as_array()?
                .iter()
                .any(|e| e["manager"] == "kube-controller-manager" && e["subresource"] == "status")
                .then_some(())
        },
    )
    .await;
}

fn json(out: &KubectlOutput) -> Value {
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", out.stdout))
}

#[tokio::test]
async fn scan_reports_drift_fights_and_never_applied_objects_and_not_delegations_or_bookkeeping() {
    let ns = "scan-drift";
    kubectl(ADMIN, &["create", "namespace", ns]).ok();
    // The seed's case: Git declares replicas while the HPA's delegation manages them.
    show(flux_apply(&api_deployment(ns, 2))).ok();
    // A Deployment the HPA scales through `scale`: a delegation, not drift.
    show(flux_apply(&scaled_deployment(ns, "web"))).ok();
    kubectl(
        HPA,
        &[
            "patch",
            "deployment/web",
            "-n",
            ns,
            "--subresource=scale",
            "--type=merge",
            "-p",
            r#"{"spec":{"replicas":3}}"#,
            "--field-manager=horizontal-pod-autoscaler",
        ],
    )
    .ok();
    show(flux_apply(&config_map(ns, "settings", "{mode: safe}"))).ok();
    // A person's patch adds a key Git does not have.
    kubectl(
        ADMIN,
        &[
            "patch",
            "configmap/settings",
            "-n",
            ns,
            "--type=merge",
            "-p",
            r#"{"data":{"debug":"true"}}"#,
        ],
    )
    .ok();
    // A controller nobody listed applies the same value of a field Flux applies: both own it.
    show(control_plane().kubectl_with_stdin(
        ADMIN,
        &[
            "apply",
            "--server-side",
            "--field-manager=platform-script",
            "-f",
            "-",
        ],
        Some(&config_map(ns, "settings", "{mode: safe}")),
    ))
    .ok();
    // An object no controller ever applied.
    kubectl(
        ADMIN,
        &[
            "create",
            "configmap",
            "manual",
            "-n",
            ns,
            "--from-literal=token=abc",
        ],
    )
    .ok();
    equipped(ns).await;
    status_written(ns, "api").await;
    status_written(ns, "web").await;

    let table = scan(&["-n", ns]);
    assert_eq!(table.code, Some(1), "drift exits 1:\n{}", table.stderr);
    let rows: Vec<&str> = table.stdout.lines().collect();
    assert!(
        rows[0].starts_with("NAMESPACE") && rows[0].contains("   FINDING   "),
        "{}",
        table.stdout
    );
    let row = |object: &str, finding: &str| {
        rows.iter()
            .filter(|r| r.contains(&format!(" {object} ")) && r.contains(&format!(" {finding} ")))
            .copied()
            .collect::<Vec<_>>()
    };
    let fight = row("Deployment/api", "fight");
    assert_eq!(fight.len(), 1, "{}", table.stdout);
    assert!(
        fight[0].contains("kustomize-controller (flux) vs delegation hpa")
            && fight[0].ends_with("spec.replicas"),
        "{}",
        fight[0]
    );
    let fight = row("ConfigMap/settings", "fight");
    assert!(
        fight.len() == 1
            && fight[0].contains("kustomize-controller (flux) vs platform-script")
            && fight[0].contains("Apply vs Apply")
            && fight[0].ends_with("data.mode"),
        "{}",
        table.stdout
    );
    let drift = row("ConfigMap/settings", "drift");
    assert!(
        drift.len() == 1 && drift[0].contains("kubectl-patch") && drift[0].ends_with("data.debug"),
        "{}",
        table.stdout
    );
    assert_eq!(
        row("ConfigMap/manual", "never-applied").len(),
        1,
        "{}",
        table.stdout
    );
    assert!(
        row("ConfigMap/manual", "drift")
            .first()
            .is_some_and(|r| r.contains("kubectl-create") && r.ends_with("data.token")),
        "{}",
        table.stdout
    );
    for clean in ["Deployment/web", "ConfigMap/kube-root-ca.crt"] {
        assert!(
            !table.stdout.contains(&format!(" {clean} ")),
            "{clean} is the controllers' and a delegation's:\n{}",
            table.stdout
        );
    }
    assert!(
        table
            .stderr
            .contains("Scanned namespace scan-drift (policy scan-test): 5 objects of 2 kinds"),
        "{}",
        table.stderr
    );
    assert!(
        table.stderr.contains(
            "Controller kubernetes (policy scan-test): field managers kube-controller-manager (from its usernames (it lists no fieldManagers))"
        ),
        "{}",
        table.stderr
    );

    // The same as JSON, with -A: every namespace the policy guards.
    let out = scan(&["-A", "-o", "json"]);
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    let report = json(&out);
    assert_eq!(report["kind"], "List", "{report}");
    assert_eq!(report["drift"], true);
    let mine: Vec<&Value> = report["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["namespace"] == ns)
        .collect();
    let names: Vec<&str> = mine.iter().map(|o| o["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["api", "manual", "settings"], "{}", out.stdout);
    let api = &mine[0];
    assert_eq!(api["kind"], "Deployment");
    assert_eq!(
        api["findings"],
        serde_json::json!([{
            "finding": "fight", "field": "spec.replicas", "controller": "flux",
            "controllerManager": "kustomize-controller", "manager": null, "operation": null,
            "delegation": "hpa",
        }])
    );
    let settings = &mine[2]["findings"];
    assert_eq!(settings[0]["manager"], "platform-script");
    assert_eq!(settings[1]["finding"], "drift");
    assert_eq!(settings[1]["fields"], serde_json::json!(["data.debug"]));
    assert!(
        settings[1]["time"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z'))
    );
    assert!(
        report["scanned"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["namespace"] == ns),
        "-A scans {ns}: {}",
        report["scanned"]
    );
}

#[tokio::test]
async fn a_clean_namespace_exits_0_after_every_page_of_every_kind_is_read() {
    let ns = "scan-clean";
    kubectl(ADMIN, &["create", "namespace", ns]).ok();
    show(flux_apply(&scaled_deployment(ns, "web"))).ok();
    let config_maps: String = (0..7)
        .map(|i| config_map(ns, &format!("settings-{i}"), "{mode: safe}"))
        .collect::<Vec<_>>()
        .join("---\n");
    show(flux_apply(&config_maps)).ok();
    equipped(ns).await;
    status_written(ns, "web").await;

    let table = scan(&["-n", ns]);
    assert_eq!(table.code, Some(0), "{}{}", table.stdout, table.stderr);
    assert!(table.stdout.starts_with("No drift"), "{}", table.stdout);

    // Two objects a page: 8 ConfigMaps (with kube-root-ca.crt) take 4 requests, 1 Deployment 1.
    let out = scan(&["-n", ns, "-o", "json", "--page-size", "2"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let report = json(&out);
    assert_eq!(report["drift"], false);
    assert_eq!(report["items"], serde_json::json!([]));
    let scanned = &report["scanned"][0];
    assert_eq!(scanned["objects"], 9, "{scanned}");
    assert_eq!(scanned["pages"], 5, "{scanned}");
    assert_eq!(
        scanned["kinds"],
        serde_json::json!(["apps/Deployment", "core/ConfigMap"])
    );

    // A namespace the policy does not guard is bad input.
    let out = scan(&["-n", "default"]);
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("namespace default is not guarded by any policy in"),
        "{}",
        out.stderr
    );
}

#[tokio::test]
async fn with_the_example_policy_a_normal_day_shows_only_the_replicas_git_and_the_hpa_share() {
    install_crypto_provider();
    shared();
    let ns = "prod-scan";
    show(flux_apply(&namespace_with_api(ns))).ok();
    equipped(ns).await;
    status_written(ns, "api").await;
    let policy = repo_path("policies/example.yaml");
    let out = show(driftgate_cli(
        ADMIN,
        &[
            "scan",
            "--policy",
            policy.to_str().unwrap(),
            "-n",
            ns,
            "-o",
            "json",
        ],
    ));
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    let report = json(&out);
    // Every kind the cluster serves there but the excluded ones: ServiceAccount default and
    // kube-root-ca.crt are kube-controller-manager's, the Deployment's status its bookkeeping.
    let scanned = &report["scanned"][0];
    assert_eq!(scanned["policy"], "production");
    for kind in [
        "apps/Deployment",
        "core/ConfigMap",
        "core/ServiceAccount",
        "core/Secret",
    ] {
        assert!(
            scanned["kinds"]
                .as_array()
                .unwrap()
                .contains(&Value::from(kind)),
            "{scanned}"
        );
    }
    for excluded in [
        "core/Pod",
        "apps/ReplicaSet",
        "core/Event",
        "coordination.k8s.io/Lease",
    ] {
        assert!(
            !scanned["kinds"]
                .as_array()
                .unwrap()
                .contains(&Value::from(excluded)),
            "{scanned}"
        );
    }
    // kube-controller-manager creates ServiceAccount default without managedFields.
    assert_eq!(
        scanned["withoutManagedFields"],
        serde_json::json!(["ServiceAccount/default"])
    );
    assert_eq!(
        report["items"],
        serde_json::json!([{
            "apiVersion": "apps/v1", "kind": "Deployment", "namespace": ns, "name": "api",
            "policy": "production",
            "findings": [{
                "finding": "fight", "field": "spec.replicas", "controller": "flux",
                "controllerManager": "kustomize-controller", "manager": null, "operation": null,
                "delegation": "hpa",
            }],
        }])
    );
}

/// Issue 26, section 7: `scan` knows what Argo CD's application-controller writes as. The
/// policy names it by its service account only; its syncs write as `argocd-controller`, not as
/// the account's name: the objects the real Argo CD applied are clean, and a person's patch is
/// drift.
#[tokio::test]
async fn scan_knows_the_field_manager_the_real_argo_cd_writes_with() {
    use super::real_argocd::{FIRST_SYNC, wait_for_replicas};
    use crate::harness::argocd::{AppOptions, argocd};
    install_crypto_provider();
    shared();
    let ns = "scan-argocd";
    let policy = POLICY
        .replace("name: scan-test", "name: scan-argocd")
        .replace(
            "    - name: flux\n      usernames: [\"system:serviceaccount:flux-system:kustomize-controller\"]\n      fieldManagers: [\"kustomize-controller\"]\n",
            "    - name: argocd\n      usernames: [\"system:serviceaccount:argocd:argocd-application-controller\"]\n",
        );
    assert!(policy.contains("name: argocd"), "{policy}");
    let path = control_plane().dir().join("scan-argocd-policy.yaml");
    std::fs::write(&path, policy).expect("the policy is written");
    let scan = |args: &[&str]| {
        let mut all = vec!["scan", "--policy", path.to_str().unwrap(), "-n", ns];
        all.extend(args);
        show(driftgate_cli(ADMIN, &all))
    };
    argocd().publish(
        ns,
        &(namespace_with_api(ns) + "\n---\n" + &config_map(ns, "settings", "{LOG_LEVEL: info}")),
    );
    argocd().application_with(ns, ns, AppOptions::DEFAULT);
    wait_for_replicas(ns, ns, 2, FIRST_SYNC).await;
    equipped(ns).await;

    let clean = scan(&[]);
    assert_eq!(clean.code, Some(0), "{}\n{}", clean.stdout, clean.stderr);
    assert!(
        clean.stderr.contains("Controller argocd (policy scan-argocd): field managers argocd-application-controller, argocd-controller (from its usernames (it lists no fieldManagers))"),
        "{}",
        clean.stderr
    );

    kubectl(
        ADMIN,
        &[
            "patch",
            "configmap/settings",
            "-n",
            ns,
            "--type=merge",
            "-p",
            r#"{"data":{"DEBUG":"on"}}"#,
        ],
    )
    .ok();
    let drift = scan(&[]);
    assert_eq!(drift.code, Some(1), "{}\n{}", drift.stdout, drift.stderr);
    let lines: Vec<&str> = drift.stdout.lines().filter(|l| l.starts_with(ns)).collect();
    assert_eq!(lines.len(), 1, "{}", drift.stdout);
    assert!(
        lines[0].contains("ConfigMap/settings")
            && lines[0].contains("drift")
            && lines[0].contains("kubectl-patch")
            && lines[0].ends_with("data.DEBUG"),
        "{}",
        drift.stdout
    );
}
