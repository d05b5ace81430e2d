//! `driftgate break-glass open|close|list`: what an on-call engineer runs at 3am, with their own
//! kubeconfig. Opening sets the label (the expiry) and the reason in one request, so driftgate
//! sees both at once; driftgate's answer (a refusal, or the warnings) is shown as it is.

use std::io::Write;

use clap::{Args, Subcommand};
use jiff::{Timestamp, tz::TimeZone};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::discovery::{ApiCapabilities, Discovery, Scope};
use serde::Serialize;
use serde_json::json;

use crate::cli::cluster::{Attempt, Cluster, ConnectionArgs, connect};
use crate::cli::error::CliError;
use crate::cli::output::{Listed, OutputArgs, OutputFormat, render};
use driftgate_core::policy::{DEFAULT_BREAK_GLASS_LABEL, DEFAULT_REASON_ANNOTATION};
use driftgate_core::text::{MAX_NAME_CHARS, MAX_REASON_CHARS, echo};
use driftgate_core::timefmt::{WindowDuration, format_expiry, human_utc};
use driftgate_core::window::{WindowKeys, WindowScope, WindowState, window_state};

/// The field manager of break-glass label changes: never a controller's.
pub const FIELD_MANAGER: &str = "driftgate-break-glass";

/// `break-glass` and its subcommand. `-n` is taken before the subcommand too (`break-glass -n
/// prod list`), as kubectl takes its flags anywhere; given in both places, the later wins.
#[derive(Debug, Args)]
pub struct BreakGlassArgs {
    #[command(subcommand)]
    pub command: BreakGlassCommand,
    /// The namespace, for the subcommand that follows.
    #[arg(short = 'n', long, value_name = "NS")]
    pub namespace: Option<String>,
}

impl BreakGlassArgs {
    /// The subcommand, with the `-n` given before it where it has none of its own.
    pub fn into_command(self) -> BreakGlassCommand {
        let mut command = self.command;
        let own = match &mut command {
            BreakGlassCommand::Open(args) => &mut args.target.namespace,
            BreakGlassCommand::Close(args) => &mut args.namespace,
            BreakGlassCommand::List(args) => &mut args.scope.namespace,
        };
        if own.is_none() {
            own.clone_from(&self.namespace);
        }
        command
    }
}

#[derive(Debug, Subcommand)]
pub enum BreakGlassCommand {
    /// Open (or extend) a window: `open deployment/api -n prod --for 90m --reason "INC-1: ..."`,
    /// or `open namespace/prod ...` for every object in the namespace.
    Open(OpenArgs),
    /// Close a window (`close deployment/api -n prod`, `close namespace/prod`): the controller
    /// reconciles the object again.
    Close(TargetArgs),
    /// List open windows: on namespaces, and on objects of the kinds driftgate can find.
    List(ListArgs),
}

/// The policy's break-glass keys, for every break-glass command.
#[derive(Debug, Args)]
pub struct BreakGlassKeys {
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
    /// `deployment.apps/api`), or `namespace/NAME` for the namespace-wide window: the window is
    /// a label on the Namespace object itself, so it is named as `kubectl label namespace/NAME`
    /// names it, and a forgotten KIND/NAME is refused rather than widened to every object.
    #[arg(value_name = "KIND/NAME")]
    pub target: Option<String>,
    /// The namespace of the object; default: the context's.
    #[arg(short = 'n', long, value_name = "NS")]
    pub namespace: Option<String>,
    #[command(flatten)]
    pub connection: ConnectionArgs,
    #[command(flatten)]
    pub keys: BreakGlassKeys,
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
    /// Show what would be labelled (object, label, value, reason annotation) and change
    /// nothing. `server` (the default, as kubectl's `--dry-run=server`) sends the write with
    /// the API server's dryRun, so admission runs (driftgate's webhook answers dry runs: its
    /// refusal or warnings are shown) and nothing is stored; `client` sends no write, only
    /// looks the object up.
    #[arg(
        long,
        value_name = "STRATEGY",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "server"
    )]
    pub dry_run: Option<DryRun>,
}

/// kubectl's `--dry-run` strategies that change nothing (`none` is leaving the flag out).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DryRun {
    /// The API server runs the write, admission included, and stores nothing.
    Server,
    /// Nothing is written: the object is only looked up.
    Client,
}

/// `-n NS` or `-A`, as kubectl spells them.
#[derive(Debug, Args)]
pub struct NamespaceScope {
    /// Only this namespace (default: the kubeconfig context's, as kubectl get).
    #[arg(
        short = 'n',
        long,
        value_name = "NS",
        conflicts_with = "all_namespaces"
    )]
    pub namespace: Option<String>,
    /// Every namespace.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
}

impl NamespaceScope {
    /// The namespace to list, `None` for all: -A, else -n, else the context's (kubectl's rule).
    pub fn namespace(&self, cluster: &Cluster) -> Option<String> {
        if self.all_namespaces {
            return None;
        }
        Some(cluster.namespace_or(self.namespace.as_ref()))
    }
}

#[derive(Debug, Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub scope: NamespaceScope,
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub connection: ConnectionArgs,
    #[command(flatten)]
    pub keys: BreakGlassKeys,
    /// The policy's maxDuration (30m, 4h, 1d). A window ending later than that from now (and
    /// the webhook's 60 s clock tolerance) is listed `too-long`: the webhook admits no write
    /// under it. Without it, the listing cannot know the policy and calls such a window open.
    #[arg(long, value_name = "DURATION", value_parser = parse_max_duration)]
    pub max_duration: Option<WindowDuration>,
}

fn parse_max_duration(value: &str) -> Result<WindowDuration, String> {
    WindowDuration::parse(value).map_err(|e| e.to_string())
}

/// What a command names, checked before connecting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// `namespace/NAME`: the namespace-wide window, on the Namespace itself.
    Namespace(String),
    Object {
        kind: String,
        name: String,
    },
}

/// `KIND/NAME`; `namespace/NAME` (`ns/`, `namespaces/`) is the Namespace (pure).
pub fn parse_target(spec: &str) -> Result<Target, CliError> {
    let syntax = || CliError::TargetSyntax {
        target: spec.to_owned(),
    };
    let (kind, name) = spec.split_once('/').ok_or_else(syntax)?;
    if kind.is_empty() || name.is_empty() || name.contains('/') {
        return Err(syntax());
    }
    if matches!(
        kind.to_lowercase().as_str(),
        "namespace" | "namespaces" | "ns"
    ) {
        return Ok(Target::Namespace(name.to_owned()));
    }
    Ok(Target::Object {
        kind: kind.to_owned(),
        name: name.to_owned(),
    })
}

/// What `break-glass open|close` acts on, and in which namespace (pure): KIND/NAME is
/// required, since leaving it out once meant the whole namespace; `-n` beside
/// `namespace/NAME` must name the same namespace.
pub fn window_target(
    args: &TargetArgs,
    program: &'static str,
    command: &'static str,
) -> Result<(Target, Option<String>), CliError> {
    let Some(spec) = args.target.as_deref() else {
        return Err(CliError::NoTarget {
            program,
            command,
            namespace: args.namespace.clone().unwrap_or_else(|| "NS".to_owned()),
        });
    };
    let target = parse_target(spec)?;
    if let (Target::Namespace(name), Some(namespace)) = (&target, &args.namespace)
        && name != namespace
    {
        return Err(CliError::NamespaceMismatch {
            target: spec.to_owned(),
            namespace: namespace.clone(),
        });
    }
    Ok((target, args.namespace.clone()))
}

/// The arguments that name the window's object again, for the commands a hint prints (pure):
/// `deployment/api -n prod`, `namespace/prod`, `clusterrole/viewer`.
pub fn target_args(target: &Target, namespace: Option<&str>) -> String {
    match (target, namespace) {
        (Target::Namespace(name), _) => format!("namespace/{name}"),
        (Target::Object { kind, name }, Some(ns)) => format!("{kind}/{name} -n {ns}"),
        (Target::Object { kind, name }, None) => format!("{kind}/{name}"),
    }
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
    resolve_kind_and_scope(discovery, kind).map(|(resource, _)| resource)
}

/// [`resolve_kind`], with what discovery says of the resource (its scope, its verbs).
pub fn resolve_kind_and_scope(
    discovery: &Discovery,
    kind: &str,
) -> Option<(ApiResource, ApiCapabilities)> {
    let kind = kind.to_lowercase();
    let (name, group) = match kind.split_once('.') {
        Some((name, group)) => (name.to_owned(), Some(group.to_owned())),
        None => (kind.clone(), None),
    };
    let name = expand_short_name(&name).to_owned();
    let mut found: Vec<(ApiResource, ApiCapabilities)> = Vec::new();
    for api_group in discovery.groups() {
        if group.as_deref().is_some_and(|g| g != api_group.name()) {
            continue;
        }
        for (resource, capabilities) in api_group.recommended_resources() {
            let kind_lower = resource.kind.to_lowercase();
            if resource.plural == name || kind_lower == name || format!("{kind_lower}s") == name {
                found.push((resource, capabilities));
            }
        }
    }
    // Prefer the core group, then the most familiar groups, as kubectl does for `deployment`.
    found.sort_by_key(|(r, _)| match r.group.as_str() {
        "" => 0,
        "apps" => 1,
        "batch" | "networking.k8s.io" | "autoscaling" | "policy" => 2,
        _ => 3,
    });
    found.into_iter().next()
}

/// The object a command acts on, found in the cluster, with the words its messages use.
pub(crate) struct Located {
    pub(crate) api: Api<DynamicObject>,
    name: String,
    /// `deployment/api in namespace prod`, `namespace prod`.
    pub(crate) words: String,
    /// RBAC's name for the resource: `deployments.apps`, `namespaces`.
    resource: String,
    /// `deployment`, `namespace`.
    kind: String,
    /// The namespace of a namespaced object; none for the Namespace itself.
    namespace: Option<String>,
    /// An object of a cluster-scoped kind other than Namespace (a ClusterRole): -n does not
    /// apply to it.
    cluster_scoped: bool,
    /// The resource as discovery serves it (group and Kind).
    pub(crate) served: ApiResource,
}

impl Located {
    pub(crate) fn attempt<'a>(&'a self, doing: &'a str) -> Attempt<'a> {
        Attempt {
            doing,
            verb: "patch",
            resource: &self.resource,
            kind: &self.kind,
            name: Some(&self.name),
            namespace: self.namespace.as_deref(),
        }
    }

    /// The object as it is now (`doing` says why, in an error).
    pub(crate) async fn read(
        &self,
        cluster: &Cluster,
        doing: &str,
    ) -> Result<DynamicObject, CliError> {
        self.api.get(&self.name).await.map_err(|e| {
            cluster.error(
                Attempt {
                    verb: "get",
                    ..self.attempt(doing)
                },
                e,
            )
        })
    }
}

/// RBAC's and kubectl's name for a resource: `deployments.apps`, `configmaps`.
fn resource_name(resource: &ApiResource) -> String {
    if resource.group.is_empty() {
        resource.plural.clone()
    } else {
        format!("{}.{}", resource.plural, resource.group)
    }
}

/// The cluster's resources from aggregated discovery, as kubectl reads them: two requests, one
/// consistent answer. Discovery group by group (for an API server without it) fails as a whole
/// when one group's document is not served yet, as for a CRD being established.
async fn discover(cluster: &Cluster) -> Result<Discovery, CliError> {
    let aggregated = Discovery::new(cluster.client.clone())
        .run_aggregated()
        .await;
    if let Ok(discovery) = aggregated {
        return Ok(discovery);
    }
    Discovery::new(cluster.client.clone())
        .run()
        .await
        .map_err(|e| {
            cluster.error(
                Attempt {
                    doing: "discovering the cluster's resources",
                    verb: "get",
                    resource: "the API discovery documents",
                    kind: "API group",
                    name: None,
                    namespace: None,
                },
                e,
            )
        })
}

/// Finds `target` in `namespace`: the Namespace itself, or the named object's resource.
pub(crate) async fn locate(
    cluster: &Cluster,
    target: &Target,
    namespace: &str,
) -> Result<Located, CliError> {
    let Target::Object { kind, name } = target else {
        let namespace = match target {
            Target::Namespace(name) => name,
            Target::Object { .. } => namespace,
        };
        let resource = ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "Namespace"));
        return Ok(Located {
            api: Api::all_with(cluster.client.clone(), &resource),
            name: namespace.to_owned(),
            words: format!("namespace {namespace}"),
            resource: "namespaces".to_owned(),
            kind: "namespace".to_owned(),
            namespace: None,
            cluster_scoped: false,
            served: resource,
        });
    };
    let discovery = discover(cluster).await?;
    let resource = resolve_kind(&discovery, kind)
        .ok_or_else(|| CliError::UnknownKind { kind: kind.clone() })?;
    let namespaced = discovery
        .groups()
        .flat_map(|g| g.recommended_resources())
        .find(|(r, _)| r.plural == resource.plural && r.group == resource.group)
        .is_some_and(|(_, caps)| caps.scope == Scope::Namespaced);
    let api = if namespaced {
        Api::namespaced_with(cluster.client.clone(), namespace, &resource)
    } else {
        Api::all_with(cluster.client.clone(), &resource)
    };
    let kind_word = resource.kind.to_lowercase();
    let words = if namespaced {
        format!("{kind_word}/{name} in namespace {namespace}")
    } else {
        format!("{kind_word}/{name} (cluster-scoped)")
    };
    Ok(Located {
        api,
        name: name.clone(),
        words,
        resource: resource_name(&resource),
        kind: kind_word,
        namespace: namespaced.then(|| namespace.to_owned()),
        cluster_scoped: !namespaced,
        served: resource,
    })
}

fn patch_params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    }
}

/// Merge-patches the located object and returns the API server's warnings (driftgate's words
/// about the window), which kube's typed calls do not return.
pub(crate) async fn patch_reading_warnings(
    cluster: &Cluster,
    located: &Located,
    patch: &serde_json::Value,
) -> Result<Vec<String>, kube::Error> {
    patch_with(cluster, located, patch, false).await
}

/// [`patch_reading_warnings`], as a server-side dry run when `dry_run` (admission runs, nothing
/// is stored).
async fn patch_with(
    cluster: &Cluster,
    located: &Located,
    patch: &serde_json::Value,
    dry_run: bool,
) -> Result<Vec<String>, kube::Error> {
    let params = PatchParams {
        dry_run,
        ..patch_params()
    };
    let request = kube::core::Request::new(located.api.resource_url())
        .patch(&located.name, &params, &Patch::Merge(patch))
        .map_err(kube::Error::BuildRequest)?;
    let response = cluster
        .client
        .send(request.map(kube::client::Body::from))
        .await?;
    let warnings = response
        .headers()
        .get_all("warning")
        .iter()
        .filter_map(|value| warning_text(&String::from_utf8_lossy(value.as_bytes())))
        .collect();
    let code = response.status();
    if code.is_client_error() || code.is_server_error() {
        let body = response.into_body().collect_bytes().await?;
        let status = serde_json::from_slice::<kube::core::Status>(&body).unwrap_or_else(|_| {
            kube::core::Status::failure(&String::from_utf8_lossy(&body), "")
                .with_code(code.as_u16())
        });
        return Err(kube::Error::Api(status.boxed()));
    }
    Ok(warnings)
}

/// The text of a `Warning` header, `299 - "text"` with `\"` and `\\` escaped (pure).
pub fn warning_text(header: &str) -> Option<String> {
    let (_code, rest) = header.split_once(' ')?;
    let (_agent, quoted) = rest.split_once(' ')?;
    let mut chars = quoted.strip_prefix('"')?.chars();
    let mut text = String::new();
    while let Some(c) = chars.next() {
        match c {
            '\\' => text.push(chars.next()?),
            '"' => return Some(text),
            c => text.push(c),
        }
    }
    None
}

pub(crate) fn local(at: Timestamp) -> String {
    at.to_zoned(TimeZone::system())
        .strftime("%Y-%m-%d %H:%M %Z")
        .to_string()
}

/// The expiry of a window opened now for `duration`, in whole seconds (the label has no
/// fractions).
pub(crate) fn expiry_after(duration: &str, now: Timestamp) -> Result<Timestamp, CliError> {
    let window = WindowDuration::parse(duration).map_err(CliError::Duration)?;
    let too_far = |_| CliError::DurationTooFar {
        value: duration.to_owned(),
    };
    let expiry = now.checked_add(window.as_signed()).map_err(too_far)?;
    Timestamp::from_second(expiry.as_second()).map_err(too_far)
}

/// `headline`, then driftgate's warnings one per line, or, when it sent none, what that may
/// mean (`when_none`): the start of what `open` and `suspend` print.
pub(crate) fn headline_and_warnings(
    headline: String,
    warnings: &[String],
    when_none: &str,
) -> String {
    let mut text = headline + "\n";
    for warning in warnings {
        text.push_str(&driftgate_core::text::warning(warning.clone()));
        text.push('\n');
    }
    if warnings.is_empty() {
        text.push_str(&format!("driftgate sent no warning: {when_none}.\n"));
    }
    text
}

/// What `open` prints once the window is open (pure): until when, driftgate's own words about
/// it (that the controller is held off), what happens at expiry, how to extend, what follows.
/// `close` names the object for `break-glass close` ([`target_args`]); `namespace` is None for
/// a cluster-scoped object, whose record driftgate keeps in its own namespace.
pub fn opened_message(
    program: &str,
    words: &str,
    close: &str,
    namespace: Option<&str>,
    expiry: (String, String),
    warnings: &[String],
) -> String {
    let (local, utc) = expiry;
    let (guards, backlog) = match namespace {
        Some(ns) => (format!("namespace {ns}"), format!("-n {ns}")),
        None => (
            format!(
                "{} objects (policy clusterScoped)",
                words.split('/').next().unwrap_or(words)
            ),
            "-A".to_owned(),
        ),
    };
    let mut text = headline_and_warnings(
        format!("break-glass window open on {words} until {local} ({utc})."),
        warnings,
        &format!("check that its webhook guards {guards}, or nothing is held off"),
    );
    text.push_str(
        "At expiry the controller reconciles it back to Git, undoing what was not backported; run this command again to extend the window.\n",
    );
    text.push_str(&format!(
        "Next: `{program} backlog {backlog}` lists what must be backported; `{program} break-glass close {close}` ends the window early.\n"
    ));
    text
}

/// The namespace `target` is in: the Namespace's own name, else -n, else the context's.
fn namespace_of(cluster: &Cluster, target: &Target, given: Option<&String>) -> String {
    match target {
        Target::Namespace(name) => name.clone(),
        Target::Object { .. } => cluster.namespace_or(given),
    }
}

/// What a dry run of `open` prints (pure): the object, the label and its value, the reason
/// annotation, then driftgate's answer when the API server ran admission (`server`).
pub fn dry_run_message(
    program: &str,
    words: &str,
    mode: DryRun,
    keys: &BreakGlassKeys,
    (value, until): (&str, String),
    reason: &str,
    warnings: &[String],
) -> String {
    let how = match mode {
        DryRun::Server => {
            "server dry run: admitted, with every admission webhook asked; nothing was stored"
        }
        DryRun::Client => "client dry run: nothing was sent but a lookup, and no webhook was asked",
    };
    let mut text = format!(
        "break-glass window would open on {words} ({how}):\n  label       {}={value}   (until {until})\n  annotation  {}={}\n",
        keys.label,
        keys.reason_annotation,
        echo(reason, MAX_REASON_CHARS),
    );
    if mode == DryRun::Server {
        for warning in warnings {
            text.push_str(&driftgate_core::text::warning(warning.clone()));
            text.push('\n');
        }
        if warnings.is_empty() {
            text.push_str("driftgate sent no warning: check that its webhook guards this object, or nothing would be held off.\n");
        }
    }
    text.push_str(&format!(
        "Run it again without --dry-run to open the window (`{program} break-glass open ... --for ... --reason ...`).\n"
    ));
    text
}

pub async fn open(
    args: &OpenArgs,
    program: &'static str,
    out: &mut impl Write,
) -> Result<(), CliError> {
    let expiry = expiry_after(&args.duration, Timestamp::now())?;
    if args.reason.trim().is_empty()
        || driftgate_core::decision::is_placeholder_reason(&args.reason)
    {
        return Err(CliError::Reason);
    }
    let (target, given) = window_target(&args.target, program, "open")?;
    let cluster = connect(&args.target.connection).await?;
    let namespace = namespace_of(&cluster, &target, given.as_ref());
    let located = locate(&cluster, &target, &namespace).await?;
    let keys = &args.target.keys;
    let value = format_expiry(expiry);
    let patch = json!({"metadata": {
        "labels": {keys.label.as_str(): value},
        "annotations": {keys.reason_annotation.as_str(): args.reason},
    }});
    if let Some(mode) = args.dry_run {
        let warnings = match mode {
            DryRun::Server => patch_with(&cluster, &located, &patch, true)
                .await
                .map_err(|e| cluster.error(located.attempt("opening the window (dry run)"), e))?,
            DryRun::Client => {
                located
                    .read(&cluster, "looking up the window's object (dry run)")
                    .await?;
                Vec::new()
            }
        };
        let message = dry_run_message(
            program,
            &located.words,
            mode,
            keys,
            (&value, human_utc(expiry)),
            &args.reason,
            &warnings,
        );
        let _ = write!(out, "{message}");
        return Ok(());
    }
    let warnings = patch_reading_warnings(&cluster, &located, &patch)
        .await
        .map_err(|e| cluster.error(located.attempt("opening the window"), e))?;
    let in_namespace = (!located.cluster_scoped).then_some(namespace.as_str());
    let message = opened_message(
        program,
        &located.words,
        &target_args(&target, in_namespace),
        in_namespace,
        (local(expiry), human_utc(expiry)),
        &warnings,
    );
    let _ = write!(out, "{message}");
    Ok(())
}

pub async fn close(
    args: &TargetArgs,
    program: &'static str,
    out: &mut impl Write,
) -> Result<(), CliError> {
    let (target, given) = window_target(args, program, "close")?;
    let cluster = connect(&args.connection).await?;
    let namespace = namespace_of(&cluster, &target, given.as_ref());
    let located = locate(&cluster, &target, &namespace).await?;
    let patch = json!({"metadata": {
        "labels": {args.keys.label.as_str(): null},
        "annotations": {args.keys.reason_annotation.as_str(): null},
    }});
    patch_reading_warnings(&cluster, &located, &patch)
        .await
        .map_err(|e| cluster.error(located.attempt("closing the window"), e))?;
    let _ = writeln!(
        out,
        "break-glass window closed on {}; the GitOps controller reconciles it again.",
        located.words
    );
    Ok(())
}

/// One open (or expired, not yet closed) window found on the cluster.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ListedWindow {
    pub namespace: String,
    /// `deployment/api`, or `(whole namespace)`.
    pub object: String,
    pub kind: String,
    /// The API group, empty for the core group.
    pub group: String,
    pub name: String,
    /// open, expired, too-long (ends later than `--max-duration` from now: the webhook admits
    /// no write under it), or invalid (the label is not an expiry): the webhook's reading.
    pub state: &'static str,
    /// The expiry in local time (the label's value when it is not an expiry).
    pub expires: String,
    /// The expiry in UTC, RFC 3339; absent when the label is not an expiry.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// The break-glass label's value.
    pub label: String,
    pub reason: String,
    /// For a label that holds no window any more (expired, or not an expiry): the command that
    /// removes it. Anyone who may write the object may run it; it needs no opener.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remove_with: Option<String>,
}

impl ListedWindow {
    /// Whether the label holds no window any more (past its expiry, or not an expiry), so that
    /// anyone who may write the object may remove it. A window longer than maxDuration has not
    /// ended: closing it stays an opener's act, as the webhook judges it.
    fn lingers(&self) -> bool {
        matches!(self.state, "expired" | "invalid")
    }
}

impl Listed for ListedWindow {
    fn headers(wide: bool) -> Vec<&'static str> {
        if wide {
            vec![
                "NAMESPACE",
                "OBJECT",
                "STATE",
                "EXPIRES",
                "EXPIRES-UTC",
                "LABEL",
                "REASON",
            ]
        } else {
            vec!["NAMESPACE", "OBJECT", "STATE", "EXPIRES", "REASON"]
        }
    }

    fn cells(&self, wide: bool) -> Vec<String> {
        let reason = echo(&self.reason, MAX_REASON_CHARS).into_owned();
        let mut cells = vec![
            self.namespace.clone(),
            self.object.clone(),
            self.state.to_owned(),
            self.expires.clone(),
        ];
        if wide {
            cells.push(self.expires_at.clone().unwrap_or_else(|| "-".to_owned()));
            cells.push(echo(&self.label, MAX_NAME_CHARS).into_owned());
        }
        cells.push(reason);
        cells
    }

    fn qualified_name(&self) -> String {
        let kind = self.kind.to_lowercase();
        match self.group.as_str() {
            "" => format!("{kind}/{}", self.name),
            group => format!("{kind}.{group}/{}", self.name),
        }
    }
}

/// The window an object's metadata holds, read as the webhook reads it (pure).
fn listed_window(
    resource: &ApiResource,
    metadata: &ObjectMeta,
    keys: WindowKeys<'_>,
    now: Timestamp,
) -> ListedWindow {
    let is_namespace = resource.group.is_empty() && resource.kind == "Namespace";
    let scope = if is_namespace {
        WindowScope::Namespace
    } else {
        WindowScope::Object
    };
    let name = metadata.name.clone().unwrap_or_default();
    let label = metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(keys.label))
        .cloned()
        .unwrap_or_default();
    let state = window_state(metadata, keys, now, scope);
    let (expires, expires_at) = match state.window() {
        Some(window) => (
            local(window.expires_at),
            Some(window.expires_at.to_string()),
        ),
        None => (label.clone(), None),
    };
    let state = match state {
        WindowState::Open(_) => "open",
        WindowState::Expired(_) => "expired",
        WindowState::TooLong(_) => "too-long",
        WindowState::Absent | WindowState::Malformed { .. } => "invalid",
    };
    ListedWindow {
        namespace: if is_namespace {
            name.clone()
        } else {
            metadata.namespace.clone().unwrap_or_default()
        },
        object: if is_namespace {
            "(whole namespace)".to_owned()
        } else {
            format!("{}/{name}", resource.kind.to_lowercase())
        },
        kind: resource.kind.clone(),
        group: resource.group.clone(),
        name,
        state,
        expires,
        expires_at,
        label,
        reason: metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(keys.reason_annotation))
            .cloned()
            .unwrap_or_default(),
        remove_with: None,
    }
}

/// The command that removes a label holding no window from `window`'s object.
fn remove_command(window: &ListedWindow, program: &str, cluster_scoped: bool) -> String {
    match (window.object.as_str(), cluster_scoped) {
        ("(whole namespace)", _) => {
            format!("{program} break-glass close namespace/{}", window.namespace)
        }
        (object, true) => format!("{program} break-glass close {object}"),
        (object, false) => format!(
            "{program} break-glass close {object} -n {}",
            window.namespace
        ),
    }
}

/// The windows on one resource in `namespace` (all when `None`); `None` when it is not
/// searched (not listable, or cluster-scoped other than Namespace when a namespace is asked
/// for: windows on ClusterRoles, CRDs are listed with -A).
async fn windows_of(
    cluster: &Cluster,
    (resource, caps): &(ApiResource, ApiCapabilities),
    namespace: Option<&str>,
    keys: WindowKeys<'_>,
    now: Timestamp,
) -> Option<Result<Vec<ListedWindow>, CliError>> {
    let is_namespace = resource.group.is_empty() && resource.kind == "Namespace";
    if !caps.supports_operation(kube::discovery::verbs::LIST)
        || (caps.scope == Scope::Cluster && !is_namespace && namespace.is_some())
    {
        return None;
    }
    let api: Api<DynamicObject> = match (namespace, &caps.scope) {
        (Some(ns), Scope::Namespaced) => Api::namespaced_with(cluster.client.clone(), ns, resource),
        _ => Api::all_with(cluster.client.clone(), resource),
    };
    let plural = resource_name(resource);
    let attempt = Attempt {
        doing: "listing break-glass windows",
        verb: "list",
        resource: &plural,
        kind: &resource.kind,
        name: None,
        namespace: namespace.filter(|_| !is_namespace),
    };
    let selector = ListParams::default().labels(keys.label);
    let listed = api.list_metadata(&selector).await;
    Some(
        listed
            .map_err(|e| cluster.error(attempt, e))
            .map(|objects| {
                objects
                    .items
                    .iter()
                    .map(|object| listed_window(resource, &object.metadata, keys, now))
                    // A namespace-wide window is listed under its own namespace only.
                    .filter(|w| !is_namespace || namespace.is_none_or(|ns| ns == w.namespace))
                    .collect()
            }),
    )
}

/// Lists the windows. A kind the person may not list is left out and named on `err`; any other
/// failed request fails the listing (an empty table would say "no windows" where nobody looked).
pub async fn list(
    args: &ListArgs,
    program: &str,
    out: &mut impl Write,
    err: &mut impl Write,
) -> Result<(), CliError> {
    let cluster = connect(&args.connection).await?;
    let namespace = args.scope.namespace(&cluster);
    let discovery = discover(&cluster).await?;
    let now = Timestamp::now();
    let keys = WindowKeys {
        label: &args.keys.label,
        reason_annotation: &args.keys.reason_annotation,
        max_duration: args.max_duration,
    };
    let mut rows = Vec::new();
    let mut listed = 0;
    let mut forbidden: Vec<CliError> = Vec::new();
    for resource in discovery.groups().flat_map(|g| g.recommended_resources()) {
        let windows = windows_of(&cluster, &resource, namespace.as_deref(), keys, now);
        match windows.await {
            None => {}
            Some(Ok(windows)) => {
                listed += 1;
                rows.extend(windows);
            }
            Some(Err(error @ CliError::Forbidden { .. })) => forbidden.push(error),
            Some(Err(error)) => return Err(error),
        }
    }
    // Nothing could be listed at all: say why rather than "no windows".
    if listed == 0 && !forbidden.is_empty() {
        return Err(forbidden.swap_remove(0));
    }
    rows.sort_by(|a, b| (&a.namespace, &a.object).cmp(&(&b.namespace, &b.object)));
    for row in rows.iter_mut().filter(|r| r.lingers()) {
        let cluster_scoped = row.namespace.is_empty();
        row.remove_with = Some(remove_command(row, program, cluster_scoped));
    }
    let empty = format!("No break-glass windows {}.", searched(namespace.as_deref()));
    let _ = write!(out, "{}", render(&rows, &args.output, &empty));
    if matches!(args.output.output, OutputFormat::Table | OutputFormat::Wide) {
        let _ = write!(out, "{}", lingering_advice(&rows));
    }
    if let Some(note) = not_searched(&forbidden, namespace.as_deref()) {
        let _ = writeln!(err, "{note}");
    }
    Ok(())
}

/// Where a listing looked, in kubectl's words: `in prod namespace`, `in any namespace`.
pub fn searched(namespace: Option<&str>) -> String {
    match namespace {
        Some(namespace) => format!("in {namespace} namespace"),
        None => "in any namespace".to_owned(),
    }
}

/// The kinds RBAC kept the listing from, in one sentence (pure); `None` when there were none.
fn not_searched(forbidden: &[CliError], namespace: Option<&str>) -> Option<String> {
    let mut who = None;
    let mut resources = Vec::new();
    for error in forbidden {
        if let CliError::Forbidden { user, resource, .. } = error {
            who.get_or_insert(user.as_str());
            resources.push(resource.as_str());
        }
    }
    let who = who?;
    Some(format!(
        "Not searched: {who} may not list {} {} (Kubernetes RBAC), so windows on objects of {} are not shown.",
        resources.join(", "),
        searched(namespace),
        if resources.len() == 1 {
            "that kind"
        } else {
            "those kinds"
        },
    ))
}

/// What to do about labels that hold no window: they hold nothing off, but they stay until
/// removed, and every listing shows them.
fn lingering_advice(rows: &[ListedWindow]) -> String {
    let commands: Vec<&str> = rows
        .iter()
        .filter_map(|r| r.remove_with.as_deref())
        .collect();
    if commands.is_empty() {
        return String::new();
    }
    let mut advice = format!(
        "\n{} label(s) no longer hold a window (expired, or not an expiry); nothing holds the controller off, but the label stays until removed. Remove each (no opener needed):\n",
        commands.len()
    );
    for command in commands {
        advice.push_str(&format!("  {command}\n"));
    }
    advice
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_and_name_are_checked_before_connecting() {
        assert_eq!(
            parse_target("ns/prod").unwrap(),
            Target::Namespace("prod".into())
        );
        assert_eq!(
            parse_target("Namespace/prod").unwrap(),
            Target::Namespace("prod".into())
        );
        assert_eq!(
            parse_target("deploy/api").unwrap(),
            Target::Object {
                kind: "deploy".into(),
                name: "api".into()
            }
        );
        for bad in ["api", "deployment/", "/api", "deployment/api/x"] {
            let error = parse_target(bad).unwrap_err();
            assert_eq!(error.exit_code(), crate::cli::error::exit::BAD_INPUT);
            assert!(
                error
                    .to_string()
                    .starts_with(&format!("\"{bad}\" is not KIND/NAME")),
                "{error}"
            );
        }
    }

    #[test]
    fn a_dry_run_shows_the_label_and_driftgate_s_answer_only_when_it_was_asked() {
        let keys = BreakGlassKeys {
            label: DEFAULT_BREAK_GLASS_LABEL.into(),
            reason_annotation: DEFAULT_REASON_ANNOTATION.into(),
        };
        let warning = "driftgate: break-glass window open on Namespace prod ...".to_owned();
        let server = dry_run_message(
            "kubectl driftgate",
            "namespace prod",
            DryRun::Server,
            &keys,
            ("20261202T1300Z", "2026-12-02 13:00 UTC".into()),
            "INC-1\nforged",
            std::slice::from_ref(&warning),
        );
        let lines: Vec<&str> = server.lines().collect();
        assert_eq!(
            lines[1],
            format!(
                "  label       {DEFAULT_BREAK_GLASS_LABEL}=20261202T1300Z   (until 2026-12-02 13:00 UTC)"
            )
        );
        // The reason is the person's text: echoed without its control characters.
        assert_eq!(
            lines[2],
            format!("  annotation  {DEFAULT_REASON_ANNOTATION}=INC-1\\nforged")
        );
        assert_eq!(lines[3], driftgate_core::text::warning(warning.clone()));
        assert!(
            lines[4].contains("`kubectl driftgate break-glass open"),
            "{server}"
        );
        let client = dry_run_message(
            "driftgate",
            "namespace prod",
            DryRun::Client,
            &keys,
            ("20261202T1300Z", "2026-12-02 13:00 UTC".into()),
            "INC-1",
            &[],
        );
        assert!(!client.contains("warning"), "{client}");
        assert_eq!(client.lines().count(), 4, "{client}");
    }

    #[test]
    fn warning_headers_are_unquoted() {
        assert_eq!(
            warning_text(r#"299 - "driftgate: a \"quoted\" word and a \\ backslash""#).as_deref(),
            Some(r#"driftgate: a "quoted" word and a \ backslash"#)
        );
        assert_eq!(warning_text("299 - unquoted"), None);
        assert_eq!(warning_text(r#"299 - "unterminated"#), None);
    }

    #[test]
    fn the_opened_message_says_held_expiry_extend_and_follow_up() {
        let warning = "driftgate: break-glass window open on Deployment prod/api until 2026-12-01 14:00 UTC (20261201T1400Z); controller flux is held off it until then; every change made in it must be backported to Git.".to_owned();
        let text = opened_message(
            "kubectl driftgate",
            "deployment/api in namespace prod",
            "deployment/api -n prod",
            Some("prod"),
            ("2026-12-01 15:00 CET".into(), "2026-12-01 14:00 UTC".into()),
            std::slice::from_ref(&warning),
        );
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        assert_eq!(
            lines[0],
            "break-glass window open on deployment/api in namespace prod until 2026-12-01 15:00 CET (2026-12-01 14:00 UTC)."
        );
        assert_eq!(lines[1], warning);
        assert!(lines[2].contains("reconciles it back to Git"), "{text}");
        assert!(lines[2].contains("again to extend"), "{text}");
        assert!(
            lines[3].contains("`kubectl driftgate backlog -n prod`")
                && lines[3]
                    .contains("`kubectl driftgate break-glass close deployment/api -n prod`"),
            "{text}"
        );
        let unguarded = opened_message(
            "driftgate",
            "namespace dev",
            "namespace/dev",
            Some("dev"),
            ("a".into(), "b".into()),
            &[],
        );
        assert!(
            unguarded
                .contains("driftgate sent no warning: check that its webhook guards namespace dev"),
            "{unguarded}"
        );
        assert!(
            unguarded.contains("`driftgate break-glass close namespace/dev`"),
            "{unguarded}"
        );
        let cluster_scoped = opened_message(
            "driftgate",
            "clusterrole/viewer (cluster-scoped)",
            "clusterrole/viewer",
            None,
            ("a".into(), "b".into()),
            &[],
        );
        assert!(
            cluster_scoped.contains("`driftgate backlog -A`")
                && cluster_scoped.contains("`driftgate break-glass close clusterrole/viewer`")
                && cluster_scoped.contains("its webhook guards clusterrole objects"),
            "{cluster_scoped}"
        );
    }

    #[test]
    fn a_listed_window_is_named_as_kubectl_names_it() {
        let keys = WindowKeys {
            label: DEFAULT_BREAK_GLASS_LABEL,
            reason_annotation: DEFAULT_REASON_ANNOTATION,
            max_duration: None,
        };
        let now: Timestamp = "2026-12-01T12:00:00Z".parse().unwrap();
        let metadata = |name: &str, label: &str| ObjectMeta {
            name: Some(name.into()),
            namespace: Some("prod".into()),
            labels: Some([(keys.label.to_owned(), label.to_owned())].into()),
            annotations: Some(
                [(
                    keys.reason_annotation.to_owned(),
                    "INC-1\nforged".to_owned(),
                )]
                .into(),
            ),
            ..ObjectMeta::default()
        };
        let deployment = ApiResource::from_gvk(&GroupVersionKind::gvk("apps", "v1", "Deployment"));
        let window = listed_window(&deployment, &metadata("api", "20261201T1300Z"), keys, now);
        assert_eq!(window.qualified_name(), "deployment.apps/api");
        assert_eq!(
            (window.state, window.object.as_str()),
            ("open", "deployment/api")
        );
        assert_eq!(window.expires_at.as_deref(), Some("2026-12-01T13:00:00Z"));
        // A reason is the client's text: echoed without its control characters.
        assert_eq!(window.cells(false).last().unwrap(), "INC-1\\nforged");
        assert_eq!(window.cells(true).len(), ListedWindow::headers(true).len());
        let namespace = ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "Namespace"));
        let window = listed_window(&namespace, &metadata("prod", "soon"), keys, now);
        assert_eq!(window.qualified_name(), "namespace/prod");
        assert_eq!(
            (window.state, window.object.as_str()),
            ("invalid", "(whole namespace)")
        );
    }

    /// The listing reads a window as the webhook does: with the policy's maxDuration given, one
    /// ending later than that (beyond the 60 s clock tolerance) is too long, not open.
    #[test]
    fn a_listed_window_longer_than_max_duration_is_too_long_as_the_webhook_says() {
        let now: Timestamp = "2026-12-01T12:00:00Z".parse().unwrap();
        let keys = |max: Option<&str>| WindowKeys {
            label: DEFAULT_BREAK_GLASS_LABEL,
            reason_annotation: DEFAULT_REASON_ANNOTATION,
            max_duration: max.map(|m| WindowDuration::parse(m).unwrap()),
        };
        let labelled = |value: &str| ObjectMeta {
            name: Some("api".into()),
            namespace: Some("prod".into()),
            labels: Some([(DEFAULT_BREAK_GLASS_LABEL.to_owned(), value.to_owned())].into()),
            ..ObjectMeta::default()
        };
        let deployment = ApiResource::from_gvk(&GroupVersionKind::gvk("apps", "v1", "Deployment"));
        let state = |value: &str, max: Option<&str>| {
            listed_window(&deployment, &labelled(value), keys(max), now).state
        };
        // 4h and 1 min from now: within maxDuration 4h by the clock tolerance.
        assert_eq!(state("20261201T1601Z", Some("4h")), "open");
        assert_eq!(state("20261201T1602Z", Some("4h")), "too-long");
        assert_eq!(state("20261201T1602Z", None), "open");
        assert_eq!(state("20261201T1200Z", Some("4h")), "expired");
        // Closing a window that has not ended is an opener's act: no "no opener needed" advice.
        let too_long = listed_window(
            &deployment,
            &labelled("20261202T1200Z"),
            keys(Some("4h")),
            now,
        );
        assert!(!too_long.lingers());
        let expired = listed_window(
            &deployment,
            &labelled("20261201T1200Z"),
            keys(Some("4h")),
            now,
        );
        assert!(expired.lingers());
    }
}
