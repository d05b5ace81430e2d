//! Issue 13, "Also": what Argo CD's real application-controller sends. A capture webhook keeps
//! its reviews while an Application with automated sync (prune, selfHeal) creates a Deployment
//! and a ConfigMap from "Git", a new commit changes the Deployment, and another drops the
//! ConfigMap, which Argo CD prunes. Twice: with Argo CD's default client-side apply
//! (`tests/fixtures/argocd-real-*.json`) and with the `ServerSideApply=true` sync option
//! (`argocd-real-ssa-*.json`). One review of each kind is compared with its fixture on what
//! driftgate decides by (the rules of `real_flux_capture.rs`, in `harness/review_fixtures.rs`),
//! and the Argo CD policy `tests/fixtures/policies/argocd-capture.yaml`, which decides the
//! fixtures in `tests/router.rs`, must name exactly the identity and field manager seen.
//!
//! The namespaces are `argocd-capture` and `argocd-capture-ssa`, outside the example policy
//! the shared driftgate serves: its `production` would refuse Argo CD's writes in a `prod-*`
//! namespace (Argo CD is not its controller). `DRIFTGATE_WRITE_FIXTURES=1` rewrites the
//! fixtures instead of comparing.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::harness::argocd::{ARGOCD, ARGOCD_NAMESPACE, ArgoApply, argocd};
use crate::harness::capture::CaptureWebhook;
use crate::harness::review_fixtures::{assert_controller_named, compare_or_write, summary};
use crate::harness::{ADMIN, control_plane, install_crypto_provider, shared};

use super::api_deployment;

/// One capture: its namespace (also the Application's and the repository's name), the
/// capture webhook's label, how Argo CD applies, and the fixtures' prefix.
struct Capture {
    namespace: &'static str,
    label: (&'static str, &'static str),
    apply: ArgoApply,
    fixtures: &'static str,
}

const CLIENT_SIDE: Capture = Capture {
    namespace: "argocd-capture",
    label: ("driftgate-e2e-capture-argocd", "client-side"),
    apply: ArgoApply::ClientSide,
    fixtures: "argocd-real",
};

const SERVER_SIDE: Capture = Capture {
    namespace: "argocd-capture-ssa",
    label: ("driftgate-e2e-capture-argocd", "server-side"),
    apply: ArgoApply::ServerSide,
    fixtures: "argocd-real-ssa",
};

/// The first sync waits for the controller's cluster cache (it starts with the first test
/// that uses it); later ones come within a refresh.
const SYNCED: Duration = Duration::from_secs(180);
const REFRESH: &str = "DRIFTGATE_WRITE_FIXTURES=1 cargo test --test e2e argocd_capture";
/// The policy deciding the fixtures in `tests/router.rs`.
const POLICY: &str = "tests/fixtures/policies/argocd-capture.yaml";
/// The field manager Argo CD's controller writes with.
const ARGOCD_FIELD_MANAGER: &str = "argocd-controller";

#[tokio::test]
async fn the_reviews_the_real_argocd_sends_match_the_fixtures_and_its_policy() {
    run(&CLIENT_SIDE).await;
}

#[tokio::test]
async fn the_reviews_the_real_argocd_sends_with_server_side_apply_match_the_fixtures_and_its_policy()
 {
    run(&SERVER_SIDE).await;
}

impl Capture {
    fn namespace_manifest(&self) -> String {
        format!(
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {}\n  labels:\n    {}: \"{}\"\n",
            self.namespace, self.label.0, self.label.1
        )
    }

    fn configmap(&self) -> String {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: {}\ndata:\n  LOG_LEVEL: info\n",
            self.namespace
        )
    }

    /// Commits `documents` to "Git" and waits until Argo CD has synced that commit.
    async fn publish_and_wait(&self, documents: &[String]) {
        let sha = argocd().publish(self.namespace, &documents.join("\n---\n"));
        self.wait_synced(&sha).await;
    }

    /// Waits until the Application's last sync operation succeeded at commit `sha`.
    async fn wait_synced(&self, sha: &str) {
        let start = Instant::now();
        loop {
            let state = control_plane()
                .kubectl(
                    ADMIN,
                    &[
                        "get",
                        "application",
                        self.namespace,
                        "-n",
                        ARGOCD_NAMESPACE,
                        "-o",
                        "jsonpath={.status.operationState.syncResult.revision} \
                         {.status.operationState.phase} {.status.sync.status}",
                    ],
                )
                .stdout;
            if state.trim() == format!("{sha} Succeeded Synced") {
                return;
            }
            assert!(
                start.elapsed() < SYNCED,
                "Argo CD did not sync {sha} within {SYNCED:?} (revision, phase, sync: \
                 {state:?}); log: {}",
                argocd().log().display()
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Waits until the Deployment controller has written the status of Deployment `api`'s
    /// current generation.
    async fn wait_observed(&self) {
        let start = Instant::now();
        loop {
            let generations = control_plane()
                .kubectl(
                    ADMIN,
                    &[
                        "get",
                        "deployment/api",
                        "-n",
                        self.namespace,
                        "-o",
                        "jsonpath={.metadata.generation}/{.status.observedGeneration}",
                    ],
                )
                .stdout;
            if let Some((generation, observed)) = generations.trim().split_once('/')
                && generation == observed
            {
                return;
            }
            assert!(
                start.elapsed() < SYNCED,
                "the Deployment controller never observed {}/api ({generations:?})",
                self.namespace
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

/// Argo CD creates a Deployment and a ConfigMap, a commit changes the Deployment, another drops
/// the ConfigMap (pruned); the reviews are compared with the fixtures and the policy.
async fn run(capture: &Capture) {
    install_crypto_provider();
    shared();
    let argocd = argocd();
    let namespace = capture.namespace;
    // The namespace is the admin's, labelled, so the capture webhook sees Argo CD's first write.
    control_plane().apply(ADMIN, &capture.namespace_manifest());
    let configuration = format!("driftgate-e2e-capture-{namespace}");
    let webhook = CaptureWebhook::register(&configuration, capture.label, namespace);

    let configmap = capture.configmap();
    let first = argocd.publish(
        namespace,
        &[api_deployment(namespace, 2), configmap.clone()].join("\n---\n"),
    );
    argocd.application(namespace, namespace, capture.apply);
    capture.wait_synced(&first).await;
    // The Deployment controller's status write comes first, as it does in a cluster where Git
    // changes minutes later: the fixtures' managedFields hold its entry.
    capture.wait_observed().await;
    // A change to the Deployment.
    capture
        .publish_and_wait(&[api_deployment(namespace, 3), configmap])
        .await;
    // The ConfigMap leaves "Git": Argo CD prunes it.
    capture
        .publish_and_wait(&[api_deployment(namespace, 3)])
        .await;

    let reviews: Vec<Value> = webhook
        .reviews()
        .into_iter()
        .filter(|r| r["request"]["userInfo"]["username"] == ARGOCD.user)
        .collect();
    let seen: Vec<String> = reviews.iter().map(summary).collect();
    eprintln!(
        "the real Argo CD ({:?}) sent, in order:\n{}",
        capture.apply,
        seen.join("\n")
    );
    // Argo CD dry-runs a sync on the client (gitops-engine's applyObject), so no dry run
    // reaches driftgate: its backport by dry runs alone cannot come from Argo CD. A release that
    // changes that must be looked at (and its dry run kept as a fixture).
    let dry_runs: Vec<String> = reviews
        .iter()
        .filter(|r| r["request"]["dryRun"] == true)
        .map(summary)
        .collect();
    assert!(
        dry_runs.is_empty(),
        "the real Argo CD now sends server-side dry runs: {dry_runs:#?}"
    );
    let picked: Vec<(String, Value)> = [
        ("create", pick(&reviews, "CREATE", "Deployment")),
        ("apply", pick(&reviews, "UPDATE", "Deployment")),
        ("prune", pick(&reviews, "DELETE", "ConfigMap")),
    ]
    .into_iter()
    .map(|(what, review)| (format!("{}-{what}.json", capture.fixtures), review))
    .collect();
    compare_or_write(&picked, "Argo CD", REFRESH);
    let reviews: Vec<Value> = picked.into_iter().map(|(_, review)| review).collect();
    assert_controller_named(
        POLICY,
        ("argocd", &[]),
        ARGOCD_FIELD_MANAGER,
        &reviews,
        "Argo CD",
    );
    // The example policy's Argo CD policies name the same identity and field manager (the
    // others are Flux's).
    assert_controller_named(
        "policies/example.yaml",
        ("argocd", &["production", "gitops", "staging"]),
        ARGOCD_FIELD_MANAGER,
        &reviews,
        "Argo CD",
    );
}

/// The first review of `operation` on a `kind`; the UPDATE is the Deployment's with 3 replicas
/// (the change, not a re-apply of the first revision).
fn pick(reviews: &[Value], operation: &str, kind: &str) -> Value {
    reviews
        .iter()
        .find(|r| {
            let request = &r["request"];
            request["operation"] == operation
                && request["kind"]["kind"] == kind
                && (operation != "UPDATE" || request["object"]["spec"]["replicas"] == 3)
        })
        .cloned()
        .unwrap_or_else(|| {
            let seen: Vec<String> = reviews.iter().map(summary).collect();
            panic!(
                "no {operation} of a {kind} from Argo CD was captured; seen:\n{}",
                seen.join("\n")
            )
        })
}
