//! What counts as suspending the GitOps controller's reconciliation, under one policy: compiled
//! from its `suspensions` section, and read off an object (pure).

use globset::GlobSet;
use kube::core::DynamicObject;
use serde_json::Value;
use serde_saphyr::Spanned;

use super::document::{
    SuspendedWhen, SuspensionAnnotationSpec, SuspensionFieldSpec, SuspensionsSpec,
};
use super::{Checker, compile_globs, is_qualified_name};
use crate::fieldpath::FieldPath;

/// The namespaces that hold the GitOps objects when `suspensions.namespaces` is not given.
pub const DEFAULT_SUSPENSION_NAMESPACES: &[&str] = &["flux-system", "argocd"];

/// Flux's kinds that carry `spec.suspend`.
pub const FLUX_SUSPENDABLE_KINDS: &[&str] = &[
    "kustomize.toolkit.fluxcd.io/Kustomization",
    "helm.toolkit.fluxcd.io/HelmRelease",
    "source.toolkit.fluxcd.io/GitRepository",
    "source.toolkit.fluxcd.io/OCIRepository",
    "source.toolkit.fluxcd.io/HelmRepository",
    "source.toolkit.fluxcd.io/Bucket",
    "source.toolkit.fluxcd.io/HelmChart",
];

/// Flux's annotation that stops kustomize-controller reconciling one object.
pub const FLUX_RECONCILE_ANNOTATION: (&str, &str) =
    ("kustomize.toolkit.fluxcd.io/reconcile", "disabled");
/// Argo CD's annotation that stops it reconciling an Application.
pub const ARGO_SKIP_RECONCILE_ANNOTATION: (&str, &str) =
    ("argocd.argoproj.io/skip-reconcile", "true");

/// How one policy recognises suspensions.
#[derive(Clone, Debug)]
pub struct SuspensionRules {
    namespaces: GlobSet,
    pub namespace_patterns: Vec<String>,
    pub fields: Vec<SuspensionField>,
    pub annotations: Vec<SuspensionAnnotation>,
}

/// A field of some kinds that suspends reconciliation when it holds as `suspended_when` says.
#[derive(Clone, Debug)]
pub struct SuspensionField {
    kinds: GlobSet,
    pub kind_patterns: Vec<String>,
    pub path: FieldPath,
    pub suspended_when: SuspendedWhen,
}

/// An annotation that suspends reconciliation of the object it is on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SuspensionAnnotation {
    pub key: String,
    pub value: String,
}

/// One way an object is suspended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Suspension {
    Field(FieldPath),
    Annotation(String),
}

impl std::fmt::Display for Suspension {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Suspension::Field(path) => write!(f, "{path}"),
            Suspension::Annotation(key) => write!(f, "annotation {key}"),
        }
    }
}

impl SuspensionRules {
    /// Whether `namespace` holds GitOps objects (beyond the policy's own namespaces).
    pub fn holds_namespace(&self, namespace: &str) -> bool {
        self.namespaces.is_match(namespace)
    }

    /// The suspensions that hold on `object`, of API group `group` and kind `kind`.
    pub fn suspensions(&self, group: &str, kind: &str, object: &DynamicObject) -> Vec<Suspension> {
        let mut found: Vec<Suspension> = self
            .fields_of(group, kind)
            .filter(|field| field.holds(&object.data))
            .map(|field| Suspension::Field(field.path.clone()))
            .collect();
        let annotations = object.metadata.annotations.as_ref();
        for annotation in &self.annotations {
            if annotations.and_then(|a| a.get(&annotation.key)) == Some(&annotation.value) {
                found.push(Suspension::Annotation(annotation.key.clone()));
            }
        }
        found
    }

    /// The suspension fields of `group/kind` that hold on `object`: what [`Self::suspensions`]
    /// reports as `Suspension::Field`, with how each holds (to know how to undo it).
    pub fn holding_fields(
        &self,
        group: &str,
        kind: &str,
        object: &DynamicObject,
    ) -> Vec<&SuspensionField> {
        self.fields_of(group, kind)
            .filter(|field| field.holds(&object.data))
            .collect()
    }

    /// Whether a change at `path` is one of the suspension fields or annotations (or below one).
    pub fn covers(&self, group: &str, kind: &str, path: &FieldPath) -> bool {
        let segments = path.segments();
        let by_field = self.fields_of(group, kind).any(|field| {
            let prefix: Vec<&str> = field.path.segments().iter().map(String::as_str).collect();
            path.starts_with(&prefix) || field.path.starts_with(&as_strs(segments))
        });
        let by_annotation = segments.len() == 3
            && segments[0] == "metadata"
            && segments[1] == "annotations"
            && self.annotations.iter().any(|a| a.key == segments[2]);
        by_field || by_annotation
    }

    /// Whether objects of `group/kind` have a suspension field (else an annotation suspends them).
    pub fn has_field(&self, group: &str, kind: &str) -> bool {
        self.fields_of(group, kind).next().is_some()
    }

    fn fields_of<'s>(
        &'s self,
        group: &str,
        kind: &str,
    ) -> impl Iterator<Item = &'s SuspensionField> + 's {
        let group = if group.is_empty() { "core" } else { group };
        let by_kind = format!("{group}/{kind}");
        self.fields
            .iter()
            .filter(move |field| field.kinds.is_match(&by_kind))
    }
}

fn as_strs(segments: &[String]) -> Vec<&str> {
    segments.iter().map(String::as_str).collect()
}

impl SuspensionField {
    fn holds(&self, data: &Value) -> bool {
        let value = value_at(data, &self.path);
        match self.suspended_when {
            SuspendedWhen::IsTrue => value == Some(&Value::Bool(true)),
            SuspendedWhen::NotTrue => value != Some(&Value::Bool(true)),
            SuspendedWhen::Absent => value.is_none_or(Value::is_null),
        }
    }
}

/// The value at `path` in an object's data (everything but `metadata`).
fn value_at<'v>(data: &'v Value, path: &FieldPath) -> Option<&'v Value> {
    path.segments()
        .iter()
        .try_fold(data, |value, segment| match value {
            Value::Object(map) => map.get(segment),
            Value::Array(items) => segment.parse::<usize>().ok().and_then(|i| items.get(i)),
            _ => None,
        })
}

/// The documented defaults: Flux's `spec.suspend`, Argo CD's automated sync and self-heal.
fn default_fields() -> Vec<SuspensionField> {
    let field = |kinds: &[&str], path: &[&str], suspended_when| SuspensionField {
        kinds: compile_globs(kinds).unwrap_or_default(),
        kind_patterns: kinds.iter().map(|k| k.to_string()).collect(),
        path: FieldPath::new(path.iter().copied()),
        suspended_when,
    };
    vec![
        field(
            FLUX_SUSPENDABLE_KINDS,
            &["spec", "suspend"],
            SuspendedWhen::IsTrue,
        ),
        field(
            &["argoproj.io/Application"],
            &["spec", "syncPolicy", "automated"],
            SuspendedWhen::Absent,
        ),
        field(
            &["argoproj.io/Application"],
            &["spec", "syncPolicy", "automated", "selfHeal"],
            SuspendedWhen::NotTrue,
        ),
    ]
}

fn default_annotations() -> Vec<SuspensionAnnotation> {
    [FLUX_RECONCILE_ANNOTATION, ARGO_SKIP_RECONCILE_ANNOTATION]
        .iter()
        .map(|(key, value)| SuspensionAnnotation {
            key: (*key).to_owned(),
            value: (*value).to_owned(),
        })
        .collect()
}

impl Checker<'_> {
    pub(super) fn suspensions(&mut self, spec: SuspensionsSpec) -> SuspensionRules {
        let (namespaces, namespace_patterns) = match &spec.namespaces {
            None => (
                compile_globs(DEFAULT_SUSPENSION_NAMESPACES).unwrap_or_default(),
                DEFAULT_SUSPENSION_NAMESPACES
                    .iter()
                    .map(|n| n.to_string())
                    .collect(),
            ),
            Some(list) => (
                self.globs("spec.suspensions.namespaces", list),
                list.iter().map(|n| n.value.clone()).collect(),
            ),
        };
        let fields = match spec.fields {
            None => default_fields(),
            Some(list) => list
                .into_iter()
                .enumerate()
                .filter_map(|(i, field)| self.suspension_field(i, field))
                .collect(),
        };
        let annotations = match spec.annotations {
            None => default_annotations(),
            Some(list) => list
                .into_iter()
                .enumerate()
                .map(|(i, annotation)| self.suspension_annotation(i, annotation))
                .collect(),
        };
        SuspensionRules {
            namespaces,
            namespace_patterns,
            fields,
            annotations,
        }
    }

    fn suspension_field(
        &mut self,
        index: usize,
        spec: SuspensionFieldSpec,
    ) -> Option<SuspensionField> {
        let at = format!("spec.suspensions.fields[{index}]");
        self.resource_patterns(&format!("{at}.kinds"), &spec.kinds);
        let kinds = self.globs(&format!("{at}.kinds"), &spec.kinds);
        let path = self.suspension_path(&at, &spec.path)?;
        Some(SuspensionField {
            kinds,
            kind_patterns: spec.kinds.iter().map(|k| k.value.clone()).collect(),
            path,
            suspended_when: spec.suspended_when,
        })
    }

    fn suspension_path(&mut self, at: &str, path: &Spanned<String>) -> Option<FieldPath> {
        match FieldPath::parse(&path.value) {
            Ok(parsed) if parsed.segments().first().is_some_and(|s| s != "metadata") => {
                Some(parsed)
            }
            Ok(_) => {
                self.error(
                    path.referenced,
                    format!("{at}.path"),
                    format!(
                        "\"{}\" must name a field outside metadata (for an annotation, list it under spec.suspensions.annotations)",
                        path.value
                    ),
                );
                None
            }
            Err(error) => {
                self.error(path.referenced, format!("{at}.path"), error.to_string());
                None
            }
        }
    }

    fn suspension_annotation(
        &mut self,
        index: usize,
        spec: SuspensionAnnotationSpec,
    ) -> SuspensionAnnotation {
        if !is_qualified_name(&spec.key.value) {
            self.error(
                spec.key.referenced,
                format!("spec.suspensions.annotations[{index}].key"),
                format!(
                    "\"{}\" is not a valid annotation key (optional DNS prefix and '/', then up to 63 of [A-Za-z0-9._-])",
                    spec.key.value
                ),
            );
        }
        SuspensionAnnotation {
            key: spec.key.value,
            value: spec.value.value,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(data: Value, annotations: &[(&str, &str)]) -> DynamicObject {
        let mut object: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "X", "metadata": {"name": "x"}
        }))
        .unwrap();
        object.data = data;
        object.metadata.annotations = Some(
            annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        object
    }

    fn defaults() -> SuspensionRules {
        SuspensionRules {
            namespaces: compile_globs(DEFAULT_SUSPENSION_NAMESPACES).unwrap(),
            namespace_patterns: Vec::new(),
            fields: default_fields(),
            annotations: default_annotations(),
        }
    }

    #[test]
    fn the_defaults_read_flux_and_argo_cd_suspensions() {
        let rules = defaults();
        let flux = "kustomize.toolkit.fluxcd.io";
        let suspended = object(serde_json::json!({"spec": {"suspend": true}}), &[]);
        let running = object(serde_json::json!({"spec": {"suspend": false}}), &[]);
        assert_eq!(
            rules.suspensions(flux, "Kustomization", &suspended),
            [Suspension::Field(FieldPath::new(["spec", "suspend"]))]
        );
        assert!(
            rules
                .suspensions(flux, "Kustomization", &running)
                .is_empty()
        );
        // spec.suspend of a kind not listed is not Flux's.
        assert!(
            rules
                .suspensions("apps", "Deployment", &suspended)
                .is_empty()
        );
        let disabled = object(
            serde_json::json!({}),
            &[("kustomize.toolkit.fluxcd.io/reconcile", "disabled")],
        );
        assert_eq!(
            rules.suspensions("apps", "Deployment", &disabled),
            [Suspension::Annotation(
                "kustomize.toolkit.fluxcd.io/reconcile".into()
            )]
        );
        let healing = object(
            serde_json::json!({"spec": {"syncPolicy": {"automated": {"selfHeal": true}}}}),
            &[],
        );
        let manual = object(serde_json::json!({"spec": {"syncPolicy": {}}}), &[]);
        assert!(
            rules
                .suspensions("argoproj.io", "Application", &healing)
                .is_empty()
        );
        assert_eq!(
            rules
                .suspensions("argoproj.io", "Application", &manual)
                .len(),
            2
        );
        assert!(rules.covers(
            "argoproj.io",
            "Application",
            &FieldPath::new(["spec", "syncPolicy", "automated", "prune"])
        ));
        assert!(!rules.covers(flux, "Kustomization", &FieldPath::new(["spec", "path"])));
        assert!(rules.holds_namespace("flux-system") && !rules.holds_namespace("prod"));
    }
}
