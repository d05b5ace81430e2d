//! Why `driftgate backport` stopped before writing, beyond the cluster's own failures, and the
//! exit code each reason gives. Apart from the command, so that `CliError` can hold it without
//! importing the command back.

use std::path::PathBuf;

/// Why `backport` stopped before writing, beyond the cluster's own failures.
#[derive(Debug, thiserror::Error)]
pub enum BackportError {
    #[error("--repo {}: not a Git checkout ({stderr})", repo.display())]
    NotARepository { repo: PathBuf, stderr: String },
    #[error("--repo {}: has uncommitted changes ({files}); commit or stash them first, so that the backport commit holds only the backport", repo.display())]
    Dirty { repo: PathBuf, files: String },
    #[error("--repo {}: {path} cannot be read: {source}", repo.display())]
    Unreadable {
        repo: PathBuf,
        path: String,
        source: std::io::Error,
    },
    #[error("{0}; is --repo the repository the controller applies, and --path its directory?")]
    NoManifest(driftgate_core::backport::PlanError),
    /// The edited file read again is more than the recorded fields changed.
    #[error("{0}")]
    Unfaithful(driftgate_core::backport::PlanError),
    #[error(
        "--repo {}: {path} {problem}: driftgate backport writes only the checkout's own files, never through a link; nothing was written: edit the file it stands for by hand",
        repo.display()
    )]
    NotInCheckout {
        repo: PathBuf,
        path: String,
        problem: Box<NotInCheckout>,
    },
    #[error(
        "the record {namespace}/{name} holds no field changes to backport (a create or delete under the window): bring Git in line by hand, then {program} backlog resolve {name} -n {namespace} --note …"
    )]
    NoFields {
        /// How the person ran this binary ([`crate::cli::program_name`]), for the hint.
        program: &'static str,
        namespace: String,
        name: String,
    },
    #[error(
        "{object} is rendered by Helm ({release}): its values live in a chart's values, which driftgate backport does not write; change them by hand in Git, and the controller's next reconcile settles the record"
    )]
    Helm { object: String, release: String },
    #[error(
        "{object} is rendered by Argo CD's Application {application} from {rendered_by}: driftgate backport writes directory and Kustomize sources only; change the chart's values or the Application's parameters by hand in Git, and Argo CD's next sync settles the record"
    )]
    ArgoRendered {
        object: String,
        application: String,
        rendered_by: String,
    },
    #[error("nothing could be written (each field above says why); edit the manifests by hand")]
    NothingWritten,
    #[error("git {doing} failed: {stderr}")]
    Git { doing: String, stderr: String },
    #[error("cannot run git: {0}")]
    GitMissing(#[source] std::io::Error),
}

impl From<driftgate_core::backport::PlanError> for BackportError {
    fn from(error: driftgate_core::backport::PlanError) -> Self {
        match error {
            driftgate_core::backport::PlanError::NoManifest { .. } => {
                BackportError::NoManifest(error)
            }
            driftgate_core::backport::PlanError::Unfaithful { .. } => {
                BackportError::Unfaithful(error)
            }
        }
    }
}

/// Why a path Git tracks is not a file of the checkout itself.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotInCheckout {
    #[error("is a symbolic link (to {target})")]
    Link { target: String },
    #[error("lies below {dir}, a symbolic link (to {target})")]
    BelowLink { dir: String, target: String },
    #[error("resolves to {resolved}, outside the checkout")]
    Outside { resolved: String },
    #[error("is not a regular file")]
    NotAFile,
    #[error("cannot be looked at ({0})")]
    Unreadable(String),
}

impl BackportError {
    /// Bad input for what the checkout or the record lacks; 1 when nothing could be written
    /// (like a failed check); 5 when git itself failed.
    pub fn exit_code(&self) -> u8 {
        use crate::cli::exit;
        match self {
            BackportError::NotARepository { .. }
            | BackportError::Dirty { .. }
            | BackportError::Unreadable { .. }
            | BackportError::NoManifest(_)
            | BackportError::NoFields { .. }
            | BackportError::Helm { .. }
            | BackportError::ArgoRendered { .. }
            | BackportError::NotInCheckout { .. } => exit::BAD_INPUT,
            BackportError::NothingWritten | BackportError::Unfaithful(_) => exit::REFUSED,
            BackportError::Git { .. } | BackportError::GitMissing(_) => exit::FAILED,
        }
    }
}
