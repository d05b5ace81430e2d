//! The `driftgate` commands the READMEs show, read out of their shell blocks (and the inline
//! examples of the offline tools), for `tests/docs.rs` (offline, every command up to the point where
//! it reads the kubeconfig) and `tests/e2e/docs.rs` (the cluster commands, run against the real
//! API server).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

pub const DOCS: &[&str] = &[
    "README.md",
    "docs/quickstart-kind.md",
    "charts/driftgate/README.md",
];

/// The commands that use no cluster (the first word after `driftgate`).
pub const OFFLINE: &[&str] = &["eval", "policy", "certs", "crd", "completion", "man"];

pub fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// One documented command: where it is shown, and its text (continuations joined).
#[derive(Debug)]
pub struct Shown {
    pub at: String,
    pub command: String,
}

/// The `driftgate …` lines of the shell blocks, and the inline examples of the offline tools
/// that name files of the checkout (an inline span cut by a line break is not seen).
pub fn shown_commands(doc: &str) -> Vec<Shown> {
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
/// sees the checkout's policies, fixtures and chart, with `HOME` there too (`~/src/gitops`) and
/// `KUBECONFIG` set to `kubeconfig`; output redirected to files goes there.
pub fn run(command: &str, scratch: &Path, kubeconfig: &Path) -> std::process::Output {
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
        .env("KUBECONFIG", kubeconfig)
        .env("HOME", scratch)
        .current_dir(scratch)
        .output()
        .unwrap()
}

/// Each `> TARGET` output redirection pointed at a file of the scratch directory.
pub fn regex_lite_redirect(command: &str) -> String {
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

pub fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("docs-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
