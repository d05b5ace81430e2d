//! Issue 15, section 1: `driftgate backport RECORD --repo DIR` writes alice's emergency change
//! into real Git repositories the tests make with the `git` CLI: a plain manifest, and a
//! Kustomize base with an overlay patch; and says why it writes nothing for a Helm-rendered
//! object or a checkout with uncommitted changes. The record is the real one the shared
//! driftgate wrote for alice's window on the real API server. The last test is the whole on-call
//! path with the real Flux: open, fix, backport, link, merge, Backported.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::harness::{
    ADMIN, ALICE, HPA, control_plane, driftgate_cli, install_crypto_provider, shared,
};

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

/// The ConfigMap `settings` in `ns` as Git declares it, with its Namespace.
fn settings_tree(ns: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: {ns}\ndata:\n  GREETING: hello # shown on the login page\n  LEVEL: info\n"
    )
}

/// alice's window on `target` in `ns`, and her merge patch of it; the record's name.
async fn patched_under_a_window(ns: &str, target: &str, patch: &str) -> String {
    show(driftgate_cli(
        ALICE,
        &[
            "break-glass",
            "open",
            target,
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
        &["patch", target, "-n", ns, "--type=merge", "-p", patch],
    )
    .ok();
    let records = records(ns).await;
    assert_eq!(records.len(), 1, "one record of alice's window");
    records[0].metadata.name.clone().unwrap()
}

/// Waits for the record of `ns` to be Backported: Git's version, applied by Flux, carries it.
async fn backported(ns: &str) {
    super::eventually("the record to be Backported", || async {
        records(ns).await.into_iter().find(|r| {
            r.status
                .as_ref()
                .is_some_and(|s| s.phase == driftgate::ledger::record::Phase::Backported)
        })
    })
    .await;
}

/// Issue 24, section 6. alice's fix holds U+2028, which ends a line for kubectl's
/// sigs.k8s.io/yaml and Flux's kyaml: `backport` writes it escaped on its one line, and both
/// read her value from the file, with no key of its own; the real Flux settles the record. A manifest that is
/// a link Git tracks, to a file outside the checkout, is neither read nor written.
#[tokio::test]
async fn a_value_holding_a_line_separator_is_written_escaped_and_a_link_out_of_the_checkout_is_not_followed()
 {
    install_crypto_provider();
    shared();
    let ns = "prod-backport-breaks";
    let tree = settings_tree(ns);
    flux().publish(ns, &tree);
    flux().kustomize(ns, "5s");
    super::eventually("Flux to apply the settings", || async {
        (get_json_or_null("configmap/settings", ns)["data"]["LEVEL"] == "info").then_some(())
    })
    .await;
    let greeting = "hello\u{2028}AUTH_DISABLED: \"true\"";
    let patch = serde_json::json!({"data": {"GREETING": greeting}}).to_string();
    let record = patched_under_a_window(ns, "configmap/settings", &patch).await;
    assert_eq!(
        get_json("configmap/settings", ns)["data"]["GREETING"],
        greeting
    );

    // A link to a file outside the checkout: not read, said so, and nothing changes.
    let outside = control_plane().dir().join("platform").join("settings.yaml");
    std::fs::create_dir_all(outside.parent().unwrap()).unwrap();
    std::fs::write(&outside, &tree).unwrap();
    let linked = repository("linked", &[("README.md", "# apps\n")]);
    std::fs::create_dir_all(linked.join("apps")).unwrap();
    std::os::unix::fs::symlink(&outside, linked.join("apps/settings.yaml")).unwrap();
    git(&linked, &["add", "apps/settings.yaml"]);
    git(
        &linked,
        &[
            "commit",
            "--quiet",
            "-m",
            "settings shared with the platform repo",
        ],
    );
    let refused = backport(&record, ns, &linked, &[]);
    assert_eq!(refused.code, Some(2), "{}", refused.stderr);
    assert!(
        refused.stdout.contains(&format!(
            "not read: apps/settings.yaml is a symbolic link (to {}): driftgate backport reads and writes only the checkout's own files; if it declares the object, edit the file it stands for by hand",
            outside.display()
        )),
        "{}",
        refused.stdout
    );
    assert!(
        refused.stderr.contains(&format!(
            "no manifest applied from the repository's root declares ConfigMap {ns}/settings"
        )),
        "{}",
        refused.stderr
    );
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), tree);
    assert_eq!(git(&linked, &["branch", "--show-current"]).trim(), "main");

    // The checkout's own file: one line, escaped.
    let repo = repository("breaks", &[("apps/settings.yaml", &tree)]);
    let done = backport(&record, ns, &repo, &[]).ok();
    let written = std::fs::read_to_string(repo.join("apps/settings.yaml")).unwrap();
    assert_eq!(
        written,
        tree.replace(
            "GREETING: hello #",
            "GREETING: \"hello\\u2028AUTH_DISABLED: \\\"true\\\"\" #"
        ),
        "{}",
        done.stdout
    );
    assert_eq!(
        git(&repo, &["diff", "--numstat", "main", "HEAD"]),
        "1\t1\tapps/settings.yaml\n"
    );
    let read: Vec<Value> = serde_saphyr::from_multiple(&written).unwrap();
    assert_eq!(
        read[1]["data"],
        serde_json::json!({"GREETING": greeting, "LEVEL": "info"})
    );

    // kubectl reads the file with sigs.k8s.io/yaml: alice's value, no key of its own.
    let settings = written.split("---\n").nth(1).unwrap();
    let decoded = control_plane()
        .kubectl_with_stdin(
            ALICE,
            &["create", "--dry-run=client", "-o", "json", "-f", "-"],
            Some(settings),
        )
        .ok();
    let decoded: Value = serde_json::from_str(&decoded.stdout).unwrap();
    assert_eq!(
        decoded["data"],
        serde_json::json!({"GREETING": greeting, "LEVEL": "info"})
    );
    assert_eq!(decoded.get("AUTH_DISABLED"), None, "{decoded}");

    // Merged, and applied by the real Flux (kustomize's kyaml reads the file): the record
    // settles, the value is alice's.
    let branch = format!("driftgate/backport-{record}");
    git(&repo, &["switch", "--quiet", "main"]);
    git(&repo, &["merge", "--quiet", "--ff-only", &branch]);
    flux().publish(ns, &written);
    driftgate_cli(
        ALICE,
        &["break-glass", "close", "configmap/settings", "-n", ns],
    )
    .ok();
    backported(ns).await;
    let live = get_json("configmap/settings", ns);
    assert_eq!(
        live["data"],
        serde_json::json!({"GREETING": greeting, "LEVEL": "info"}),
        "{live}"
    );
}

/// Issue 24, section 7: a custom resource's key holding brackets is recorded (its path used to
/// be written so that it did not parse back, and the field was dropped), backported, and the
/// record settles when Flux applies Git's version.
#[tokio::test]
async fn a_key_holding_brackets_is_recorded_backported_and_settles() {
    install_crypto_provider();
    shared();
    super::deep::install_crd();
    // driftgate reads Flux's write back to settle the record (rbac.readBack): Widgets are not
    // among the chart's default kinds, so this cluster grants them, as a user would.
    let grant = "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: driftgate-read-back-widgets\nrules:\n  - apiGroups: [e2e.example.com]\n    resources: [widgets]\n    verbs: [get]\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: driftgate-read-back-widgets\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: driftgate-read-back-widgets}\nsubjects:\n  - {kind: ServiceAccount, name: driftgate, namespace: driftgate}\n";
    control_plane()
        .kubectl_with_stdin(ADMIN, &["apply", "-f", "-"], Some(grant))
        .ok();
    let ns = "prod-backport-brackets";
    let tree = format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: widget-oncall\n  namespace: {ns}\nrules:\n  - apiGroups: [e2e.example.com]\n    resources: [widgets]\n    verbs: [get, list, patch, update]\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata:\n  name: widget-oncall\n  namespace: {ns}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: widget-oncall}}\nsubjects:\n  - {{apiGroup: rbac.authorization.k8s.io, kind: Group, name: sre-oncall}}\n---\napiVersion: e2e.example.com/v1\nkind: Widget\nmetadata:\n  name: api\n  namespace: {ns}\nspec:\n  routes:\n    \"match[0]\": v1 # the first route\n    plain: x\n"
    );
    show(flux_apply(&tree)).ok();
    let target = "widgets.e2e.example.com/api";
    let patch = r#"{"spec":{"routes":{"match[0]":"v2"}}}"#;
    let record = patched_under_a_window(ns, target, patch).await;
    let kept = records(ns).await;
    let paths: Vec<&str> = kept[0]
        .spec
        .changes
        .iter()
        .flat_map(|c| c.fields.iter().map(|f| f.path.as_str()))
        .collect();
    assert!(
        paths.contains(&"spec.routes[match[0]]]"),
        "the field is recorded: {paths:?}"
    );

    let repo = repository("brackets", &[("apps.yaml", &tree)]);
    let done = backport(&record, ns, &repo, &[]).ok();
    let written = std::fs::read_to_string(repo.join("apps.yaml")).unwrap();
    assert_eq!(
        written,
        tree.replace("\"match[0]\": v1 #", "\"match[0]\": v2 #"),
        "{}",
        done.stdout
    );
    driftgate_cli(ALICE, &["break-glass", "close", target, "-n", ns]).ok();
    show(flux_apply(&written)).ok();
    backported(ns).await;
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

/// Issue 26, section 7: the on-call path with the real Argo CD, `driftgate backport` finding the
/// manifest from the Application's own `spec.source.path`. Its Git is the harness's bare
/// repository, the checkout a clone of it, the pull request merged by a push to `main`. The
/// Application's self-heal is refused under the window until its retries run out
/// (`retry.limit: 1`); the fix merged, Git equals the object and Argo CD writes nothing: the
/// record settles on its status once the window is closed.
async fn argo_oncall(
    ns: &str,
    tree: &[(&str, String)],
) -> (String, crate::harness::KubectlOutput, PathBuf) {
    use super::real_argocd::{FIRST_SYNC, refused_in_status, wait_for_app};
    use crate::harness::argocd::{AppOptions, argocd};
    let files: Vec<(&str, &str)> = tree.iter().map(|(p, t)| (*p, t.as_str())).collect();
    argocd().publish_files(ns, &files);
    argocd().application_with(
        ns,
        ns,
        AppOptions {
            retry_limit: Some(1),
            ..AppOptions::DEFAULT
        },
    );
    wait_for_app(ns, "the first sync", FIRST_SYNC, |app| {
        (app["status"]["sync"]["status"] == "Synced"
            && app["status"]["operationState"]["phase"] == "Succeeded")
            .then_some(())
    })
    .await;
    let record = fix_under_a_window(ns).await;
    refused_in_status(ns, "ControllerHeld", Duration::from_secs(90)).await;
    // Until its retries run out, Argo CD may try the refused sync again at the revision it
    // started with: run after the merge and the close, it would revert the fix (the record then
    // ends Reverted, the old values win until the next sync). Seen in CI under load.
    wait_for_app(
        ns,
        "the refused self-heal to run out of retries",
        Duration::from_secs(90),
        |app| (app["status"]["operationState"]["phase"] == "Failed").then_some(()),
    )
    .await;
    let repo = argocd().checkout(ns, &control_plane().dir().join("git").join(ns));
    let written = backport(&record, ns, &repo, &[]).ok();
    (record, written, repo)
}

/// Merges the backport's branch, closes alice's window and waits for the record to be
/// Backported; the transition's reason.
async fn argo_merged_and_settled(ns: &str, repo: &Path) -> String {
    use crate::harness::argocd::argocd;
    argocd().merge(ns, repo);
    driftgate_cli(ALICE, &["break-glass", "close", "deployment/api", "-n", ns]).ok();
    let settled = super::eventually(
        "the record to be Backported by the real Argo CD",
        || async {
            records(ns).await.into_iter().find(|r| {
                r.status
                    .as_ref()
                    .is_some_and(|s| s.phase == driftgate::ledger::record::Phase::Backported)
            })
        },
    )
    .await;
    let last = settled.status.as_ref().unwrap().transitions.last().unwrap();
    eprintln!("{ns}: Backported by {} ({})", last.reason, last.message);
    // Backported, the object holds the fix as Git now declares it (the refused sync's retries
    // ran out before the merge: `argo_oncall`).
    super::eventually(
        "the object to hold the fix as Git now declares it",
        || async {
            let live = get_json("deployment/api", ns);
            (live["spec"]["replicas"] == 5
                && live["spec"]["template"]["spec"]["containers"][0]["image"] == HOTFIX)
                .then_some(())
        },
    )
    .await;
    last.reason.clone()
}

use std::time::Duration;

/// A directory source reads only its own files: a stale copy of the manifest in a subdirectory
/// is not what Argo CD applies, and is left alone.
#[tokio::test]
async fn an_argo_cd_directory_source_gets_the_backport_in_the_file_it_applies() {
    install_crypto_provider();
    shared();
    let ns = "argo-prod-backport-dir";
    let namespace = format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n");
    let stale = manifest(ns).replace("replicas: 2 #", "replicas: 3 #");
    let tree = [
        ("app/namespace.yaml", namespace),
        ("app/api.yaml", manifest(ns)),
        ("app/old/api.yaml", stale.clone()),
    ];
    let (_, written, repo) = argo_oncall(ns, &tree).await;
    assert!(
        written.stdout.contains(&format!(
            "Argo CD's Application argocd/{ns} applies app (a directory source, its own files only); looking there (--path to choose)."
        )) && written.stdout.contains("app/api.yaml:8: spec.replicas: 2 -> 5"),
        "{}",
        written.stdout
    );
    assert_eq!(
        std::fs::read_to_string(repo.join("app/api.yaml")).unwrap(),
        manifest(ns)
            .replace("replicas: 2 #", "replicas: 5 #")
            .replace(IMAGE, HOTFIX)
    );
    assert_eq!(
        std::fs::read_to_string(repo.join("app/old/api.yaml")).unwrap(),
        stale
    );
    assert_eq!(
        argo_merged_and_settled(ns, &repo).await,
        "ControllerFoundNothingToSync"
    );
}

/// A Kustomize source (a kustomization.yaml in the Application's path, built by the
/// repo-server): the overlay's patch gets the replicas, the base the image.
#[tokio::test]
async fn an_argo_cd_kustomize_source_gets_the_replicas_in_its_patch_and_the_image_in_its_base() {
    install_crypto_provider();
    shared();
    let ns = "argo-prod-backport-kustomize";
    let namespace = format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n");
    let patch = format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: api\n  namespace: {ns}\nspec:\n  replicas: 2 # production's count\n"
    );
    let tree = [
        (
            "app/kustomization.yaml",
            "resources:\n  - namespace.yaml\n  - base/api.yaml\npatches:\n  - path: replicas.yaml\n"
                .to_owned(),
        ),
        ("app/namespace.yaml", namespace),
        ("app/base/api.yaml", manifest(ns).replace("  replicas: 2 # raise with care: see RUNBOOK.md\n", "  replicas: 1\n")),
        ("app/replicas.yaml", patch.clone()),
    ];
    let (_, written, repo) = argo_oncall(ns, &tree).await;
    assert!(
        written.stdout.contains(&format!(
            "Argo CD's Application argocd/{ns} applies app (a Kustomize source); looking there"
        )),
        "{}",
        written.stdout
    );
    assert_eq!(
        std::fs::read_to_string(repo.join("app/replicas.yaml")).unwrap(),
        patch.replace("replicas: 2 #", "replicas: 5 #")
    );
    let base = std::fs::read_to_string(repo.join("app/base/api.yaml")).unwrap();
    assert!(
        base.contains(HOTFIX) && base.contains("  replicas: 1\n"),
        "{base}"
    );
    assert_eq!(
        argo_merged_and_settled(ns, &repo).await,
        "ControllerFoundNothingToSync"
    );
}

/// An object an Application renders from a Helm chart is out of scope: said in a sentence,
/// nothing written. (The Application names a chart repository; Argo CD's status is not needed,
/// only what the object's tracking annotation points to.)
#[tokio::test]
async fn an_object_argo_cd_renders_from_a_helm_chart_is_out_of_scope_and_says_so() {
    use crate::harness::argocd::{ARGOCD, apply_as_argocd};
    install_crypto_provider();
    shared();
    let ns = "argo-prod-backport-helm";
    // As Argo CD would have applied the chart's output: the Deployment tracked by Application
    // argo-prod-backport-helm, whose source is a chart (automated sync off: there is no such
    // chart repository here, and nothing is synced).
    apply_as_argocd(&format!(
        "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata:\n  name: {ns}\n  namespace: argocd\nspec:\n  project: default\n  source: {{repoURL: \"https://charts.example.test\", chart: api, targetRevision: 1.4.2}}\n  destination: {{server: \"https://kubernetes.default.svc\", namespace: {ns}}}\n"
    ));
    let tracked = namespace_with_api(ns).replace(
        "  name: api\n",
        &format!(
            "  name: api\n  annotations: {{argocd.argoproj.io/tracking-id: \"{ns}:apps/Deployment:{ns}/api\"}}\n"
        ),
    );
    control_plane()
        .kubectl_with_stdin(
            ARGOCD,
            &[
                "apply",
                "--server-side",
                "--field-manager=argocd-controller",
                "-f",
                "-",
            ],
            Some(&tracked),
        )
        .ok();
    let record = fix_under_a_window(ns).await;
    let repo = repository("argo-helm", &[("README.md", "# charts\n")]);
    let refused = backport(&record, ns, &repo, &[]);
    assert_eq!(refused.code, Some(2), "{}", refused.stderr);
    assert!(
        refused.stderr.contains(&format!(
            "Deployment {ns}/api is rendered by Argo CD's Application argocd/{ns} from a Helm chart repository: driftgate backport writes directory and Kustomize sources only"
        )),
        "{}",
        refused.stderr
    );
    assert_eq!(git(&repo, &["branch", "--show-current"]).trim(), "main");
    // The Application names a chart repository that is not there: gone, Argo CD stops trying.
    control_plane()
        .kubectl(ARGOCD, &["delete", "application", ns, "-n", "argocd"])
        .ok();
}
