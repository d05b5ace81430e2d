//! Issue 26, section 6: each of Argo CD's suspensions is governed and auto-resumed, with the
//! real application-controller. Four Applications, each suspended one way: `automated`
//! removed, `automated.enabled: false`, `automated.selfHeal: false`, and the
//! `argocd.argoproj.io/skip-reconcile` annotation (`driftgate suspend`).
//!
//! The Applications live in [`APPS_NAMESPACE`] (Argo CD's applications in any namespace), so
//! that a driftgate of this test's own judges and resumes them, as `auto_resume.rs` does for
//! Flux: it runs with `--resume-expired-suspensions` (and a 2 s expiry check) as driftgate's
//! service account with the chart's RBAC, under a copy of the example's `gitops-argocd` for that
//! namespace, registered with a namespaceSelector on it. The shared driftgate, which never
//! resumes, guards only `argocd`. The Applications are applied as an app-of-apps applies them by
//! default, client-side with field manager `argocd-controller`: what it applied (their
//! last-applied configuration, owned by that entry) is Git's `automated`, which driftgate puts
//! back when it resumes a removed one.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use driftgate::ledger::evidence::LAST_APPLIED_ANNOTATION;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};

use crate::harness::argocd::{
    APPS_NAMESPACE, ARGOCD, AppOptions, ArgoApply, apply_as_argocd_client_side, argocd,
};
use crate::harness::{
    ADMIN, ALICE, BOB, DRIFTGATE, Driftgate, control_plane, driftgate_cli, install_crypto_provider,
    shared, webhook_configuration,
};

use super::real_argocd::{app_summary, wait_for_app};
use super::suspensions::argo_revision;
use super::{get_json, kubectl, wait_for_event};

const REASON: &str = "INC-2606: Argo CD fights the hotfix, suspending for a few seconds";
/// A 20 s suspension is past its expiry, and resumed (expiry checks every 2 s), well within
/// this.
const RESUMED_WITHIN: Duration = Duration::from_secs(120);
const FIRST_SYNC: Duration = super::real_argocd::FIRST_SYNC;

/// The example's `gitops-argocd` for [`APPS_NAMESPACE`], named for this test.
fn policy_text() -> String {
    let example = std::fs::read_to_string(crate::harness::repo_path("policies/example.yaml"))
        .expect("the example policy reads");
    let gitops = example
        .split("\n---\n")
        .find(|d| d.contains("\n  name: gitops-argocd\n"))
        .expect("the example has gitops-argocd")
        .to_owned();
    gitops
        .replace("name: gitops-argocd", "name: resume-e2e-argocd")
        .replace(
            "include: [\"argocd\"]",
            &format!("include: [\"{APPS_NAMESPACE}\"]"),
        )
        .replace(
            "namespaces: [\"argocd\"]",
            &format!("namespaces: [\"{APPS_NAMESPACE}\"]"),
        )
}

/// How each Application is suspended.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Form {
    AutomatedRemoved,
    EnabledFalse,
    SelfHealFalse,
    SkipReconcile,
}

const APPS: [(&str, Form); 4] = [
    ("resume-argocd-automated", Form::AutomatedRemoved),
    ("resume-argocd-enabled", Form::EnabledFalse),
    ("resume-argocd-selfheal", Form::SelfHealFalse),
    ("resume-argocd-skip", Form::SkipReconcile),
];

/// The window's label and reason for an expiry `seconds` from now.
fn window_metadata(seconds: i64) -> Value {
    let expiry = driftgate::timefmt::format_expiry(
        jiff::Timestamp::now()
            .checked_add(jiff::SignedDuration::from_secs(seconds))
            .unwrap()
            .round(jiff::Unit::Second)
            .unwrap(),
    );
    json!({
        "labels": {"driftgate.dev/break-glass": expiry},
        "annotations": {"driftgate.dev/break-glass-reason": REASON},
    })
}

/// The merge patch that suspends Application `form`'s way, with a window `seconds` long (none
/// when None).
fn suspending(form: Form, seconds: Option<i64>) -> Value {
    let mut patch = match form {
        Form::AutomatedRemoved => json!({"spec": {"syncPolicy": {"automated": null}}}),
        Form::EnabledFalse => json!({"spec": {"syncPolicy": {"automated": {"enabled": false}}}}),
        Form::SelfHealFalse => {
            json!({"spec": {"syncPolicy": {"automated": {"selfHeal": false}}}})
        }
        Form::SkipReconcile => {
            json!({"metadata": {"annotations": {"argocd.argoproj.io/skip-reconcile": "true"}}})
        }
    };
    if let Some(seconds) = seconds {
        let window = window_metadata(seconds);
        let metadata = patch
            .as_object_mut()
            .unwrap()
            .entry("metadata")
            .or_insert_with(|| json!({}));
        for key in ["labels", "annotations"] {
            let into = metadata
                .as_object_mut()
                .unwrap()
                .entry(key)
                .or_insert_with(|| json!({}));
            into.as_object_mut()
                .unwrap()
                .extend(window[key].as_object().unwrap().clone());
        }
    }
    patch
}

fn patch_application(
    who: crate::harness::Identity,
    name: &str,
    patch: &Value,
) -> crate::harness::KubectlOutput {
    kubectl(
        who,
        &[
            "patch",
            "application",
            name,
            "-n",
            APPS_NAMESPACE,
            "--type=merge",
            "-p",
            &patch.to_string(),
        ],
    )
}

fn log_level(name: &str) -> Value {
    let out = control_plane().kubectl(
        ADMIN,
        &["get", "configmap/settings", "-n", name, "-o", "json"],
    );
    if !out.success() {
        return Value::Null;
    }
    serde_json::from_str::<Value>(&out.stdout).unwrap()["data"]["LOG_LEVEL"].clone()
}

fn resumes(driftgate: &Driftgate, result: &str) -> f64 {
    driftgate.counter(
        "driftgate_suspension_resumes_total",
        &[
            "policy=\"resume-e2e-argocd\"",
            &format!("result=\"{result}\""),
        ],
    )
}

#[tokio::test]
async fn each_argo_cd_suspension_is_governed_and_resumed_by_driftgate_and_the_real_controller_syncs_again()
 {
    install_crypto_provider();
    shared();
    let plane = control_plane();
    plane
        .apply(
            ADMIN,
            &format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {APPS_NAMESPACE}\n"),
        )
        .ok();
    let policy = plane.dir().join("policy-resume-e2e-argocd.yaml");
    std::fs::write(&policy, policy_text()).expect("the policy is written");
    let driftgate = Driftgate::start_as(
        "resume-argocd",
        &policy,
        DRIFTGATE,
        &[
            "--resume-expired-suspensions",
            "--expiry-check-interval",
            "2s",
        ],
    );
    let mut configuration = webhook_configuration(
        "driftgate-e2e-resume-argocd",
        &driftgate.webhook_url(),
        driftgate.ca_pem(),
    );
    configuration["webhooks"][0]["namespaceSelector"] =
        json!({"matchLabels": {"kubernetes.io/metadata.name": APPS_NAMESPACE}});
    driftgate.register_probing(configuration, APPS_NAMESPACE);

    let options = AppOptions {
        app_namespace: APPS_NAMESPACE,
        applied: ArgoApply::ClientSide,
        ..AppOptions::DEFAULT
    };
    let mut first = Vec::new();
    for (name, _) in APPS {
        first.push(argocd().publish(name, &argo_revision(name, "info")));
        argocd().application_with(name, name, options);
    }
    for ((name, _), revision) in APPS.iter().zip(&first) {
        wait_for_app(name, "the first sync", FIRST_SYNC, |app| {
            (app["status"]["sync"]["status"] == "Synced"
                && app["status"]["sync"]["revision"] == revision.as_str()
                && app["status"]["operationState"]["phase"] == "Succeeded")
                .then_some(())
        })
        .await;
        assert_eq!(log_level(name), "info");
    }

    // Governed: bob may not suspend any way; alice may, with an expiry, 20 s from now.
    for (name, form) in APPS {
        let refused = patch_application(BOB, name, &suspending(form, Some(3600))).failed();
        assert!(
            refused.stderr.contains(&format!(
                "bob may not suspend Application {APPS_NAMESPACE}/{name}: a suspension is a break-glass window, which only group sre-oncall may open"
            )) && refused.stderr.contains("rule SuspensionRefused"),
            "{form:?}: {}",
            refused.stderr
        );
        let without_expiry = patch_application(ALICE, name, &suspending(form, None)).failed();
        assert!(
            without_expiry.stderr.contains("it has no expiry"),
            "{form:?}: {}",
            without_expiry.stderr
        );
    }
    let suspended = Instant::now();
    for (name, form) in APPS {
        if form == Form::SkipReconcile {
            let out = driftgate_cli(
                ALICE,
                &[
                    "suspend",
                    &format!("application/{name}"),
                    "-n",
                    APPS_NAMESPACE,
                    "--for",
                    "20s",
                    "--reason",
                    REASON,
                ],
            )
            .ok();
            assert!(
                out.stdout
                    .contains(&format!("Application {APPS_NAMESPACE}/{name} suspended (")),
                "{}",
                out.stdout
            );
        } else {
            let out = patch_application(ALICE, name, &suspending(form, Some(20))).ok();
            assert!(
                out.stderr.contains(&format!(
                    "driftgate: Application {APPS_NAMESPACE}/{name} suspended ("
                )),
                "{form:?}: {}",
                out.stderr
            );
        }
        wait_for_event(
            APPS_NAMESPACE,
            "Suspended",
            "Application",
            name,
            "alice suspended the GitOps controller's reconciliation of Application",
        )
        .await;
    }

    // Suspended, the real controller leaves Git's new commit unsynced (or, self-heal off, a
    // manual change in place).
    let mut second = Vec::new();
    for (name, form) in APPS {
        if form == Form::SelfHealFalse {
            kubectl(
                ADMIN,
                &[
                    "patch",
                    "configmap",
                    "settings",
                    "-n",
                    name,
                    "--type=merge",
                    "-p",
                    r#"{"data":{"LOG_LEVEL":"manual"}}"#,
                ],
            )
            .ok();
            second.push(String::new());
        } else {
            second.push(argocd().publish(name, &argo_revision(name, "debug")));
        }
    }
    let expected_while_suspended = |form: Form| {
        if form == Form::SelfHealFalse {
            "manual"
        } else {
            "info"
        }
    };
    while suspended.elapsed() < Duration::from_secs(16) {
        for (name, form) in APPS {
            assert_eq!(
                log_level(name),
                expected_while_suspended(form),
                "{form:?}: Argo CD reconciled while suspended.\n{}",
                app_summary(name)
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // Past the expiry driftgate resumes each (one patch each, by its service account), and
    // the real controller syncs again.
    for (name, form) in APPS {
        let resumed = wait_for_app(name, "driftgate's resume", RESUMED_WITHIN, |app| {
            app["metadata"]["labels"]
                .get("driftgate.dev/break-glass")
                .is_none()
                .then(|| app.clone())
        })
        .await;
        let automated = &resumed["spec"]["syncPolicy"]["automated"];
        match form {
            Form::AutomatedRemoved => {
                assert_eq!(
                    automated,
                    &json!({"prune": true, "selfHeal": true}),
                    "{resumed}"
                )
            }
            Form::EnabledFalse => assert_eq!(automated["enabled"], true, "{resumed}"),
            Form::SelfHealFalse => assert_eq!(automated["selfHeal"], true, "{resumed}"),
            Form::SkipReconcile => assert!(
                resumed["metadata"]["annotations"]
                    .get("argocd.argoproj.io/skip-reconcile")
                    .is_none(),
                "{resumed}"
            ),
        }
        wait_for_event(
            APPS_NAMESPACE,
            "Resumed",
            "Application",
            name,
            &format!(
                "{} resumed the GitOps controller's reconciliation of Application {APPS_NAMESPACE}/{name} (suspended until ",
                DRIFTGATE.user
            ),
        )
        .await;
    }
    eprintln!(
        "driftgate resumed four 20 s suspensions {:.1} s after the first",
        suspended.elapsed().as_secs_f64()
    );
    assert_eq!(resumes(&driftgate, "success"), 4.0);
    assert_eq!(resumes(&driftgate, "not_undoable"), 0.0);
    let resumed = Instant::now();
    for ((name, form), revision) in APPS.iter().zip(&second) {
        let want = if *form == Form::SelfHealFalse {
            "info"
        } else {
            "debug"
        };
        let start = Instant::now();
        while log_level(name) != want {
            assert!(
                start.elapsed() < RESUMED_WITHIN,
                "{form:?}: Argo CD did not reconcile after the resume.\n{}",
                app_summary(name)
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        if !revision.is_empty() {
            wait_for_app(
                name,
                "Synced at the waiting commit",
                RESUMED_WITHIN,
                |app| (app["status"]["sync"]["revision"] == revision.as_str()).then_some(()),
            )
            .await;
        }
    }
    eprintln!(
        "once resumed, the real Argo CD reconciled all four in {:.1} s",
        resumed.elapsed().as_secs_f64()
    );
    stale_normalization_is_refused_and_gits_removal_is_not(APPS[0].0).await;
}

/// Argo CD normalizes an Application from its cache: from a copy older than driftgate's
/// resume (`syncPolicy: {}`), its merge patch `{"spec":{"syncPolicy":null}}`, sent without a
/// resourceVersion or a field manager, would remove the `automated` driftgate just restored
/// (seen once under load). Replayed as the application-controller sends it: refused, since the
/// configuration it applied from Git declares `automated`. Git's own removal, applied as an
/// app-of-apps applies it (client-side, the configuration with it), is admitted.
async fn stale_normalization_is_refused_and_gits_removal_is_not(name: &str) {
    let applications: Api<DynamicObject> = Api::namespaced_with(
        control_plane().client(ARGOCD).await,
        APPS_NAMESPACE,
        &ApiResource::from_gvk(&GroupVersionKind::gvk(
            "argoproj.io",
            "v1alpha1",
            "Application",
        )),
    );
    let stale = applications
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"syncPolicy": null}})),
        )
        .await;
    let refusal = match stale {
        Err(kube::Error::Api(refusal)) => refusal,
        Err(error) => panic!("the stale normalization failed: {error}"),
        Ok(app) => panic!(
            "the stale normalization was admitted; the spec: {:#}",
            app.data["spec"]
        ),
    };
    assert!(
        refusal.message.contains(&format!(
            "Controller argocd ({}) may not suspend Application {APPS_NAMESPACE}/{name}: its write suspends it by spec.syncPolicy.automated, which the configuration it last applied from Git",
            ARGOCD.user
        )) && refusal.message.contains("rule SuspensionAgainstGit"),
        "{}",
        refusal.message
    );
    let app = get_json(&format!("application/{name}"), APPS_NAMESPACE);
    assert_eq!(
        app["spec"]["syncPolicy"]["automated"],
        json!({"prune": true, "selfHeal": true}),
        "{app:#}"
    );

    let last_applied = app["metadata"]["annotations"][LAST_APPLIED_ANNOTATION]
        .as_str()
        .expect("applied client-side");
    let mut git: Value = serde_json::from_str(last_applied).unwrap();
    git["spec"]["syncPolicy"]
        .as_object_mut()
        .unwrap()
        .remove("automated");
    apply_as_argocd_client_side(&git.to_string());
    let app = get_json(&format!("application/{name}"), APPS_NAMESPACE);
    assert!(
        app["spec"]["syncPolicy"].get("automated").is_none(),
        "{app:#}"
    );
}
