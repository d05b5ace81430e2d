//! The command line, one module per command: `eval`, `policy check|test`, `break-glass`,
//! `suspend|resume`, `backlog`, `certs dev`, `crd`, `version`, `completion`; `serve` runs the composition root in
//! [`crate::serve`].

pub mod backlog;
pub mod backport;
pub mod backport_error;
pub mod break_glass;
pub mod certs;
pub mod cluster;
pub mod completion;
pub mod crd;
pub mod error;
pub mod eval;
pub mod exit;
pub mod man;
pub mod output;
pub mod policy;
pub mod scan;
pub mod suspend;
pub mod testsuite;
pub mod version;

use std::io::Write;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

use crate::error::Result;
use certs::CertsCommand;
use policy::PolicyCommand;

#[derive(Debug, Parser)]
#[command(
    name = "driftgate",
    version,
    about = "Keeps GitOps-managed namespaces true to Git: only the controller writes, people use time-limited break-glass.",
    after_help = error::EXIT_CODES_HELP
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// The connection flags given before the command (`driftgate --context prod backlog`),
    /// as kubectl takes its global flags; see [`Command::take_connection`].
    #[command(flatten)]
    pub connection: cluster::LeadingConnectionArgs,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Decide AdmissionReview files offline and print each response as one line of JSON.
    Eval(eval::EvalArgs),
    /// Check or test policies.
    #[command(subcommand)]
    Policy(PolicyCommand),
    /// Open, close or list break-glass windows, with your own kubeconfig.
    BreakGlass(break_glass::BreakGlassArgs),
    /// Suspend the GitOps controller's reconciliation of one object, as a break-glass window:
    /// `suspend kustomization/apps -n flux-system --for 1h --reason "INC-1: ..."`.
    Suspend(suspend::SuspendArgs),
    /// Resume a suspended object: the GitOps controller reconciles it again.
    Resume(suspend::SuspensionTarget),
    /// What must still be backported to Git (BackportRequirements), oldest first.
    Backlog(backlog::BacklogArgs),
    /// Write a record's emergency change into a local checkout of the GitOps repository, on a
    /// branch with a commit naming the record: `backport RECORD -n NS --repo DIR`.
    Backport(backport::BackportArgs),
    /// Report the fields of guarded objects that are not the policy's controllers' or
    /// delegations' (managedFields): exit 1 when there is drift, for CI before Enforce.
    Scan(scan::ScanArgs),
    /// Serve the admission webhook over TLS (with --dev: local defaults, no setup).
    Serve(crate::serve::ServeArgs),
    /// Generate certificates.
    #[command(subcommand)]
    Certs(CertsCommand),
    /// Print the BackportRequirement CustomResourceDefinition (YAML) that the ledger needs.
    Crd,
    /// Print this binary's version and, when a cluster is reachable, the installed driftgate's.
    Version(version::VersionArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell): `driftgate completion
    /// bash > /etc/bash_completion.d/driftgate`. bash's, zsh's and fish's ask the binary, which
    /// reads namespaces, records and object names from the cluster; elvish's and powershell's
    /// know the command line only. For `kubectl driftgate`, link the binary as
    /// `kubectl_complete-driftgate` on the PATH instead (kubectl 1.26+ asks it; see the README).
    Completion {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Write the man pages, one per command and subcommand, into DIR (for packagers).
    #[command(hide = true)]
    Man(man::ManArgs),
}

impl Command {
    /// Hands the connection flags given before the command to it. A flag given again after the
    /// command wins there (kubectl keeps the last); a command that uses no cluster refuses them
    /// rather than ignoring them.
    pub fn take_connection(
        &mut self,
        leading: &cluster::LeadingConnectionArgs,
    ) -> Result<(), error::CliError> {
        use break_glass::BreakGlassCommand;
        let connection = match self {
            Command::BreakGlass(args) => match &mut args.command {
                BreakGlassCommand::Open(args) => &mut args.target.connection,
                BreakGlassCommand::Close(args) => &mut args.connection,
                BreakGlassCommand::List(args) => &mut args.connection,
            },
            Command::Suspend(args) => &mut args.target.connection,
            Command::Resume(args) => &mut args.connection,
            Command::Backlog(args) => &mut args.connection,
            Command::Backport(args) => &mut args.connection,
            Command::Scan(args) => &mut args.connection,
            Command::Version(args) => &mut args.connection,
            // serve takes --kubeconfig and --context only; its --request-timeout is the
            // webhook's answer, not a client's wait.
            Command::Serve(args) => {
                if let Some(flag) = leading.client_only_flag() {
                    return Err(error::CliError::LeadingServeFlag { flag });
                }
                if args.kubeconfig.is_none() {
                    args.kubeconfig.clone_from(&leading.kubeconfig);
                }
                if args.context.is_none() {
                    args.context.clone_from(&leading.context);
                }
                return Ok(());
            }
            Command::Eval(_)
            | Command::Policy(_)
            | Command::Certs(_)
            | Command::Crd
            | Command::Completion { .. }
            | Command::Man(_) => {
                return match leading.first_given() {
                    Some(flag) => Err(error::CliError::LeadingFlag {
                        flag,
                        command: self.name(),
                    }),
                    None => Ok(()),
                };
            }
        };
        leading.fill(connection);
        Ok(())
    }

    /// The command's name, for sentences.
    fn name(&self) -> &'static str {
        match self {
            Command::Eval(_) => "eval",
            Command::Policy(_) => "policy",
            Command::BreakGlass(_) => "break-glass",
            Command::Suspend(_) => "suspend",
            Command::Resume(_) => "resume",
            Command::Backlog(_) => "backlog",
            Command::Backport(_) => "backport",
            Command::Scan(_) => "scan",
            Command::Serve(_) => "serve",
            Command::Certs(_) => "certs",
            Command::Crd => "crd",
            Command::Version(_) => "version",
            Command::Completion { .. } => "completion",
            Command::Man(_) => "man",
        }
    }
}

/// How the person ran this binary, for the commands its hints print: `kubectl driftgate` when
/// kubectl ran it as its plugin (`kubectl-driftgate`), `driftgate` otherwise.
pub fn program_name(argv0: Option<&std::ffi::OsStr>) -> &'static str {
    let file_name = argv0
        .map(std::path::Path::new)
        .and_then(std::path::Path::file_name);
    match file_name.and_then(std::ffi::OsStr::to_str) {
        Some("kubectl-driftgate") => "kubectl driftgate",
        _ => "driftgate",
    }
}

/// The process: a completion request when run as [`completion::PLUGIN_COMPLETER`] (kubectl's)
/// or with [`completion::COMPLETE_REQUEST`] first (the scripts'), else the command line.
pub fn main() -> ExitCode {
    let argv0 = std::env::args_os().next();
    let file_name = argv0
        .as_deref()
        .map(std::path::Path::new)
        .and_then(std::path::Path::file_name);
    if file_name == Some(std::ffi::OsStr::new(completion::PLUGIN_COMPLETER)) {
        let args: Vec<String> = std::env::args().skip(1).collect();
        return completion::run(&Cli::command(), &args, &mut std::io::stdout().lock());
    }
    // The completion scripts' request, before clap: the words typed are not a command line to
    // parse (a flag half typed, a missing argument).
    if std::env::args().nth(1).as_deref() == Some(completion::COMPLETE_REQUEST) {
        let args: Vec<String> = std::env::args().skip(2).collect();
        return completion::run(&Cli::command(), &args, &mut std::io::stdout().lock());
    }
    run(Cli::parse())
}

/// Runs the parsed command line and returns the process exit code.
pub fn run(mut cli: Cli) -> ExitCode {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let program = program_name(std::env::args_os().next().as_deref());
    if let Err(error) = cli.command.take_connection(&cli.connection) {
        eprintln!("{program}: {error}");
        return ExitCode::from(error.exit_code());
    }
    match cli.command {
        Command::Eval(args) => eval::eval(&args, program, &mut out),
        Command::Policy(PolicyCommand::Check { paths }) => policy::policy_check(&paths, &mut out),
        Command::Policy(PolicyCommand::Test { path }) => {
            policy::policy_test(&path, program, &mut out)
        }
        Command::Serve(args) => serve(args),
        Command::BreakGlass(args) => break_glass(&args.into_command(), program, &mut out),
        Command::Suspend(args) => run_cluster(
            program,
            "suspend",
            suspend::suspend(&args, program, &mut out),
        ),
        Command::Resume(args) => run_cluster(program, "resume", suspend::resume(&args, &mut out)),
        Command::Backlog(args) => run_cluster(
            program,
            "backlog",
            backlog::run(&args, &mut out, &mut std::io::stderr()),
        ),
        Command::Backport(args) => {
            run_cluster(program, "backport", backport::run(&args, program, &mut out))
        }
        Command::Scan(args) => scan::main(&args, program, &mut out),
        Command::Certs(CertsCommand::Dev(args)) => certs::certs_dev(&args, program, &mut out),
        Command::Version(args) => run_cluster(program, "version", version::run(&args, &mut out)),
        Command::Completion { shell } => {
            match completion::script(shell) {
                Some(script) => {
                    let _ = out.write_all(script.as_bytes());
                }
                None => clap_complete::generate(shell, &mut Cli::command(), "driftgate", &mut out),
            }
            ExitCode::SUCCESS
        }
        Command::Crd => crd::print(program, &mut out),
        Command::Man(args) => man::run(&args, Cli::command(), program, &mut out),
    }
}

/// Runs a cluster command on a single-threaded runtime; its error is printed as
/// `PROGRAM COMMAND: error` and decides the exit code (see [`error::exit`]).
fn run_cluster<F>(program: &str, command: &str, future: F) -> ExitCode
where
    F: std::future::Future<Output = Result<(), error::CliError>>,
{
    let outcome = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(error::CliError::Runtime)
        .and_then(|runtime| runtime.block_on(future));
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("{program} {command}: {error}");
            ExitCode::from(error.exit_code())
        }
    }
}

fn break_glass(
    command: &break_glass::BreakGlassCommand,
    program: &'static str,
    out: &mut impl Write,
) -> ExitCode {
    use break_glass::{self as tool, BreakGlassCommand};
    run_cluster(program, "break-glass", async {
        match command {
            BreakGlassCommand::Open(args) => tool::open(args, program, out).await,
            BreakGlassCommand::Close(args) => tool::close(args, program, out).await,
            BreakGlassCommand::List(args) => {
                tool::list(args, program, out, &mut std::io::stderr()).await
            }
        }
    })
}

/// `serve` on a multi-threaded runtime. Its fatal error is one log line, in the log's format
/// (one JSON object with `--log-format json`), and only there.
fn serve(args: crate::serve::ServeArgs) -> ExitCode {
    // Before the log exists: `fatal` says it on stderr.
    let log = match crate::serve::init_logging(args.log_format, args.log_queue_lines) {
        Ok(log) => log,
        Err(error) => {
            fatal(
                "serve",
                &format_args!("cannot start the log's thread: {error}"),
            );
            return ExitCode::from(1);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            fatal("serve", &format_args!("cannot start the runtime: {error}"));
            return ExitCode::from(1);
        }
    };
    // Dropped in reverse: the runtime, then `log`, which writes out the lines still queued,
    // the fatal error's included.
    match runtime.block_on(crate::serve::serve(args, &log)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            fatal("serve", &error);
            ExitCode::from(1)
        }
    }
}

/// A command's fatal error, through the log when it would show there, else on stderr: never
/// twice, never silent (`RUST_LOG=off`).
fn fatal(command: &str, error: &dyn std::fmt::Display) {
    if tracing::enabled!(tracing::Level::ERROR) {
        tracing::error!(%error, "driftgate {command} failed");
    } else {
        eprintln!("driftgate {command}: {error}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hints_say_kubectl_driftgate_when_run_as_the_plugin() {
        let name = |argv0: &str| program_name(Some(std::ffi::OsStr::new(argv0)));
        assert_eq!(
            name("/home/a/.krew/bin/kubectl-driftgate"),
            "kubectl driftgate"
        );
        assert_eq!(name("kubectl-driftgate"), "kubectl driftgate");
        assert_eq!(name("/usr/local/bin/driftgate"), "driftgate");
        assert_eq!(name("./kubectl-driftgate-old"), "driftgate");
        assert_eq!(program_name(None), "driftgate");
    }
}
