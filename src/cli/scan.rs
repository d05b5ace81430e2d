//! `driftgate scan --policy FILE [-n NS | -A]`: lists every guarded object (API discovery, then
//! paginated lists) and reports, from its managedFields, the fields that are not the policy's
//! controllers' or delegations' ([`driftgate_core::scan`] judges). Exit 0 when clean, 1 when drift is
//! found, so CI can run it before a policy is switched to Enforce.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kube::discovery::{Discovery, Scope, verbs};
use serde::Serialize;

use crate::cli::break_glass::NamespaceScope;
use crate::cli::cluster::{Attempt, Cluster, ConnectionArgs, connect};
use crate::cli::error::{CliError, exit};
use crate::cli::output::{Listed, OutputArgs, OutputFormat, render};
use driftgate_core::policy::{GatePolicy, NamespaceLabels, PolicyErrors, PolicySet};
use driftgate_core::scan::{
    ControllerManagers, Finding, ObjectRef, ObjectReport, Scanner, has_managed_fields,
};

#[derive(Debug, Args)]
pub struct ScanArgs {
    #[command(flatten)]
    pub scope: NamespaceScope,
    /// The policy file, as `serve --policy` reads it (several GatePolicies may share it).
    #[arg(long, value_name = "FILE")]
    pub policy: PathBuf,
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub connection: ConnectionArgs,
    /// Objects per list request (the API server's `limit`; the rest follows by `continue`).
    #[arg(long, hide = true, default_value_t = 500,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub page_size: u32,
}

#[derive(Debug, thiserror::Error)]
pub enum ScanError {
    #[error("--policy {}: {errors}", path.display())]
    Policy { path: PathBuf, errors: PolicyErrors },
    #[error(
        "namespace {namespace} is not guarded by any policy in {}, so there is nothing to scan (-A scans every namespace it guards)",
        policy.display()
    )]
    NotGuarded { namespace: String, policy: PathBuf },
    #[error(transparent)]
    Cluster(#[from] CliError),
    #[error(transparent)]
    Unreadable(#[from] driftgate_core::scan::UnreadableManagedFields),
    #[error("cannot write the report: {0}")]
    Write(#[from] std::io::Error),
}

impl ScanError {
    pub fn exit_code(&self) -> u8 {
        match self {
            ScanError::Policy { .. } | ScanError::NotGuarded { .. } => exit::BAD_INPUT,
            ScanError::Cluster(error) => error.exit_code(),
            ScanError::Unreadable(_) | ScanError::Write(_) => exit::FAILED,
        }
    }
}

/// What was scanned, and what was found: `-o json|yaml` prints it whole.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ScanReport {
    pub drift: bool,
    pub scanned: Vec<ScannedNamespace>,
    pub objects: Vec<ObjectReport>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ScannedNamespace {
    pub namespace: String,
    pub policy: String,
    /// The guarded kinds listed, as `group/Kind`.
    pub kinds: Vec<String>,
    pub objects: usize,
    /// List requests made (more than one per kind when pages were followed).
    pub pages: usize,
    /// Objects with no managedFields at all, which say nothing of who wrote them (such as
    /// ServiceAccount `default`): not judged.
    pub without_managed_fields: Vec<String>,
    pub controllers: Vec<ControllerManagers>,
}

/// Runs `scan` and returns its exit code: 0 clean, 1 drift, else the failure's.
pub fn main(args: &ScanArgs, program: &str, out: &mut impl Write) -> ExitCode {
    let outcome = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|error| ScanError::Cluster(CliError::Runtime(error)))
        .and_then(|runtime| runtime.block_on(run(args, out, &mut std::io::stderr())));
    match outcome {
        Ok(report) if report.drift => ExitCode::from(exit::REFUSED),
        Ok(_) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("{program} scan: {error}");
            ExitCode::from(error.exit_code())
        }
    }
}

/// Scans as `args` say, printing the report to `out` and what was scanned to `said`.
pub async fn run(
    args: &ScanArgs,
    out: &mut impl Write,
    said: &mut impl Write,
) -> Result<ScanReport, ScanError> {
    let policies = PolicySet::load(&args.policy).map_err(|errors| ScanError::Policy {
        path: args.policy.clone(),
        errors,
    })?;
    let cluster = connect(&args.connection).await?;
    let targets = targets(&cluster, &policies, args).await?;
    let resources = guarded_resources(&cluster).await?;
    let mut report = ScanReport {
        drift: false,
        scanned: Vec::new(),
        objects: Vec::new(),
    };
    for (namespace, policy) in targets {
        let scanned = scan_namespace(
            &cluster,
            &resources,
            &namespace,
            policy,
            args.page_size,
            &mut report,
        )
        .await?;
        report.scanned.push(scanned);
    }
    report.drift = !report.objects.is_empty();
    write!(out, "{}", render_report(&report, &args.output))?;
    if !matches!(args.output.output, OutputFormat::Json | OutputFormat::Yaml) {
        write!(said, "{}", scope_words(&report))?;
    }
    Ok(report)
}

/// Scans every kind `policy` guards in `namespace`, adding what it finds to `report`.
async fn scan_namespace(
    cluster: &Cluster,
    resources: &[ApiResource],
    namespace: &str,
    policy: &GatePolicy,
    page_size: u32,
    report: &mut ScanReport,
) -> Result<ScannedNamespace, ScanError> {
    let scanner = Scanner::new(policy);
    let mut scanned = ScannedNamespace {
        namespace: namespace.to_owned(),
        policy: policy.name.clone(),
        kinds: Vec::new(),
        objects: 0,
        pages: 0,
        without_managed_fields: Vec::new(),
        controllers: scanner.controllers().to_vec(),
    };
    for resource in resources
        .iter()
        .filter(|r| policy.guards_resource(&r.group, &r.kind, &r.plural))
    {
        let (objects, pages) = list_all(cluster, resource, namespace, page_size).await?;
        scanned.kinds.push(kind_words(resource));
        scanned.objects += objects.len();
        scanned.pages += pages;
        for object in objects {
            let about = ObjectRef {
                api_version: resource.api_version.clone(),
                kind: resource.kind.clone(),
                namespace: namespace.to_owned(),
                name: object.metadata.name.clone().unwrap_or_default(),
            };
            let json = serde_json::to_value(&object).expect("a listed object serializes");
            if !has_managed_fields(&json) {
                let name = format!("{}/{}", about.kind, about.name);
                scanned.without_managed_fields.push(name);
            }
            report.objects.extend(scanner.scan(about, &json)?);
        }
    }
    Ok(scanned)
}

/// The namespaces to scan, each with every policy that guards it: -A every namespace a
/// policy guards; else -n's (or the context's), which a policy must guard. Guarded as the
/// decision means it (`policy::scope`); where only suspensions are judged, nothing is drift.
async fn targets<'p>(
    cluster: &Cluster,
    policies: &'p PolicySet,
    args: &ScanArgs,
) -> Result<Vec<(String, &'p GatePolicy)>, ScanError> {
    let guarding = |namespace: &Namespace| {
        let name = namespace.metadata.name.clone().unwrap_or_default();
        let labels = namespace.metadata.labels.clone().unwrap_or_default();
        policies
            .policies()
            .iter()
            .filter(|p| {
                p.namespace_scope(&name, NamespaceLabels::Known(&labels))
                    .guarded
            })
            .map(|p| (name.clone(), p))
            .collect::<Vec<_>>()
    };
    let api: Api<Namespace> = Api::all(cluster.client.clone());
    match args.scope.namespace(cluster) {
        None => {
            let attempt = attempt("listing the namespaces", "list", "namespaces", None);
            let namespaces = api
                .list(&ListParams::default())
                .await
                .map_err(|e| cluster.error(attempt, e))?;
            Ok(namespaces.items.iter().flat_map(guarding).collect())
        }
        Some(name) => {
            let attempt = Attempt {
                name: Some(&name),
                kind: "namespace",
                ..attempt("reading the namespace", "get", "namespaces", None)
            };
            let namespace = api
                .get(&name)
                .await
                .map_err(|e| cluster.error(attempt, e))?;
            let targets = guarding(&namespace);
            if targets.is_empty() {
                return Err(ScanError::NotGuarded {
                    namespace: name,
                    policy: args.policy.clone(),
                });
            }
            Ok(targets)
        }
    }
}

/// Every namespaced kind the cluster serves and lets list, in its preferred version, by group
/// and kind.
async fn guarded_resources(cluster: &Cluster) -> Result<Vec<ApiResource>, ScanError> {
    let discovery = Discovery::new(cluster.client.clone())
        .run()
        .await
        .map_err(|e| cluster.error(attempt("discovering the API", "get", "apis", None), e))?;
    let mut found = Vec::new();
    for group in discovery.groups() {
        for (resource, caps) in group.recommended_resources() {
            if caps.scope == Scope::Namespaced && caps.supports_operation(verbs::LIST) {
                found.push(resource);
            }
        }
    }
    // Discovery's order varies from run to run; a report should not.
    found.sort_by_key(kind_words);
    Ok(found)
}

/// Every object of `resource` in `namespace`, following `continue` page by page; and the
/// number of requests it took.
async fn list_all(
    cluster: &Cluster,
    resource: &ApiResource,
    namespace: &str,
    page_size: u32,
) -> Result<(Vec<DynamicObject>, usize), ScanError> {
    let api: Api<DynamicObject> = Api::namespaced_with(cluster.client.clone(), namespace, resource);
    let rbac_name = rbac_name(resource);
    let mut params = ListParams::default().limit(page_size);
    let mut objects = Vec::new();
    let mut pages = 0;
    loop {
        let attempt = attempt("listing objects", "list", &rbac_name, Some(namespace));
        let page = api
            .list(&params)
            .await
            .map_err(|e| cluster.error(attempt, e))?;
        pages += 1;
        objects.extend(page.items);
        match page.metadata.continue_.filter(|token| !token.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok((objects, pages)),
        }
    }
}

fn attempt<'a>(
    doing: &'a str,
    verb: &'a str,
    resource: &'a str,
    namespace: Option<&'a str>,
) -> Attempt<'a> {
    Attempt {
        doing,
        verb,
        resource,
        kind: resource,
        name: None,
        namespace,
    }
}

/// `deployments.apps`, `configmaps`: as RBAC and kubectl name a resource.
fn rbac_name(resource: &ApiResource) -> String {
    if resource.group.is_empty() {
        resource.plural.clone()
    } else {
        format!("{}.{}", resource.plural, resource.group)
    }
}

fn kind_words(resource: &ApiResource) -> String {
    let group = if resource.group.is_empty() {
        "core"
    } else {
        &resource.group
    };
    format!("{group}/{}", resource.kind)
}

/// The report in `args`' format: the whole report for JSON and YAML, one row per finding else.
/// What `-o json|yaml` says beside the objects: whether there is drift, and what was scanned.
#[derive(Serialize)]
struct ScanSummary<'a> {
    drift: bool,
    scanned: &'a [ScannedNamespace],
}

pub fn render_report(report: &ScanReport, args: &OutputArgs) -> String {
    match args.output {
        // kubectl's List of the objects with findings, the scan's summary beside them.
        OutputFormat::Json | OutputFormat::Yaml => crate::cli::output::KubeList::new(
            &report.objects,
            ScanSummary {
                drift: report.drift,
                scanned: &report.scanned,
            },
        )
        .to_text(args.output == OutputFormat::Yaml),
        OutputFormat::Name => {
            let mut names: Vec<String> = rows(report).iter().map(Row::qualified_name).collect();
            names.dedup();
            names.iter().map(|n| format!("{n}\n")).collect()
        }
        OutputFormat::Table | OutputFormat::Wide => {
            let namespaces: Vec<&str> = report
                .scanned
                .iter()
                .map(|s| s.namespace.as_str())
                .collect();
            // Where it looked, as kubectl's "No resources found in shop namespace."
            let searched = match namespaces.as_slice() {
                [] => "in no namespace (the policy guards none)".to_owned(),
                [one] => format!("in {one} namespace"),
                many => format!("in namespaces {}", many.join(", ")),
            };
            let empty = format!(
                "No drift {searched}: every field is the controllers', a delegation's or Kubernetes' own."
            );
            render(&rows(report), args, &empty)
        }
    }
}

/// What was scanned and how controllers were recognised, for a person (stderr).
pub fn scope_words(report: &ScanReport) -> String {
    if report.scanned.is_empty() {
        return "Scanned no namespace: the policy guards none of them.\n".to_owned();
    }
    let mut words = String::new();
    for scanned in &report.scanned {
        words.push_str(&format!(
            "Scanned namespace {} (policy {}): {} of {} in {}.\n",
            scanned.namespace,
            scanned.policy,
            counted(scanned.objects, "object"),
            counted(scanned.kinds.len(), "kind"),
            counted(scanned.pages, "list request"),
        ));
        if !scanned.without_managed_fields.is_empty() {
            words.push_str(&format!(
                "Not judged, having no managedFields to say who wrote them: {}.\n",
                scanned.without_managed_fields.join(", ")
            ));
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    for scanned in &report.scanned {
        for c in &scanned.controllers {
            if seen.insert((scanned.policy.clone(), c.controller.clone())) {
                words.push_str(&format!(
                    "Controller {} (policy {}): field managers {} (from {}).\n",
                    c.controller,
                    scanned.policy,
                    if c.managers.is_empty() {
                        "none".to_owned()
                    } else {
                        c.managers.join(", ")
                    },
                    c.matched_on
                ));
            }
        }
    }
    words
}

fn counted(count: usize, noun: &str) -> String {
    if count == 1 {
        format!("1 {noun}")
    } else {
        format!("{count} {noun}s")
    }
}

/// One line of the table: a finding of an object.
#[derive(Debug, Serialize)]
struct Row {
    namespace: String,
    object: String,
    group: String,
    policy: String,
    finding: &'static str,
    manager: String,
    operation: String,
    subresource: String,
    time: String,
    fields: String,
}

fn rows(report: &ScanReport) -> Vec<Row> {
    report
        .objects
        .iter()
        .flat_map(|object| object.findings.iter().map(move |f| row(object, f)))
        .collect()
}

fn row(object: &ObjectReport, finding: &Finding) -> Row {
    let base = |finding: &'static str| Row {
        namespace: object.object.namespace.clone(),
        object: format!("{}/{}", object.object.kind, object.object.name),
        group: object
            .object
            .api_version
            .split_once('/')
            .map(|(group, _)| group.to_owned())
            .unwrap_or_default(),
        policy: object.policy.clone(),
        finding,
        manager: "-".to_owned(),
        operation: "-".to_owned(),
        subresource: "-".to_owned(),
        time: "-".to_owned(),
        fields: "-".to_owned(),
    };
    match finding {
        Finding::NeverApplied { managers } => Row {
            manager: if managers.is_empty() {
                "(none)".to_owned()
            } else {
                managers.join(",")
            },
            ..base("never-applied")
        },
        Finding::Fight {
            field,
            controller,
            controller_manager,
            manager,
            operation,
            delegation,
        } => Row {
            manager: format!(
                "{controller_manager} ({controller}) vs {}",
                fought_with(manager.as_deref(), delegation.as_deref())
            ),
            operation: match operation {
                Some(operation) => format!("Apply vs {operation}"),
                None => "Apply".to_owned(),
            },
            fields: field.clone(),
            ..base("fight")
        },
        Finding::Drift {
            manager,
            operation,
            subresource,
            time,
            fields,
        } => Row {
            manager: manager.clone(),
            operation: operation.clone(),
            subresource: subresource.clone().unwrap_or_else(|| "-".to_owned()),
            time: time.clone().unwrap_or_else(|| "-".to_owned()),
            fields: fields.join(","),
            ..base("drift")
        },
    }
}

/// The other side of a fight: a manager, a delegation, or both.
fn fought_with(manager: Option<&str>, delegation: Option<&str>) -> String {
    match (manager, delegation) {
        (Some(manager), Some(delegation)) => format!("{manager} (delegation {delegation})"),
        (Some(manager), None) => manager.to_owned(),
        (None, Some(delegation)) => format!("delegation {delegation}"),
        (None, None) => "another manager".to_owned(),
    }
}

impl Listed for Row {
    fn headers(wide: bool) -> Vec<&'static str> {
        let mut headers = vec![
            "NAMESPACE",
            "OBJECT",
            "FINDING",
            "MANAGER",
            "OPERATION",
            "TIME",
            "FIELDS",
        ];
        if wide {
            headers.extend(["SUBRESOURCE", "POLICY"]);
        }
        headers
    }

    fn cells(&self, wide: bool) -> Vec<String> {
        let mut cells = vec![
            self.namespace.clone(),
            self.object.clone(),
            self.finding.to_owned(),
            self.manager.clone(),
            self.operation.clone(),
            self.time.clone(),
            self.fields.clone(),
        ];
        if wide {
            cells.extend([self.subresource.clone(), self.policy.clone()]);
        }
        cells
    }

    fn qualified_name(&self) -> String {
        let (kind, name) = self.object.split_once('/').unwrap_or((&self.object, ""));
        let kind = kind.to_lowercase();
        if self.group.is_empty() {
            format!("{kind}/{name}")
        } else {
            format!("{kind}.{}/{name}", self.group)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> ScanReport {
        let object = ObjectRef {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            namespace: "shop".into(),
            name: "api".into(),
        };
        ScanReport {
            drift: true,
            scanned: vec![ScannedNamespace {
                namespace: "shop".into(),
                policy: "production".into(),
                kinds: vec!["apps/Deployment".into()],
                objects: 1,
                pages: 1,
                without_managed_fields: vec!["ServiceAccount/default".into()],
                controllers: Vec::new(),
            }],
            objects: vec![ObjectReport {
                object,
                policy: "production".into(),
                findings: vec![
                    Finding::Fight {
                        field: "spec.replicas".into(),
                        controller: "flux".into(),
                        controller_manager: "kustomize-controller".into(),
                        manager: Some("kube-controller-manager".into()),
                        operation: Some("Update".into()),
                        delegation: Some("hpa".into()),
                    },
                    Finding::Drift {
                        manager: "kubectl-edit".into(),
                        operation: "Update".into(),
                        subresource: None,
                        time: Some("2026-11-30T09:00:00Z".into()),
                        fields: vec!["data.a".into(), "data.b".into()],
                    },
                ],
            }],
        }
    }

    fn args(output: OutputFormat) -> OutputArgs {
        OutputArgs {
            output,
            no_headers: true,
        }
    }

    #[test]
    fn the_table_has_a_row_per_finding_naming_both_sides_of_a_fight() {
        let table = render_report(&report(), &args(OutputFormat::Table));
        let rows: Vec<&str> = table.lines().collect();
        assert_eq!(rows.len(), 2, "{table}");
        assert!(rows[0].contains(
            "kustomize-controller (flux) vs kube-controller-manager (delegation hpa)   Apply vs Update"
        ), "{table}");
        assert!(
            rows[1].ends_with("2026-11-30T09:00:00Z   data.a,data.b"),
            "{table}"
        );
        let names = render_report(&report(), &args(OutputFormat::Name));
        assert_eq!(names, "deployment.apps/api\n");
    }

    #[test]
    fn the_summary_names_what_was_scanned_and_what_could_not_be_judged() {
        let words = scope_words(&report());
        assert!(words.starts_with(
            "Scanned namespace shop (policy production): 1 object of 1 kind in 1 list request.\nNot judged, having no managedFields to say who wrote them: ServiceAccount/default.\n"
        ), "{words}");
        let empty = ScanReport {
            drift: false,
            scanned: Vec::new(),
            objects: Vec::new(),
        };
        assert_eq!(
            render_report(&empty, &args(OutputFormat::Table)),
            "No drift in no namespace (the policy guards none): every field is the controllers', a delegation's or Kubernetes' own.\n"
        );
        let one = ScanReport {
            drift: false,
            scanned: report().scanned,
            objects: Vec::new(),
        };
        assert!(
            render_report(&one, &args(OutputFormat::Table))
                .starts_with("No drift in shop namespace: "),
            "{}",
            render_report(&one, &args(OutputFormat::Table))
        );
        assert!(render_report(&empty, &args(OutputFormat::Json)).contains("\"drift\": false"));
    }
}
