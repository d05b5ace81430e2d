//! The crate's error type: every failure a user can cause, said in words they can act on.

use std::net::SocketAddr;
use std::path::PathBuf;

use driftgate_core::policy::PolicyErrors;
use driftgate_kube::kube_state::ClusterConfigError;
use driftgate_kube::runtime_certs::RuntimeCertError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading files: reviews, objects, test suites, policies, TLS material.
    #[error(transparent)]
    Core(#[from] driftgate_core::Error),
    #[error("{flag} is required (or use --dev)")]
    MissingFlag { flag: &'static str },
    /// Boxed: a certificate error can hold an Error itself.
    #[error(transparent)]
    RuntimeCerts(Box<RuntimeCertError>),
    #[error(transparent)]
    Cluster(#[from] ClusterConfigError),
    #[error("--dev serves the example policy {}, which is not here: run it from a driftgate checkout, or pass --policy FILE", path.display())]
    DevPolicyMissing { path: PathBuf },
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
}

impl From<PolicyErrors> for Error {
    fn from(errors: PolicyErrors) -> Self {
        Error::Core(errors.into())
    }
}

impl From<RuntimeCertError> for Error {
    fn from(error: RuntimeCertError) -> Self {
        Error::RuntimeCerts(Box::new(error))
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
