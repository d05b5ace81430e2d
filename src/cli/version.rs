//! `driftgate version`: this binary's version and, when a cluster is reachable, the version of
//! the driftgate running there, read from its Deployment (the chart's labels and image), so it
//! needs no route on the webhook server and only `get`/`list` on Deployments in one namespace.

use std::io::Write;
use std::time::Duration;

use clap::{Args, ValueEnum};
use k8s_openapi::api::apps::v1::Deployment;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use serde::Serialize;

use crate::cli::cluster::{Attempt, ConnectionArgs, cluster_for, config};
use crate::cli::error::CliError;

/// The chart's selector labels for the webhook's Deployment.
const DEPLOYMENT_SELECTOR: &str =
    "app.kubernetes.io/name=driftgate,app.kubernetes.io/component=admission-webhook";
/// The chart's label for the app version of a release.
const VERSION_LABEL: &str = "app.kubernetes.io/version";
/// An unreachable API server must not hang a command that is useful without it.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, Args)]
pub struct VersionArgs {
    #[command(flatten)]
    pub connection: ConnectionArgs,
    /// The namespace driftgate is installed in.
    #[arg(
        short = 'n',
        long,
        value_name = "NS",
        default_value = "driftgate-system"
    )]
    pub namespace: String,
    /// Print only this binary's version; do not contact a cluster.
    #[arg(long)]
    pub client: bool,
    #[arg(short = 'o', long, value_enum, default_value = "text")]
    pub output: VersionFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum VersionFormat {
    Text,
    Json,
    Yaml,
}

/// This binary's build.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClientVersion {
    pub version: String,
    /// Set at build time through DRIFTGATE_GIT_REVISION (release builds), absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub git_revision: Option<String>,
}

impl ClientVersion {
    pub fn of_this_build() -> Self {
        Self {
            version: env!("CARGO_PKG_VERSION").to_owned(),
            git_revision: option_env!("DRIFTGATE_GIT_REVISION")
                .filter(|r| !r.is_empty())
                .map(str::to_owned),
        }
    }
}

/// One driftgate Deployment found in the cluster.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ServerVersion {
    pub namespace: String,
    pub deployment: String,
    /// The chart's app version label, absent when the Deployment does not carry it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    pub image: String,
    pub ready_replicas: i32,
    pub replicas: i32,
}

/// What `driftgate version` prints: the server part is either versions or why there are none.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct VersionReport {
    pub client: ClientVersion,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<Vec<ServerVersion>>,
    /// Why the server's version is missing (unreachable, forbidden, not installed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_note: Option<String>,
}

/// Why the server's version could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ServerLookupError {
    #[error("cannot connect to a cluster: {0}")]
    Connect(#[source] CliError),
    /// The API server's answer as a sentence (unreachable, RBAC), not kube's debug dump.
    #[error("{0}")]
    List(#[source] CliError),
}

/// The versions of the driftgate Deployments among `deployments` (pure).
pub fn server_versions(deployments: &[Deployment]) -> Vec<ServerVersion> {
    deployments
        .iter()
        .map(|deployment| {
            let spec = deployment.spec.as_ref();
            let container = spec
                .and_then(|s| s.template.spec.as_ref())
                .and_then(|pod| pod.containers.iter().find(|c| c.name == "driftgate"));
            let status = deployment.status.as_ref();
            ServerVersion {
                namespace: deployment.namespace().unwrap_or_default(),
                deployment: deployment.name_any(),
                version: deployment.labels().get(VERSION_LABEL).cloned(),
                image: container
                    .and_then(|c| c.image.clone())
                    .unwrap_or_else(|| "(no driftgate container)".to_owned()),
                ready_replicas: status.and_then(|s| s.ready_replicas).unwrap_or(0),
                // Kubernetes defaults an unset replicas to 1.
                replicas: spec.and_then(|s| s.replicas).unwrap_or(1),
            }
        })
        .collect()
}

/// The report from the client and the outcome of the server lookup, its failure in words
/// (pure).
pub fn report(
    client: ClientVersion,
    namespace: &str,
    lookup: Option<Result<Vec<ServerVersion>, String>>,
) -> VersionReport {
    let (server, server_note) = match lookup {
        None => (None, None),
        Some(Ok(servers)) if servers.is_empty() => (
            None,
            Some(format!(
                "no driftgate Deployment in namespace {namespace} \
                 (installed elsewhere? pass -n NAMESPACE)"
            )),
        ),
        Some(Ok(servers)) => (Some(servers), None),
        Some(Err(note)) => (None, Some(note)),
    };
    VersionReport {
        client,
        server,
        server_note,
    }
}

/// The report as text, JSON or YAML.
pub fn render(report: &VersionReport, format: VersionFormat) -> String {
    match format {
        VersionFormat::Json => {
            let mut json = serde_json::to_string_pretty(report).expect("a report serializes");
            json.push('\n');
            json
        }
        VersionFormat::Yaml => serde_saphyr::to_string(report).expect("a report serializes"),
        VersionFormat::Text => render_text(report),
    }
}

fn render_text(report: &VersionReport) -> String {
    let mut text = format!("Client Version: {}", report.client.version);
    if let Some(revision) = &report.client.git_revision {
        text.push_str(&format!(" (git {revision})"));
    }
    text.push('\n');
    for server in report.server.iter().flatten() {
        text.push_str(&format!(
            "Server Version: {} (deployment {}/{}, image {}, {}/{} ready)\n",
            server.version.as_deref().unwrap_or("unknown"),
            server.namespace,
            server.deployment,
            server.image,
            server.ready_replicas,
            server.replicas,
        ));
    }
    if let Some(note) = &report.server_note {
        text.push_str(&format!("Note: {note}\n"));
    }
    text
}

async fn lookup_servers(args: &VersionArgs) -> Result<Vec<ServerVersion>, ServerLookupError> {
    let mut config = config(&args.connection)
        .await
        .map_err(ServerLookupError::Connect)?;
    config.connect_timeout = Some(CONNECT_TIMEOUT);
    let cluster = cluster_for(config, &args.connection).map_err(ServerLookupError::Connect)?;
    let deployments: Api<Deployment> = Api::namespaced(cluster.client.clone(), &args.namespace);
    let attempt = Attempt {
        doing: "listing driftgate's Deployments",
        verb: "list",
        resource: "deployments.apps",
        kind: "deployment",
        name: None,
        namespace: Some(&args.namespace),
    };
    let listed = deployments
        .list(&ListParams::default().labels(DEPLOYMENT_SELECTOR))
        .await
        .map_err(|e| ServerLookupError::List(cluster.error(attempt, e)))?;
    Ok(server_versions(&listed.items))
}

/// Prints the report. As `kubectl version`: the client's version is printed whatever happens,
/// and a server version that cannot be read (no configuration, unreachable, RBAC) fails the
/// command with its sentence and exit code; none installed is a note, and exit 0.
pub async fn run(args: &VersionArgs, out: &mut impl Write) -> Result<(), CliError> {
    let lookup = if args.client {
        None
    } else {
        Some(lookup_servers(args).await)
    };
    let (lookup, failure) = match lookup {
        Some(Err(error)) => {
            let note = format!("server version unavailable: {error}");
            let cause = match error {
                ServerLookupError::Connect(cause) | ServerLookupError::List(cause) => cause,
            };
            (Some(Err(note)), Some(cause))
        }
        Some(Ok(servers)) => (Some(Ok(servers)), None),
        None => (None, None),
    };
    let mut report = report(ClientVersion::of_this_build(), &args.namespace, lookup);
    // The failure goes to standard error; in JSON and YAML it stays beside the client's version.
    if failure.is_some() && args.output == VersionFormat::Text {
        report.server_note = None;
    }
    let _ = write!(out, "{}", render(&report, args.output));
    let _ = out.flush();
    failure.map_or(Ok(()), Err)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment(yaml: &str) -> Deployment {
        serde_saphyr::from_str(yaml).expect("a Deployment")
    }

    const RELEASE: &str = "
apiVersion: apps/v1
kind: Deployment
metadata:
  name: driftgate
  namespace: driftgate-system
  labels: {app.kubernetes.io/version: \"0.1.0\"}
spec:
  replicas: 2
  selector: {matchLabels: {app: x}}
  template:
    spec:
      containers:
        - {name: sidecar, image: other:1}
        - {name: driftgate, image: ghcr.io/example/driftgate:0.1.0}
status: {readyReplicas: 1}
";

    fn client() -> ClientVersion {
        ClientVersion {
            version: "0.1.0".into(),
            git_revision: Some("abc123".into()),
        }
    }

    #[test]
    fn reads_version_image_and_readiness_from_the_driftgate_container() {
        let servers = server_versions(&[deployment(RELEASE)]);
        assert_eq!(
            servers,
            vec![ServerVersion {
                namespace: "driftgate-system".into(),
                deployment: "driftgate".into(),
                version: Some("0.1.0".into()),
                image: "ghcr.io/example/driftgate:0.1.0".into(),
                ready_replicas: 1,
                replicas: 2,
            }]
        );
        let text = render(
            &report(client(), "driftgate-system", Some(Ok(servers))),
            VersionFormat::Text,
        );
        assert_eq!(
            text,
            "Client Version: 0.1.0 (git abc123)\n\
             Server Version: 0.1.0 (deployment driftgate-system/driftgate, \
             image ghcr.io/example/driftgate:0.1.0, 1/2 ready)\n"
        );
    }

    #[test]
    fn no_deployment_is_a_note_naming_the_namespace() {
        let report = report(client(), "gate", Some(Ok(vec![])));
        assert_eq!(report.server, None);
        let note = report.server_note.as_deref().unwrap();
        assert!(note.contains("namespace gate"), "{note}");
        assert!(note.contains("pass -n NAMESPACE"), "{note}");
    }

    #[test]
    fn client_only_has_no_server_part_in_any_format() {
        let report = report(client(), "gate", None);
        let json: serde_json::Value =
            serde_json::from_str(&render(&report, VersionFormat::Json)).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"client": {"version": "0.1.0", "gitRevision": "abc123"}})
        );
        let yaml = render(&report, VersionFormat::Yaml);
        let parsed: serde_json::Value = serde_saphyr::from_str(&yaml).unwrap();
        assert_eq!(parsed, json);
    }
}
