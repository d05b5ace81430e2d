//! The 3am story with Flux's real kustomize-controller (issue 13), not `kubectl apply` playing
//! it: it dry-runs every object on every interval, applies with force what drifted, and writes
//! as its own service account.

use std::time::{Duration, Instant};

use crate::harness::flux::{FLUX_NAMESPACE, flux};
use crate::harness::{ADMIN, ALICE, BOB, control_plane, install_crypto_provider, shared};

use super::{kubectl, namespace_with_api, wait_for_event};

/// How long the first reconcile of a new Kustomization may take (the controller's caches start
/// with the first test that uses it).
const FIRST_APPLY: Duration = Duration::from_secs(120);
/// Flux's interval in these tests; a revert must come within a few of them.
const INTERVAL: &str = "5s";
const REVERT: Duration = Duration::from_secs(60);

/// A field of Deployment `api` in `namespace` (a kubectl jsonpath); None when it cannot be read.
fn deployment_field(namespace: &str, jsonpath: &str) -> Option<String> {
    let out = control_plane().kubectl(
        ADMIN,
        &[
            "get",
            "deployment/api",
            "-n",
            namespace,
            "-o",
            &format!("jsonpath={{{jsonpath}}}"),
        ],
    );
    out.success().then(|| out.stdout.trim().to_owned())
}

fn replicas(namespace: &str) -> Option<u64> {
    deployment_field(namespace, ".spec.replicas")?.parse().ok()
}

/// Polls the Deployment's replicas until they are `want`; the seconds it took, or a failure
/// that shows the Kustomization and the controller's log.
async fn wait_for_replicas(name: &str, namespace: &str, want: u64, within: Duration) -> f64 {
    let start = Instant::now();
    while start.elapsed() < within {
        if replicas(namespace) == Some(want) {
            return start.elapsed().as_secs_f64();
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let kustomization = control_plane().kubectl(
        ADMIN,
        &[
            "get",
            "kustomization",
            name,
            "-n",
            FLUX_NAMESPACE,
            "-o",
            "yaml",
        ],
    );
    panic!(
        "Deployment {namespace}/api did not reach {want} replicas within {within:?} (now {:?}).\n{}\nkustomize-controller log: {}",
        replicas(namespace),
        kustomization.stdout,
        flux().log().display()
    );
}

#[tokio::test]
async fn under_audit_the_real_flux_reverts_a_manual_scale_and_driftgate_reports_it() {
    install_crypto_provider();
    shared();
    let ns = "staging-flux-revert";
    let name = "staging-flux-revert";
    flux().publish(name, &namespace_with_api(ns));
    flux().kustomize(name, INTERVAL);
    let first = wait_for_replicas(name, ns, 2, FIRST_APPLY).await;
    eprintln!("real Flux applied the first revision in {first:.1}s");
    // It is Flux's own write: its field manager owns the replicas.
    let shown = control_plane()
        .kubectl(
            ADMIN,
            &[
                "get",
                "deployment/api",
                "-n",
                ns,
                "-o",
                "json",
                "--show-managed-fields",
            ],
        )
        .ok();
    let deployment: serde_json::Value = serde_json::from_str(&shown.stdout).unwrap();
    let managers = deployment["metadata"]["managedFields"].clone();
    assert!(
        managers
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["manager"] == "kustomize-controller" && m["operation"] == "Apply"),
        "{managers}"
    );

    // 3am: bob scales by hand. The staging policy is Audit: admitted, with driftgate's warning.
    let scale = kubectl(BOB, &["scale", "deployment/api", "-n", ns, "--replicas=5"]).ok();
    assert!(
        scale
            .stderr
            .contains("driftgate audit (policy \"staging\" would deny in Enforce mode)"),
        "{}",
        scale.stderr
    );
    wait_for_event(
        ns,
        "WouldDeny",
        "Deployment",
        "api",
        &format!("bob may not update Deployment {ns}/api (scale)"),
    )
    .await;
    // ... and the real controller undoes it at its next reconcile: the failure driftgate exists for.
    let reverted = wait_for_replicas(name, ns, 2, REVERT).await;
    eprintln!("real Flux reverted bob's scale in {reverted:.1}s (interval {INTERVAL})");
}

/// The Kustomization's Ready condition, as (status, message).
fn ready(name: &str) -> (String, String) {
    let out = control_plane()
        .kubectl(
            ADMIN,
            &[
                "get",
                "kustomization",
                name,
                "-n",
                FLUX_NAMESPACE,
                "-o",
                "json",
            ],
        )
        .ok();
    let kustomization: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let conditions = kustomization["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    conditions
        .iter()
        .find(|c| c["type"] == "Ready")
        .map(|c| {
            (
                c["status"].as_str().unwrap_or("").to_owned(),
                c["message"].as_str().unwrap_or("").to_owned(),
            )
        })
        .unwrap_or_default()
}

fn image(namespace: &str) -> String {
    deployment_field(namespace, ".spec.template.spec.containers[0].image")
        .expect("the Deployment can be read")
}

#[tokio::test]
async fn under_enforce_the_fix_made_in_a_window_survives_the_real_flux() {
    install_crypto_provider();
    shared();
    let ns = "prod-flux-fix";
    let name = "prod-flux-fix";
    flux().publish(name, &namespace_with_api(ns));
    flux().kustomize(name, INTERVAL);
    wait_for_replicas(name, ns, 2, FIRST_APPLY).await;

    // alice opens a window with the CLI and makes the 3am fix: more replicas, a hotfix image.
    crate::harness::driftgate_cli(
        ALICE,
        &[
            "break-glass",
            "open",
            "deployment/api",
            "-n",
            ns,
            "--for",
            "1h",
            "--reason",
            "INC-913: api OOM, hotfix image",
        ],
    )
    .ok();
    kubectl(
        ALICE,
        &["scale", "deployment/api", "-n", ns, "--replicas=5"],
    )
    .ok();
    let hotfix = "registry.example/payments-api:1.4.3-hotfix";
    kubectl(
        ALICE,
        &[
            "set",
            "image",
            "deployment/api",
            "-n",
            ns,
            &format!("api={hotfix}"),
        ],
    )
    .ok();

    // The real Flux's next reconcile is refused, and its Kustomization says driftgate's sentence.
    let start = Instant::now();
    let (status, message) = loop {
        let (status, message) = ready(name);
        if status == "False" && message.contains("denied the request") {
            break (status, message);
        }
        assert!(
            start.elapsed() < REVERT,
            "the Kustomization never reported the refusal: {status} {message}; log: {}",
            flux().log().display()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    eprintln!(
        "the real Flux reported the refusal after {:.1}s: {status}: {message}",
        start.elapsed().as_secs_f64()
    );
    assert!(
        message.contains(&format!(
            "Controller flux (system:serviceaccount:flux-system:kustomize-controller) may not update Deployment {ns}/api while the break-glass window on the object (until "
        )) && message.contains("reason \"INC-913: api OOM, hotfix image\") holds it (policy \"production\", rule ControllerHeld). Backport the emergency change to Git"),
        "{message}"
    );
    // For three intervals the fix stays in place: Flux keeps trying and keeps being refused
    // (between tries its Ready is Unknown, "reconciliation in progress"; never True).
    let watched = Instant::now();
    while watched.elapsed() < Duration::from_secs(15) {
        assert_eq!(replicas(ns), Some(5));
        assert_eq!(image(ns), hotfix);
        assert_ne!(ready(name).0, "True", "{}", ready(name).1);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
