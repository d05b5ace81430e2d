//! The real driftgate binary, run from the repository root (where relative paths such as
//! `policies/example.yaml` resolve).

use std::process::{Command, Output};

pub fn driftgate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_driftgate"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("the driftgate binary runs")
}
