//! `driftgate break-glass open|close|list`: what an on-call engineer runs at 3am, with their own
//! kubeconfig. Opening sets the label (the expiry) and the reason in one request, so driftgate
//! sees both at once; driftgate's answer (a refusal, or the warnings) is shown as it is.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use jiff::{Timestamp, tz::TimeZone};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::discovery::{Discovery, Scope};
use serde_json::json;

use crate::error::{Error, Result};
use crate::policy::{DEFAULT_BREAK_GLASS_LABEL, DEFAULT_REASON_ANNOTATION};
use crate::timefmt::{WindowDuration, format_expiry, human_utc, parse_expiry};

/// The field manager of break-glass label changes: never a controller's.
pub const FIELD_MANAGER: &str = "driftgate-break-glass";

#[derive(Debug, Subcommand)]
pub enum BreakGlassCommand {
    /// Open (or extend) a window: `open deployment/api -n prod --for 90m --reason "INC-1: ..."`,
    /// or `open --namespace prod ...` for every object in the namespace.
    Open(OpenArgs),
    /// Close a window: the controller reconciles the object again.
    Close(TargetArgs),
    /// List open windows: on namespaces, and on objects of the kinds driftgate can find.
    List(ListArgs),
}

#[derive(Debug, Args)]
pub struct Connection {
    /// Kubeconfig to use (default: $KUBECONFIG, ~/.kube/config, in-cluster).
    #[arg(long, value_name = "FILE", global = true)]
    pub kubeconfig: Option<PathBuf>,
    /// The policy's break-glass label.
    #[arg(long, value_name = "KEY", default_value = DEFAULT_BREAK_GLASS_LABEL, global = true)]
    pub label: String,
    /// The policy's reason annotation.
    #[arg(long, value_name = "KEY", default_value = DEFAULT_REASON_ANNOTATION, global = true)]
    pub reason_annotation: String,
}

#[derive(Debug, Args)]
pub struct TargetArgs {
    /// KIND/NAME of the object (`deployment/api`, `deploy/api`, `configmaps/settings`,
    /// `deployment.apps/api`); leave out for a namespace-wide window.
    #[arg(value_name = "KIND/NAME")]
    pub target: Option<String>,
    /// The namespace (of the object, or the namespace-wide window).
    #[arg(short = 'n', long, value_name = "NS")]
    pub namespace: String,
    #[command(flatten)]
    pub connection: Connection,
}

#[derive(Debug, Args)]
pub struct OpenArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    /// How long the window stays open (at most the policy's maxDuration): 30m, 90m, 2h.
    #[arg(long = "for", value_name = "DURATION")]
    pub duration: String,
    /// Why: the incident and what you are about to change.
    #[arg(long, value_name = "TEXT")]
    pub reason: String,
}

/// `-n NS` or `-A`, as kubectl spells them.
#[derive(Debug, Args)]
pub struct NamespaceScope {
    /// Only this namespace.
    #[arg(
        short = 'n',
        long,
        value_name = "NS",
        conflicts_with = "all_namespaces"
    )]
    pub namespace: Option<String>,
    /// Every namespace (the default when -n is not given).
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub scope: NamespaceScope,
    #[command(flatten)]
    pub connection: Connection,
}

/// Short names kubectl users type, for the kinds break-glass is most used on.
fn expand_short_name(kind: &str) -> &str {
    match kind {
        "deploy" => "deployments",
        "sts" => "statefulsets",
        "ds" => "daemonsets",
        "rs" => "replicasets",
        "cm" => "configmaps",
        "svc" => "services",
        "ing" => "ingresses",
        "hpa" => "horizontalpodautoscalers",
        "cj" => "cronjobs",
        "sa" => "serviceaccounts",
        "pdb" => "poddisruptionbudgets",
        "netpol" => "networkpolicies",
        "ns" => "namespaces",
        other => other,
    }
}

/// Finds the API resource for `kind` as kubectl accepts it: kind, singular or plural, any
/// case, optionally `.group`.
pub fn resolve_kind(discovery: &Discovery, kind: &str) -> Option<ApiResource> {
    let kind = kind.to_lowercase();
    let (name, group) = match kind.split_once('.') {
        Some((name, group)) => (name.to_owned(), Some(group.to_owned())),
        None => (kind.clone(), None),
    };
    let name = expand_short_name(&name).to_owned();
    let mut found: Vec<ApiResource> = Vec::new();
    for api_group in discovery.groups() {
        if group.as_deref().is_some_and(|g| g != api_group.name()) {
            continue;
        }
        for (resource, _) in api_group.recommended_resources() {
            let kind_lower = resource.kind.to_lowercase();
            if resource.plural == name || kind_lower == name || format!("{kind_lower}s") == name {
                found.push(resource);
            }
        }
    }
    // Prefer the core group, then the most familiar groups, as kubectl does for `deployment`.
    found.sort_by_key(|r| match r.group.as_str() {
        "" => 0,
        "apps" => 1,
        "batch" | "networking.k8s.io" | "autoscaling" | "policy" => 2,
        _ => 3,
    });
    found.into_iter().next()
}

pub async fn client(connection: &Connection) -> Result<kube::Client> {
    let config = crate::kube_state::client_config(connection.kubeconfig.as_deref()).await?;
    crate::kube_state::client_for(config)
}

/// The object a command acts on: a named object, or the Namespace for a namespace-wide window.
async fn target_api(
    client: &kube::Client,
    target: &TargetArgs,
) -> Result<(Api<DynamicObject>, String, String)> {
    let Some(spec) = &target.target else {
        let resource = ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "Namespace"));
        return Ok((
            Api::all_with(client.clone(), &resource),
            target.namespace.clone(),
            format!("namespace {}", target.namespace),
        ));
    };
    let (kind, name) = spec.split_once('/').ok_or_else(|| {
        Error::Config(format!(
            "\"{spec}\" is not KIND/NAME; write e.g. deployment/api, or leave it out for a namespace-wide window"
        ))
    })?;
    let discovery = Discovery::new(client.clone())
        .run()
        .await
        .map_err(|e| Error::Config(format!("cannot discover the cluster's resources: {e}")))?;
    let resource = resolve_kind(&discovery, kind)
        .ok_or_else(|| Error::Config(format!("the cluster has no resource kind \"{kind}\"")))?;
    let namespaced = discovery
        .groups()
        .flat_map(|g| g.recommended_resources())
        .find(|(r, _)| r.plural == resource.plural && r.group == resource.group)
        .is_some_and(|(_, caps)| caps.scope == Scope::Namespaced);
    let api = if namespaced {
        Api::namespaced_with(client.clone(), &target.namespace, &resource)
    } else {
        Api::all_with(client.clone(), &resource)
    };
    let words = format!(
        "{}/{name} in namespace {}",
        resource.kind.to_lowercase(),
        target.namespace
    );
    Ok((api, name.to_owned(), words))
}

fn patch_params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    }
}

fn local(at: Timestamp) -> String {
    at.to_zoned(TimeZone::system())
        .strftime("%Y-%m-%d %H:%M %Z")
        .to_string()
}

/// Turns an API error into what the person needs: driftgate's refusal is the whole message.
fn api_error(what: &str, error: kube::Error) -> Error {
    match error {
        kube::Error::Api(status) => {
            Error::Config(format!("{what} was refused: {}", status.message))
        }
        other => Error::Config(format!("{what} failed: {other}")),
    }
}

pub async fn open(args: &OpenArgs, out: &mut impl std::io::Write) -> Result<()> {
    let duration =
        WindowDuration::parse(&args.duration).map_err(|e| Error::Config(format!("--for: {e}")))?;
    if args.reason.trim().is_empty() || crate::decision::is_placeholder_reason(&args.reason) {
        return Err(Error::Config(
            "--reason must say why, in your words, not the hint's placeholder (e.g. \"INC-123: api pods OOM, raising the memory limit\")"
                .into(),
        ));
    }
    let expiry = Timestamp::now()
        .checked_add(duration.as_signed())
        .map_err(|e| Error::Config(format!("--for: {e}")))?;
    // Whole seconds: the label format has no fractions.
    let expiry = Timestamp::from_second(expiry.as_second())
        .map_err(|e| Error::Config(format!("--for: {e}")))?;
    let value = format_expiry(expiry);
    let connection = &args.target.connection;
    let client = client(connection).await?;
    let (api, name, words) = target_api(&client, &args.target).await?;
    let patch = json!({"metadata": {
        "labels": {connection.label.as_str(): value},
        "annotations": {connection.reason_annotation.as_str(): args.reason},
    }});
    api.patch(&name, &patch_params(), &Patch::Merge(&patch))
        .await
        .map_err(|e| api_error("opening the window", e))?;
    let _ = writeln!(
        out,
        "break-glass window open on {words} until {} ({}, label {value}).\n\
         Every change you make in it must be backported to Git; close it with: driftgate break-glass close {}-n {}",
        local(expiry),
        human_utc(expiry),
        args.target
            .target
            .as_ref()
            .map(|t| format!("{t} "))
            .unwrap_or_default(),
        args.target.namespace,
    );
    Ok(())
}

pub async fn close(args: &TargetArgs, out: &mut impl std::io::Write) -> Result<()> {
    let client = client(&args.connection).await?;
    let (api, name, words) = target_api(&client, args).await?;
    let patch = json!({"metadata": {
        "labels": {args.connection.label.as_str(): null},
        "annotations": {args.connection.reason_annotation.as_str(): null},
    }});
    api.patch(&name, &patch_params(), &Patch::Merge(&patch))
        .await
        .map_err(|e| api_error("closing the window", e))?;
    let _ = writeln!(
        out,
        "break-glass window closed on {words}; the GitOps controller reconciles it again."
    );
    Ok(())
}

/// One open (or expired, not yet closed) window found on the cluster.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ListedWindow {
    pub namespace: String,
    pub object: String,
    pub expires: String,
    pub state: &'static str,
    pub reason: String,
}

pub async fn list(args: &ListArgs, out: &mut impl std::io::Write) -> Result<()> {
    let connection = &args.connection;
    let client = client(connection).await?;
    let discovery = Discovery::new(client.clone())
        .run()
        .await
        .map_err(|e| Error::Config(format!("cannot discover the cluster's resources: {e}")))?;
    let selector = ListParams::default().labels(&connection.label);
    let mut rows = Vec::new();
    let now = Timestamp::now();
    for group in discovery.groups() {
        for (resource, caps) in group.recommended_resources() {
            if !caps.supports_operation(kube::discovery::verbs::LIST) {
                continue;
            }
            let is_namespace = resource.group.is_empty() && resource.kind == "Namespace";
            let api: Api<DynamicObject> = match (&args.scope.namespace, caps.scope) {
                (_, Scope::Cluster) if !is_namespace => continue,
                (Some(ns), Scope::Namespaced) => {
                    Api::namespaced_with(client.clone(), ns, &resource)
                }
                _ => Api::all_with(client.clone(), &resource),
            };
            // Kinds the person may not list are skipped, as kubectl's get all does.
            let Ok(objects) = api.list_metadata(&selector).await else {
                continue;
            };
            for object in objects.items {
                let name = object.metadata.name.clone().unwrap_or_default();
                let namespace = if is_namespace {
                    name.clone()
                } else {
                    object.metadata.namespace.clone().unwrap_or_default()
                };
                if is_namespace
                    && args
                        .scope
                        .namespace
                        .as_ref()
                        .is_some_and(|ns| ns != &namespace)
                {
                    continue;
                }
                let labels = object.metadata.labels.unwrap_or_default();
                let value = labels.get(&connection.label).cloned().unwrap_or_default();
                let (expires, state) = match parse_expiry(&value) {
                    Ok(at) if at > now => (local(at), "open"),
                    Ok(at) => (local(at), "expired"),
                    Err(_) => (value.clone(), "invalid"),
                };
                rows.push(ListedWindow {
                    namespace,
                    object: if is_namespace {
                        "(whole namespace)".to_owned()
                    } else {
                        format!("{}/{name}", resource.kind.to_lowercase())
                    },
                    expires,
                    state,
                    reason: object
                        .metadata
                        .annotations
                        .unwrap_or_default()
                        .get(&connection.reason_annotation)
                        .cloned()
                        .unwrap_or_default(),
                });
            }
        }
    }
    rows.sort_by(|a, b| (&a.namespace, &a.object).cmp(&(&b.namespace, &b.object)));
    if rows.is_empty() {
        let _ = writeln!(out, "No break-glass windows.");
        return Ok(());
    }
    let _ = writeln!(
        out,
        "{:<20} {:<40} {:<8} {:<24} REASON",
        "NAMESPACE", "OBJECT", "STATE", "EXPIRES"
    );
    for row in rows {
        let _ = writeln!(
            out,
            "{:<20} {:<40} {:<8} {:<24} {}",
            row.namespace, row.object, row.state, row.expires, row.reason
        );
    }
    Ok(())
}
