//! `driftgate certs dev`: a development CA and serving certificate for `serve --dev` and tests.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};

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

/// Exit 0 with the files written, 2 when they could not be.
pub fn certs_dev(args: &CertsDevArgs, program: &str, out: &mut impl Write) -> ExitCode {
    let written = driftgate_core::certs::serving_hosts(&args.hosts).and_then(|hosts| {
        let paths = driftgate_core::certs::generate_dev_certs(&args.out, &args.hosts)?;
        Ok((paths, hosts))
    });
    let (paths, hosts) = match written {
        Ok(written) => written,
        Err(error) => {
            eprintln!("{program} certs dev: {error}");
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
        driftgate_core::certs::VALIDITY.as_secs() / 86_400,
    );
    let _ = writeln!(
        out,
        "hint: clients must trust {ca}: the webhook's caBundle is `base64 -w0 {ca}`, \
         and curl takes --cacert {ca}",
        ca = paths.ca_cert.display(),
    );
    ExitCode::SUCCESS
}
