//! What the core's file-reading tools fail with: reviews, objects, test suites, policies and
//! TLS material, each said in words a user can act on. The binary's `Error` wraps it unchanged.

use std::path::PathBuf;

use crate::policy::PolicyErrors;
use crate::review::ReviewError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{}: cannot be read: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {source}", path.display())]
    Review { path: PathBuf, source: ReviewError },
    #[error("{}: not a Kubernetes object (YAML or JSON): {reason}", path.display())]
    Object { path: PathBuf, reason: String },
    #[error("{}: not a policy test suite: {reason}", path.display())]
    TestSuite { path: PathBuf, reason: String },
    #[error("the policies are invalid:\n{0}")]
    Policy(#[from] PolicyErrors),
    #[error("\"{value}\" is not an RFC 3339 time such as 2026-11-30T09:00:00Z: {reason}")]
    Time { value: String, reason: String },
    #[error("{}: cannot be written: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {reason}", path.display())]
    Tls { path: PathBuf, reason: String },
    #[error(
        "{}: this private key does not belong to the first certificate in {}; the certificate \
         and key must come from the same issuance (in a kubernetes.io/tls Secret, tls.crt and \
         tls.key are replaced together)",
        key.display(),
        cert.display()
    )]
    TlsKeyMismatch { cert: PathBuf, key: PathBuf },
    #[error("cannot generate certificates: {reason}")]
    Certs { reason: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
