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

fn config_map_target() -> Target {
    Target {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        name: "settings".into(),
        namespace: "prod".into(),
    }
}

const SETTINGS: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: prod\ndata:\n  GREETING: hello # shown on the login page\n  MODE: 'strict'\n  LEVEL: \"info\"\n";

/// The file as serde-saphyr reads it, every document whole.
fn saphyr(text: &str) -> Vec<Value> {
    serde_saphyr::from_multiple(text).unwrap()
}

/// Issue 24, section 6: a value holding a character YAML 1.1 takes for a line break, written
/// plain, reads as one changed line to Git and as an extra key to kustomize's kyaml,
/// sigs.k8s.io/yaml and PyYAML. Each is written double-quoted with escapes, whatever the
/// quoting in Git, on the one line, and the file read again is the file in Git with only that
/// value changed.
#[test]
fn a_value_with_a_yaml_11_line_break_is_escaped_on_its_one_line_and_reads_back_whole() {
    let files = [file("settings.yaml", SETTINGS)];
    let live = json!({"data": {}});
    for field in ["GREETING", "MODE", "LEVEL"] {
        for attack in [
            "hello\u{2028}AUTH_DISABLED: \"true\"",
            "hello\u{2029}AUTH_DISABLED: \"true\"",
            "hello\u{85}AUTH_DISABLED: \"true\"",
            "hello\r\nAUTH_DISABLED: \"true\"",
            "\u{feff}hello\tthere\u{0}\u{7f}\u{9f}\u{fffe}\u{ffff} \\ \" '",
        ] {
            let path = format!("data.{field}");
            let plan = plan(
                &files,
                "",
                &config_map_target(),
                &[wanted(&path, json!(attack))],
                &live,
            )
            .unwrap();
            assert_eq!(plan.skipped, [], "{field} {attack:?}");
            let edit = &plan.edits[0];
            let changed: Vec<(&str, &str)> = SETTINGS
                .lines()
                .zip(edit.text.lines())
                .filter(|(a, b)| a != b)
                .collect();
            assert_eq!(changed.len(), 1, "one line changes: {changed:?}");
            assert_eq!(SETTINGS.lines().count(), edit.text.lines().count());
            assert!(
                !edit
                    .text
                    .contains(['\u{85}', '\u{2028}', '\u{2029}', '\r', '\u{feff}']),
                "no raw break in {:?}",
                edit.text
            );
            let new = &edit.fields[0].new;
            assert!(new.starts_with('"') && new.ends_with('"'), "{new}");
            let mut intended = saphyr(SETTINGS);
            intended[0]["data"][field] = json!(attack);
            assert_eq!(saphyr(&edit.text), intended, "{field} {attack:?}");
        }
    }
    let plan = plan(
        &files,
        "",
        &config_map_target(),
        &[wanted(
            "data.GREETING",
            json!("hello\u{2028}AUTH_DISABLED: \"true\""),
        )],
        &live,
    )
    .unwrap();
    assert_eq!(
        plan.edits[0].fields[0].new,
        r#""hello\u2028AUTH_DISABLED: \"true\"""#
    );
}

/// A string YAML 1.1 reads as something else is quoted: `yes`, `on`, `y` are booleans to
/// go-yaml, PyYAML and serde-saphyr, `0755` an octal number, `1e3` a string.
#[test]
fn words_yaml_11_reads_as_booleans_or_numbers_are_quoted() {
    let files = [file("settings.yaml", SETTINGS)];
    let live = json!({"data": {}});
    for value in [
        json!("on"),
        json!("Yes"),
        json!("y"),
        json!("0755"),
        json!("1_000"),
        json!("1:20"),
        json!(".inf"),
        json!("~"),
        json!(1e300),
        json!(5),
        json!(true),
    ] {
        let plan = plan(
            &files,
            "",
            &config_map_target(),
            &[wanted("data.GREETING", value.clone())],
            &live,
        )
        .unwrap();
        let edit = &plan.edits[0];
        let mut intended = saphyr(SETTINGS);
        intended[0]["data"]["GREETING"] = value.clone();
        assert_eq!(saphyr(&edit.text), intended, "{value}");
    }
}

/// The file read again must be the file in Git with only the recorded fields set: an anchored
/// value written in place would change every alias of it too.
#[test]
fn an_edit_that_changes_more_than_the_recorded_field_is_refused_and_nothing_is_written() {
    let anchored = DEPLOYMENT.replace(
        "  replicas: 2 # the usual\n",
        "  replicas: &replicas 2 # the usual\n  minReadySeconds: *replicas\n",
    );
    let error = plan(
        &[file("api.yaml", &anchored)],
        "",
        &target(),
        &[wanted("spec.replicas", json!(5))],
        &live(),
    )
    .unwrap_err();
    assert_eq!(
        error.to_string(),
        "writing spec.replicas into api.yaml would change more than those fields: to serde-saphyr (anchors, merge keys, YAML 1.1's booleans and octals), document 1, spec.minReadySeconds would be 5 instead of 2; nothing was written: edit the manifest by hand"
    );
    // A file some reader cannot read as it is in Git (kyaml refuses duplicate keys too).
    let duplicated = DEPLOYMENT.replace("  replicas: 2", "  replicas: 2\n  replicas: 3");
    let error = plan(
        &[file("api.yaml", &duplicated)],
        "",
        &target(),
        &[wanted("spec.replicas", json!(5))],
        &live(),
    )
    .unwrap_err();
    assert!(
        error.to_string().starts_with("writing spec.replicas into api.yaml would change more than those fields: to serde-saphyr (anchors, merge keys, YAML 1.1's booleans and octals), it cannot be read as it is in Git ("),
        "{error}"
    );
}

/// Issue 24, section 7: a custom resource's key holding brackets, dots, quotes and the like is
/// found in the manifest from the path a record keeps.
#[test]
fn a_key_with_brackets_is_found_from_the_path_a_record_keeps() {
    let key = "a[0]].b\\'\"";
    let manifest = format!(
        "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: api\n  namespace: prod\nspec:\n  rules:\n    {}: old\n",
        yaml::double_quoted(key)
    );
    let recorded = FieldPath::new(["spec", "rules", key]).to_string();
    assert_eq!(recorded, "spec.rules[a[0]]]].b\\'\"]");
    let widget = Target {
        api_version: "example.com/v1".into(),
        kind: "Widget".into(),
        name: "api".into(),
        namespace: "prod".into(),
    };
    let plan = plan(
        &[file("widget.yaml", &manifest)],
        "",
        &widget,
        &[wanted(&recorded, json!("new"))],
        &json!({"spec": {"rules": {key: "new"}}}),
    )
    .unwrap();
    assert_eq!(plan.skipped, []);
    assert_eq!(plan.edits[0].text, manifest.replace(": old", ": new"));
    assert_eq!(plan.edits[0].fields[0].field, recorded);
}

/// An Argo CD directory source reads only the files directly in its path unless
/// `directory.recurse`: a manifest of the object in a subdirectory is not what it applies.
#[test]
fn an_argo_cd_directory_source_reads_only_its_own_files_unless_recursive() {
    let files = [
        file("app/api.yaml", DEPLOYMENT),
        file("app/old/api.yaml", DEPLOYMENT),
    ];
    let fields = [wanted("spec.replicas", json!(5))];
    let direct = plan_at_depth(
        &files,
        ("app", Depth::Directly),
        &target(),
        &fields,
        &live(),
    )
    .unwrap();
    assert_eq!(direct.skipped, []);
    assert_eq!(
        direct
            .edits
            .iter()
            .map(|e| e.path.as_str())
            .collect::<Vec<_>>(),
        ["app/api.yaml"]
    );
    let below = plan_at_depth(&files, ("app", Depth::Below), &target(), &fields, &live()).unwrap();
    assert_eq!(below.edits, []);
    assert!(
        below.skipped[0]
            .why
            .starts_with("it is set in several places (app/api.yaml, app/old/api.yaml)"),
        "{:?}",
        below.skipped
    );
    // Only in a subdirectory: not applied by a directory source that does not recurse.
    let error = plan_at_depth(
        &files[1..],
        ("app", Depth::Directly),
        &target(),
        &fields,
        &live(),
    )
    .unwrap_err();
    assert_eq!(
        error.to_string(),
        "no manifest applied from app declares Deployment prod/api"
    );
    // A kustomization.yaml makes it a Kustomize source, read as Flux reads one.
    let with_kustomization = [
        file("app/kustomization.yaml", "resources: [base/api.yaml]\n"),
        file("app/base/api.yaml", DEPLOYMENT),
    ];
    let kustomized = plan_at_depth(
        &with_kustomization,
        ("app", Depth::Directly),
        &target(),
        &fields,
        &live(),
    )
    .unwrap();
    assert_eq!(kustomized.edits[0].path, "app/base/api.yaml");
}
