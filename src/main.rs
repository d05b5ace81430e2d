#![forbid(unsafe_code)]

use clap::Parser;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    driftgate::cli::run(driftgate::cli::Cli::parse())
}
