//! `driftgate policy check` and `driftgate policy test`.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;

use crate::cli::testsuite;
use driftgate_core::policy::{PolicyInput, PolicySet};

/// What `-` is called in errors, as `eval -` says it.
const STANDARD_INPUT: &str = "standard input";

#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Validate policy files; every problem is listed as file:line: field: problem. `-` reads
    /// the policies from standard input.
    Check {
        #[arg(required = true, value_name = "PATH")]
        paths: Vec<PathBuf>,
    },
    /// Run policy test suites (*.test.yaml) under a directory, or one suite file.
    Test {
        #[arg(value_name = "DIR")]
        path: PathBuf,
    },
}

/// Exit 0 when every path holds valid policies, 1 with every problem listed otherwise.
pub fn policy_check(paths: &[PathBuf], out: &mut impl Write) -> ExitCode {
    let mut inputs = Vec::new();
    let mut stdin_read = false;
    for path in paths {
        if path.as_os_str() != "-" {
            inputs.push(PolicyInput::Path(path.clone()));
            continue;
        }
        // Standard input can be read once; a second `-` would check nothing.
        if stdin_read {
            continue;
        }
        stdin_read = true;
        let mut text = String::new();
        if let Err(error) = std::io::Read::read_to_string(&mut std::io::stdin(), &mut text) {
            eprintln!("{STANDARD_INPUT}:0: (file): cannot be read: {error}");
            eprintln!("1 problem found");
            return ExitCode::from(1);
        }
        inputs.push(PolicyInput::Text {
            name: STANDARD_INPUT.to_owned(),
            text,
        });
    }
    match PolicySet::load_inputs(&inputs) {
        Ok(set) => {
            for policy in set.policies() {
                for warning in policy.warnings() {
                    let _ = writeln!(
                        out,
                        "warning: {}: policy {}: {warning}",
                        policy.source, policy.name
                    );
                }
            }
            let names: Vec<_> = set
                .policies()
                .iter()
                .map(|p| format!("{} ({:?})", p.name, p.mode))
                .collect();
            let _ = writeln!(
                out,
                "ok: {} {} from {} {}: {}",
                names.len(),
                if names.len() == 1 {
                    "policy"
                } else {
                    "policies"
                },
                set.sources().len() + usize::from(stdin_read),
                if set.sources().len() + usize::from(stdin_read) == 1 {
                    "file"
                } else {
                    "files"
                },
                names.join(", ")
            );
            ExitCode::SUCCESS
        }
        Err(errors) => {
            for error in &errors.0 {
                eprintln!("{error}");
            }
            eprintln!(
                "{} {} found",
                errors.0.len(),
                if errors.0.len() == 1 {
                    "problem"
                } else {
                    "problems"
                }
            );
            ExitCode::from(1)
        }
    }
}

/// Prints one line per case and `N passed, N failed`; exit 1 when any case failed, 2 when a
/// suite could not run.
/// `program` names the binary as it was run, in its error lines.
pub fn policy_test(path: &std::path::Path, program: &str, out: &mut impl Write) -> ExitCode {
    let (report, errors) = match testsuite::run(path) {
        Ok(result) => result,
        Err(error) => {
            eprintln!("{program} policy test: {error}");
            return ExitCode::from(2);
        }
    };
    for case in &report.cases {
        if case.failures.is_empty() {
            let _ = writeln!(out, "ok    {}: {}", case.suite, case.name);
        } else {
            let _ = writeln!(out, "FAIL  {}: {}", case.suite, case.name);
            for failure in &case.failures {
                let _ = writeln!(out, "        {failure}");
            }
        }
    }
    for error in &errors {
        eprintln!("{program} policy test: {error}");
    }
    if report.cases.is_empty() && errors.is_empty() {
        eprintln!(
            "{program} policy test: no test suites (*.test.yaml) under {}",
            path.display()
        );
        return ExitCode::from(2);
    }
    let _ = writeln!(
        out,
        "{} passed, {} failed",
        report.passed(),
        report.failed()
    );
    if !errors.is_empty() {
        ExitCode::from(2)
    } else if report.failed() > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
