//! The 3am story with Flux's real kustomize-controller (issue 13), not `kubectl apply` playing
//! it: it dry-runs every object on every interval, applies with force what drifted, and writes
//! as its own service account.

use std::time::{Duration, Instant};

use driftgate::ledger::record::{BackportRequirement, Phase};

use crate::harness::flux::{FLUX_NAMESPACE, flux};
use crate::harness::{
    ADMIN, ALICE, BOB, control_plane, driftgate_cli, install_crypto_provider, shared,
};

use super::{IMAGE, eventually, kubectl, namespace_with_api, records, wait_for_event};

/// How long the first reconcile of a new Kustomization may take (the controller's caches start
/// with the first test that uses it).
const FIRST_APPLY: Duration = Duration::from_secs(120);
/// Flux's interval in these tests; a revert must come within a few of them.
const INTERVAL: &str = "5s";
const REVERT: Duration = Duration::from_secs(60);

/// A field of Deployment `api` in `namespace` (a kubectl jsonpath); None when it cannot be read.
fn deployment_field(namespace: &str, jsonpath: &str) -> Option<String> {
    let out = control_plane().kubectl(
        ADMIN,
        &[
            "get",
            "deployment/api",
            "-n",
            namespace,
            "-o",
            &format!("jsonpath={{{jsonpath}}}"),
        ],
    );
    out.success().then(|| out.stdout.trim().to_owned())
}

fn replicas(namespace: &str) -> Option<u64> {
    deployment_field(namespace, ".spec.replicas")?.parse().ok()
}

/// Polls the Deployment's replicas until they are `want`; the seconds it took, or a failure
/// that shows the Kustomization and the controller's log.
async fn wait_for_replicas(name: &str, namespace: &str, want: u64, within: Duration) -> f64 {
    let start = Instant::now();
    while start.elapsed() < within {
        if replicas(namespace) == Some(want) {
            return start.elapsed().as_secs_f64();
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let kustomization = control_plane().kubectl(
        ADMIN,
        &[
            "get",
            "kustomization",
            name,
            "-n",
            FLUX_NAMESPACE,
            "-o",
            "yaml",
        ],
    );
    panic!(
        "Deployment {namespace}/api did not reach {want} replicas within {within:?} (now {:?}).\n{}\nkustomize-controller log: {}",
        replicas(namespace),
        kustomization.stdout,
        flux().log().display()
    );
}

#[tokio::test]
async fn under_audit_the_real_flux_reverts_a_manual_scale_and_driftgate_reports_it() {
    install_crypto_provider();
    shared();
    let ns = "staging-flux-revert";
    let name = "staging-flux-revert";
    flux().publish(name, &namespace_with_api(ns));
    flux().kustomize(name, INTERVAL);
    let first = wait_for_replicas(name, ns, 2, FIRST_APPLY).await;
    eprintln!("real Flux applied the first revision in {first:.1}s");
    // It is Flux's own write: its field manager owns the replicas.
    let shown = control_plane()
        .kubectl(
            ADMIN,
            &[
                "get",
                "deployment/api",
                "-n",
                ns,
                "-o",
                "json",
                "--show-managed-fields",
            ],
        )
        .ok();
    let deployment: serde_json::Value = serde_json::from_str(&shown.stdout).unwrap();
    let managers = deployment["metadata"]["managedFields"].clone();
    assert!(
        managers
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["manager"] == "kustomize-controller" && m["operation"] == "Apply"),
        "{managers}"
    );

    // 3am: bob scales by hand. The staging policy is Audit: admitted, with driftgate's warning.
    let scale = kubectl(BOB, &["scale", "deployment/api", "-n", ns, "--replicas=5"]).ok();
    assert!(
        scale
            .stderr
            .contains("driftgate audit (policy \"staging\" would deny in Enforce mode)"),
        "{}",
        scale.stderr
    );
    wait_for_event(
        ns,
        "WouldDeny",
        "Deployment",
        "api",
        &format!("bob may not update Deployment {ns}/api (scale)"),
    )
    .await;
    // ... and the real controller undoes it at its next reconcile: the failure driftgate exists for.
    let reverted = wait_for_replicas(name, ns, 2, REVERT).await;
    eprintln!("real Flux reverted bob's scale in {reverted:.1}s (interval {INTERVAL})");
}

/// The Kustomization's Ready condition, as (status, message).
fn ready(name: &str) -> (String, String) {
    let kustomization = flux().kustomization(name);
    let conditions = kustomization["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    conditions
        .iter()
        .find(|c| c["type"] == "Ready")
        .map(|c| {
            (
                c["status"].as_str().unwrap_or("").to_owned(),
                c["message"].as_str().unwrap_or("").to_owned(),
            )
        })
        .unwrap_or_default()
}

/// Waits until Kustomization `name`'s Ready is False with driftgate's refusal: (status, message).
async fn refused_by_the_window(name: &str) -> (String, String) {
    let start = Instant::now();
    loop {
        let (status, message) = ready(name);
        if status == "False" && message.contains("denied the request") {
            return (status, message);
        }
        assert!(
            start.elapsed() < REVERT,
            "the Kustomization never reported the refusal: {status} {message}; log: {}",
            flux().log().display()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The image of alice's 3am fix.
const HOTFIX: &str = "registry.example/payments-api:1.4.3-hotfix";

/// alice's 3am fix under her window: more replicas and a hotfix image.
fn hotfix(namespace: &str) {
    kubectl(
        ALICE,
        &["scale", "deployment/api", "-n", namespace, "--replicas=5"],
    )
    .ok();
    kubectl(
        ALICE,
        &[
            "set",
            "image",
            "deployment/api",
            "-n",
            namespace,
            &format!("api={HOTFIX}"),
        ],
    )
    .ok();
}

/// alice opens a window on Deployment `api` with the CLI, `for_` long.
fn open_window(namespace: &str, for_: &str, reason: &str) {
    driftgate_cli(
        ALICE,
        &[
            "break-glass",
            "open",
            "deployment/api",
            "-n",
            namespace,
            "--for",
            for_,
            "--reason",
            reason,
        ],
    )
    .ok();
}

fn image(namespace: &str) -> String {
    deployment_field(namespace, ".spec.template.spec.containers[0].image")
        .expect("the Deployment can be read")
}

#[tokio::test]
async fn under_enforce_the_fix_made_in_a_window_survives_the_real_flux() {
    install_crypto_provider();
    shared();
    let ns = "prod-flux-fix";
    let name = "prod-flux-fix";
    flux().publish(name, &namespace_with_api(ns));
    flux().kustomize(name, INTERVAL);
    wait_for_replicas(name, ns, 2, FIRST_APPLY).await;

    // alice opens a window with the CLI and makes the 3am fix: more replicas, a hotfix image.
    open_window(ns, "1h", "INC-913: api OOM, hotfix image");
    hotfix(ns);

    // The real Flux's next reconcile is refused, and its Kustomization says driftgate's sentence.
    let start = Instant::now();
    let (status, message) = refused_by_the_window(name).await;
    eprintln!(
        "the real Flux reported the refusal after {:.1}s: {status}: {message}",
        start.elapsed().as_secs_f64()
    );
    assert!(
        message.contains(&format!(
            "Controller flux (system:serviceaccount:flux-system:kustomize-controller) may not update Deployment {ns}/api while the break-glass window on the object (until "
        )) && message.contains("reason \"INC-913: api OOM, hotfix image\") holds it (policy \"production\", rule ControllerHeld). Backport the emergency change to Git"),
        "{message}"
    );
    // For three intervals the fix stays in place: Flux keeps trying and keeps being refused
    // (between tries its Ready is Unknown, "reconciliation in progress"; never True).
    let watched = Instant::now();
    while watched.elapsed() < Duration::from_secs(15) {
        assert_eq!(replicas(ns), Some(5));
        assert_eq!(image(ns), HOTFIX);
        assert_ne!(ready(name).0, "True", "{}", ready(name).1);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The record of `namespace`'s window once it reached `phase`.
async fn record_in_phase(namespace: &str, phase: Phase) -> BackportRequirement {
    eventually(
        &format!("the record in {namespace} to be {}", phase.word()),
        || async {
            records(namespace)
                .await
                .into_iter()
                .find(|r| r.status.as_ref().is_some_and(|s| s.phase == phase))
        },
    )
    .await
}

/// Each transition of `record` as (phase, reason).
fn transitions(record: &BackportRequirement) -> Vec<(&'static str, String)> {
    record
        .status
        .iter()
        .flat_map(|s| &s.transitions)
        .map(|t| (t.phase.word(), t.reason.clone()))
        .collect()
}

/// alice's fix by `kubectl scale` alone: field manager `kubectl` through the `scale`
/// subresource, which Flux's managedFields cleanup leaves alone.
fn scale_only(namespace: &str) {
    kubectl(
        ALICE,
        &["scale", "deployment/api", "-n", namespace, "--replicas=5"],
    )
    .ok();
}

/// The normal end of the 3am story with the real Flux: the fix (made by `fix`: 5 replicas and
/// `image`) is put in Git, alice closes her window, and the record becomes Backported by the
/// transition `reason`.
async fn backported_by_the_real_flux(ns: &str, fix: fn(&str), image_fixed: &str, reason: &str) {
    flux().publish(ns, &namespace_with_api(ns));
    flux().kustomize(ns, INTERVAL);
    wait_for_replicas(ns, ns, 2, FIRST_APPLY).await;
    open_window(ns, "1h", "INC-914: api OOM, hotfix image");
    fix(ns);
    refused_by_the_window(ns).await;

    // The on-call's pull request is merged: Git now says what the cluster has. Then she closes
    // the window, and the real Flux reconciles again.
    let git = namespace_with_api(ns)
        .replace("replicas: 2", "replicas: 5")
        .replace(IMAGE, image_fixed);
    let revision = flux().publish(ns, &git);
    // Held still: the new revision's dry run is refused too.
    eventually("Flux to try the new revision", || async {
        let (_, message) = ready(ns);
        (message.contains(&revision) || message.contains("denied the request")).then_some(())
    })
    .await;
    driftgate_cli(ALICE, &["break-glass", "close", "deployment/api", "-n", ns]).ok();
    let start = Instant::now();
    let record = record_in_phase(ns, Phase::Backported).await;
    eprintln!(
        "{ns}: the record was Backported ({reason}) {:.1}s after the window closed",
        start.elapsed().as_secs_f64()
    );
    assert_eq!(
        transitions(&record),
        [
            ("Open", "Opened".to_owned()),
            ("AwaitingBackport", "Closed".to_owned()),
            ("Backported", reason.to_owned()),
        ],
        "{record:#?}"
    );
    wait_for_event(
        ns,
        "BackportConfirmed",
        "Deployment",
        "api",
        "(system:serviceaccount:flux-system:kustomize-controller) ",
    )
    .await;
    assert_eq!((replicas(ns), image(ns)), (Some(5), image_fixed.to_owned()));
    let (status, message) = eventually("the Kustomization to be Ready", || async {
        let ready = ready(ns);
        (ready.0 == "True").then_some(ready)
    })
    .await;
    assert!(message.contains(&revision), "{status}: {message}");
}

/// Flux skips the apply when its dry run shows no change, so once Git has the fix only dry
/// runs arrive: two of them carrying the values settle the record.
#[tokio::test]
async fn the_fix_put_in_git_is_backported_though_the_real_flux_only_dry_runs_it() {
    install_crypto_provider();
    shared();
    backported_by_the_real_flux(
        "prod-flux-backport",
        scale_only,
        IMAGE,
        "ControllerFoundNothingToApply",
    )
    .await;
}

/// Flux takes back, with a real PATCH of managedFields before it applies, the fields of every
/// field manager named `kubectl…` that wrote without a subresource (`kubectl set image` is
/// `kubectl-set`): a real write carrying the values.
#[tokio::test]
async fn a_fix_made_with_kubectl_set_is_backported_by_the_real_flux_taking_its_fields_back() {
    install_crypto_provider();
    shared();
    backported_by_the_real_flux(
        "prod-flux-backport-set",
        hotfix,
        HOTFIX,
        "ControllerCarriedChange",
    )
    .await;
}

#[tokio::test]
async fn a_fix_never_put_in_git_is_reverted_by_the_real_flux_when_its_window_ends() {
    install_crypto_provider();
    let driftgate = shared();
    let ns = "prod-flux-expire";
    let name = "prod-flux-expire";
    flux().publish(name, &namespace_with_api(ns));
    flux().kustomize(name, INTERVAL);
    wait_for_replicas(name, ns, 2, FIRST_APPLY).await;
    const REVERTED: &str = "driftgate_emergency_changes_reverted_total";
    let reverted_before = driftgate.counter(REVERTED, &[]);
    open_window(ns, "20s", "INC-915: api saturated, scaling out");
    kubectl(
        ALICE,
        &["scale", "deployment/api", "-n", ns, "--replicas=5"],
    )
    .ok();
    // Nobody backports it. The window ends, the expiry check notices (within 10 s), and the
    // real Flux's next reconcile is no longer held: it puts Git's 2 replicas back.
    let start = Instant::now();
    wait_for_replicas(name, ns, 2, Duration::from_secs(90)).await;
    eprintln!(
        "the real Flux reverted the fix {:.1}s after the scale (window 20s)",
        start.elapsed().as_secs_f64()
    );
    let record = record_in_phase(ns, Phase::Reverted).await;
    assert_eq!(
        transitions(&record),
        [
            ("Open", "Opened".to_owned()),
            ("AwaitingBackport", "Expired".to_owned()),
            ("Reverted", "ControllerRevertedChange".to_owned()),
        ],
        "{record:#?}"
    );
    assert_eq!(
        record.status.as_ref().unwrap().reverted_fields,
        ["spec.replicas"]
    );
    wait_for_event(
        ns,
        "EmergencyChangeReverted",
        "Deployment",
        "api",
        "reverted the emergency change to spec.replicas made under alice's break-glass window (reason \"INC-915: api saturated, scaling out\"): Git does not have it",
    )
    .await;
    let reverted_after = eventually("the reverted-changes metric to count it", || async {
        let now = driftgate.counter(REVERTED, &[]);
        (now > reverted_before).then_some(now)
    })
    .await;
    eprintln!("{REVERTED}: {reverted_before} -> {reverted_after}");
}

/// A ConfigMap `settings` in `namespace`, as Git declares it.
fn settings_config_map(namespace: &str) -> String {
    format!(
        "\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: {namespace}\ndata:\n  mode: fast\n"
    )
}

#[tokio::test]
async fn a_config_map_removed_from_git_is_pruned_by_the_real_flux_and_driftgate_admits_it() {
    install_crypto_provider();
    shared();
    let ns = "prod-flux-prune";
    let name = "prod-flux-prune";
    let with_settings = namespace_with_api(ns) + &settings_config_map(ns);
    flux().publish(name, &with_settings);
    flux().kustomize(name, INTERVAL);
    wait_for_replicas(name, ns, 2, FIRST_APPLY).await;
    let exists = || {
        control_plane()
            .kubectl(ADMIN, &["get", "configmap/settings", "-n", ns])
            .success()
    };
    assert!(exists(), "Flux applied the ConfigMap with the Deployment");
    // Git drops it: Flux's prune deletes it, as its own service account, which driftgate
    // admits as the controller's write (the webhook fails closed: a refusal would keep it).
    flux().publish(name, &namespace_with_api(ns));
    let start = Instant::now();
    while exists() {
        assert!(
            start.elapsed() < REVERT,
            "the real Flux did not prune ConfigMap {ns}/settings; log: {}",
            flux().log().display()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    eprintln!(
        "the real Flux pruned the ConfigMap {:.1}s after the revision",
        start.elapsed().as_secs_f64()
    );
    assert_eq!(replicas(ns), Some(2), "the Deployment stays");
}

/// PersistentVolumeClaim `data` in `namespace`, as Git declares it.
fn data_claim(namespace: &str) -> String {
    format!(
        "\n---\napiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: data\n  namespace: {namespace}\nspec:\n  accessModes: [ReadWriteOnce]\n  resources: {{requests: {{storage: 1Gi}}}}\n"
    )
}

/// Waits until Kustomization `name`'s Ready is False saying `words`: its message.
async fn not_ready_saying(name: &str, words: &str) -> String {
    let start = Instant::now();
    loop {
        let (status, message) = ready(name);
        if status == "False" && message.contains(words) {
            return message;
        }
        assert!(
            start.elapsed() < REVERT,
            "the Kustomization never said {words:?}: {status} {message}; log: {}",
            flux().log().display()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test]
async fn a_claim_removed_from_git_is_not_pruned_until_someone_marks_it() {
    install_crypto_provider();
    shared();
    let ns = "prod-flux-prune-pvc";
    flux().publish(ns, &(namespace_with_api(ns) + &data_claim(ns)));
    flux().kustomize(ns, INTERVAL);
    wait_for_replicas(ns, ns, 2, FIRST_APPLY).await;
    let claim = || {
        let out = control_plane().kubectl(ADMIN, &["get", "pvc/data", "-n", ns, "-o", "json"]);
        out.success()
            .then(|| serde_json::from_str::<serde_json::Value>(&out.stdout).unwrap())
    };
    assert!(claim().is_some(), "Flux applied the claim");

    // A change in Git drops the claim (a chart renamed it, a path moved): the real Flux prunes
    // it, and driftgate refuses the delete; the Kustomization says why.
    flux().publish(ns, &namespace_with_api(ns));
    let message = not_ready_saying(ns, "rule DeletionProtected").await;
    eprintln!("the real Flux reported the refused prune: {message}");
    assert!(
        message.contains(&format!(
            "Controller flux (system:serviceaccount:flux-system:kustomize-controller) may not delete PersistentVolumeClaim {ns}/data: the policy protects every PersistentVolumeClaim from deletion"
        )),
        "{message}"
    );
    tokio::time::sleep(Duration::from_secs(6)).await;
    let kept = claim().expect("the claim is still there");
    assert!(
        kept["metadata"]["deletionTimestamp"].is_null(),
        "not being deleted: {kept:#}"
    );

    // The deliberate act: someone marks it (or Git declares the mark), and the next prune goes.
    kubectl(
        ALICE,
        &[
            "annotate",
            "pvc/data",
            "-n",
            ns,
            "driftgate.dev/allow-deletion=true",
        ],
    )
    .ok();
    let start = Instant::now();
    while let Some(claim) = claim() {
        assert!(
            start.elapsed() < REVERT,
            "the marked claim was not pruned: {claim:#}; log: {}",
            flux().log().display()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    eprintln!(
        "the real Flux pruned the marked claim {:.1}s after the mark",
        start.elapsed().as_secs_f64()
    );
}

/// StatefulSet `web` in `namespace`, one replica, whose claims go with it
/// (`persistentVolumeClaimRetentionPolicy.whenDeleted: Delete`): the StatefulSet controller
/// gives claim `data-web-0` an ownerReference to it. There is no node: the Pod stays Pending,
/// which the controller's claim needs not.
pub(super) fn statefulset_with_claims(namespace: &str, name: &str) -> String {
    format!(
        "\n---\napiVersion: apps/v1\nkind: StatefulSet\nmetadata:\n  name: {name}\n  namespace: {namespace}\nspec:\n  replicas: 1\n  serviceName: {name}\n  selector: {{matchLabels: {{app: {name}}}}}\n  persistentVolumeClaimRetentionPolicy: {{whenDeleted: Delete, whenScaled: Retain}}\n  template:\n    metadata: {{labels: {{app: {name}}}}}\n    spec:\n      containers:\n        - name: {name}\n          image: {IMAGE}\n          volumeMounts: [{{name: data, mountPath: /data}}]\n  volumeClaimTemplates:\n    - metadata: {{name: data}}\n      spec:\n        accessModes: [ReadWriteOnce]\n        resources: {{requests: {{storage: 1Gi}}}}\n"
    )
}

/// The object as the admin reads it, as JSON; None when it does not exist.
pub(super) fn read_back(target: &str, namespace: &str) -> Option<serde_json::Value> {
    let out = control_plane().kubectl(ADMIN, &["get", target, "-n", namespace, "-o", "json"]);
    out.success()
        .then(|| serde_json::from_str(&out.stdout).expect("kubectl prints JSON"))
}

/// Waits until the StatefulSet controller has made claim `claim` with an ownerReference to
/// StatefulSet `name`; the StatefulSet's uid.
pub(super) async fn claim_owned_by_statefulset(namespace: &str, name: &str, claim: &str) -> String {
    let uid = eventually(&format!("StatefulSet {namespace}/{name}"), || async {
        read_back(&format!("statefulset/{name}"), namespace)
            .map(|set| set["metadata"]["uid"].as_str().unwrap().to_owned())
    })
    .await;
    eventually(
        &format!("claim {namespace}/{claim} owned by StatefulSet {name}"),
        || async {
            let claim = read_back(&format!("pvc/{claim}"), namespace)?;
            let owners = claim["metadata"]["ownerReferences"].as_array()?.clone();
            owners
                .iter()
                .any(|o| o["kind"] == "StatefulSet" && o["uid"] == uid.as_str())
                .then_some(())
        },
    )
    .await;
    uid
}

/// Issue 24, section 5: the garbage collector is exempt (it deletes what was admitted), so the
/// delete that starts a cascade is judged by what it would take with it.
#[tokio::test]
async fn pruning_a_statefulset_whose_claims_go_with_it_is_refused_until_the_claim_is_marked() {
    install_crypto_provider();
    shared();
    let ns = "prod-flux-prune-sts";
    let git = namespace_with_api(ns);
    flux().publish(ns, &(git.clone() + &statefulset_with_claims(ns, "web")));
    flux().kustomize(ns, INTERVAL);
    wait_for_replicas(ns, ns, 2, FIRST_APPLY).await;
    // The real kube-controller-manager's StatefulSet controller makes the claim, owned by the
    // StatefulSet as whenDeleted: Delete says; the Pod stays Pending (no node).
    let set_uid = claim_owned_by_statefulset(ns, "web", "data-web-0").await;
    let pod = read_back("pod/web-0", ns).expect("the StatefulSet controller made its Pod");
    eprintln!(
        "claim data-web-0 owned by StatefulSet web ({set_uid}); Pod web-0 {}",
        pod["status"]["phase"]
    );

    // Git drops the StatefulSet: the real Flux prunes it (propagationPolicy: Background), and
    // driftgate refuses, naming the claim the garbage collector would delete.
    flux().publish(ns, &git);
    let message = not_ready_saying(ns, "rule DeletionProtected").await;
    eprintln!("the real Flux reported the refused prune: {message}");
    assert!(
        message.contains(&format!(
            "Controller flux (system:serviceaccount:flux-system:kustomize-controller) may not delete StatefulSet {ns}/web: \
             the garbage collector would then delete PersistentVolumeClaim data-web-0, which it owns, and the policy protects it from deletion"
        )) && message.contains(&format!(
            "kubectl annotate persistentvolumeclaim/data-web-0 -n {ns} driftgate.dev/allow-deletion=true"
        )),
        "{message}"
    );
    // Two more intervals: the prune is retried and refused, and the claim is read back.
    tokio::time::sleep(Duration::from_secs(11)).await;
    let claim = read_back("pvc/data-web-0", ns).expect("the claim is still there");
    assert!(
        claim["metadata"]["deletionTimestamp"].is_null(),
        "not being deleted: {claim:#}"
    );
    let set = read_back("statefulset/web", ns).expect("the StatefulSet is still there");
    assert!(set["metadata"]["deletionTimestamp"].is_null(), "{set:#}");

    // The deliberate act, on the claim as for deleting it: the next prune is admitted, and the
    // garbage collector deletes the claim with the StatefulSet.
    kubectl(
        ALICE,
        &[
            "annotate",
            "pvc/data-web-0",
            "-n",
            ns,
            "driftgate.dev/allow-deletion=true",
        ],
    )
    .ok();
    let start = Instant::now();
    while read_back("pvc/data-web-0", ns).is_some() || read_back("statefulset/web", ns).is_some() {
        assert!(
            start.elapsed() < REVERT,
            "the marked claim did not go with its StatefulSet: {:#}; log: {}",
            read_back("pvc/data-web-0", ns).unwrap_or_default(),
            flux().log().display()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    eprintln!(
        "the real Flux pruned the StatefulSet and the garbage collector its claim {:.1}s after the mark",
        start.elapsed().as_secs_f64()
    );
    // It was the garbage collector, exempt, that deleted the claim.
    let log = shared().log_tail(usize::MAX);
    // What reading the cascade costs a review (two metadata lists: claims, StatefulSets), as
    // the log line of each of Flux's prunes says: reported, not asserted.
    let prunes: Vec<&str> = log
        .lines()
        .filter(|l| {
            l.contains(&format!(
                "operation=DELETE kind=StatefulSet subresource= namespace={ns} name=web user=system:serviceaccount:flux-system:kustomize-controller"
            ))
        })
        .filter_map(|l| l.split("latency_us=").nth(1)?.split_whitespace().next())
        .collect();
    eprintln!("latency of each of Flux's prunes of the StatefulSet, in µs: {prunes:?}");
    assert!(
        log.lines().any(|l| l.contains(&format!(
            "operation=DELETE kind=PersistentVolumeClaim subresource= namespace={ns} name=data-web-0 user=system:serviceaccount:kube-system:generic-garbage-collector"
        )) && l.contains("decision=\"allowed\"")),
        "no admitted delete of the claim by the garbage collector in driftgate's log"
    );
}

#[tokio::test]
async fn a_mass_prune_by_the_real_flux_stops_at_the_policys_limit() {
    install_crypto_provider();
    shared();
    let ns = "prod-flux-mass-prune";
    // The example policy's limit: 20 deletes by the controllers in a namespace within a minute.
    const LIMIT: usize = 20;
    let config_maps: String = (0..LIMIT + 5)
        .map(|i| {
            format!(
                "\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings-{i}\n  namespace: {ns}\ndata: {{n: \"{i}\"}}\n"
            )
        })
        .collect();
    flux().publish(ns, &(namespace_with_api(ns) + &config_maps));
    flux().kustomize(ns, INTERVAL);
    wait_for_replicas(ns, ns, 2, FIRST_APPLY).await;
    let settings = || {
        let out = control_plane().kubectl(ADMIN, &["get", "configmaps", "-n", ns, "-o", "name"]);
        out.stdout
            .lines()
            .filter(|l| l.starts_with("configmap/settings-"))
            .count()
    };
    eventually("Flux to apply every ConfigMap", || async {
        (settings() == LIMIT + 5).then_some(())
    })
    .await;

    // A revision that drops them all: the first 20 deletes are admitted, the rest refused.
    flux().publish(ns, &namespace_with_api(ns));
    let message = not_ready_saying(ns, "rule DeletionLimit").await;
    eprintln!("the real Flux reported the stopped prune: {message}");
    assert!(
        message.contains(&format!(
            "it deleted {LIMIT} objects in {ns} within 1m, the policy's limit"
        )),
        "{message}"
    );
    let left = settings();
    assert_eq!(left, 5, "20 deleted, 5 kept for now");
}
