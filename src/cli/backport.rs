//! `driftgate backport RECORD --repo DIR`: writes the emergency change a backport record holds
//! into the GitOps repository's manifests, on a branch of its own with a commit that names the
//! record, and says what to do next. What to write where is planned purely in
//! [`driftgate_core::backport`]; here the record, the live object and the checkout are read, and git run.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use clap::Args;
use jiff::Timestamp;
use kube::api::Api;
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::Value;

use crate::cli::cluster::{Attempt, Cluster, ConnectionArgs, connect};
use crate::cli::error::CliError;
use driftgate_core::backport::{BackportPlan, Depth, RepoFile, Target, Wanted, plan_at_depth};
use driftgate_core::fieldpath::FieldPath;
use driftgate_core::ledger::argocd::{Tracking, tracking_of};
use driftgate_core::ledger::evidence::{ABSENT, digest, latest_changes, owns, value_at};
use driftgate_core::ledger::record::{BackportRequirement, RecordedObject};
use driftgate_core::timefmt::human_utc;

const RECORDS: &str = "backportrequirements.driftgate.dev";
/// Flux's labels on what a Kustomization applied: which Kustomization, so which path.
const FLUX_NAME_LABEL: &str = "kustomize.toolkit.fluxcd.io/name";
const FLUX_NAMESPACE_LABEL: &str = "kustomize.toolkit.fluxcd.io/namespace";
/// The controllers' field managers, for the object each applied.
const FLUX_FIELD_MANAGER: &str = "kustomize-controller";
const ARGOCD_FIELD_MANAGER: &str = "argocd-controller";

#[derive(Debug, Args)]
pub struct BackportArgs {
    /// The BackportRequirement, as `driftgate backlog` names it.
    #[arg(value_name = "RECORD")]
    pub record: String,
    /// The record's namespace (default: the kubeconfig context's).
    #[arg(short = 'n', long, value_name = "NS")]
    pub namespace: Option<String>,
    /// A local checkout of the GitOps repository (clean: nothing uncommitted).
    #[arg(long, value_name = "DIR")]
    pub repo: PathBuf,
    /// The directory, from the repository's root, the controller applies (default: the Flux
    /// Kustomization's spec.path when the object carries Flux's labels, the Argo CD
    /// Application's spec.source.path when it carries Argo CD's tracking annotation, else the
    /// root).
    #[arg(long, value_name = "DIR")]
    pub path: Option<String>,
    /// The GitOps controller's field manager: a field another manager owns (not the
    /// controller, not a change under the window) is named and not written (default:
    /// argocd-controller for an object Argo CD tracks, else kustomize-controller).
    #[arg(long, value_name = "NAME")]
    pub field_manager: Option<String>,
    /// Where Argo CD's Applications are (an Application in another namespace is named by the
    /// object's tracking annotation).
    #[arg(long, value_name = "NAMESPACE", default_value = "argocd")]
    pub argocd_namespace: String,
    /// The branch to create (default: driftgate/backport-RECORD).
    #[arg(long, value_name = "NAME")]
    pub branch: Option<String>,
    /// Print what would be written and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub connection: ConnectionArgs,
}

pub use super::backport_error::{BackportError, NotInCheckout};

pub async fn run(
    args: &BackportArgs,
    program: &'static str,
    out: &mut impl Write,
) -> Result<(), CliError> {
    let cluster = connect(&args.connection).await?;
    let namespace = cluster.namespace_or(args.namespace.as_ref());
    let record = read_record(&cluster, &namespace, &args.record).await?;
    let root = repo_root(&args.repo)?;
    let RepoFiles { files, not_read } = repo_files(&root)?;
    for (path, problem) in &not_read {
        let _ = writeln!(
            out,
            "not read: {path} {problem}: driftgate backport reads and writes only the checkout's own files; if it declares the object, edit the file it stands for by hand"
        );
    }
    let mut combined = BackportPlan::default();
    let mut written_values = Vec::new();
    for (object, fields) in objects_of(&record) {
        let live = read_live(&cluster, &namespace, &object).await?;
        if let Some(release) = helm_release(&live) {
            return Err(BackportError::Helm {
                object: format!("{} {namespace}/{}", object.kind, object.name),
                release,
            }
            .into());
        }
        let argo = tracking_of(&live);
        let start = match (&args.path, &argo) {
            (Some(path), _) => (path.clone(), Depth::Below),
            (None, Some(tracking)) if flux_labels(&live).is_none() => {
                let object = format!("{} {namespace}/{}", object.kind, object.name);
                argo_source(&cluster, tracking, args, &files, &object, out)
                    .await?
                    .unwrap_or_default()
            }
            (None, _) => (
                flux_path(&cluster, &live, out).await.unwrap_or_default(),
                Depth::Below,
            ),
        };
        let manager = match (&args.field_manager, &argo) {
            (Some(manager), _) => manager.clone(),
            (None, Some(_)) => ARGOCD_FIELD_MANAGER.to_owned(),
            (None, None) => FLUX_FIELD_MANAGER.to_owned(),
        };
        let (wanted, skipped) = wanted_fields(&record, &object, &fields, &live, &manager);
        let target = Target {
            api_version: object.api_version.clone(),
            kind: object.kind.clone(),
            name: object.name.clone(),
            namespace: namespace.clone(),
        };
        let mut planned = plan_at_depth(&files, (&start.0, start.1), &target, &wanted, &live)
            .map_err(BackportError::from)?;
        planned.skipped.extend(skipped);
        written_values.extend(wanted.into_iter().map(|w| (w.path.to_string(), w.value)));
        combined.edits.extend(planned.edits);
        combined.skipped.extend(planned.skipped);
        combined.unreadable.extend(planned.unreadable);
    }
    if combined.edits.is_empty() && combined.skipped.is_empty() {
        return Err(BackportError::NoFields {
            program,
            namespace,
            name: args.record.clone(),
        }
        .into());
    }
    print_plan(&combined, out);
    if combined.edits.is_empty() {
        return Err(BackportError::NothingWritten.into());
    }
    if args.dry_run {
        let _ = writeln!(out, "--dry-run: nothing written.");
        return Ok(());
    }
    let branch = args
        .branch
        .clone()
        .unwrap_or_else(|| format!("driftgate/backport-{}", args.record));
    let message = commit_message(&record, &namespace, &combined, &written_values);
    commit(&root, &branch, &combined, &message)?;
    let diff = git(
        &root,
        "show",
        &["show", "--stat", "--patch", "--format=%H%n%n%B", "HEAD"],
    )?;
    let _ = write!(out, "\n{diff}");
    let _ = writeln!(
        out,
        "\nCommitted on branch {branch} of {}. Next: git -C {} push -u origin {branch}, and open a pull request; once it is merged the controller's next reconcile settles the record ({program} backlog -n {namespace}).",
        root.display(),
        root.display(),
    );
    Ok(())
}

async fn read_record(
    cluster: &Cluster,
    namespace: &str,
    name: &str,
) -> Result<BackportRequirement, CliError> {
    let api: Api<BackportRequirement> = Api::namespaced(cluster.client.clone(), namespace);
    api.get(name).await.map_err(|e| {
        cluster.error(
            Attempt {
                doing: "reading the record",
                verb: "get",
                resource: RECORDS,
                kind: "BackportRequirement",
                name: Some(name),
                namespace: Some(namespace),
            },
            e,
        )
    })
}

/// The objects the record's changes are about (one, or for a namespace-wide window each object
/// changed), with the latest recorded field of each path.
fn objects_of(record: &BackportRequirement) -> BTreeMap<RecordedObject, Vec<String>> {
    let mut objects: BTreeMap<RecordedObject, Vec<String>> = BTreeMap::new();
    for change in &record.spec.changes {
        let object = change
            .object
            .clone()
            .unwrap_or_else(|| record.spec.object.clone());
        let paths = objects.entry(object).or_default();
        for field in &change.fields {
            if !paths.contains(&field.path) {
                paths.push(field.path.clone());
            }
        }
    }
    objects
}

/// The fields to write with their values, and those left out with why: the record's value
/// where it keeps values, else the live one when its digest is the recorded one.
fn wanted_fields(
    record: &BackportRequirement,
    object: &RecordedObject,
    paths: &[String],
    live: &Value,
    controller_manager: &str,
) -> (Vec<Wanted>, Vec<driftgate_core::backport::Skipped>) {
    let latest = latest_changes(&record.spec, &object.uid);
    let mut wanted = Vec::new();
    let mut skipped = Vec::new();
    let skip = |field: &str, why: String| driftgate_core::backport::Skipped {
        field: field.to_owned(),
        why,
    };
    for path_text in paths {
        let (Some((field, change)), Ok(path)) =
            (latest.get(path_text.as_str()), FieldPath::parse(path_text))
        else {
            continue;
        };
        if field.digest == ABSENT {
            skipped.push(skip(
                path_text,
                "it was removed under the window: remove it from the manifest by hand".into(),
            ));
            continue;
        }
        if let Some(owner) = foreign_owner(record, live, &path, &field.digest, controller_manager) {
            skipped.push(skip(path_text, format!("{owner} took it over after the window's change, and is not the GitOps controller ({controller_manager}): Git does not decide it, so it is not written")));
            continue;
        }
        let live_value = value_at(live, &path);
        // A recorded value is written only when driftgate read the object back carrying it: a
        // change not yet confirmed is only what a review claimed (anyone who reaches the
        // webhook's port can POST one), and the API server is the truth.
        let value = match (&field.value, live_value) {
            (Some(value), _) if change.landed.is_some() => value.clone(),
            (_, Some(value)) if digest(Some(value)) == field.digest => value.clone(),
            (Some(_), _) => {
                skipped.push(skip(path_text, "driftgate never read this change back from the API server (only a review claimed it), and the live value is not the one recorded: write it by hand if it is right".into()));
                continue;
            }
            (None, _) => {
                skipped.push(skip(path_text, "the record keeps no values (breakGlass.recordValues) and the live value is no longer the one recorded: write it by hand".into()));
                continue;
            }
        };
        wanted.push(Wanted { path, value });
    }
    (wanted, skipped)
}

/// A manager other than the controller that took `path` over after its last change under the
/// window (an HPA's `spec.replicas`): a value Git does not decide. A write's own entry carries
/// the time the API server stored it, a moment after driftgate recorded it: within
/// [`SAME_WRITE`] it is that write. An entry without a time (the API server keeps none for a
/// `scale` write) took it over when the live value is no longer the recorded one.
fn foreign_owner(
    record: &BackportRequirement,
    live: &Value,
    path: &FieldPath,
    recorded_digest: &str,
    controller_manager: &str,
) -> Option<String> {
    let path_text = path.to_string();
    let changed = record
        .spec
        .changes
        .iter()
        .filter(|c| c.fields.iter().any(|f| f.path == path_text))
        .map(|c| c.time.0)
        .max()?;
    let moved_on = digest(value_at(live, path)) != recorded_digest;
    let entries = live["metadata"]["managedFields"].as_array()?;
    entries.iter().find_map(|entry| {
        let manager = entry["manager"].as_str()?;
        let later = match entry["time"]
            .as_str()
            .and_then(|t| t.parse::<Timestamp>().ok())
        {
            Some(time) => time.duration_since(changed) > SAME_WRITE,
            None => moved_on,
        };
        (manager != controller_manager && later && owns(&entry["fieldsV1"], live, path))
            .then(|| format!("field manager {manager}"))
    })
}

/// How much later than driftgate's record a write's managedFields time may be.
const SAME_WRITE: jiff::SignedDuration = jiff::SignedDuration::from_secs(5);

async fn read_live(
    cluster: &Cluster,
    namespace: &str,
    object: &RecordedObject,
) -> Result<Value, CliError> {
    let (group, version) = object
        .api_version
        .rsplit_once('/')
        .unwrap_or(("", object.api_version.as_str()));
    let gvk = GroupVersionKind::gvk(group, version, &object.kind);
    let attempt = |verb| Attempt {
        doing: "reading the object the record is about",
        verb,
        resource: &object.kind,
        kind: &object.kind,
        name: Some(&object.name),
        namespace: Some(namespace),
    };
    let (resource, _) = kube::discovery::pinned_kind(&cluster.client, &gvk)
        .await
        .map_err(|e| cluster.error(attempt("discover"), e))?;
    let api: Api<DynamicObject> =
        Api::namespaced_with(cluster.client.clone(), namespace, &resource);
    let live = api
        .get(&object.name)
        .await
        .map_err(|e| cluster.error(attempt("get"), e))?;
    Ok(serde_json::to_value(live).expect("an object serialises"))
}

/// The Helm release that rendered `live`, when Flux's helm-controller or Helm itself labelled it.
fn helm_release(live: &Value) -> Option<String> {
    let labels = &live["metadata"]["labels"];
    let annotations = &live["metadata"]["annotations"];
    match (
        labels["helm.toolkit.fluxcd.io/name"].as_str(),
        labels["helm.toolkit.fluxcd.io/namespace"].as_str(),
    ) {
        (Some(name), Some(namespace)) => Some(format!("HelmRelease {namespace}/{name}")),
        _ if labels["app.kubernetes.io/managed-by"] == "Helm" => Some(format!(
            "Helm release {}",
            annotations["meta.helm.sh/release-name"]
                .as_str()
                .unwrap_or("?")
        )),
        _ => None,
    }
}

/// The Flux Kustomization that applied `live` (name, namespace), by Flux's labels on it.
fn flux_labels(live: &Value) -> Option<(&str, &str)> {
    let labels = &live["metadata"]["labels"];
    Some((
        labels[FLUX_NAME_LABEL].as_str()?,
        labels[FLUX_NAMESPACE_LABEL].as_str()?,
    ))
}

/// Where the Argo CD Application that `tracking` names reads its manifests: its
/// `spec.source.path` and how deep it reads (a directory source reads its own files, or all
/// below with `directory.recurse`; a kustomization.yaml makes it a Kustomize source). Says which,
/// or why it looks from the root instead; a Helm or plugin source is refused: its output is
/// not a manifest in the checkout.
async fn argo_source(
    cluster: &Cluster,
    tracking: &Tracking,
    args: &BackportArgs,
    files: &[RepoFile],
    object: &str,
    out: &mut impl Write,
) -> Result<Option<(String, Depth)>, BackportError> {
    let namespace = tracking
        .application_namespace
        .as_deref()
        .unwrap_or(&args.argocd_namespace);
    let name = &tracking.application;
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "argoproj.io",
        "v1alpha1",
        "Application",
    ));
    let api: Api<DynamicObject> =
        Api::namespaced_with(cluster.client.clone(), namespace, &resource);
    let application = match api.get(name).await {
        Ok(application) => application,
        Err(error) => {
            let _ = writeln!(
                out,
                "Argo CD's Application {namespace}/{name} applied the object but cannot be read ({error}); looking from the repository's root (--path to choose)."
            );
            return Ok(None);
        }
    };
    let spec = &application.data["spec"];
    let source = &spec["source"];
    if source.is_null() {
        let _ = writeln!(
            out,
            "Argo CD's Application {namespace}/{name} has several sources; looking from the repository's root (--path to choose)."
        );
        return Ok(None);
    }
    let path = source["path"]
        .as_str()
        .unwrap_or("")
        .trim_start_matches("./")
        .trim_end_matches('/')
        .to_owned();
    let has = |file: &str| {
        let wanted = if path.is_empty() {
            file.to_owned()
        } else {
            format!("{path}/{file}")
        };
        files.iter().any(|f| f.path == wanted)
    };
    let rendered = if !source["chart"].is_null() {
        Some("a Helm chart repository")
    } else if !source["helm"].is_null() || has("Chart.yaml") {
        Some("a Helm chart (a Helm source)")
    } else if !source["plugin"].is_null() {
        Some("a config management plugin")
    } else {
        None
    };
    if let Some(rendered) = rendered {
        return Err(BackportError::ArgoRendered {
            object: object.to_owned(),
            application: format!("{namespace}/{name}"),
            rendered_by: rendered.to_owned(),
        });
    }
    let kustomize = !source["kustomize"].is_null()
        || ["kustomization.yaml", "kustomization.yml", "Kustomization"]
            .iter()
            .any(|file| has(file));
    let recurse = source["directory"]["recurse"] == true;
    let (depth, how) = match (kustomize, recurse) {
        (true, _) => (Depth::Below, "a Kustomize source"),
        (false, true) => (Depth::Below, "a directory source, with the files below it"),
        (false, false) => (Depth::Directly, "a directory source, its own files only"),
    };
    let _ = writeln!(
        out,
        "Argo CD's Application {namespace}/{name} applies {} ({how}); looking there (--path to choose).",
        if path.is_empty() {
            "the repository's root"
        } else {
            &path
        }
    );
    Ok(Some((path, depth)))
}

/// The path the Flux Kustomization that applied `live` reads, when `live` carries Flux's
/// labels and the Kustomization can be read; says which, or why not.
async fn flux_path(cluster: &Cluster, live: &Value, out: &mut impl Write) -> Option<String> {
    let (name, namespace) = flux_labels(live)?;
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "kustomize.toolkit.fluxcd.io",
        "v1",
        "Kustomization",
    ));
    let api: Api<DynamicObject> =
        Api::namespaced_with(cluster.client.clone(), namespace, &resource);
    match api.get(name).await {
        Ok(kustomization) => {
            let path = kustomization.data["spec"]["path"]
                .as_str()
                .unwrap_or("")
                .trim_start_matches("./")
                .to_owned();
            let _ = writeln!(
                out,
                "Flux's Kustomization {namespace}/{name} applies {}; looking there (--path to choose).",
                if path.is_empty() {
                    "the repository's root"
                } else {
                    &path
                }
            );
            Some(path)
        }
        Err(error) => {
            let _ = writeln!(
                out,
                "Flux's Kustomization {namespace}/{name} applied the object but cannot be read ({error}); looking from the repository's root (--path to choose)."
            );
            None
        }
    }
}

fn print_plan(plan: &BackportPlan, out: &mut impl Write) {
    for edit in &plan.edits {
        for field in &edit.fields {
            let _ = writeln!(
                out,
                "{}:{}: {}: {} -> {}",
                edit.path, field.line, field.field, field.old, field.new
            );
        }
    }
    for skipped in &plan.skipped {
        let _ = writeln!(out, "not written: {}: {}", skipped.field, skipped.why);
    }
    for unreadable in &plan.unreadable {
        let _ = writeln!(
            out,
            "not read as YAML (left out of the search): {unreadable}"
        );
    }
}

fn commit_message(
    record: &BackportRequirement,
    namespace: &str,
    plan: &BackportPlan,
    values: &[(String, Value)],
) -> String {
    let window = &record.spec.window;
    let name = record.metadata.name.as_deref().unwrap_or_default();
    let object = &record.spec.object;
    let reason = window.reason_words();
    let mut message = format!(
        "Backport {reason} ({namespace}/{name})\n\nThe emergency change {} made to {} {namespace}/{} under a break-glass window\n(reason \"{reason}\", until {}), recorded by driftgate as BackportRequirement\n{namespace}/{name} (policy {}).\n\n",
        window.opener_words(),
        object.kind,
        object.name,
        human_utc(window.expires_at.0),
        record.spec.policy,
    );
    for edit in &plan.edits {
        for field in &edit.fields {
            let value = values
                .iter()
                .find(|(path, _)| *path == field.field)
                .map(|(_, v)| v.to_string())
                .unwrap_or_else(|| field.new.clone());
            message.push_str(&format!("- {}: {value} ({})\n", field.field, edit.path));
        }
    }
    if !plan.skipped.is_empty() {
        message.push_str("\nNot written (edit by hand if Git must have them):\n");
        for skipped in &plan.skipped {
            message.push_str(&format!("- {}: {}\n", skipped.field, skipped.why));
        }
    }
    message.push_str(&format!("\nDriftgate-Record: {namespace}/{name}\n"));
    message
}

fn repo_root(repo: &Path) -> Result<PathBuf, CliError> {
    let top = git(repo, "rev-parse", &["rev-parse", "--show-toplevel"]).map_err(|e| match e {
        BackportError::Git { stderr, .. } => BackportError::NotARepository {
            repo: repo.to_owned(),
            stderr,
        },
        other => other,
    })?;
    let root = PathBuf::from(top.trim());
    let status = git(&root, "status", &["status", "--porcelain"])?;
    if !status.trim().is_empty() {
        let files: Vec<&str> = status
            .lines()
            .map(|l| l.get(3..).unwrap_or(l))
            .take(5)
            .collect();
        return Err(BackportError::Dirty {
            repo: root,
            files: files.join(", "),
        }
        .into());
    }
    Ok(root)
}

/// The YAML files Git tracks in the checkout, and those left unread because they are not files
/// of the checkout itself (a link, or below one), with why.
struct RepoFiles {
    files: Vec<RepoFile>,
    not_read: Vec<(String, NotInCheckout)>,
}

fn repo_files(root: &Path) -> Result<RepoFiles, CliError> {
    let listed = git(root, "ls-files", &["ls-files", "-z"])?;
    let mut files = Vec::new();
    let mut not_read = Vec::new();
    for path in listed.split('\0').filter(|p| is_yaml(p)) {
        let file = match checkout_file(root, path) {
            Ok(file) => file,
            Err(problem) => {
                not_read.push((path.to_owned(), problem));
                continue;
            }
        };
        let text = std::fs::read_to_string(file).map_err(|source| BackportError::Unreadable {
            repo: root.to_owned(),
            path: path.to_owned(),
            source,
        })?;
        files.push(RepoFile {
            path: path.to_owned(),
            text,
        });
    }
    Ok(RepoFiles { files, not_read })
}

/// `path` (relative, `/`-separated, as Git lists it) in the checkout at `root`, when it is a
/// regular file of the checkout itself: neither it nor a directory on the way is a symbolic
/// link, and it resolves below `root`. A link Git tracks may point anywhere (another
/// repository, a home directory); writing through it would change a file the commit does not
/// hold.
fn checkout_file(root: &Path, path: &str) -> Result<PathBuf, NotInCheckout> {
    let looked_at = |e: std::io::Error| NotInCheckout::Unreadable(e.to_string());
    let parts: Vec<&str> = path.split('/').collect();
    let mut at = root.to_path_buf();
    for (i, part) in parts.iter().enumerate() {
        at.push(part);
        let metadata = std::fs::symlink_metadata(&at).map_err(looked_at)?;
        if metadata.file_type().is_symlink() {
            let target = std::fs::read_link(&at)
                .map_or_else(|e| format!("unreadable: {e}"), |t| t.display().to_string());
            return Err(if i + 1 == parts.len() {
                NotInCheckout::Link { target }
            } else {
                NotInCheckout::BelowLink {
                    dir: parts[..=i].join("/"),
                    target,
                }
            });
        }
        if i + 1 == parts.len() && !metadata.is_file() {
            return Err(NotInCheckout::NotAFile);
        }
    }
    let resolved = at.canonicalize().map_err(looked_at)?;
    let root = root.canonicalize().map_err(looked_at)?;
    if !resolved.starts_with(&root) {
        return Err(NotInCheckout::Outside {
            resolved: resolved.display().to_string(),
        });
    }
    Ok(resolved)
}

fn is_yaml(path: &str) -> bool {
    path.ends_with(".yaml")
        || path.ends_with(".yml")
        || path.ends_with("/Kustomization")
        || path == "Kustomization"
}

fn commit(root: &Path, branch: &str, plan: &BackportPlan, message: &str) -> Result<(), CliError> {
    let in_checkout = |path: &str| {
        checkout_file(root, path).map_err(|problem| BackportError::NotInCheckout {
            repo: root.to_owned(),
            path: path.to_owned(),
            problem: Box::new(problem),
        })
    };
    // Every file is checked before anything changes (the branch included), and again just
    // before it is written.
    for edit in &plan.edits {
        in_checkout(&edit.path)?;
    }
    git(root, "switch", &["switch", "--create", branch])?;
    for edit in &plan.edits {
        std::fs::write(in_checkout(&edit.path)?, &edit.text).map_err(|source| {
            BackportError::Unreadable {
                repo: root.to_owned(),
                path: edit.path.clone(),
                source,
            }
        })?;
    }
    let mut add = vec!["add", "--"];
    add.extend(plan.edits.iter().map(|e| e.path.as_str()));
    git(root, "add", &add)?;
    git_with_input(
        root,
        "commit",
        &["commit", "--quiet", "--file", "-"],
        message,
    )?;
    Ok(())
}

fn git(dir: &Path, doing: &str, args: &[&str]) -> Result<String, BackportError> {
    git_with_input(dir, doing, args, "")
}

fn git_with_input(
    dir: &Path,
    doing: &str,
    args: &[&str],
    input: &str,
) -> Result<String, BackportError> {
    let mut child = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(BackportError::GitMissing)?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(input.as_bytes())
            .map_err(BackportError::GitMissing)?;
    }
    let output = child
        .wait_with_output()
        .map_err(BackportError::GitMissing)?;
    if !output.status.success() {
        return Err(BackportError::Git {
            doing: doing.to_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_no_fields_hint_names_the_program_as_it_was_run() {
        let error = BackportError::NoFields {
            program: "kubectl driftgate",
            namespace: "prod".into(),
            name: "deployment-api-1".into(),
        };
        assert!(
            error.to_string().ends_with(
                "then kubectl driftgate backlog resolve deployment-api-1 -n prod --note …"
            ),
            "{error}"
        );
    }
    use std::os::unix::fs::symlink;

    fn run_git(dir: &Path, args: &[&str]) {
        let out = Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(["-c", "user.name=Test", "-c", "user.email=test@example.test"])
            .args(args)
            .output()
            .expect("git runs");
        assert!(out.status.success(), "git {args:?}: {out:?}");
    }

    const MANIFEST: &str =
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  LEVEL: info\n";

    /// A checkout holding a manifest, a link to a file outside it, a link to the manifest, and
    /// (untracked) a link to a directory outside; and the outside directory.
    fn checkout() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let scratch = tempfile::tempdir().unwrap();
        let outside = scratch.path().join("elsewhere");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("settings.yaml"), MANIFEST).unwrap();
        let repo = scratch.path().join("gitops");
        std::fs::create_dir_all(repo.join("apps")).unwrap();
        run_git(&repo, &["init", "--quiet", "--initial-branch=main"]);
        std::fs::write(repo.join("apps/settings.yaml"), MANIFEST).unwrap();
        symlink(outside.join("settings.yaml"), repo.join("apps/shared.yaml")).unwrap();
        symlink("settings.yaml", repo.join("apps/alias.yaml")).unwrap();
        run_git(&repo, &["add", "."]);
        run_git(&repo, &["commit", "--quiet", "-m", "apps"]);
        symlink(&outside, repo.join("linked")).unwrap();
        (scratch, repo, outside)
    }

    /// Issue 24, section 6: `backport` wrote through a link Git tracks to a file outside the
    /// checkout. A link is neither read nor written, and says why.
    #[test]
    fn links_are_not_read_and_say_why() {
        let (_scratch, repo, outside) = checkout();
        let RepoFiles { files, not_read } = repo_files(&repo).unwrap();
        let read: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(read, ["apps/settings.yaml"]);
        let said: Vec<String> = not_read
            .iter()
            .map(|(path, why)| format!("{path} {why}"))
            .collect();
        assert_eq!(
            said,
            [
                "apps/alias.yaml is a symbolic link (to settings.yaml)".to_owned(),
                format!(
                    "apps/shared.yaml is a symbolic link (to {})",
                    outside.join("settings.yaml").display()
                ),
            ]
        );
        assert_eq!(
            checkout_file(&repo, "linked/settings.yaml"),
            Err(NotInCheckout::BelowLink {
                dir: "linked".into(),
                target: outside.display().to_string(),
            })
        );
        assert_eq!(checkout_file(&repo, "apps"), Err(NotInCheckout::NotAFile));
        assert_eq!(
            checkout_file(&repo, "apps/settings.yaml"),
            Ok(repo.canonicalize().unwrap().join("apps/settings.yaml"))
        );
    }

    /// Were a link planned for (it changed after it was read), nothing is written: no branch,
    /// no file, and the sentence names the path and what to do.
    #[test]
    fn a_write_through_a_link_is_refused_before_anything_changes() {
        let (_scratch, repo, outside) = checkout();
        for path in ["apps/shared.yaml", "linked/settings.yaml"] {
            let plan = BackportPlan {
                edits: vec![
                    driftgate_core::backport::FileEdit {
                        path: "apps/settings.yaml".into(),
                        text: MANIFEST.replace("info", "debug"),
                        fields: Vec::new(),
                    },
                    driftgate_core::backport::FileEdit {
                        path: path.into(),
                        text: MANIFEST.replace("info", "debug"),
                        fields: Vec::new(),
                    },
                ],
                ..BackportPlan::default()
            };
            let error = commit(&repo, "driftgate/backport-x", &plan, "message").unwrap_err();
            let CliError::Backport(error) = error else {
                panic!("{error:?}")
            };
            assert_eq!(error.exit_code(), crate::cli::error::exit::BAD_INPUT);
            let said = error.to_string();
            assert!(
                said.starts_with(&format!("--repo {}: {path} ", repo.display()))
                    && said.ends_with(": driftgate backport writes only the checkout's own files, never through a link; nothing was written: edit the file it stands for by hand"),
                "{said}"
            );
            assert_eq!(
                git(&repo, "branch", &["branch", "--show-current"])
                    .unwrap()
                    .trim(),
                "main"
            );
            for file in [
                repo.join("apps/settings.yaml"),
                outside.join("settings.yaml"),
            ] {
                assert_eq!(std::fs::read_to_string(file).unwrap(), MANIFEST);
            }
        }
    }

    /// Issue 24: a value recorded with `recordValues` is only what a review claimed until
    /// driftgate read the object back carrying it. A forged change (never landed) whose value
    /// the live object does not hold is not written; a landed one is, and so is the live value
    /// when it is the recorded one.
    #[test]
    fn a_recorded_value_is_written_only_once_the_api_server_showed_it() {
        use driftgate_core::ledger::record::{
            BackportRequirementSpec, RecordScope, RecordedChange, RecordedField, RecordedWindow,
        };
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        use serde_json::json;
        let at: Timestamp = "2026-12-02T10:00:00Z".parse().unwrap();
        let object = RecordedObject {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            name: "api".into(),
            uid: "u-1".into(),
        };
        let record = |landed: Option<Time>| {
            BackportRequirement::new(
                "r",
                BackportRequirementSpec {
                    object: object.clone(),
                    scope: RecordScope::Object,
                    window: RecordedWindow {
                        opener: Some("alice".into()),
                        reason: None,
                        opened_at: None,
                        expires_at: Time(at),
                        label_value: "20261202T1000Z".into(),
                    },
                    policy: "prod".into(),
                    changes: vec![RecordedChange {
                        time: Time(at),
                        user: "alice".into(),
                        operation: "UPDATE".into(),
                        object: None,
                        subresource: String::new(),
                        request_uid: "forged".into(),
                        resource_version: "7".into(),
                        fields: vec![RecordedField {
                            path: "spec.replicas".into(),
                            digest: digest(Some(&json!(9))),
                            value: Some(json!(9)),
                        }],
                        landed,
                    }],
                },
            )
        };
        let live = |replicas: u32| json!({"spec": {"replicas": replicas}, "metadata": {}});
        let paths = vec!["spec.replicas".to_owned()];
        let written = |record: &BackportRequirement, live: &Value| {
            let (wanted, skipped) =
                wanted_fields(record, &object, &paths, live, "kustomize-controller");
            (
                wanted.iter().map(|w| w.value.clone()).collect::<Vec<_>>(),
                skipped.iter().map(|s| s.why.clone()).collect::<Vec<_>>(),
            )
        };

        let (wanted, skipped) = written(&record(None), &live(5));
        assert!(wanted.is_empty(), "{wanted:?}");
        assert!(
            skipped[0].contains("driftgate never read this change back from the API server"),
            "{skipped:?}"
        );
        assert_eq!(written(&record(Some(Time(at))), &live(5)).0, [json!(9)]);
        assert_eq!(written(&record(None), &live(9)).0, [json!(9)]);
    }
}
