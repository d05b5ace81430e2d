//! Issue 13, scenario 6: the controller names from the real thing. A capture webhook keeps what
//! Flux's real kustomize-controller sends while it creates a Deployment and a ConfigMap,
//! changes the Deployment (a dry run, then an apply) and prunes the ConfigMap; one review of
//! each kind is compared with `tests/fixtures/flux-real-*.json` on what driftgate decides by,
//! and the example policy's `flux` entry must name exactly the identity and field manager seen.
//!
//! The fixtures are the captured reviews with what varies per run normalised (uids,
//! resourceVersions, generations, every timestamp, `extra`'s values); the namespace stays
//! `prod-flux-capture`, a production namespace of the example policy, so `tests/router.rs` can
//! have the example policy decide them. `DRIFTGATE_WRITE_FIXTURES=1` rewrites them instead.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::harness::capture::CaptureWebhook;
use crate::harness::flux::{FLUX_NAMESPACE, flux};
use crate::harness::review_fixtures::{assert_controller_named, compare_or_write, summary};
use crate::harness::{ADMIN, FLUX, control_plane, install_crypto_provider, shared};

use super::{FLUX_FIELD_MANAGER, api_deployment};

const NAMESPACE: &str = "prod-flux-capture";
/// The Kustomization and its source.
const SOURCE: &str = "prod-flux-capture";
/// The capture webhook's namespaceSelector.
const LABEL: (&str, &str) = ("driftgate-e2e-capture", "yes");
const INTERVAL: &str = "5s";
/// The first reconcile may wait for the controller's caches (it starts with the first test
/// that uses it); later ones come within a few intervals.
const APPLIED: Duration = Duration::from_secs(120);
const REFRESH: &str = "DRIFTGATE_WRITE_FIXTURES=1 cargo test --test e2e real_flux_capture";

fn namespace() -> String {
    format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {NAMESPACE}\n  labels:\n    {}: \"{}\"\n",
        LABEL.0, LABEL.1
    )
}

fn configmap() -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: {NAMESPACE}\ndata:\n  LOG_LEVEL: info\n"
    )
}

/// One "Git" revision: the namespace and `rest`.
fn revision(rest: &[String]) -> String {
    let mut documents = vec![namespace()];
    documents.extend(rest.iter().cloned());
    documents.join("\n---\n")
}

/// Publishes `manifests` and waits until the Kustomization has applied that revision.
async fn publish_and_wait(manifests: &str) {
    wait_applied(&flux().publish(SOURCE, manifests)).await;
}

async fn wait_applied(revision: &str) {
    let start = Instant::now();
    loop {
        let applied = control_plane()
            .kubectl(
                ADMIN,
                &[
                    "get",
                    "kustomization",
                    SOURCE,
                    "-n",
                    FLUX_NAMESPACE,
                    "-o",
                    "jsonpath={.status.lastAppliedRevision}",
                ],
            )
            .stdout;
        if applied.trim() == revision {
            return;
        }
        assert!(
            start.elapsed() < APPLIED,
            "Flux did not apply {revision} within {APPLIED:?} (last applied {applied:?}); log: {}",
            flux().log().display()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Waits until the Deployment controller has written the status of Deployment `api`'s
/// current generation.
async fn wait_observed() {
    let start = Instant::now();
    loop {
        let generations = control_plane()
            .kubectl(
                ADMIN,
                &[
                    "get",
                    "deployment/api",
                    "-n",
                    NAMESPACE,
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
            start.elapsed() < APPLIED,
            "the Deployment controller never observed {NAMESPACE}/api ({generations:?})"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test]
async fn the_reviews_the_real_flux_sends_match_the_fixtures_and_the_example_policy() {
    install_crypto_provider();
    shared();
    // The namespace first, alone, so the capture webhook can be registered on it before Flux
    // writes anything else there.
    let first = flux().publish(SOURCE, &revision(&[]));
    flux().kustomize(SOURCE, INTERVAL);
    wait_applied(&first).await;
    let capture = CaptureWebhook::register("driftgate-e2e-capture", LABEL, NAMESPACE);

    let configmap = configmap();
    publish_and_wait(&revision(&[
        api_deployment(NAMESPACE, 2),
        configmap.clone(),
    ]))
    .await;
    // The Deployment controller's status write comes first, as it does in a cluster where Git
    // changes minutes later: the fixtures' managedFields hold its entry.
    wait_observed().await;
    // A change to the Deployment: Flux's dry run shows it, and it applies.
    publish_and_wait(&revision(&[api_deployment(NAMESPACE, 3), configmap])).await;
    // The ConfigMap leaves "Git": Flux prunes it.
    publish_and_wait(&revision(&[api_deployment(NAMESPACE, 3)])).await;

    let reviews: Vec<Value> = capture
        .reviews()
        .into_iter()
        .filter(|r| r["request"]["userInfo"]["username"] == FLUX.user)
        .collect();
    let seen: Vec<String> = reviews.iter().map(summary).collect();
    eprintln!("the real Flux sent, in order:\n{}", seen.join("\n"));
    let picked = [
        (
            "flux-real-create.json",
            pick(&reviews, "CREATE", "Deployment", false),
        ),
        (
            "flux-real-dryrun.json",
            pick(&reviews, "UPDATE", "Deployment", true),
        ),
        (
            "flux-real-apply.json",
            pick(&reviews, "UPDATE", "Deployment", false),
        ),
        (
            "flux-real-prune.json",
            pick(&reviews, "DELETE", "ConfigMap", false),
        ),
    ];
    let named: Vec<(String, Value)> = picked
        .iter()
        .map(|(file, review)| (file.to_string(), review.clone()))
        .collect();
    compare_or_write(&named, "the real Flux", REFRESH);
    assert_controller_named(
        "policies/example.yaml",
        // gitops-argocd guards Argo CD's objects in argocd, production-argocd and staging-argocd
        // the workloads Argo CD applies: Argo CD's controllers write there.
        (
            "flux",
            &["gitops-argocd", "production-argocd", "staging-argocd"],
        ),
        FLUX_FIELD_MANAGER,
        &picked.map(|(_, review)| review),
        "Flux",
    );
}

/// The first review of `operation` on a `kind` with `dry_run`; the dry-run and real UPDATEs are
/// the Deployment's with 3 replicas (the change, not the no-op dry runs of earlier intervals).
fn pick(reviews: &[Value], operation: &str, kind: &str, dry_run: bool) -> Value {
    reviews
        .iter()
        .find(|r| {
            let request = &r["request"];
            request["operation"] == operation
                && request["kind"]["kind"] == kind
                && request["dryRun"].as_bool().unwrap_or(false) == dry_run
                && (operation != "UPDATE" || request["object"]["spec"]["replicas"] == 3)
        })
        .cloned()
        .unwrap_or_else(|| {
            let seen: Vec<String> = reviews.iter().map(summary).collect();
            panic!(
                "no {operation} of a {kind} (dry run {dry_run}) from Flux was captured; seen:\n{}",
                seen.join("\n")
            )
        })
}
