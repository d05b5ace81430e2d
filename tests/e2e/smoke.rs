//! The harness itself: the control plane answers, client certificates name who they should,
//! and a kube-rs client built from a kubeconfig writes.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::PostParams;
use serde_json::{Value, json};

use crate::harness::{ADMIN, ALICE, BOB, FLUX, HPA, control_plane, install_crypto_provider};

#[test]
fn kubectl_as_admin_lists_namespaces() {
    let out = control_plane()
        .kubectl(ADMIN, &["get", "namespaces", "-o", "name"])
        .ok();
    for namespace in ["namespace/default", "namespace/kube-system"] {
        assert!(out.stdout.lines().any(|l| l == namespace), "{}", out.stdout);
    }
}

#[test]
fn client_certificates_carry_user_and_groups() {
    let cases = [
        (BOB, &["system:authenticated"][..]),
        (ALICE, &["sre-oncall", "system:authenticated"][..]),
        (
            FLUX,
            &[
                "system:serviceaccounts",
                "system:serviceaccounts:flux-system",
                "system:authenticated",
            ][..],
        ),
        (
            HPA,
            &[
                "system:serviceaccounts",
                "system:serviceaccounts:kube-system",
                "system:authenticated",
            ][..],
        ),
    ];
    for (who, groups) in cases {
        let out = control_plane()
            .kubectl(who, &["auth", "whoami", "-o", "json"])
            .ok();
        let review: Value = serde_json::from_str(&out.stdout).expect("a SelfSubjectReview");
        let user = &review["status"]["userInfo"];
        assert_eq!(user["username"], who.user, "{review}");
        assert_eq!(user["groups"], json!(groups), "{review}");
    }
}

#[test]
fn rbac_lets_bob_edit_deployments_but_not_webhooks() {
    let control_plane = control_plane();
    let can = |verb: &str, resource: &str| {
        control_plane
            .kubectl(
                BOB,
                &["auth", "can-i", verb, resource, "-n", "prod-payments"],
            )
            .stdout
            .trim()
            .to_owned()
    };
    assert_eq!(can("update", "deployments.apps"), "yes");
    assert_eq!(can("patch", "deployments.apps/scale"), "yes");
    assert_eq!(can("create", "validatingwebhookconfigurations"), "no");
}

#[tokio::test]
async fn kube_rs_client_from_a_kubeconfig_creates_a_namespace_and_a_deployment() {
    install_crypto_provider();
    let client = control_plane().client(ADMIN).await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let namespace: Namespace = serde_json::from_value(json!({
        "metadata": {"name": "e2e-smoke"}
    }))
    .unwrap();
    let created = namespaces
        .create(&PostParams::default(), &namespace)
        .await
        .expect("the namespace is created");
    assert!(created.metadata.uid.is_some());

    let deployments: Api<Deployment> = Api::namespaced(client, "e2e-smoke");
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}
            }
        }
    }))
    .unwrap();
    deployments
        .create(&PostParams::default(), &deployment)
        .await
        .expect("the deployment is created");
    let read = deployments.get("web").await.expect("the deployment reads");
    assert_eq!(read.spec.and_then(|s| s.replicas), Some(1));
}
