//! Issue 15, section 1: `driftgate backport RECORD --repo DIR` writes alice's emergency change
//! into real Git repositories the tests make with the `git` CLI: a plain manifest, and a
//! Kustomize base with an overlay patch; and says why it writes nothing for a Helm-rendered
//! object or a checkout with uncommitted changes. The record is the real one the shared
//! driftgate wrote for alice's window on the real API server. The last test is the whole on-call
//! path with the real Flux: open, fix, backport, link, merge, Backported.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::harness::{ALICE, HPA, control_plane, driftgate_cli, install_crypto_provider, shared};

use crate::harness::flux::flux;

use super::{
    IMAGE, api_deployment, flux_apply, get_json, kubectl, namespace_with_api, records, show,
};

const REASON: &str = "INC-1501: checkout latency, scaling out and rolling the fixed image";
const HOTFIX: &str = "registry.example/payments-api:1.4.3";

/// Runs git in `dir`, as a test author would (with an identity of its own).
fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args([
            "-c",
            "user.name=GitOps Test",
            "-c",
            "user.email=gitops@example.test",
        ])
        .args(args)
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A Git repository holding `files`, committed on `main`.
fn repository(name: &str, files: &[(&str, &str)]) -> PathBuf {
    let dir = control_plane().dir().join("git").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    git(&dir, &["init", "--quiet", "--initial-branch=main"]);
    // driftgate commits with the user's own Git identity.
    git(&dir, &["config", "user.name", "Alice Oncall"]);
    git(&dir, &["config", "user.email", "alice@example.test"]);
    for (path, text) in files {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    git(&dir, &["add", "."]);
    git(&dir, &["commit", "--quiet", "-m", "apps as deployed"]);
    dir
}

/// Git's manifest of `api` in `ns`, with comments to keep.
fn manifest(ns: &str) -> String {
    format!(
        "# The payments API. Owners: #payments\n{}",
        api_deployment(ns, 2).trim_start()
    )
    .replace(
        "  replicas: 2\n",
        "  replicas: 2 # raise with care: see RUNBOOK.md\n",
    )
}

/// `api` in `ns` as Flux applies it, then alice's window, scale and hotfix; the record's name.
async fn emergency_change(ns: &str) -> String {
    show(flux_apply(&namespace_with_api(ns))).ok();
    fix_under_a_window(ns).await
}

/// alice's window on `api` in `ns`, her scale to 5 and hotfix image; the record's name.
async fn fix_under_a_window(ns: &str) -> String {
    show(driftgate_cli(
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
            REASON,
        ],
    ))
    .ok();
    kubectl(
        ALICE,
        &["scale", "deployment/api", "-n", ns, "--replicas=5"],
    )
    .ok();
    kubectl(
        ALICE,
        &[
            "set",
            "image",
            "deployment/api",
            "-n",
            ns,
            &format!("api={HOTFIX}"),
        ],
    )
    .ok();
    let records = records(ns).await;
    assert_eq!(records.len(), 1, "one record of alice's window");
    records[0].metadata.name.clone().unwrap()
}

fn backport(record: &str, ns: &str, repo: &Path, extra: &[&str]) -> crate::harness::KubectlOutput {
    let mut args = vec![
        "backport",
        record,
        "-n",
        ns,
        "--repo",
        repo.to_str().unwrap(),
    ];
    args.extend(extra);
    show(driftgate_cli(ALICE, &args))
}

#[tokio::test]
async fn the_emergency_change_is_written_into_a_plain_manifest_on_a_branch_naming_the_record() {
    install_crypto_provider();
    shared();
    let ns = "prod-backport-plain";
    let record = emergency_change(ns).await;
    let original = manifest(ns);
    let other = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: api-settings\ndata: {LOG_LEVEL: info}\n";
    let repo = repository(
        "plain",
        &[
            ("apps/payments/api.yaml", &format!("{other}---\n{original}")),
            ("README.md", "# apps\n"),
        ],
    );

    // A dry run says what it would write and changes nothing.
    let dry = backport(&record, ns, &repo, &["--dry-run"]).ok();
    assert!(
        dry.stdout
            .contains("apps/payments/api.yaml:14: spec.replicas: 2 -> 5"),
        "{}",
        dry.stdout
    );
    assert_eq!(git(&repo, &["status", "--porcelain"]), "");
    assert_eq!(git(&repo, &["branch", "--show-current"]).trim(), "main");

    let done = backport(&record, ns, &repo, &[]).ok();
    let branch = format!("driftgate/backport-{record}");
    assert_eq!(git(&repo, &["branch", "--show-current"]).trim(), branch);
    let written = std::fs::read_to_string(repo.join("apps/payments/api.yaml")).unwrap();
    let expected = format!("{other}---\n{original}")
        .replace("replicas: 2 # raise", "replicas: 5 # raise")
        .replace(IMAGE, HOTFIX);
    assert_eq!(written, expected, "only the two values changed");
    let message = git(&repo, &["log", "-1", "--format=%B"]);
    for words in [
        format!("Backport {REASON} ({ns}/{record})"),
        format!(
            "The emergency change {} made to Deployment {ns}/api",
            ALICE.user
        ),
        "- spec.replicas: 5 (apps/payments/api.yaml)".to_owned(),
        format!("- spec.template.spec.containers[0].image: \"{HOTFIX}\" (apps/payments/api.yaml)"),
        format!("Driftgate-Record: {ns}/{record}"),
    ] {
        assert!(message.contains(&words), "{words}\n---\n{message}");
    }
    assert_eq!(
        git(&repo, &["log", "-1", "--format=%an"]).trim(),
        "Alice Oncall"
    );
    assert!(
        done.stdout.contains(&format!(
            "git -C {} push -u origin {branch}",
            repo.display()
        )),
        "{}",
        done.stdout
    );
    assert!(
        done.stdout.contains("+  replicas: 5 # raise with care"),
        "the diff is printed: {}",
        done.stdout
    );

    // A checkout with uncommitted changes is left alone, with the reason.
    std::fs::write(repo.join("README.md"), "# apps, edited\n").unwrap();
    let dirty = backport(&record, ns, &repo, &["--branch", "again"]);
    assert_eq!(dirty.code, Some(2), "{}", dirty.stderr);
    assert!(
        dirty
            .stderr
            .contains("has uncommitted changes (README.md); commit or stash them first"),
        "{}",
        dirty.stderr
    );
}

#[tokio::test]
async fn an_overlay_patch_gets_the_replicas_and_the_base_the_image() {
    install_crypto_provider();
    shared();
    let ns = "prod-backport-overlay";
    let record = emergency_change(ns).await;
    let base = api_deployment(ns, 2).replace(&format!("  namespace: {ns}\n"), "");
    let patch = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: api\nspec:\n  replicas: 3 # production runs three\n";
    let repo = repository(
        "overlay",
        &[
            (
                "base/kustomization.yaml",
                "resources:\n  - deployment.yaml\n",
            ),
            ("base/deployment.yaml", base.trim_start()),
            (
                "overlays/production/kustomization.yaml",
                &format!(
                    "namespace: {ns}\nresources:\n  - ../../base\npatches:\n  - path: replicas.yaml\n"
                ),
            ),
            ("overlays/production/replicas.yaml", patch),
            (
                "overlays/staging/kustomization.yaml",
                "namespace: staging\nresources:\n  - ../../base\npatches:\n  - path: replicas.yaml\n",
            ),
            ("overlays/staging/replicas.yaml", patch),
        ],
    );

    // From the root, the replicas are set in several places: nothing is written for them.
    let ambiguous = backport(&record, ns, &repo, &["--dry-run"]);
    assert!(
        ambiguous.stdout.contains("not written: spec.replicas: it is set in several places (base/deployment.yaml, overlays/production/replicas.yaml, overlays/staging/replicas.yaml): pass --path"),
        "{}",
        ambiguous.stdout
    );

    backport(
        &record,
        ns,
        &repo,
        &[
            "--path",
            "overlays/production",
            "--branch",
            "backport/inc-1501",
        ],
    )
    .ok();
    // --branch names the branch the commit is on.
    assert_eq!(
        git(&repo, &["branch", "--show-current"]).trim(),
        "backport/inc-1501"
    );
    let patched = std::fs::read_to_string(repo.join("overlays/production/replicas.yaml")).unwrap();
    assert_eq!(patched, patch.replace("replicas: 3 #", "replicas: 5 #"));
    let staging = std::fs::read_to_string(repo.join("overlays/staging/replicas.yaml")).unwrap();
    assert_eq!(staging, patch, "the other overlay is untouched");
    let base_written = std::fs::read_to_string(repo.join("base/deployment.yaml")).unwrap();
    assert_eq!(base_written, base.trim_start().replace(IMAGE, HOTFIX));
    let changed = git(&repo, &["show", "--name-only", "--format=", "HEAD"]);
    assert_eq!(
        changed.trim(),
        "base/deployment.yaml\noverlays/production/replicas.yaml"
    );
}

#[tokio::test]
async fn a_helm_rendered_object_is_out_of_scope_and_says_so() {
    install_crypto_provider();
    shared();
    let ns = "prod-backport-helm";
    let record = emergency_change(ns).await;
    // What helm install leaves on what it renders (alice's window admits it).
    kubectl(
        ALICE,
        &[
            "label",
            "deployment/api",
            "-n",
            ns,
            "app.kubernetes.io/managed-by=Helm",
        ],
    )
    .ok();
    kubectl(
        ALICE,
        &[
            "annotate",
            "deployment/api",
            "-n",
            ns,
            "meta.helm.sh/release-name=payments",
        ],
    )
    .ok();
    let live: Value = get_json("deployment/api", ns);
    assert_eq!(
        live["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "Helm"
    );
    let repo = repository(
        "helm",
        &[("charts/payments/values.yaml", "replicaCount: 2\n")],
    );
    let out = backport(&record, ns, &repo, &[]);
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(
        out.stderr.contains(&format!("Deployment {ns}/api is rendered by Helm (Helm release payments): its values live in a chart's values, which driftgate backport does not write")),
        "{}",
        out.stderr
    );
    assert_eq!(git(&repo, &["branch", "--show-current"]).trim(), "main");
}

#[tokio::test]
async fn a_field_the_hpa_took_over_after_the_fix_is_named_and_not_written() {
    install_crypto_provider();
    shared();
    let ns = "prod-backport-hpa";
    let record = emergency_change(ns).await;
    // Seconds later the HPA (a delegation of the policy) scales it: Git no longer decides it.
    tokio::time::sleep(std::time::Duration::from_secs(6)).await;
    kubectl(
        HPA,
        &[
            "patch",
            "deployment/api",
            "-n",
            ns,
            "--subresource=scale",
            "--type=merge",
            "-p",
            r#"{"spec":{"replicas":7}}"#,
            "--field-manager=horizontal-pod-autoscaler",
        ],
    )
    .ok();
    let repo = repository("hpa", &[("api.yaml", &manifest(ns))]);
    let out = backport(&record, ns, &repo, &["--dry-run"]).ok();
    assert!(
        out.stdout.contains("not written: spec.replicas: field manager horizontal-pod-autoscaler took it over after the window's change, and is not the GitOps controller (kustomize-controller)"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains("api.yaml:17: spec.template.spec.containers[0].image: "),
        "{}",
        out.stdout
    );
}

/// The on-call path of issue 15 with the real Flux: open, fix, `backport`, `backlog link`, the
/// pull request merged (its tree is the revision Flux applies), the window closed, and the
/// record Backported by the real kustomize-controller.
#[tokio::test]
async fn open_fix_backport_link_merge_and_the_real_flux_settles_it() {
    install_crypto_provider();
    shared();
    let ns = "prod-flux-oncall";
    let git_tree = format!(
        "# Payments, as Flux applies it.\n{}",
        namespace_with_api(ns).replace(
            "  replicas: 2\n",
            "  replicas: 2 # see RUNBOOK.md before changing\n"
        )
    );
    let repo = repository("oncall", &[("apps.yaml", &git_tree)]);
    flux().publish(ns, &git_tree);
    flux().kustomize(ns, "5s");
    super::eventually("Flux to apply the first revision", || async {
        (get_json_or_null("deployment/api", ns)["spec"]["replicas"] == 2).then_some(())
    })
    .await;

    // 03:00: the window, the fix.
    let record = fix_under_a_window(ns).await;

    // 09:00: the backport, from the Kustomization's own path, and its pull request linked.
    let written = backport(&record, ns, &repo, &[]).ok();
    assert!(
        written.stdout.contains(&format!(
            "Flux's Kustomization flux-system/{ns} applies the repository's root"
        )),
        "{}",
        written.stdout
    );
    let url = "https://git.example/payments-gitops/pull/1501";
    let linked = show(driftgate_cli(
        ALICE,
        &["backlog", "link", &record, "-n", ns, "--url", url],
    ))
    .ok();
    assert!(
        linked.stdout.contains(&format!("is backported by {url}")),
        "{}",
        linked.stdout
    );
    let backlog = show(driftgate_cli(ALICE, &["backlog", "-n", ns, "-o", "json"])).ok();
    let listed: Value = serde_json::from_str(&backlog.stdout).unwrap();
    assert_eq!(listed["items"][0]["pullRequest"], url, "{listed}");
    let refused = show(driftgate_cli(
        ALICE,
        &["backlog", "link", &record, "-n", ns, "--url", "pull/1501"],
    ));
    assert_eq!(refused.code, Some(2));
    assert!(
        refused
            .stderr
            .contains("is not a pull request's address: it must start with https://"),
        "{}",
        refused.stderr
    );

    // The pull request is merged: main is the branch, and Flux applies main.
    let branch = format!("driftgate/backport-{record}");
    git(&repo, &["switch", "--quiet", "main"]);
    git(&repo, &["merge", "--quiet", "--ff-only", &branch]);
    let merged = std::fs::read_to_string(repo.join("apps.yaml")).unwrap();
    assert_eq!(
        merged,
        git_tree
            .replace("replicas: 2 #", "replicas: 5 #")
            .replace(IMAGE, HOTFIX)
    );
    flux().publish(ns, &merged);
    driftgate_cli(ALICE, &["break-glass", "close", "deployment/api", "-n", ns]).ok();
    let settled = super::eventually("the record to be Backported by the real Flux", || async {
        records(ns).await.into_iter().find(|r| {
            r.status
                .as_ref()
                .is_some_and(|s| s.phase == driftgate::ledger::record::Phase::Backported)
        })
    })
    .await;
    let last = settled.status.as_ref().unwrap().transitions.last().unwrap();
    eprintln!("{ns}: Backported by {} ({})", last.reason, last.message);
    let live = get_json("deployment/api", ns);
    assert_eq!(live["spec"]["replicas"], 5);
    assert_eq!(
        live["spec"]["template"]["spec"]["containers"][0]["image"],
        HOTFIX
    );
    let after = show(driftgate_cli(ALICE, &["backlog", "-n", ns, "-o", "json"])).ok();
    let listed: Value = serde_json::from_str(&after.stdout).unwrap();
    assert_eq!(
        listed["items"],
        serde_json::json!([]),
        "nothing left to backport: {listed}"
    );
}

/// The object as JSON, or null while it does not exist yet.
fn get_json_or_null(target: &str, namespace: &str) -> Value {
    let out = control_plane().kubectl(
        crate::harness::ADMIN,
        &["get", target, "-n", namespace, "-o", "json"],
    );
    if out.success() {
        serde_json::from_str(&out.stdout).unwrap_or(Value::Null)
    } else {
        Value::Null
    }
}
