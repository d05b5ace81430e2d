//! Scenarios 5, 8 and 9: the HPA's delegation, an Audit-mode namespace, and what driftgate
//! leaves alone (namespaces no policy guards) or never sees (kube-system).

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v1::ScaleSpec;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

use crate::harness::{
    ADMIN, BOB, Driftgate, HPA, control_plane, install_crypto_provider, repo_path, shared,
    webhook_configuration,
};

use super::{
    IMAGE, assert_denied, driftgate_events, flux_apply, get_json, kubectl, kubectl_edit,
    namespace_with_api, show, wait_for_event,
};

#[tokio::test]
async fn the_hpa_may_scale_through_the_scale_subresource_but_not_change_the_image() {
    install_crypto_provider();
    let driftgate = shared();
    let ns = "prod-s5";
    // Git also lets the HPA identity patch Deployments here, so that what stops its image change
    // below is driftgate, not RBAC (the real HPA has no such right).
    show(flux_apply(&format!(
        "{}---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: hpa-patches-deployments, namespace: {ns}}}
rules:
  - apiGroups: [apps]
    resources: [deployments]
    verbs: [patch, update]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: hpa-patches-deployments, namespace: {ns}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: hpa-patches-deployments}}
subjects:
  - {{apiGroup: rbac.authorization.k8s.io, kind: User, name: \"system:serviceaccount:kube-system:horizontal-pod-autoscaler\"}}
",
        namespace_with_api(ns)
    )))
    .ok();

    // The HPA's own request: GET the Scale, PUT it back with new replicas.
    let delegated_before = driftgate.counter(
        "driftgate_admission_reviews_total",
        &["decision=\"allowed\"", "rule=\"Delegation\""],
    );
    let deployments: Api<Deployment> = Api::namespaced(control_plane().client(HPA).await, ns);
    // The deployment controller writes the Deployment's status meanwhile: like the HPA, try
    // again on a conflict.
    let mut attempts = 0;
    let scaled = loop {
        let mut scale = deployments
            .get_scale("api")
            .await
            .expect("the HPA reads the Scale");
        scale.spec = Some(ScaleSpec { replicas: Some(4) });
        match deployments
            .replace_scale("api", &PostParams::default(), &scale)
            .await
        {
            Err(kube::Error::Api(status)) if status.code == 409 && attempts < 10 => attempts += 1,
            other => break other.expect("the HPA's scale is admitted"),
        }
    };
    assert_eq!(scaled.spec.and_then(|s| s.replicas), Some(4));
    assert_eq!(get_json("deployment/api", ns)["spec"]["replicas"], 4);
    // Only this test writes as the HPA: the review it caused was decided by the delegation.
    assert!(
        driftgate.counter(
            "driftgate_admission_reviews_total",
            &["decision=\"allowed\"", "rule=\"Delegation\""],
        ) > delegated_before
    );

    // The same identity changing the image, on the Deployment itself: denied.
    let image = kubectl(
        HPA,
        &[
            "set",
            "image",
            "deployment/api",
            "-n",
            ns,
            "api=registry.example/payments-api:9.9.9",
        ],
    );
    assert_denied(
        &image,
        "system:serviceaccount:kube-system:horizontal-pod-autoscaler may not update Deployment prod-s5/api:",
        "NotPermitted",
    );
    assert_eq!(
        get_json("deployment/api", ns)["spec"]["template"]["spec"]["containers"][0]["image"],
        IMAGE
    );
}

#[tokio::test]
async fn an_audit_namespace_admits_bobs_edit_with_a_warning_and_a_would_deny_event() {
    install_crypto_provider();
    shared();
    let ns = "staging-s8";
    show(flux_apply(&namespace_with_api(ns))).ok();

    let edit = kubectl_edit(
        BOB,
        "deployment/api",
        ns,
        "s|payments-api:1.4.2|payments-api:1.4.3-rc1|",
    )
    .ok();
    assert!(
        edit.stderr.contains(
            "Warning: driftgate audit (policy \"staging\" would deny in Enforce mode): bob may not update Deployment staging-s8/api:"
        ),
        "{}",
        edit.stderr
    );
    assert_eq!(
        get_json("deployment/api", ns)["spec"]["template"]["spec"]["containers"][0]["image"],
        "registry.example/payments-api:1.4.3-rc1"
    );
    let event = wait_for_event(
        ns,
        "WouldDeny",
        "Deployment",
        "api",
        "bob may not update Deployment staging-s8/api once policy \"staging\" is enforced",
    )
    .await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
}

/// Objects with this label are the only ones scenario 9's own driftgate is sent.
const S9_LABEL: &str = "driftgate.dev/e2e-scenario";

fn labelled_configmap(name: &str, namespace: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: {namespace}\n  labels: {{{S9_LABEL}: s9}}\ndata:\n  key: value\n"
    )
}

#[tokio::test]
async fn writes_outside_protected_namespaces_pass_untouched_and_kube_system_is_never_sent() {
    install_crypto_provider();
    let control_plane = control_plane();
    let shared = shared();
    show(flux_apply(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: prod-s9\n",
    ))
    .ok();
    control_plane
        .kubectl(ADMIN, &["create", "namespace", "dev-s9"])
        .ok();

    // The shared driftgate counts every other test's reviews too; this one, with the same
    // webhook configuration narrowed by an objectSelector, counts only this test's.
    let driftgate = Driftgate::start("s9", &repo_path("policies/example.yaml"), &[]);
    let mut configuration = webhook_configuration(
        "driftgate-e2e-s9",
        &driftgate.webhook_url(),
        driftgate.ca_pem(),
    );
    configuration["webhooks"][0]["objectSelector"] = json!({"matchLabels": {S9_LABEL: "s9"}});
    driftgate.register_with_probe(configuration, || {
        control_plane.kubectl_with_stdin(
            ADMIN,
            &["create", "--dry-run=server", "-f", "-"],
            Some(&labelled_configmap("s9-probe", "default")),
        );
    });
    let reviews = "driftgate_admission_reviews_total";
    let out_of_scope = [r#"decision="allowed""#, r#"rule="OutOfScope""#];

    // dev-s9: admitted as out of scope, untouched, and nothing reported.
    let before = driftgate.counter(reviews, &out_of_scope);
    let created = show(control_plane.kubectl_with_stdin(
        BOB,
        &["create", "-f", "-"],
        Some(&labelled_configmap("app-config", "dev-s9")),
    ))
    .ok();
    assert!(!created.stderr.contains("Warning"), "{}", created.stderr);
    assert_eq!(driftgate.counter(reviews, &out_of_scope), before + 1.0);
    assert_eq!(
        get_json("configmap/app-config", "dev-s9")["data"]["key"],
        "value"
    );
    // The shared driftgate answered it too, as out of scope (one log line per review).
    assert!(
        shared.log_tail(usize::MAX).lines().any(|l| {
            l.contains("namespace=dev-s9 name=app-config user=bob") && l.contains("OutOfScope")
        }),
        "the shared driftgate logged no review of dev-s9/app-config"
    );

    // kube-system: never sent (the namespaceSelector leaves it out), by either webhook.
    let total = driftgate.reviews();
    show(control_plane.kubectl_with_stdin(
        BOB,
        &["create", "-f", "-"],
        Some(&labelled_configmap("s9-not-sent", "kube-system")),
    ))
    .ok();
    assert_eq!(driftgate.reviews(), total);
    assert!(
        !shared.log_tail(usize::MAX).contains("s9-not-sent"),
        "the shared driftgate reviewed a write to kube-system"
    );

    // No Event for the dev-s9 write: Events are published in order by one task, so once the
    // Event of a later denial is published, one for the earlier write would have been too.
    let denied = show(control_plane.kubectl_with_stdin(
        BOB,
        &["create", "-f", "-"],
        Some(&labelled_configmap("marker", "prod-s9")),
    ));
    assert_denied(
        &denied,
        "bob may not create ConfigMap prod-s9/marker:",
        "NotPermitted",
    );
    let published = "driftgate_events_published_total";
    super::eventually("driftgate s9 to publish its WriteDenied Event", || async {
        (driftgate.counter(published, &[r#"reason="WriteDenied""#]) >= 1.0).then_some(())
    })
    .await;
    assert_eq!(driftgate.counter(published, &[]), 1.0);
    assert_eq!(
        driftgate.counter("driftgate_events_dropped_total", &[]),
        0.0
    );
    let events = driftgate_events("dev-s9").await;
    assert!(events.is_empty(), "{events:?}");
}
