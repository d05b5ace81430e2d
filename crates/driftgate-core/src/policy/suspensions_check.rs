//! Compiling `spec.suspensions` from a policy document: the policy compiler's checks of the
//! suspension fields, labels and annotations. Apart from the rules they compile to
//! (`suspensions`), which the policy holds, so that neither imports the other back.

use serde_saphyr::Spanned;

use super::document::{SuspensionFieldSpec, SuspensionMarkerSpec, SuspensionsSpec};
use super::globs::compile_globs;
use super::suspensions::*;
use super::{Checker, is_qualified_name};
use crate::fieldpath::FieldPath;

/// Whether `value` may be a label's value: at most 63 of `[A-Za-z0-9._-]`, starting and ending
/// alphanumeric (or empty).
fn is_label_value(value: &str) -> bool {
    value.is_empty()
        || (value.len() <= 63
            && value.starts_with(|c: char| c.is_ascii_alphanumeric())
            && value.ends_with(|c: char| c.is_ascii_alphanumeric())
            && value
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
}

/// Where a suspension marker is listed: `annotations` or `labels`.
#[derive(Clone, Copy)]
enum Place {
    Annotations,
    Labels,
}

impl Place {
    fn list(self) -> &'static str {
        match self {
            Place::Annotations => "annotations",
            Place::Labels => "labels",
        }
    }

    fn one(self) -> &'static str {
        match self {
            Place::Annotations => "annotation",
            Place::Labels => "label",
        }
    }
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
            Some(list) => self.suspension_markers(Place::Annotations, list),
        };
        let labels = match spec.labels {
            None => default_labels(),
            Some(list) => self.suspension_markers(Place::Labels, list),
        };
        SuspensionRules {
            namespaces,
            namespace_patterns,
            fields,
            annotations,
            labels,
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
            // Under status is the controller's report, which no controller reads as an order to
            // stop, and which the webhook leaves to the other rules when written alone.
            Ok(parsed) if parsed.segments().first().is_some_and(|s| s == "status") => {
                self.error(
                    path.referenced,
                    format!("{at}.path"),
                    format!(
                        "\"{}\" is under status, which the controller reports and no controller reads as a suspension; name the field a user sets to suspend it (e.g. spec.suspend)",
                        path.value
                    ),
                );
                None
            }
            Ok(parsed) if parsed.segments().first().is_some_and(|s| s != "metadata") => {
                Some(parsed)
            }
            Ok(_) => {
                self.error(
                    path.referenced,
                    format!("{at}.path"),
                    format!(
                        "\"{}\" must name a field outside metadata (for a label or an annotation, list it under spec.suspensions.labels or spec.suspensions.annotations)",
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

    fn suspension_markers(
        &mut self,
        place: Place,
        list: Vec<SuspensionMarkerSpec>,
    ) -> Vec<SuspensionMarker> {
        list.into_iter()
            .enumerate()
            .filter_map(|(i, spec)| self.suspension_marker(place, i, spec))
            .collect()
    }

    fn suspension_marker(
        &mut self,
        place: Place,
        index: usize,
        spec: SuspensionMarkerSpec,
    ) -> Option<SuspensionMarker> {
        let at = format!("spec.suspensions.{}[{index}]", place.list());
        let key = &spec.key;
        if !is_qualified_name(&key.value) {
            self.error(
                key.referenced,
                format!("{at}.key"),
                format!(
                    "\"{}\" is not a valid {} key (optional DNS prefix and '/', then up to 63 of [A-Za-z0-9._-])",
                    key.value,
                    place.one()
                ),
            );
        }
        let (values, single) = match (spec.value, spec.values) {
            (Some(value), None) => (vec![value], true),
            (None, Some(values)) if !values.is_empty() => (values, false),
            (None, Some(_)) => {
                self.error(
                    key.referenced,
                    format!("{at}.values"),
                    "lists no value: list the values that suspend",
                );
                return None;
            }
            (None, None) => {
                self.error(
                    key.referenced,
                    at,
                    format!(
                        "names no value: give value (the {} value that suspends) or values",
                        place.one()
                    ),
                );
                return None;
            }
            (Some(value), Some(_)) => {
                self.error(
                    value.referenced,
                    at,
                    "gives both value and values: give one",
                );
                return None;
            }
        };
        if let Place::Labels = place {
            for (i, value) in values.iter().enumerate() {
                if !is_label_value(&value.value) {
                    let field = match single {
                        true => format!("{at}.value"),
                        false => format!("{at}.values[{i}]"),
                    };
                    self.error(
                        value.referenced,
                        field,
                        format!(
                            "\"{}\" can never be a label's value (at most 63 of [A-Za-z0-9._-], starting and ending alphanumeric)",
                            value.value
                        ),
                    );
                }
            }
        }
        let values = values.into_iter().map(|v| v.value).collect();
        match SuspensionMarker::new(key.value.clone(), values, spec.ignore_case) {
            Ok(marker) => Some(marker),
            Err(error) => {
                self.error(
                    key.referenced,
                    at,
                    format!("its values do not compile for ignoreCase: {error}"),
                );
                None
            }
        }
    }
}
