//! Pure judgement for the ledger: digests of recorded values, and whether a controller's write
//! carries the emergency change (Git caught up) or undoes it.

use std::collections::BTreeMap;

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::fieldpath::FieldPath;
use crate::records::record::{BackportRequirementSpec, RecordedChange, RecordedField};

pub const ABSENT: &str = "absent";

/// `sha256:<hex>` of a value's canonical JSON (object keys sorted), or `absent`.
pub fn digest(value: Option<&Value>) -> String {
    match value {
        None | Some(Value::Null) => ABSENT.to_owned(),
        Some(value) => {
            // serde_json's map is ordered by key, so equal values serialize identically.
            let bytes = serde_json::to_vec(value).expect("a JSON value always serializes");
            let hash = Sha256::digest(&bytes);
            let mut out = String::with_capacity(7 + 64);
            out.push_str("sha256:");
            for byte in hash {
                out.push_str(&format!("{byte:02x}"));
            }
            out
        }
    }
}

/// The value at `path` in an object (as JSON), if any.
pub fn value_at<'a>(object: &'a Value, path: &FieldPath) -> Option<&'a Value> {
    path.segments()
        .iter()
        .try_fold(object, |node, segment| match node {
            Value::Object(map) => map.get(segment),
            Value::Array(list) => segment.parse::<usize>().ok().and_then(|i| list.get(i)),
            _ => None,
        })
}

/// What a controller's write says about a record awaiting backport.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Evidence {
    /// Every recorded field has its last recorded value: Git has the change.
    Backported,
    /// These fields lost their recorded values: the controller is reverting the fix.
    Reverted(Vec<String>),
    /// Nothing recorded to compare (a CREATE or DELETE under the window).
    Nothing,
}

/// The latest recorded digest of each field of `object_uid` (or of every change when the
/// record is per object).
pub fn latest_fields<'a>(
    spec: &'a BackportRequirementSpec,
    object_uid: &str,
) -> BTreeMap<&'a str, &'a RecordedField> {
    latest_changes(spec, object_uid)
        .into_iter()
        .map(|(path, (field, _))| (path, field))
        .collect()
}

/// [`latest_fields`] with the change that recorded each.
pub fn latest_changes<'a>(
    spec: &'a BackportRequirementSpec,
    object_uid: &str,
) -> BTreeMap<&'a str, (&'a RecordedField, &'a RecordedChange)> {
    let mut latest = BTreeMap::new();
    for change in &spec.changes {
        let uid = change
            .object
            .as_ref()
            .map_or(spec.object.uid.as_str(), |o| o.uid.as_str());
        if !uid.is_empty() && !object_uid.is_empty() && uid != object_uid {
            continue;
        }
        for field in &change.fields {
            latest.insert(field.path.as_str(), (field, change));
        }
    }
    latest
}

/// Whether the field set of a managedFields entry (`fieldsV1`) owns `path` of `object`: each map
/// key is `f:<key>`, each list element `k:{<key fields>}` (or `v:<value>`, `i:<index>`); an owned
/// atomic field (an empty set) owns everything below it.
pub fn owns(fields_v1: &Value, object: &Value, path: &FieldPath) -> bool {
    let mut set = fields_v1;
    let mut node = object;
    for segment in path.segments() {
        let Value::Object(children) = set else {
            return false;
        };
        if children.is_empty() {
            return true;
        }
        let next = match node {
            Value::Object(map) => {
                node = match map.get(segment) {
                    Some(value) => value,
                    None => return false,
                };
                children.get(&format!("f:{segment}"))
            }
            Value::Array(list) => {
                let Some(element) = segment.parse::<usize>().ok().and_then(|i| list.get(i)) else {
                    return false;
                };
                node = element;
                children.iter().find_map(|(key, child)| {
                    let matches = if let Some(keys) = key.strip_prefix("k:") {
                        serde_json::from_str::<serde_json::Map<String, Value>>(keys)
                            .is_ok_and(|keys| keys.iter().all(|(k, v)| element.get(k) == Some(v)))
                    } else if let Some(value) = key.strip_prefix("v:") {
                        serde_json::from_str::<Value>(value).is_ok_and(|v| &v == element)
                    } else if let Some(index) = key.strip_prefix("i:") {
                        index == segment
                    } else {
                        false
                    };
                    matches.then_some(child)
                })
            }
            _ => None,
        };
        match next {
            Some(child) => set = child,
            None => return false,
        }
    }
    true
}

/// The client-side apply annotation: the configuration its writer applied.
pub const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// The configuration the controller applied client-side (Argo CD's default), when its own field
/// set owns the annotation that holds it: Git's manifest as the controller last applied it.
pub fn applied_by_controller(fields: &Value, object: &Value) -> Option<Value> {
    let path = FieldPath::new(["metadata", "annotations", LAST_APPLIED_ANNOTATION]);
    if !owns(fields, object, &path) {
        return None;
    }
    serde_json::from_str(value_at(object, &path)?.as_str()?).ok()
}

/// Compares a controller's object (as JSON, after its write) with the record. With the
/// controller's own field set (`fieldsV1` of its managedFields entry), only the fields it manages
/// are evidence: a field it does not manage keeps its emergency value without Git having it, so
/// it proves nothing either way, and the record stays awaiting backport. A field the
/// configuration it applied client-side declares with that value is its too: such a write
/// patches only what differs, so a field someone else set to what Git now says stays theirs in
/// managedFields, while the configuration the controller wrote says Git has it.
pub fn judge(
    spec: &BackportRequirementSpec,
    object_uid: &str,
    object: &Value,
    controller_fields: Option<&Value>,
) -> Evidence {
    let latest = latest_fields(spec, object_uid);
    if latest.is_empty() {
        return Evidence::Nothing;
    }
    let applied = controller_fields.and_then(|set| applied_by_controller(set, object));
    let mut reverted = Vec::new();
    let mut unmanaged = false;
    for (path, field) in latest {
        let Ok(parsed) = FieldPath::parse(path) else {
            unmanaged = true;
            continue;
        };
        let value = value_at(object, &parsed);
        let now = digest(value);
        if now == field.digest {
            // Present: evidence only if the controller itself set it.
            let declared = applied
                .as_ref()
                .is_some_and(|applied| digest(value_at(applied, &parsed)) == now);
            if controller_fields.is_some_and(|set| !owns(set, object, &parsed)) && !declared {
                unmanaged = true;
            }
            continue;
        }
        // Changed or gone. A field the controller does not manage that someone else changed
        // again is not the controller reverting it.
        if value.is_some() && controller_fields.is_some_and(|set| !owns(set, object, &parsed)) {
            unmanaged = true;
            continue;
        }
        reverted.push(path.to_owned());
    }
    if !reverted.is_empty() {
        Evidence::Reverted(reverted)
    } else if unmanaged {
        Evidence::Nothing
    } else {
        Evidence::Backported
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::record::*;
    use serde_json::json;

    fn spec(fields: &[(&str, Option<Value>)]) -> BackportRequirementSpec {
        let time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time =
            serde_json::from_value(json!("2026-11-30T09:00:00Z")).unwrap();
        BackportRequirementSpec {
            object: RecordedObject {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                name: "api".into(),
                uid: "u1".into(),
            },
            scope: RecordScope::Object,
            window: RecordedWindow {
                opener: Some("alice".into()),
                reason: Some("INC-1".into()),
                opened_at: Some(time.clone()),
                expires_at: time.clone(),
                label_value: "20261130T1000Z".into(),
            },
            policy: "production".into(),
            changes: vec![RecordedChange {
                time,
                user: "alice".into(),
                operation: "UPDATE".into(),
                object: None,
                subresource: "scale".into(),
                request_uid: "r1".into(),
                resource_version: "41".into(),
                fields: fields
                    .iter()
                    .map(|(path, value)| RecordedField {
                        path: (*path).into(),
                        digest: digest(value.as_ref()),
                        value: None,
                    })
                    .collect(),
                landed: None,
            }],
        }
    }

    #[test]
    fn digests_are_canonical_and_absent_is_explicit() {
        assert_eq!(
            digest(Some(&json!({"a": 1, "b": 2}))),
            digest(Some(&json!({"b": 2, "a": 1})))
        );
        assert_ne!(digest(Some(&json!(5))), digest(Some(&json!("5"))));
        assert_eq!(digest(None), ABSENT);
        assert_eq!(digest(Some(&Value::Null)), ABSENT);
        assert!(digest(Some(&json!(8))).starts_with("sha256:"));
    }

    #[test]
    fn the_controller_carrying_the_values_is_a_backport_and_undoing_them_a_revert() {
        let record = spec(&[("spec.replicas", Some(json!(8)))]);
        let carried = json!({"spec": {"replicas": 8, "template": {}}});
        assert_eq!(judge(&record, "u1", &carried, None), Evidence::Backported);
        let undone = json!({"spec": {"replicas": 3}});
        assert_eq!(
            judge(&record, "u1", &undone, None),
            Evidence::Reverted(vec!["spec.replicas".into()])
        );
        let removed = json!({"spec": {}});
        assert_eq!(
            judge(&record, "u1", &removed, None),
            Evidence::Reverted(vec!["spec.replicas".into()])
        );
    }

    #[test]
    fn only_the_latest_value_of_a_field_counts() {
        let mut record = spec(&[("spec.replicas", Some(json!(8)))]);
        let mut later = record.changes[0].clone();
        later.fields[0].digest = digest(Some(&json!(10)));
        record.changes.push(later);
        assert_eq!(
            judge(&record, "u1", &json!({"spec": {"replicas": 10}}), None),
            Evidence::Backported
        );
        assert!(matches!(
            judge(&record, "u1", &json!({"spec": {"replicas": 8}}), None),
            Evidence::Reverted(_)
        ));
    }

    #[test]
    fn a_namespace_wide_record_judges_each_object_by_its_own_changes() {
        // A window on Namespace prod-payments: alice scaled api to 5 and worker to 9.
        let mut record = spec(&[]);
        record.scope = RecordScope::Namespace;
        record.object = RecordedObject {
            api_version: "v1".into(),
            kind: "Namespace".into(),
            name: "prod-payments".into(),
            uid: "ns-uid".into(),
        };
        let change = |name: &str, uid: &str, replicas: u32| RecordedChange {
            object: Some(RecordedObject {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                name: name.into(),
                uid: uid.into(),
            }),
            fields: vec![RecordedField {
                path: "spec.replicas".into(),
                digest: digest(Some(&json!(replicas))),
                value: None,
            }],
            ..record.changes[0].clone()
        };
        record.changes = vec![
            change("api", "api-uid", 5),
            change("worker", "worker-uid", 9),
        ];
        let five = json!({"spec": {"replicas": 5}});
        assert_eq!(judge(&record, "api-uid", &five, None), Evidence::Backported);
        assert_eq!(
            judge(&record, "worker-uid", &five, None),
            Evidence::Reverted(vec!["spec.replicas".into()])
        );
        // An object the window did not change has nothing to compare.
        assert_eq!(judge(&record, "other-uid", &five, None), Evidence::Nothing);
        // Without a uid to tell them apart, every change counts, the latest last.
        assert_eq!(
            judge(&record, "", &json!({"spec": {"replicas": 9}}), None),
            Evidence::Backported
        );
    }

    #[test]
    fn set_values_and_list_indexes_own_the_elements_they_name() {
        let object = json!({
            "metadata": {"finalizers": ["a.example/x", "b.example/y"]},
            "spec": {"steps": [{"run": "build"}, {"run": "test"}]}
        });
        let fields = json!({
            "f:metadata": {"f:finalizers": {"v:\"b.example/y\"": {}}},
            "f:spec": {"f:steps": {"i:1": {"f:run": {}}}}
        });
        let owned = |path: &str| owns(&fields, &object, &FieldPath::parse(path).unwrap());
        assert!(owned("metadata.finalizers[1]"));
        assert!(!owned("metadata.finalizers[0]"));
        assert!(owned("spec.steps[1].run"));
        assert!(!owned("spec.steps[0].run"));
        assert!(!owned("spec.steps[2].run"));
    }

    #[test]
    fn bracketed_paths_are_found() {
        let record = spec(&[("metadata.annotations[example.com/x]", Some(json!("on")))]);
        let object = json!({"metadata": {"annotations": {"example.com/x": "on"}}});
        assert_eq!(judge(&record, "u1", &object, None), Evidence::Backported);
    }

    /// Issue 24, section 7: a key holding brackets was dropped from the record, so the change
    /// could never settle. Its path, as the record keeps it, finds the field.
    #[test]
    fn a_key_with_brackets_is_found_and_settles() {
        let key = "match[0]].host";
        let path = FieldPath::new(["spec", "rules", key]).to_string();
        let record = spec(&[(path.as_str(), Some(json!("on")))]);
        let object = json!({"spec": {"rules": {key: "on"}}});
        assert_eq!(judge(&record, "u1", &object, None), Evidence::Backported);
        let undone = json!({"spec": {"rules": {key: "off"}}});
        assert_eq!(
            judge(&record, "u1", &undone, None),
            Evidence::Reverted(vec![path])
        );
    }

    /// Argo CD's client-side apply patches only what differs from Git: after alice's `kubectl
    /// scale`, `spec.replicas` stays kubectl's in managedFields even once Git says 5 too, and
    /// the configuration Argo CD applied (its annotation, owned by its entry) says so.
    #[test]
    fn the_configuration_the_controller_applied_client_side_is_its_evidence() {
        let record = spec(&[("spec.replicas", Some(json!(5)))]);
        let object = |replicas: u32, declared: u32| {
            json!({
                "metadata": {"annotations": {LAST_APPLIED_ANNOTATION: json!({"spec": {"replicas": declared}}).to_string()}},
                "spec": {"replicas": replicas}
            })
        };
        let argocd =
            json!({"f:metadata": {"f:annotations": {format!("f:{LAST_APPLIED_ANNOTATION}"): {}}}});
        assert_eq!(
            judge(&record, "u1", &object(5, 5), Some(&argocd)),
            Evidence::Backported
        );
        // Git (as applied) still says 2: the 5 is not Git's.
        assert_eq!(
            judge(&record, "u1", &object(5, 2), Some(&argocd)),
            Evidence::Nothing
        );
        // An annotation the controller's entry does not own is someone else's word.
        let other = json!({"f:metadata": {"f:labels": {}}});
        assert_eq!(
            judge(&record, "u1", &object(5, 5), Some(&other)),
            Evidence::Nothing
        );
        let mut unreadable = object(5, 5);
        unreadable["metadata"]["annotations"][LAST_APPLIED_ANNOTATION] = json!("{not json");
        assert_eq!(
            judge(&record, "u1", &unreadable, Some(&argocd)),
            Evidence::Nothing
        );
    }

    #[test]
    fn only_fields_the_controller_manages_are_evidence() {
        // alice labelled the object and raised a container's memory under the window.
        let record = spec(&[
            ("metadata.labels.hotfix", Some(json!("on"))),
            (
                "spec.template.spec.containers[0].resources.limits.memory",
                Some(json!("1Gi")),
            ),
        ]);
        let object = json!({
            "metadata": {"labels": {"app": "api", "hotfix": "on"}},
            "spec": {"template": {"spec": {"containers": [
                {"name": "api", "resources": {"limits": {"memory": "1Gi"}}}]}}}
        });
        // Flux manages the container's memory and not the label: the memory carried over is
        // evidence, the label is not, so nothing is settled.
        let flux = json!({
            "f:metadata": {"f:labels": {"f:app": {}}},
            "f:spec": {"f:template": {"f:spec": {"f:containers": {
                "k:{\"name\":\"api\"}": {".": {}, "f:name": {}, "f:resources": {"f:limits": {"f:memory": {}}}}}}}}
        });
        assert_eq!(
            judge(&record, "u1", &object, Some(&flux)),
            Evidence::Nothing
        );
        // Without ownership information the value alone decides.
        assert_eq!(judge(&record, "u1", &object, None), Evidence::Backported);
        // Flux managing the label too: Git has both.
        let mut both = flux.clone();
        both["f:metadata"]["f:labels"]["f:hotfix"] = json!({});
        assert_eq!(
            judge(&record, "u1", &object, Some(&both)),
            Evidence::Backported
        );
        // Flux setting the memory back is a revert, whatever the label.
        let mut undone = object.clone();
        undone["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"] =
            json!("512Mi");
        assert_eq!(
            judge(&record, "u1", &undone, Some(&flux)),
            Evidence::Reverted(vec![
                "spec.template.spec.containers[0].resources.limits.memory".into()
            ])
        );
        let path =
            FieldPath::parse("spec.template.spec.containers[0].resources.limits.memory").unwrap();
        assert!(owns(&flux, &object, &path));
        assert!(!owns(
            &flux,
            &object,
            &FieldPath::parse("metadata.labels.hotfix").unwrap()
        ));
    }
}
