//! Captured AdmissionReviews as fixtures: what varies per run normalised, and compared with the
//! committed fixture on what driftgate decides by: the Flux and the Argo CD captures.

use std::collections::BTreeMap;
use std::path::PathBuf;

use driftgate::policy::PolicySet;
use k8s_openapi::api::authentication::v1::UserInfo;
use serde_json::{Value, json};

use super::driftgate::repo_path;

const UID: &str = "00000000-0000-4000-8000-000000000000";
const TIME: &str = "2026-11-30T08:58:00Z";

/// Writes each `(file, review)` normalised to `tests/fixtures/file` when
/// `DRIFTGATE_WRITE_FIXTURES=1`; otherwise compares it with the committed fixture and fails
/// naming every field that differs. `sender` says whose reviews they are; `refresh` how to
/// rewrite them.
pub fn compare_or_write(picked: &[(String, Value)], sender: &str, refresh: &str) {
    let write = std::env::var("DRIFTGATE_WRITE_FIXTURES").is_ok_and(|v| v == "1");
    let mut mismatches = Vec::new();
    for (file, review) in picked {
        let normalised = normalise(review);
        let path = fixture_path(file);
        if write {
            let text = serde_json::to_string_pretty(&normalised).unwrap() + "\n";
            std::fs::write(&path, text).expect("the fixture is written");
            eprintln!("wrote {}", path.display());
            continue;
        }
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e}; write it with {refresh}", path.display()));
        let committed: Value = serde_json::from_str(&text).expect("the fixture is JSON");
        mismatches.extend(
            differences(
                &what_matters(&committed),
                &what_matters(&normalised),
                sender,
            )
            .into_iter()
            .map(|d| format!("{file}: {d}")),
        );
    }
    assert!(
        mismatches.is_empty(),
        "{sender} no longer sends what the fixtures say:\n{}\nIf that is {sender}'s (or \
         Kubernetes') doing, refresh them with {refresh} and review the diff.",
        mismatches.join("\n")
    );
}

fn fixture_path(file: &str) -> PathBuf {
    repo_path("tests/fixtures").join(file)
}

/// One line per review: operation, kind, name, dry run, subresource and field manager.
pub fn summary(review: &Value) -> String {
    let request = &review["request"];
    format!(
        "{} {} {} dryRun={} subResource={} options={}",
        request["operation"],
        request["kind"]["kind"],
        request["name"],
        request["dryRun"],
        request["subResource"],
        request["options"]
    )
}

/// The review with what varies per run replaced by fixed values: every `uid`, `resourceVersion`,
/// `generation` and `observedGeneration`, every RFC 3339 timestamp (creationTimestamp,
/// managedFields' times, conditions), and `userInfo.extra`'s values (the token's id).
pub fn normalise(review: &Value) -> Value {
    let mut review = review.clone();
    normalise_values(&mut review);
    if let Some(extra) = review["request"]["userInfo"]["extra"].as_object_mut() {
        for values in extra.values_mut() {
            *values = json!(["normalised"]);
        }
    }
    review
}

fn normalise_values(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, value) in map.iter_mut() {
                match key.as_str() {
                    "uid" if value.is_string() => *value = json!(UID),
                    "resourceVersion" if value.is_string() => *value = json!("1"),
                    "generation" | "observedGeneration" if value.is_number() => *value = json!(1),
                    _ => normalise_values(value),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(normalise_values),
        // RFC 3339 times only: a break-glass label's expiry (`20261130T1000Z`, no `:`, as a
        // label value must be) is what a fixture decides by, and a time would be no label.
        Value::String(s) if s.contains(':') && s.parse::<jiff::Timestamp>().is_ok() => {
            *s = TIME.to_owned()
        }
        _ => {}
    }
}

/// What driftgate decides by, by JSON pointer: the operation and what it is on, who sends it
/// (username, groups; uid and `extra`'s keys after [`normalise`]), the options (kind, field
/// manager, force, dry run) and the manager entries of the object's and old object's
/// managedFields, in sorted order.
fn what_matters(review: &Value) -> BTreeMap<String, Value> {
    let request = &review["request"];
    let mut fields = BTreeMap::new();
    for pointer in [
        "/operation",
        "/kind",
        "/resource",
        "/requestKind",
        "/subResource",
        "/dryRun",
        "/namespace",
        "/name",
        "/userInfo/username",
        "/userInfo/groups",
        "/userInfo/uid",
        "/options",
    ] {
        let value = request.pointer(pointer).cloned().unwrap_or(Value::Null);
        fields.insert(format!("request{pointer}"), value);
    }
    let extra_keys: Vec<&String> = request["userInfo"]["extra"]
        .as_object()
        .map(|extra| extra.keys().collect())
        .unwrap_or_default();
    fields.insert("request/userInfo/extra (keys)".into(), json!(extra_keys));
    for object in ["object", "oldObject"] {
        // Sorted: the API server orders entries by when each manager last wrote, and two
        // writers racing (Flux's status, driftgate's label) swap places from run to run, while
        // no rule reads the order.
        let mut managers: Vec<Value> = request[object]["metadata"]["managedFields"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|m| json!([m["manager"], m["operation"], m["subresource"]]))
            .collect();
        managers.sort_by_key(Value::to_string);
        fields.insert(
            format!("request/{object}/metadata/managedFields (manager, operation, subresource)"),
            json!(managers),
        );
    }
    fields
}

/// "FIELD: the fixture has A, SENDER sent B" for each field that differs.
fn differences(
    committed: &BTreeMap<String, Value>,
    captured: &BTreeMap<String, Value>,
    sender: &str,
) -> Vec<String> {
    committed
        .iter()
        .filter(|(field, want)| captured.get(*field) != Some(*want))
        .map(|(field, want)| {
            format!(
                "{field}: the fixture has {want}, {sender} sent {}",
                captured.get(field).unwrap_or(&Value::Null)
            )
        })
        .collect()
}

/// Every policy in `policy_file` but those named in `other_tools` (which guard another GitOps
/// tool's objects, and name only its controllers) has a controller `controller` that accepts
/// the identity the reviews came from and lists the field manager they sent (`field_manager`)
/// literally, not merely through a glob: the policy names what `sender` really sends.
pub fn assert_controller_named(
    policy_file: &str,
    (controller, other_tools): (&str, &[&str]),
    field_manager: &str,
    reviews: &[Value],
    sender: &str,
) {
    let policies = PolicySet::load(&repo_path(policy_file)).expect("the policy loads");
    for review in reviews {
        let user: UserInfo = serde_json::from_value(review["request"]["userInfo"].clone())
            .expect("userInfo is a UserInfo");
        let sent = review["request"]["options"]["fieldManager"].as_str();
        let policies = policies
            .policies()
            .iter()
            .filter(|p| !other_tools.contains(&p.name.as_str()));
        for policy in policies {
            let named = policy
                .controllers
                .iter()
                .find(|c| c.name == controller)
                .unwrap_or_else(|| panic!("policy {} has no {controller} controller", policy.name));
            assert!(
                named.identity.matches(&user),
                "policy {}'s {controller} controller ({}) does not match what {sender} sent: {user:?}",
                policy.name,
                named.identity.describe()
            );
            if let Some(sent) = sent {
                assert_eq!(sent, field_manager, "{}", summary(review));
                assert!(
                    named.field_manager_patterns.iter().any(|p| p == sent),
                    "policy {}'s {controller} controller lists field managers {:?}, not {sent:?} as {sender} sends it",
                    policy.name,
                    named.field_manager_patterns
                );
            }
        }
    }
}
