//! Every cluster command the READMEs show (`tests/docs.rs` runs the offline ones, and the cluster
//! ones only up to reading the kubeconfig), run as shown against the real API server and the
//! shared driftgate, as alice of `sre-oncall` with her own kubeconfig: each must do what the
//! README says it does (exit 0; `scan` exits 1 on drift, as its block shows). A command the
//! READMEs change is run here as changed, so the docs fail when they drift from the binary or
//! from the cluster's answers (a refusal, an object the command cannot find, a flag the binary
//! lost).
//!
//! What the commands name is made first: the namespace, Deployment `api` as Flux applies it, the
//! Kustomization `apps`, Git checkouts at `~/src/gitops` and `~/src/payments-gitops` (`HOME` is a
//! scratch directory), and, after the first `break-glass open`, alice's fix under the window, so
//! that the record the ledger commands name exists. Names the READMEs make up are this test's
//! own: see [`OURS`].

use std::path::Path;
use std::process::Command;

#[path = "../common/docs_commands.rs"]
mod docs_commands;

use docs_commands::{DOCS, OFFLINE, Shown, run, scratch, shown_commands};

use crate::harness::flux::{apply_as_flux, flux};
use crate::harness::{ALICE, control_plane, install_crypto_provider, shared};
use crate::scenarios::{api_deployment, flux_apply, kubectl, namespace_with_api, records};

/// The READMEs' `prod-payments`, a namespace of this test's own that the example policy guards
/// (`prod-*`): the control plane is shared, and `wiring.rs` works in `prod-payments`.
const NS: &str = "prod-docs";

/// The README's `scan` namespace, this test's own (`scenarios/scan.rs` works in `scan-drift`).
const SCAN_NS: &str = "scan-docs";

/// The words the READMEs use for what this test makes under other names: the namespaces above,
/// and the records they name (a record's name ends in a hash of its window), which are the
/// record of alice's fix.
const OURS: &[(&str, &str)] = &[("prod-payments", NS), ("scan-drift", SCAN_NS)];
const RECORD_NAMES: &[&str] = &["deployment-api-1a2b3c4d5e", "deployment-api-0701d383c7"];

/// What a command is expected to exit with, when not 0: `scan` finds the drift this test makes
/// (the README shows `echo $?` printing 1).
const EXIT_CODES: &[(&str, i32)] = &[("driftgate scan ", 1)];

/// Commands run after the others of their page: resolving the record settles it, and the
/// commands shown after it in the same block (`backport`, `backlog link`) read it open.
const LAST: &[&str] = &["driftgate backlog resolve "];

/// The documented cluster commands, in the order of their pages (the [`LAST`] ones at the end).
fn cluster_commands() -> Vec<Shown> {
    let mut commands: Vec<Shown> = DOCS
        .iter()
        .flat_map(|doc| shown_commands(doc))
        .filter(|shown| {
            let words: Vec<&str> = shown.command.split_whitespace().collect();
            let subcommand = words.get(1).copied().unwrap_or_default();
            !OFFLINE.contains(&subcommand)
                && subcommand != "serve"
                && !(subcommand == "version" && words.contains(&"--client"))
        })
        .collect();
    commands.sort_by_key(|shown| LAST.iter().any(|last| shown.command.starts_with(last)));
    commands
}

/// `command` with the READMEs' names replaced by this test's.
fn ours(command: &str, record: &str) -> String {
    let mut command = command.to_owned();
    for (theirs, ours) in OURS {
        command = command.replace(theirs, ours);
    }
    for name in RECORD_NAMES {
        command = command.replace(name, record);
    }
    command
}

/// A Git checkout at `dir` declaring `api` as Flux applies it (the manifest `backport` edits).
fn checkout(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .arg("-C")
            .arg(dir)
            .args([
                "-c",
                "user.name=Alice Oncall",
                "-c",
                "user.email=alice@example.test",
            ])
            .args(args)
            .output()
            .expect("git runs");
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    git(&["init", "--quiet", "--initial-branch=main"]);
    git(&["config", "user.name", "Alice Oncall"]);
    git(&["config", "user.email", "alice@example.test"]);
    std::fs::write(dir.join("api.yaml"), api_deployment(NS, 2).trim_start()).unwrap();
    git(&["add", "."]);
    git(&["commit", "--quiet", "-m", "api as deployed"]);
}

/// alice's kubeconfig with the context's namespace set to [`NS`] (`break-glass list` without
/// `-n` lists the context's namespace).
fn kubeconfig_in(dir: &Path) -> std::path::PathBuf {
    let text = std::fs::read_to_string(control_plane().kubeconfig(ALICE)).unwrap();
    let with_namespace = text.replace(
        "context: {cluster: e2e, user:",
        &format!("context: {{namespace: {NS}, cluster: e2e, user:"),
    );
    assert_ne!(
        text, with_namespace,
        "the kubeconfig's context is as written by the harness"
    );
    let path = dir.join("kubeconfig");
    std::fs::write(&path, with_namespace).unwrap();
    path
}

#[tokio::test]
async fn every_cluster_command_the_readmes_show_runs_against_the_real_api_server() {
    install_crypto_provider();
    shared();
    // The Flux CRDs (the Kustomization the suspension commands name) come with the real Flux.
    flux();

    let home = scratch("e2e-cluster");
    let kubeconfig = kubeconfig_in(&home);
    checkout(&home.join("src/gitops"));
    checkout(&home.join("src/payments-gitops"));
    // The README's `scan` output is `scenarios/scan.rs`'s, with its policy (guarding `scan-*`).
    std::fs::write(
        home.join("scan-policy.yaml"),
        crate::scenarios::scan::POLICY,
    )
    .unwrap();

    flux_apply(&namespace_with_api(NS)).ok();
    // The scanned namespace: a ConfigMap someone created by hand is drift.
    flux_apply(&format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {SCAN_NS}\n"
    ))
    .ok();
    kubectl(
        crate::harness::ADMIN,
        &[
            "create",
            "configmap",
            "manual",
            "-n",
            SCAN_NS,
            "--from-literal=token=x",
        ],
    )
    .ok();
    apply_as_flux(
        r#"apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata:
  name: apps
  namespace: flux-system
spec:
  interval: 10m
  prune: true
  path: ./clusters/prod
  sourceRef:
    kind: GitRepository
    name: flux-system
"#,
    );

    let commands = cluster_commands();
    // The extraction itself can drift: these are the commands the READMEs show today.
    assert!(commands.len() >= 15, "{commands:#?}");
    let mut record = String::from("(no record yet)");
    let mut failures = Vec::new();
    for shown in &commands {
        let command = ours(&shown.command, &record);
        let out = run(&command, &home, &kubeconfig);
        let expected = EXIT_CODES
            .iter()
            .find(|(prefix, _)| command.starts_with(prefix))
            .map_or(0, |(_, code)| *code);
        eprintln!(
            "{}: $ {command}  # exit {:?}\n{}{}",
            shown.at,
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if out.status.code() != Some(expected) {
            failures.push(format!(
                "{}: `{command}` exited {:?}, not {expected}: {}",
                shown.at,
                out.status.code(),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        // The 3am fix the README's window is for; its record is the one the ledger commands name.
        if command.starts_with("driftgate break-glass open deployment/api")
            && !command.contains("--dry-run")
        {
            kubectl(
                ALICE,
                &["scale", "deployment/api", "-n", NS, "--replicas=5"],
            )
            .ok();
            let records = records(NS).await;
            assert_eq!(
                records.len(),
                1,
                "one record of alice's fix under her window"
            );
            record = records[0].metadata.name.clone().unwrap();
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
