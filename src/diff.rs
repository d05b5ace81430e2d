//! What an UPDATE changes: the field paths that differ between `oldObject` and `object`.
//!
//! Bookkeeping the API server maintains by itself is not a change anyone made: `status`,
//! `metadata.resourceVersion`, `generation`, `managedFields`, `uid`, `creationTimestamp`,
//! `selfLink` and the deletion fields. A key that is absent on one side and `null` on the other
//! is not a change either.

use std::collections::BTreeMap;

use kube::core::DynamicObject;
use serde_json::Value;

use crate::fieldpath::FieldPath;

/// Every changed field, as the deepest path at which the two objects differ. Maps are compared
/// key by key and lists of equal length index by index, so a changed image is reported as
/// `spec.template.spec.containers[0].image`, not as the whole `spec`. A list whose length
/// changed is reported as the list itself.
pub fn changed_paths(old: &DynamicObject, new: &DynamicObject) -> Vec<FieldPath> {
    let mut out = Vec::new();
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
    match (&old.data, &new.data) {
        (Value::Object(a), Value::Object(b)) => {
            // `status` is written by controllers through its own subresource; it is never drift.
            for key in union_keys(a, b).filter(|key| *key != "status") {
                path.push(key.to_owned());
                diff_value(&mut path, a.get(key), b.get(key), &mut out);
                path.pop();
            }
        }
        (a, b) => diff_value(&mut path, Some(a), Some(b), &mut out),
    }
    out
}

/// The changed fields under `.status`, for resources without a status subresource, where the
/// API server stores `.status` written through the object itself.
pub fn changed_status_paths(old: &DynamicObject, new: &DynamicObject) -> Vec<FieldPath> {
    let mut out = Vec::new();
    let mut path = vec!["status".to_owned()];
    diff_value(
        &mut path,
        old.data.get("status"),
        new.data.get("status"),
        &mut out,
    );
    out
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

fn diff_value(
    path: &mut Vec<String>,
    old: Option<&Value>,
    new: Option<&Value>,
    out: &mut Vec<FieldPath>,
) {
    match (old, new) {
        (Some(Value::Object(a)), Some(Value::Object(b))) => {
            for key in union_keys(a, b) {
                path.push(key.clone());
                diff_value(path, a.get(key), b.get(key), out);
                path.pop();
            }
        }
        (Some(Value::Array(a)), Some(Value::Array(b))) if a.len() == b.len() => {
            for (index, (x, y)) in a.iter().zip(b).enumerate() {
                path.push(index.to_string());
                diff_value(path, Some(x), Some(y), out);
                path.pop();
            }
        }
        // A map that appears or disappears as a whole is reported leaf by leaf, so that a
        // delegated `spec.replicas` still matches when the old object had no `spec` at all; one
        // that holds only nulls still appeared, so like an empty map it is reported itself.
        (Some(Value::Object(a)), b) if is_absent(b) && !a.is_empty() => {
            whole_map(path, a, Side::Old, out)
        }
        (a, Some(Value::Object(b))) if is_absent(a) && !b.is_empty() => {
            whole_map(path, b, Side::New, out)
        }
        (a, b) if is_absent(a) && is_absent(b) => {}
        (a, b) if a == b => {}
        _ => out.push(FieldPath(path.clone())),
    }
}

/// Which side of the diff a map that exists on one side only is on.
#[derive(Clone, Copy)]
enum Side {
    Old,
    New,
}

fn whole_map(
    path: &mut Vec<String>,
    map: &serde_json::Map<String, Value>,
    side: Side,
    out: &mut Vec<FieldPath>,
) {
    let before = out.len();
    for (key, value) in map {
        path.push(key.clone());
        match side {
            Side::Old => diff_value(path, Some(value), None, out),
            Side::New => diff_value(path, None, Some(value), out),
        }
        path.pop();
    }
    if out.len() == before {
        out.push(FieldPath(path.clone()));
    }
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
