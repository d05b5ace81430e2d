//! `driftgate certs dev`: a development CA and serving certificate, generated with rcgen.
//!
//! CONTRACT (implementation pending): writes `ca.crt`, `ca.key`, `tls.crt`, `tls.key` into `out`;
//! the serving certificate is ECDSA P-256, signed by the CA, with SANs `localhost`, `127.0.0.1`,
//! `driftgate`, `driftgate.driftgate.svc`, `driftgate.driftgate.svc.cluster.local` and every
//! `extra_hosts` entry (DNS name or IP). Private keys are written with mode 0600.

use std::path::{Path, PathBuf};

use crate::error::Result;

/// Where the development certificates are.
#[derive(Clone, Debug)]
pub struct DevCertPaths {
    pub ca_cert: PathBuf,
    pub ca_key: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl DevCertPaths {
    pub fn in_dir(dir: &Path) -> Self {
        DevCertPaths {
            ca_cert: dir.join("ca.crt"),
            ca_key: dir.join("ca.key"),
            cert: dir.join("tls.crt"),
            key: dir.join("tls.key"),
        }
    }
}

/// Generates a fresh CA and serving certificate into `out` (created if missing), replacing any.
pub fn generate_dev_certs(out: &Path, extra_hosts: &[String]) -> Result<DevCertPaths> {
    let _ = (out, extra_hosts);
    unimplemented!("certs: pending")
}

/// Returns the certificates in `out`, generating them first when any file is missing.
pub fn ensure_dev_certs(out: &Path) -> Result<DevCertPaths> {
    let _ = out;
    unimplemented!("certs: pending")
}
