//! The command line, one module per command: `eval`, `policy check|test`, `break-glass`,
//! `backlog`, `certs dev`, `crd`, `version`, `completion`; `serve` runs the composition root in
//! [`crate::serve`].

pub mod backlog;
pub mod break_glass;
pub mod certs;
pub mod crd;
pub mod eval;
pub mod policy;
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
    about = "Keeps GitOps-managed namespaces true to Git: only the controller writes, people use time-limited break-glass."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Decide AdmissionReview files offline and print each response as one line of JSON.
    Eval(eval::EvalArgs),
    /// Check or test policies.
    #[command(subcommand)]
    Policy(PolicyCommand),
    /// Open, close or list break-glass windows, with your own kubeconfig.
    #[command(subcommand)]
    BreakGlass(break_glass::BreakGlassCommand),
    /// What must still be backported to Git (BackportRequirements), oldest first.
    Backlog(backlog::BacklogArgs),
    /// Serve the admission webhook over TLS (with --dev: local defaults, no setup).
    Serve(crate::serve::ServeArgs),
    /// Generate certificates.
    #[command(subcommand)]
    Certs(CertsCommand),
    /// Print the BackportRequirement CustomResourceDefinition (YAML) that the ledger needs.
    Crd,
    /// Print this binary's version and, when a cluster is reachable, the installed driftgate's.
    Version(version::VersionArgs),
    /// Print a shell completion script: `driftgate completion bash > /etc/bash_completion.d/driftgate`.
    Completion {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

/// Runs the parsed command line and returns the process exit code.
pub fn run(cli: Cli) -> ExitCode {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match cli.command {
        Command::Eval(args) => eval::eval(&args, &mut out),
        Command::Policy(PolicyCommand::Check { paths }) => policy::policy_check(&paths, &mut out),
        Command::Policy(PolicyCommand::Test { path }) => policy::policy_test(&path, &mut out),
        Command::Serve(args) => serve(args),
        Command::BreakGlass(command) => break_glass(&command, &mut out),
        Command::Backlog(args) => backlog(&args, &mut out),
        Command::Certs(CertsCommand::Dev(args)) => certs::certs_dev(&args, &mut out),
        Command::Version(args) => version(&args, &mut out),
        Command::Completion { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "driftgate", &mut out);
            ExitCode::SUCCESS
        }
        Command::Crd => crd::print(&mut out),
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

fn break_glass(command: &break_glass::BreakGlassCommand, out: &mut impl Write) -> ExitCode {
    use break_glass::{self as tool, BreakGlassCommand};
    run_async("break-glass", false, async {
        match command {
            BreakGlassCommand::Open(args) => tool::open(args, out).await,
            BreakGlassCommand::Close(args) => tool::close(args, out).await,
            BreakGlassCommand::List(args) => tool::list(args, out).await,
        }
    })
}

fn backlog(args: &backlog::BacklogArgs, out: &mut impl Write) -> ExitCode {
    run_async("backlog", false, backlog::run(args, out))
}

fn version(args: &version::VersionArgs, out: &mut impl Write) -> ExitCode {
    run_async("version", false, version::run(args, out))
}

fn serve(args: crate::serve::ServeArgs) -> ExitCode {
    crate::serve::init_logging(args.log_format);
    run_async("serve", true, crate::serve::serve(args))
}
