//! The crate's error type: every failure a user can cause, said in words they can act on.

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::certs::runtime::RuntimeCertError;

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
    #[error("{flag} is required (or use --dev)")]
    MissingFlag { flag: &'static str },
    /// Boxed: a certificate error can hold an Error itself.
    #[error(transparent)]
    RuntimeCerts(Box<RuntimeCertError>),
    #[error("--kubeconfig {}: {source}", path.display())]
    Kubeconfig {
        path: PathBuf,
        source: kube::config::KubeconfigError,
    },
    #[error("--context {context}: {source}")]
    KubeContext {
        context: String,
        source: kube::config::KubeconfigError,
    },
    #[error("--dev serves the example policy {}, which is not here: run it from a driftgate checkout, or pass --policy FILE", path.display())]
    DevPolicyMissing { path: PathBuf },
    #[error("no cluster configuration found ({source}); pass --kubeconfig")]
    NoClusterConfig {
        source: kube::config::InferConfigError,
    },
    #[error("cannot build the Kubernetes client: {source}")]
    KubeClient { source: kube::Error },
    /// `serve` without `--dev` needs a cluster unless told otherwise.
    #[error("{source}, or --no-kube to run without a cluster")]
    ClusterRequired { source: Box<Error> },
    #[error(
        "--gatepolicies reads GatePolicy objects from a cluster, and none was found: give --kubeconfig, or drop --gatepolicies"
    )]
    GatePoliciesWithoutCluster,
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot listen on the admin address {addr}: {source}")]
    AdminListen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("the webhook listener on {addr} stopped before it was listening")]
    ListenerEnded { addr: SocketAddr },
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

impl From<RuntimeCertError> for Error {
    fn from(error: RuntimeCertError) -> Self {
        Error::RuntimeCerts(Box::new(error))
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
