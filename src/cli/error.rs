//! What a cluster command can fail at, each in a sentence a person can act on at 3am, and the
//! exit code that tells a script which kind of failure it was.

use std::path::PathBuf;

pub use super::exit;

/// The table `--help` prints after the commands.
pub const EXIT_CODES_HELP: &str = "\
Exit codes:
  0  done
  1  refused by driftgate's policy (its admission denial), or a check or policy test failed
  2  bad input: usage, flags, KIND/NAME, kubeconfig or context, no such object or kind
  3  the cluster is unreachable (connection refused, timed out, TLS)
  4  not permitted by Kubernetes RBAC
  5  the API server failed the request for another reason (conflict, server error)";

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error(
        "\"{target}\" is not KIND/NAME; write e.g. deployment/api, or namespace/NAME for a namespace-wide window"
    )]
    TargetSyntax { target: String },
    #[error(
        "{command} needs what the window is on: KIND/NAME for one object (`{program} break-glass {command} deployment/api -n {namespace} ...`), or namespace/NAME for every object in the namespace (`{program} break-glass {command} namespace/{namespace} ...`)"
    )]
    NoTarget {
        program: &'static str,
        command: &'static str,
        namespace: String,
    },
    #[error(
        "{target} is the namespace-wide window of {}, but -n says {namespace}: give one of them",
        target.split_once('/').map_or(target.as_str(), |(_, name)| name)
    )]
    NamespaceMismatch { target: String, namespace: String },
    #[error("\"{target}\" is not KIND/NAME; write e.g. kustomization/apps or helmrelease/podinfo")]
    SuspensionTarget { target: String },
    #[error(
        "driftgate cannot resume {words}: it cannot undo {cannot}. Restore it as Git declares it, removing the label {label} and the annotation {reason_annotation} in the same write (resuming is always admitted)"
    )]
    CannotResume {
        words: String,
        cannot: String,
        label: String,
        reason_annotation: String,
    },
    #[error("--for: {0}")]
    Duration(#[source] driftgate_core::timefmt::DurationError),
    #[error("--for {value}: the window would end beyond the times a label can hold")]
    DurationTooFar { value: String },
    #[error(
        "--reason must say why, in your words, not the hint's placeholder (e.g. \"INC-123: api pods OOM, raising the memory limit\")"
    )]
    Reason,
    #[error("--note must say what happened (e.g. \"backported in payments-gitops#412\")")]
    Note,
    #[error("--url {url:?} is not a pull request's address: {problem}")]
    PullRequestUrl { url: String, problem: &'static str },
    #[error(
        "{flag} was given before {command}, which uses no cluster: leave it out (it is for break-glass, suspend, resume, backlog, backport, scan and version)"
    )]
    LeadingFlag {
        flag: &'static str,
        command: &'static str,
    },
    #[error(
        "{flag} was given before serve, which does not take it: before serve, only --kubeconfig and --context (serve's own --request-timeout, how long the webhook may take to answer, follows serve)"
    )]
    LeadingServeFlag { flag: &'static str },
    #[error("{command} act on one record: -A does not apply; give its namespace with -n")]
    AllNamespacesForOne { command: &'static str },
    #[error("--as-group needs --as: Kubernetes impersonates groups only together with a user")]
    GroupsWithoutUser,
    #[error("--kubeconfig {}: cannot be read: {source}", path.display())]
    Kubeconfig {
        path: PathBuf,
        source: kube::config::KubeconfigError,
    },
    #[error(
        "--context {context}: no such context in {source_name} (kubectl config get-contexts lists them)"
    )]
    NoSuchContext {
        context: String,
        source_name: String,
    },
    #[error("the kubeconfig ({source_name}) cannot be used: {source}")]
    KubeconfigUnusable {
        source_name: String,
        source: kube::config::KubeconfigError,
    },
    #[error("no cluster configuration found ({tried}, not in a cluster): pass --kubeconfig FILE")]
    NoConfiguration {
        /// What was looked at: `$KUBECONFIG` as set, or its absence and ~/.kube/config's.
        tried: String,
        source: kube::config::InferConfigError,
    },
    #[error("cannot build a Kubernetes client for {server}: {source}")]
    Client { server: String, source: kube::Error },
    #[error(
        "cannot reach the API server at {server} ({cause}); is this the right context? (kubectl config current-context)"
    )]
    Unreachable { server: String, cause: String },
    #[error(
        "{doing} failed: the API server at {server} did not answer {waited}; is it overloaded, or is this the right context? (kubectl config current-context)"
    )]
    TimedOut {
        server: String,
        doing: String,
        /// How long was waited, and which flag set it.
        waited: String,
    },
    #[error(
        "{user} may not {verb} {resource}{}: Kubernetes RBAC does not permit it. Ask a cluster admin for a Role that grants it, or check --context and --as",
        namespace.as_deref().map(|ns| format!(" in namespace {ns}")).unwrap_or_default()
    )]
    Forbidden {
        user: String,
        verb: String,
        resource: String,
        namespace: Option<String>,
    },
    #[error(
        "no such {kind} \"{name}\"{}",
        namespace.as_deref().map(|ns| format!(" in namespace {ns}")).unwrap_or_default()
    )]
    NotFound {
        kind: String,
        name: String,
        namespace: Option<String>,
    },
    #[error(
        "the cluster does not serve {resource} (is its CRD installed? kubectl api-resources lists what it serves)"
    )]
    NoSuchResource { resource: String },
    #[error("the cluster has no resource kind \"{kind}\" (kubectl api-resources lists them)")]
    UnknownKind { kind: String },
    #[error("{doing} was refused: {message}")]
    Refused { doing: String, message: String },
    #[error("{doing} was rejected as invalid: {message}")]
    Invalid { doing: String, message: String },
    #[error("{doing} failed: the API server answered {code} {reason}: {message}")]
    ApiServer {
        doing: String,
        code: u16,
        reason: String,
        message: String,
    },
    #[error("{doing} failed: {source}")]
    Request { doing: String, source: kube::Error },
    #[error(
        "the API server's SelfSubjectReview names no user, so the resolution cannot say who resolved it"
    )]
    NoUser,
    #[error("cannot start the command's runtime: {0}")]
    Runtime(#[source] std::io::Error),
    #[error(transparent)]
    Backport(#[from] crate::cli::backport_error::BackportError),
}

impl CliError {
    /// The exit code for this failure (see [`exit`]).
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Refused { .. } => exit::REFUSED,
            CliError::TargetSyntax { .. }
            | CliError::NoTarget { .. }
            | CliError::NamespaceMismatch { .. }
            | CliError::SuspensionTarget { .. }
            | CliError::CannotResume { .. }
            | CliError::Duration(_)
            | CliError::DurationTooFar { .. }
            | CliError::Reason
            | CliError::Note
            | CliError::PullRequestUrl { .. }
            | CliError::GroupsWithoutUser
            | CliError::LeadingFlag { .. }
            | CliError::AllNamespacesForOne { .. }
            | CliError::LeadingServeFlag { .. }
            | CliError::Kubeconfig { .. }
            | CliError::NoSuchContext { .. }
            | CliError::KubeconfigUnusable { .. }
            | CliError::NoConfiguration { .. }
            | CliError::NotFound { .. }
            | CliError::NoSuchResource { .. }
            | CliError::UnknownKind { .. }
            | CliError::Invalid { .. }
            | CliError::Client { .. } => exit::BAD_INPUT,
            CliError::Unreachable { .. } | CliError::TimedOut { .. } => exit::UNREACHABLE,
            CliError::Forbidden { .. } => exit::FORBIDDEN,
            CliError::ApiServer { .. }
            | CliError::Request { .. }
            | CliError::NoUser
            | CliError::Runtime(_) => exit::FAILED,
            CliError::Backport(error) => error.exit_code(),
        }
    }
}
