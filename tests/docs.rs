//! Every `driftgate` command the READMEs show in a shell block, run as the real binary, so the
//! docs fail here when the command line drifts from them. Commands that need no cluster (eval,
//! policy, certs, crd, completion, man, version --client) must succeed; a cluster command must get
//! past its own checks (flags, KIND/NAME, --for, --reason) to the point where it reads the
//! kubeconfig, which here names no file: that refusal, and nothing before it, is expected. The
//! inline examples of the offline tools (`driftgate policy check - < policies/example.yaml`) are
//! run too. `serve --dev` runs a server: tests/serve.rs runs the README's block against it.

use std::path::{Path, PathBuf};
use std::process::Command;

const DOCS: &[&str] = &[
    "README.md",
    "docs/quickstart-kind.md",
    "charts/driftgate/README.md",
];

/// The commands that use no cluster (the first word after `driftgate`).
const OFFLINE: &[&str] = &["eval", "policy", "certs", "crd", "completion", "man"];

/// A cluster command whose documented run needs a file an earlier step of the same page makes,
/// and which it reads before the kubeconfig: the refusal names that file instead.
const NEEDS_AN_EARLIER_STEP: &[(&str, &str)] = &[(
    "driftgate scan --policy scan-policy.yaml",
    "--policy scan-policy.yaml",
)];

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// One documented command: where it is shown, and its text (continuations joined).
#[derive(Debug)]
struct Shown {
    at: String,
    command: String,
}

/// The `driftgate …` lines of the shell blocks, and the inline examples of the offline tools
/// that name files of the checkout (an inline span cut by a line break is not seen).
fn shown_commands(doc: &str) -> Vec<Shown> {
    let text = std::fs::read_to_string(repo().join(doc)).unwrap();
    let mut shown = Vec::new();
    let mut in_shell = false;
    let mut pending: Option<(usize, String)> = None;
    for (index, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        if let Some(fence) = trimmed.strip_prefix("```") {
            in_shell = !in_shell && matches!(fence, "sh" | "bash" | "console" | "shell");
            continue;
        }
        if in_shell {
            if let Some((start, mut command)) = pending.take() {
                command.push(' ');
                command.push_str(trimmed.trim_end_matches('\\'));
                if trimmed.ends_with('\\') {
                    pending = Some((start, command));
                } else {
                    shown.push(Shown {
                        at: format!("{doc}:{}", start + 1),
                        command,
                    });
                }
                continue;
            }
            let line = trimmed.strip_prefix("$ ").unwrap_or(trimmed);
            let line = line.replace("cargo run -- ", "driftgate ");
            let Some(rest) = line.strip_prefix("driftgate ") else {
                continue;
            };
            // Output shown in the block (a table row starting with driftgate's name) is no command.
            if !rest.starts_with(|c: char| c.is_ascii_lowercase() || c == '-') {
                continue;
            }
            if line.ends_with('\\') {
                pending = Some((index, line.trim_end_matches('\\').to_owned()));
            } else {
                shown.push(Shown {
                    at: format!("{doc}:{}", index + 1),
                    command: line,
                });
            }
        } else {
            for span in line.split('`').skip(1).step_by(2) {
                let Some(rest) = span.strip_prefix("driftgate ") else {
                    continue;
                };
                let offline = OFFLINE.iter().any(|c| rest.split(' ').next() == Some(c));
                // A synopsis (PATH, DIR, [--now RFC3339]) is no command to run.
                let concrete = !span.contains(['[', '…'])
                    && !span.contains("...")
                    && !span.split(' ').any(|w| {
                        w.len() > 1 && w.chars().all(|c| c.is_ascii_uppercase() || c == '.')
                    });
                // A name in passing (`driftgate eval`, `policy check my-policy.yaml`, the reader's
                // own file) is no example: an example names files of the checkout (whether they
                // still exist is what running it checks).
                let names_checkout_file = span.split([' ', '<']).any(|w| {
                    ["policies/", "tests/", "charts/"]
                        .iter()
                        .any(|dir| w.starts_with(dir))
                });
                if offline && concrete && names_checkout_file {
                    shown.push(Shown {
                        at: format!("{doc}:{}", index + 1),
                        command: span.to_owned(),
                    });
                }
            }
        }
    }
    shown
}

/// Runs `command` in bash, with `driftgate` the binary under test, in a scratch directory that
/// sees the checkout's policies, fixtures and chart; output redirected to files goes there.
fn run(command: &str, scratch: &Path) -> std::process::Output {
    for linked in ["policies", "tests", "charts"] {
        let link = scratch.join(linked);
        if !link.exists() {
            std::os::unix::fs::symlink(repo().join(linked), link).unwrap();
        }
    }
    // `> /etc/bash_completion.d/driftgate` and the like: the script is kept, not installed.
    let redirected = regex_lite_redirect(command);
    Command::new("bash")
        .arg("-c")
        .arg(format!(
            "driftgate() {{ \"$DRIFTGATE\" \"$@\"; }}\nset -o pipefail\n{redirected}"
        ))
        .env("DRIFTGATE", env!("CARGO_BIN_EXE_driftgate"))
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .env("HOME", scratch)
        .current_dir(scratch)
        .output()
        .unwrap()
}

/// Each `> TARGET` output redirection pointed at a file of the scratch directory.
fn regex_lite_redirect(command: &str) -> String {
    let mut out = String::new();
    let mut rest = command;
    let mut count = 0;
    while let Some(at) = rest.find("> ") {
        out.push_str(&rest[..at]);
        let after = rest[at + 2..].trim_start();
        let end = after.find(char::is_whitespace).unwrap_or(after.len());
        count += 1;
        out.push_str(&format!("> redirected-{count}"));
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("docs-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

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
            let out = run(&shown.command, &dir);
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
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(!stderr.contains("/nonexistent/kubeconfig"), "{stderr}");
    assert_eq!(
        regex_lite_redirect("driftgate completion bash > /etc/x   # bash"),
        "driftgate completion bash > redirected-1   # bash"
    );
}
