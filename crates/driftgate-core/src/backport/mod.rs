//! Writing an emergency change back into the GitOps repository: which manifest declares each
//! recorded field, and the file as it reads with the emergency value written in place.
//!
//! Pure: the repository's files, the live object and the values come in; the edits, and what
//! was left alone with why, come out. `cli::backport` reads the record, the object and the
//! checkout, and makes the branch and the commit.
//!
//! Which files count follows what the controller applies: from a directory (the Flux
//! Kustomization's `spec.path`, the Argo CD Application's `spec.source.path`), its
//! `kustomization.yaml` (resources, then patches, which win over what they patch), or, without
//! one, every manifest below it, as Flux generates (and Argo CD reads with
//! `directory.recurse`), or only those directly in it (an Argo CD directory source's default).

pub mod reread;
pub mod yaml;

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::fieldpath::FieldPath;
use reread::{Change, RereadProblem, Step};
use yaml::{Node, documents, replaced, scalar_text};

/// A file of the checkout: its path from the repository's root (`/`-separated) and text.
#[derive(Clone, Debug)]
pub struct RepoFile {
    pub path: String,
    pub text: String,
}

/// The object whose manifest is looked for.
#[derive(Clone, Debug)]
pub struct Target {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub namespace: String,
}

impl Target {
    fn group(&self) -> &str {
        self.api_version
            .rsplit_once('/')
            .map_or("", |(group, _)| group)
    }

    fn describe(&self) -> String {
        format!("{} {}/{}", self.kind, self.namespace, self.name)
    }
}

/// A field to write, at its path in the live object, with its emergency value.
#[derive(Clone, Debug)]
pub struct Wanted {
    pub path: FieldPath,
    pub value: Value,
}

/// One file rewritten, and the fields written into it.
#[derive(Clone, Debug, PartialEq)]
pub struct FileEdit {
    pub path: String,
    pub text: String,
    pub fields: Vec<WrittenField>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct WrittenField {
    pub field: String,
    pub line: usize,
    pub old: String,
    pub new: String,
}

/// A field left as it is, and why.
#[derive(Clone, Debug, PartialEq)]
pub struct Skipped {
    pub field: String,
    pub why: String,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct BackportPlan {
    pub edits: Vec<FileEdit>,
    pub skipped: Vec<Skipped>,
    /// Files that could not be read as YAML (they are left out of the search).
    pub unreadable: Vec<String>,
}

/// Why no backport can be planned at all.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("no manifest applied from {start} declares {target}")]
    NoManifest { start: String, target: String },
    /// The edited file, read again, is not the file in Git with only the recorded fields set.
    #[error(
        "writing {fields} into {file} would change more than those fields: {problem}; nothing was written: edit the manifest by hand"
    )]
    Unfaithful {
        file: String,
        fields: String,
        problem: Box<RereadProblem>,
    },
}

/// One document of one file that declares the target object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct DocRef {
    file: usize,
    doc: usize,
}

struct Repo<'f> {
    files: &'f [RepoFile],
    docs: Vec<Vec<Node>>,
    kustomizations: BTreeMap<String, Kustomization>,
    depth: Depth,
}

/// Which manifests of a directory without a kustomization.yaml the controller applies.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Depth {
    /// Every manifest below it, a subdirectory with a kustomization.yaml as that kustomization
    /// (Flux generates one so; Argo CD's `directory.recurse: true` reads them all).
    #[default]
    Below,
    /// Only the files directly in it (an Argo CD directory source without `recurse`).
    Directly,
}

#[derive(Default)]
struct Kustomization {
    resources: Vec<String>,
    patches: Vec<String>,
}

/// The edits that write `wanted` into the manifests of `target` applied from `start` (a
/// directory from the repository's root, "" for the root), every manifest below it counting.
pub fn plan(
    files: &[RepoFile],
    start: &str,
    target: &Target,
    wanted: &[Wanted],
    live: &Value,
) -> Result<BackportPlan, PlanError> {
    plan_at_depth(files, (start, Depth::Below), target, wanted, live)
}

/// [`plan`] with the manifests of a directory without a kustomization.yaml read to `depth`.
pub fn plan_at_depth(
    files: &[RepoFile],
    (start, depth): (&str, Depth),
    target: &Target,
    wanted: &[Wanted],
    live: &Value,
) -> Result<BackportPlan, PlanError> {
    let mut plan = BackportPlan::default();
    let mut repo = Repo::read(files, &mut plan.unreadable);
    repo.depth = depth;
    let start = normalise(start);
    let layers = repo.layers(&start, target, &mut BTreeSet::new());
    if layers.iter().all(|layer| layer.is_empty()) {
        return Err(PlanError::NoManifest {
            start: if start.is_empty() {
                "the repository's root".into()
            } else {
                start
            },
            target: target.describe(),
        });
    }
    let mut by_file: BTreeMap<usize, Vec<(Wanted, Declared<'_>)>> = BTreeMap::new();
    for field in wanted {
        let declared = repo.declarations(&layers, field, live);
        match declared.as_slice() {
            [] => plan.skipped.push(Skipped {
                field: field.path.to_string(),
                why: "no manifest declares it (the API server defaulted it, or another manager set it): add it by hand where it belongs".into(),
            }),
            [(doc, declared)] => by_file.entry(doc.file).or_default().push((field.clone(), declared.clone())),
            several => plan.skipped.push(Skipped {
                field: field.path.to_string(),
                why: format!(
                    "it is set in several places ({}): pass --path with the directory the controller applies",
                    several.iter().map(|(d, _)| files[d.file].path.as_str()).collect::<Vec<_>>().join(", ")
                ),
            }),
        }
    }
    for (file, fields) in by_file {
        edit_file(&files[file], fields, &mut plan)?;
    }
    Ok(plan)
}

/// Where a field is declared: its node, and the steps to it in the file's document `doc`.
#[derive(Clone)]
struct Declared<'n> {
    doc: usize,
    node: &'n Node,
    steps: Vec<Step>,
}

/// Writes `fields` into `file`, the last in the file first so that earlier spans stay valid;
/// then reads the result again as every reader does, and writes nothing if any of them reads
/// more changed than the fields written.
fn edit_file(
    file: &RepoFile,
    mut fields: Vec<(Wanted, Declared<'_>)>,
    plan: &mut BackportPlan,
) -> Result<(), PlanError> {
    fields.sort_by_key(|(_, declared)| std::cmp::Reverse(span_start(declared.node)));
    let mut text = file.text.clone();
    let mut written = Vec::new();
    let mut changes = Vec::new();
    for (field, declared) in fields {
        let node = declared.node;
        if node.to_json() == field.value {
            plan.skipped.push(Skipped {
                field: field.path.to_string(),
                why: format!("{} has it already", file.path),
            });
            continue;
        }
        let new = match scalar_text(node, &field.value) {
            Ok(new) => new,
            Err(problem) => {
                plan.skipped.push(Skipped {
                    field: field.path.to_string(),
                    why: format!("in {}, {problem}", file.path),
                });
                continue;
            }
        };
        // Written last to first, so the spans before this one are where they were parsed.
        let span = span_range(node);
        text = replaced(&text, node, &new).expect("a scalar's span lies within its file");
        changes.push(Change {
            doc: declared.doc,
            steps: declared.steps,
            value: field.value.clone(),
        });
        written.push(WrittenField {
            field: field.path.to_string(),
            line: file.text[..span.start].matches('\n').count() + 1,
            old: file.text[span].to_owned(),
            new,
        });
    }
    if written.is_empty() {
        return Ok(());
    }
    written.reverse();
    reread::check(&file.text, &text, &changes).map_err(|problem| PlanError::Unfaithful {
        file: file.path.clone(),
        fields: written
            .iter()
            .map(|w| w.field.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        problem: Box::new(problem),
    })?;
    plan.edits.push(FileEdit {
        path: file.path.clone(),
        text,
        fields: written,
    });
    Ok(())
}

fn span_range(node: &Node) -> std::ops::Range<usize> {
    match node {
        Node::Scalar { span, .. } => span.clone(),
        _ => 0..0,
    }
}

fn span_start(node: &Node) -> usize {
    span_range(node).start
}

impl<'f> Repo<'f> {
    fn read(files: &'f [RepoFile], unreadable: &mut Vec<String>) -> Repo<'f> {
        let mut docs = Vec::with_capacity(files.len());
        let mut kustomizations = BTreeMap::new();
        for file in files {
            let parsed = documents(&file.text).unwrap_or_else(|error| {
                unreadable.push(format!("{}: {error}", file.path));
                Vec::new()
            });
            if is_kustomization_file(&file.path)
                && let Some(root) = parsed.first()
            {
                kustomizations.insert(parent_dir(&file.path).to_owned(), Kustomization::of(root));
            }
            docs.push(parsed);
        }
        Repo {
            files,
            docs,
            kustomizations,
            depth: Depth::Below,
        }
    }

    /// The documents declaring `target` that `dir` applies, in layers: each later layer patches
    /// the ones before it (a Kustomize overlay's patches over its resources).
    fn layers(
        &self,
        dir: &str,
        target: &Target,
        visited: &mut BTreeSet<String>,
    ) -> Vec<Vec<DocRef>> {
        if !visited.insert(dir.to_owned()) {
            return Vec::new();
        }
        let Some(kustomization) = self.kustomizations.get(dir) else {
            return vec![self.generated(dir, target, visited)];
        };
        let mut layers: Vec<Vec<DocRef>> = vec![Vec::new()];
        for resource in &kustomization.resources {
            let path = join(dir, resource);
            if self.is_dir(&path) {
                for (depth, layer) in self.layers(&path, target, visited).into_iter().enumerate() {
                    if layers.len() <= depth {
                        layers.push(Vec::new());
                    }
                    layers[depth].extend(layer);
                }
            } else {
                layers[0].extend(self.in_file(&path, target));
            }
        }
        let patches: Vec<DocRef> = kustomization
            .patches
            .iter()
            .flat_map(|patch| self.in_file(&join(dir, patch), target))
            .collect();
        layers.push(patches);
        layers
    }

    /// What Flux applies from a directory without a kustomization.yaml: every manifest below it,
    /// and each subdirectory with one as that kustomization.
    fn generated(&self, dir: &str, target: &Target, visited: &mut BTreeSet<String>) -> Vec<DocRef> {
        let mut found = Vec::new();
        let mut nested = BTreeSet::new();
        for file in self.files {
            let Some(relative) = below(dir, &file.path) else {
                continue;
            };
            if self.depth == Depth::Directly && relative.contains('/') {
                continue;
            }
            let sub = nearest_kustomization(self, dir, relative);
            match sub {
                Some(sub) => {
                    nested.insert(sub);
                }
                None => found.extend(self.in_file(&file.path, target)),
            }
        }
        for sub in nested {
            found.extend(self.layers(&sub, target, visited).into_iter().flatten());
        }
        found
    }

    fn is_dir(&self, path: &str) -> bool {
        self.files.iter().any(|f| below(path, &f.path).is_some())
    }

    fn in_file(&self, path: &str, target: &Target) -> Vec<DocRef> {
        let Some(file) = self.files.iter().position(|f| f.path == path) else {
            return Vec::new();
        };
        self.docs[file]
            .iter()
            .enumerate()
            .filter(|(_, doc)| declares(doc, target))
            .map(|(doc, _)| DocRef { file, doc })
            .collect()
    }

    /// Where `field` is declared: in the last layer that declares it (a patch wins over what it
    /// patches), every document of that layer that does.
    fn declarations<'r>(
        &'r self,
        layers: &[Vec<DocRef>],
        field: &Wanted,
        live: &Value,
    ) -> Vec<(DocRef, Declared<'r>)> {
        for layer in layers.iter().rev() {
            let mut found: Vec<(DocRef, Declared<'r>)> = layer
                .iter()
                .filter_map(|doc| {
                    let found = find(&self.docs[doc.file][doc.doc], &field.path, live)?;
                    Some((
                        *doc,
                        Declared {
                            doc: doc.doc,
                            ..found
                        },
                    ))
                })
                .collect();
            found.sort_by_key(|(doc, _)| *doc);
            found.dedup_by_key(|(doc, _)| *doc);
            if !found.is_empty() {
                return found;
            }
        }
        Vec::new()
    }
}

impl Kustomization {
    fn of(root: &Node) -> Kustomization {
        let strings = |key: &str| -> Vec<String> {
            match root.get(key) {
                Some(Node::Sequence { items, .. }) => items
                    .iter()
                    .filter_map(|item| item.as_str().or_else(|| item.get("path")?.as_str()))
                    .map(str::to_owned)
                    .collect(),
                _ => Vec::new(),
            }
        };
        let mut patches = strings("patches");
        patches.extend(strings("patchesStrategicMerge"));
        Kustomization {
            resources: strings("resources")
                .into_iter()
                .chain(strings("bases"))
                .filter(|r| !r.contains("://"))
                .collect(),
            patches,
        }
    }
}

/// Whether a document is a manifest (or a patch) of `target`: its kind and name, its API
/// group, and its namespace when it names one (Kustomize and Flux may set it).
fn declares(doc: &Node, target: &Target) -> bool {
    let metadata = doc.get("metadata");
    fn field<'n>(node: Option<&'n Node>, key: &str) -> Option<&'n str> {
        node.and_then(|n| n.get(key)).and_then(Node::as_str)
    }
    let group =
        field(Some(doc), "apiVersion").map(|v| v.rsplit_once('/').map_or("", |(group, _)| group));
    field(Some(doc), "kind") == Some(target.kind.as_str())
        && field(metadata, "name") == Some(target.name.as_str())
        && group == Some(target.group())
        && field(metadata, "namespace").is_none_or(|ns| ns == target.namespace)
}

/// The node at `path` (a path into the live object) in a manifest, and the steps to it: a list
/// element is matched by its `name` when the live element has one (containers, env, ports: a
/// patch lists only the ones it changes), by its index otherwise.
fn find<'n>(doc: &'n Node, path: &FieldPath, live: &Value) -> Option<Declared<'n>> {
    let mut node = doc;
    let mut steps = Vec::with_capacity(path.segments().len());
    let mut live = Some(live);
    for segment in path.segments() {
        let live_here = live;
        live = live_here.and_then(|l| match l {
            Value::Object(map) => map.get(segment),
            Value::Array(list) => segment.parse::<usize>().ok().and_then(|i| list.get(i)),
            _ => None,
        });
        let (next, step) = match node {
            Node::Mapping { .. } => (node.get(segment)?, Step::Key(segment.clone())),
            Node::Sequence { items, .. } => {
                let name = live.and_then(|l| l.get("name")).and_then(Value::as_str);
                let index = match name {
                    Some(name) => items
                        .iter()
                        .position(|item| item.get("name").and_then(Node::as_str) == Some(name))?,
                    None => segment.parse::<usize>().ok()?,
                };
                (items.get(index)?, Step::Index(index))
            }
            _ => return None,
        };
        node = next;
        steps.push(step);
    }
    Some(Declared {
        doc: 0,
        node,
        steps,
    })
}

fn is_kustomization_file(path: &str) -> bool {
    matches!(
        path.rsplit('/').next(),
        Some("kustomization.yaml" | "kustomization.yml" | "Kustomization")
    )
}

fn parent_dir(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(dir, _)| dir)
}

/// `path` relative to `dir` when it lies below it.
fn below<'p>(dir: &str, path: &'p str) -> Option<&'p str> {
    if dir.is_empty() {
        Some(path)
    } else {
        path.strip_prefix(dir)?.strip_prefix('/')
    }
}

/// The directory closest to `dir` on the way to a file (`relative` to `dir`) that holds a
/// kustomization, if any.
fn nearest_kustomization(repo: &Repo<'_>, dir: &str, relative: &str) -> Option<String> {
    let mut current = dir.to_owned();
    let mut parts: Vec<&str> = relative.split('/').collect();
    parts.pop();
    for part in parts {
        current = join(&current, part);
        if repo.kustomizations.contains_key(&current) {
            return Some(current);
        }
    }
    None
}

/// `relative` from `dir`, with `.` and `..` resolved.
fn join(dir: &str, relative: &str) -> String {
    normalise(&format!("{dir}/{relative}"))
}

fn normalise(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            part => parts.push(part),
        }
    }
    parts.join("/")
}

#[cfg(test)]
mod tests;
