//! Every `driftgate` command the READMEs show in a shell block, run as the real binary, so the
//! docs fail here when the command line drifts from them. Commands that need no cluster (eval,
//! policy, certs, crd, completion, man, version --client) must succeed; a cluster command must get
//! past its own checks (flags, KIND/NAME, --for, --reason) to the point where it reads the
//! kubeconfig, which here names no file: that refusal, and nothing before it, is expected. The
//! inline examples of the offline tools (`driftgate policy check - < policies/example.yaml`) are
//! run too. `serve --dev` runs a server: tests/serve.rs runs the README's block against it.

use std::path::Path;

#[path = "common/docs_commands.rs"]
mod docs_commands;

use docs_commands::{DOCS, OFFLINE, regex_lite_redirect, run, scratch, shown_commands};

/// A cluster command whose documented run needs a file an earlier step of the same page makes,
/// and which it reads before the kubeconfig: the refusal names that file instead.
const NEEDS_AN_EARLIER_STEP: &[(&str, &str)] = &[(
    "driftgate scan --policy scan-policy.yaml",
    "--policy scan-policy.yaml",
)];

/// The kubeconfig the commands are given: no file, so a cluster command stops there.
const NO_KUBECONFIG: &str = "/nonexistent/kubeconfig";

#[test]
fn every_command_the_readmes_show_runs_as_shown() {
    let mut failures = Vec::new();
    let mut ran = (0, 0);
    for doc in DOCS {
        for (n, shown) in shown_commands(doc).into_iter().enumerate() {
            let words: Vec<&str> = shown.command.split_whitespace().collect();
            let subcommand = words.get(1).copied().unwrap_or_default();
            if subcommand == "serve" {
                continue;
            }
            let dir = scratch(&format!("{}-{n}", doc.replace('/', "-")));
            let offline = OFFLINE.contains(&subcommand)
                || (subcommand == "version" && words.contains(&"--client"));
            let out = run(&shown.command, &dir, Path::new(NO_KUBECONFIG));
            let stderr = String::from_utf8_lossy(&out.stderr);
            let code = out.status.code();
            if offline {
                ran.0 += 1;
                if code != Some(0) {
                    failures.push(format!(
                        "{}: `{}` exited {code:?}: {stderr}",
                        shown.at, shown.command
                    ));
                }
                continue;
            }
            ran.1 += 1;
            let expected = NEEDS_AN_EARLIER_STEP
                .iter()
                .find(|(prefix, _)| shown.command.starts_with(prefix))
                .map_or("--kubeconfig /nonexistent/kubeconfig", |(_, names)| names);
            // The kubeconfig from $KUBECONFIG is named in the refusal as `$KUBECONFIG`'s file.
            let reached = stderr.contains(expected) || stderr.contains("/nonexistent/kubeconfig");
            if code != Some(2) || !reached {
                failures.push(format!(
                    "{}: `{}` did not get to reading the kubeconfig (exit {code:?}): {stderr}",
                    shown.at, shown.command
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // The extraction itself can drift: the READMEs show offline and cluster commands.
    assert!(ran.0 >= 5 && ran.1 >= 10, "ran {ran:?}");
}

#[test]
fn a_drifted_command_is_caught() {
    // The form the README showed before namespace/NAME: refused before the kubeconfig is read.
    let dir = scratch("drifted");
    let out = run(
        "driftgate break-glass open --namespace prod-payments --for 1h --reason \"INC-124: x\"",
        &dir,
        Path::new(NO_KUBECONFIG),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(!stderr.contains("/nonexistent/kubeconfig"), "{stderr}");
    assert_eq!(
        regex_lite_redirect("driftgate completion bash > /etc/x   # bash"),
        "driftgate completion bash > redirected-1   # bash"
    );
}
