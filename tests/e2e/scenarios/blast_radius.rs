//! Issue 11, blast radius: only namespaces that some policy guards reach the webhook (and their
//! Namespace objects), so that with driftgate killed only those are refused; two replicas agree
//! on who writes the configuration through a Lease.
//!
//! Its own two driftgates keep the chart's webhook configuration (named `driftgate`, as the
//! chart's RBAC grants, with the chart's leader Lease) whose base selector also requires a
//! label only this test's namespaces carry, so no other test is ever sent to them.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use serde_json::{Value, json};

use crate::harness::{
    ADMIN, BOB, Driftgate, control_plane, install_crypto_provider, webhook_configuration,
};

use super::{WEBHOOK, assert_denied, eventually, kubectl};

/// Only namespaces with this label are in the test configuration's base selector.
const E2E_LABEL: &str = "blast.driftgate.dev/e2e";
/// The test policy guards namespaces with this label (and `blast-prod-*` by name).
const GUARD_LABEL: &str = "blast.driftgate.dev/guarded";
/// The chart's names for release `driftgate`: its RBAC grants these and nothing else.
const CONFIGURATION: &str = "driftgate";
const LEASE: &str = "driftgate-leader";
const LEASE_NAMESPACE: &str = "driftgate";

const POLICY: &str = r#"apiVersion: driftgate.dev/v1alpha1
kind: GatePolicy
metadata:
  name: blast
spec:
  namespaces:
    include: ["blast-prod-*"]
    selector:
      matchLabels: {blast.driftgate.dev/guarded: "true"}
  resources:
    include: ["core/ConfigMap"]
  controllers:
    - name: flux
      usernames: ["system:serviceaccount:flux-system:kustomize-controller"]
"#;

fn create_namespace(name: &str, guarded: bool) {
    let guard = if guarded {
        format!(", {GUARD_LABEL}: \"true\"")
    } else {
        String::new()
    };
    let manifest = format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {name}\n  labels: {{{E2E_LABEL}: \"true\"{guard}}}\n"
    );
    let out = control_plane().apply(ADMIN, &manifest);
    assert!(out.success(), "creating namespace {name}: {}", out.stderr);
}

/// Bob creates ConfigMap `name` in `namespace` (a server-side dry run: nothing is left behind).
fn bob_creates(namespace: &str, name: &str) -> crate::harness::KubectlOutput {
    kubectl(
        BOB,
        &[
            "create",
            "configmap",
            name,
            "-n",
            namespace,
            "--from-literal=k=v",
            "--dry-run=server",
        ],
    )
}

/// The live gate webhook's namespaceSelector.
fn live_selector() -> Value {
    let out = control_plane()
        .kubectl(
            ADMIN,
            &[
                "get",
                "validatingwebhookconfiguration",
                CONFIGURATION,
                "-o",
                "json",
            ],
        )
        .ok();
    let configuration: Value = serde_json::from_str(&out.stdout).expect("kubectl prints JSON");
    configuration["webhooks"][0]["namespaceSelector"].clone()
}

/// The namespaces the live selector's added `NotIn` excludes (the base's own is the first).
fn excluded() -> Vec<String> {
    let selector = live_selector();
    let expressions = selector["matchExpressions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    expressions
        .iter()
        .skip(1)
        .filter(|e| e["key"] == "kubernetes.io/metadata.name" && e["operator"] == "NotIn")
        .flat_map(|e| e["values"].as_array().cloned().unwrap_or_default())
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect()
}

/// Replaces the policy file at once (a rename), as a ConfigMap update does.
fn write_policy(path: &std::path::Path, text: &str) {
    let next = path.with_extension("next");
    std::fs::write(&next, text).unwrap();
    std::fs::rename(&next, path).unwrap();
}

async fn lease_holder() -> Option<String> {
    let leases: Api<Lease> = Api::namespaced(control_plane().client(ADMIN).await, LEASE_NAMESPACE);
    leases.get_opt(LEASE).await.ok()??.spec?.holder_identity
}

fn leading(driftgate: &Driftgate) -> bool {
    driftgate
        .metrics()
        .lines()
        .any(|l| l == "driftgate_leader 1")
}

#[tokio::test]
async fn only_guarded_namespaces_depend_on_driftgate_and_one_replica_writes_the_selector() {
    install_crypto_provider();
    for (name, guarded) in [
        ("blast-prod-a", false),
        ("blast-team-a", true),
        ("blast-dev-a", false),
        ("blast-dev-b", false),
    ] {
        create_namespace(name, guarded);
    }
    let dir = std::env::temp_dir().join(format!("driftgate-e2e-blast-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let policy = dir.join("blast.yaml");
    write_policy(&policy, POLICY);

    // The chart's gate webhook, narrowed to this test's namespaces.
    let base = json!({
        "matchLabels": {E2E_LABEL: "true"},
        "matchExpressions": [{
            "key": "kubernetes.io/metadata.name",
            "operator": "NotIn",
            "values": ["kube-system", "driftgate"],
        }],
    });
    let base_flag = base.to_string();
    let flags = [
        "--gate-webhook-configuration",
        CONFIGURATION,
        "--gate-base-namespace-selector",
        &base_flag,
        "--leader-lease",
        LEASE,
        "--leader-lease-namespace",
        LEASE_NAMESPACE,
        "--leader-lease-duration",
        "4s",
    ];
    // One replica first, so that it is the leader and the one the API server calls; the second
    // waits for the Lease.
    let first = Driftgate::start("blast-1", &policy, &flags);
    let mut configuration =
        webhook_configuration(CONFIGURATION, &first.webhook_url(), first.ca_pem());
    assert_eq!(
        configuration["webhooks"][0]["namespaceSelector"]["matchExpressions"][0],
        base["matchExpressions"][0],
        "the chart's static exclusion"
    );
    configuration["webhooks"][0]["namespaceSelector"] = base.clone();
    first.register_probing(configuration.clone(), "blast-prod-a");
    eventually("the first replica leads", || async {
        leading(&first).then_some(())
    })
    .await;
    let second = Driftgate::start("blast-2", &policy, &flags);

    // The live configuration gets the exclusion list: unguarded namespaces, not guarded ones.
    let list = eventually("the selector excludes blast-dev-a", || async {
        let list = excluded();
        list.contains(&"blast-dev-a".to_owned()).then_some(list)
    })
    .await;
    assert!(list.contains(&"default".to_owned()), "{list:?}");
    for guarded in ["blast-prod-a", "blast-team-a"] {
        assert!(!list.contains(&guarded.to_owned()), "{guarded} in {list:?}");
    }
    let mut sorted = list.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(list, sorted, "sorted, without duplicates");
    assert_eq!(live_selector()["matchLabels"], base["matchLabels"]);
    let managed = kubectl(
        ADMIN,
        &[
            "get",
            "validatingwebhookconfiguration",
            CONFIGURATION,
            "--show-managed-fields",
            "-o",
            "json",
        ],
    )
    .ok();
    assert!(
        managed
            .stdout
            .contains("\"manager\": \"driftgate-namespace-selector\""),
        "{}",
        managed.stdout
    );

    // Exactly one leads: the first, holder of the Lease, while the second campaigns (every
    // third of the 4s lease) and waits.
    for _ in 0..10 {
        assert!(
            leading(&first) && !leading(&second),
            "exactly one replica leads"
        );
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
    assert_eq!(
        lease_holder().await.as_deref(),
        Some("driftgate-e2e-blast-1")
    );

    // A namespace created to match the policy is guarded from its first object: no gap.
    create_namespace("blast-prod-new", false);
    assert_denied(
        &bob_creates("blast-prod-new", "first"),
        "bob may not create ConfigMap blast-prod-new/first:",
        "NotPermitted",
    );
    // An unguarded new namespace waits for driftgate until it is excluded.
    let created = Instant::now();
    create_namespace("blast-dev-new", false);
    eventually("blast-dev-new is excluded", || async {
        excluded()
            .contains(&"blast-dev-new".to_owned())
            .then_some(())
    })
    .await;
    eprintln!(
        "blast radius: an unguarded new namespace was excluded after {:.2}s",
        created.elapsed().as_secs_f64()
    );

    // A label that brings an excluded namespace into the policy's selector: guarded once the
    // leader drops it from the list and the API server sees the new configuration.
    assert!(bob_creates("blast-dev-b", "before").success());
    let labelled = Instant::now();
    kubectl(
        ADMIN,
        &[
            "label",
            "namespace",
            "blast-dev-b",
            &format!("{GUARD_LABEL}=true"),
        ],
    )
    .ok();
    eventually("blast-dev-b is guarded", || async {
        let out = bob_creates("blast-dev-b", "after");
        (!out.success()).then_some(out)
    })
    .await;
    eprintln!(
        "blast radius: a namespace labelled into a policy's selector was guarded after {:.2}s",
        labelled.elapsed().as_secs_f64()
    );
    assert_denied(
        &bob_creates("blast-dev-b", "after"),
        "bob may not create ConfigMap blast-dev-b/after:",
        "NotPermitted",
    );
    assert!(!excluded().contains(&"blast-dev-b".to_owned()));

    // A policy change that guards an excluded namespace: guarded once the leader has reloaded
    // the policy (--reload-interval, 2s) and dropped the namespace from the list.
    let edited = Instant::now();
    write_policy(
        &policy,
        &POLICY.replace(
            "[\"blast-prod-*\"]",
            "[\"blast-prod-*\", \"blast-dev-new\"]",
        ),
    );
    eventually("blast-dev-new is guarded", || async {
        (!bob_creates("blast-dev-new", "after").success()).then_some(())
    })
    .await;
    eprintln!(
        "blast radius: a namespace a policy edit guards was guarded after {:.2}s",
        edited.elapsed().as_secs_f64()
    );
    assert!(!excluded().contains(&"blast-dev-new".to_owned()));

    // While the policy source is refused, the selector stays as written for the last good one.
    let good = std::fs::read_to_string(&policy).unwrap();
    write_policy(
        &policy,
        "apiVersion: driftgate.dev/v1alpha1\nkind: GatePolicy\nspec: {}\n",
    );
    eventually("the leader holds the selector", || async {
        first
            .log_tail(400)
            .contains("the policy source is refused")
            .then_some(())
    })
    .await;
    create_namespace("blast-dev-held", false);
    // Several rechecks (one a second) and the namespace's watch event go by without a write.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!excluded().contains(&"blast-dev-held".to_owned()));
    write_policy(&policy, &good);
    eventually(
        "blast-dev-held is excluded once the policy is fixed",
        || async {
            excluded()
                .contains(&"blast-dev-held".to_owned())
                .then_some(())
        },
    )
    .await;

    // Kill the leader (SIGKILL: it cannot release the Lease); the second takes over when the
    // Lease expires and keeps writing: a reset to the chart's base selector (what helm upgrade
    // or Argo CD self-heal does) is repaired.
    let killed = Instant::now();
    first.kill();
    eventually("the second replica leads", || async {
        leading(&second).then_some(())
    })
    .await;
    eprintln!(
        "blast radius: the second replica led {:.2}s after the leader was killed (lease 4s)",
        killed.elapsed().as_secs_f64()
    );
    assert_eq!(
        lease_holder().await.as_deref(),
        Some("driftgate-e2e-blast-2")
    );
    let writes = |d: &Driftgate| {
        d.counter(
            "driftgate_webhook_selector_writes_total",
            &[r#"result="success""#],
        )
    };
    let written_before = writes(&second);
    let reset = Instant::now();
    let out = kubectl(
        ADMIN,
        &[
            "patch",
            "validatingwebhookconfiguration",
            CONFIGURATION,
            "--type=json",
            "-p",
            &json!([{"op": "replace", "path": "/webhooks/0/namespaceSelector", "value": base}])
                .to_string(),
        ],
    );
    assert!(out.success(), "{}", out.stderr);
    eventually("the new leader repairs the reset selector", || async {
        excluded().contains(&"blast-dev-a".to_owned()).then_some(())
    })
    .await;
    eprintln!(
        "blast radius: a reset selector was repaired after {:.2}s",
        reset.elapsed().as_secs_f64()
    );
    assert!(writes(&second) > written_before);

    // Every replica down: the API server cannot call the webhook.
    second.kill();
    let unguarded = bob_creates("blast-dev-a", "while-down");
    assert!(unguarded.success(), "{}", unguarded.stderr);
    let guarded = bob_creates("blast-prod-a", "while-down");
    assert!(!guarded.success(), "{}", guarded.stdout);
    assert!(
        guarded
            .stderr
            .contains(&format!("failed calling webhook \"{WEBHOOK}\"")),
        "{}",
        guarded.stderr
    );
    let edit = kubectl(
        ADMIN,
        &[
            "annotate",
            "namespace",
            "blast-dev-a",
            "example.com/owner=team-a",
            "--overwrite",
        ],
    );
    assert!(edit.success(), "{}", edit.stderr);
    let guarded_edit = kubectl(
        ADMIN,
        &[
            "annotate",
            "namespace",
            "blast-prod-a",
            "example.com/owner=team-a",
            "--overwrite",
        ],
    );
    assert!(
        !guarded_edit.success(),
        "a guarded Namespace waits for driftgate"
    );
    first.unregister(CONFIGURATION);
}

/// Issue 24, section 2, with the chart's defaults: the example policy and the keeper on. The
/// keeper once left flux-system out of the webhook (no policy's `namespaces` named it), and
/// bob's `spec.suspend: true` on a Kustomization there was admitted, never reviewed, while the
/// decision said SuspensionRefused. Now it keeps every namespace where a policy judges
/// (flux-system, where the GitOps objects and their suspensions are judged, and the guarded
/// ones), leaves out the rest, and this driftgate reviews and refuses bob's suspension.
///
/// Its own driftgate (as the admin: the chart's RBAC names only configuration `driftgate`, which
/// the test above keeps) registers the chart's gate webhook with the chart's base selector and an
/// objectSelector on a label only this test's objects carry, so that it judges no other test's
/// writes (the shared driftgate judges them all already).
#[tokio::test]
async fn with_the_example_policy_the_keeper_keeps_flux_system_and_bob_s_suspension_is_refused() {
    install_crypto_provider();
    crate::harness::shared();
    let flux = crate::harness::flux::flux();
    const CONFIGURATION: &str = "driftgate-e2e-blast-example";
    const OBJECT_LABEL: (&str, &str) = ("blast.driftgate.dev/example-e2e", "true");
    const KUSTOMIZATION: &str = "blast-example-e2e";
    // A namespace production guards (created as Flux, which that policy admits), and one no
    // policy judges.
    let out = super::flux_apply(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: prod-blast-example\n",
    );
    assert!(out.success(), "{}", out.stderr);
    control_plane().apply(
        ADMIN,
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: blast-example-dev\n",
    );
    // argocd, where the example's `gitops-argocd` judges suspensions of any object and guards
    // Argo CD's own kinds: the namespace the keeper once left out with nothing else keeping it.
    control_plane().apply(
        ADMIN,
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: argocd\n",
    );

    let base = json!({
        "matchExpressions": [{
            "key": "kubernetes.io/metadata.name",
            "operator": "NotIn",
            "values": ["kube-system", "driftgate"],
        }],
    });
    let base_flag = base.to_string();
    let driftgate = Driftgate::start_as(
        "blast-example",
        &crate::harness::repo_path("policies/example.yaml"),
        ADMIN,
        &[
            "--gate-webhook-configuration",
            CONFIGURATION,
            "--gate-base-namespace-selector",
            &base_flag,
            "--leader-lease",
            "driftgate-e2e-blast-example-leader",
            "--leader-lease-namespace",
            LEASE_NAMESPACE,
            "--leader-lease-duration",
            "4s",
        ],
    );
    let mut configuration =
        webhook_configuration(CONFIGURATION, &driftgate.webhook_url(), driftgate.ca_pem());
    configuration["webhooks"][0]["namespaceSelector"] = base.clone();
    configuration["webhooks"][0]["objectSelector"] =
        json!({"matchLabels": {OBJECT_LABEL.0: OBJECT_LABEL.1}});
    let probe = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: blast-example-probe\n  namespace: flux-system\n  labels: {{{}: \"{}\"}}\n",
        OBJECT_LABEL.0, OBJECT_LABEL.1
    );
    driftgate.register_with_probe(configuration, || {
        control_plane().kubectl_with_stdin(
            ADMIN,
            &["apply", "--dry-run=server", "-f", "-"],
            Some(&probe),
        );
    });

    // The keeper's exclusion, read from the live configuration: what no policy judges.
    let live_excluded = || {
        let out = kubectl(
            ADMIN,
            &[
                "get",
                "validatingwebhookconfiguration",
                CONFIGURATION,
                "-o",
                "json",
            ],
        )
        .ok();
        let live: Value = serde_json::from_str(&out.stdout).expect("kubectl prints JSON");
        live["webhooks"][0]["namespaceSelector"]["matchExpressions"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .skip(1)
            .flat_map(|e| e["values"].as_array().cloned().unwrap_or_default())
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect::<Vec<_>>()
    };
    let excluded = eventually(
        "the keeper writes the example policy's exclusion",
        || async {
            let list = live_excluded();
            list.contains(&"blast-example-dev".to_owned())
                .then_some(list)
        },
    )
    .await;
    for judged in [
        crate::harness::flux::FLUX_NAMESPACE,
        "argocd",
        "prod-blast-example",
    ] {
        assert!(
            !excluded.contains(&judged.to_owned()),
            "{judged} is left out: {excluded:?}"
        );
    }
    for unjudged in ["default", "blast-example-dev"] {
        assert!(
            excluded.contains(&unjudged.to_owned()),
            "{unjudged} is sent: {excluded:?}"
        );
    }

    // A Kustomization of this test's, applied as Flux applies the GitOps objects from Git.
    flux.publish(
        KUSTOMIZATION,
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: blast-example-apps\n",
    );
    crate::harness::flux::apply_as_flux(&format!(
        "apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata:\n  name: {KUSTOMIZATION}\n  namespace: flux-system\n  labels: {{{}: \"{}\"}}\nspec:\n  interval: 1h\n  prune: true\n  path: ./\n  sourceRef: {{kind: ExternalArtifact, name: {KUSTOMIZATION}}}\n",
        OBJECT_LABEL.0, OBJECT_LABEL.1
    ));
    // Suspensions in flux-system are the example's `gitops`'s, in argocd its `gitops-argocd`'s.
    let refused_here = |policy: &str| {
        driftgate.counter(
            "driftgate_admission_reviews_total",
            &[
                r#"decision="denied""#,
                r#"rule="SuspensionRefused""#,
                &format!(r#"policy="{policy}""#),
            ],
        )
    };

    // In argocd, Argo CD's skip-reconcile annotation suspends whatever object carries it.
    control_plane().apply(
        ADMIN,
        &format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {KUSTOMIZATION}\n  namespace: argocd\n  labels: {{{}: \"{}\"}}\n",
            OBJECT_LABEL.0, OBJECT_LABEL.1
        ),
    );
    let before = refused_here("gitops-argocd");
    let skip = kubectl(
        BOB,
        &[
            "annotate",
            "configmap",
            KUSTOMIZATION,
            "-n",
            "argocd",
            "argocd.argoproj.io/skip-reconcile=true",
        ],
    );
    assert_denied(
        &skip,
        &format!("bob may not suspend ConfigMap argocd/{KUSTOMIZATION}"),
        "SuspensionRefused",
    );
    assert_eq!(
        refused_here("gitops-argocd"),
        before + 1.0,
        "the keeper's driftgate reviewed and refused bob's suspension in argocd; its log:\n{}",
        driftgate.log_tail(20)
    );
    let before = refused_here("gitops");
    let suspend = kubectl(
        BOB,
        &[
            "patch",
            "kustomization",
            KUSTOMIZATION,
            "-n",
            "flux-system",
            "--type=merge",
            "-p",
            r#"{"spec":{"suspend":true}}"#,
        ],
    );
    assert_denied(
        &suspend,
        &format!("bob may not suspend Kustomization flux-system/{KUSTOMIZATION}"),
        "SuspensionRefused",
    );
    assert_eq!(
        refused_here("gitops"),
        before + 1.0,
        "the keeper's driftgate reviewed and refused bob's suspension; its log:\n{}",
        driftgate.log_tail(20)
    );
    assert_eq!(
        get_kustomization_suspend(KUSTOMIZATION),
        Value::Null,
        "bob's suspension was stored"
    );
    driftgate.unregister(CONFIGURATION);
}

fn get_kustomization_suspend(name: &str) -> Value {
    let out = kubectl(
        ADMIN,
        &[
            "get",
            "kustomization",
            name,
            "-n",
            "flux-system",
            "-o",
            "json",
        ],
    )
    .ok();
    serde_json::from_str::<Value>(&out.stdout).expect("kubectl prints JSON")["spec"]["suspend"]
        .clone()
}

/// Issue 25, section 3: an install that never serves blocks nothing. The chart renders the gate
/// unarmed (`kubernetes.io/metadata.name DoesNotExist`: the API server labels every namespace
/// with its name, so none matches), with failurePolicy Fail, here pointed at a port nothing
/// listens on, as when the image cannot be pulled: bob's writes in a guarded and an unguarded
/// namespace and a namespace deletion succeed, where the same configuration armed refuses them.
/// Once a driftgate serves and leads, it arms the gate (measured from the configuration's apply
/// to bob's first refusal), and re-arms it after a reset to the chart's selector, as `helm
/// upgrade` of a changed selector makes (the gap measured: while it lasts the gate is open).
#[tokio::test]
async fn a_gate_no_driftgate_ever_served_blocks_nothing_and_is_armed_once_one_serves() {
    install_crypto_provider();
    const CONFIGURATION: &str = "driftgate-e2e-unarmed";
    /// This test's namespaces alone are in its configuration's selector.
    const LABEL: &str = "blast.driftgate.dev/unarmed-e2e";
    const POLICY: &str = "apiVersion: driftgate.dev/v1alpha1\nkind: GatePolicy\nmetadata:\n  name: unarmed\nspec:\n  namespaces:\n    include: [\"unarmed-prod-*\"]\n  resources:\n    include: [\"core/ConfigMap\"]\n  controllers:\n    - name: flux\n      usernames: [\"system:serviceaccount:flux-system:kustomize-controller\"]\n";
    for name in ["unarmed-prod-a", "unarmed-dev-a", "unarmed-dev-doomed"] {
        let manifest = format!(
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {name}\n  labels: {{{LABEL}: \"true\"}}\n"
        );
        assert!(control_plane().apply(ADMIN, &manifest).success());
    }
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    // The chart's gate as installed, narrowed to this test's namespaces by one more label.
    let installed = |url: &str, ca_pem: &[u8]| {
        let mut configuration =
            crate::harness::chart::installed_webhook_configuration(CONFIGURATION, url, ca_pem);
        let selector = &mut configuration["webhooks"][0]["namespaceSelector"];
        let expressions = selector["matchExpressions"].as_array().cloned().unwrap();
        assert_eq!(
            expressions.last(),
            Some(&json!({"key": "kubernetes.io/metadata.name", "operator": "DoesNotExist"})),
            "the chart renders the gate unarmed: {selector}"
        );
        selector["matchLabels"] = json!({LABEL: "true"});
        configuration
    };
    let apply = |configuration: &Value| {
        let out = control_plane().apply(ADMIN, &configuration.to_string());
        assert!(out.success(), "{}", out.stderr);
    };
    let unreachable = installed(
        &format!("https://127.0.0.1:{closed}/validate"),
        control_plane().ca_pem(),
    );
    apply(&unreachable);
    // Give the API server's webhook cache its moment (it is watched, not polled).
    tokio::time::sleep(Duration::from_secs(2)).await;
    for namespace in ["unarmed-prod-a", "unarmed-dev-a"] {
        let out = bob_creates(namespace, "while-unarmed");
        assert!(out.success(), "{namespace}: {}", out.stderr);
    }
    let deleted = kubectl(
        ADMIN,
        &["delete", "namespace", "unarmed-dev-doomed", "--wait=false"],
    );
    assert!(deleted.success(), "{}", deleted.stderr);
    // The same configuration armed (the unarmed expression taken out) refuses: failurePolicy
    // Fail, nothing answering.
    let mut armed = unreachable.clone();
    armed["webhooks"][0]["namespaceSelector"]["matchExpressions"]
        .as_array_mut()
        .unwrap()
        .pop();
    apply(&armed);
    let refused = eventually("the armed gate refuses with nothing answering", || async {
        let out = bob_creates("unarmed-dev-a", "while-armed");
        (!out.success()).then_some(out.stderr)
    })
    .await;
    assert!(refused.contains("failed calling webhook"), "{refused}");

    // A driftgate that serves and leads arms the gate from the chart's selector.
    let dir = std::env::temp_dir().join(format!("driftgate-e2e-unarmed-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let policy = dir.join("unarmed.yaml");
    write_policy(&policy, POLICY);
    let mut base = armed["webhooks"][0]["namespaceSelector"].clone();
    base["matchLabels"] = json!({LABEL: "true"});
    let base_flag = base.to_string();
    let driftgate = Driftgate::start_as(
        "unarmed",
        &policy,
        ADMIN,
        &[
            "--gate-webhook-configuration",
            CONFIGURATION,
            "--gate-base-namespace-selector",
            &base_flag,
            "--leader-lease",
            "driftgate-e2e-unarmed-leader",
            "--leader-lease-namespace",
            LEASE_NAMESPACE,
            "--leader-lease-duration",
            "4s",
        ],
    );
    let served = installed(&driftgate.webhook_url(), driftgate.ca_pem());
    let mut gaps = Vec::new();
    for round in ["install", "reset (helm upgrade)"] {
        let applied = Instant::now();
        apply(&served);
        let message = eventually("the gate is armed and driftgate refuses bob", || async {
            let out = bob_creates("unarmed-prod-a", "armed");
            (!out.success()).then_some(out.stderr)
        })
        .await;
        gaps.push(applied.elapsed().as_secs_f64());
        assert!(message.contains("NotPermitted"), "{round}: {message}");
        let out = bob_creates("unarmed-dev-a", "unguarded");
        assert!(out.success(), "{round}: {}", out.stderr);
    }
    eprintln!(
        "unarmed gate: armed {:.2}s after the install's apply, re-armed {:.2}s after a reset",
        gaps[0], gaps[1]
    );
    let _ = kubectl(
        ADMIN,
        &["delete", "validatingwebhookconfiguration", CONFIGURATION],
    );
    drop(driftgate);
}
