//! How every cluster command connects, with kubectl's flags (`--kubeconfig`, `--context`,
//! `--as`, `--as-group`) and its namespace rule, and how the API server's failures become
//! [`CliError`]s that name the server, the user, the verb and the resource.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use kube::config::{KubeConfigOptions, Kubeconfig, KubeconfigError};

use crate::cli::error::CliError;

/// The connection flags every cluster command takes, as kubectl spells them. They are global,
/// as kubectl's: accepted before the command (`driftgate --context prod backlog`) as well as
/// after it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Args)]
pub struct ConnectionArgs {
    /// Kubeconfig to use (default: $KUBECONFIG, ~/.kube/config, in-cluster).
    #[arg(long, value_name = "FILE", global = true)]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (default: its current-context).
    #[arg(long, value_name = "NAME", global = true)]
    pub context: Option<String>,
    /// The user to impersonate, as kubectl --as (needs RBAC to impersonate).
    #[arg(long = "as", value_name = "USER", global = true)]
    pub as_user: Option<String>,
    /// A group to impersonate, as kubectl --as-group; repeat for more (needs --as).
    #[arg(long = "as-group", value_name = "GROUP", global = true)]
    pub as_groups: Vec<String>,
    /// How long to wait for each request's answer, as kubectl's: a number and a unit (5s, 1m),
    /// or whole seconds; 0 waits as long as the connection lasts.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "0",
        global = true,
        value_parser = request_timeout
    )]
    pub request_timeout: RequestTimeout,
}

/// The connection flags before the command (`driftgate --context prod backlog`): the same
/// flags as [`ConnectionArgs`], kept apart because `serve` has its own `--request-timeout`.
#[derive(Debug, Clone, Default, Args)]
pub struct LeadingConnectionArgs {
    /// Kubeconfig to use, for the cluster command that follows (also accepted after it).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use, for the cluster command that follows.
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,
    /// The user to impersonate, for the cluster command that follows.
    #[arg(long = "as", value_name = "USER")]
    pub as_user: Option<String>,
    /// A group to impersonate, for the cluster command that follows; repeatable.
    #[arg(long = "as-group", value_name = "GROUP")]
    pub as_groups: Vec<String>,
    /// How long to wait for each request's answer, for the cluster command that follows.
    #[arg(long, value_name = "DURATION", value_parser = request_timeout)]
    pub request_timeout: Option<RequestTimeout>,
}

impl LeadingConnectionArgs {
    /// Fills in what the command's own flags left unset (given after the command, they win).
    pub fn fill(&self, connection: &mut ConnectionArgs) {
        if connection.kubeconfig.is_none() {
            connection.kubeconfig.clone_from(&self.kubeconfig);
        }
        if connection.context.is_none() {
            connection.context.clone_from(&self.context);
        }
        if connection.as_user.is_none() {
            connection.as_user.clone_from(&self.as_user);
        }
        let mut groups = self.as_groups.clone();
        groups.append(&mut connection.as_groups);
        connection.as_groups = groups;
        if connection.request_timeout == RequestTimeout::default()
            && let Some(timeout) = self.request_timeout
        {
            connection.request_timeout = timeout;
        }
    }

    /// The first flag given, if any, as the person wrote it.
    pub fn first_given(&self) -> Option<&'static str> {
        if self.kubeconfig.is_some() {
            Some("--kubeconfig")
        } else if self.context.is_some() {
            Some("--context")
        } else {
            self.client_only_flag()
        }
    }

    /// The first flag given that only a client's requests use (not `serve`'s).
    pub fn client_only_flag(&self) -> Option<&'static str> {
        if self.as_user.is_some() {
            Some("--as")
        } else if !self.as_groups.is_empty() {
            Some("--as-group")
        } else if self.request_timeout.is_some() {
            Some("--request-timeout")
        } else {
            None
        }
    }
}

/// `--request-timeout`: `None` waits as long as it takes (kubectl's default, `0`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RequestTimeout(pub Option<Duration>);

/// kubectl's spelling: `0` for none, whole seconds (`5`), or a number and a unit (`1.5s`, `2m`).
fn request_timeout(
    value: &str,
) -> Result<RequestTimeout, driftgate_core::timefmt::FlagDurationError> {
    let duration = match value.parse::<u64>() {
        Ok(seconds) => Duration::from_secs(seconds),
        Err(_) => driftgate_core::timefmt::flag_duration(value)?,
    };
    Ok(RequestTimeout(Some(duration).filter(|d| !d.is_zero())))
}

impl std::fmt::Display for RequestTimeout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            // std's Debug is exact and short: 5s, 1.5s, 500ms.
            Some(duration) => write!(f, "{duration:?}"),
            None => f.write_str("0"),
        }
    }
}

/// A client for the chosen context, with what errors and defaults need from its kubeconfig.
#[derive(Clone)]
pub struct Cluster {
    pub client: kube::Client,
    /// The API server's URL (`https://host:port`), for errors that say where.
    pub server: String,
    /// The context's namespace, `default` when it names none: kubectl's namespace without -n.
    pub namespace: String,
    /// The user given with --as, if any.
    pub impersonating: Option<String>,
    /// `--request-timeout`, for the sentence when it elapses.
    pub request_timeout: RequestTimeout,
    /// How long kube waits to connect, when no --request-timeout is given.
    pub connect_timeout: Option<Duration>,
}

/// Connects as `args` say; nothing is sent to the API server yet.
pub async fn connect(args: &ConnectionArgs) -> Result<Cluster, CliError> {
    let config = config(args).await?;
    cluster_for(config, args)
}

/// The configuration `args` choose, without impersonation.
pub async fn config(args: &ConnectionArgs) -> Result<kube::Config, CliError> {
    if args.as_user.is_none() && !args.as_groups.is_empty() {
        return Err(CliError::GroupsWithoutUser);
    }
    let options = KubeConfigOptions {
        context: args.context.clone(),
        ..KubeConfigOptions::default()
    };
    match (&args.kubeconfig, &args.context) {
        (Some(path), _) => {
            let kubeconfig =
                Kubeconfig::read_from(path).map_err(|source| CliError::Kubeconfig {
                    path: path.clone(),
                    source,
                })?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .map_err(|source| kubeconfig_error(args, path.display().to_string(), source))
        }
        // A named context only exists in a kubeconfig: no in-cluster fallback.
        (None, Some(_)) => kube::Config::from_kubeconfig(&options)
            .await
            .map_err(|source| {
                kubeconfig_error(args, "$KUBECONFIG or ~/.kube/config".to_owned(), source)
            }),
        (None, None) => kube::Config::infer()
            .await
            .map_err(|source| CliError::NoConfiguration {
                tried: kubeconfig_tried(),
                source,
            }),
    }
}

fn kubeconfig_error(
    args: &ConnectionArgs,
    source_name: String,
    source: KubeconfigError,
) -> CliError {
    match (&source, &args.context) {
        (KubeconfigError::LoadContext(_), Some(context)) => CliError::NoSuchContext {
            context: context.clone(),
            source_name,
        },
        _ => CliError::KubeconfigUnusable {
            source_name,
            source,
        },
    }
}

/// The cluster for `config`, impersonating as `args` say.
pub fn cluster_for(mut config: kube::Config, args: &ConnectionArgs) -> Result<Cluster, CliError> {
    if let Some(user) = &args.as_user {
        config.auth_info.impersonate = Some(user.clone());
    }
    if !args.as_groups.is_empty() {
        config.auth_info.impersonate_groups = Some(args.as_groups.clone());
    }
    let server = config
        .cluster_url
        .to_string()
        .trim_end_matches('/')
        .to_owned();
    let namespace = config.default_namespace.clone();
    let timeout = args.request_timeout.0;
    if let Some(timeout) = timeout {
        // Connecting and every read count against it too: a server that accepts and never
        // answers, or stops halfway through a body, is given up on as one that never answers.
        config.connect_timeout = Some(timeout);
        config.read_timeout = Some(timeout);
        config.write_timeout = Some(timeout);
    }
    let connect_timeout = config.connect_timeout;
    let client_error = |source| CliError::Client {
        server: server.clone(),
        source,
    };
    let client = match timeout {
        // The whole answer (up to its headers) within the timeout, as kubectl's http.Client.
        Some(timeout) => kube::client::ClientBuilder::try_from(config)
            .map_err(client_error)?
            .with_layer(&tower::timeout::TimeoutLayer::new(timeout))
            .build(),
        None => kube::Client::try_from(config).map_err(client_error)?,
    };
    Ok(Cluster {
        client,
        server,
        namespace,
        impersonating: args.as_user.clone(),
        request_timeout: args.request_timeout,
        connect_timeout,
    })
}

/// One request a command makes, in the words its failure needs.
#[derive(Debug, Clone, Copy)]
pub struct Attempt<'a> {
    /// What the person was doing: "opening the window".
    pub doing: &'a str,
    /// The RBAC verb: get, list, patch, create.
    pub verb: &'a str,
    /// The resource as RBAC and kubectl name it: `deployments.apps`, `namespaces`.
    pub resource: &'a str,
    /// The kind in a person's words: `deployment`, `BackportRequirement`.
    pub kind: &'a str,
    pub name: Option<&'a str>,
    pub namespace: Option<&'a str>,
}

impl Cluster {
    /// The namespace a command acts in, as kubectl picks it: `-n` when given, else the
    /// context's.
    pub fn namespace_or(&self, given: Option<&String>) -> String {
        given.cloned().unwrap_or_else(|| self.namespace.clone())
    }

    /// `error` from `attempt` as a sentence (see [`classify`]).
    pub fn error(&self, attempt: Attempt<'_>, error: kube::Error) -> CliError {
        if timed_out(&error) {
            let waited = match (self.request_timeout.0, self.connect_timeout) {
                (Some(_), _) => format!("within --request-timeout {}", self.request_timeout),
                (None, Some(connect)) => format!(
                    "within {connect:?} of connecting (pass --request-timeout to choose how long to wait)"
                ),
                (None, None) => "in time".to_owned(),
            };
            return CliError::TimedOut {
                server: self.server.clone(),
                doing: attempt.doing.to_owned(),
                waited,
            };
        }
        classify(attempt, error, &self.server, self.impersonating.as_deref())
    }
}

/// The prefix the API server puts on a validating webhook's denial.
const WEBHOOK_DENIAL: &str = "admission webhook ";

/// What went wrong with `attempt` (pure): driftgate's denial, RBAC's, a missing object, an
/// unreachable server, or another answer from the API server.
pub fn classify(
    attempt: Attempt<'_>,
    error: kube::Error,
    server: &str,
    impersonating: Option<&str>,
) -> CliError {
    let doing = attempt.doing.to_owned();
    let status = match error {
        kube::Error::Api(status) => status,
        kube::Error::Service(_) | kube::Error::HyperError(_) => {
            return CliError::Unreachable {
                server: server.to_owned(),
                cause: innermost_cause(&error),
            };
        }
        source => return CliError::Request { doing, source },
    };
    if status.message.starts_with(WEBHOOK_DENIAL) {
        return CliError::Refused {
            doing,
            message: status.message,
        };
    }
    if status.is_forbidden() {
        let denial = rbac_denial(&status.message);
        let user = denial
            .as_ref()
            .map(|d| d.user.clone())
            .or(impersonating.map(str::to_owned))
            .unwrap_or_else(|| "you".to_owned());
        // Refused impersonation is about --as, not about what the command asked for.
        if let Some(denial) = denial.filter(|d| d.verb == "impersonate") {
            return CliError::Forbidden {
                user,
                verb: denial.verb,
                resource: denial.resource,
                namespace: None,
            };
        }
        return CliError::Forbidden {
            user,
            verb: attempt.verb.to_owned(),
            resource: attempt.resource.to_owned(),
            namespace: attempt.namespace.map(str::to_owned),
        };
    }
    if status.is_not_found() {
        return match attempt.name {
            Some(name) => CliError::NotFound {
                kind: attempt.kind.to_owned(),
                name: name.to_owned(),
                namespace: attempt.namespace.map(str::to_owned),
            },
            None => CliError::NoSuchResource {
                resource: attempt.resource.to_owned(),
            },
        };
    }
    if status.is_invalid() {
        return CliError::Invalid {
            doing,
            message: status.message,
        };
    }
    CliError::ApiServer {
        doing,
        code: status.code,
        reason: status.reason,
        message: status.message,
    }
}

/// Whether a request failed because a timeout elapsed (--request-timeout's layer, or kube's
/// connect, read or write timeout), anywhere in its chain of causes.
fn timed_out(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(error);
    while let Some(error) = cause {
        if error.is::<tower::timeout::error::Elapsed>()
            || error.is::<tokio::time::error::Elapsed>()
            || error
                .downcast_ref::<std::io::Error>()
                .is_some_and(|e| e.kind() == std::io::ErrorKind::TimedOut)
        {
            return true;
        }
        cause = error.source();
    }
    false
}

/// The deepest cause of a transport error: "Connection refused (os error 111)" rather than
/// "ServiceError: client error (Connect)".
fn innermost_cause(error: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = error;
    while let Some(source) = cause.source() {
        cause = source;
    }
    cause.to_string()
}

/// The API server's RBAC denial, read from its message:
/// `... User "bob" cannot list resource "deployments" in API group "apps" ...`.
struct RbacDenial {
    user: String,
    verb: String,
    resource: String,
}

fn rbac_denial(message: &str) -> Option<RbacDenial> {
    let (_, after) = message.split_once("User \"")?;
    let (user, after) = after.split_once("\" cannot ")?;
    let (verb, after) = after.split_once(" resource \"")?;
    let (resource, _) = after.split_once('"')?;
    Some(RbacDenial {
        user: user.to_owned(),
        verb: verb.to_owned(),
        resource: resource.to_owned(),
    })
}

/// Where kube looked for a kubeconfig: a set `$KUBECONFIG` names files that could not be read,
/// which "no $KUBECONFIG" would hide.
fn kubeconfig_tried() -> String {
    match std::env::var_os("KUBECONFIG") {
        Some(value) if !value.is_empty() => format!(
            "$KUBECONFIG is {}, and no file it names can be read",
            value.to_string_lossy()
        ),
        _ => "no $KUBECONFIG, no ~/.kube/config".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    const ATTEMPT: Attempt<'static> = Attempt {
        doing: "opening the window",
        verb: "patch",
        resource: "deployments.apps",
        kind: "deployment",
        name: Some("api"),
        namespace: Some("prod"),
    };

    fn api(code: u16, reason: &str, message: &str) -> kube::Error {
        kube::Error::Api(Status::failure(message, reason).with_code(code).boxed())
    }

    #[test]
    fn rbac_is_a_sentence_naming_user_verb_resource_and_namespace() {
        let error = classify(
            ATTEMPT,
            api(
                403,
                "Forbidden",
                "deployments.apps \"api\" is forbidden: User \"bob\" cannot patch resource \"deployments\" in API group \"apps\" in the namespace \"prod\"",
            ),
            "https://k:6443",
            None,
        );
        assert_eq!(error.exit_code(), crate::cli::error::exit::FORBIDDEN);
        assert_eq!(
            error.to_string(),
            "bob may not patch deployments.apps in namespace prod: Kubernetes RBAC does not permit it. \
             Ask a cluster admin for a Role that grants it, or check --context and --as"
        );
    }

    #[test]
    fn driftgates_denial_is_a_refusal_not_rbac() {
        let message =
            "admission webhook \"gate.driftgate.dev\" denied the request: bob may not ...";
        let error = classify(ATTEMPT, api(403, "Forbidden", message), "https://k", None);
        assert_eq!(error.exit_code(), crate::cli::error::exit::REFUSED);
        assert_eq!(
            error.to_string(),
            format!("opening the window was refused: {message}")
        );
    }

    #[test]
    fn not_found_names_the_kind_name_and_namespace() {
        let error = classify(
            ATTEMPT,
            api(404, "NotFound", "deployments.apps \"api\" not found"),
            "https://k",
            None,
        );
        assert_eq!(error.exit_code(), crate::cli::error::exit::BAD_INPUT);
        assert_eq!(
            error.to_string(),
            "no such deployment \"api\" in namespace prod"
        );
    }

    #[test]
    fn refused_impersonation_names_impersonate_not_the_commands_verb() {
        let error = classify(
            ATTEMPT,
            api(
                403,
                "Forbidden",
                "users \"carol\" is forbidden: User \"bob\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope",
            ),
            "https://k",
            Some("carol"),
        );
        assert!(
            error
                .to_string()
                .starts_with("bob may not impersonate users: "),
            "{error}"
        );
    }

    #[test]
    fn an_unparsable_rbac_message_falls_back_to_the_impersonated_user() {
        let error = classify(
            ATTEMPT,
            api(403, "Forbidden", "nope"),
            "https://k",
            Some("carol"),
        );
        assert!(
            error.to_string().starts_with("carol may not patch"),
            "{error}"
        );
        let error = classify(ATTEMPT, api(403, "Forbidden", "nope"), "https://k", None);
        assert!(
            error.to_string().starts_with("you may not patch"),
            "{error}"
        );
    }

    #[test]
    fn other_answers_keep_the_code_and_message() {
        let error = classify(
            ATTEMPT,
            api(409, "Conflict", "the object has been modified"),
            "https://k",
            None,
        );
        assert_eq!(error.exit_code(), crate::cli::error::exit::FAILED);
        assert_eq!(
            error.to_string(),
            "opening the window failed: the API server answered 409 Conflict: the object has been modified"
        );
    }
}
