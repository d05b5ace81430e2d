//! A normal day under the example policy, with Kubernetes' own controllers running for real
//! (kube-controller-manager, each controller with its own service account): Flux creates a
//! namespace and rolls out a new image, an on-call engineer opens and closes a namespace-wide
//! window, and Flux deletes the namespace. Not one write of Kubernetes' controllers may be
//! refused: driftgate's metrics and log, and the controller manager's log, must agree.

use std::time::{Duration, Instant};

use base64::Engine;
use base64::prelude::BASE64_STANDARD;
use k8s_openapi::api::core::v1::Service;
use kube::Api;
use kube::api::{Patch, PatchParams};
use kube::config::Kubeconfig;
use serde_json::{Value, json};

use super::{IMAGE, eventually, flux_apply, get_json, kubectl, show};
use crate::harness::{
    ADMIN, ALICE, Driftgate, FLUX, control_plane, driftgate_cli, install_crypto_provider,
    repo_path, shared, webhook_configuration,
};

const NS: &str = "prod-normal-day";
/// The label Flux puts on the namespace; this test's driftgate sees only what it selects.
const SCENARIO_LABEL: &str = "driftgate-e2e/scenario";
const NEW_IMAGE: &str = "registry.example/payments-api:1.4.3";
const LB_CLEANUP: &str = "service.kubernetes.io/load-balancer-cleanup";
const SERVICE_CONTROLLER: &str = "system:serviceaccount:kube-system:service-controller";
const DENIED: &str = r#"decision="denied""#;
const REVIEWS: &str = "driftgate_admission_reviews_total";

/// What Git declares for the namespace: the Namespace, a ServiceAccount and its token Secret, a
/// Deployment (Recreate: with no scheduler no Pod becomes ready, and a rolling update would wait
/// for one forever), a LoadBalancer Service and a ConfigMap.
fn git(image: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Namespace
metadata:
  name: {NS}
  labels: {{{SCENARIO_LABEL}: normal-day}}
---
apiVersion: v1
kind: ServiceAccount
metadata: {{name: api, namespace: {NS}}}
---
apiVersion: v1
kind: Secret
metadata:
  name: api-token
  namespace: {NS}
  annotations: {{kubernetes.io/service-account.name: api}}
type: kubernetes.io/service-account-token
---
apiVersion: v1
kind: ConfigMap
metadata: {{name: api-config, namespace: {NS}}}
data: {{mode: normal}}
---
apiVersion: v1
kind: Service
metadata: {{name: api, namespace: {NS}}}
spec:
  type: LoadBalancer
  selector: {{app: api}}
  ports: [{{port: 80, targetPort: 8080}}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: api, namespace: {NS}}}
spec:
  replicas: 2
  strategy: {{type: Recreate}}
  selector:
    matchLabels: {{app: api}}
  template:
    metadata:
      labels: {{app: api}}
    spec:
      serviceAccountName: api
      containers:
        - name: api
          image: {image}
"#
    )
}

/// Kubernetes' own identities: the controllers' service accounts, and the manager's own
/// credentials (the tokens controller).
fn is_kubernetes(user: &str) -> bool {
    user.starts_with("system:serviceaccount:kube-system:")
        || user == "system:kube-controller-manager"
}

/// driftgate's review log lines (`--log-format json`).
fn reviews(driftgate: &Driftgate) -> Vec<Value> {
    driftgate
        .log_tail(usize::MAX)
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|line| line["message"] == "review")
        .collect()
}

/// Panics unless no review by Kubernetes' identities was denied, in driftgate's log and in the
/// controller manager's (which logs every refused write it retries).
fn assert_no_controller_refused(driftgate: &Driftgate) {
    let refused: Vec<Value> = reviews(driftgate)
        .into_iter()
        .filter(|r| r["decision"] == "denied" && r["user"].as_str().is_some_and(is_kubernetes))
        .collect();
    assert!(
        refused.is_empty(),
        "driftgate refused Kubernetes' controllers: {refused:#?}"
    );
    let log = std::fs::read_to_string(control_plane().controller_manager_log())
        .expect("the controller manager's log reads");
    let denials: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("admission webhook") && l.contains("denied") && l.contains(NS))
        .collect();
    assert!(
        denials.is_empty(),
        "kube-controller-manager was refused: {denials:#?}"
    );
}

/// What Kubernetes' identities wrote in the namespace, as driftgate judged it (shown with
/// `--nocapture`; the README's "What Kubernetes' controllers write" lists the same).
fn print_what_kubernetes_wrote(driftgate: &Driftgate) {
    let mut seen = std::collections::BTreeMap::<String, usize>::new();
    for r in reviews(driftgate) {
        if r["namespace"] == NS && r["user"].as_str().is_some_and(is_kubernetes) {
            let key = format!(
                "{} {} {}{} -> {}",
                r["user"].as_str().unwrap_or(""),
                r["operation"].as_str().unwrap_or(""),
                r["kind"].as_str().unwrap_or(""),
                r["subresource"]
                    .as_str()
                    .filter(|s| !s.is_empty())
                    .map(|s| format!("/{s}"))
                    .unwrap_or_default(),
                r["rule"].as_str().unwrap_or(""),
            );
            *seen.entry(key).or_default() += 1;
        }
    }
    eprintln!("What Kubernetes' controllers wrote in {NS}:");
    for (write, count) in seen {
        eprintln!("  {count:3} x {write}");
    }
}

/// Panics unless driftgate admitted a review by `user` of `operation` on `kind` as `rule`.
fn assert_admitted(driftgate: &Driftgate, user: &str, operation: &str, kind: &str, rule: &str) {
    let all = reviews(driftgate);
    assert!(
        all.iter().any(|r| r["user"] == user
            && r["operation"] == operation
            && r["kind"] == kind
            && r["namespace"] == NS
            && r["decision"] == "allowed"
            && r["rule"] == rule),
        "no {operation} {kind} by {user} admitted as {rule}; reviews in {NS}: {:#?}",
        all.iter()
            .filter(|r| r["namespace"] == NS)
            .collect::<Vec<_>>()
    );
}

/// The example policy's driftgate, sent only this test's namespace.
fn start_driftgate() -> Driftgate {
    let driftgate = Driftgate::start(
        "normal-day",
        &repo_path("policies/example.yaml"),
        &["--log-format", "json"],
    );
    let mut configuration = webhook_configuration(
        "driftgate-e2e-normal-day",
        &driftgate.webhook_url(),
        driftgate.ca_pem(),
    );
    configuration["webhooks"][0]["namespaceSelector"] =
        json!({"matchLabels": {SCENARIO_LABEL: "normal-day"}});
    // Flux's dry-run create of the namespace is sent (the selector reads a Namespace's own
    // labels) and admitted: registering costs no denial.
    let namespace = format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {NS}\n  labels: {{{SCENARIO_LABEL}: normal-day}}\n"
    );
    driftgate.register_with_probe(configuration, || {
        control_plane()
            .kubectl_with_stdin(
                FLUX,
                &[
                    "apply",
                    "--server-side",
                    "--field-manager=kustomize-controller",
                    "--dry-run=server",
                    "-f",
                    "-",
                ],
                Some(&namespace),
            )
            .ok();
    });
    driftgate
}

/// A PATCH of `services/api/status` as cloud-controller-manager's service controller does it
/// (`PatchService`, no GET first). It does not run here (kube-controller-manager 1.35 skips it
/// as a cloud-provider controller), so the admin impersonates its real identity, and the write
/// goes through the API server and both webhooks as the controller's would.
async fn as_service_controller(patch: Patch<Value>) {
    let path = control_plane().kubeconfig(ADMIN);
    let kubeconfig = Kubeconfig::read_from(&path).expect("the admin kubeconfig reads");
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("the admin kubeconfig loads");
    config.auth_info.impersonate = Some(SERVICE_CONTROLLER.to_owned());
    config.auth_info.impersonate_groups = Some(vec![
        "system:serviceaccounts".to_owned(),
        "system:serviceaccounts:kube-system".to_owned(),
    ]);
    let client = kube::Client::try_from(config).expect("a kube client builds");
    let services: Api<Service> = Api::namespaced(client, NS);
    services
        .patch_status("api", &PatchParams::default(), &patch)
        .await
        .unwrap_or_else(|e| panic!("the service controller's patch {patch:?}: {e}"));
}

/// The ReplicaSets of `api`: (image, spec.replicas), each checked to be the deployment
/// controller's (owned by the Deployment, written by kube-controller-manager).
fn replica_sets() -> Vec<(String, i64)> {
    let out = control_plane()
        .kubectl(
            ADMIN,
            &[
                "get",
                "replicasets",
                "-n",
                NS,
                "-o",
                "json",
                "--show-managed-fields",
            ],
        )
        .ok();
    let list: Value = serde_json::from_str(&out.stdout).expect("kubectl prints JSON");
    list["items"]
        .as_array()
        .expect("a list")
        .iter()
        .map(|rs| {
            let owner = &rs["metadata"]["ownerReferences"][0];
            assert_eq!(
                (&owner["kind"], &owner["name"], &owner["controller"]),
                (&json!("Deployment"), &json!("api"), &json!(true)),
                "{rs}"
            );
            assert_eq!(
                rs["metadata"]["managedFields"][0]["manager"], "kube-controller-manager",
                "{rs}"
            );
            let image = rs["spec"]["template"]["spec"]["containers"][0]["image"]
                .as_str()
                .expect("an image")
                .to_owned();
            (image, rs["spec"]["replicas"].as_i64().expect("replicas"))
        })
        .collect()
}

fn exists(target: &str) -> bool {
    control_plane()
        .kubectl(ADMIN, &["get", target, "-n", NS])
        .success()
}

#[tokio::test]
async fn kubernetes_controllers_are_never_refused_on_a_normal_day() {
    install_crypto_provider();
    shared();
    let driftgate = start_driftgate();
    assert_eq!(driftgate.counter(REVIEWS, &[DENIED]), 0.0);

    morning().await;
    assert_no_controller_refused(&driftgate);
    assert_eq!(
        driftgate.counter(REVIEWS, &[DENIED]),
        0.0,
        "a write was refused"
    );

    let denied_before = noon(&driftgate).await;
    evening().await;
    assert_admitted(
        &driftgate,
        "system:serviceaccount:kube-system:namespace-controller",
        "DELETE",
        "Deployment",
        "Controller",
    );
    assert_no_controller_refused(&driftgate);
    print_what_kubernetes_wrote(&driftgate);
    assert_eq!(
        driftgate.counter(REVIEWS, &[DENIED]),
        denied_before,
        "a write was refused under or after the window"
    );
}

/// Flux creates the namespace and Kubernetes equips it; the (impersonated) service controller
/// takes the LoadBalancer Service; Flux rolls out a new image.
async fn morning() {
    show(flux_apply(&git(IMAGE))).ok();
    eventually(
        "the namespace's default ServiceAccount and kube-root-ca.crt",
        || async { control_plane().namespace_equipped(NS).then_some(()) },
    )
    .await;
    let token = eventually("the tokens controller to fill in api-token", || async {
        let secret = get_json("secret/api-token", NS);
        secret["data"]["token"].as_str().map(str::to_owned)
    })
    .await;
    assert!(!token.is_empty());
    let secret = get_json("secret/api-token", NS);
    let ca = BASE64_STANDARD
        .decode(
            secret["data"]["ca.crt"]
                .as_str()
                .expect("ca.crt is filled in"),
        )
        .expect("data is base64");
    assert_eq!(ca, control_plane().ca_pem(), "ca.crt is the harness CA");
    eventually("the first ReplicaSet", || async {
        (replica_sets() == [(IMAGE.to_owned(), 2)]).then_some(())
    })
    .await;

    // The service controller of a cloud provider adds its cleanup finalizer, then the address.
    // kube-controller-manager was asked for it and did not start it:
    let log = std::fs::read_to_string(control_plane().controller_manager_log())
        .expect("the controller manager's log reads");
    assert!(
        log.lines()
            .any(|l| l.contains("Skipping a cloud provider controller")
                && l.contains("service-lb-controller")),
        "kube-controller-manager did not say it skips service-lb-controller"
    );
    as_service_controller(Patch::Strategic(
        json!({"metadata": {"finalizers": [LB_CLEANUP]}}),
    ))
    .await;
    as_service_controller(Patch::Strategic(
        json!({"status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.10"}]}}}),
    ))
    .await;
    assert_eq!(
        get_json("service/api", NS)["metadata"]["finalizers"],
        json!([LB_CLEANUP])
    );

    // The deployment controller makes a new ReplicaSet and scales the old one to 0.
    show(flux_apply(&git(NEW_IMAGE))).ok();
    eventually("the rollout to complete", || async {
        let mut sets = replica_sets();
        sets.sort();
        (sets == [(IMAGE.to_owned(), 0), (NEW_IMAGE.to_owned(), 2)]).then_some(())
    })
    .await;
}

/// alice opens a namespace-wide window, and Kubernetes' controllers keep writing under it: the
/// root CA publisher restores kube-root-ca.crt, the tokens controller fills in a token Secret
/// alice adds; then she closes it. Returns the denials counted once both driftgates had seen
/// the window (any before that are hers, not a controller's).
async fn noon(driftgate: &Driftgate) -> f64 {
    show(driftgate_cli(
        ALICE,
        &[
            "break-glass",
            "open",
            &format!("namespace/{NS}"),
            "--for",
            "1h",
            "--reason",
            "INC-5120: payments api latency, testing a token by hand",
        ],
    ))
    .ok();
    // Both driftgates read Namespaces from a watch: a dry run of alice's delete is admitted
    // once each has seen the window.
    eventually("both driftgates to see the namespace window", || async {
        control_plane()
            .kubectl(
                ALICE,
                &[
                    "delete",
                    "configmap/kube-root-ca.crt",
                    "-n",
                    NS,
                    "--dry-run=server",
                ],
            )
            .success()
            .then_some(())
    })
    .await;
    let denied_before = driftgate.counter(REVIEWS, &[DENIED]);
    kubectl(ALICE, &["delete", "configmap/kube-root-ca.crt", "-n", NS]).ok();
    control_plane().apply(
        ALICE,
        &format!(
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: hotfix-token\n  namespace: {NS}\n  \
             annotations: {{kubernetes.io/service-account.name: api}}\ntype: kubernetes.io/service-account-token\n"
        ),
    );
    eventually(
        "the root CA publisher to restore kube-root-ca.crt",
        || async { exists("configmap/kube-root-ca.crt").then_some(()) },
    )
    .await;
    eventually("the tokens controller to fill in hotfix-token", || async {
        get_json("secret/hotfix-token", NS)["data"]["token"]
            .as_str()
            .map(|_| ())
    })
    .await;
    assert_admitted(
        driftgate,
        "system:serviceaccount:kube-system:root-ca-cert-publisher",
        "CREATE",
        "ConfigMap",
        "Controller",
    );
    assert_admitted(
        driftgate,
        "system:kube-controller-manager",
        "UPDATE",
        "Secret",
        "Controller",
    );
    show(driftgate_cli(
        ALICE,
        &["break-glass", "close", &format!("namespace/{NS}")],
    ))
    .ok();
    let namespace = get_json(&format!("namespace/{NS}"), NS);
    assert!(
        namespace["metadata"]["labels"]["driftgate.dev/break-glass"].is_null(),
        "{namespace}"
    );
    denied_before
}

/// Flux deletes the namespace. The namespace controller empties it, the garbage collector and
/// the tokens controller delete what they own, and the service controller removes its finalizer
/// once the Service is being deleted (as it does after deleting the balancer); it goes.
async fn evening() {
    // Git first marks the namespace for deletion (the policy protects Namespaces from deletion
    // without a deliberate act), then removes it.
    show(flux_apply(&format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {NS}\n  labels: {{{SCENARIO_LABEL}: normal-day}}\n  annotations: {{driftgate.dev/allow-deletion: \"true\"}}\n"
    )))
    .ok();
    show(control_plane().kubectl(FLUX, &["delete", "namespace", NS, "--wait=false"])).ok();
    let deadline = Instant::now() + Duration::from_secs(180);
    let mut finalizer_removed = false;
    loop {
        let out = control_plane().kubectl(ADMIN, &["get", "namespace", NS, "-o", "json"]);
        if out.stderr.contains("NotFound") {
            break;
        }
        let service =
            control_plane().kubectl(ADMIN, &["get", "service/api", "-n", NS, "-o", "json"]);
        if !finalizer_removed && service.success() {
            let service: Value = serde_json::from_str(&service.stdout).expect("JSON");
            if service["metadata"]["deletionTimestamp"].is_string() {
                as_service_controller(Patch::Strategic(json!({
                    "metadata": {"$deleteFromPrimitiveList/finalizers": [LB_CLEANUP]}
                })))
                .await;
                finalizer_removed = true;
            }
        }
        assert!(
            Instant::now() < deadline,
            "namespace {NS} is still there after 180s: {}\n{}",
            out.stdout,
            get_json("all", NS)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(
        finalizer_removed,
        "the Service was never seen being deleted"
    );
}

/// The shared driftgate's review log lines (text) about `namespace` by `user`.
fn shared_reviews(namespace: &str, user: &str) -> Vec<String> {
    let (namespace, user) = (format!(" namespace={namespace} "), format!(" user={user} "));
    shared()
        .log_tail(usize::MAX)
        .lines()
        .filter(|l| l.contains(" review ") && l.contains(&namespace) && l.contains(&user))
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn a_namespace_deleted_under_its_own_window_is_emptied_by_the_namespace_controller() {
    install_crypto_provider();
    shared();
    let ns = "prod-normal-night";
    show(flux_apply(&super::namespace_with_api(ns))).ok();
    eventually(
        "the namespace's default ServiceAccount and kube-root-ca.crt",
        || async { control_plane().namespace_equipped(ns).then_some(()) },
    )
    .await;
    show(driftgate_cli(
        ALICE,
        &[
            "break-glass",
            "open",
            &format!("namespace/{ns}"),
            "--for",
            "30m",
            "--reason",
            "INC-5121: tearing down a broken environment by hand",
        ],
    ))
    .ok();
    // Flux would be held off the namespace now; alice, an opener, deletes it, once driftgate
    // has seen her window.
    eventually("driftgate to see the namespace window", || async {
        control_plane()
            .kubectl(ALICE, &["delete", "namespace", ns, "--dry-run=server"])
            .success()
            .then_some(())
    })
    .await;
    kubectl(ALICE, &["delete", "namespace", ns, "--wait=false"]).ok();

    // The namespace keeps its window label while it terminates: the namespace controller
    // empties it under the window, and it goes.
    let deadline = Instant::now() + Duration::from_secs(180);
    while control_plane()
        .kubectl(ADMIN, &["get", "namespace", ns])
        .success()
    {
        assert!(
            Instant::now() < deadline,
            "namespace {ns} is still there after 180s: {}",
            get_json(&format!("namespace/{ns}"), ns)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let deletes = shared_reviews(ns, "system:serviceaccount:kube-system:namespace-controller");
    assert!(
        deletes
            .iter()
            .any(|l| l.contains(" operation=DELETE kind=Deployment ")
                && l.contains(r#" decision="allowed" "#)
                && l.contains(r#" rule="Controller" "#)),
        "the namespace controller's DELETE of Deployment api was not admitted as Controller: {deletes:#?}"
    );
    let refused: Vec<String> = shared()
        .log_tail(usize::MAX)
        .lines()
        .filter(|l| {
            l.contains(&format!(" namespace={ns} "))
                && l.contains(r#" decision="denied" "#)
                && (l.contains(" user=system:serviceaccount:kube-system:")
                    || l.contains(" user=system:kube-controller-manager "))
        })
        .map(str::to_owned)
        .collect();
    assert!(
        refused.is_empty(),
        "Kubernetes' controllers were refused: {refused:#?}"
    );
    let log = std::fs::read_to_string(control_plane().controller_manager_log())
        .expect("the controller manager's log reads");
    let denials: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("admission webhook") && l.contains("denied") && l.contains(ns))
        .collect();
    assert!(
        denials.is_empty(),
        "kube-controller-manager was refused: {denials:#?}"
    );
}
