//! The command line: `driftgate eval`, `driftgate policy check`, `driftgate policy test`,
//! `driftgate certs dev`, `driftgate version`, `driftgate completion`.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, CommandFactory, Parser, Subcommand};
use jiff::Timestamp;
use kube::core::DynamicObject;

use crate::decision::{DecisionInput, decide};
use crate::error::{Error, Result};
use crate::policy::PolicySet;
use crate::review::{read_object, read_review};
use crate::testsuite::{self, namespace_for};

#[derive(Debug, Parser)]
#[command(
    name = "driftgate",
    version,
    about = "Keeps GitOps-managed namespaces true to Git: only the controller writes, people use time-limited break-glass."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Decide AdmissionReview files offline and print each response as one line of JSON.
    Eval(EvalArgs),
    /// Check or test policies.
    #[command(subcommand)]
    Policy(PolicyCommand),
    /// Open, close or list break-glass windows, with your own kubeconfig.
    #[command(subcommand)]
    BreakGlass(crate::tools::break_glass::BreakGlassCommand),
    /// What must still be backported to Git (BackportRequirements), oldest first.
    Backlog(crate::tools::backlog::BacklogArgs),
    /// Serve the admission webhook over TLS (with --dev: local defaults, no setup).
    Serve(crate::serve::ServeArgs),
    /// Generate certificates.
    #[command(subcommand)]
    Certs(CertsCommand),
    /// Print the BackportRequirement CustomResourceDefinition (YAML) that the ledger needs.
    Crd,
    /// Print this binary's version and, when a cluster is reachable, the installed driftgate's.
    Version(crate::tools::version::VersionArgs),
    /// Print a shell completion script: `driftgate completion bash > /etc/bash_completion.d/driftgate`.
    Completion {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

#[derive(Debug, Args)]
pub struct EvalArgs {
    /// Policy file, or directory of *.yaml/*.yml policy files.
    #[arg(long, value_name = "PATH")]
    pub policy: PathBuf,
    /// Evaluate as of this time (RFC 3339); default: now.
    #[arg(long, value_name = "RFC3339")]
    pub now: Option<String>,
    /// A Namespace object (YAML or JSON) supplying namespace labels; repeat for several.
    #[arg(long = "namespace", value_name = "FILE")]
    pub namespaces: Vec<PathBuf>,
    /// The parent object of a subresource request (e.g. the Deployment of a scale request).
    #[arg(long, value_name = "FILE")]
    pub parent: Option<PathBuf>,
    /// AdmissionReview JSON files; `-` reads one from standard input.
    #[arg(required = true, value_name = "REVIEW.json")]
    pub reviews: Vec<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Validate policy files; every problem is listed as file:line: field: problem.
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

#[derive(Debug, Subcommand)]
pub enum CertsCommand {
    /// Write a development CA and a serving certificate signed by it, replacing any there.
    Dev(CertsDevArgs),
}

#[derive(Debug, Args)]
pub struct CertsDevArgs {
    /// Directory for ca.crt, ca.key, tls.crt and tls.key (created if missing).
    #[arg(long, value_name = "DIR", default_value = "certs-dev")]
    pub out: PathBuf,
    /// Another DNS name or IP address for the serving certificate; repeat for several.
    #[arg(long = "host", value_name = "NAME")]
    pub hosts: Vec<String>,
}

/// Runs the parsed command line and returns the process exit code.
pub fn run(cli: Cli) -> ExitCode {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match cli.command {
        Command::Eval(args) => eval(&args, &mut out),
        Command::Policy(PolicyCommand::Check { paths }) => policy_check(&paths, &mut out),
        Command::Policy(PolicyCommand::Test { path }) => policy_test(&path, &mut out),
        Command::Serve(args) => serve(args),
        Command::BreakGlass(command) => break_glass(&command, &mut out),
        Command::Backlog(args) => backlog(&args, &mut out),
        Command::Certs(CertsCommand::Dev(args)) => certs_dev(&args, &mut out),
        Command::Version(args) => version(&args, &mut out),
        Command::Completion { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "driftgate", &mut out);
            ExitCode::SUCCESS
        }
        Command::Crd => {
            use kube::CustomResourceExt;
            let crd = crate::ledger::record::BackportRequirement::crd();
            match serde_saphyr::to_string(&crd) {
                Ok(yaml) => {
                    let _ = write!(out, "{yaml}");
                    ExitCode::SUCCESS
                }
                Err(error) => {
                    eprintln!("driftgate crd: {error}");
                    ExitCode::from(1)
                }
            }
        }
    }
}

/// Runs an async command on a Tokio runtime (multi-threaded for the server) and maps its result
/// to an exit code, printing the error as `driftgate COMMAND: error`.
fn run_async<F>(command: &str, multi_thread: bool, future: F) -> ExitCode
where
    F: std::future::Future<Output = Result<()>>,
{
    let mut builder = if multi_thread {
        tokio::runtime::Builder::new_multi_thread()
    } else {
        tokio::runtime::Builder::new_current_thread()
    };
    let runtime = match builder.enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("driftgate {command}: cannot start the runtime: {error}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(future) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!(%error, "driftgate {command} failed");
            eprintln!("driftgate {command}: {error}");
            ExitCode::from(1)
        }
    }
}

fn break_glass(
    command: &crate::tools::break_glass::BreakGlassCommand,
    out: &mut impl Write,
) -> ExitCode {
    use crate::tools::break_glass::{self as tool, BreakGlassCommand};
    run_async("break-glass", false, async {
        match command {
            BreakGlassCommand::Open(args) => tool::open(args, out).await,
            BreakGlassCommand::Close(args) => tool::close(args, out).await,
            BreakGlassCommand::List(args) => tool::list(args, out).await,
        }
    })
}

fn backlog(args: &crate::tools::backlog::BacklogArgs, out: &mut impl Write) -> ExitCode {
    run_async("backlog", false, crate::tools::backlog::run(args, out))
}

fn version(args: &crate::tools::version::VersionArgs, out: &mut impl Write) -> ExitCode {
    run_async("version", false, crate::tools::version::run(args, out))
}

fn serve(args: crate::serve::ServeArgs) -> ExitCode {
    crate::serve::init_logging(args.log_format);
    run_async("serve", true, crate::serve::serve(args))
}

fn parse_now(now: Option<&str>) -> Result<Timestamp> {
    match now {
        None => Ok(Timestamp::now()),
        Some(value) => value.parse().map_err(|e: jiff::Error| Error::Time {
            value: value.to_owned(),
            reason: e.to_string(),
        }),
    }
}

/// Exit 0 when every review was decided (whatever the decisions), 2 when any input could not
/// be read; the readable ones are still decided and printed.
pub fn eval(args: &EvalArgs, out: &mut impl Write) -> ExitCode {
    let setup = || -> Result<(PolicySet, Timestamp, Vec<DynamicObject>, Option<DynamicObject>)> {
        let policies = PolicySet::load_all(std::slice::from_ref(&args.policy))?;
        let now = parse_now(args.now.as_deref())?;
        let namespaces = args
            .namespaces
            .iter()
            .map(|p| read_object(p))
            .collect::<Result<Vec<_>>>()?;
        let parent = args.parent.as_deref().map(read_object).transpose()?;
        Ok((policies, now, namespaces, parent))
    };
    let (policies, now, namespaces, parent) = match setup() {
        Ok(setup) => setup,
        Err(error) => {
            eprintln!("driftgate eval: {error}");
            return ExitCode::from(2);
        }
    };
    let mut unreadable = 0;
    for path in &args.reviews {
        let request = match read_review(path) {
            Ok(request) => request,
            Err(error) => {
                eprintln!("driftgate eval: {error}");
                unreadable += 1;
                continue;
            }
        };
        let decision = decide(
            &policies,
            &DecisionInput {
                request: &request,
                resource: None,
                namespace: namespace_for(&namespaces, request.namespace.as_deref()),
                parent: parent.as_ref(),
                now,
            },
        );
        let review = decision.to_response(&request).into_review();
        let line = serde_json::to_string(&review).expect("an AdmissionReview always serializes");
        if writeln!(out, "{line}").is_err() {
            return ExitCode::from(2);
        }
    }
    if unreadable > 0 {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    }
}

/// Exit 0 when every path holds valid policies, 1 with every problem listed otherwise.
pub fn policy_check(paths: &[PathBuf], out: &mut impl Write) -> ExitCode {
    match PolicySet::load_all(paths) {
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
                set.sources().len(),
                if set.sources().len() == 1 {
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
pub fn policy_test(path: &std::path::Path, out: &mut impl Write) -> ExitCode {
    let (report, errors) = match testsuite::run(path) {
        Ok(result) => result,
        Err(error) => {
            eprintln!("driftgate policy test: {error}");
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
        eprintln!("driftgate policy test: {error}");
    }
    if report.cases.is_empty() && errors.is_empty() {
        eprintln!(
            "driftgate policy test: no test suites (*.test.yaml) under {}",
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

/// Exit 0 with the files written, 2 when they could not be.
pub fn certs_dev(args: &CertsDevArgs, out: &mut impl Write) -> ExitCode {
    let written = crate::certs::serving_hosts(&args.hosts).and_then(|hosts| {
        let paths = crate::certs::generate_dev_certs(&args.out, &args.hosts)?;
        Ok((paths, hosts))
    });
    let (paths, hosts) = match written {
        Ok(written) => written,
        Err(error) => {
            eprintln!("driftgate certs dev: {error}");
            return ExitCode::from(2);
        }
    };
    let _ = writeln!(
        out,
        "wrote {}: CA {} (key {}), serving certificate {} (key {}) for {}, valid {} days",
        args.out.display(),
        paths.ca_cert.display(),
        paths.ca_key.display(),
        paths.cert.display(),
        paths.key.display(),
        hosts.join(", "),
        crate::certs::VALIDITY.as_secs() / 86_400,
    );
    let _ = writeln!(
        out,
        "hint: clients must trust {ca}: the webhook's caBundle is `base64 -w0 {ca}`, \
         and curl takes --cacert {ca}",
        ca = paths.ca_cert.display(),
    );
    ExitCode::SUCCESS
}
