//! Property tests for the pure building blocks: field paths and patterns, recorded fields and
//! what `backport` writes, the UPDATE diff, the break-glass time formats, and where driftgate
//! judges (the decision, the envelope-first read and the blast-radius keeper agree).

use std::collections::BTreeMap;

use driftgate::backport::yaml::double_quoted;
use driftgate::backport::{RepoFile, Target, Wanted, plan};
use driftgate::diff::changed_paths;
use driftgate::fieldpath::{FieldPath, FieldPattern};
use driftgate::ledger::evidence::{Evidence, digest, judge, latest_fields};
use driftgate::ledger::record::{
    BackportRequirement, BackportRequirementSpec, RecordScope, RecordedChange, RecordedField,
    RecordedObject, RecordedWindow,
};
use driftgate::timefmt::{WindowDuration, format_expiry, parse_expiry};
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::core::DynamicObject;
use proptest::collection::{btree_map, vec};
use proptest::option;
use proptest::prelude::*;
use proptest::sample::{Index, select};
use serde_json::{Map, Value, json};

// ---------------------------------------------------------------------------------------------
// Field paths
// ---------------------------------------------------------------------------------------------

/// A non-empty segment without brackets: mostly the shapes real keys have (plain names, list
/// indices, dotted and slashed annotation keys), plus arbitrary unicode.
fn segment() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => "[a-zA-Z_-][a-zA-Z0-9_-]{0,8}",
        2 => "[0-9]{1,3}",
        2 => "[a-z0-9][a-z0-9./_-]{0,12}",
        2 => "[^\\[\\]]{1,8}",
    ]
}

/// A segment that `FieldPattern::parse` takes literally: no glob metacharacter (`*`, `?`, `{`).
fn literal_segment() -> impl Strategy<Value = String> {
    segment().prop_filter("glob metacharacter", |s| !s.contains(['*', '?', '{']))
}

/// Any key a custom resource may hold (issue 24, section 7): the characters the path grammar
/// gives a meaning to, quotes, backslashes, the empty key and arbitrary unicode.
fn any_key() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => segment(),
        3 => "[\\[\\].\\\\'\"a0 ]{0,6}",
        2 => any::<String>(),
        1 => Just(String::new()),
    ]
}

/// Strings built from the characters the path grammar cares about, so the parsers see many
/// near-valid inputs and not only noise.
fn path_like() -> impl Strategy<Value = String> {
    prop_oneof!["[a-c0-9.\\[\\]*?{},\\\\/-]{0,16}", any::<String>(),]
}

proptest! {
    #[test]
    fn field_path_display_round_trips(segments in vec(any_key(), 1..6)) {
        let path = FieldPath::new(segments.clone());
        let text = path.to_string();
        let parsed = FieldPath::parse(&text);
        prop_assert_eq!(parsed.as_ref().map(FieldPath::segments), Ok(&segments[..]), "text {:?}", text);
    }

    #[test]
    fn field_path_parse_never_panics(text in path_like()) {
        let _ = FieldPath::parse(&text);
    }

    #[test]
    fn field_pattern_parse_never_panics(text in path_like()) {
        if let Ok(pattern) = FieldPattern::parse(&text) {
            prop_assert_eq!(pattern.as_str(), text.as_str());
        }
    }

    #[test]
    fn pattern_of_a_path_covers_it_and_below_but_not_above(
        segments in vec(literal_segment(), 1..6),
        extension in vec(any::<String>(), 1..4),
    ) {
        let path = FieldPath::new(segments.clone());
        let text = path.to_string();
        let pattern = FieldPattern::parse(&text);
        prop_assert!(pattern.is_ok(), "{:?} does not parse as a pattern: {:?}", text, pattern);
        let pattern = pattern.unwrap();
        prop_assert!(pattern.covers(&path), "{:?} does not cover its own path", text);
        let mut longer = segments.clone();
        longer.extend(extension);
        prop_assert!(pattern.covers(&FieldPath::new(longer.clone())), "{:?} does not cover {:?}", text, longer);
        for len in 0..segments.len() {
            let prefix = FieldPath::new(segments[..len].to_vec());
            prop_assert!(!pattern.covers(&prefix), "{:?} covers its prefix {:?}", text, prefix);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Recorded fields and backport (issue 24, sections 6 and 7)
// ---------------------------------------------------------------------------------------------

fn record_with(path: &str, value: &Value) -> BackportRequirement {
    let time = Time(Timestamp::from_second(1_800_000_000).unwrap());
    BackportRequirement::new(
        "api-1",
        BackportRequirementSpec {
            object: RecordedObject {
                api_version: "example.com/v1".into(),
                kind: "Widget".into(),
                name: "api".into(),
                uid: "u1".into(),
            },
            scope: RecordScope::Object,
            window: RecordedWindow {
                opener: Some("alice".into()),
                reason: Some("INC-1".into()),
                opened_at: Some(time.clone()),
                expires_at: time.clone(),
                label_value: "20270115T0800Z".into(),
            },
            policy: "production".into(),
            changes: vec![RecordedChange {
                time,
                user: "alice".into(),
                operation: "UPDATE".into(),
                object: None,
                subresource: String::new(),
                request_uid: "r1".into(),
                resource_version: "41".into(),
                fields: vec![RecordedField {
                    path: path.to_owned(),
                    digest: digest(Some(value)),
                    value: Some(value.clone()),
                }],
                landed: None,
            }],
        },
    )
}

/// `value` at `segments` below `spec`, in maps.
fn nested(segments: &[String], value: Value) -> Value {
    let inner = segments.iter().rev().fold(value, |inner, key| {
        Value::Object(Map::from_iter([(key.clone(), inner)]))
    });
    json!({"spec": inner})
}

/// A Widget's manifest with `old` at `segments` below `spec`, every key double-quoted.
fn widget_manifest(segments: &[String], old: &str) -> String {
    let mut text = "# Widgets, as Flux applies them\napiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: api\n  namespace: prod\nspec:".to_owned();
    for (depth, key) in segments.iter().enumerate() {
        text.push_str(&format!(
            "\n{}{}:",
            "  ".repeat(depth + 1),
            double_quoted(key)
        ));
    }
    text.push_str(&format!(" {old} # as in Git\n"));
    text
}

fn widget() -> Target {
    Target {
        api_version: "example.com/v1".into(),
        kind: "Widget".into(),
        name: "api".into(),
        namespace: "prod".into(),
    }
}

/// Any value a recorded field may hold and `backport` writes in place: strings holding every
/// character some YAML reader treats specially, words YAML 1.1 reads as booleans, numbers.
fn scalar_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        4 => any::<String>().prop_map(Value::from),
        4 => "[\\x{85}\\x{2028}\\x{2029}\\x{feff}\\x{fffe}\\x{0}\\x{7f}\\x{9f}\\r\\n\\t '\"\\\\:#,\\[\\]{}&*!|>%@`~a1.+-]{0,10}"
            .prop_map(Value::from),
        2 => select(vec!["y", "N", "yes", "On", "off", "null", "~", "0755", "0x1F", "1_000", "1:20", ".inf", "2026-01-15", "<<", "=", "---"])
            .prop_map(Value::from),
        1 => any::<i64>().prop_map(Value::from),
        1 => any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(Value::from),
        1 => any::<bool>().prop_map(Value::from),
    ]
}

proptest! {
    /// A path of any keys, kept in a record as the API server stores it (JSON), reads back as
    /// the same keys, and the ledger's judgement finds the field it names.
    #[test]
    fn a_recorded_path_round_trips_and_the_ledger_finds_its_field(
        segments in vec(any_key(), 1..5),
    ) {
        let path = FieldPath::new(segments.clone());
        let mut full = vec!["spec".to_owned()];
        full.extend(segments.iter().cloned());
        let text = FieldPath::new(full.clone()).to_string();
        let stored = serde_json::to_string(&record_with(&text, &json!("on"))).unwrap();
        let record: BackportRequirement = serde_json::from_str(&stored).unwrap();
        let latest = latest_fields(&record.spec, "u1");
        let kept: Vec<&str> = latest.keys().copied().collect();
        prop_assert_eq!(&kept, &[text.as_str()]);
        let parsed = FieldPath::parse(kept[0]);
        prop_assert_eq!(parsed.as_ref().map(FieldPath::segments), Ok(&full[..]));
        prop_assert_eq!(judge(&record.spec, "u1", &nested(&segments, json!("on")), None), Evidence::Backported);
        prop_assert_eq!(
            judge(&record.spec, "u1", &nested(&segments, json!("off")), None),
            Evidence::Reverted(vec![text.clone()])
        );
        prop_assert_eq!(FieldPath::parse(&path.to_string()), Ok(path));
    }

    /// ... and `backport` finds it in a manifest and writes it there, nothing else changed.
    #[test]
    fn backport_writes_a_field_of_any_keys_from_its_recorded_path(
        segments in vec(any_key(), 1..5),
    ) {
        let mut full = vec!["spec".to_owned()];
        full.extend(segments.iter().cloned());
        let recorded = FieldPath::new(full).to_string();
        let manifest = widget_manifest(&segments, "old");
        let plan = plan(
            &[RepoFile { path: "widget.yaml".into(), text: manifest.clone() }],
            "",
            &widget(),
            &[Wanted { path: FieldPath::parse(&recorded).unwrap(), value: json!("new") }],
            &nested(&segments, json!("new")),
        );
        prop_assert!(plan.is_ok(), "{:?}", plan);
        let plan = plan.unwrap();
        prop_assert_eq!(&plan.skipped, &[]);
        prop_assert_eq!(&plan.edits[0].text, &manifest.replace(" old # as in Git", " new # as in Git"));
        prop_assert_eq!(&plan.edits[0].fields[0].field, &recorded);
    }

    /// Issue 24, section 6: any value `backport` writes, into a plain, single- or double-quoted
    /// scalar, changes that one line, leaves no character a YAML 1.1 reader breaks lines at, and
    /// the whole file read again by serde-saphyr (and as YAML 1.1 reads its lines) is the file
    /// in Git with that one value set.
    #[test]
    fn any_value_is_written_on_its_line_and_read_back_whole(
        value in scalar_value(),
        style in select(vec!["hello", "'hello'", "\"hello\""]),
    ) {
        let manifest = format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: prod\ndata:\n  GREETING: {style} # shown at login\n  OTHER: [a, {{b: c}}]\n"
        );
        let target = Target {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            name: "settings".into(),
            namespace: "prod".into(),
        };
        let plan = plan(
            &[RepoFile { path: "settings.yaml".into(), text: manifest.clone() }],
            "",
            &target,
            &[Wanted { path: FieldPath::new(["data", "GREETING"]), value: value.clone() }],
            &json!({}),
        );
        prop_assert!(plan.is_ok(), "{}", plan.unwrap_err());
        let plan = plan.unwrap();
        if value == json!("hello") {
            prop_assert_eq!(plan.edits.len(), 0);
            return Ok(());
        }
        prop_assert_eq!(&plan.skipped, &[]);
        let written = &plan.edits[0].text;
        prop_assert_eq!(written.lines().count(), manifest.lines().count());
        let changed = manifest.lines().zip(written.lines()).filter(|(a, b)| a != b).count();
        prop_assert_eq!(changed, 1);
        prop_assert!(!written.contains(['\u{85}', '\u{2028}', '\u{2029}', '\r']), "{:?}", written);
        let mut intended: Vec<Value> = serde_saphyr::from_multiple(&manifest).unwrap();
        intended[0]["data"]["GREETING"] = value.clone();
        let read: Vec<Value> = serde_saphyr::from_multiple(written).unwrap();
        prop_assert_eq!(read, intended);
    }
}

// ---------------------------------------------------------------------------------------------
// Diff
// ---------------------------------------------------------------------------------------------

/// Few keys, so that generated objects share structure and mutations hit existing fields.
fn data_key() -> impl Strategy<Value = String> {
    select(vec!["a", "b", "replicas", "image", "x.y/z", "0"]).prop_map(str::to_owned)
}

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        2 => any::<bool>().prop_map(Value::Bool),
        3 => (-2i64..3).prop_map(Value::from),
        1 => Just(json!(0.5)),
        3 => select(vec!["", "a", "b", "api:1"]).prop_map(Value::from),
    ]
}

fn tree() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![1 => Just(Value::Null), 6 => scalar()];
    leaf.prop_recursive(3, 24, 3, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..3).prop_map(Value::Array),
            btree_map(data_key(), inner, 0..4).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// `{a: null}` and the like: equal to `{}` once nulls are dropped, but not to nothing.
fn null_only_map() -> impl Strategy<Value = Value> {
    btree_map(data_key(), Just(Value::Null), 1..3)
        .prop_map(|m| Value::Object(m.into_iter().collect()))
}

/// Top-level keys besides apiVersion, kind and metadata.
const TOP_KEYS: [&str; 4] = ["spec", "data", "status", "extra"];

fn top_key() -> impl Strategy<Value = String> {
    select(TOP_KEYS.to_vec()).prop_map(str::to_owned)
}

fn label_key() -> impl Strategy<Value = String> {
    select(vec!["app", "tier", "driftgate.dev/break-glass"]).prop_map(str::to_owned)
}

fn label_value() -> impl Strategy<Value = String> {
    select(vec!["", "api", "20261130T0930Z"]).prop_map(str::to_owned)
}

fn string_map() -> impl Strategy<Value = Option<BTreeMap<String, String>>> {
    option::of(btree_map(label_key(), label_value(), 0..3))
}

/// Metadata the API server maintains by itself; `changed_paths` must not see it.
fn ignored_metadata() -> impl Strategy<Value = Map<String, Value>> {
    (
        option::of(select(vec!["1", "2"])),
        option::of(1i64..3),
        option::of(select(vec!["uid-1", "uid-2"])),
        option::of(select(vec!["2026-01-01T00:00:00Z", "2026-02-01T00:00:00Z"])),
        option::of(select(vec!["kustomize-controller", "kubectl-edit"])),
        option::of(select(vec!["2026-03-01T00:00:00Z"])),
        option::of(0i64..31),
    )
        .prop_map(|(rv, generation, uid, created, manager, deleted, grace)| {
            let mut meta = Map::new();
            let mut put = |key: &str, value: Option<Value>| {
                if let Some(value) = value {
                    meta.insert(key.to_owned(), value);
                }
            };
            put("resourceVersion", rv.map(Value::from));
            put("generation", generation.map(Value::from));
            put("uid", uid.map(Value::from));
            put("creationTimestamp", created.map(Value::from));
            put(
                "managedFields",
                manager.map(|m| json!([{"manager": m, "operation": "Apply"}])),
            );
            put("deletionTimestamp", deleted.map(Value::from));
            put("deletionGracePeriodSeconds", grace.map(Value::from));
            meta
        })
}

/// A whole object as JSON, the way an AdmissionReview carries it.
fn object() -> impl Strategy<Value = Value> {
    (
        select(vec!["api", "db"]),
        string_map(),
        string_map(),
        option::of(vec(select(vec!["a.io/x", "b"]), 0..3)),
        ignored_metadata(),
        btree_map(top_key(), tree(), 0..4),
    )
        .prop_map(|(name, labels, annotations, finalizers, ignored, data)| {
            let mut meta = ignored;
            meta.insert("name".into(), json!(name));
            meta.insert("namespace".into(), json!("prod-payments"));
            if let Some(labels) = labels {
                meta.insert("labels".into(), json!(labels));
            }
            if let Some(annotations) = annotations {
                meta.insert("annotations".into(), json!(annotations));
            }
            if let Some(finalizers) = finalizers {
                meta.insert("finalizers".into(), json!(finalizers));
            }
            let mut root = Map::new();
            root.insert("apiVersion".into(), json!("example.com/v1"));
            root.insert("kind".into(), json!("Widget"));
            root.insert("metadata".into(), Value::Object(meta));
            root.extend(data);
            Value::Object(root)
        })
}

/// One edit that turns an object into another, relevant or not.
#[derive(Clone, Debug)]
enum Mutation {
    /// Replace the node reached from `top` by `picks` (creating `top` if needed).
    Set(String, Vec<Index>, Value),
    /// Remove `top` itself (no picks), or one key of the map reached from `top` by the picks
    /// after the first.
    Remove(String, Vec<Index>, Index),
    /// Add `key: null` to the map reached from `top` by `picks`, if the key is absent.
    InsertNull(String, Vec<Index>, String),
    Label(String, Option<String>),
    Annotation(String, Option<String>),
    /// `labels: {}` <-> no labels.
    EmptyLabels,
    Finalizers(Option<Vec<String>>),
    Name(String),
    IgnoredMetadata(Map<String, Value>),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let picks = || vec(any::<Index>(), 0..4);
    prop_oneof![
        4 => (top_key(), picks(), tree()).prop_map(|(t, p, v)| Mutation::Set(t, p, v)),
        1 => (top_key(), picks(), null_only_map()).prop_map(|(t, p, v)| Mutation::Set(t, p, v)),
        2 => (top_key(), picks(), any::<Index>()).prop_map(|(t, p, i)| Mutation::Remove(t, p, i)),
        2 => (top_key(), picks(), data_key()).prop_map(|(t, p, k)| Mutation::InsertNull(t, p, k)),
        1 => (label_key(), option::of(label_value())).prop_map(|(k, v)| Mutation::Label(k, v)),
        1 => (label_key(), option::of(label_value())).prop_map(|(k, v)| Mutation::Annotation(k, v)),
        1 => Just(Mutation::EmptyLabels),
        1 => option::of(vec(select(vec!["a.io/x", "b"]).prop_map(str::to_owned), 0..2))
            .prop_map(Mutation::Finalizers),
        1 => select(vec!["api", "db"]).prop_map(|n| Mutation::Name(n.to_owned())),
        2 => ignored_metadata().prop_map(Mutation::IgnoredMetadata),
    ]
}

/// The route `picks` take down through non-empty maps and lists (each pick chooses a key or an
/// element); it stops early at anything else.
fn route(mut node: &Value, picks: impl IntoIterator<Item = usize>) -> Vec<String> {
    let mut segments = Vec::new();
    for pick in picks {
        match node {
            Value::Object(map) if !map.is_empty() => {
                let (key, value) = map.iter().nth(pick % map.len()).unwrap();
                segments.push(key.clone());
                node = value;
            }
            Value::Array(list) if !list.is_empty() => {
                let i = pick % list.len();
                segments.push(i.to_string());
                node = &list[i];
            }
            _ => break,
        }
    }
    segments
}

fn at_mut<'a>(node: &'a mut Value, segments: &[String]) -> &'a mut Value {
    segments.iter().fold(node, |node, segment| match node {
        Value::Object(map) => map.get_mut(segment).unwrap(),
        Value::Array(list) => &mut list[segment.parse::<usize>().unwrap()],
        _ => unreachable!("a route only passes maps and lists"),
    })
}

/// Follows `picks` down through non-empty maps and lists; stops early at anything else.
fn descend<'a>(node: &'a mut Value, picks: &[Index]) -> &'a mut Value {
    let segments = route(node, picks.iter().map(|p| p.index(usize::MAX)));
    at_mut(node, &segments)
}

fn metadata_mut(object: &mut Value) -> &mut Map<String, Value> {
    object["metadata"].as_object_mut().unwrap()
}

fn set_in_string_map(
    meta: &mut Map<String, Value>,
    field: &str,
    key: String,
    value: Option<String>,
) {
    let map = meta.entry(field).or_insert_with(|| json!({}));
    let map = map.as_object_mut().unwrap();
    match value {
        Some(value) => map.insert(key, json!(value)),
        None => map.remove(&key),
    };
}

fn apply(object: &mut Value, mutation: &Mutation) {
    match mutation.clone() {
        Mutation::Set(top, picks, value) => {
            let slot = object
                .as_object_mut()
                .unwrap()
                .entry(top)
                .or_insert(Value::Null);
            *descend(slot, &picks) = value;
        }
        Mutation::Remove(top, picks, index) => {
            let root = object.as_object_mut().unwrap();
            if picks.is_empty() {
                root.remove(&top);
            } else if let Some(slot) = root.get_mut(&top)
                && let Value::Object(map) = descend(slot, &picks[1..])
                && !map.is_empty()
            {
                let key = map.keys().nth(index.index(map.len())).unwrap().clone();
                map.remove(&key);
            }
        }
        Mutation::InsertNull(top, picks, key) => {
            let root = object.as_object_mut().unwrap();
            match root.get_mut(&top) {
                None => {
                    root.insert(top, Value::Null);
                }
                Some(slot) => {
                    if let Value::Object(map) = descend(slot, &picks) {
                        map.entry(key).or_insert(Value::Null);
                    }
                }
            }
        }
        Mutation::Label(key, value) => {
            set_in_string_map(metadata_mut(object), "labels", key, value)
        }
        Mutation::Annotation(key, value) => {
            set_in_string_map(metadata_mut(object), "annotations", key, value)
        }
        Mutation::EmptyLabels => {
            let meta = metadata_mut(object);
            match meta.get("labels") {
                Some(Value::Object(labels)) if labels.is_empty() => {
                    meta.remove("labels");
                }
                None => {
                    meta.insert("labels".into(), json!({}));
                }
                Some(_) => {}
            }
        }
        Mutation::Finalizers(finalizers) => {
            let meta = metadata_mut(object);
            match finalizers {
                Some(list) => meta.insert("finalizers".into(), json!(list)),
                None => meta.remove("finalizers"),
            };
        }
        Mutation::Name(name) => {
            metadata_mut(object).insert("name".into(), json!(name));
        }
        Mutation::IgnoredMetadata(fields) => {
            let meta = metadata_mut(object);
            for key in [
                "resourceVersion",
                "generation",
                "uid",
                "creationTimestamp",
                "managedFields",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
            ] {
                meta.remove(key);
            }
            meta.extend(fields);
        }
    }
}

/// Pairs of objects: mostly an object and an edit of it (so that "equal" is common), sometimes
/// two unrelated objects.
fn object_pair() -> impl Strategy<Value = (Value, Value)> {
    prop_oneof![
        4 => (object(), vec(mutation(), 0..4)).prop_map(|(a, mutations)| {
            let mut b = a.clone();
            for m in &mutations {
                apply(&mut b, m);
            }
            (a, b)
        }),
        1 => (object(), object()),
    ]
}

fn dynamic(value: &Value) -> DynamicObject {
    serde_json::from_value(value.clone()).expect("generated objects are valid DynamicObjects")
}

/// The reference for "no change": drop `status` and the metadata the API server keeps, treat an
/// empty labels/annotations/finalizers/ownerReferences as absent, and drop map keys whose value
/// is null (list elements keep their place, so a null element stays).
fn normalise(object: &Value) -> Value {
    let mut out = Map::new();
    for (key, value) in object.as_object().unwrap() {
        match key.as_str() {
            "status" => {}
            "metadata" => {
                let mut meta = Map::new();
                for (field, value) in value.as_object().unwrap() {
                    let keep = match field.as_str() {
                        "name" | "generateName" | "namespace" => !value.is_null(),
                        "labels" | "annotations" => {
                            value.as_object().is_some_and(|m| !m.is_empty())
                        }
                        "finalizers" | "ownerReferences" => {
                            value.as_array().is_some_and(|l| !l.is_empty())
                        }
                        _ => false,
                    };
                    if keep {
                        meta.insert(field.clone(), value.clone());
                    }
                }
                out.insert(key.clone(), Value::Object(meta));
            }
            _ => {
                if !value.is_null() {
                    out.insert(key.clone(), strip_null_keys(value));
                }
            }
        }
    }
    Value::Object(out)
}

fn strip_null_keys(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), strip_null_keys(v)))
                .collect(),
        ),
        Value::Array(list) => Value::Array(list.iter().map(strip_null_keys).collect()),
        other => other.clone(),
    }
}

fn lookup<'a>(object: &'a Value, path: &FieldPath) -> Option<&'a Value> {
    path.segments()
        .iter()
        .try_fold(object, |node, segment| match node {
            Value::Object(map) => map.get(segment),
            Value::Array(list) => segment.parse::<usize>().ok().and_then(|i| list.get(i)),
            _ => None,
        })
}

fn sorted(mut paths: Vec<FieldPath>) -> Vec<FieldPath> {
    paths.sort();
    paths
}

proptest! {
    #[test]
    fn diff_of_an_object_with_itself_is_empty(object in object()) {
        let object = dynamic(&object);
        prop_assert_eq!(changed_paths(&object, &object), Vec::<FieldPath>::new());
    }

    #[test]
    fn diff_is_empty_iff_equal_after_normalising((a, b) in object_pair()) {
        let changes = changed_paths(&dynamic(&a), &dynamic(&b));
        let equal = normalise(&a) == normalise(&b);
        if equal {
            prop_assert!(changes.is_empty(), "equal objects, yet changes {:?}", changes);
        } else {
            prop_assert!(!changes.is_empty(), "objects differ, yet no change reported");
        }
    }

    #[test]
    fn diff_reports_only_paths_that_exist((a, b) in object_pair()) {
        for path in changed_paths(&dynamic(&a), &dynamic(&b)) {
            prop_assert!(
                lookup(&a, &path).is_some() || lookup(&b, &path).is_some(),
                "{} is in neither object", path
            );
        }
    }

    #[test]
    fn diff_is_symmetric((a, b) in object_pair()) {
        let (a, b) = (dynamic(&a), dynamic(&b));
        prop_assert_eq!(sorted(changed_paths(&a, &b)), sorted(changed_paths(&b, &a)));
    }

    #[test]
    fn changing_one_leaf_in_spec_reports_exactly_that_path(
        object in object(),
        spec in btree_map(data_key(), tree(), 1..4),
        picks in vec(any::<Index>(), 0..6),
        replacement in scalar(),
    ) {
        let mut a = object;
        a["spec"] = Value::Object(spec.into_iter().collect());
        let mut b = a.clone();
        // Walk down to a leaf (anything but a non-empty map or list), remembering the path.
        let raw = picks.into_iter().map(|p| p.index(usize::MAX));
        let route = route(&b["spec"], raw.chain(std::iter::repeat(0)));
        let node = at_mut(&mut b["spec"], &route);
        *node = if *node == replacement { json!("a value no generator makes") } else { replacement };
        let mut expected = vec!["spec".to_owned()];
        expected.extend(route);
        prop_assert_eq!(changed_paths(&dynamic(&a), &dynamic(&b)), vec![FieldPath::new(expected)]);
    }
}

/// A map that appears holding only nulls is a change, as an empty map appearing is; a map that
/// gains a null key is not. (Found by `diff_is_empty_iff_equal_after_normalising`.)
#[test]
fn a_map_of_nulls_appearing_is_a_change() {
    let object = |spec: Value| {
        dynamic(&json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a"}, "spec": spec}))
    };
    let absent = object(json!({}));
    let empty = object(json!({"x": {}}));
    let nulls = object(json!({"x": {"y": null}}));
    assert!(changed_paths(&nulls, &empty).is_empty());
    assert!(!changed_paths(&absent, &empty).is_empty());
    assert!(!changed_paths(&absent, &nulls).is_empty());
}

// ---------------------------------------------------------------------------------------------
// Break-glass expiries and durations
// ---------------------------------------------------------------------------------------------

/// Strings shaped like expiries, with every part possibly out of range.
fn expiry_like() -> impl Strategy<Value = String> {
    (
        0u32..10_000,
        0u32..14,
        0u32..33,
        0u32..26,
        0u32..62,
        option::of(0u32..62),
    )
        .prop_map(|(year, month, day, hour, minute, second)| match second {
            Some(s) => format!("{year:04}{month:02}{day:02}T{hour:02}{minute:02}{s:02}Z"),
            None => format!("{year:04}{month:02}{day:02}T{hour:02}{minute:02}Z"),
        })
}

proptest! {
    #[test]
    fn expiry_round_trips(second in 0i64..=Timestamp::MAX.as_second()) {
        let t = Timestamp::from_second(second).unwrap();
        let text = format_expiry(t);
        prop_assert_eq!(parse_expiry(&text), Ok(t), "formatted as {:?}", text);
    }

    #[test]
    fn parse_expiry_never_panics(text in prop_oneof![
        any::<String>(),
        "[0-9TZ]{14}",
        "[0-9TZ]{16}",
        "[0-9]{8}T[0-9]{4}([0-9]{2})?Z",
        ".{14}",
        ".{16}",
    ]) {
        let _ = parse_expiry(&text);
    }

    #[test]
    fn accepted_expiries_have_a_fixed_shape_and_reformat_equivalently(
        text in prop_oneof![1 => any::<String>(), 8 => expiry_like()]
    ) {
        if let Ok(t) = parse_expiry(&text) {
            prop_assert!(text.len() == 14 || text.len() == 16, "{:?} accepted", text);
            let again = format_expiry(t);
            prop_assert_eq!(parse_expiry(&again), Ok(t));
            // Seconds are dropped only when zero: the text itself, or the text less "00".
            let expected = if text.len() == 16 && &text[13..15] == "00" {
                format!("{}Z", &text[..13])
            } else {
                text.clone()
            };
            prop_assert_eq!(again, expected);
        }
    }

    #[test]
    fn duration_parse_never_panics(text in prop_oneof![any::<String>(), "[0-9dhms -]{0,24}"]) {
        if let Ok(d) = WindowDuration::parse(&text) {
            let seconds = d.as_signed().as_secs();
            prop_assert!((1..=366 * 86_400).contains(&seconds), "{:?} -> {}s", text, seconds);
        }
    }

    #[test]
    fn duration_display_round_trips(seconds in 1i64..=366 * 86_400) {
        let d = WindowDuration::from_secs(seconds);
        let text = d.to_string();
        prop_assert_eq!(WindowDuration::parse(&text), Ok(d), "displayed as {:?}", text);
    }
}

// ---------------------------------------------------------------------------------------------
// Where driftgate judges: the decision, the envelope-first read and the blast-radius keeper
// ---------------------------------------------------------------------------------------------

/// One policy document built from choices that all compile: namespaces by name, glob and label
/// selector, kinds, operations, subresources, break-glass, deletions, suspensions (in the
/// documented default namespaces, in some of their own, or only the policy's own) and
/// cluster-scoped kinds.
#[derive(Clone, Debug)]
struct PolicyChoice {
    include: Vec<&'static str>,
    exclude: Vec<&'static str>,
    selector: bool,
    resources: Vec<&'static str>,
    resource_exclude: Vec<&'static str>,
    operations: Vec<&'static str>,
    subresources: Vec<&'static str>,
    audit: bool,
    break_glass: Option<bool>,
    deletions: bool,
    suspensions: Option<Option<Vec<&'static str>>>,
    cluster_scoped: bool,
}

const NAMESPACE_GLOBS: &[&str] = &[
    "prod-*",
    "payments",
    "flux-system",
    "team-*",
    "argo*",
    "*-sandbox",
];
const RESOURCE_GLOBS: &[&str] = &[
    "*",
    "apps/*",
    "core/ConfigMap",
    "core/Namespace",
    "kustomize.toolkit.fluxcd.io/Kustomization",
    "coordination.k8s.io/Lease",
    "core/persistentvolumeclaims",
];

fn some_of(items: &'static [&'static str], max: usize) -> impl Strategy<Value = Vec<&'static str>> {
    proptest::sample::subsequence(items, 0..=max)
}

fn policy_choice() -> impl Strategy<Value = PolicyChoice> {
    let namespaces = (
        some_of(NAMESPACE_GLOBS, 3),
        some_of(NAMESPACE_GLOBS, 2),
        any::<bool>(),
    );
    let kinds = (
        some_of(RESOURCE_GLOBS, 3),
        some_of(RESOURCE_GLOBS, 2),
        proptest::sample::subsequence(&["CREATE", "UPDATE", "DELETE"][..], 1..=3),
        prop_oneof![Just(vec!["", "scale"]), Just(vec![""]), Just(vec!["scale"])],
    );
    let rules = (
        any::<bool>(),
        option::of(any::<bool>()),
        any::<bool>(),
        option::of(option::of(some_of(NAMESPACE_GLOBS, 2))),
        any::<bool>(),
    );
    (namespaces, kinds, rules).prop_map(
        |(
            (include, exclude, selector),
            (resources, resource_exclude, operations, subresources),
            (audit, break_glass, deletions, suspensions, cluster_scoped),
        )| {
            // `namespaces.include` is required unless a selector is given; `suspensions`
            // needs `breakGlass`.
            let selector = selector || include.is_empty();
            let suspensions = suspensions.filter(|_| break_glass.is_some());
            PolicyChoice {
                include,
                exclude,
                selector,
                resources,
                resource_exclude,
                operations,
                subresources,
                audit,
                break_glass,
                deletions,
                suspensions,
                cluster_scoped,
            }
        },
    )
}

fn quoted(items: &[&str]) -> String {
    let quoted: Vec<String> = items.iter().map(|i| format!("{i:?}")).collect();
    format!("[{}]", quoted.join(", "))
}

impl PolicyChoice {
    fn yaml(&self, name: &str) -> String {
        let mut spec = format!(
            "  mode: {}\n  namespaces:\n    include: {}\n    exclude: {}\n",
            if self.audit { "Audit" } else { "Enforce" },
            quoted(&self.include),
            quoted(&self.exclude),
        );
        if self.selector {
            spec.push_str("    selector: {matchLabels: {gitops: enforced}}\n");
        }
        if !self.resources.is_empty() {
            spec.push_str(&format!(
                "  resources:\n    include: {}\n    exclude: {}\n",
                quoted(&self.resources),
                quoted(&self.resource_exclude)
            ));
        }
        spec.push_str(&format!(
            "  operations: {}\n  subresources: {}\n",
            quoted(&self.operations),
            quoted(&self.subresources)
        ));
        spec.push_str(
            "  controllers:\n    - name: flux\n      usernames: [\"system:serviceaccount:flux-system:kustomize-controller\"]\n      fieldManagers: [kustomize-controller]\n",
        );
        if self.subresources.contains(&"scale") {
            spec.push_str(
                "  delegations:\n    - name: hpa\n      usernames: [\"system:serviceaccount:kube-system:horizontal-pod-autoscaler\"]\n      subresources: [scale]\n      fields: [spec.replicas]\n",
            );
        }
        if let Some(namespace_wide) = self.break_glass {
            spec.push_str(&format!(
                "  breakGlass:\n    maxDuration: 4h\n    openers: {{groups: [sre-oncall]}}\n    namespaceWide: {namespace_wide}\n"
            ));
        }
        if self.deletions {
            spec.push_str("  deletions:\n    controllerLimit: {deletes: 1, per: 1m}\n");
        }
        match &self.suspensions {
            None => {}
            Some(None) => spec.push_str("  suspensions: {}\n"),
            Some(Some(namespaces)) => spec.push_str(&format!(
                "  suspensions:\n    namespaces: {}\n",
                quoted(namespaces)
            )),
        }
        if self.cluster_scoped {
            spec.push_str("  clusterScoped: {}\n");
        }
        format!(
            "apiVersion: driftgate.dev/v1alpha1\nkind: GatePolicy\nmetadata:\n  name: {name}\nspec:\n{spec}"
        )
    }
}

fn policy_set() -> impl Strategy<Value = (String, driftgate::policy::PolicySet)> {
    vec(policy_choice(), 1..=3).prop_map(|choices| {
        let text = choices
            .iter()
            .enumerate()
            .map(|(i, c)| c.yaml(&format!("p{i}")))
            .collect::<Vec<_>>()
            .join("---\n");
        let set = driftgate::policy::PolicySet::from_yaml("generated", &text)
            .unwrap_or_else(|e| panic!("a generated policy does not compile: {e}\n{text}"));
        (text, set)
    })
}

/// The kinds a review may write: (kind group, kind, resource group, resource, subresource).
const WRITES: &[(&str, &str, &str, &str, &str)] = &[
    ("apps", "Deployment", "apps", "deployments", ""),
    ("apps", "Deployment", "apps", "deployments", "status"),
    ("autoscaling", "Scale", "apps", "deployments", "scale"),
    ("", "ConfigMap", "", "configmaps", ""),
    (
        "",
        "PersistentVolumeClaim",
        "",
        "persistentvolumeclaims",
        "",
    ),
    (
        "kustomize.toolkit.fluxcd.io",
        "Kustomization",
        "kustomize.toolkit.fluxcd.io",
        "kustomizations",
        "",
    ),
    (
        "coordination.k8s.io",
        "Lease",
        "coordination.k8s.io",
        "leases",
        "",
    ),
    ("", "Event", "", "events", ""),
    ("", "Namespace", "", "namespaces", ""),
    ("", "Namespace", "", "namespaces", "finalize"),
];
const NAMESPACES: &[&str] = &[
    "prod-a",
    "prod-sandbox",
    "payments",
    "flux-system",
    "argocd",
    "team-a",
    "default",
];
const USERS: &[(&str, &[&str])] = &[
    ("bob", &["system:authenticated"]),
    ("alice", &["sre-oncall", "system:authenticated"]),
    (
        "system:serviceaccount:flux-system:kustomize-controller",
        &["system:serviceaccounts"],
    ),
    (
        "system:serviceaccount:kube-system:horizontal-pod-autoscaler",
        &["system:serviceaccounts"],
    ),
];

/// What one side of a write carries that some rule reads: a window's label (open, expired or
/// beyond maxDuration) and reason, a suspension (field or annotation), the mark that allows a
/// deletion, and a spec value.
#[derive(Clone, Debug)]
struct Side {
    window: Option<&'static str>,
    reason: bool,
    suspend: bool,
    reconcile_disabled: bool,
    allow_deletion: bool,
    replicas: u8,
}

fn side() -> impl Strategy<Value = Side> {
    (
        option::of(select(
            &["20261130T1000Z", "20261130T0800Z", "20271130T1000Z"][..],
        )),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        0u8..3,
    )
        .prop_map(
            |(window, reason, suspend, reconcile_disabled, allow_deletion, replicas)| Side {
                window,
                reason,
                suspend,
                reconcile_disabled,
                allow_deletion,
                replicas,
            },
        )
}

#[derive(Clone, Debug)]
struct Write {
    operation: &'static str,
    write: (
        &'static str,
        &'static str,
        &'static str,
        &'static str,
        &'static str,
    ),
    namespace: &'static str,
    namespace_labels: (bool, bool),
    user: (&'static str, &'static [&'static str]),
    field_manager: Option<&'static str>,
    old: Side,
    new: Side,
    discovered: bool,
}

fn write() -> impl Strategy<Value = Write> {
    (
        select(&["CREATE", "UPDATE", "DELETE", "CONNECT"][..]),
        select(WRITES),
        select(NAMESPACES),
        (any::<bool>(), any::<bool>()),
        select(USERS),
        option::of(select(&["kubectl-edit", "kustomize-controller"][..])),
        side(),
        side(),
        any::<bool>(),
    )
        .prop_map(
            |(
                operation,
                write,
                namespace,
                namespace_labels,
                user,
                field_manager,
                old,
                new,
                discovered,
            )| Write {
                operation,
                write,
                namespace,
                namespace_labels,
                user,
                field_manager,
                old,
                new,
                discovered,
            },
        )
}

impl Write {
    fn is_namespace_object(&self) -> bool {
        self.write.1 == "Namespace"
    }

    fn object(&self, side: &Side) -> Value {
        let (group, kind, ..) = self.write;
        let api_version = if group.is_empty() {
            "v1".to_owned()
        } else {
            format!("{group}/v1")
        };
        let mut labels = Map::new();
        if let Some(expiry) = side.window {
            labels.insert("driftgate.dev/break-glass".into(), json!(expiry));
        }
        let mut annotations = Map::new();
        if side.reason {
            annotations.insert(
                "driftgate.dev/break-glass-reason".into(),
                json!("INC-7: hotfix"),
            );
        }
        if side.reconcile_disabled {
            annotations.insert(
                "kustomize.toolkit.fluxcd.io/reconcile".into(),
                json!("disabled"),
            );
        }
        if side.allow_deletion {
            annotations.insert("driftgate.dev/allow-deletion".into(), json!("true"));
        }
        let mut metadata = json!({
            "name": self.name(), "uid": "u-1", "resourceVersion": "7",
            "labels": labels, "annotations": annotations,
        });
        if !self.is_namespace_object() {
            metadata["namespace"] = json!(self.namespace);
        }
        json!({
            "apiVersion": api_version, "kind": kind, "metadata": metadata,
            "spec": {"suspend": side.suspend, "replicas": side.replicas},
        })
    }

    fn name(&self) -> &'static str {
        if self.is_namespace_object() {
            self.namespace
        } else {
            "api"
        }
    }

    /// The review as the API server sends it; `with_objects: false` leaves out its objects,
    /// as the envelope-first path does for a write no policy may guard.
    fn review(&self, with_objects: bool) -> kube::core::admission::AdmissionRequest<DynamicObject> {
        let (group, kind, resource_group, resource, subresource) = self.write;
        let (old, new) = match self.operation {
            _ if !with_objects => (None, None),
            "CREATE" => (None, Some(self.object(&self.new))),
            "UPDATE" => (Some(self.object(&self.old)), Some(self.object(&self.new))),
            "DELETE" => (Some(self.object(&self.old)), None),
            _ => (None, None),
        };
        let mut options = json!({"apiVersion": "meta.k8s.io/v1", "kind": "UpdateOptions"});
        if let Some(fm) = self.field_manager {
            options["fieldManager"] = json!(fm);
        }
        let mut request = json!({
            "uid": "e0f1", "kind": {"group": group, "version": "v1", "kind": kind},
            "resource": {"group": resource_group, "version": "v1", "resource": resource},
            // The API server names a Namespace object's own namespace.
            "name": self.name(), "namespace": self.namespace, "operation": self.operation,
            "userInfo": {"username": self.user.0, "groups": self.user.1},
            "object": new, "oldObject": old, "dryRun": false, "options": options,
        });
        if !subresource.is_empty() {
            request["subResource"] = json!(subresource);
        }
        let review = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request});
        driftgate::review::parse_review(review.to_string().as_bytes())
            .expect("a generated review parses")
    }

    /// The Namespace as the cache holds it, labelled for a selector or a namespace-wide window.
    fn namespace_meta(&self) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        let mut labels = BTreeMap::from([(
            "kubernetes.io/metadata.name".to_owned(),
            self.namespace.to_owned(),
        )]);
        if self.namespace_labels.0 {
            labels.insert("gitops".into(), "enforced".into());
        }
        if self.namespace_labels.1 {
            labels.insert("driftgate.dev/break-glass".into(), "20261130T1000Z".into());
        }
        k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some(self.namespace.to_owned()),
            labels: Some(labels),
            ..Default::default()
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    /// Issue 24: a namespace the blast-radius keeper leaves out of the gate webhook is one
    /// where no rule of any policy judges: every review there is OutOfScope, and the
    /// envelope-first path does not even read its objects. And where the envelope-first path
    /// does not read them, the decision without them is the decision with them.
    #[test]
    fn no_rule_judges_where_the_keeper_leaves_the_webhook_out(
        (text, policies) in policy_set(),
        write in write(),
    ) {
        use driftgate::decision::{DecisionInput, DiscoveredResource, Rule, decide, may_guard};
        let now: Timestamp = "2026-11-30T09:00:00Z".parse().unwrap();
        let meta = write.namespace_meta();
        let discovered = DiscoveredResource {
            kind: if write.write.3 == "deployments" { "Deployment" } else { write.write.1 }.to_owned(),
            has_status: true,
        };
        // Every policy has deleted a lot lately: a controllerLimit applies wherever it is judged.
        let recent: driftgate::deletions::RecentDeletes = policies
            .policies()
            .iter()
            .map(|p| (p.name.clone(), vec![now; 5]))
            .collect();
        let decide_review = |request: &kube::core::admission::AdmissionRequest<DynamicObject>| {
            let facts = driftgate::request::RequestFacts::new(request);
            let input = DecisionInput {
                request: &facts,
                resource: write.discovered.then_some(&discovered),
                namespace: Some(&meta),
                parent: None,
                recent_deletes: Some(&recent),
                now,
                silence: None,
            };
            decide(&policies, &input)
        };
        let request = write.review(true);
        let decision = decide_review(&request);
        let envelope_guards = may_guard(&policies, &request, Some(&meta));
        let excluded = !driftgate::blast_radius::unjudged_namespaces(
            &policies,
            [(write.namespace, meta.labels.as_ref())],
        )
        .is_empty();
        if excluded {
            prop_assert!(
                decision.allowed && decision.record.rule == Rule::OutOfScope
                    && decision.record.verdicts.is_empty(),
                "the keeper excludes {} but the decision is {:?} {:?}\n{}",
                write.namespace, decision.record.rule, decision.message, text
            );
            prop_assert!(!envelope_guards, "the keeper excludes {} but may_guard reads the review\n{}", write.namespace, text);
        }
        if !envelope_guards {
            let unread = decide_review(&write.review(false));
            let outcome = |d: &driftgate::decision::Decision| {
                d.record.verdicts.iter().map(|v| (v.policy.clone(), v.rule, v.allowed)).collect::<Vec<_>>()
            };
            prop_assert_eq!(
                outcome(&unread),
                outcome(&decision),
                "may_guard skips the objects, and the decision without them differs\n{}",
                text
            );
        }
    }
}
