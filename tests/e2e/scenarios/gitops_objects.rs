//! Issue 24, section 3: the GitOps objects are guarded as objects. The shared driftgate (the
//! example policy's `gitops`) refuses bob's patch of a Kustomization's `images`, which would
//! make the real Flux write his image into a production namespace as its own write; alice
//! opens a break-glass window on the Kustomization itself, her patch is admitted and recorded
//! for backport, and the real kustomize-controller applies the new image into the guarded
//! namespace.
//!
//! Argo CD's half: the example policy's `gitops-argocd` refuses bob's patch of an Application's
//! `targetRevision`, which would make the real Argo CD sync another commit as its own write;
//! alice's, under a window on the Application, is admitted and recorded, and the real
//! application-controller (whose status and `operation` writes that window does not hold)
//! syncs the commit she named.
//!
//! A capture webhook keeps the two reviews of the Kustomization (and of the Application) the API
//! server sends for bob and alice, compared with `tests/fixtures/gitops-kustomization-images-*.json`
//! (and `gitops-application-target-revision-*.json`) on what driftgate
//! decides by (`DRIFTGATE_WRITE_FIXTURES=1` rewrites them), so that the example policy's test
//! suite decides reviews of a real patch.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::harness::argocd::{ARGOCD_NAMESPACE, ArgoApply, argocd};
use crate::harness::capture::CaptureWebhook;
use crate::harness::flux::{FLUX_NAMESPACE, flux};
use crate::harness::review_fixtures::{compare_or_write, normalise};
use crate::harness::{
    ADMIN, ALICE, BOB, Identity, KubectlOutput, control_plane, driftgate_cli,
    install_crypto_provider, shared,
};

use super::suspensions::{argo_revision, wait_argo_state};
use super::{IMAGE, assert_denied, get_json, kubectl, records, wait_for_event};

/// The Kustomization and its source.
const NAME: &str = "gitops-e2e";
/// Where its Deployment goes: `prod-*`, which the example policy's `production` guards.
const APPS: &str = "prod-gitops-e2e";
const INTERVAL: &str = "5s";
/// The first reconcile may wait for the controller's caches.
const APPLIED: Duration = Duration::from_secs(120);
const HOTFIX: &str = "1.4.3-hotfix";
const REASON: &str = "INC-2424: roll the api forward to the hotfix image while Git catches up";
/// The capture webhook's namespaceSelector, set on flux-system for this test.
const CAPTURE_LABEL: (&str, &str) = ("driftgate-e2e-capture-gitops", "yes");
const REFRESH: &str = "DRIFTGATE_WRITE_FIXTURES=1 cargo test --test e2e gitops_objects";

fn revision() -> String {
    format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {APPS}\n---\n{}",
        super::api_deployment(APPS, 2)
    )
}

/// The image of the Deployment Flux applies, as the API server has it.
fn applied_image() -> String {
    get_json("deployment/api", APPS)["spec"]["template"]["spec"]["containers"][0]["image"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn patch_images(who: Identity) -> KubectlOutput {
    let repository = IMAGE.split(':').next().expect("the image has a repository");
    let patch = json!({"spec": {"images": [{"name": repository, "newTag": HOTFIX}]}});
    kubectl(
        who,
        &[
            "patch",
            "kustomization",
            NAME,
            "-n",
            FLUX_NAMESPACE,
            "--type=merge",
            "-p",
            &patch.to_string(),
        ],
    )
}

/// The first review the capture webhook kept of `user` patching the Kustomization's images.
fn captured(capture: &CaptureWebhook, user: &str) -> Value {
    let reviews = capture.reviews();
    reviews
        .iter()
        .find(|r| {
            let request = &r["request"];
            request["userInfo"]["username"] == user
                && request["name"] == NAME
                && request["kind"]["kind"] == "Kustomization"
                && request["object"]["spec"]["images"].is_array()
        })
        .cloned()
        .unwrap_or_else(|| {
            panic!(
                "no patch of {NAME}'s images by {user} was captured ({} reviews)",
                reviews.len()
            )
        })
}

/// The review normalised, with its window's expiry fixed at the fixtures' convention
/// (20261130T1000Z, the suites' now being 09:00) so that it decides the same on every run.
fn fixture_of(review: &Value) -> Value {
    let mut review = normalise(review);
    for side in ["object", "oldObject"] {
        let labels = &mut review["request"][side]["metadata"]["labels"];
        if labels.get("driftgate.dev/break-glass").is_some() {
            labels["driftgate.dev/break-glass"] = json!("20261130T1000Z");
        }
    }
    review
}

#[tokio::test]
async fn a_kustomization_is_changed_only_under_a_window_and_the_real_flux_applies_the_change() {
    install_crypto_provider();
    shared();
    flux().publish(NAME, &revision());
    flux().kustomize(NAME, INTERVAL);
    let start = Instant::now();
    while get_json_opt("deployment/api", APPS).is_none() || applied_image() != IMAGE {
        assert!(
            start.elapsed() < APPLIED,
            "Flux did not apply {NAME}; log: {}",
            flux().log().display()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    kubectl(
        ADMIN,
        &[
            "label",
            "namespace",
            FLUX_NAMESPACE,
            &format!("{}={}", CAPTURE_LABEL.0, CAPTURE_LABEL.1),
            "--overwrite",
        ],
    )
    .ok();
    let capture = CaptureWebhook::register(
        "driftgate-e2e-capture-gitops",
        CAPTURE_LABEL,
        FLUX_NAMESPACE,
    );

    // bob's patch would have Flux write his image into prod-gitops-e2e as its own: refused.
    let refused = patch_images(BOB);
    assert_denied(
        &refused,
        &format!(
            "bob may not update Kustomization {FLUX_NAMESPACE}/{NAME}: only its controllers (flux) write here (policy \"gitops\", rule NotPermitted)"
        ),
        "NotPermitted",
    );
    let open_command = format!(
        "driftgate break-glass open kustomizations.kustomize.toolkit.fluxcd.io/{NAME} -n {FLUX_NAMESPACE} --for 1h"
    );
    assert!(
        refused.stderr.contains(&open_command),
        "{open_command}: {}",
        refused.stderr
    );
    assert_eq!(
        flux().kustomization(NAME)["spec"]["images"],
        Value::Null,
        "bob's images were stored"
    );
    wait_for_event(
        FLUX_NAMESPACE,
        "WriteDenied",
        "Kustomization",
        NAME,
        "bob may not update Kustomization",
    )
    .await;

    // alice opens a window on the Kustomization and patches it: admitted, with the warning to
    // backport, and recorded.
    driftgate_cli(
        ALICE,
        &[
            "break-glass",
            "open",
            &format!("kustomization/{NAME}"),
            "-n",
            FLUX_NAMESPACE,
            "--for",
            "1h",
            "--reason",
            REASON,
        ],
    )
    .ok();
    let admitted = patch_images(ALICE);
    assert!(admitted.success(), "{}", admitted.stderr);
    assert!(
        admitted
            .stderr
            .contains("backport it to Git before the window closes"),
        "{}",
        admitted.stderr
    );
    let images = &flux().kustomization(NAME)["spec"]["images"];
    assert_eq!(images[0]["newTag"], HOTFIX, "{images}");
    let record = super::eventually("the record of alice's change", || async {
        records(FLUX_NAMESPACE).await.into_iter().find(|r| {
            r.spec.object.kind == "Kustomization"
                && r.spec.object.name == NAME
                && r.spec
                    .changes
                    .iter()
                    .any(|c| c.fields.iter().any(|f| f.path == "spec.images"))
        })
    })
    .await;
    assert_eq!(
        (
            record.spec.window.opener.as_deref(),
            record.spec.window.reason.as_deref()
        ),
        (Some(ALICE.user), Some(REASON)),
        "{record:?}"
    );

    // The real Flux applies what the Kustomization now says into the guarded namespace.
    let patched = Instant::now();
    let hotfix = format!("{}:{HOTFIX}", IMAGE.split(':').next().unwrap());
    while applied_image() != hotfix {
        assert!(
            patched.elapsed() < APPLIED,
            "Flux did not apply the hotfix image (still {}); log: {}",
            applied_image(),
            flux().log().display()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    eprintln!(
        "the real Flux applied the image alice's window changed in {:.1} s",
        patched.elapsed().as_secs_f64()
    );

    let picked = [
        (
            "gitops-kustomization-images-by-bob.json".to_owned(),
            fixture_of(&captured(&capture, BOB.user)),
        ),
        (
            "gitops-kustomization-images-under-window.json".to_owned(),
            fixture_of(&captured(&capture, ALICE.user)),
        ),
    ];
    drop(capture);
    compare_or_write(&picked, "The API server", REFRESH);
}

/// The object as the admin reads it, if it exists yet.
fn get_json_opt(target: &str, namespace: &str) -> Option<Value> {
    let out = control_plane().kubectl(
        ADMIN,
        &[
            "get",
            target,
            "-n",
            namespace,
            "-o",
            "json",
            "--ignore-not-found",
        ],
    );
    (out.success() && !out.stdout.trim().is_empty())
        .then(|| serde_json::from_str(&out.stdout).expect("kubectl prints JSON"))
}

/// The Application of [`an_application_is_changed_only_under_a_window_and_the_real_argo_cd_syncs_it`],
/// its Git repository and the namespace it syncs into (outside every policy: Argo CD is no
/// controller of `production`'s).
const ARGO_NAME: &str = "argocd-gitops-e2e";
const ARGO_REASON: &str = "INC-2425: roll the settings back to the last good commit";
/// The capture webhook's namespaceSelector, set on argocd for the Argo CD test.
const ARGO_CAPTURE_LABEL: (&str, &str) = ("driftgate-e2e-capture-gitops-argocd", "yes");

/// The first review the capture webhook kept of `user` patching the Application's
/// `targetRevision` to `revision`.
fn captured_target_revision(capture: &CaptureWebhook, user: &str, revision: &str) -> Value {
    let reviews = capture.reviews();
    reviews
        .iter()
        .find(|r| {
            let request = &r["request"];
            request["userInfo"]["username"] == user
                && request["name"] == ARGO_NAME
                && request["kind"]["kind"] == "Application"
                && request["object"]["spec"]["source"]["targetRevision"] == revision
        })
        .cloned()
        .unwrap_or_else(|| {
            panic!(
                "no patch of {ARGO_NAME}'s targetRevision by {user} was captured ({} reviews)",
                reviews.len()
            )
        })
}

fn patch_target_revision(who: Identity, revision: &str) -> KubectlOutput {
    let patch = json!({"spec": {"source": {"targetRevision": revision}}});
    kubectl(
        who,
        &[
            "patch",
            "application",
            ARGO_NAME,
            "-n",
            ARGOCD_NAMESPACE,
            "--type=merge",
            "-p",
            &patch.to_string(),
        ],
    )
}

#[tokio::test]
async fn an_application_is_changed_only_under_a_window_and_the_real_argo_cd_syncs_it() {
    install_crypto_provider();
    shared();
    // Two commits: the Application follows `main` to the second.
    let first = argocd().publish(ARGO_NAME, &argo_revision(ARGO_NAME, "info"));
    argocd().application(ARGO_NAME, ARGO_NAME, ArgoApply::ClientSide);
    wait_argo_state(
        ARGO_NAME,
        &format!("{first} Succeeded Synced {first}"),
        Duration::from_secs(180),
    )
    .await;
    let second = argocd().publish(ARGO_NAME, &argo_revision(ARGO_NAME, "debug"));
    wait_argo_state(
        ARGO_NAME,
        &format!("{second} Succeeded Synced {second}"),
        Duration::from_secs(60),
    )
    .await;
    let settings = || get_json("configmap/settings", ARGO_NAME)["data"]["LOG_LEVEL"].clone();
    assert_eq!(settings(), "debug");
    let target_revision = || {
        get_json(&format!("application/{ARGO_NAME}"), ARGOCD_NAMESPACE)["spec"]["source"]
            ["targetRevision"]
            .clone()
    };

    kubectl(
        ADMIN,
        &[
            "label",
            "namespace",
            ARGOCD_NAMESPACE,
            &format!("{}={}", ARGO_CAPTURE_LABEL.0, ARGO_CAPTURE_LABEL.1),
            "--overwrite",
        ],
    )
    .ok();
    let capture = CaptureWebhook::register(
        "driftgate-e2e-capture-gitops-argocd",
        ARGO_CAPTURE_LABEL,
        ARGOCD_NAMESPACE,
    );

    // bob's patch would have Argo CD sync the first commit as its own write: refused.
    let refused = patch_target_revision(BOB, &first);
    assert_denied(
        &refused,
        &format!(
            "bob may not update Application {ARGOCD_NAMESPACE}/{ARGO_NAME}: only its controllers (argocd, argocd-applicationset) write here (policy \"gitops-argocd\", rule NotPermitted)"
        ),
        "NotPermitted",
    );
    let open_command = format!(
        "driftgate break-glass open applications.argoproj.io/{ARGO_NAME} -n {ARGOCD_NAMESPACE} --for 1h"
    );
    assert!(
        refused.stderr.contains(&open_command),
        "{open_command}: {}",
        refused.stderr
    );
    assert_eq!(target_revision(), "main", "bob's targetRevision was stored");
    wait_for_event(
        ARGOCD_NAMESPACE,
        "WriteDenied",
        "Application",
        ARGO_NAME,
        "bob may not update Application",
    )
    .await;

    // alice opens a window on the Application and points it at the first commit: admitted,
    // with the warning to backport, and recorded.
    driftgate_cli(
        ALICE,
        &[
            "break-glass",
            "open",
            &format!("application/{ARGO_NAME}"),
            "-n",
            ARGOCD_NAMESPACE,
            "--for",
            "1h",
            "--reason",
            ARGO_REASON,
        ],
    )
    .ok();
    let delegated = || {
        shared().counter(
            "driftgate_admission_reviews_total",
            &[r#"rule="Delegation""#, r#"policy="gitops-argocd""#],
        )
    };
    let delegated_before = delegated();
    let admitted = patch_target_revision(ALICE, &first);
    assert!(admitted.success(), "{}", admitted.stderr);
    assert!(
        admitted
            .stderr
            .contains("backport it to Git before the window closes"),
        "{}",
        admitted.stderr
    );
    assert_eq!(target_revision(), first.as_str());
    let record = super::eventually("the record of alice's change", || async {
        records(ARGOCD_NAMESPACE).await.into_iter().find(|r| {
            r.spec.object.kind == "Application"
                && r.spec.object.name == ARGO_NAME
                && r.spec.changes.iter().any(|c| {
                    c.fields
                        .iter()
                        .any(|f| f.path == "spec.source.targetRevision")
                })
        })
    })
    .await;
    assert_eq!(
        (
            record.spec.window.opener.as_deref(),
            record.spec.window.reason.as_deref()
        ),
        (Some(ALICE.user), Some(ARGO_REASON)),
        "{record:?}"
    );

    // The real Argo CD syncs what the Application now says: its status and `operation`
    // writes go through the window, which holds only writes of what Git declares.
    let patched = Instant::now();
    wait_argo_state(
        ARGO_NAME,
        &format!("{first} Succeeded Synced {first}"),
        Duration::from_secs(60),
    )
    .await;
    eprintln!(
        "the real Argo CD synced the commit alice's window named in {:.1} s",
        patched.elapsed().as_secs_f64()
    );
    assert_eq!(settings(), "info");
    assert!(
        delegated() > delegated_before,
        "the application-controller's writes under the window were not admitted as the delegation"
    );

    let picked = [
        (
            "gitops-application-target-revision-by-bob.json".to_owned(),
            fixture_of(&captured_target_revision(&capture, BOB.user, &first)),
        ),
        (
            "gitops-application-target-revision-under-window.json".to_owned(),
            fixture_of(&captured_target_revision(&capture, ALICE.user, &first)),
        ),
    ];
    drop(capture);
    compare_or_write(&picked, "The API server", REFRESH);
}
