//! Policies as `GatePolicy` objects in the cluster (`driftgate.dev/v1alpha1`, cluster-scoped).
//! Pure: objects, the file source's policies and the last good versions come in; the policies
//! to serve, each object's outcome and its desired status go out.
//!
//! An object is compiled through the very compiler policy files go through (its document is
//! written out as text and read back), so its problems are the same `field: problem` lines
//! `driftgate policy check` prints, located at `gatepolicy/NAME` rather than `file:line`.
//!
//! A bad object never takes an active policy away: the last good generation of that object
//! keeps serving (in this process; one that starts with the object already bad has none, and
//! the object guards nothing until fixed), and its status says Ready=False with the problems.

use std::collections::BTreeMap;
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube_core::{ApiResource, DynamicObject, GroupVersionKind};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::document::{API_VERSION, KIND};
use super::{GatePolicy, PolicyError, PolicyErrors, PolicySet};

pub const GROUP: &str = "driftgate.dev";
pub const VERSION: &str = "v1alpha1";
pub const PLURAL: &str = "gatepolicies";
/// The condition every GatePolicy's status carries.
pub const READY: &str = "Ready";

/// The kube-rs description of the GatePolicy resource, for a dynamic client.
pub fn api_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, VERSION, KIND), PLURAL)
}

/// Where an object's problems are located in messages: `gatepolicy/NAME`.
pub fn location(name: &str) -> String {
    format!("gatepolicy/{name}")
}

/// The policy document an object holds: the fields a policy file has, and no more, so that the
/// API server's own metadata (uid, managedFields, …) and driftgate's status are not problems.
pub fn document_of(object: &DynamicObject) -> Value {
    let mut metadata = Map::new();
    metadata.insert(
        "name".into(),
        json!(object.metadata.name.clone().unwrap_or_default()),
    );
    if let Some(labels) = &object.metadata.labels {
        metadata.insert("labels".into(), json!(labels));
    }
    if let Some(annotations) = &object.metadata.annotations {
        metadata.insert("annotations".into(), json!(annotations));
    }
    let (api_version, kind) = match &object.types {
        Some(types) => (types.api_version.as_str(), types.kind.as_str()),
        None => (API_VERSION, KIND),
    };
    let mut document = json!({"apiVersion": api_version, "kind": kind, "metadata": metadata});
    if let Some(spec) = object.data.get("spec") {
        document["spec"] = spec.clone();
    }
    document
}

/// Compiles one object exactly as a policy file would be compiled.
pub fn compile_object(object: &DynamicObject) -> Result<GatePolicy, PolicyErrors> {
    let name = object.metadata.name.clone().unwrap_or_default();
    let source = location(&name);
    // JSON is YAML: the compiler reads it as it reads a file.
    let text = document_of(object).to_string();
    let mut policies = PolicySet::from_yaml(&source, &text)?.into_policies();
    match policies.pop() {
        Some(policy) => Ok(policy),
        None => Err(PolicyErrors(vec![PolicyError {
            file: source,
            line: 0,
            document: 0,
            policy: Some(name),
            field: "(object)".into(),
            problem: "holds no policy".into(),
        }])),
    }
}

/// One problem as a line: `gatepolicy/NAME: field: problem`. The line and document of the
/// text the object was written to are meaningless to its author, so they are left out.
pub fn problem_line(error: &PolicyError) -> String {
    format!("{}: {}: {}", error.file, error.field, error.problem)
}

pub fn problem_lines(errors: &PolicyErrors) -> Vec<String> {
    errors.0.iter().map(problem_line).collect()
}

/// A generation of an object that compiled, and its policy.
#[derive(Clone, Debug)]
pub struct LastGood {
    pub generation: i64,
    pub policy: GatePolicy,
}

/// What became of one object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectOutcome {
    pub name: String,
    pub generation: i64,
    /// Empty when this generation serves.
    pub problems: Vec<String>,
    /// For a refused generation: the earlier one that keeps serving, if any.
    pub serving_generation: Option<i64>,
    /// The namespaces the object names, for `kubectl get gatepolicies`.
    pub namespaces: String,
}

impl ObjectOutcome {
    pub fn is_valid(&self) -> bool {
        self.problems.is_empty()
    }
}

/// The GatePolicy source after one pass over every object.
#[derive(Clone, Debug, Default)]
pub struct Reconciled {
    /// By object name: what serves.
    pub serving: BTreeMap<String, LastGood>,
    pub outcomes: Vec<ObjectOutcome>,
}

impl Reconciled {
    pub fn policies(&self) -> Vec<GatePolicy> {
        self.serving.values().map(|g| g.policy.clone()).collect()
    }

    /// Whether every object's current generation compiled (`driftgate_policy_valid`).
    pub fn all_valid(&self) -> bool {
        self.outcomes.iter().all(ObjectOutcome::is_valid)
    }

    /// Every refused object's problems, one a line; None when there are none.
    pub fn problems(&self) -> Option<String> {
        let lines: Vec<&str> = self
            .outcomes
            .iter()
            .flat_map(|o| o.problems.iter().map(String::as_str))
            .collect();
        (!lines.is_empty()).then(|| lines.join("\n"))
    }
}

/// Compiles every object; a refused one keeps its `previous` good generation serving. A name
/// the file source already defines is refused: the file's policy serves (it is what an
/// air-gapped or `--no-kube` driftgate runs too), and the object says why it does not.
pub fn reconcile(
    objects: &[Arc<DynamicObject>],
    files: &PolicySet,
    previous: &BTreeMap<String, LastGood>,
) -> Reconciled {
    let mut reconciled = Reconciled::default();
    let mut sorted: Vec<&DynamicObject> = objects.iter().map(AsRef::as_ref).collect();
    sorted.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    for object in sorted {
        let name = object.metadata.name.clone().unwrap_or_default();
        let generation = object.metadata.generation.unwrap_or(0);
        let mut outcome = ObjectOutcome {
            name: name.clone(),
            generation,
            problems: Vec::new(),
            serving_generation: None,
            namespaces: namespaces_summary(object.data.get("spec")),
        };
        if let Some(file) = files.policies().iter().find(|p| p.name == name) {
            outcome.problems.push(format!(
                "{}: metadata.name: policy name \"{name}\" is already defined in {}; names must be unique across policy files and GatePolicies: rename this GatePolicy or remove the policy from the file",
                location(&name),
                file.source
            ));
            reconciled.outcomes.push(outcome);
            continue;
        }
        match compile_object(object) {
            Ok(policy) => {
                let good = LastGood { generation, policy };
                reconciled.serving.insert(name, good);
            }
            Err(errors) => {
                outcome.problems = problem_lines(&errors);
                if let Some(good) = previous.get(&name) {
                    outcome.serving_generation = Some(good.generation);
                    reconciled.serving.insert(name, good.clone());
                }
            }
        }
        reconciled.outcomes.push(outcome);
    }
    reconciled
}

/// `prod-*, payments`, `labels team=a`, `… except prod-sandbox`: what NAMESPACES shows.
pub fn namespaces_summary(spec: Option<&Value>) -> String {
    let Some(namespaces) = spec.and_then(|s| s.get("namespaces")) else {
        return String::new();
    };
    let strings = |key: &str| -> Vec<String> {
        namespaces[key]
            .as_array()
            .map(|list| {
                list.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut parts = strings("include");
    if let Some(labels) = namespaces["selector"]["matchLabels"].as_object() {
        let pairs: Vec<String> = labels
            .iter()
            .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
            .collect();
        parts.push(format!("labels {}", pairs.join(",")));
    }
    let mut summary = parts.join(", ");
    let exclude = strings("exclude");
    if !exclude.is_empty() {
        summary.push_str(&format!(" except {}", exclude.join(", ")));
    }
    summary
}

/// The status driftgate writes on a GatePolicy.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GatePolicyStatus {
    #[serde(default)]
    pub observed_generation: Option<i64>,
    #[serde(default)]
    pub namespaces: Option<String>,
    #[serde(default)]
    pub conditions: Vec<Condition>,
}

/// The status `outcome` calls for, or None when `current` already says it. The Ready
/// condition's lastTransitionTime moves only when its status does.
pub fn plan_status(
    outcome: &ObjectOutcome,
    current: Option<&Value>,
    now: Timestamp,
) -> Option<GatePolicyStatus> {
    let current: GatePolicyStatus = current
        .and_then(|value| serde_json::from_value(value.clone()).ok())
        .unwrap_or_default();
    let (status, reason, message) = ready_condition(outcome);
    let previous = current.conditions.iter().find(|c| c.type_ == READY);
    let last_transition_time = match previous {
        Some(previous) if previous.status == status => previous.last_transition_time.clone(),
        // The API server keeps whole seconds: a fraction would differ on every comparison.
        _ => Time(now.round(jiff::Unit::Second).unwrap_or(now)),
    };
    let desired = GatePolicyStatus {
        observed_generation: Some(outcome.generation),
        namespaces: Some(outcome.namespaces.clone()),
        conditions: vec![Condition {
            type_: READY.into(),
            status: status.into(),
            reason: reason.into(),
            message,
            observed_generation: Some(outcome.generation),
            last_transition_time,
        }],
    };
    (desired != current).then_some(desired)
}

/// The statuses one pass writes: each object's whose stored status differs from its outcome's.
pub fn status_writes(
    objects: &[Arc<DynamicObject>],
    outcomes: &[ObjectOutcome],
    now: Timestamp,
) -> Vec<(String, GatePolicyStatus)> {
    outcomes
        .iter()
        .filter_map(|outcome| {
            let object = objects
                .iter()
                .find(|o| o.metadata.name.as_deref() == Some(outcome.name.as_str()))?;
            let status = plan_status(outcome, object.data.get("status"), now)?;
            Some((outcome.name.clone(), status))
        })
        .collect()
}

fn ready_condition(outcome: &ObjectOutcome) -> (&'static str, &'static str, String) {
    if outcome.is_valid() {
        return (
            "True",
            "Compiled",
            format!("generation {} compiled and is active", outcome.generation),
        );
    }
    let problems = outcome.problems.join("\n");
    match outcome.serving_generation {
        Some(serving) => (
            "False",
            "RefusedLastGoodServes",
            format!(
                "generation {} is refused and generation {serving} keeps serving; fix these and apply again (`driftgate policy check` prints the same for a file):\n{problems}",
                outcome.generation
            ),
        ),
        None => (
            "False",
            "Refused",
            format!(
                "generation {} is refused and this policy guards nothing; fix these and apply again (`driftgate policy check` prints the same for a file):\n{problems}",
                outcome.generation
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(name: &str, generation: i64, spec: Value) -> Arc<DynamicObject> {
        let mut object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {
                "name": name,
                "generation": generation,
                "uid": "0d9c6a5e-0000-0000-0000-000000000000",
                "resourceVersion": "42",
                "managedFields": [{"manager": "kubectl", "operation": "Apply"}],
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"},
            },
            "spec": spec,
        }))
        .unwrap();
        object.data["status"] = json!({"observedGeneration": 1});
        Arc::new(object)
    }

    fn good_spec() -> Value {
        json!({"namespaces": {"include": ["team-a-*"], "exclude": ["team-a-sandbox"]},
               "controllers": [{"name": "flux", "usernames": ["system:serviceaccount:flux-system:*"]}]})
    }

    fn bad_spec() -> Value {
        json!({"namespaces": {"include": []},
               "breakGlass": {"maxDuration": "forever", "openers": {"groups": ["sre"]}}})
    }

    #[test]
    fn an_object_compiles_like_a_file_and_its_server_fields_are_not_problems() {
        let policy = compile_object(&object("team-a", 3, good_spec())).unwrap();
        assert_eq!(policy.name, "team-a");
        assert_eq!(policy.source, "gatepolicy/team-a");
        assert_eq!(policy.controllers[0].name, "flux");
    }

    #[test]
    fn problems_are_the_compilers_field_and_problem_at_the_objects_location() {
        let errors = compile_object(&object("team-a", 3, bad_spec())).unwrap_err();
        let file_text = format!(
            "apiVersion: {API_VERSION}\nkind: {KIND}\nmetadata:\n  name: team-a\nspec:\n  namespaces:\n    include: []\n  breakGlass:\n    maxDuration: forever\n    openers:\n      groups: [sre]\n"
        );
        let from_file = PolicySet::from_yaml("gatepolicy/team-a", &file_text).unwrap_err();
        assert_eq!(problem_lines(&errors), problem_lines(&from_file));
        let lines = problem_lines(&errors);
        assert!(lines.len() >= 2, "{lines:?}");
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("gatepolicy/team-a: spec.namespaces.include: is empty")),
            "{lines:?}"
        );
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("gatepolicy/team-a: spec.breakGlass.maxDuration: ")),
            "{lines:?}"
        );
    }

    #[test]
    fn an_unknown_field_is_named() {
        let mut spec = good_spec();
        spec["owners"] = json!("team-a");
        let lines = problem_lines(&compile_object(&object("team-a", 1, spec)).unwrap_err());
        assert_eq!(lines.len(), 1);
        assert!(lines[0].contains("owners"), "{lines:?}");
    }

    #[test]
    fn a_refused_generation_keeps_the_last_good_one_serving() {
        let files = PolicySet::default();
        let first = reconcile(
            &[object("team-a", 1, good_spec())],
            &files,
            &BTreeMap::new(),
        );
        assert!(first.all_valid());
        assert_eq!(first.serving["team-a"].generation, 1);

        let second = reconcile(&[object("team-a", 2, bad_spec())], &files, &first.serving);
        assert!(!second.all_valid());
        assert_eq!(second.serving["team-a"].generation, 1);
        assert_eq!(second.outcomes[0].serving_generation, Some(1));
        assert!(
            second
                .problems()
                .unwrap()
                .contains("spec.namespaces.include")
        );

        // Without a last good generation, a refused object guards nothing.
        let fresh = reconcile(&[object("team-a", 2, bad_spec())], &files, &BTreeMap::new());
        assert!(fresh.policies().is_empty());
        assert_eq!(fresh.outcomes[0].serving_generation, None);

        // A deleted object stops serving.
        assert!(reconcile(&[], &files, &first.serving).policies().is_empty());
    }

    #[test]
    fn a_name_the_files_define_is_refused_on_the_object_and_the_file_serves() {
        let files = PolicySet::from_yaml(
            "policies/team.yaml",
            &format!(
                "apiVersion: {API_VERSION}\nkind: {KIND}\nmetadata:\n  name: team-a\nspec:\n  namespaces:\n    include: [other]\n"
            ),
        )
        .unwrap();
        let reconciled = reconcile(
            &[object("team-a", 1, good_spec())],
            &files,
            &BTreeMap::new(),
        );
        assert!(reconciled.policies().is_empty());
        let problems = reconciled.problems().unwrap();
        assert!(
            problems.contains("already defined in policies/team.yaml"),
            "{problems}"
        );
        let union = PolicySet::union(&files, &reconciled.policies());
        assert_eq!(union.policies().len(), 1);
        assert_eq!(union.policies()[0].source, "policies/team.yaml");
    }

    #[test]
    fn namespaces_are_summarised_for_the_printer_column() {
        assert_eq!(
            namespaces_summary(Some(&good_spec())),
            "team-a-* except team-a-sandbox"
        );
        let spec = json!({"namespaces": {"include": ["a", "b"], "selector": {"matchLabels": {"team": "x"}}}});
        assert_eq!(namespaces_summary(Some(&spec)), "a, b, labels team=x");
        assert_eq!(namespaces_summary(None), "");
    }

    fn now() -> Timestamp {
        "2026-12-01T11:00:00.250Z".parse().unwrap()
    }

    #[test]
    fn the_status_is_written_only_when_it_differs() {
        let outcome = &reconcile(
            &[object("team-a", 4, good_spec())],
            &PolicySet::default(),
            &BTreeMap::new(),
        )
        .outcomes[0];
        let desired = plan_status(outcome, None, now()).unwrap();
        assert_eq!(desired.observed_generation, Some(4));
        let ready = &desired.conditions[0];
        assert_eq!(
            (ready.type_.as_str(), ready.status.as_str()),
            ("Ready", "True")
        );
        assert_eq!(ready.observed_generation, Some(4));
        assert_eq!(
            ready.last_transition_time.0.to_string(),
            "2026-12-01T11:00:00Z"
        );

        let stored = serde_json::to_value(&desired).unwrap();
        let later: Timestamp = "2026-12-01T12:00:00Z".parse().unwrap();
        assert_eq!(plan_status(outcome, Some(&stored), later), None);

        let mut next = outcome.clone();
        next.generation = 5;
        let moved = plan_status(&next, Some(&stored), later).unwrap();
        // Still Ready: the transition time stays.
        assert_eq!(
            moved.conditions[0].last_transition_time,
            ready.last_transition_time
        );
        assert_eq!(moved.observed_generation, Some(5));
    }

    #[test]
    fn a_pass_writes_only_the_statuses_that_differ() {
        let files = PolicySet::default();
        let objects = vec![
            object("team-a", 1, good_spec()),
            object("team-b", 1, bad_spec()),
        ];
        let reconciled = reconcile(&objects, &files, &BTreeMap::new());
        let writes = status_writes(&objects, &reconciled.outcomes, now());
        let names: Vec<&str> = writes.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["team-a", "team-b"]);

        // Once stored, the next pass writes nothing.
        let stored: Vec<Arc<DynamicObject>> = objects
            .iter()
            .zip(&writes)
            .map(|(object, (_, status))| {
                let mut object = DynamicObject::clone(object);
                object.data["status"] = serde_json::to_value(status).unwrap();
                Arc::new(object)
            })
            .collect();
        assert!(status_writes(&stored, &reconciled.outcomes, now()).is_empty());
        // An object deleted since its outcome is not written.
        assert!(status_writes(&stored[..1], &reconciled.outcomes[1..], now()).is_empty());
    }

    #[test]
    fn a_refused_object_is_not_ready_with_every_problem() {
        let files = PolicySet::default();
        let first = reconcile(
            &[object("team-a", 1, good_spec())],
            &files,
            &BTreeMap::new(),
        );
        let second = reconcile(&[object("team-a", 2, bad_spec())], &files, &first.serving);
        let status = plan_status(&second.outcomes[0], None, now()).unwrap();
        let ready = &status.conditions[0];
        assert_eq!(ready.status, "False");
        assert_eq!(ready.reason, "RefusedLastGoodServes");
        assert!(
            ready.message.contains("generation 1 keeps serving"),
            "{}",
            ready.message
        );
        for line in &second.outcomes[0].problems {
            assert!(ready.message.contains(line.as_str()), "{line}");
        }
        let fresh = reconcile(&[object("team-a", 2, bad_spec())], &files, &BTreeMap::new());
        let status = plan_status(&fresh.outcomes[0], None, now()).unwrap();
        assert_eq!(status.conditions[0].reason, "Refused");
        assert!(status.conditions[0].message.contains("guards nothing"));
    }
}
