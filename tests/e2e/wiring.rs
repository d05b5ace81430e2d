//! driftgate wired into the API server for real: Flux's server-side apply is admitted, bob's
//! `kubectl scale` is denied with driftgate's message; a test may run a driftgate of its own.

use serde_json::json;

use crate::harness::{ADMIN, BOB, Driftgate, FLUX, control_plane, shared, webhook_configuration};

const PROD_PAYMENTS_API: &str = r#"
apiVersion: v1
kind: Namespace
metadata:
  name: prod-payments
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: api
  namespace: prod-payments
spec:
  replicas: 2
  selector:
    matchLabels: {app: api}
  template:
    metadata:
      labels: {app: api}
    spec:
      containers:
        - name: api
          image: registry.example/payments-api:1.4.2
"#;

#[test]
fn flux_apply_is_admitted_and_bobs_scale_is_denied_with_driftgates_message() {
    let control_plane = control_plane();
    let driftgate = shared();

    let applied = control_plane.kubectl_with_stdin(
        FLUX,
        &[
            "apply",
            "--server-side",
            "--field-manager=kustomize-controller",
            "-f",
            "-",
        ],
        Some(PROD_PAYMENTS_API),
    );
    assert!(
        applied.success(),
        "Flux's apply was refused:\n{}\ndriftgate's log:\n{}",
        applied.stderr,
        driftgate.log_tail(20)
    );

    let scaled = control_plane
        .kubectl(
            BOB,
            &[
                "scale",
                "deployment/api",
                "-n",
                "prod-payments",
                "--replicas=5",
            ],
        )
        .failed();
    assert!(
        scaled
            .stderr
            .contains("bob may not update Deployment prod-payments/api"),
        "{}",
        scaled.stderr
    );
    assert!(
        scaled.stderr.contains("gate.driftgate.dev"),
        "the denial names the webhook: {}",
        scaled.stderr
    );

    let replicas = control_plane
        .kubectl(
            FLUX,
            &[
                "get",
                "deployment/api",
                "-n",
                "prod-payments",
                "-o",
                "jsonpath={.spec.replicas}",
            ],
        )
        .ok();
    assert_eq!(replicas.stdout, "2");
    assert!(
        driftgate.counter(
            "driftgate_admission_reviews_total",
            &["decision=\"denied\"", "rule=\"NotPermitted\""]
        ) >= 1.0
    );
}

/// Guards only `e2e-own`, which the example policy (the shared driftgate's) does not.
const OWN_POLICY: &str = r#"
apiVersion: driftgate.dev/v1alpha1
kind: GatePolicy
metadata: {name: own}
spec:
  mode: Enforce
  namespaces: {include: ["e2e-own"]}
  controllers:
    - name: flux
      usernames: ["system:serviceaccount:flux-system:kustomize-controller"]
"#;

#[test]
fn a_test_can_run_its_own_driftgate_and_dropping_it_unregisters_the_webhook() {
    let control_plane = control_plane();
    control_plane
        .kubectl(ADMIN, &["create", "namespace", "e2e-own"])
        .ok();
    let policy = control_plane.dir().join("own-policy.yaml");
    std::fs::write(&policy, OWN_POLICY).unwrap();

    let driftgate = Driftgate::start("own", &policy, &[]);
    let mut configuration = webhook_configuration(
        "driftgate-e2e-own",
        &driftgate.webhook_url(),
        driftgate.ca_pem(),
    );
    configuration["webhooks"][0]["namespaceSelector"] =
        json!({"matchLabels": {"kubernetes.io/metadata.name": "e2e-own"}});
    driftgate.register_probing(configuration, "e2e-own");

    let create = ["create", "configmap", "settings", "-n", "e2e-own"];
    let denied = control_plane.kubectl(BOB, &create).failed();
    assert!(
        denied
            .stderr
            .contains("bob may not create ConfigMap e2e-own/settings"),
        "{}",
        denied.stderr
    );

    // A failurePolicy: Fail webhook left behind would refuse this outright.
    drop(driftgate);
    control_plane.kubectl(BOB, &create).ok();
}
