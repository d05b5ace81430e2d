//! What counts as suspending the GitOps controller's reconciliation, under one policy: compiled
//! from its `suspensions` section, and read off an object (pure).

use std::collections::BTreeMap;

use globset::GlobSet;
use kube_core::DynamicObject;
use regex::{Regex, RegexBuilder};
use serde_json::Value;

use super::document::SuspendedWhen;
use super::globs::compile_globs;
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

/// The label or annotation `driftgate suspend` sets on objects Flux applies: kustomize-controller
/// skips an object carrying it (see [`CONTROLLER_MARKERS`]).
pub const FLUX_RECONCILE_ANNOTATION: (&str, &str) =
    ("kustomize.toolkit.fluxcd.io/reconcile", "disabled");
/// Argo CD's annotation that stops it reconciling an Application, as `driftgate suspend` sets it.
pub const ARGO_SKIP_RECONCILE_ANNOTATION: (&str, &str) =
    ("argocd.argoproj.io/skip-reconcile", "true");

/// How a GitOps controller itself reads one of its suspension labels or annotations: the
/// documented defaults, and what `policy check` compares a policy's own lists with.
#[derive(Debug)]
pub struct ControllerMarker {
    pub controller: &'static str,
    pub key: &'static str,
    /// The values that stop the controller (with `ignore_case`, in any case).
    pub values: &'static [&'static str],
    pub ignore_case: bool,
    /// Read as a label too, not only as an annotation.
    pub in_labels: bool,
    /// How the controller compares the value, for messages.
    pub compared_by: &'static str,
}

/// Flux's kustomize-controller neither applies nor prunes an object whose labels or annotations
/// hold `reconcile: disabled` or `ssa: Ignore` (its `ExclusionSelector`), keys compared exactly
/// and values as Go's `strings.EqualFold` (fluxcd/pkg/ssa `AnyInMetadata`), so `Disabled` and
/// `diſabled` (a long s) stop it too. `ssa: IfNotPresent` is no suspension: Flux reads it on
/// Git's object only, and still creates the object when it is missing; `ssa: Merge` changes
/// how it applies, not whether. Argo CD skips an Application whose `skip-reconcile` annotation
/// reads true with Go's `strconv.ParseBool` (exactly these spellings).
pub const CONTROLLER_MARKERS: &[ControllerMarker] = &[
    ControllerMarker {
        controller: "Flux",
        key: "kustomize.toolkit.fluxcd.io/reconcile",
        values: &["disabled"],
        ignore_case: true,
        in_labels: true,
        compared_by: "Go's strings.EqualFold",
    },
    ControllerMarker {
        controller: "Flux",
        key: "kustomize.toolkit.fluxcd.io/ssa",
        values: &["Ignore"],
        ignore_case: true,
        in_labels: true,
        compared_by: "Go's strings.EqualFold",
    },
    ControllerMarker {
        controller: "Argo CD",
        key: "argocd.argoproj.io/skip-reconcile",
        values: &["1", "t", "T", "TRUE", "true", "True"],
        ignore_case: false,
        in_labels: false,
        compared_by: "Go's strconv.ParseBool",
    },
];

/// How one policy recognises suspensions.
#[derive(Clone, Debug)]
pub struct SuspensionRules {
    pub(super) namespaces: GlobSet,
    pub namespace_patterns: Vec<String>,
    pub fields: Vec<SuspensionField>,
    pub annotations: Vec<SuspensionMarker>,
    pub labels: Vec<SuspensionMarker>,
}

/// A field of some kinds that suspends reconciliation when it holds as `suspended_when` says.
#[derive(Clone, Debug)]
pub struct SuspensionField {
    pub(super) kinds: GlobSet,
    pub kind_patterns: Vec<String>,
    pub path: FieldPath,
    pub suspended_when: SuspendedWhen,
}

/// A label or annotation that suspends reconciliation of the object it is on, when it holds one
/// of `values`.
#[derive(Clone, Debug)]
pub struct SuspensionMarker {
    pub key: String,
    pub values: Vec<String>,
    pub ignore_case: bool,
    /// With `ignore_case`: the values as one pattern, matched with Unicode simple case folding
    /// (the equivalence Go's `strings.EqualFold` decides).
    folded: Option<Regex>,
}

impl SuspensionMarker {
    pub(super) fn new(
        key: String,
        values: Vec<String>,
        ignore_case: bool,
    ) -> Result<Self, regex::Error> {
        let folded = match ignore_case {
            false => None,
            true => {
                let alternatives: Vec<String> = values.iter().map(|v| regex::escape(v)).collect();
                Some(
                    RegexBuilder::new(&format!("^(?:{})$", alternatives.join("|")))
                        .case_insensitive(true)
                        .build()?,
                )
            }
        };
        Ok(SuspensionMarker {
            key,
            values,
            ignore_case,
            folded,
        })
    }

    fn of(marker: &ControllerMarker) -> Self {
        let values = marker.values.iter().map(|v| (*v).to_owned()).collect();
        SuspensionMarker::new(marker.key.to_owned(), values, marker.ignore_case)
            .expect("the controllers' values are short literals")
    }

    /// Whether `value` is one that suspends.
    pub fn matches(&self, value: &str) -> bool {
        match &self.folded {
            Some(pattern) => pattern.is_match(value),
            None => self.values.iter().any(|v| v == value),
        }
    }
}

/// One way an object is suspended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Suspension {
    Field(FieldPath),
    Annotation(String),
    Label(String),
}

impl std::fmt::Display for Suspension {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Suspension::Field(path) => write!(f, "{path}"),
            Suspension::Annotation(key) => write!(f, "annotation {key}"),
            Suspension::Label(key) => write!(f, "label {key}"),
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
        let meta = &object.metadata;
        found.extend(
            holding(&self.annotations, meta.annotations.as_ref())
                .into_iter()
                .map(|key| Suspension::Annotation(key.to_owned())),
        );
        found.extend(
            holding(&self.labels, meta.labels.as_ref())
                .into_iter()
                .map(|key| Suspension::Label(key.to_owned())),
        );
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
        let by_marker = match segments {
            [metadata, place, key] if metadata == "metadata" => match place.as_str() {
                "annotations" => self.annotations.iter().any(|a| &a.key == key),
                "labels" => self.labels.iter().any(|l| &l.key == key),
                _ => false,
            },
            _ => false,
        };
        by_field || by_marker
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

/// The keys of `markers` that hold in `metadata` (an object's labels or annotations), each once.
fn holding<'m>(
    markers: &'m [SuspensionMarker],
    metadata: Option<&BTreeMap<String, String>>,
) -> Vec<&'m str> {
    let mut keys: Vec<&str> = Vec::new();
    for marker in markers {
        let holds = metadata
            .and_then(|m| m.get(&marker.key))
            .is_some_and(|value| marker.matches(value));
        if holds && !keys.contains(&marker.key.as_str()) {
            keys.push(&marker.key);
        }
    }
    keys
}

impl SuspensionField {
    /// Whether this field, by its rule, holds suspended in `data` (an object without or with its
    /// `metadata`: the paths start below it).
    pub fn holds(&self, data: &Value) -> bool {
        let value = value_at(data, &self.path);
        match self.suspended_when {
            SuspendedWhen::IsTrue => value == Some(&Value::Bool(true)),
            SuspendedWhen::IsFalse => value == Some(&Value::Bool(false)),
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

/// The documented defaults: Flux's `spec.suspend`; Argo CD's automated sync removed, turned off
/// (`enabled: false`, Argo CD 3), or without self-heal.
pub(super) fn default_fields() -> Vec<SuspensionField> {
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
            &["spec", "syncPolicy", "automated", "enabled"],
            SuspendedWhen::IsFalse,
        ),
        field(
            &["argoproj.io/Application"],
            &["spec", "syncPolicy", "automated", "selfHeal"],
            SuspendedWhen::NotTrue,
        ),
    ]
}

pub(super) fn default_annotations() -> Vec<SuspensionMarker> {
    CONTROLLER_MARKERS
        .iter()
        .map(SuspensionMarker::of)
        .collect()
}

pub(super) fn default_labels() -> Vec<SuspensionMarker> {
    CONTROLLER_MARKERS
        .iter()
        .filter(|marker| marker.in_labels)
        .map(SuspensionMarker::of)
        .collect()
}

impl SuspensionRules {
    /// The documented defaults, in the documented namespaces: what a policy's `suspensions: {}`
    /// compiles to, and how `driftgate resume` reads an object (it has no policy).
    pub fn defaults() -> SuspensionRules {
        SuspensionRules {
            namespaces: compile_globs(DEFAULT_SUSPENSION_NAMESPACES).unwrap_or_default(),
            namespace_patterns: DEFAULT_SUSPENSION_NAMESPACES
                .iter()
                .map(|n| n.to_string())
                .collect(),
            fields: default_fields(),
            annotations: default_annotations(),
            labels: default_labels(),
        }
    }

    /// What `policy check` warns about: a label or annotation of a controller's that this
    /// policy reads more narrowly than the controller does, so that a suspension spelt
    /// otherwise stops the controller unjudged.
    pub fn warnings(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        for controller in CONTROLLER_MARKERS {
            let places = [
                ("annotations", "annotation", &self.annotations, true),
                ("labels", "label", &self.labels, controller.in_labels),
            ];
            let listed =
                |markers: &[SuspensionMarker]| markers.iter().position(|m| m.key == controller.key);
            let anywhere = places
                .iter()
                .any(|(_, _, markers, _)| listed(markers).is_some());
            let siblings_listed = CONTROLLER_MARKERS.iter().any(|other| {
                other.controller == controller.controller
                    && other.key != controller.key
                    && (self.annotations.iter().chain(&self.labels)).any(|m| m.key == other.key)
            });
            if !anywhere && siblings_listed {
                let places = match controller.in_labels {
                    true => "as a label or an annotation",
                    false => "as an annotation",
                };
                warnings.push(format!(
                    "spec.suspensions.annotations: {} also stops on {}: {} ({places}), which this policy does not list, so a suspension by it stops {} unjudged",
                    controller.controller,
                    controller.key,
                    controller.values.join(", "),
                    controller.controller,
                ));
            }
            for (list, place, markers, read) in places {
                if !read {
                    continue;
                }
                let Some(first) = listed(markers) else {
                    if anywhere {
                        warnings.push(format!(
                            "spec.suspensions.{list}: {} reads {} as {} too; list it here as well (or leave {list} out for the defaults), or a suspension by {place} stops {} unjudged",
                            controller.controller,
                            controller.key,
                            article(place),
                            controller.controller,
                        ));
                    }
                    continue;
                };
                let same_key: Vec<&SuspensionMarker> =
                    markers.iter().filter(|m| m.key == controller.key).collect();
                let missed: Vec<&str> = controller
                    .values
                    .iter()
                    .copied()
                    .filter(|value| {
                        !same_key
                            .iter()
                            .any(|m| m.matches(value) && (m.ignore_case || !controller.ignore_case))
                    })
                    .collect();
                if missed.is_empty() {
                    continue;
                }
                let how = if controller.ignore_case {
                    let other_cases: Vec<String> = controller
                        .values
                        .iter()
                        .flat_map(|v| other_cases(v))
                        .collect();
                    format!(
                        "{} in any case ({}: {}); list {} with ignoreCase: true",
                        controller.values.join(", "),
                        controller.compared_by,
                        other_cases.join(", "),
                        missed.join(", ")
                    )
                } else {
                    format!(
                        "{} ({}); add {}",
                        controller.values.join(", "),
                        controller.compared_by,
                        missed.join(", ")
                    )
                };
                warnings.push(format!(
                    "spec.suspensions.{list}[{first}]: {} stops on the {place} {} when it is {how}, or a suspension spelt so stops {} unjudged",
                    controller.controller, controller.key, controller.controller,
                ));
            }
        }
        warnings
    }
}

/// `value` in two other cases, for messages: `disabled` -> `DISABLED`, `Disabled`.
fn other_cases(value: &str) -> Vec<String> {
    let upper = value.to_uppercase();
    let mut chars = value.chars();
    let flipped_first = match chars.next() {
        Some(first) if first.is_uppercase() => value.to_lowercase(),
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    };
    [upper, flipped_first]
        .into_iter()
        .filter(|other| other != value)
        .collect()
}

fn article(place: &str) -> String {
    match place {
        "annotation" => "an annotation".to_owned(),
        other => format!("a {other}"),
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
        SuspensionRules::defaults()
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

    fn labelled(labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> DynamicObject {
        let mut object = object(serde_json::json!({}), annotations);
        object.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        object
    }

    #[test]
    fn flux_s_keys_are_read_as_labels_and_annotations_with_values_folded_as_go_folds_them() {
        let rules = defaults();
        let reconcile = "kustomize.toolkit.fluxcd.io/reconcile";
        let ssa = "kustomize.toolkit.fluxcd.io/ssa";
        let found = |labels: &[(&str, &str)], annotations: &[(&str, &str)]| {
            rules.suspensions("", "ConfigMap", &labelled(labels, annotations))
        };
        // Go's strings.EqualFold: any case, and a long s (U+017F) is an s; a dotless i
        // (U+0131) is no i there.
        for value in [
            "disabled",
            "Disabled",
            "DISABLED",
            "dIsAbLeD",
            "di\u{17f}abled",
        ] {
            assert_eq!(
                found(&[], &[(reconcile, value)]),
                [Suspension::Annotation(reconcile.into())],
                "{value}"
            );
            assert_eq!(
                found(&[(reconcile, value)], &[]),
                [Suspension::Label(reconcile.into())],
                "{value}"
            );
        }
        for value in ["d\u{131}sabled", "disabled ", "enabled", ""] {
            assert!(
                found(&[(reconcile, value)], &[(reconcile, value)]).is_empty(),
                "{value}"
            );
        }
        for value in ["Ignore", "ignore", "IGNORE"] {
            assert_eq!(
                found(&[(ssa, value)], &[(ssa, value)]),
                [
                    Suspension::Annotation(ssa.into()),
                    Suspension::Label(ssa.into())
                ]
            );
        }
        // IfNotPresent only creates (and is read on Git's object); Merge changes how Flux
        // applies, not whether.
        for value in ["IfNotPresent", "Merge"] {
            assert!(
                found(&[(ssa, value)], &[(ssa, value)]).is_empty(),
                "{value}"
            );
        }
        // Keys are compared exactly, as Go's map lookups do.
        assert!(
            found(
                &[],
                &[("kustomize.toolkit.fluxcd.io/Reconcile", "disabled")]
            )
            .is_empty()
        );
        // Argo CD's skip-reconcile is an annotation, read with strconv.ParseBool.
        let skip = "argocd.argoproj.io/skip-reconcile";
        for value in ["1", "t", "T", "TRUE", "true", "True"] {
            assert_eq!(
                found(&[], &[(skip, value)]),
                [Suspension::Annotation(skip.into())]
            );
        }
        for value in ["tRUE", "yes", "on", "0", "false"] {
            assert!(
                found(&[(skip, "true")], &[(skip, value)]).is_empty(),
                "{value}"
            );
        }
        // A change of either form is a suspension's change.
        assert!(rules.covers(
            "",
            "ConfigMap",
            &FieldPath::new(["metadata", "labels", ssa])
        ));
        assert!(!rules.covers(
            "",
            "ConfigMap",
            &FieldPath::new(["metadata", "labels", skip])
        ));
    }

    #[test]
    fn argo_cd_3_s_automated_sync_turned_off_is_a_suspension_and_absent_is_not() {
        let rules = defaults();
        let app = |automated: Value| {
            object(
                serde_json::json!({"spec": {"syncPolicy": {"automated": automated}}}),
                &[],
            )
        };
        let enabled = Suspension::Field(FieldPath::new([
            "spec",
            "syncPolicy",
            "automated",
            "enabled",
        ]));
        assert_eq!(
            rules.suspensions(
                "argoproj.io",
                "Application",
                &app(serde_json::json!({"selfHeal": true, "enabled": false}))
            ),
            [enabled]
        );
        for running in [
            serde_json::json!({"selfHeal": true}),
            serde_json::json!({"selfHeal": true, "enabled": true}),
        ] {
            assert!(
                rules
                    .suspensions("argoproj.io", "Application", &app(running))
                    .is_empty()
            );
        }
    }
}
