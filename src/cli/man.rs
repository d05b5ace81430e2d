//! `driftgate man DIR`: a man page (section 1) for the command and each subcommand
//! (`driftgate-break-glass-open.1`), rendered by clap_mangen from the definition `--help` prints,
//! so they cannot drift from it. For packagers; hidden from `--help`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;

#[derive(Debug, Args)]
pub struct ManArgs {
    /// The directory to write the pages into (made if missing); existing pages are replaced.
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum ManError {
    #[error("cannot make the directory {}: {source}", dir.display())]
    Directory {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Writes every page into `dir` and returns their paths, the command's first, then each
/// subcommand's in the order `--help` lists them (hidden ones left out, as from `--help`).
/// `command` is the CLI's definition (`Cli::command()`), which `--help` prints too.
pub fn write_pages(command: clap::Command, dir: &Path) -> Result<Vec<PathBuf>, ManError> {
    std::fs::create_dir_all(dir).map_err(|source| ManError::Directory {
        dir: dir.to_owned(),
        source,
    })?;
    let mut command = command.disable_help_subcommand(true);
    // Building names each subcommand as the page's title shows it: driftgate-break-glass-open.
    command.build();
    let mut written = Vec::new();
    write_tree(command, dir, &mut written)?;
    Ok(written)
}

fn write_tree(
    command: clap::Command,
    dir: &Path,
    written: &mut Vec<PathBuf>,
) -> Result<(), ManError> {
    let subcommands: Vec<clap::Command> = command
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .cloned()
        .collect();
    let man = clap_mangen::Man::new(command);
    let path = dir.join(man.get_filename());
    man.generate_to(dir).map_err(|source| ManError::Write {
        path: path.clone(),
        source,
    })?;
    written.push(path);
    for subcommand in subcommands {
        write_tree(subcommand, dir, written)?;
    }
    Ok(())
}

pub fn run(
    args: &ManArgs,
    command: clap::Command,
    program: &str,
    out: &mut impl Write,
) -> ExitCode {
    match write_pages(command, &args.dir) {
        Ok(written) => {
            for path in written {
                let _ = writeln!(out, "{}", path.display());
            }
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("{program} man: {error}");
            ExitCode::from(crate::cli::exit::FAILED)
        }
    }
}
