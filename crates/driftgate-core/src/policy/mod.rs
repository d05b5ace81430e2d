//! Loading and validating policies, and the compiled form the decision reads.
//!
//! Loading never stops at the first problem: every error in every file is collected, each
//! naming its file, line, document and field, and what is allowed instead.

pub mod cluster_scoped;
pub mod document;
mod foreign;
pub mod gatepolicy;
mod globs;
mod reading;
pub mod scope;
pub mod suspensions;
mod suspensions_check;

use globs::compile_globs;

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};

use globset::{GlobSet, GlobSetBuilder};
use k8s_openapi::api::authentication::v1::UserInfo;
use serde_saphyr::{Location, Spanned};

pub use document::PolicyMode;
use document::{
    API_VERSION, BreakGlassSpec, ClusterScopedSpec, ControllerSpec, DelegationSpec,
    DeletionLimitSpec, DeletionsSpec, GatePolicyDocument, GuardedOperation, KIND,
    NamespaceScopeSpec, ResourceScopeSpec,
};

use reading::Node;

use crate::fieldpath::{FieldPath, FieldPattern};
use crate::timefmt::WindowDuration;

pub const DEFAULT_BREAK_GLASS_LABEL: &str = "driftgate.dev/break-glass";
pub const DEFAULT_REASON_ANNOTATION: &str = "driftgate.dev/break-glass-reason";

/// The group of PolicyReports (`reports`), which no policy guards: policy engines' output.
pub const POLICY_REPORT_GROUP: &str = "wgpolicyk8s.io";

/// One problem in a policy file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyError {
    pub file: String,
    /// 1-based; 0 when the position is not known.
    pub line: u64,
    /// 1-based index of the YAML document in the file; 0 when not known.
    pub document: usize,
    /// The policy's `metadata.name`, when it was read.
    pub policy: Option<String>,
    /// Dotted path of the field, e.g. `spec.breakGlass.maxDuration`.
    pub field: String,
    pub problem: String,
}

impl fmt::Display for PolicyError {
    /// `file:line: field: problem (document N, policy NAME)`, the shape editors and CI logs link.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}: {}: {}",
            self.file, self.line, self.field, self.problem
        )?;
        match (&self.policy, self.document) {
            (Some(policy), n) if n > 0 => write!(f, " (document {n}, policy {policy})"),
            (None, n) if n > 0 => write!(f, " (document {n})"),
            _ => Ok(()),
        }
    }
}

/// Every problem found while loading policies.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct PolicyErrors(pub Vec<PolicyError>);

impl fmt::Display for PolicyErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, error) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{error}")?;
        }
        Ok(())
    }
}

/// Users and groups, each a list of globs.
#[derive(Clone, Debug)]
pub struct IdentityMatcher {
    usernames: GlobSet,
    groups: GlobSet,
    username_patterns: Vec<String>,
    group_patterns: Vec<String>,
}

impl IdentityMatcher {
    /// Exactly these usernames (literal names, never globs: defaults the code gives).
    fn usernames(names: &[&str]) -> IdentityMatcher {
        let mut builder = GlobSetBuilder::new();
        for name in names {
            let literal = globset::escape(name);
            builder.add(globset::Glob::new(&literal).expect("an escaped name is a valid glob"));
        }
        IdentityMatcher {
            usernames: builder.build().expect("literal globs build"),
            groups: GlobSet::empty(),
            username_patterns: names.iter().map(|n| n.to_string()).collect(),
            group_patterns: Vec::new(),
        }
    }

    pub fn matches(&self, user: &UserInfo) -> bool {
        user.username
            .as_deref()
            .is_some_and(|name| self.usernames.is_match(name))
            || user
                .groups
                .iter()
                .flatten()
                .any(|group| self.groups.is_match(group))
    }

    /// The username patterns as the policy wrote them (`driftgate scan` derives field
    /// managers from them for a controller that names none).
    pub fn username_patterns(&self) -> &[String] {
        &self.username_patterns
    }

    /// "group sre-oncall", "user alice, group sre-oncall", for messages.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if !self.username_patterns.is_empty() {
            let noun = if self.username_patterns.len() == 1 {
                "user"
            } else {
                "users"
            };
            parts.push(format!("{noun} {}", self.username_patterns.join(", ")));
        }
        if !self.group_patterns.is_empty() {
            let noun = if self.group_patterns.len() == 1 {
                "group"
            } else {
                "groups"
            };
            parts.push(format!("{noun} {}", self.group_patterns.join(", ")));
        }
        if parts.is_empty() {
            "nobody".to_owned()
        } else {
            parts.join("; ")
        }
    }
}

/// An identity whose writes are the desired state (Flux, Argo CD).
#[derive(Clone, Debug)]
pub struct Controller {
    pub name: String,
    pub identity: IdentityMatcher,
    /// Empty: any field manager (or none) is accepted from this identity.
    pub field_managers: GlobSet,
    pub field_manager_patterns: Vec<String>,
    /// Whether an open break-glass window refuses this controller's writes (`ControllerHeld`).
    pub held_by_windows: bool,
}

/// Another legitimate writer, limited to named fields (the HPA on `spec.replicas`).
#[derive(Clone, Debug)]
pub struct Delegation {
    pub name: String,
    pub identity: IdentityMatcher,
    pub subresources: Vec<String>,
    pub fields: Vec<FieldPattern>,
}

/// How break-glass windows are opened and used under one policy.
#[derive(Clone, Debug)]
pub struct BreakGlassRules {
    pub label: String,
    pub reason_annotation: String,
    pub require_reason: bool,
    pub max_duration: WindowDuration,
    pub openers: IdentityMatcher,
    pub hold_controller: bool,
    pub namespace_wide: bool,
    pub refuse_reverts_for: Option<WindowDuration>,
    pub record_values: bool,
    /// Every reason must match this, when set.
    pub reason_pattern: Option<regex::Regex>,
}

/// Which deletes need a deliberate act, under one policy.
#[derive(Clone, Debug)]
pub struct DeletionRules {
    kinds: GlobSet,
    pub kind_patterns: Vec<String>,
    pub allow_annotation: String,
    pub exempt: IdentityMatcher,
    pub controller_limit: Option<DeletionLimit>,
}

/// At most `deletes` deletes by the controllers in one namespace within `per`.
#[derive(Clone, Copy, Debug)]
pub struct DeletionLimit {
    pub deletes: u32,
    pub per: WindowDuration,
}

impl DeletionRules {
    /// Whether deleting an object of `group/kind` (or `group/resource`) needs a deliberate act.
    pub fn protects(&self, group: &str, kind: &str, resource: &str) -> bool {
        let group = if group.is_empty() { "core" } else { group };
        self.kinds.is_match(format!("{group}/{kind}"))
            || self.kinds.is_match(format!("{group}/{resource}"))
    }
}

/// The kinds protected from deletion when `deletions.kinds` is not given.
pub const DEFAULT_PROTECTED_KINDS: &[&str] = &["core/PersistentVolumeClaim", "core/Namespace"];
/// Added to [`DEFAULT_PROTECTED_KINDS`] when the policy guards cluster-scoped kinds: deleting a
/// CRD deletes every object of its kind.
pub const DEFAULT_PROTECTED_CLUSTER_KINDS: &[&str] =
    &["apiextensions.k8s.io/CustomResourceDefinition"];
/// The annotation that allows deleting one protected object.
pub const DEFAULT_ALLOW_DELETION_ANNOTATION: &str = "driftgate.dev/allow-deletion";
/// Kubernetes' controllers whose deletes follow a deliberate deletion (of the namespace, of the
/// owner), exempt when `deletions.exempt` is not given.
pub const DEFAULT_DELETION_EXEMPT: &[&str] = &[
    "system:serviceaccount:kube-system:namespace-controller",
    "system:serviceaccount:kube-system:generic-garbage-collector",
];

/// A validated policy, ready for decisions.
#[derive(Clone, Debug)]
pub struct GatePolicy {
    pub name: String,
    pub source: String,
    pub mode: PolicyMode,
    pub owner: Option<String>,
    namespace_include: GlobSet,
    namespace_exclude: GlobSet,
    namespace_selector: Option<BTreeMap<String, String>>,
    resource_include: GlobSet,
    resource_exclude: GlobSet,
    operations: Vec<GuardedOperation>,
    subresources: Vec<String>,
    pub controllers: Vec<Controller>,
    pub delegations: Vec<Delegation>,
    pub break_glass: Option<BreakGlassRules>,
    pub deletions: Option<DeletionRules>,
    /// What counts as suspending the GitOps controller; a suspension needs a window as
    /// `break_glass` opens one.
    pub suspensions: Option<suspensions::SuspensionRules>,
    /// The cluster-scoped kinds this policy guards, by the same rules as its namespaces.
    pub cluster_scoped: Option<cluster_scoped::ClusterScopedRules>,
}

/// Whether the labels of a namespace are known to the caller.
#[derive(Clone, Copy, Debug)]
pub enum NamespaceLabels<'a> {
    Known(&'a BTreeMap<String, String>),
    Unknown,
}

impl GatePolicy {
    /// Whether writes in `namespace` are guarded. A label selector that cannot be evaluated
    /// because the labels are unknown counts as a match: guarding on a guess is safe, admitting
    /// on one is not.
    pub fn guards_namespace(&self, namespace: &str, labels: NamespaceLabels<'_>) -> bool {
        if self.namespace_exclude.is_match(namespace) {
            return false;
        }
        if self.namespace_include.is_match(namespace) {
            return true;
        }
        match (&self.namespace_selector, labels) {
            (None, _) => false,
            (Some(_), NamespaceLabels::Unknown) => true,
            (Some(selector), NamespaceLabels::Known(labels)) => selector
                .iter()
                .all(|(key, value)| labels.get(key) == Some(value)),
        }
    }

    /// Whether a write of `group`/`kind` outside any namespace (a ClusterRole, a CRD) is this
    /// policy's, by `clusterScoped`.
    pub fn guards_cluster_kind(&self, group: &str, kind: &str) -> bool {
        self.cluster_scoped
            .as_ref()
            .is_some_and(|rules| rules.guards(group, kind))
    }

    /// `kind_name` and `resource_name` are both offered as `group/…`, so a policy may say
    /// `apps/Deployment` or `apps/deployments`. The core group is `core`.
    pub fn guards_resource(&self, group: &str, kind: &str, resource: &str) -> bool {
        let group = if group.is_empty() { "core" } else { group };
        // Never guarded, whatever the policy says: Events are written by every controller
        // (driftgate's own among them), and driftgate's backport records are written by
        // driftgate while it answers a review; guarding them would refuse its own ledger.
        // PolicyReports are policy engines' run-time output (driftgate's, Kyverno's), not
        // desired state from Git.
        if group == "driftgate.dev"
            || group == POLICY_REPORT_GROUP
            || (kind == "Event" && (group == "core" || group == "events.k8s.io"))
        {
            return false;
        }
        let by_kind = format!("{group}/{kind}");
        let by_resource = format!("{group}/{resource}");
        let included = self.resource_include.is_match(&by_kind)
            || self.resource_include.is_match(&by_resource);
        let excluded = self.resource_exclude.is_match(&by_kind)
            || self.resource_exclude.is_match(&by_resource);
        included && !excluded
    }

    /// What `policy check` warns about: settings that load but do not do what they seem to.
    pub fn warnings(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        if self.subresources.iter().any(|s| s == "status") {
            warnings.push(
                "spec.subresources: \"status\" guards nothing by itself: a status write that changes more than status (labels, annotations, finalizers, spec) is judged as a write to the object (\"\"), and status alone belongs to the controllers"
                    .to_owned(),
            );
        }
        if let Some(rules) = &self.break_glass {
            let label = FieldPath::new(["metadata", "labels", rules.label.as_str()]);
            let reason =
                FieldPath::new(["metadata", "annotations", rules.reason_annotation.as_str()]);
            for (index, delegation) in self.delegations.iter().enumerate() {
                for pattern in &delegation.fields {
                    for (path, what) in [
                        (&label, "break-glass label"),
                        (&reason, "reason annotation"),
                    ] {
                        if pattern.covers(path) {
                            warnings.push(format!(
                                "spec.delegations[{index}].fields: \"{pattern}\" covers the {what} {path}; delegation {} never changes it, since only the break-glass rules judge it",
                                delegation.name
                            ));
                        }
                    }
                }
            }
        }
        if let Some(rules) = &self.suspensions {
            warnings.extend(rules.warnings());
        }
        warnings
    }

    /// For a resource whose kind could not be resolved (a subresource of a resource discovery
    /// does not know): guarded unless the policy excludes it by resource name, since a pattern
    /// over kinds cannot be ruled out (fail closed).
    pub fn guards_unresolved_resource(&self, group: &str, resource: &str) -> bool {
        let group = if group.is_empty() { "core" } else { group };
        if group == "driftgate.dev" || group == POLICY_REPORT_GROUP {
            return false;
        }
        !self
            .resource_exclude
            .is_match(format!("{group}/{resource}"))
    }

    /// The GitOps controller `user` is, and the limit on its deletes, when the policy limits
    /// them: not Kubernetes' own controllers (`heldByWindows: false`) nor `deletions.exempt`,
    /// whose deletes follow a deliberate one (a namespace controller emptying a namespace
    /// deletes everything in it).
    pub fn deletion_limit_for(&self, user: &UserInfo) -> Option<(&Controller, DeletionLimit)> {
        let rules = self.deletions.as_ref()?;
        let limit = rules.controller_limit?;
        if rules.exempt.matches(user) {
            return None;
        }
        self.controllers
            .iter()
            .find(|c| c.held_by_windows && c.identity.matches(user))
            .map(|c| (c, limit))
    }

    pub fn guards_operation(&self, operation: GuardedOperation) -> bool {
        self.operations.contains(&operation)
    }

    pub fn guards_subresource(&self, subresource: &str) -> bool {
        self.subresources.iter().any(|s| s == subresource)
    }
}

/// Every loaded policy, in a stable order (by name).
#[derive(Clone, Debug, Default)]
pub struct PolicySet {
    policies: Vec<GatePolicy>,
    sources: Vec<PathBuf>,
}

/// A policy's place in the [`PolicySet`] a review was decided with. Each verdict carries its
/// policy's, so that what follows the decision finds the policy without searching the set by
/// name (`PolicyVerdict::policy_in`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PolicyIndex(usize);

impl PolicySet {
    pub fn policies(&self) -> &[GatePolicy] {
        &self.policies
    }

    /// Every policy with its index, in order.
    pub fn indexed(&self) -> impl Iterator<Item = (PolicyIndex, &GatePolicy)> {
        self.policies
            .iter()
            .enumerate()
            .map(|(index, policy)| (PolicyIndex(index), policy))
    }

    /// The policy at `index`.
    pub fn at(&self, index: PolicyIndex) -> Option<&GatePolicy> {
        self.policies.get(index.0)
    }

    /// The files the set was read from, for reload watching.
    pub fn sources(&self) -> &[PathBuf] {
        &self.sources
    }

    /// Loads a policy file, or every `*.yaml`/`*.yml` directly inside a directory (hidden
    /// entries skipped: a ConfigMap mount keeps its real files in `..data`).
    pub fn load(path: &Path) -> Result<PolicySet, PolicyErrors> {
        Self::load_all(std::slice::from_ref(&path.to_path_buf()))
    }

    pub fn load_all(paths: &[PathBuf]) -> Result<PolicySet, PolicyErrors> {
        let inputs: Vec<PolicyInput> = paths.iter().cloned().map(PolicyInput::Path).collect();
        Self::load_inputs(&inputs)
    }

    /// [`PolicySet::load_all`] with text already read (`policy check -`, standard input).
    pub fn load_inputs(inputs: &[PolicyInput]) -> Result<PolicySet, PolicyErrors> {
        let mut errors = Vec::new();
        let mut texts = Vec::new();
        let mut files = Vec::new();
        for input in inputs {
            match input {
                PolicyInput::Path(path) => match policy_files(path) {
                    Ok(found) => {
                        for file in found {
                            let name = file.display().to_string();
                            match std::fs::read_to_string(&file) {
                                Ok(text) => texts.push((name, text)),
                                Err(error) => errors
                                    .push(file_error(&name, format!("cannot be read: {error}"))),
                            }
                            files.push(file);
                        }
                    }
                    Err(error) => errors.push(error),
                },
                PolicyInput::Text { name, text } => texts.push((name.clone(), text.clone())),
            }
        }
        let mut policies = Vec::new();
        let mut names = Vec::new();
        for (name, text) in &texts {
            match compile_text(name, text, &mut names) {
                Ok(found) => policies.extend(found),
                Err(found) => errors.extend(found.0),
            }
        }
        errors.extend(duplicate_names(&names));
        if errors.is_empty() && policies.is_empty() {
            let names: Vec<_> = inputs.iter().map(PolicyInput::name).collect();
            errors.push(file_error(
                &names.join(", "),
                "holds no GatePolicy: write at least one policy".into(),
            ));
        }
        if !errors.is_empty() {
            return Err(PolicyErrors(errors));
        }
        policies.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(PolicySet {
            policies,
            sources: files,
        })
    }

    /// `files`' policies and `more`, by name; a name `files` already has is not added again
    /// (the GatePolicy source reports that conflict on the object itself).
    pub fn union(files: &PolicySet, more: &[GatePolicy]) -> PolicySet {
        let mut policies = files.policies.clone();
        for policy in more {
            if !policies.iter().any(|p| p.name == policy.name) {
                policies.push(policy.clone());
            }
        }
        policies.sort_by(|a, b| a.name.cmp(&b.name));
        PolicySet {
            policies,
            sources: files.sources.clone(),
        }
    }

    /// Every policy served in Audit, whatever its mode says (`serve --audit-only`): a first
    /// install observes what it would refuse before it refuses anything.
    pub fn audit_only(mut self) -> PolicySet {
        for policy in &mut self.policies {
            policy.mode = PolicyMode::Audit;
        }
        self
    }

    pub fn into_policies(self) -> Vec<GatePolicy> {
        self.policies
    }

    /// Compiles policies from YAML text (one or more documents); `source` names it in errors.
    pub fn from_yaml(source: &str, text: &str) -> Result<PolicySet, PolicyErrors> {
        let mut names = Vec::new();
        let compiled = compile_text(source, text, &mut names);
        let duplicates = duplicate_names(&names);
        let mut policies = match compiled {
            Ok(policies) if duplicates.is_empty() => policies,
            Ok(_) => return Err(PolicyErrors(duplicates)),
            Err(mut errors) => {
                errors.0.extend(duplicates);
                return Err(errors);
            }
        };
        policies.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(PolicySet {
            policies,
            sources: Vec::new(),
        })
    }
}

/// Where policies are read from: a file or directory, or text already read.
#[derive(Clone, Debug)]
pub enum PolicyInput {
    Path(PathBuf),
    /// `name` says where the text came from in errors (`standard input`).
    Text {
        name: String,
        text: String,
    },
}

impl PolicyInput {
    fn name(&self) -> String {
        match self {
            PolicyInput::Path(path) => path.display().to_string(),
            PolicyInput::Text { name, .. } => name.clone(),
        }
    }
}

/// Where a document names its policy: read even when the document has other problems, so that
/// a name used twice is reported beside them.
#[derive(Clone, Debug)]
struct NamedDocument {
    name: String,
    file: String,
    line: u64,
    document: usize,
}

/// Every document that reuses a name an earlier one has, at its own `metadata.name` line.
fn duplicate_names(names: &[NamedDocument]) -> Vec<PolicyError> {
    let mut seen: BTreeMap<&str, &NamedDocument> = BTreeMap::new();
    let mut errors = Vec::new();
    for named in names {
        match seen.get(named.name.as_str()) {
            None => {
                seen.insert(&named.name, named);
            }
            Some(first) => errors.push(PolicyError {
                file: named.file.clone(),
                line: named.line,
                document: named.document,
                policy: Some(named.name.clone()),
                field: "metadata.name".into(),
                problem: format!(
                    "policy name \"{}\" is already used at {}:{} (document {}); names must be unique",
                    named.name, first.file, first.line, first.document
                ),
            }),
        }
    }
    errors
}

fn file_error(file: &str, problem: String) -> PolicyError {
    PolicyError {
        file: file.to_owned(),
        line: 0,
        document: 0,
        policy: None,
        field: "(file)".into(),
        problem,
    }
}

fn policy_files(path: &Path) -> Result<Vec<PathBuf>, PolicyError> {
    let name = path.display().to_string();
    let meta = std::fs::metadata(path)
        .map_err(|error| file_error(&name, format!("cannot be read: {error}")))?;
    if meta.is_file() {
        return Ok(vec![path.to_path_buf()]);
    }
    let entries = std::fs::read_dir(path)
        .map_err(|error| file_error(&name, format!("cannot be listed: {error}")))?;
    let mut files = Vec::new();
    for entry in entries {
        let entry =
            entry.map_err(|error| file_error(&name, format!("cannot be listed: {error}")))?;
        let entry_path = entry.path();
        let file_name = entry.file_name().to_string_lossy().into_owned();
        let is_yaml = file_name.ends_with(".yaml") || file_name.ends_with(".yml");
        // Follows symlinks, as a ConfigMap mount needs.
        if !file_name.starts_with('.') && is_yaml && entry_path.is_file() {
            files.push(entry_path);
        }
    }
    files.sort();
    Ok(files)
}

/// The policies of one file's text; each document's name, where it has one, is added to
/// `names` (for [`duplicate_names`], across files).
fn compile_text(
    source: &str,
    text: &str,
    names: &mut Vec<NamedDocument>,
) -> Result<Vec<GatePolicy>, PolicyErrors> {
    let mut errors = Vec::new();
    let mut policies = Vec::new();
    for document in reading::documents(text) {
        let before = errors.len();
        let mut check = Checker {
            file: source,
            document: document.number,
            policy: None,
            name_line: None,
            errors: &mut errors,
        };
        let parsed = check.read(&document.text);
        if let (Some(name), Some(line)) = (check.policy.clone(), check.name_line) {
            names.push(NamedDocument {
                name,
                file: source.to_owned(),
                line,
                document: document.number,
            });
        }
        let Some(parsed) = parsed else {
            continue;
        };
        let policy = check.policy(parsed);
        // A document with an unknown field compiles, but is not served.
        if errors.len() == before {
            policies.extend(policy);
        }
    }
    if errors.is_empty() {
        Ok(policies)
    } else {
        Err(PolicyErrors(errors))
    }
}

/// serde-saphyr's message without its own location suffix (ours is in front).
fn yaml_problem(error: &serde_saphyr::Error) -> String {
    let text = error.to_string();
    match text.find(" at line ") {
        Some(at) => text[..at].to_owned(),
        None => text,
    }
}

fn unknown_field_problem(field: &str, expected: &[&str]) -> String {
    match reading::nearest_field(field, expected) {
        Some(near) => format!("unknown field `{field}`; did you mean `{near}`?"),
        None if expected.is_empty() => format!("unknown field `{field}`; this takes no fields"),
        None => format!(
            "unknown field `{field}`; the fields here are {}",
            expected.join(", ")
        ),
    }
}

/// A document blanks one unknown or mistyped field per pass; past this many, it is not a
/// policy at all.
const MAX_UNREADABLE_FIELDS: usize = 200;

/// A value of the wrong type or an unknown enum value (`mode: Enforcing`), said with the
/// values allowed.
fn value_problem(error: &serde_saphyr::Error) -> String {
    match error {
        serde_saphyr::Error::SerdeUnknownVariant {
            variant, expected, ..
        } => match reading::nearest_field(variant, expected) {
            Some(near) => format!("unknown value `{variant}`; did you mean `{near}`?"),
            None => format!(
                "unknown value `{variant}`; write one of {}",
                expected.join(", ")
            ),
        },
        other => {
            let problem = yaml_problem(other);
            // serde-saphyr's words for the three shapes, said as what to write.
            let shape = match problem.as_str() {
                "expected sequence start" => "is not a list; write a list, such as [a, b]",
                "expected string scalar" => "is not a single value; write one, such as a",
                p if p.starts_with("expected mapping") => {
                    "is not a mapping; write key: value entries"
                }
                _ => return problem,
            };
            shape.to_owned()
        }
    }
}

struct Checker<'a> {
    file: &'a str,
    document: usize,
    policy: Option<String>,
    /// The line of the document's `metadata.name`, when it has one.
    name_line: Option<u64>,
    errors: &'a mut Vec<PolicyError>,
}

/// One-line errors, without a snippet of the source: a PolicyError names its file and line.
fn read_options() -> serde_saphyr::Options {
    serde_saphyr::options! { with_snippet: false }
}

/// A label or annotation key: an optional DNS-subdomain prefix and `/`, then a name of at most
/// 63 characters of `[A-Za-z0-9._-]`, starting and ending alphanumeric.
pub fn is_qualified_name(key: &str) -> bool {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    let prefix_ok = prefix.is_none_or(|prefix| {
        !prefix.is_empty()
            && prefix.len() <= 253
            && prefix.split('.').all(|part| {
                !part.is_empty()
                    && part.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
                    && part.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
                    && part
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            })
    });
    name_ok && prefix_ok
}

impl Checker<'_> {
    /// The document as a policy, every unknown field reported (and blanked, so that the rest is
    /// still read); None, its problem reported, when it is YAML that does not read as a policy
    /// or another engine's document.
    fn read(&mut self, text: &str) -> Option<GatePolicyDocument> {
        let outline = self.outline(text)?;
        self.remember_name(&outline);
        if self.refuse_foreign(&outline) {
            return None;
        }
        self.read_fields(text, &outline)
    }

    /// The document's keys and values with their lines, to say where a problem is; None when it
    /// is empty, or not YAML (reported).
    fn outline(&mut self, text: &str) -> Option<Node> {
        match serde_saphyr::from_str_with_options::<Option<Node>>(text, read_options()) {
            Ok(outline) => outline,
            Err(error) => {
                self.yaml_error(&error);
                None
            }
        }
    }

    /// The policy's name, for every error from here on, and its line, for clashes with another's.
    fn remember_name(&mut self, outline: &Node) {
        let name = outline
            .get("metadata")
            .and_then(|metadata| metadata.value.get("name"));
        self.policy = name.and_then(|name| name.value.text()).map(str::to_owned);
        // Only a GatePolicy's name can clash with another's.
        let is_policy = outline.get("kind").and_then(|k| k.value.text()) == Some(KIND);
        self.name_line = name
            .filter(|_| is_policy)
            .map(|name| name.referenced.line());
    }

    /// Whether the document is another engine's, or not an object at all: reported, and not
    /// read as a policy.
    fn refuse_foreign(&mut self, outline: &Node) -> bool {
        let text_of = |key| outline.get(key).and_then(|v| v.value.text());
        if let (Some(api_version), Some(kind)) = (outline.get("apiVersion"), text_of("kind"))
            && let Some(problem) = api_version
                .value
                .text()
                .and_then(|api_version| foreign::other_engine(api_version, kind))
        {
            self.error(api_version.referenced, "apiVersion", problem);
            return true;
        }
        if let Node::Map(entries) = outline
            && outline.get("apiVersion").is_none()
            && outline.get("kind").is_none()
        {
            let first = entries
                .first()
                .map_or(Location::UNKNOWN, |(k, _)| k.referenced);
            self.error(first, "(document)", foreign::not_an_object());
            return true;
        }
        false
    }

    /// [`Checker::read`] once the document is known to be meant as a policy: each field it cannot
    /// read is reported and blanked, and the rest read again.
    fn read_fields(&mut self, text: &str, outline: &Node) -> Option<GatePolicyDocument> {
        let is_object = outline.get("kind").and_then(|v| v.value.text()) == Some(KIND);
        let original = text;
        let mut text = text.to_owned();
        let mut server_fields: Vec<(Location, String)> = Vec::new();
        // Fields whose value was of the wrong type, blanked to read on.
        let mut blanked: Vec<String> = Vec::new();
        let mut result = None;
        for _ in 0..MAX_UNREADABLE_FIELDS {
            let error = match serde_saphyr::from_str_with_options::<GatePolicyDocument>(
                &text,
                read_options(),
            ) {
                Ok(parsed) => {
                    result = Some(parsed);
                    break;
                }
                Err(error) => error,
            };
            let entry = match &error {
                serde_saphyr::Error::SerdeUnknownField {
                    field,
                    expected,
                    location,
                } => {
                    let path = outline.path_of_key(*location).unwrap_or(field.clone());
                    if is_object && foreign::is_server_field(&path) {
                        server_fields.push((*location, path));
                    } else {
                        self.error(*location, path, unknown_field_problem(field, expected));
                    }
                    *location
                }
                serde_saphyr::Error::SerdeMissingField { field, location } => {
                    // A required field blanked for its type is missing now: said already.
                    if !blanked
                        .iter()
                        .any(|path| path.rsplit('.').next() == Some(field))
                    {
                        self.missing_field(outline, field, *location);
                    }
                    break;
                }
                _ => {
                    let Some((path, entry, at)) = error
                        .location()
                        .and_then(|at| Some((outline.value_at(at)?, at)))
                        .map(|((path, entry), at)| (path, entry, at))
                    else {
                        // Once a field was blanked, an error no value explains is its echo (a
                        // mapping left empty): the document is refused already.
                        if text == original {
                            self.yaml_error(&error);
                        }
                        break;
                    };
                    self.error(at, path.clone(), value_problem(&error));
                    blanked.push(path);
                    entry
                }
            };
            match reading::blank_entry(&text, entry) {
                Some(next) if next != text => text = next,
                _ => break,
            }
        }
        if let Some((at, _)) = server_fields.first() {
            let paths: Vec<String> = server_fields.iter().map(|(_, p)| p.clone()).collect();
            self.error(*at, "(object)", foreign::exported_object(&paths));
        }
        result
    }

    /// Named at the mapping that lacks it, found from the sibling key serde-saphyr points at.
    fn missing_field(&mut self, outline: &Node, field: &str, at: Location) {
        let sibling = outline.path_of_key(at);
        let parent = match sibling.as_deref().map(|path| path.rsplit_once('.')) {
            Some(Some((parent, _))) => parent.to_owned(),
            Some(None) => "(document)".to_owned(),
            None => "(yaml)".to_owned(),
        };
        self.error(at, parent, format!("missing field `{field}`"));
    }

    fn yaml_error(&mut self, error: &serde_saphyr::Error) {
        self.errors.push(PolicyError {
            file: self.file.to_owned(),
            line: error.location().map(|l| l.line()).unwrap_or(0),
            document: self.document,
            policy: self.policy.clone(),
            field: "(yaml)".into(),
            problem: yaml_problem(error),
        });
    }

    fn error(&mut self, at: Location, field: impl Into<String>, problem: impl Into<String>) {
        self.errors.push(PolicyError {
            file: self.file.to_owned(),
            line: at.line(),
            document: self.document,
            policy: self.policy.clone(),
            field: field.into(),
            problem: problem.into(),
        });
    }

    /// Compiles a list of globs, reporting each bad one at its own line.
    fn globs(&mut self, field: &str, patterns: &[Spanned<String>]) -> GlobSet {
        let mut good = Vec::new();
        for (i, pattern) in patterns.iter().enumerate() {
            if pattern.value.is_empty() {
                self.error(
                    pattern.referenced,
                    format!("{field}[{i}]"),
                    "must not be empty",
                );
                continue;
            }
            match compile_globs(&[pattern.value.as_str()]) {
                Ok(_) => good.push(pattern.value.as_str()),
                Err(problem) => self.error(pattern.referenced, format!("{field}[{i}]"), problem),
            }
        }
        compile_globs(&good).unwrap_or_default()
    }

    fn identity(
        &mut self,
        field: &str,
        at: Location,
        usernames: &[Spanned<String>],
        groups: &[Spanned<String>],
    ) -> IdentityMatcher {
        if usernames.is_empty() && groups.is_empty() {
            self.error(
                at,
                field,
                "names no identity: list at least one entry in usernames or groups",
            );
        }
        self.identity_matcher(field, usernames, groups)
    }

    /// [`Checker::identity`] that accepts an empty list (which matches nobody).
    fn identity_matcher(
        &mut self,
        field: &str,
        usernames: &[Spanned<String>],
        groups: &[Spanned<String>],
    ) -> IdentityMatcher {
        IdentityMatcher {
            usernames: self.globs(&format!("{field}.usernames"), usernames),
            groups: self.globs(&format!("{field}.groups"), groups),
            username_patterns: usernames.iter().map(|s| s.value.clone()).collect(),
            group_patterns: groups.iter().map(|s| s.value.clone()).collect(),
        }
    }

    fn subresource_list(&mut self, field: &str, list: &[Spanned<String>]) -> Vec<String> {
        let mut out = Vec::new();
        for (i, sub) in list.iter().enumerate() {
            let ok = sub.value.is_empty()
                || sub
                    .value
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
            if ok {
                out.push(sub.value.clone());
            } else {
                self.error(
                    sub.referenced,
                    format!("{field}[{i}]"),
                    format!(
                        "\"{}\" is not a subresource name; use \"\" for the object itself, or a name such as scale",
                        sub.value
                    ),
                );
            }
        }
        out
    }

    fn policy(&mut self, doc: GatePolicyDocument) -> Option<GatePolicy> {
        let errors_before = self.errors.len();
        let name = doc.metadata.name.value.clone();
        self.policy = Some(name.clone());
        self.check_header(&doc);
        let spec = doc.spec.value;
        let (namespace_include, namespace_exclude, namespace_selector) =
            self.namespaces(spec.namespaces);
        let (resource_include, resource_exclude) = self.resources(spec.resources.as_ref());
        let operations = self.operations(spec.operations);
        let subresources = match &spec.subresources {
            None => vec![String::new(), "scale".to_owned()],
            Some(list) => self.subresource_list("spec.subresources", list),
        };

        let holds = spec
            .break_glass
            .as_ref()
            .map(|bg| bg.value.hold_controller.unwrap_or(true));
        let controllers = self.controllers(&spec.controllers, holds);
        let delegations = self.delegations(&spec.delegations, &subresources);
        let break_glass = spec.break_glass.map(|bg| self.break_glass(bg.value));
        let cluster_scoped = spec
            .cluster_scoped
            .map(|c| self.cluster_scoped(c.referenced, c.value));
        let deletions = spec
            .deletions
            .map(|d| self.deletions(d.value, cluster_scoped.is_some()));
        if let (Some(section), None) = (&spec.suspensions, &break_glass) {
            self.error(
                section.referenced,
                "spec.suspensions",
                "needs spec.breakGlass: a suspension is a break-glass window, opened by its openers for at most its maxDuration",
            );
        }
        let suspensions = spec.suspensions.map(|s| self.suspensions(s.value));

        if self.errors.len() > errors_before {
            return None;
        }
        Some(GatePolicy {
            name,
            source: self.file.to_owned(),
            mode: spec.mode,
            owner: spec.owner.filter(|owner| !owner.trim().is_empty()),
            namespace_include,
            namespace_exclude,
            namespace_selector,
            resource_include,
            resource_exclude,
            operations,
            subresources,
            controllers,
            delegations,
            break_glass: break_glass.flatten(),
            deletions: deletions.flatten(),
            suspensions,
            cluster_scoped,
        })
    }

    /// `apiVersion`, `kind` and `metadata.name`.
    fn check_header(&mut self, doc: &GatePolicyDocument) {
        if doc.api_version.value != API_VERSION {
            self.error(
                doc.api_version.referenced,
                "apiVersion",
                format!(
                    "\"{}\" is not supported; use {API_VERSION}",
                    doc.api_version.value
                ),
            );
        }
        if doc.kind.value != KIND {
            self.error(
                doc.kind.referenced,
                "kind",
                format!("\"{}\" is not a policy; use {KIND}", doc.kind.value),
            );
        }
        let name = &doc.metadata.name.value;
        let name_ok = !name.is_empty()
            && name.len() <= 253
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.');
        if !name_ok {
            self.error(
                doc.metadata.name.referenced,
                "metadata.name",
                format!(
                    "\"{name}\" is not a valid name; use lowercase letters, digits, '-' and '.'"
                ),
            );
        }
    }

    /// `spec.namespaces`: the include and exclude globs, and the label selector.
    fn namespaces(
        &mut self,
        namespaces: Spanned<NamespaceScopeSpec>,
    ) -> (GlobSet, GlobSet, Option<BTreeMap<String, String>>) {
        if namespaces.value.include.is_empty() && namespaces.value.selector.is_none() {
            self.error(
                namespaces.referenced,
                "spec.namespaces.include",
                "is empty: name at least one namespace glob such as \"prod-*\"",
            );
        }
        let include = self.globs("spec.namespaces.include", &namespaces.value.include);
        let exclude = self.globs("spec.namespaces.exclude", &namespaces.value.exclude);
        let selector = namespaces.value.selector.map(|s| s.match_labels.value);
        (include, exclude, selector)
    }

    /// `spec.resources`: the include and exclude globs; every kind when it is left out.
    fn resources(&mut self, resources: Option<&ResourceScopeSpec>) -> (GlobSet, GlobSet) {
        let Some(resources) = resources else {
            return (compile_globs(&["*"]).unwrap_or_default(), GlobSet::empty());
        };
        let include = match &resources.include {
            Some(list) => {
                self.resource_patterns("spec.resources.include", list);
                self.globs("spec.resources.include", list)
            }
            None => compile_globs(&["*"]).unwrap_or_default(),
        };
        self.resource_patterns("spec.resources.exclude", &resources.exclude);
        (
            include,
            self.globs("spec.resources.exclude", &resources.exclude),
        )
    }

    /// `spec.operations`: all three when it is left out.
    fn operations(
        &mut self,
        operations: Option<Spanned<Vec<GuardedOperation>>>,
    ) -> Vec<GuardedOperation> {
        let Some(list) = operations else {
            return vec![
                GuardedOperation::Create,
                GuardedOperation::Update,
                GuardedOperation::Delete,
            ];
        };
        if list.value.is_empty() {
            self.error(
                list.referenced,
                "spec.operations",
                "is empty: list CREATE, UPDATE and/or DELETE, or leave it out for all three",
            );
        }
        list.value
    }

    /// `spec.clusterScoped`: every entry that cannot be guarded said at its line, with why.
    fn cluster_scoped(
        &mut self,
        at: Location,
        spec: ClusterScopedSpec,
    ) -> cluster_scoped::ClusterScopedRules {
        use cluster_scoped::{ClusterKind, DEFAULT_CLUSTER_SCOPED};
        let Some(entries) = spec.resources else {
            let kinds = DEFAULT_CLUSTER_SCOPED
                .iter()
                .map(|(group, kind)| ClusterKind {
                    group: (*group).to_owned(),
                    kind: (*kind).to_owned(),
                })
                .collect();
            return cluster_scoped::ClusterScopedRules { kinds };
        };
        let known = cluster_scoped::built_in_kinds();
        let mut kinds: Vec<ClusterKind> = Vec::new();
        for (i, entry) in entries.iter().enumerate() {
            let field = format!("spec.clusterScoped.resources[{i}]");
            let group = entry.value.group.as_ref().map_or("", |g| g.value.as_str());
            let group = if group == "core" { "" } else { group };
            let kind = ClusterKind {
                group: group.to_owned(),
                kind: entry.value.kind.value.clone(),
            };
            let problem = if kind.kind.is_empty() {
                Some("kind must not be empty".to_owned())
            } else if kinds.contains(&kind) {
                Some(format!("{kind} is listed twice"))
            } else {
                cluster_scoped::problem(group, &kind.kind, &known)
            };
            match problem {
                Some(problem) => self.error(entry.referenced, field, problem),
                None => kinds.push(kind),
            }
        }
        if entries.is_empty() {
            self.error(
                at,
                "spec.clusterScoped.resources",
                "is empty: list the kinds to guard, or leave it out for CustomResourceDefinition, ClusterRole and ClusterRoleBinding",
            );
        }
        cluster_scoped::ClusterScopedRules { kinds }
    }

    fn resource_patterns(&mut self, field: &str, list: &[Spanned<String>]) {
        for (i, pattern) in list.iter().enumerate() {
            if pattern.value != "*" && !pattern.value.contains('/') {
                self.error(
                    pattern.referenced,
                    format!("{field}[{i}]"),
                    format!(
                        "\"{}\" must be \"group/Kind\" (the core group is \"core\"), e.g. \"apps/*\", \"core/ConfigMap\", or \"*\"",
                        pattern.value
                    ),
                );
            }
        }
    }

    fn check_unique_name(
        &mut self,
        seen: &mut HashSet<String>,
        field: &str,
        name: &Spanned<String>,
    ) {
        if name.value.trim().is_empty() {
            self.error(name.referenced, field, "must not be empty");
        } else if !seen.insert(name.value.clone()) {
            self.error(
                name.referenced,
                field,
                format!(
                    "\"{}\" is used twice; names must be unique in a policy",
                    name.value
                ),
            );
        }
    }

    /// `holds`: whether the policy's windows hold controllers at all (None: it has no breakGlass).
    fn controllers(&mut self, specs: &[ControllerSpec], holds: Option<bool>) -> Vec<Controller> {
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        for (i, spec) in specs.iter().enumerate() {
            let field = format!("spec.controllers[{i}]");
            self.check_unique_name(&mut seen, &format!("{field}.name"), &spec.name);
            let identity =
                self.identity(&field, spec.name.referenced, &spec.usernames, &spec.groups);
            let field_managers =
                self.globs(&format!("{field}.fieldManagers"), &spec.field_managers);
            if let Some(held) = &spec.held_by_windows {
                self.held_by_windows_has_effect(&format!("{field}.heldByWindows"), held, holds);
            }
            out.push(Controller {
                name: spec.name.value.clone(),
                identity,
                field_managers,
                field_manager_patterns: spec
                    .field_managers
                    .iter()
                    .map(|s| s.value.clone())
                    .collect(),
                held_by_windows: spec.held_by_windows.as_ref().is_none_or(|h| h.value.0),
            });
        }
        out
    }

    /// `heldByWindows` means something only where windows hold controllers; said anywhere else
    /// it would promise a protection (or an exemption) that does not exist.
    fn held_by_windows_has_effect(
        &mut self,
        field: &str,
        held: &Spanned<document::Flag>,
        holds: Option<bool>,
    ) {
        let problem = match holds {
            Some(true) => return,
            Some(false) => {
                "has no effect: spec.breakGlass.holdController is false, so no window holds any controller"
            }
            None => {
                "has no effect: the policy has no spec.breakGlass, so no window holds any controller"
            }
        };
        self.error(
            held.referenced,
            field,
            format!("{problem}; remove it, or set holdController: true"),
        );
    }

    fn delegations(&mut self, specs: &[DelegationSpec], guarded: &[String]) -> Vec<Delegation> {
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        for (i, spec) in specs.iter().enumerate() {
            let field = format!("spec.delegations[{i}]");
            self.check_unique_name(&mut seen, &format!("{field}.name"), &spec.name);
            let identity =
                self.identity(&field, spec.name.referenced, &spec.usernames, &spec.groups);
            let subresources = match &spec.subresources {
                None => vec![String::new()],
                Some(list) => {
                    let subs = self.subresource_list(&format!("{field}.subresources"), list);
                    for (j, sub) in list.iter().enumerate() {
                        if !guarded.contains(&sub.value) {
                            self.error(
                                sub.referenced,
                                format!("{field}.subresources[{j}]"),
                                format!(
                                    "\"{}\" is not guarded by this policy (spec.subresources), so a delegation on it has no effect",
                                    sub.value
                                ),
                            );
                        }
                    }
                    subs
                }
            };
            if spec.fields.is_empty() {
                self.error(
                    spec.name.referenced,
                    format!("{field}.fields"),
                    "is empty: name the fields this identity may change, e.g. spec.replicas",
                );
            }
            let mut fields = Vec::new();
            for (j, text) in spec.fields.iter().enumerate() {
                match FieldPattern::parse(&text.value) {
                    Ok(pattern) => fields.push(pattern),
                    Err(error) => self.error(
                        text.referenced,
                        format!("{field}.fields[{j}]"),
                        format!(
                            "{error}; write a dotted path with bracketed keys, e.g. metadata.annotations[example.com/key]"
                        ),
                    ),
                }
            }
            out.push(Delegation {
                name: spec.name.value.clone(),
                identity,
                subresources,
                fields,
            });
        }
        out
    }

    /// `cluster_scoped`: the policy guards cluster-scoped kinds, so CRDs are protected by default.
    fn deletions(&mut self, spec: DeletionsSpec, cluster_scoped: bool) -> Option<DeletionRules> {
        let extra: &[&str] = if cluster_scoped {
            DEFAULT_PROTECTED_CLUSTER_KINDS
        } else {
            &[]
        };
        let defaults: Vec<&str> = DEFAULT_PROTECTED_KINDS
            .iter()
            .chain(extra)
            .copied()
            .collect();
        let kind_patterns: Vec<String> = match &spec.kinds {
            None => defaults.iter().map(|k| k.to_string()).collect(),
            Some(list) => {
                self.resource_patterns("spec.deletions.kinds", list);
                list.iter().map(|k| k.value.clone()).collect()
            }
        };
        let kinds = match &spec.kinds {
            None => compile_globs(&defaults).unwrap_or_default(),
            Some(list) => self.globs("spec.deletions.kinds", list),
        };
        let allow_annotation = match spec.allow_annotation {
            None => DEFAULT_ALLOW_DELETION_ANNOTATION.to_owned(),
            Some(key) => {
                if !is_qualified_name(&key.value) {
                    self.error(
                        key.referenced,
                        "spec.deletions.allowAnnotation",
                        format!(
                            "\"{}\" is not a valid annotation key (optional DNS prefix and '/', then up to 63 of [A-Za-z0-9._-])",
                            key.value
                        ),
                    );
                }
                key.value
            }
        };
        // Exempting nobody is a choice, not a mistake: an empty list is accepted here.
        let exempt = match &spec.exempt {
            None => IdentityMatcher::usernames(DEFAULT_DELETION_EXEMPT),
            Some(exempt) => self.identity_matcher(
                "spec.deletions.exempt",
                &exempt.value.usernames,
                &exempt.value.groups,
            ),
        };
        let controller_limit = match spec.controller_limit {
            None => None,
            Some(limit) => self.deletion_limit(limit.value),
        };
        Some(DeletionRules {
            kinds,
            kind_patterns,
            allow_annotation,
            exempt,
            controller_limit,
        })
    }

    fn deletion_limit(&mut self, spec: DeletionLimitSpec) -> Option<DeletionLimit> {
        if spec.deletes.value == 0 {
            self.error(
                spec.deletes.referenced,
                "spec.deletions.controllerLimit.deletes",
                "must be at least 1 (to refuse every delete, protect the kinds instead)",
            );
        }
        let per = match WindowDuration::parse(&spec.per.value) {
            Ok(per) => Some(per),
            Err(error) => {
                self.error(
                    spec.per.referenced,
                    "spec.deletions.controllerLimit.per",
                    error.to_string(),
                );
                None
            }
        };
        Some(DeletionLimit {
            deletes: spec.deletes.value,
            per: per?,
        })
    }

    fn break_glass(&mut self, spec: BreakGlassSpec) -> Option<BreakGlassRules> {
        let label = self.label_or_annotation_key(
            "spec.breakGlass.label",
            spec.label,
            DEFAULT_BREAK_GLASS_LABEL,
        );
        let reason_annotation = self.label_or_annotation_key(
            "spec.breakGlass.reasonAnnotation",
            spec.reason_annotation,
            DEFAULT_REASON_ANNOTATION,
        );
        let max_duration = self.window_duration("spec.breakGlass.maxDuration", &spec.max_duration);
        let refuse_reverts_for = spec
            .refuse_reverts_for
            .as_ref()
            .and_then(|text| self.window_duration("spec.breakGlass.refuseRevertsFor", text));
        let reason_pattern = spec
            .reason_pattern
            .as_ref()
            .and_then(|pattern| self.reason_pattern(pattern));
        let openers = self.identity(
            "spec.breakGlass.openers",
            spec.openers.referenced,
            &spec.openers.value.usernames,
            &spec.openers.value.groups,
        );
        Some(BreakGlassRules {
            label,
            reason_annotation,
            require_reason: spec.require_reason.unwrap_or(true),
            max_duration: max_duration?,
            openers,
            hold_controller: spec.hold_controller.unwrap_or(true),
            namespace_wide: spec.namespace_wide.unwrap_or(false),
            refuse_reverts_for,
            record_values: spec.record_values.unwrap_or(false),
            reason_pattern,
        })
    }

    /// The key `value` names, checked, or `default` when it is left out.
    fn label_or_annotation_key(
        &mut self,
        field: &str,
        value: Option<Spanned<String>>,
        default: &str,
    ) -> String {
        let Some(key) = value else {
            return default.to_owned();
        };
        if !is_qualified_name(&key.value) {
            self.error(
                key.referenced,
                field,
                format!(
                    "\"{}\" is not a valid label/annotation key (optional DNS prefix and '/', then up to 63 of [A-Za-z0-9._-])",
                    key.value
                ),
            );
        }
        key.value
    }

    /// A window's duration (`4h`); None when it does not read as one (reported).
    fn window_duration(&mut self, field: &str, text: &Spanned<String>) -> Option<WindowDuration> {
        match WindowDuration::parse(&text.value) {
            Ok(duration) => Some(duration),
            Err(error) => {
                self.error(text.referenced, field, error.to_string());
                None
            }
        }
    }

    /// `spec.breakGlass.reasonPattern` compiled; None when it is not a regular expression
    /// (reported with the syntax error's last line, the one that says what is wrong).
    fn reason_pattern(&mut self, pattern: &Spanned<String>) -> Option<regex::Regex> {
        match regex::Regex::new(&pattern.value) {
            Ok(regex) => Some(regex),
            Err(error) => {
                let problem = match error {
                    regex::Error::Syntax(text) => text.lines().last().unwrap_or("").to_owned(),
                    other => other.to_string(),
                };
                self.error(
                    pattern.referenced,
                    "spec.breakGlass.reasonPattern",
                    format!(
                        "\"{}\" is not a valid regular expression: {problem}",
                        pattern.value
                    ),
                );
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qualified_names() {
        for good in [
            "driftgate.dev/break-glass",
            "app",
            "a.b/c_d-e.f",
            "example.com/X1",
        ] {
            assert!(is_qualified_name(good), "{good}");
        }
        for bad in [
            "",
            "/x",
            "x/",
            "Example.com/x",
            "a/b/c",
            "-x",
            "x-",
            "a..b/x",
        ] {
            assert!(!is_qualified_name(bad), "{bad}");
        }
    }

    const HELD: &str = r#"
apiVersion: driftgate.dev/v1alpha1
kind: GatePolicy
metadata: {name: p}
spec:
  namespaces: {include: ["prod-*"]}
  controllers:
    - {name: flux, usernames: [flux]}
    - {name: kubernetes, usernames: [kcm], heldByWindows: false}
"#;

    #[test]
    fn held_by_windows_defaults_to_true_and_can_be_turned_off() {
        let text = format!("{HELD}  breakGlass: {{maxDuration: 1h, openers: {{groups: [sre]}}}}\n");
        let set = PolicySet::from_yaml("inline", &text).unwrap();
        let held: Vec<_> = set.policies()[0]
            .controllers
            .iter()
            .map(|c| (c.name.as_str(), c.held_by_windows))
            .collect();
        assert_eq!(held, [("flux", true), ("kubernetes", false)]);
    }

    #[test]
    fn held_by_windows_without_windows_that_hold_is_an_error() {
        let errors = PolicySet::from_yaml("inline", HELD).unwrap_err().0;
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0].field, "spec.controllers[1].heldByWindows");
        assert_eq!(errors[0].line, 9);
        assert!(
            errors[0].problem.contains("no spec.breakGlass"),
            "{errors:?}"
        );
        let text = format!(
            "{HELD}  breakGlass: {{maxDuration: 1h, openers: {{groups: [sre]}}, holdController: false}}\n"
        );
        let errors = PolicySet::from_yaml("inline", &text).unwrap_err().0;
        assert!(
            errors[0].problem.contains("holdController is false"),
            "{errors:?}"
        );
    }

    /// Document 1 has two unknown fields and a bad glob; document 2 is broken YAML; document 3
    /// is a Kyverno policy; document 4 has a semantic problem only.
    const MANY: &str = r#"apiVersion: driftgate.dev/v1alpha1
kind: GatePolicy
metadata: {name: one}
spec:
  namespaces: {include: ["prod-["]}
  controllers:
    - {name: flux, usernames: [flux], lable: x}
  breakGlass:
    maxDuration: 1h
    openers: {groups: [sre]}
    requireResaon: true
---
apiVersion: driftgate.dev/v1alpha1
kind: GatePolicy
metadata: {name: two
---
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: three}
spec: {rules: []}
---
apiVersion: driftgate.dev/v1alpha1
kind: GatePolicy
metadata: {name: four}
spec:
  namespaces: {include: ["staging"]}
  operations: []
"#;

    #[test]
    fn every_problem_of_every_document_in_one_run() {
        let errors = PolicySet::from_yaml("many.yaml", MANY).unwrap_err().0;
        let lines: Vec<String> = errors.iter().map(ToString::to_string).collect();
        let at = |field: &str| {
            errors
                .iter()
                .find(|e| e.field == field)
                .unwrap_or_else(|| panic!("no problem at {field}: {lines:#?}"))
        };
        let lable = at("spec.controllers[0].lable");
        assert_eq!((lable.line, lable.document), (7, 1), "{lines:#?}");
        assert!(
            lable.problem.ends_with(
                "the fields here are name, usernames, groups, fieldManagers, heldByWindows"
            ),
            "{lines:#?}"
        );
        let resaon = at("spec.breakGlass.requireResaon");
        assert_eq!(resaon.line, 11);
        assert_eq!(
            resaon.problem,
            "unknown field `requireResaon`; did you mean `requireReason`?"
        );
        assert!(at("spec.namespaces.include[0]").problem.contains("glob"));
        assert_eq!(at("(yaml)").document, 2);
        let kyverno = at("apiVersion");
        assert_eq!((kyverno.line, kyverno.document), (17, 3));
        assert!(kyverno.problem.contains("Kyverno ClusterPolicy"));
        let four = at("spec.operations");
        assert_eq!((four.document, four.policy.as_deref()), (4, Some("four")));
        assert_eq!(errors.len(), 6, "{lines:#?}");
    }

    #[test]
    fn an_object_read_back_from_a_cluster_is_named_and_its_spec_checked() {
        let text = r#"apiVersion: driftgate.dev/v1alpha1
kind: GatePolicy
metadata:
  name: exported
  uid: 0b5c
  resourceVersion: "42"
  managedFields:
  - manager: kubectl
spec:
  namespaces: {include: [prod-*]}
  operations: []
status:
  conditions: []
"#;
        let errors = PolicySet::from_yaml("exported.yaml", text).unwrap_err().0;
        assert_eq!(errors.len(), 2, "{errors:#?}");
        assert_eq!((errors[0].field.as_str(), errors[0].line), ("(object)", 5));
        assert!(
            errors[0].problem.contains(
                "(it has metadata.uid, metadata.resourceVersion, metadata.managedFields, status)"
            ),
            "{errors:#?}"
        );
        assert_eq!(errors[1].field, "spec.operations");
    }

    #[test]
    fn without_unknown_fields_the_policy_is_the_same() {
        let set = PolicySet::from_yaml(
            "inline",
            &format!(
                "---\n{HELD}  breakGlass: {{maxDuration: 1h, openers: {{groups: [sre]}}}}\n---\n"
            ),
        )
        .unwrap();
        assert_eq!(set.policies().len(), 1);
        assert_eq!(set.policies()[0].name, "p");
    }

    #[test]
    fn values_of_the_wrong_type_are_each_named_and_the_rest_still_checked() {
        let text = r#"apiVersion: driftgate.dev/v1alpha1
kind: GatePolicy
metadata: {name: typed}
spec:
  mode: Enforcing
  owner: [team-a]
  namespaces: {include: ["prod-*"]}
  operations: [CREATE, PATCH]
  controllers:
    - {name: flux, usernames: {flux: true}}
  delegations:
    - {name: hpa, usernames: [hpa], fields: []}
"#;
        let errors = PolicySet::from_yaml("typed.yaml", text).unwrap_err().0;
        let found: Vec<(u64, &str, &str)> = errors
            .iter()
            .map(|e| (e.line, e.field.as_str(), e.problem.as_str()))
            .collect();
        let at = |field: &str| {
            found
                .iter()
                .find(|(_, f, _)| *f == field)
                .unwrap_or_else(|| panic!("no {field} in {found:#?}"))
        };
        assert_eq!(
            at("spec.mode"),
            &(
                5,
                "spec.mode",
                "unknown value `Enforcing`; did you mean `Enforce`?"
            )
        );
        assert_eq!(at("spec.owner").0, 6);
        assert_eq!(at("spec.operations[1]").0, 8);
        assert!(
            at("spec.operations[1]")
                .2
                .contains("CREATE, UPDATE, DELETE"),
            "{found:#?}"
        );
        assert_eq!(
            at("spec.controllers[0].usernames"),
            &(
                10,
                "spec.controllers[0].usernames",
                "is not a list; write a list, such as [a, b]"
            )
        );
        assert_eq!(
            at("spec.owner").2,
            "is not a single value; write one, such as a"
        );
        // Read past, the controller has no usernames: the semantic checks say so too.
        assert_eq!(at("spec.controllers[0]").0, 10);
        assert_eq!(at("spec.delegations[0].fields").0, 12);
        assert_eq!(errors.len(), 6, "{found:#?}");

        let required = "apiVersion: driftgate.dev/v1alpha1\nkind: GatePolicy\nmetadata: {name: r}\nspec:\n  namespaces: prod-*\n";
        let errors = PolicySet::from_yaml("required.yaml", required)
            .unwrap_err()
            .0;
        assert_eq!(errors.len(), 1, "{errors:#?}");
        assert_eq!(
            (errors[0].line, errors[0].field.as_str()),
            (5, "spec.namespaces")
        );
    }

    #[test]
    fn a_mapping_without_apiversion_or_kind_is_one_problem() {
        let errors = PolicySet::from_yaml("values.yaml", "# c\nreplicas: 2\nimage: {tag: x}\n")
            .unwrap_err()
            .0;
        assert_eq!(errors.len(), 1, "{errors:#?}");
        assert_eq!(
            (errors[0].line, errors[0].field.as_str()),
            (2, "(document)")
        );
        assert!(errors[0].problem.contains("neither apiVersion nor kind"));
    }
}
