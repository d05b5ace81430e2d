//! `driftgate crd`: the BackportRequirement CustomResourceDefinition the ledger needs, as YAML.

use std::io::Write;
use std::process::ExitCode;

use kube::CustomResourceExt;

use driftgate_core::ledger::record::BackportRequirement;

/// Exit 0 with the CRD printed, 1 when it could not be serialized.
pub fn print(program: &str, out: &mut impl Write) -> ExitCode {
    match serde_saphyr::to_string(&BackportRequirement::crd()) {
        Ok(yaml) => {
            let _ = write!(out, "{yaml}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("{program} crd: {error}");
            ExitCode::from(1)
        }
    }
}
