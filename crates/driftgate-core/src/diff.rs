//! What an UPDATE changes: the field paths that differ between `oldObject` and `object`.
//!
//! Bookkeeping the API server maintains by itself is not a change anyone made: `status`,
//! `metadata.resourceVersion`, `generation`, `managedFields`, `uid`, `creationTimestamp`,
//! `selfLink` and the deletion fields. A key that is absent on one side and `null` on the other
//! is not a change either.

use std::collections::BTreeMap;

use kube_core::DynamicObject;
use serde_json::Value;

use crate::fieldpath::FieldPath;

/// Every changed field, as the deepest path at which the two objects differ. Maps are compared
/// key by key and lists of equal length index by index, so a changed image is reported as
/// `spec.template.spec.containers[0].image`, not as the whole `spec`. A list whose length
/// changed is reported as the list itself.
pub fn changed_paths(old: &DynamicObject, new: &DynamicObject) -> Vec<FieldPath> {
    let mut out: Vec<FieldPath> = Vec::new();
    let mut path = vec!["metadata".to_owned()];
    let (o, n) = (&old.metadata, &new.metadata);
    diff_string_map(
        &mut path,
        "labels",
        o.labels.as_ref(),
        n.labels.as_ref(),
        &mut out,
    );
    diff_string_map(
        &mut path,
        "annotations",
        o.annotations.as_ref(),
        n.annotations.as_ref(),
        &mut out,
    );
    let nonempty = |v: &Option<Vec<String>>| v.as_ref().filter(|v| !v.is_empty()).cloned();
    if nonempty(&o.finalizers) != nonempty(&n.finalizers) {
        out.push(FieldPath::new(["metadata", "finalizers"]));
    }
    let owners = |v: &Option<Vec<_>>| v.as_ref().filter(|v| !v.is_empty()).cloned();
    if owners(&o.owner_references) != owners(&n.owner_references) {
        out.push(FieldPath::new(["metadata", "ownerReferences"]));
    }
    for (field, a, b) in [
        ("name", &o.name, &n.name),
        ("generateName", &o.generate_name, &n.generate_name),
        ("namespace", &o.namespace, &n.namespace),
    ] {
        if a != b {
            out.push(FieldPath::new(["metadata", field]));
        }
    }
    path.clear();
    let mut walk = Walk {
        path,
        out,
        tasks: Vec::new(),
    };
    match (&old.data, &new.data) {
        (Value::Object(a), Value::Object(b)) => {
            // `status` is written by controllers through its own subresource; it is never drift.
            let keys = union_keys(a, b).filter(|key| *key != "status");
            walk.push_pairs(keys.map(|key| (Segment::Key(key), a.get(key), b.get(key))));
        }
        (a, b) => walk.tasks.push(Task::Diff(None, Some(a), Some(b))),
    }
    walk.run();
    walk.out
}

/// The changed fields under `.status`, for resources without a status subresource, where the
/// API server stores `.status` written through the object itself.
pub fn changed_status_paths(old: &DynamicObject, new: &DynamicObject) -> Vec<FieldPath> {
    let mut walk = Walk {
        path: Vec::new(),
        out: Vec::new(),
        tasks: Vec::new(),
    };
    walk.push_pairs(std::iter::once((
        Segment::Key("status"),
        old.data.get("status"),
        new.data.get("status"),
    )));
    walk.run();
    walk.out
}

fn union_keys<'a>(
    a: &'a serde_json::Map<String, Value>,
    b: &'a serde_json::Map<String, Value>,
) -> impl Iterator<Item = &'a String> {
    a.keys()
        .chain(b.keys().filter(move |key| !a.contains_key(*key)))
}

fn diff_string_map(
    path: &mut Vec<String>,
    field: &str,
    old: Option<&BTreeMap<String, String>>,
    new: Option<&BTreeMap<String, String>>,
    out: &mut Vec<FieldPath>,
) {
    let empty = BTreeMap::new();
    let (old, new) = (old.unwrap_or(&empty), new.unwrap_or(&empty));
    if old == new {
        return;
    }
    path.push(field.to_owned());
    for key in old
        .keys()
        .chain(new.keys().filter(|key| !old.contains_key(*key)))
    {
        if old.get(key) != new.get(key) {
            path.push(key.clone());
            out.push(FieldPath(path.clone()));
            path.pop();
        }
    }
    path.pop();
}

fn is_absent(value: Option<&Value>) -> bool {
    matches!(value, None | Some(Value::Null))
}

/// One step of a path: a map key or a list index.
#[derive(Clone, Copy)]
enum Segment<'a> {
    Key(&'a str),
    Index(usize),
}

/// Work left in the walk. Objects may nest thousands of levels (Kubernetes accepts them), so
/// the walk keeps its own stack on the heap rather than recursing on the call stack.
enum Task<'a> {
    /// Compare two values, after stepping into `Segment` (none at the top).
    Diff(Option<Segment<'a>>, Option<&'a Value>, Option<&'a Value>),
    /// Step back out of a segment.
    Pop,
    /// A map that exists on one side only is done: if none of its leaves was reported (it held
    /// only nulls), report the map itself.
    WholeMapDone { reported_before: usize },
}

struct Walk<'a> {
    path: Vec<String>,
    out: Vec<FieldPath>,
    tasks: Vec<Task<'a>>,
}

impl<'a> Walk<'a> {
    /// Schedules comparisons to run in the given order (the task stack runs last-in first).
    fn push_pairs(
        &mut self,
        pairs: impl Iterator<Item = (Segment<'a>, Option<&'a Value>, Option<&'a Value>)>,
    ) {
        let first = self.tasks.len();
        self.tasks
            .extend(pairs.map(|(segment, a, b)| Task::Diff(Some(segment), a, b)));
        self.tasks[first..].reverse();
    }

    fn run(&mut self) {
        while let Some(task) = self.tasks.pop() {
            match task {
                Task::Pop => {
                    self.path.pop();
                }
                Task::WholeMapDone { reported_before } => {
                    if self.out.len() == reported_before {
                        self.out.push(FieldPath(self.path.clone()));
                    }
                }
                Task::Diff(segment, old, new) => {
                    if let Some(segment) = segment {
                        self.path.push(match segment {
                            Segment::Key(key) => key.to_owned(),
                            Segment::Index(index) => index.to_string(),
                        });
                        // Runs after everything this comparison schedules.
                        self.tasks.push(Task::Pop);
                    }
                    self.diff(old, new);
                }
            }
        }
    }

    /// Compares two values at the current path, reporting a leaf or scheduling their children.
    fn diff(&mut self, old: Option<&'a Value>, new: Option<&'a Value>) {
        match (old, new) {
            (Some(Value::Object(a)), Some(Value::Object(b))) => {
                let pairs = union_keys(a, b).map(|key| (Segment::Key(key), a.get(key), b.get(key)));
                self.push_pairs(pairs);
            }
            (Some(Value::Array(a)), Some(Value::Array(b))) if a.len() == b.len() => {
                let pairs = a
                    .iter()
                    .zip(b)
                    .enumerate()
                    .map(|(index, (x, y))| (Segment::Index(index), Some(x), Some(y)));
                self.push_pairs(pairs);
            }
            // A map that appears or disappears as a whole is reported leaf by leaf, so that a
            // delegated `spec.replicas` still matches when the old object had no `spec` at all;
            // one that holds only nulls still appeared, so like an empty map it is reported
            // itself.
            (Some(Value::Object(a)), b) if is_absent(b) && !a.is_empty() => {
                self.whole_map(a, Side::Old)
            }
            (a, Some(Value::Object(b))) if is_absent(a) && !b.is_empty() => {
                self.whole_map(b, Side::New)
            }
            (a, b) if is_absent(a) && is_absent(b) => {}
            (Some(a), Some(b)) if scalars_equal(a, b) => {}
            _ => self.out.push(FieldPath(self.path.clone())),
        }
    }

    fn whole_map(&mut self, map: &'a serde_json::Map<String, Value>, side: Side) {
        self.tasks.push(Task::WholeMapDone {
            reported_before: self.out.len(),
        });
        let pairs = map.iter().map(|(key, value)| match side {
            Side::Old => (Segment::Key(key.as_str()), Some(value), None),
            Side::New => (Segment::Key(key.as_str()), None, Some(value)),
        });
        self.push_pairs(pairs);
    }
}

/// Equality of two values that reached a leaf of the walk. Two maps, or two lists of equal
/// length, never get here (they are walked); anything else that is not a scalar differs from
/// its counterpart in type or length, so no comparison recurses.
fn scalars_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Array(x), Value::Array(y)) => x.is_empty() && y.is_empty(),
        (Value::Object(x), Value::Object(y)) => x.is_empty() && y.is_empty(),
        (Value::Array(_) | Value::Object(_), _) | (_, Value::Array(_) | Value::Object(_)) => false,
        (a, b) => a == b,
    }
}

/// Which side of the diff a map that exists on one side only is on.
#[derive(Clone, Copy)]
enum Side {
    Old,
    New,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(value: Value) -> DynamicObject {
        serde_json::from_value(value).unwrap()
    }

    fn paths(old: Value, new: Value) -> Vec<String> {
        changed_paths(&object(old), &object(new))
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn bookkeeping_is_not_a_change() {
        let old = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "resourceVersion": "1", "generation": 1, "uid": "u",
                "managedFields": [{"manager": "x", "operation": "Update"}]},
            "data": {"k": "v"}, "status": {"x": 1}});
        let new = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "resourceVersion": "2", "generation": 2, "uid": "u",
                "managedFields": [{"manager": "y", "operation": "Apply"}]},
            "data": {"k": "v", "gone": null}, "status": {"x": 2}});
        assert!(paths(old, new).is_empty());
    }

    #[test]
    fn reports_the_deepest_changed_fields() {
        let old = json!({"metadata": {"name": "a", "labels": {"app": "api"},
                "annotations": {"deployment.kubernetes.io/revision": "7"}},
            "spec": {"replicas": 3, "template": {"spec": {"containers": [
                {"name": "api", "image": "api:1"}, {"name": "proxy", "image": "proxy:1"}]}}}});
        let new = json!({"metadata": {"name": "a", "labels": {"app": "api", "tier": "backend"},
                "annotations": {"deployment.kubernetes.io/revision": "8"}},
            "spec": {"replicas": 5, "template": {"spec": {"containers": [
                {"name": "api", "image": "api:2"}, {"name": "proxy", "image": "proxy:1"}]}}}});
        assert_eq!(
            paths(old, new),
            [
                "metadata.labels.tier",
                "metadata.annotations[deployment.kubernetes.io/revision]",
                "spec.replicas",
                "spec.template.spec.containers[0].image",
            ]
        );
    }

    #[test]
    fn lists_of_other_length_and_new_maps() {
        let old = json!({"metadata": {"name": "a"}, "spec": {"ports": [1]}});
        let new =
            json!({"metadata": {"name": "a"}, "spec": {"ports": [1, 2], "extra": {"a": {"b": 1}}}});
        assert_eq!(paths(old, new), ["spec.ports", "spec.extra.a.b"]);
    }
}
