//! The bypass classes of the admission threat model (tests/SECURITY.md), each played against the
//! real API server with the chart's webhook configuration: what the API server answered, what
//! driftgate was sent, and the object's state afterwards.

use driftgate::timefmt::format_expiry;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{DeleteParams, ListParams};
use serde_json::{Value, json};

use crate::harness::{
    ADMIN, ALICE, BOB, Driftgate, FLUX, Identity, control_plane, driftgate_cli,
    install_crypto_provider, repo_path, shared, webhook_configuration,
};

use super::{
    IMAGE, assert_denied, flux_apply, get_json, kubectl, kubectl_edit, namespace_with_api, records,
    show,
};

/// An engineer whose only rights are the Role each test gives him in its namespace: unlike bob,
/// whose wildcard role in the core group also grants `impersonate` and every `*/status`.
const DAVE: Identity = Identity {
    user: "dave",
    groups: &[],
};

const LABEL: &str = "driftgate.dev/break-glass";
/// The label of prod-b3's ConfigMaps from Git, as YAML (`key: value`).
const FROM_GIT: &str = "from-git: b3";

/// A label value for a window that ends `minutes` from now.
fn expiry_in(minutes: i64) -> String {
    format_expiry(
        Timestamp::now()
            .checked_add(SignedDuration::from_mins(minutes))
            .expect("a near expiry"),
    )
}

/// How many reviews of `name` in `namespace` by `user` the shared driftgate logged: one log line
/// per review, so none means the API server never sent one.
fn reviews_of(namespace: &str, name: &str, user: &str) -> usize {
    let needle = format!("namespace={namespace} name={name} user={user} ");
    shared()
        .log_tail(usize::MAX)
        .lines()
        .filter(|l| l.contains(&needle))
        .count()
}

fn reviewed(namespace: &str, name: &str, user: &str) -> bool {
    reviews_of(namespace, name, user) > 0
}

/// A Role (and its binding to dave) in `namespace` with these rules, as Flux would apply it.
fn role_for_dave(namespace: &str, rules: &str) -> String {
    format!(
        "apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: dave, namespace: {namespace}}}
rules:
{rules}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: dave, namespace: {namespace}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: dave}}
subjects:
  - {{apiGroup: rbac.authorization.k8s.io, kind: User, name: dave}}
"
    )
}

fn service(namespace: &str) -> String {
    format!(
        "apiVersion: v1
kind: Service
metadata: {{name: api, namespace: {namespace}}}
spec:
  selector: {{app: api}}
  ports: [{{port: 80}}]
"
    )
}

#[tokio::test]
async fn status_writes_cannot_change_spec_and_their_label_changes_are_judged_as_the_object() {
    install_crypto_provider();
    shared();
    let ns = "prod-b1";
    show(flux_apply(&format!(
        "{}---\n{}",
        namespace_with_api(ns),
        service(ns)
    )))
    .ok();

    // Through deployments/status the API server drops spec and label changes, so the
    // matchCondition does not even send the write: bob's status write changes only status.
    // (Annotations, which the Deployment status strategy keeps, are sent: subresources.rs.)
    let status = kubectl(
        BOB,
        &[
            "patch",
            "deployment/api",
            "-n",
            ns,
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"spec":{"replicas":9,"template":{"spec":{"containers":[{"name":"api","image":"evil:1"}]}}},"metadata":{"labels":{"tier":"bob"}},"status":{"observedGeneration":7}}"#,
            "-o",
            "json",
        ],
    )
    .ok();
    assert!(!status.stderr.contains("Warning"), "{}", status.stderr);
    // The object as bob's write stored it: the deployment controller rewrites the status soon
    // after, so the status bob wrote is read from the response, not from a later GET.
    let stored: Value = serde_json::from_str(&status.stdout).expect("kubectl prints JSON");
    assert_eq!(stored["status"]["observedGeneration"], 7, "{stored}");
    for live in [stored, get_json("deployment/api", ns)] {
        assert_eq!(live["spec"]["replicas"], 2);
        assert_eq!(
            live["spec"]["template"]["spec"]["containers"][0]["image"],
            IMAGE
        );
        assert!(live["metadata"]["labels"]["tier"].is_null(), "{live}");
    }
    assert!(
        !reviewed(ns, "api", "bob"),
        "a routine status write was sent"
    );

    // Through services/status the API server keeps labels: the break-glass label set there
    // would open a window (or hold Flux off) unseen. It is sent, and judged as the Service's own
    // write: bob may not open windows.
    let window = expiry_in(60);
    let label_patch = format!(r#"{{"metadata":{{"labels":{{"{LABEL}":"{window}"}}}}}}"#);
    let refused = kubectl(
        BOB,
        &[
            "patch",
            "service/api",
            "-n",
            ns,
            "--subresource=status",
            "--type=merge",
            "-p",
            &label_patch,
        ],
    );
    assert_denied(
        &refused,
        "bob may not change the break-glass window on Service prod-b1/api (through status): only group sre-oncall may open, extend or amend a window",
        "BreakGlassRefused",
    );
    // Any other label through status: as for the Service itself.
    let relabel = kubectl(
        BOB,
        &[
            "patch",
            "service/api",
            "-n",
            ns,
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"metadata":{"labels":{"tier":"bob"}}}"#,
        ],
    );
    assert_denied(
        &relabel,
        "bob may not update Service prod-b1/api (through status): only its controllers (flux, kubernetes) write here",
        "NotPermitted",
    );
    let live = get_json("service/api", ns);
    assert!(live["metadata"]["labels"].is_null(), "{live}");

    // The same on the Namespace: a namespace-wide window through namespaces/status.
    let namespace_window = kubectl(
        BOB,
        &[
            "patch",
            "namespace",
            ns,
            "--subresource=status",
            "--type=merge",
            "-p",
            &label_patch,
        ],
    );
    assert_denied(
        &namespace_window,
        "bob may not change the break-glass window on Namespace prod-b1 (through status):",
        "BreakGlassRefused",
    );
    let live = get_json("namespace/prod-b1", ns);
    assert!(live["metadata"]["labels"][LABEL].is_null(), "{live}");
    // ... so Flux is not held off.
    show(flux_apply(&service(ns))).ok();

    // A status write that leaves the labels alone is not sent at all.
    let bobs_reviews = reviews_of(ns, "api", "bob");
    kubectl(
        BOB,
        &[
            "patch",
            "service/api",
            "-n",
            ns,
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"conditions":[{"type":"Probed","status":"True","reason":"ByBob","message":"status only","lastTransitionTime":"2026-11-30T09:00:00Z"}]}}"#,
        ],
    )
    .ok();
    assert_eq!(
        get_json("service/api", ns)["status"]["conditions"][0]["reason"],
        "ByBob"
    );
    assert_eq!(reviews_of(ns, "api", "bob"), bobs_reviews);
}

#[tokio::test]
async fn kubectl_debug_adds_an_ephemeral_container_that_only_rbac_controls() {
    install_crypto_provider();
    shared();
    let ns = "prod-b2";
    // A Pod needs its namespace's `default` ServiceAccount (the ServiceAccount admission plugin):
    // Flux's next reconciliation would apply it once kube-controller-manager has made it.
    show(flux_apply(&format!(
        "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {ns}}}\n"
    )))
    .ok();
    super::eventually("the namespace's default ServiceAccount", || async {
        control_plane().namespace_equipped(ns).then_some(())
    })
    .await;
    show(flux_apply(&format!(
        "apiVersion: v1
kind: Pod
metadata: {{name: api-0, namespace: {ns}, labels: {{app: api}}}}
spec:
  containers: [{{name: api, image: {IMAGE}}}]
---
{}",
        role_for_dave(
            ns,
            "  - {apiGroups: [\"\"], resources: [pods], verbs: [get, list, watch]}"
        )
    )))
    .ok();

    // dave may read Pods but has no pods/ephemeralcontainers: RBAC refuses, nothing is added.
    let refused = kubectl(
        DAVE,
        &[
            "debug",
            "pod/api-0",
            "-n",
            ns,
            "--image=busybox",
            "--target=api",
        ],
    )
    .failed();
    assert!(
        refused.stderr.contains("pods \"api-0\" is forbidden")
            && refused
                .stderr
                .contains("cannot patch resource \"pods/ephemeralcontainers\""),
        "{}",
        refused.stderr
    );
    assert!(get_json("pod/api-0", ns)["spec"]["ephemeralContainers"].is_null());

    // bob may: the API server adds the container. The chart sends the write (it changes the
    // Pod's spec), and it is out of scope, because the example policy leaves Pods to RBAC. Like
    // `kubectl exec` (CONNECT), this is access to a running Pod, not a change to what Git
    // declares.
    kubectl(
        BOB,
        &[
            "debug",
            "pod/api-0",
            "-n",
            ns,
            "--image=busybox",
            "--target=api",
        ],
    )
    .ok();
    let containers = get_json("pod/api-0", ns)["spec"]["ephemeralContainers"].clone();
    assert_eq!(containers[0]["image"], "busybox", "{containers}");
    assert_eq!(containers[0]["targetContainerName"], "api", "{containers}");
    assert!(
        shared()
            .log_tail(usize::MAX)
            .lines()
            .any(|l| l.contains("namespace=prod-b2 name=api-0 user=bob")
                && l.contains("rule=\"OutOfScope\"")),
        "no out-of-scope review of the debug container"
    );

    // `kubectl debug --copy-to` creates a new Pod instead: sent, and out of scope, because the
    // example policy leaves Pods (run-time objects of the ReplicaSet controller) to RBAC.
    kubectl(
        BOB,
        &[
            "debug",
            "pod/api-0",
            "-n",
            ns,
            "--image=busybox",
            "--copy-to=api-debug",
        ],
    )
    .ok();
    assert_eq!(
        get_json("pod/api-debug", ns)["spec"]["containers"][1]["image"],
        "busybox"
    );
    assert!(
        shared().log_tail(usize::MAX).lines().any(|l| l.contains(
            "operation=CREATE kind=Pod subresource= namespace=prod-b2 name=api-debug user=bob"
        ) && l.contains("rule=\"OutOfScope\"")),
        "no out-of-scope review of the copied Pod"
    );
}

#[tokio::test]
async fn a_collection_delete_stops_at_its_first_refusal_and_is_recorded_per_object_under_a_window()
{
    install_crypto_provider();
    shared();
    let ns = "prod-b3";
    let mut manifest = format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: {ns}}}\n");
    for name in ["one", "two", "three"] {
        manifest.push_str(&format!(
            "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: {ns}, labels: {{{FROM_GIT}}}}}\ndata: {{key: value}}\n"
        ));
    }
    show(flux_apply(&manifest)).ok();
    // The namespace also holds kube-controller-manager's kube-root-ca.crt: the test's collection
    // is the ConfigMaps from Git.
    let from_git = || ListParams::default().labels(&FROM_GIT.replace(": ", "="));
    let names = || async {
        let api: Api<ConfigMap> = Api::namespaced(control_plane().client(FLUX).await, ns);
        let mut names: Vec<String> = api
            .list(&from_git())
            .await
            .expect("Flux lists ConfigMaps")
            .items
            .into_iter()
            .filter_map(|c| c.metadata.name)
            .collect();
        names.sort();
        names
    };
    assert_eq!(names().await, ["one", "three", "two"]);

    // `kubectl delete --all` lists and deletes one object at a time: each DELETE is refused.
    let all = kubectl(BOB, &["delete", "configmaps", "--all", "-n", ns]).failed();
    for name in ["one", "two", "three"] {
        assert!(
            all.stderr.contains(&format!(
                "denied the request: bob may not delete ConfigMap prod-b3/{name}:"
            )),
            "{}",
            all.stderr
        );
    }
    assert_eq!(names().await, ["one", "three", "two"]);

    // A real DELETE of the collection: the API server reviews the objects one at a time, each
    // with an empty name and the object in oldObject (driftgate takes the name from there), and
    // stops at the first refusal.
    let bobs_deletes = || {
        shared()
            .log_tail(usize::MAX)
            .lines()
            .filter(|l| {
                l.contains("operation=DELETE kind=ConfigMap subresource= namespace=prod-b3 ")
                    && l.contains(" user=bob ")
            })
            .count()
    };
    let before = bobs_deletes();
    let api: Api<ConfigMap> = Api::namespaced(control_plane().client(BOB).await, ns);
    let refused = api
        .delete_collection(&DeleteParams::default(), &from_git())
        .await
        .expect_err("the collection DELETE is refused");
    match refused {
        kube::Error::Api(status) => {
            assert_eq!(status.code, 403, "{status:?}");
            assert!(
                status.message.starts_with(
                    "admission webhook \"gate.driftgate.dev\" denied the request: bob may not delete ConfigMap prod-b3/"
                ) && !status.message.contains("prod-b3/:")
                    && status.message.contains("(policy \"production\", rule NotPermitted)"),
                "{status:?}"
            );
        }
        other => panic!("the collection DELETE failed otherwise: {other}"),
    }
    assert_eq!(
        bobs_deletes(),
        before + 1,
        "one review, then the API server stopped"
    );
    assert_eq!(names().await, ["one", "three", "two"]);

    // And the namespace itself.
    let namespace = kubectl(BOB, &["delete", "namespace", ns, "--wait=false"]);
    assert_denied(
        &namespace,
        "bob may not delete Namespace prod-b3: the policy protects every Namespace from deletion",
        "DeletionProtected",
    );
    assert_eq!(
        get_json("namespace/prod-b3", ns)["status"]["phase"],
        "Active"
    );

    // Only a namespace-wide window can cover a collection: alice opens one and deletes it.
    show(driftgate_cli(
        ALICE,
        &[
            "break-glass",
            "open",
            &format!("namespace/{ns}"),
            "--for",
            "30m",
            "--reason",
            "INC-4740: stale configuration everywhere",
        ],
    ))
    .ok();
    // driftgate reads Namespaces from a watch: wait until it has seen the window.
    super::eventually("driftgate to see the namespace window", || async {
        control_plane()
            .kubectl(
                ALICE,
                &["delete", "configmap/one", "-n", ns, "--dry-run=server"],
            )
            .success()
            .then_some(())
    })
    .await;
    let api: Api<ConfigMap> = Api::namespaced(control_plane().client(ALICE).await, ns);
    api.delete_collection(&DeleteParams::default(), &from_git())
        .await
        .expect("alice's collection DELETE under the namespace window is admitted");
    let left = names().await;
    assert!(left.is_empty(), "{left:?}");
    // Recorded before each deletion was admitted: one change per object.
    let recorded = records(ns).await;
    assert_eq!(recorded.len(), 1, "{recorded:?}");
    let mut deleted: Vec<String> = recorded[0]
        .spec
        .changes
        .iter()
        .map(|c| {
            let name = c.object.as_ref().map_or("", |o| o.name.as_str());
            format!("{} {name}", c.operation)
        })
        .collect();
    deleted.sort();
    assert_eq!(
        deleted,
        ["DELETE one", "DELETE three", "DELETE two"],
        "{recorded:?}"
    );
}

#[tokio::test]
async fn an_object_being_deleted_stays_guarded_and_its_finalizer_goes_under_a_window() {
    install_crypto_provider();
    shared();
    let ns = "prod-b4";
    show(flux_apply(&format!(
        "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {ns}}}\n---
apiVersion: v1
kind: ConfigMap
metadata: {{name: held, namespace: {ns}, finalizers: [example.com/cleanup]}}
data: {{key: value}}
"
    )))
    .ok();
    // Git no longer has it: Flux prunes it, and the finalizer keeps it, being deleted.
    show(control_plane().kubectl(
        FLUX,
        &["delete", "configmap/held", "-n", ns, "--wait=false"],
    ))
    .ok();
    let live = get_json("configmap/held", ns);
    assert!(live["metadata"]["deletionTimestamp"].is_string(), "{live}");

    // Writes to an object being deleted are writes: bob's are refused, the finalizer's removal
    // (which would let the API server delete it without the cleanup) among them.
    let finalizer = kubectl(
        BOB,
        &[
            "patch",
            "configmap/held",
            "-n",
            ns,
            "--type=json",
            "-p",
            r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
        ],
    );
    assert_denied(
        &finalizer,
        "bob may not update ConfigMap prod-b4/held:",
        "NotPermitted",
    );
    let data = kubectl(
        BOB,
        &[
            "patch",
            "configmap/held",
            "-n",
            ns,
            "--type=merge",
            "-p",
            r#"{"data":{"key":"bob"}}"#,
        ],
    );
    assert_denied(
        &data,
        "bob may not update ConfigMap prod-b4/held:",
        "NotPermitted",
    );
    // A second DELETE of an object already being deleted is reviewed too.
    let again = kubectl(BOB, &["delete", "configmap/held", "-n", ns, "--wait=false"]);
    assert_denied(
        &again,
        "bob may not delete ConfigMap prod-b4/held:",
        "NotPermitted",
    );
    let live = get_json("configmap/held", ns);
    assert_eq!(live["metadata"]["finalizers"][0], "example.com/cleanup");
    assert_eq!(live["data"]["key"], "value");

    // The on-call engineer opens a window on the dying object and removes the finalizer: admitted,
    // recorded, and the API server completes the deletion.
    show(driftgate_cli(
        ALICE,
        &[
            "break-glass",
            "open",
            "configmap/held",
            "-n",
            ns,
            "--for",
            "30m",
            "--reason",
            "INC-4720: cleanup controller gone, held stuck",
        ],
    ))
    .ok();
    let removed = kubectl(
        ALICE,
        &[
            "patch",
            "configmap/held",
            "-n",
            ns,
            "--type=json",
            "-p",
            r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
        ],
    )
    .ok();
    assert!(
        removed.stderr.contains("Warning: driftgate: alice changed ConfigMap prod-b4/held under the break-glass window on the object"),
        "{}",
        removed.stderr
    );
    let gone = control_plane().kubectl(FLUX, &["get", "configmap/held", "-n", ns]);
    assert!(gone.stderr.contains("NotFound"), "{gone:?}");
    let recorded = records(ns).await;
    assert_eq!(recorded.len(), 1, "{recorded:?}");
    let fields: Vec<&str> = recorded[0].spec.changes[0]
        .fields
        .iter()
        .map(|f| f.path.as_str())
        .collect();
    assert_eq!(fields, ["metadata.finalizers"]);
}

#[tokio::test]
async fn an_old_api_version_of_the_same_kind_gets_the_same_decision() {
    install_crypto_provider();
    shared();
    let ns = "prod-b5";
    show(flux_apply(&format!(
        "{}---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {{name: api, namespace: {ns}}}
spec:
  scaleTargetRef: {{apiVersion: apps/v1, kind: Deployment, name: api}}
  minReplicas: 2
  maxReplicas: 5
  metrics:
    - type: Resource
      resource: {{name: cpu, target: {{type: Utilization, averageUtilization: 80}}}}
",
        namespace_with_api(ns)
    )))
    .ok();

    let patch = r#"{"spec":{"maxReplicas":50}}"#;
    for resource in [
        "horizontalpodautoscalers.v2.autoscaling/api",
        "horizontalpodautoscalers.v1.autoscaling/api",
    ] {
        let refused = kubectl(
            BOB,
            &["patch", resource, "-n", ns, "--type=merge", "-p", patch],
        );
        assert_denied(
            &refused,
            "bob may not update HorizontalPodAutoscaler prod-b5/api:",
            "NotPermitted",
        );
    }
    // v1 carries the CPU target in its own field: the same object, the same refusal.
    let v1_only = kubectl(
        BOB,
        &[
            "patch",
            "horizontalpodautoscalers.v1.autoscaling/api",
            "-n",
            ns,
            "--type=merge",
            "-p",
            r#"{"spec":{"targetCPUUtilizationPercentage":10}}"#,
        ],
    );
    assert_denied(
        &v1_only,
        "bob may not update HorizontalPodAutoscaler prod-b5/api:",
        "NotPermitted",
    );
    let live = get_json("horizontalpodautoscalers.v2.autoscaling/api", ns);
    assert_eq!(live["spec"]["maxReplicas"], 5);
    assert_eq!(
        live["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"],
        80
    );
    // Each of bob's three writes was reviewed (the chart's rule names every version).
    assert_eq!(reviews_of(ns, "api", "bob"), 3);

    // A rule narrowed to one version (as a values file may narrow the chart's rules): with
    // `matchPolicy: Exact` a write through another version is never sent; with the chart's
    // `Equivalent` it is, converted. A driftgate of its own counts what this configuration sends.
    let narrowed = Driftgate::start("b5", &repo_path("policies/example.yaml"), &[]);
    let mut configuration = webhook_configuration(
        "driftgate-e2e-b5",
        &narrowed.webhook_url(),
        narrowed.ca_pem(),
    );
    let webhook = &mut configuration["webhooks"][0];
    webhook["rules"] = json!([{
        "apiGroups": ["autoscaling"], "apiVersions": ["v2"], "operations": ["UPDATE"],
        "resources": ["horizontalpodautoscalers"], "scope": "Namespaced",
    }]);
    webhook["namespaceSelector"]["matchExpressions"]
        .as_array_mut()
        .expect("the chart's namespaceSelector has matchExpressions")
        .push(json!({"key": "kubernetes.io/metadata.name", "operator": "In", "values": [ns]}));
    assert_eq!(webhook["matchPolicy"], "Equivalent");
    webhook["matchPolicy"] = json!("Exact");
    let dry_run = |version: &str| {
        control_plane().kubectl(
            ADMIN,
            &[
                "patch",
                &format!("horizontalpodautoscalers.{version}.autoscaling/api"),
                "-n",
                ns,
                "--dry-run=server",
                "--type=merge",
                "-p",
                r#"{"spec":{"maxReplicas":6}}"#,
            ],
        );
    };
    let bob_patches_through_v1 = || {
        kubectl(
            BOB,
            &[
                "patch",
                "horizontalpodautoscalers.v1.autoscaling/api",
                "-n",
                ns,
                "--type=merge",
                "-p",
                patch,
            ],
        )
    };
    let bob_refused = "bob may not update HorizontalPodAutoscaler prod-b5/api:";
    narrowed.register_with_probe(configuration.clone(), || dry_run("v2"));
    let before = narrowed.reviews();
    let through_v1 = bob_patches_through_v1();
    // Refused by the shared webhook, which names every version; never sent to this one.
    assert_denied(&through_v1, bob_refused, "NotPermitted");
    assert_eq!(
        narrowed.reviews(),
        before,
        "Exact sent a v1 write to a v2 rule"
    );
    // The chart's Equivalent: the same v1 write now reaches the v2 rule.
    configuration["webhooks"][0]["matchPolicy"] = json!("Equivalent");
    narrowed.register_with_probe(configuration, || dry_run("v1"));
    let before = narrowed.reviews();
    let through_v1 = bob_patches_through_v1();
    assert_denied(&through_v1, bob_refused, "NotPermitted");
    assert_eq!(narrowed.reviews(), before + 1.0);
    assert_eq!(
        get_json("horizontalpodautoscalers.v2.autoscaling/api", ns)["spec"]["maxReplicas"],
        5
    );
}

#[tokio::test]
async fn impersonating_the_controller_needs_impersonate_rights_and_then_passes_as_it() {
    install_crypto_provider();
    shared();
    let ns = "prod-b6";
    show(flux_apply(&format!(
        "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {ns}}}\n---
apiVersion: v1
kind: ConfigMap
metadata: {{name: app, namespace: {ns}}}
data: {{key: value}}
---
{}",
        role_for_dave(
            ns,
            "  - {apiGroups: [\"\"], resources: [configmaps], verbs: [get, list, patch, update, delete]}"
        )
    )))
    .ok();
    let as_flux = format!("--as={}", FLUX.user);
    let patch = |who: Identity, value: &str, extra: &[&str]| {
        let body = format!(r#"{{"data":{{"key":"{value}"}}}}"#);
        let mut args = vec![
            "patch",
            "configmap/app",
            "-n",
            ns,
            "--type=merge",
            "-p",
            &body,
            &as_flux,
        ];
        args.extend_from_slice(extra);
        kubectl(who, &args)
    };

    // Without `impersonate`, RBAC refuses before admission: driftgate never sees it.
    let flux_reviews = reviews_of(ns, "app", FLUX.user);
    let refused = patch(DAVE, "dave", &["--field-manager=kustomize-controller"]).failed();
    assert!(
        refused.stderr.contains(
            "User \"dave\" cannot impersonate resource \"serviceaccounts\" in API group \"\" in the namespace \"flux-system\""
        ),
        "{}",
        refused.stderr
    );
    assert_eq!(
        reviews_of(ns, "app", FLUX.user),
        flux_reviews,
        "a refused impersonation reached driftgate"
    );

    // bob's wildcard role in the core group grants `impersonate` too. As Flux, with kubectl's
    // field manager, he is not the controller's write (fieldManagers) ...
    let own_manager = patch(BOB, "bob-1", &[]);
    assert_denied(
        &own_manager,
        "system:serviceaccount:flux-system:kustomize-controller may not update ConfigMap prod-b6/app:",
        "NotPermitted",
    );
    // ... but with Flux's field manager he is, in everything the API server tells driftgate.
    patch(BOB, "bob-2", &["--field-manager=kustomize-controller"]).ok();
    assert_eq!(get_json("configmap/app", ns)["data"]["key"], "bob-2");

    // What the API server says the user is (the userInfo it sends to admission): the real
    // controller's client certificate carries a credential id; the impersonated user carries
    // nothing that tells it from the controller but that absence.
    let whoami = |who: Identity, args: &[&str]| -> Value {
        let mut all = vec!["auth", "whoami", "-o", "json"];
        all.extend_from_slice(args);
        let out = kubectl(who, &all).ok();
        serde_json::from_str::<Value>(&out.stdout).expect("whoami prints JSON")["status"]
            ["userInfo"]
            .clone()
    };
    let real = whoami(FLUX, &[]);
    let impersonated = whoami(BOB, &[&as_flux]);
    assert_eq!(real["username"], impersonated["username"]);
    assert_eq!(real["groups"], impersonated["groups"]);
    assert!(
        real["extra"]["authentication.kubernetes.io/credential-id"][0]
            .as_str()
            .is_some_and(|id| id.starts_with("X509SHA256=")),
        "{real}"
    );
    assert!(impersonated["extra"].is_null(), "{impersonated}");
}

#[tokio::test]
async fn the_break_glass_label_opens_nothing_on_create_with_junk_or_far_in_the_future() {
    install_crypto_provider();
    shared();
    let ns = "prod-b7";
    show(flux_apply(&namespace_with_api(ns))).ok();
    let window = expiry_in(60);

    // alice may open windows, but a CREATE that carries the label opens none.
    let create = show(control_plane().kubectl_with_stdin(
        ALICE,
        &["create", "-f", "-"],
        Some(&format!(
            "apiVersion: v1
kind: ConfigMap
metadata:
  name: sneaky
  namespace: {ns}
  labels: {{{LABEL}: \"{window}\"}}
  annotations: {{driftgate.dev/break-glass-reason: \"INC-4730: new config\"}}
data: {{key: value}}
"
        )),
    ));
    assert_denied(
        &create,
        "alice may not create ConfigMap prod-b7/sneaky:",
        "NotPermitted",
    );
    let absent = control_plane().kubectl(FLUX, &["get", "configmap/sneaky", "-n", ns]);
    assert!(absent.stderr.contains("NotFound"), "{absent:?}");

    // Junk around a valid expiry, and a far-future expiry: refused as openings.
    let junk = format!("{LABEL}=x{window}x");
    let refused = kubectl(ALICE, &["label", "deployment/api", "-n", ns, &junk]);
    assert_denied(
        &refused,
        "alice may not change the break-glass window on Deployment prod-b7/api: the label driftgate.dev/break-glass: \"x",
        "BreakGlassRefused",
    );
    assert!(
        refused.stderr.contains("is not an expiry"),
        "{}",
        refused.stderr
    );
    let far = format!("{LABEL}=20991231T0000Z");
    let refused = kubectl(ALICE, &["label", "deployment/api", "-n", ns, &far]);
    assert_denied(
        &refused,
        "alice may not change the break-glass window on Deployment prod-b7/api: the expiry 20991231T0000Z (2099-12-31 00:00 UTC) is more than maxDuration 4h from now",
        "BreakGlassRefused",
    );
    assert!(
        get_json("deployment/api", ns)["metadata"]["labels"][LABEL].is_null(),
        "a label was set"
    );

    // The same labels arriving another way (from Git, through the controller) open nothing either.
    let with_label = |value: &str| {
        namespace_with_api(ns).replace(
            "  name: api\n",
            &format!("  name: api\n  labels: {{{LABEL}: \"{value}\"}}\n  annotations: {{driftgate.dev/break-glass-reason: \"from Git\"}}\n"),
        )
    };
    show(flux_apply(&with_label("20991231T0000Z"))).ok();
    let edit = kubectl_edit(
        ALICE,
        "deployment/api",
        ns,
        "s|payments-api:1.4.2|payments-api:6.6.6|",
    );
    assert_denied(
        &edit,
        "alice may not update Deployment prod-b7/api: its break-glass label 20991231T0000Z expires at 2099-12-31 00:00 UTC, more than the policy's maxDuration of 4h from now",
        "WindowTooLong",
    );
    let junk_value = format!("x{window}x");
    show(flux_apply(&with_label(&junk_value))).ok();
    let edit = kubectl_edit(
        ALICE,
        "deployment/api",
        ns,
        "s|payments-api:1.4.2|payments-api:6.6.6|",
    );
    assert_denied(
        &edit,
        "alice may not update Deployment prod-b7/api: only its controllers (flux, kubernetes) write here",
        "NotPermitted",
    );
    assert!(
        edit.stderr
            .contains("The break-glass label present is ignored:"),
        "{}",
        edit.stderr
    );
    assert_eq!(
        get_json("deployment/api", ns)["spec"]["template"]["spec"]["containers"][0]["image"],
        IMAGE
    );
}
