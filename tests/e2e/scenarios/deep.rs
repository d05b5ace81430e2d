//! Objects nested deeper than serde_json's default recursion limit (128), which Kubernetes
//! accepts (its decoder allows 10,000 levels). A review of one used to be answered HTTP 400, so
//! once bob had written a deep `status` through `/status` (never sent to driftgate), every later
//! write of the object, Flux's apply and delete included, failed "for an unknown reason".

use serde_json::Value;

use crate::harness::{ADMIN, BOB, FLUX, control_plane, install_crypto_provider, shared};

use super::{assert_denied, eventually, flux_apply, kubectl, show};

/// A namespaced custom resource with a status subresource, both free-form.
const CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.e2e.example.com}
spec:
  group: e2e.example.com
  names: {kind: Widget, plural: widgets, singular: widget}
  scope: Namespaced
  versions:
    - name: v1
      served: true
      storage: true
      subresources: {status: {}}
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec: {type: object, x-kubernetes-preserve-unknown-fields: true}
            status: {type: object, x-kubernetes-preserve-unknown-fields: true}
"#;

/// How deep the objects below nest: well past serde_json's limit, as deep as a person might
/// write to break things without hitting the API server's own limits on request size.
const LEVELS: usize = 200;

/// `levels` maps nested in one another, as JSON text.
fn nested(levels: usize) -> String {
    format!("{}1{}", "{\"a\":".repeat(levels), "}".repeat(levels))
}

/// How deeply a JSON value nests (iteratively: the value may be deep).
fn depth(value: &Value) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(value, 0)];
    while let Some((value, level)) = stack.pop() {
        deepest = deepest.max(level);
        match value {
            Value::Object(map) => stack.extend(map.values().map(|v| (v, level + 1))),
            Value::Array(items) => stack.extend(items.iter().map(|v| (v, level + 1))),
            _ => {}
        }
    }
    deepest
}

/// The object as the admin reads it, parsed without serde_json's recursion limit (200 levels
/// fit any stack).
fn get_json(target: &str, namespace: &str) -> Value {
    let out = control_plane()
        .kubectl(ADMIN, &["get", target, "-n", namespace, "-o", "json"])
        .ok();
    let mut reader = serde_json::Deserializer::from_str(&out.stdout);
    reader.disable_recursion_limit();
    serde::Deserialize::deserialize(&mut reader).expect("kubectl prints JSON")
}

fn widget(namespace: &str, name: &str, size: u32) -> String {
    format!(
        "apiVersion: e2e.example.com/v1\nkind: Widget\nmetadata: {{name: {name}, namespace: {namespace}}}\nspec: {{size: {size}}}\n"
    )
}

/// The namespace, and a Role that lets bob write widgets in it, as Flux applies them.
fn namespace_for_bob(namespace: &str) -> String {
    format!(
        "apiVersion: v1
kind: Namespace
metadata: {{name: {namespace}}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: widget-editor, namespace: {namespace}}}
rules:
  - apiGroups: [e2e.example.com]
    resources: [widgets, widgets/status]
    verbs: [\"*\"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: widget-editor, namespace: {namespace}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: widget-editor}}
subjects:
  - {{apiGroup: rbac.authorization.k8s.io, kind: User, name: bob}}
"
    )
}

/// Shared with `backport`, whose custom resource holds keys with brackets.
pub(super) fn install_crd() {
    super::establish_crd(CRD, "widgets.e2e.example.com");
}

/// A deep status written through /status as bob, read back as stored.
fn write_deep_status(namespace: &str, name: &str) {
    let patch = format!("{{\"status\":{}}}", nested(LEVELS));
    kubectl(
        BOB,
        &[
            "patch",
            &format!("widget/{name}"),
            "-n",
            namespace,
            "--subresource=status",
            "--type=merge",
            "-p",
            &patch,
        ],
    )
    .ok();
    let stored = get_json(&format!("widget/{name}"), namespace);
    assert!(
        depth(&stored["status"]) >= LEVELS,
        "the deep status was not stored"
    );
}

#[tokio::test]
async fn a_deep_status_does_not_stop_flux_and_a_deep_write_by_bob_is_refused_with_a_sentence() {
    install_crypto_provider();
    let driftgate = shared();
    install_crd();
    let ns = "prod-d1";
    show(flux_apply(&namespace_for_bob(ns))).ok();
    show(flux_apply(&widget(ns, "w", 1))).ok();
    let invalid_before = driftgate.counter(
        "driftgate_admission_reviews_total",
        &["decision=\"invalid\""],
    );

    // Status writes that leave the labels alone are not sent: this one is stored as written.
    write_deep_status(ns, "w");

    // Flux's next apply carries the deep status in both objects; it is decided, and admitted.
    show(flux_apply(&widget(ns, "w", 2))).ok();
    assert_eq!(get_json("widget/w", ns)["spec"]["size"], 2);

    // Bob's edit of the same object is refused by driftgate's sentence, not "for an unknown
    // reason", and the object is unchanged.
    let edit = kubectl(
        BOB,
        &[
            "patch",
            "widget/w",
            "-n",
            ns,
            "--type=merge",
            "-p",
            r#"{"spec":{"size":3}}"#,
        ],
    );
    assert_denied(
        &edit,
        "bob may not update Widget prod-d1/w: ",
        "NotPermitted",
    );
    assert_eq!(get_json("widget/w", ns)["spec"]["size"], 2);

    // A new object with a deep spec, by bob: refused likewise; it is not created.
    let deep_spec = format!(
        "{{\"apiVersion\":\"e2e.example.com/v1\",\"kind\":\"Widget\",\"metadata\":{{\"name\":\"w2\",\"namespace\":\"{ns}\"}},\"spec\":{}}}",
        nested(LEVELS)
    );
    let create =
        show(control_plane().kubectl_with_stdin(BOB, &["create", "-f", "-"], Some(&deep_spec)));
    assert_denied(
        &create,
        "bob may not create Widget prod-d1/w2: ",
        "NotPermitted",
    );
    let absent = control_plane().kubectl(ADMIN, &["get", "widget/w2", "-n", ns]);
    assert!(!absent.success(), "bob's deep widget was created");

    // Flux deletes the object with its deep status.
    kubectl(FLUX, &["delete", "widget/w", "-n", ns, "--wait=true"]).ok();
    eventually("the widget to be gone", || async {
        (!control_plane()
            .kubectl(ADMIN, &["get", "widget/w", "-n", ns])
            .success())
        .then_some(())
    })
    .await;

    // None of these reviews was answered with an HTTP error.
    let invalid_after = driftgate.counter(
        "driftgate_admission_reviews_total",
        &["decision=\"invalid\""],
    );
    assert_eq!(
        invalid_after, invalid_before,
        "a review was refused as invalid"
    );
}

#[tokio::test]
async fn a_deep_object_where_no_policy_guards_is_admitted_without_being_read() {
    install_crypto_provider();
    shared();
    install_crd();
    let ns = "dev-d1";
    show(flux_apply(&namespace_for_bob(ns))).ok();
    let deep_spec = format!(
        "{{\"apiVersion\":\"e2e.example.com/v1\",\"kind\":\"Widget\",\"metadata\":{{\"name\":\"w\",\"namespace\":\"{ns}\"}},\"spec\":{}}}",
        nested(LEVELS)
    );
    show(control_plane().kubectl_with_stdin(BOB, &["create", "-f", "-"], Some(&deep_spec))).ok();
    write_deep_status(ns, "w");
    kubectl(
        BOB,
        &[
            "patch",
            "widget/w",
            "-n",
            ns,
            "--type=merge",
            "-p",
            r#"{"metadata":{"labels":{"x":"y"}}}"#,
        ],
    )
    .ok();
    kubectl(BOB, &["delete", "widget/w", "-n", ns, "--wait=true"]).ok();
}
