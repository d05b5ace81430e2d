//! Writes whose effect their path does not show, played against the real API server with the
//! chart's webhook and the example policy (issue 10, tests/SECURITY.md): forged ownership in
//! `managedFields`, `scale` of a custom resource, `.status` of a custom resource without a
//! status subresource, a hint that must lead to the right object, the hint's placeholder
//! reason, escaped request text, and the clock tolerance at `maxDuration`. Each refusal is read
//! back: the object is unchanged.

use driftgate::timefmt::format_expiry;
use jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};

use crate::harness::{
    ADMIN, ALICE, BOB, Driftgate, FLUX, Identity, KubectlOutput, control_plane, driftgate_cli,
    install_crypto_provider, shared, webhook_configuration,
};

use super::{assert_denied, eventually, flux_apply, get_json, kubectl, namespace_with_api, show};

const LABEL: &str = "driftgate.dev/break-glass";
const REASON: &str = "driftgate.dev/break-glass-reason";

/// A label value for a window that ends `seconds` from now.
fn expiry_in_secs(seconds: i64) -> String {
    format_expiry(
        Timestamp::now()
            .checked_add(SignedDuration::from_secs(seconds))
            .expect("a near expiry"),
    )
}

/// The merge patch that sets the break-glass label to `expiry` and the reason to `reason`.
fn window_patch(expiry: &str, reason: &str) -> String {
    json!({"metadata": {"labels": {LABEL: expiry}, "annotations": {REASON: reason}}}).to_string()
}

/// `kubectl patch TARGET -n NAMESPACE --type=merge -p PATCH` as `who`, shown.
fn merge_patch(who: Identity, target: &str, namespace: &str, patch: &str) -> KubectlOutput {
    kubectl(
        who,
        &[
            "patch",
            target,
            "-n",
            namespace,
            "--type=merge",
            "-p",
            patch,
        ],
    )
}

/// The object as the admin reads it, managedFields included (kubectl hides them by default).
fn get_owned(target: &str, namespace: &str) -> Value {
    let out = control_plane()
        .kubectl(
            ADMIN,
            &[
                "get",
                target,
                "-n",
                namespace,
                "-o",
                "json",
                "--show-managed-fields",
            ],
        )
        .ok();
    serde_json::from_str(&out.stdout).expect("kubectl prints JSON")
}

fn managers(object: &Value) -> Vec<String> {
    object["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            format!(
                "{}/{}",
                e["manager"].as_str().unwrap_or(""),
                e["operation"].as_str().unwrap_or("")
            )
        })
        .collect()
}

/// Clients may write managedFields, and the API server keeps what they write: bob handing a
/// field to Flux's Apply entry, or renaming that entry, is refused; the API server's own
/// bookkeeping (bob's server-side apply of what is there, Flux's dry run) is not.
#[tokio::test]
async fn forged_ownership_is_refused_and_bookkeeping_is_not() {
    install_crypto_provider();
    shared();
    let ns = "prod-m1";
    show(flux_apply(&namespace_with_api(ns))).ok();
    // Read once the deployment controller's status writes have settled: a forged list built
    // from a read its status entry moved after would also rewrite that entry (refused too, but
    // for another reason than the one under test).
    let mut before = get_owned("deployment/api", ns);
    for _ in 0..40 {
        std::thread::sleep(std::time::Duration::from_millis(500));
        let again = get_owned("deployment/api", ns);
        if again["metadata"]["managedFields"] == before["metadata"]["managedFields"] {
            break;
        }
        before = again;
    }
    let mut forged = before["metadata"]["managedFields"].clone();
    let flux_entry = forged
        .as_array_mut()
        .expect("managedFields")
        .iter_mut()
        .find(|e| e["manager"] == "kustomize-controller" && e["operation"] == "Apply")
        .expect("Flux's Apply entry");
    flux_entry["fieldsV1"]["f:spec"]["f:paused"] = json!({});
    let patch = json!({"metadata": {"managedFields": forged}}).to_string();
    let refused = merge_patch(BOB, "deployment/api", ns, &patch);
    assert_denied(
        &refused,
        "bob may not update Deployment prod-m1/api: only its controllers (flux, kubernetes) write here",
        "NotPermitted",
    );
    assert!(
        refused.stderr.contains("gained spec.paused") && refused.stderr.contains("field ownership"),
        "{}",
        refused.stderr
    );

    // Renaming Flux's entry would keep its fields alive after Git drops them.
    let mut renamed = before["metadata"]["managedFields"].clone();
    for entry in renamed.as_array_mut().expect("managedFields") {
        if entry["manager"] == "kustomize-controller" {
            entry["manager"] = json!("kustomize-controller-retired");
        }
    }
    let patch = json!({"metadata": {"managedFields": renamed}}).to_string();
    let refused = merge_patch(BOB, "deployment/api", ns, &patch);
    assert_denied(
        &refused,
        "bob may not update Deployment prod-m1/api",
        "NotPermitted",
    );
    let after = get_owned("deployment/api", ns);
    assert_eq!(managers(&after), managers(&before), "{after}");
    // Flux's entry as it was (the real deployment controller keeps moving its status entry).
    let flux_entry = |object: &Value| {
        object["metadata"]["managedFields"]
            .as_array()
            .and_then(|entries| {
                entries
                    .iter()
                    .find(|e| e["manager"] == "kustomize-controller")
                    .cloned()
            })
    };
    assert_eq!(
        flux_entry(&after),
        flux_entry(&before),
        "the refused writes left Flux's ownership as it was"
    );

    // Bookkeeping: bob's server-side apply of values already there adds his own Apply entry.
    let same = super::api_deployment(ns, 2);
    let applied = control_plane().kubectl_with_stdin(
        BOB,
        &[
            "apply",
            "--server-side",
            "--field-manager=bob-apply",
            "-f",
            "-",
        ],
        Some(&same),
    );
    let applied = show(applied).ok();
    assert!(!applied.stderr.contains("denied"), "{}", applied.stderr);
    let after = get_owned("deployment/api", ns);
    assert!(
        managers(&after).contains(&"bob-apply/Apply".to_owned()),
        "{after}"
    );
    // Flux's dry run, and its real apply, are the controller's.
    show(control_plane().kubectl_with_stdin(
        FLUX,
        &[
            "apply",
            "--server-side",
            "--field-manager=kustomize-controller",
            "--force-conflicts",
            "--dry-run=server",
            "-f",
            "-",
        ],
        Some(&same),
    ))
    .ok();
}

const ROLLOUT_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: rollouts.argoproj.io}
spec:
  group: argoproj.io
  scope: Namespaced
  names: {plural: rollouts, singular: rollout, kind: Rollout, listKind: RolloutList}
  versions:
    - name: v1alpha1
      served: true
      storage: true
      schema:
        openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
      subresources:
        status: {}
        scale: {specReplicasPath: .spec.replicas, statusReplicasPath: .status.replicas}
"#;

const WIDGET_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.e2e.driftgate.dev}
spec:
  group: e2e.driftgate.dev
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
"#;

const KNATIVE_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: services.serving.knative.dev}
spec:
  group: serving.knative.dev
  scope: Namespaced
  names: {plural: services, singular: service, kind: Service, listKind: ServiceList, shortNames: [ksvc]}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
"#;

/// Installs a CRD, and lets bob and the on-call group edit its objects (as they may edit the
/// built-in kinds), so that driftgate, not RBAC, decides.
fn install_crd(manifest: &str, name: &str) {
    super::establish_crd(manifest, name);
    let control_plane = control_plane();
    let group = name.split_once('.').map_or(name, |(_, group)| group);
    let role = name.replace('.', "-");
    control_plane.apply(
        ADMIN,
        &format!(
            "apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {{name: e2e-edit-{role}}}
rules:
  - apiGroups: [{group}]
    resources: [\"*\"]
    verbs: [\"*\"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: e2e-edit-{role}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: e2e-edit-{role}}}
subjects:
  - {{apiGroup: rbac.authorization.k8s.io, kind: User, name: bob}}
  - {{apiGroup: rbac.authorization.k8s.io, kind: Group, name: sre-oncall}}
"
        ),
    );
}

/// `kubectl scale` of a guarded custom resource: the request carries an autoscaling/v1 Scale,
/// and the kind behind `rollouts/scale` comes from API discovery, so a policy naming
/// argoproj.io/Rollout matches it.
#[tokio::test]
async fn scale_of_a_custom_resource_is_judged_by_its_discovered_kind() {
    install_crypto_provider();
    shared();
    install_crd(ROLLOUT_CRD, "rollouts.argoproj.io");
    // What the chart grants with rollouts in rbac.scaleParents: driftgate reads the parent of a
    // guarded scale request for its window.
    control_plane().apply(
        ADMIN,
        "apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: e2e-driftgate-rollout-parents}
rules:
  - {apiGroups: [argoproj.io], resources: [rollouts], verbs: [get]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: e2e-driftgate-rollout-parents}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: e2e-driftgate-rollout-parents}
subjects:
  - {kind: ServiceAccount, name: driftgate, namespace: driftgate}
",
    );
    let ns = "prod-m2";
    show(flux_apply(&format!(
        "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {ns}}}\n---\n\
         apiVersion: argoproj.io/v1alpha1\nkind: Rollout\nmetadata: {{name: api, namespace: {ns}}}\n\
         spec: {{replicas: 2}}\n"
    )))
    .ok();
    // Refused every time; once discovery has seen the new CRD (at most one refresh interval
    // after the first review of it), the refusal names the Rollout.
    let refused = eventually(
        "bob's scale of the Rollout refused, naming its kind",
        || async {
            let out = kubectl(
                BOB,
                &[
                    "scale",
                    "rollouts.argoproj.io/api",
                    "-n",
                    ns,
                    "--replicas=5",
                ],
            );
            assert!(!out.success(), "bob's scale was admitted: {}", out.stdout);
            out.stderr
                .contains("bob may not update Rollout prod-m2/api (scale)")
                .then_some(out)
        },
    )
    .await;
    assert_denied(
        &refused,
        "bob may not update Rollout prod-m2/api (scale): only its controllers (flux, kubernetes) write here",
        "NotPermitted",
    );
    assert_eq!(
        get_json("rollouts.argoproj.io/api", ns)["spec"]["replicas"],
        2
    );

    // With a status subresource, .status written through the object is dropped by the API
    // server before admission: no change, admitted, nothing stored.
    let status = merge_patch(
        BOB,
        "rollouts.argoproj.io/api",
        ns,
        r#"{"status":{"phase":"Hacked"}}"#,
    )
    .ok();
    assert!(!status.stderr.contains("denied"), "{}", status.stderr);
    assert!(get_json("rollouts.argoproj.io/api", ns)["status"]["phase"].is_null());
}

/// Without a status subresource the API server stores `.status` written through the object
/// itself, so there it is judged like any other field.
#[tokio::test]
async fn status_of_a_custom_resource_without_a_status_subresource_is_judged() {
    install_crypto_provider();
    shared();
    install_crd(WIDGET_CRD, "widgets.e2e.driftgate.dev");
    let ns = "prod-m3";
    show(flux_apply(&format!(
        "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {ns}}}\n---\n\
         apiVersion: e2e.driftgate.dev/v1\nkind: Widget\nmetadata: {{name: w, namespace: {ns}}}\n\
         spec: {{size: 1}}\nstatus: {{phase: Ready}}\n"
    )))
    .ok();
    let refused = eventually("bob's status write to the Widget refused", || async {
        let out = merge_patch(
            BOB,
            "widgets.e2e.driftgate.dev/w",
            ns,
            r#"{"status":{"phase":"Hacked"}}"#,
        );
        // Until discovery has seen the CRD its status is judged anyway (unknown is judged).
        assert!(
            !out.success(),
            "bob's status write was admitted: {}",
            out.stdout
        );
        Some(out)
    })
    .await;
    assert_denied(
        &refused,
        "bob may not update Widget prod-m3/w: only its controllers (flux, kubernetes) write here",
        "NotPermitted",
    );
    assert_eq!(
        get_json("widgets.e2e.driftgate.dev/w", ns)["status"]["phase"],
        "Ready"
    );
}

/// A Knative Service collides with the core Service: the hint names it by its qualified
/// resource, and following the hint literally opens the window on it, not on the core Service.
#[tokio::test]
async fn hints_lead_to_the_object_refused_not_a_core_kind_of_the_same_name() {
    install_crypto_provider();
    shared();
    install_crd(KNATIVE_CRD, "services.serving.knative.dev");
    let ns = "prod-m4";
    show(flux_apply(&format!(
        "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {ns}}}\n---\n\
         apiVersion: v1\nkind: Service\nmetadata: {{name: api, namespace: {ns}}}\n\
         spec: {{selector: {{app: api}}, ports: [{{port: 80}}]}}\n---\n\
         apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata: {{name: api, namespace: {ns}}}\n\
         spec: {{template: {{spec: {{containers: [{{image: api:1}}]}}}}}}\n"
    )))
    .ok();
    let patch = r#"{"spec":{"template":{"spec":{"containers":[{"image":"api:2"}]}}}}"#;
    let refused = merge_patch(ALICE, "services.serving.knative.dev/api", ns, patch);
    let hint =
        format!("driftgate break-glass open services.serving.knative.dev/api -n {ns} --for 1h");
    assert!(
        refused.stderr.contains(&hint),
        "no qualified hint in:\n{}",
        refused.stderr
    );
    // Followed literally (with a reason of her own), the hint opens the window on it.
    show(driftgate_cli(
        ALICE,
        &[
            "break-glass",
            "open",
            "services.serving.knative.dev/api",
            "-n",
            ns,
            "--for",
            "1h",
            "--reason",
            "INC-77: roll api back to 2",
        ],
    ))
    .ok();
    let knative = get_json("services.serving.knative.dev/api", ns);
    assert!(
        knative["metadata"]["labels"][LABEL].is_string(),
        "{knative}"
    );
    let core = get_json("service/api", ns);
    assert!(core["metadata"]["labels"][LABEL].is_null(), "{core}");
    show(merge_patch(
        ALICE,
        "services.serving.knative.dev/api",
        ns,
        patch,
    ))
    .ok();
}

/// The hint's placeholder reason is refused, by the CLI and by driftgate; request text that is
/// echoed in a warning is escaped, and the instruction comes first.
#[tokio::test]
async fn placeholder_reasons_are_refused_and_echoed_text_is_escaped() {
    install_crypto_provider();
    shared();
    let ns = "prod-m5";
    show(flux_apply(&namespace_with_api(ns))).ok();
    let cli = driftgate_cli(
        ALICE,
        &[
            "break-glass",
            "open",
            "deployment/api",
            "-n",
            ns,
            "--for",
            "1h",
            "--reason",
            "INC-…: what and why",
        ],
    );
    assert!(
        !cli.success() && cli.stderr.contains("placeholder"),
        "{cli:?}"
    );
    let window = expiry_in_secs(3600);
    let placeholder = window_patch(&window, "INC-…: what and why");
    let refused = merge_patch(ALICE, "deployment/api", ns, &placeholder);
    assert_denied(
        &refused,
        "alice may not change the break-glass window on Deployment prod-m5/api: the reason \"INC-…: what and why\" is the placeholder",
        "BreakGlassRefused",
    );
    assert!(get_json("deployment/api", ns)["metadata"]["labels"][LABEL].is_null());

    // A reason with a newline, an escape sequence and 2,000 characters: the warning of the next
    // change keeps its instruction and carries no control character (the API server drops such
    // warnings whole).
    let reason = format!("INC-5: line one\nline two \u{1b}[2J {}", "x".repeat(2000));
    let open = window_patch(&window, &reason);
    show(merge_patch(ALICE, "deployment/api", ns, &open)).ok();
    let edit = merge_patch(ALICE, "deployment/api", ns, r#"{"spec":{"replicas":4}}"#).ok();
    let warning = edit
        .stderr
        .lines()
        .find(|l| l.contains("Warning: driftgate: alice changed Deployment prod-m5/api under"))
        .unwrap_or_else(|| panic!("no backport warning in:\n{}", edit.stderr));
    assert!(
        warning.contains(r"line one\nline two \u{1b}[2J"),
        "{warning}"
    );
    assert!(
        warning.chars().count() <= 256 + "Warning: ".len(),
        "{warning}"
    );
}

/// The CLI computes an expiry from the opener's clock, each replica checks it against its own:
/// a window up to a minute past maxDuration is accepted, so that a replica a few seconds behind
/// agrees; beyond that it is refused.
#[tokio::test]
async fn windows_at_max_duration_survive_clock_skew_and_beyond_it_are_refused() {
    install_crypto_provider();
    shared();
    let ns = "prod-m6";
    show(flux_apply(&namespace_with_api(ns))).ok();
    let max = 4 * 3600;
    let open = |seconds: i64| {
        let patch = window_patch(&expiry_in_secs(seconds), "INC-6: skew");
        merge_patch(ALICE, "deployment/api", ns, &patch)
    };
    let refused = open(max + 180);
    assert_denied(
        &refused,
        "alice may not change the break-glass window on Deployment prod-m6/api",
        "BreakGlassRefused",
    );
    assert!(
        refused.stderr.contains("more than maxDuration 4h"),
        "{}",
        refused.stderr
    );
    assert!(get_json("deployment/api", ns)["metadata"]["labels"][LABEL].is_null());
    // 30 s past maxDuration from this clock: what a replica 30 s behind sees of a window opened
    // at exactly maxDuration.
    show(open(max + 30)).ok();
    // Flux is held by it (not WindowTooLong on this replica).
    let held = flux_apply(&super::api_deployment(ns, 2));
    assert_denied(&held, "Controller flux", "ControllerHeld");
}

/// A delegation whose fields cover the break-glass label and reason never opens a window: only
/// the break-glass rules judge those, on a driftgate of this test's own policy.
#[tokio::test]
async fn a_delegation_covering_labels_cannot_open_a_window() {
    install_crypto_provider();
    let ns = "dlg-m7";
    let control_plane = control_plane();
    control_plane
        .kubectl(ADMIN, &["create", "namespace", ns])
        .ok();
    let policy = control_plane.dir().join("dlg-m7-policy.yaml");
    std::fs::write(
        &policy,
        format!(
            r#"apiVersion: driftgate.dev/v1alpha1
kind: GatePolicy
metadata: {{name: delegated-labels}}
spec:
  namespaces: {{include: ["{ns}"]}}
  controllers:
    - name: flux
      usernames: ["system:serviceaccount:flux-system:kustomize-controller"]
  delegations:
    - name: labels
      usernames: ["bob"]
      fields: ["metadata.labels[*]", "metadata.annotations[*]"]
  breakGlass:
    maxDuration: 4h
    openers: {{groups: ["sre-oncall"]}}
"#
        ),
    )
    .expect("the policy is written");
    let driftgate = Driftgate::start("dlg-m7", &policy, &[]);
    let mut configuration = webhook_configuration(
        "driftgate-e2e-dlg-m7",
        &driftgate.webhook_url(),
        driftgate.ca_pem(),
    );
    configuration["webhooks"][0]["namespaceSelector"] =
        json!({"matchLabels": {"kubernetes.io/metadata.name": ns}});
    driftgate.register_probing(configuration, ns);
    show(flux_apply(&super::api_deployment(ns, 2))).ok();

    let window = window_patch(&expiry_in_secs(3600), "INC-7: not mine to open");
    let refused = merge_patch(BOB, "deployment/api", ns, &window);
    assert_denied(
        &refused,
        "bob may not change the break-glass window on Deployment dlg-m7/api: only group sre-oncall may open",
        "BreakGlassRefused",
    );
    assert!(get_json("deployment/api", ns)["metadata"]["labels"][LABEL].is_null());
    // Any other label is the delegation's.
    show(kubectl(
        BOB,
        &["label", "deployment/api", "-n", ns, "team=payments"],
    ))
    .ok();
    assert_eq!(
        get_json("deployment/api", ns)["metadata"]["labels"]["team"],
        "payments"
    );
}
