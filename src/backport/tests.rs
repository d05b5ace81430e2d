use super::*;
use serde_json::json;

fn file(path: &str, text: &str) -> RepoFile {
    RepoFile {
        path: path.into(),
        text: text.into(),
    }
}

fn target() -> Target {
    Target {
        api_version: "apps/v1".into(),
        kind: "Deployment".into(),
        name: "api".into(),
        namespace: "prod".into(),
    }
}

fn live() -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "api", "namespace": "prod"},
        "spec": {"replicas": 5, "template": {"spec": {"containers": [
            {"name": "api", "image": "registry.example/api:1.2.4"},
            {"name": "proxy", "image": "proxy:2"}
        ]}}}
    })
}

fn wanted(path: &str, value: Value) -> Wanted {
    Wanted {
        path: FieldPath::parse(path).unwrap(),
        value,
    }
}

const DEPLOYMENT: &str = "# Payments API\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: api\n  namespace: prod\nspec:\n  replicas: 2 # the usual\n  template:\n    spec:\n      containers:\n        - name: proxy\n          image: proxy:2\n        - name: api\n          image: registry.example/api:1.2.3\n";

#[test]
fn a_plain_manifest_gets_the_values_in_place_with_comments_and_order_kept() {
    let files = [
        file("apps/api.yaml", DEPLOYMENT),
        file(
            "apps/other.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: api}\n",
        ),
    ];
    let plan = plan(
        &files,
        "",
        &target(),
        &[
            wanted("spec.replicas", json!(5)),
            // Index 0 in the live object is the container named api, second in Git.
            wanted(
                "spec.template.spec.containers[0].image",
                json!("registry.example/api:1.2.4"),
            ),
        ],
        &live(),
    )
    .unwrap();
    assert_eq!(plan.skipped, []);
    assert_eq!(plan.edits.len(), 1);
    let edit = &plan.edits[0];
    assert_eq!(edit.path, "apps/api.yaml");
    assert_eq!(
        edit.text,
        DEPLOYMENT
            .replace("replicas: 2 # the usual", "replicas: 5 # the usual")
            .replace("api:1.2.3", "api:1.2.4")
    );
    let fields: Vec<_> = edit
        .fields
        .iter()
        .map(|f| (f.field.as_str(), f.line, f.old.as_str(), f.new.as_str()))
        .collect();
    assert_eq!(
        fields,
        [
            ("spec.replicas", 8, "2", "5"),
            (
                "spec.template.spec.containers[0].image",
                15,
                "registry.example/api:1.2.3",
                "registry.example/api:1.2.4"
            ),
        ]
    );
}

#[test]
fn a_multi_document_file_is_edited_in_the_right_document() {
    let text = format!(
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: api\nspec:\n  replicas: 2\n---\n{DEPLOYMENT}---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: worker\nspec:\n  replicas: 2\n"
    );
    let files = [file("all.yaml", &text)];
    let plan = plan(
        &files,
        "",
        &target(),
        &[wanted("spec.replicas", json!(5))],
        &live(),
    )
    .unwrap();
    let edit = &plan.edits[0];
    assert_eq!(edit.fields[0].line, 6 + 1 + 8);
    let docs = yaml::documents(&edit.text).unwrap();
    let replicas: Vec<_> = docs
        .iter()
        .map(|d| d.to_json()["spec"]["replicas"].clone())
        .collect();
    assert_eq!(replicas, [json!(2), json!(5), json!(2)]);
}

const BASE_KUSTOMIZATION: &str = "resources:\n  - deployment.yaml\n";
const PATCH: &str =
    "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: api\nspec:\n  replicas: 3\n";

fn overlays() -> Vec<RepoFile> {
    vec![
        file("base/kustomization.yaml", BASE_KUSTOMIZATION),
        file("base/deployment.yaml", DEPLOYMENT),
        file(
            "overlays/production/kustomization.yaml",
            "namespace: prod\nresources:\n  - ../../base\npatches:\n  - path: replicas.yaml\n",
        ),
        file("overlays/production/replicas.yaml", PATCH),
        file(
            "overlays/staging/kustomization.yaml",
            "resources:\n  - ../../base\npatchesStrategicMerge:\n  - replicas.yaml\n",
        ),
        file("overlays/staging/replicas.yaml", PATCH),
    ]
}

#[test]
fn an_overlay_patch_that_sets_the_field_is_where_it_is_written_and_the_base_for_the_rest() {
    let files = overlays();
    let plan = plan(
        &files,
        "overlays/production",
        &target(),
        &[
            wanted("spec.replicas", json!(5)),
            wanted(
                "spec.template.spec.containers[0].image",
                json!("registry.example/api:1.2.4"),
            ),
        ],
        &live(),
    )
    .unwrap();
    assert_eq!(plan.skipped, []);
    let edited: Vec<_> = plan
        .edits
        .iter()
        .map(|e| (e.path.as_str(), e.fields[0].field.as_str()))
        .collect();
    assert_eq!(
        edited,
        [
            (
                "base/deployment.yaml",
                "spec.template.spec.containers[0].image"
            ),
            ("overlays/production/replicas.yaml", "spec.replicas"),
        ]
    );
    assert_eq!(
        plan.edits[1].text,
        PATCH.replace("replicas: 3", "replicas: 5")
    );
}

#[test]
fn from_the_root_a_field_two_overlays_set_is_in_several_places_and_nothing_is_written() {
    let files = overlays();
    let plan = plan(
        &files,
        "",
        &target(),
        &[wanted("spec.replicas", json!(5))],
        &live(),
    )
    .unwrap();
    assert_eq!(plan.edits, []);
    assert_eq!(plan.skipped.len(), 1);
    assert_eq!(
        plan.skipped[0].why,
        "it is set in several places (base/deployment.yaml, overlays/production/replicas.yaml, overlays/staging/replicas.yaml): pass --path with the directory the controller applies"
    );
}

#[test]
fn a_defaulted_field_an_equal_value_and_a_mapping_are_named_and_not_written() {
    let files = [file("api.yaml", DEPLOYMENT)];
    let plan = plan(
        &files,
        "",
        &target(),
        &[
            wanted("spec.revisionHistoryLimit", json!(10)),
            wanted("spec.template.spec.containers[1].image", json!("proxy:2")),
            wanted("spec.template.spec", json!({"x": 1})),
        ],
        &live(),
    )
    .unwrap();
    assert_eq!(plan.edits, []);
    let why: Vec<_> = plan
        .skipped
        .iter()
        .map(|s| (s.field.as_str(), s.why.as_str()))
        .collect();
    assert_eq!(
        why,
        [
            (
                "spec.revisionHistoryLimit",
                "no manifest declares it (the API server defaulted it, or another manager set it): add it by hand where it belongs"
            ),
            (
                "spec.template.spec.containers[1].image",
                "api.yaml has it already"
            ),
            (
                "spec.template.spec",
                "in api.yaml, it is a mapping in the manifest; driftgate writes single values, so edit it by hand"
            ),
        ]
    );
}

#[test]
fn no_manifest_of_the_object_is_an_error_and_broken_files_are_named() {
    let files = [
        file("broken.yaml", "a: [1\n"),
        file(
            "cm.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: api}\n",
        ),
    ];
    let mut other_namespace = target();
    other_namespace.namespace = "staging".into();
    let error = plan(
        &[file("api.yaml", DEPLOYMENT)],
        "",
        &other_namespace,
        &[],
        &live(),
    )
    .unwrap_err();
    assert_eq!(
        error.to_string(),
        "no manifest applied from the repository's root declares Deployment staging/api"
    );
    let error = plan(&files, "apps", &target(), &[], &live()).unwrap_err();
    assert_eq!(
        error.to_string(),
        "no manifest applied from apps declares Deployment prod/api"
    );
    let mut unreadable = Vec::new();
    Repo::read(&files, &mut unreadable);
    assert_eq!(unreadable.len(), 1);
    assert!(unreadable[0].starts_with("broken.yaml: "), "{unreadable:?}");
}
