#![forbid(unsafe_code)]

use clap::Parser;

fn main() -> std::process::ExitCode {
    driftgate::cli::run(driftgate::cli::Cli::parse())
}
