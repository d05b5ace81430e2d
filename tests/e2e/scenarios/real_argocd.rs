//! The 3am story with Argo CD v3.2.11's real application-controller and repo-server (issue 26),
//! as `real_flux.rs` tells it with Flux: the example policy's `staging-argocd` (Audit,
//! `argo-staging-*`) and `production-argocd` (Enforce, `argo-prod-*`) name Argo CD as their
//! controller. Every Application here syncs automatically with prune and self-heal.
//!
//! What Argo CD does differently, and these tests rely on: a manual change triggers a self-heal
//! sync at once (it watches the objects it manages); a sync the API server refuses is retried
//! (by default 5 times, 5 s doubling; `syncPolicy.retry`) and then abandoned for that revision,
//! so once a refused self-heal has run out of retries Argo CD leaves the object alone until Git
//! moves.

use std::time::{Duration, Instant};

use driftgate::ledger::record::{BackportRequirement, Phase};
use serde_json::Value;

use crate::harness::argocd::{ARGOCD, AppOptions, ArgoApply, argocd};
use crate::harness::{
    ADMIN, ALICE, BOB, control_plane, driftgate_cli, install_crypto_provider, shared,
};

use super::{IMAGE, eventually, kubectl, namespace_with_api, records, wait_for_event};

/// The first sync waits for the controller's cluster cache (it starts with the first test
/// that uses it); later ones come within a refresh.
pub(super) const FIRST_SYNC: Duration = Duration::from_secs(180);
/// A revert or a refusal must come within this.
const WITHIN: Duration = Duration::from_secs(90);
/// The image of alice's 3am fix.
pub(super) const HOTFIX: &str = "registry.example/payments-api:1.4.3-hotfix";
/// The policy the shared driftgate serves for `argo-prod-*`.
const POLICY: &str = "production-argocd";

/// A field of Deployment `api` in `namespace` (a kubectl jsonpath); None when it cannot be read.
pub(super) fn deployment_field(namespace: &str, jsonpath: &str) -> Option<String> {
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

pub(super) fn replicas(namespace: &str) -> Option<u64> {
    deployment_field(namespace, ".spec.replicas")?.parse().ok()
}

pub(super) fn image(namespace: &str) -> String {
    deployment_field(namespace, ".spec.template.spec.containers[0].image")
        .expect("the Deployment can be read")
}

/// Deployment `api` in `namespace` as JSON, with its managedFields.
pub(super) fn deployment_json(namespace: &str) -> Value {
    let out = control_plane()
        .kubectl(
            ADMIN,
            &[
                "get",
                "deployment/api",
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

/// The Application's status as a failing test shows it: sync, operation and conditions.
pub(super) fn app_summary(name: &str) -> String {
    let app = argocd().application_json(name);
    let status = &app["status"];
    format!(
        "Application {name}: sync {} at {}, operation {} ({}), conditions {}; application-controller log: {}",
        status["sync"]["status"],
        status["sync"]["revision"],
        status["operationState"]["phase"],
        status["operationState"]["message"],
        status["conditions"],
        argocd().log().display()
    )
}

/// Polls the Deployment's replicas until they are `want`; the seconds it took.
pub(super) async fn wait_for_replicas(
    app: &str,
    namespace: &str,
    want: u64,
    within: Duration,
) -> f64 {
    let start = Instant::now();
    while start.elapsed() < within {
        if replicas(namespace) == Some(want) {
            return start.elapsed().as_secs_f64();
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    panic!(
        "Deployment {namespace}/api did not reach {want} replicas within {within:?} (now {:?}).\n{}",
        replicas(namespace),
        app_summary(app)
    );
}

/// Waits until `test` holds of Application `name` (as JSON); what it returned.
pub(super) async fn wait_for_app<T>(
    name: &str,
    what: &str,
    within: Duration,
    test: impl Fn(&Value) -> Option<T>,
) -> T {
    let start = Instant::now();
    loop {
        if let Some(found) = test(&argocd().application_json(name)) {
            return found;
        }
        assert!(
            start.elapsed() < within,
            "Application {name}: {what} not within {within:?}.\n{}",
            app_summary(name)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Publishes [`namespace_with_api`] for `ns` (also the repository's and the Application's
/// name), makes the Application and waits for its first sync; the revision.
pub(super) async fn deploy(ns: &str, options: AppOptions) -> String {
    let revision = argocd().publish(ns, &namespace_with_api(ns));
    argocd().application_with(ns, ns, options);
    let took = wait_for_replicas(ns, ns, 2, FIRST_SYNC).await;
    eprintln!("{ns}: the real Argo CD synced the first revision in {took:.1}s");
    revision
}

/// alice opens a window on Deployment `api` with the CLI, `for_` long.
pub(super) fn open_window(namespace: &str, for_: &str, reason: &str) {
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

/// alice's 3am fix under her window: more replicas and a hotfix image.
pub(super) fn hotfix(namespace: &str) {
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

/// The shared driftgate's review lines of Argo CD's writes of Deployment `api` in `namespace`
/// that rule `rule` decided.
pub(super) fn argo_reviews(namespace: &str, rule: &str) -> usize {
    shared()
        .log_tail(usize::MAX)
        .lines()
        .filter(|l| {
            l.contains(&format!(
                "kind=Deployment subresource= namespace={namespace} name=api user={}",
                ARGOCD.user
            )) && l.contains(&format!("rule=\"{rule}\""))
        })
        .count()
}

/// Waits until the sync operation's message (Argo CD's sync result) carries driftgate's
/// refusal with `rule`; the message.
pub(super) async fn refused_in_status(name: &str, rule: &str, within: Duration) -> String {
    wait_for_app(name, &format!("a sync refused by {rule}"), within, |app| {
        let message = app["status"]["operationState"]["message"].as_str()?;
        message
            .contains(&format!("rule {rule})"))
            .then(|| message.to_owned())
    })
    .await
}

#[tokio::test]
async fn under_audit_the_real_argo_cd_reverts_a_manual_scale_and_driftgate_reports_it() {
    install_crypto_provider();
    shared();
    let ns = "argo-staging-revert";
    deploy(ns, AppOptions::DEFAULT).await;
    // It is Argo CD's own write: its field manager owns the replicas (client-side apply).
    let deployment = deployment_json(ns);
    let managers = &deployment["metadata"]["managedFields"];
    assert!(
        managers
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["manager"] == "argocd-controller"
                && m["fieldsV1"]["f:spec"]["f:replicas"].is_object()),
        "{managers}"
    );

    // 3am: bob scales by hand. staging-argocd is Audit: admitted, with driftgate's warning.
    let scale = kubectl(BOB, &["scale", "deployment/api", "-n", ns, "--replicas=5"]).ok();
    assert!(
        scale
            .stderr
            .contains("driftgate audit (policy \"staging-argocd\" would deny in Enforce mode)"),
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
    // ... and Argo CD's self-heal undoes it: the failure driftgate exists for.
    let reverted = wait_for_replicas(ns, ns, 2, WITHIN).await;
    eprintln!("the real Argo CD's self-heal reverted bob's scale in {reverted:.1}s");
    assert!(
        argo_reviews(ns, "Controller") >= 2,
        "Argo CD's create and its self-heal were reviewed as the controller's: {:#?}",
        shared()
            .log_tail(usize::MAX)
            .lines()
            .filter(|l| l.contains(ns))
            .collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn under_enforce_argo_cds_self_heal_is_refused_and_the_fix_survives_three_attempts() {
    install_crypto_provider();
    shared();
    let ns = "argo-prod-fix";
    deploy(ns, AppOptions::DEFAULT).await;

    // alice opens a window with the CLI and makes the 3am fix: more replicas, a hotfix image.
    open_window(ns, "1h", "INC-926: api OOM, hotfix image");
    let fixed = Instant::now();
    hotfix(ns);

    // Argo CD sees the drift and self-heals at once: refused, and its sync result says why.
    let message = refused_in_status(ns, "ControllerHeld", WITHIN).await;
    eprintln!(
        "the real Argo CD reported the refusal after {:.1}s: {message}",
        fixed.elapsed().as_secs_f64()
    );
    assert!(
        message.contains(&format!(
            "Controller argocd ({}) may not update Deployment {ns}/api while the break-glass window on the object (until ",
            ARGOCD.user
        )) && message.contains(&format!(
            "reason \"INC-926: api OOM, hotfix image\") holds it (policy \"{POLICY}\", rule ControllerHeld). Backport the emergency change to Git"
        )),
        "{message}"
    );
    // Argo CD retries the self-heal (5 s, then 10 s, then 20 s apart): three attempts refused,
    // and the fix stays in place throughout.
    let start = Instant::now();
    loop {
        assert_eq!(replicas(ns), Some(5));
        assert_eq!(image(ns), HOTFIX);
        let refused = argo_reviews(ns, "ControllerHeld");
        if refused >= 3 {
            eprintln!(
                "{refused} self-heal writes refused over {:.1}s; the fix is still in place",
                fixed.elapsed().as_secs_f64()
            );
            break;
        }
        assert!(
            start.elapsed() < WITHIN,
            "only {refused} refused self-heal writes.\n{}",
            app_summary(ns)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let app = argocd().application_json(ns);
    assert_eq!(
        app["status"]["sync"]["status"],
        "OutOfSync",
        "{}",
        app_summary(ns)
    );
    assert!(
        app["status"]["operationState"]["retryCount"].as_i64() >= Some(2),
        "{}",
        app_summary(ns)
    );
}

/// The record of `namespace`'s window once it reached `phase`.
pub(super) async fn record_in_phase(namespace: &str, phase: Phase) -> BackportRequirement {
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
pub(super) fn transitions(record: &BackportRequirement) -> Vec<(&'static str, String)> {
    record
        .status
        .iter()
        .flat_map(|s| &s.transitions)
        .map(|t| (t.phase.word(), t.reason.clone()))
        .collect()
}

/// With Argo CD's default retries the refused self-heal is still being retried when a short
/// window ends: the next retry is admitted and puts Git's value back.
#[tokio::test]
async fn a_fix_never_put_in_git_is_reverted_by_argo_cds_retry_when_its_window_ends() {
    install_crypto_provider();
    let driftgate = shared();
    let ns = "argo-prod-expire";
    deploy(ns, AppOptions::DEFAULT).await;
    const REVERTED: &str = "driftgate_emergency_changes_reverted_total";
    let reverted_before = driftgate.counter(REVERTED, &[]);
    open_window(ns, "20s", "INC-927: api saturated, scaling out");
    let start = Instant::now();
    kubectl(
        ALICE,
        &["scale", "deployment/api", "-n", ns, "--replicas=5"],
    )
    .ok();
    refused_in_status(ns, "ControllerHeld", WITHIN).await;
    // Nobody backports it. The window ends, and Argo CD's next retry is no longer held.
    wait_for_replicas(ns, ns, 2, Duration::from_secs(120)).await;
    eprintln!(
        "the real Argo CD reverted the fix {:.1}s after the scale (window 20s)",
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
        &format!(
            "The GitOps controller ({}) reverted the emergency change to spec.replicas made under alice's break-glass window (reason \"INC-927: api saturated, scaling out\"): Git does not have it",
            ARGOCD.user
        ),
    )
    .await;
    let reverted_after = eventually("the reverted-changes metric to count it", || async {
        let now = driftgate.counter(REVERTED, &[]);
        (now > reverted_before).then_some(now)
    })
    .await;
    eprintln!("{REVERTED}: {reverted_before} -> {reverted_after}");
}

/// PersistentVolumeClaim `data` in `namespace`, as Git declares it.
fn data_claim(namespace: &str) -> String {
    format!(
        "\n---\napiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: data\n  namespace: {namespace}\nspec:\n  accessModes: [ReadWriteOnce]\n  resources: {{requests: {{storage: 1Gi}}}}\n"
    )
}

#[tokio::test]
async fn a_claim_removed_from_git_is_not_pruned_by_argo_cd_until_someone_marks_it() {
    install_crypto_provider();
    shared();
    let ns = "argo-prod-prune-pvc";
    argocd().publish(ns, &(namespace_with_api(ns) + &data_claim(ns)));
    argocd().application_with(ns, ns, AppOptions::DEFAULT);
    wait_for_replicas(ns, ns, 2, FIRST_SYNC).await;
    let claim = || {
        let out = control_plane().kubectl(ADMIN, &["get", "pvc/data", "-n", ns, "-o", "json"]);
        out.success()
            .then(|| serde_json::from_str::<Value>(&out.stdout).unwrap())
    };
    eventually("Argo CD to create the claim", || async { claim() }).await;

    // A commit drops the claim: Argo CD prunes it (propagationPolicy Foreground), driftgate
    // refuses, and the Application's sync result says why.
    argocd().publish(ns, &namespace_with_api(ns));
    let message = refused_in_status(ns, "DeletionProtected", WITHIN).await;
    eprintln!("the real Argo CD reported the refused prune: {message}");
    assert!(
        message.contains(&format!(
            "Controller argocd ({}) may not delete PersistentVolumeClaim {ns}/data: the policy protects every PersistentVolumeClaim from deletion",
            ARGOCD.user
        )) && message.contains(&format!(
            "kubectl annotate persistentvolumeclaim/data -n {ns} driftgate.dev/allow-deletion=true"
        )),
        "{message}"
    );
    let app = argocd().application_json(ns);
    let resources = app["status"]["operationState"]["syncResult"]["resources"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        resources
            .iter()
            .any(|r| r["kind"] == "PersistentVolumeClaim"
                && r["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("rule DeletionProtected"))),
        "the claim's own sync result carries the sentence: {resources:#?}"
    );
    tokio::time::sleep(Duration::from_secs(6)).await;
    let kept = claim().expect("the claim is still there");
    assert!(
        kept["metadata"]["deletionTimestamp"].is_null(),
        "not being deleted: {kept:#}"
    );

    // The deliberate act: alice marks it, and Argo CD's next retry prunes it.
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
            start.elapsed() < WITHIN,
            "the marked claim was not pruned: {claim:#}\n{}",
            app_summary(ns)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    eprintln!(
        "the real Argo CD pruned the marked claim {:.1}s after the mark",
        start.elapsed().as_secs_f64()
    );
    assert_eq!(replicas(ns), Some(2), "the Deployment stays");
}

/// Git for `ns` with alice's fix in it: 5 replicas and the hotfix image, and `extra` YAML
/// appended to the Deployment's metadata (another change, so that live differs from Git).
pub(super) fn git_with_the_fix(ns: &str, extra_annotation: Option<&str>) -> String {
    let mut git = namespace_with_api(ns)
        .replace("replicas: 2", "replicas: 5")
        .replace(IMAGE, HOTFIX);
    if let Some(annotation) = extra_annotation {
        git = git.replace(
            &format!("  name: api\n  namespace: {ns}\n"),
            &format!("  name: api\n  namespace: {ns}\n  annotations: {{{annotation}}}\n"),
        );
    }
    git
}

/// The 3am story up to the pull request, with the real Argo CD: the fix is made under alice's
/// window, Argo CD's self-heal is refused until its retries run out (`retry.limit: 1`: two
/// attempts, 5 s apart; then it leaves that revision alone), and alice closes the window. The
/// record awaits backport; Argo CD still says OutOfSync at the revision it deployed.
async fn fixed_and_closed(ns: &str) -> String {
    let deployed = deploy(
        ns,
        AppOptions {
            retry_limit: Some(1),
            ..AppOptions::DEFAULT
        },
    )
    .await;
    open_window(ns, "1h", "INC-928: api OOM, hotfix image");
    hotfix(ns);
    refused_in_status(ns, "ControllerHeld", WITHIN).await;
    wait_for_app(
        ns,
        "the refused self-heal to run out of retries",
        WITHIN,
        |app| (app["status"]["operationState"]["phase"] == "Failed").then_some(()),
    )
    .await;
    driftgate_cli(ALICE, &["break-glass", "close", "deployment/api", "-n", ns]).ok();
    let record = record_in_phase(ns, Phase::AwaitingBackport).await;
    assert_eq!(
        transitions(&record),
        [
            ("Open", "Opened".to_owned()),
            ("AwaitingBackport", "Closed".to_owned())
        ]
    );
    // Argo CD does not try the failed revision again: the fix stays though nothing holds it.
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!((replicas(ns), image(ns)), (Some(5), HOTFIX.to_owned()));
    deployed
}

/// Git gets the fix and another change (an annotation): live differs from Git, so Argo CD
/// syncs and patches the object. Its patch carries only the annotation (client-side apply
/// sends what differs), so `spec.replicas` stays kubectl's in managedFields; the configuration
/// it applied, in its own last-applied annotation, declares the fix.
#[tokio::test]
async fn the_fix_put_in_git_is_backported_by_argo_cds_sync_carrying_it() {
    install_crypto_provider();
    shared();
    let ns = "argo-prod-backport-sync";
    fixed_and_closed(ns).await;
    let revision = argocd().publish(ns, &git_with_the_fix(ns, Some("team: payments")));
    let start = Instant::now();
    let record = record_in_phase(ns, Phase::Backported).await;
    eprintln!(
        "{ns}: the record was Backported by Argo CD's sync {:.1}s after the commit",
        start.elapsed().as_secs_f64()
    );
    assert_eq!(
        transitions(&record),
        [
            ("Open", "Opened".to_owned()),
            ("AwaitingBackport", "Closed".to_owned()),
            ("Backported", "ControllerCarriedChange".to_owned()),
        ],
        "{record:#?}"
    );
    wait_for_event(
        ns,
        "BackportConfirmed",
        "Deployment",
        "api",
        &format!("The GitOps controller ({}) applied the values", ARGOCD.user),
    )
    .await;
    let deployment = deployment_json(ns);
    assert_eq!(deployment["metadata"]["annotations"]["team"], "payments");
    let managers = deployment["metadata"]["managedFields"].as_array().unwrap();
    let argocd_owns_replicas = managers.iter().any(|m| {
        m["manager"] == "argocd-controller" && m["fieldsV1"]["f:spec"]["f:replicas"].is_object()
    });
    assert!(
        !argocd_owns_replicas,
        "the replicas stay kubectl's: only the applied configuration says Git has them"
    );
    assert_eq!((replicas(ns), image(ns)), (Some(5), HOTFIX.to_owned()));
    wait_for_app(ns, "Synced at the fix's revision", WITHIN, |app| {
        (app["status"]["sync"]["status"] == "Synced"
            && app["status"]["sync"]["revision"] == revision.as_str())
        .then_some(())
    })
    .await;
}

/// Git gets exactly the fix: live already equals Git, and Argo CD writes nothing (its
/// comparison finds the Application Synced, and automated sync skips a Synced Application). The
/// record is settled on what the API server holds: the Application Synced at a revision it did
/// not deploy, compared after the change, the object carrying the values its last-applied
/// configuration declares.
#[tokio::test]
async fn the_fix_put_in_git_is_backported_though_argo_cd_writes_nothing() {
    install_crypto_provider();
    shared();
    let ns = "argo-prod-backport-synced";
    let deployed = fixed_and_closed(ns).await;
    let writes_before = argo_reviews(ns, "Controller");
    let revision = argocd().publish(ns, &git_with_the_fix(ns, None));
    let start = Instant::now();
    let record = record_in_phase(ns, Phase::Backported).await;
    eprintln!(
        "{ns}: the record was Backported on Argo CD's status {:.1}s after the commit",
        start.elapsed().as_secs_f64()
    );
    assert_eq!(
        transitions(&record),
        [
            ("Open", "Opened".to_owned()),
            ("AwaitingBackport", "Closed".to_owned()),
            ("Backported", "ControllerFoundNothingToSync".to_owned()),
        ],
        "{record:#?}"
    );
    wait_for_event(
        ns,
        "BackportConfirmed",
        "Deployment",
        "api",
        &format!(
            "Argo CD's Application argocd/{ns} reports Synced at revision {}, not the revision it last deployed ({})",
            &revision[..12],
            &deployed[..12]
        ),
    )
    .await;
    let app = argocd().application_json(ns);
    assert_eq!(
        app["status"]["sync"]["status"],
        "Synced",
        "{}",
        app_summary(ns)
    );
    assert_eq!(app["status"]["sync"]["revision"], revision.as_str());
    assert_eq!(
        argo_reviews(ns, "Controller"),
        writes_before,
        "Argo CD wrote the Deployment: this is not the case where it writes nothing"
    );
    assert_eq!((replicas(ns), image(ns)), (Some(5), HOTFIX.to_owned()));
}

/// The forged-review test's policy: Argo CD's production rules for its namespace, and Argo CD's
/// Applications guarded in argocd (so that their status is the application-controller's word;
/// the shared driftgate judges the real writes there).
fn forged_policy(ns: &str) -> String {
    let example = std::fs::read_to_string(crate::harness::repo_path("policies/example.yaml"))
        .expect("the example policy reads");
    let documents: Vec<&str> = example.split("\n---\n").collect();
    let named = |name: &str| {
        documents
            .iter()
            .find(|d| d.contains(&format!("\n  name: {name}\n")))
            .unwrap_or_else(|| panic!("the example has policy {name}"))
            .to_string()
    };
    let production = named(POLICY)
        .replace("name: production-argocd", "name: forge-argocd")
        .replace(
            "include: [\"argo-prod-*\"]",
            &format!("include: [\"{ns}\"]"),
        );
    format!("{production}\n---\n{}", named("gitops-argocd"))
}

/// A review is a claim; the API server is the truth. The evidence for "Argo CD writes nothing"
/// is read from the API server, so reviews that claim it settle nothing: with a driftgate of its
/// own that requires no client certificate (the chart's default), forged reviews of the
/// Application reported Synced at a new revision and of Argo CD writing (and dry-running) the
/// Deployment with the fix in its last-applied configuration leave the record awaiting
/// backport; bob's own write of such a status is refused by the shared driftgate
/// (`gitops-argocd`). The real commit of the fix then settles it, in the same mode.
#[tokio::test]
async fn a_forged_review_cannot_claim_that_argo_cd_found_nothing_to_sync() {
    use crate::harness::forge::{self, DEPLOYMENT, Resource, forge};
    install_crypto_provider();
    shared();
    let ns = "forge-argocd-e2e";
    control_plane()
        .kubectl(ADMIN, &["create", "namespace", ns])
        .ok();
    let policy = control_plane().dir().join("forge-argocd-policy.yaml");
    std::fs::write(&policy, forged_policy(ns)).expect("the policy is written");
    let driftgate = crate::harness::Driftgate::start(
        "forge-argocd",
        &policy,
        &["--expiry-check-interval", "2s"],
    );
    let mut configuration = crate::harness::webhook_configuration(
        "driftgate-e2e-forge-argocd",
        &driftgate.webhook_url(),
        driftgate.ca_pem(),
    );
    configuration["webhooks"][0]["namespaceSelector"] =
        serde_json::json!({"matchLabels": {"kubernetes.io/metadata.name": ns}});
    driftgate.register_probing(configuration, ns);
    fixed_and_closed(ns).await;

    // The forger, as Argo CD: the Application Synced at a revision it never deployed, listing
    // the Deployment Synced, compared just now.
    const APPLICATION: Resource = Resource {
        group: "argoproj.io",
        version: "v1alpha1",
        kind: "Application",
        plural: "applications",
    };
    let app = argocd().application_json(ns);
    let mut claimed = app.clone();
    claimed["status"]["sync"] = serde_json::json!({
        "status": "Synced",
        "revision": "f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0",
        "comparedTo": {"source": app["spec"]["source"], "destination": app["spec"]["destination"]},
    });
    claimed["status"]["reconciledAt"] = serde_json::json!(
        jiff::Timestamp::now()
            .checked_add(jiff::SignedDuration::from_secs(5))
            .unwrap()
            .round(jiff::Unit::Second)
            .unwrap()
            .to_string()
    );
    for resource in claimed["status"]["resources"].as_array_mut().unwrap() {
        resource["status"] = serde_json::json!("Synced");
    }
    let update_options =
        serde_json::json!({"apiVersion": "meta.k8s.io/v1", "kind": "UpdateOptions"});
    let answer = forge(
        &driftgate,
        forge::request(
            APPLICATION,
            "UPDATE",
            crate::harness::argocd::ARGOCD_NAMESPACE,
            ns,
            ARGOCD,
            (claimed, app.clone()),
            update_options,
        ),
    );
    eprintln!("the forged Application review was answered: {answer}");
    // ... and Argo CD applying (for real, and dry-running) the Deployment with the fix declared.
    let live = deployment_json(ns);
    let mut carried = live.clone();
    let applied = git_with_the_fix(ns, None);
    let manifest = applied.split("---").last().unwrap();
    let declared: Value = serde_saphyr::from_str(manifest).expect("the manifest is YAML");
    carried["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] =
        serde_json::json!(declared.to_string());
    for dry_run in [false, true] {
        let mut request = forge::request(
            DEPLOYMENT,
            "UPDATE",
            ns,
            "api",
            ARGOCD,
            (carried.clone(), live.clone()),
            forge::patch_options("argocd-controller"),
        );
        request["dryRun"] = serde_json::json!(dry_run);
        let answer = forge(&driftgate, request);
        eprintln!("the forged Deployment review (dry run {dry_run}) was answered: {answer}");
    }
    // Several expiry checks (2 s) and more than a read-back later, the record still awaits.
    tokio::time::sleep(Duration::from_secs(12)).await;
    let awaiting: Vec<_> = records(ns)
        .await
        .into_iter()
        .map(|r| r.status.map(|s| s.phase))
        .collect();
    assert_eq!(
        awaiting,
        [Some(Phase::AwaitingBackport)],
        "{}",
        driftgate.log_tail(40)
    );

    // The truth is guarded: bob may not write the Application's status himself.
    let forged_status = serde_json::json!({"status": {"sync": {"status": "Synced", "revision": "f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0"}}});
    let refused = kubectl(
        BOB,
        &[
            "patch",
            "application",
            ns,
            "-n",
            crate::harness::argocd::ARGOCD_NAMESPACE,
            "--type=merge",
            "-p",
            &forged_status.to_string(),
        ],
    )
    .failed();
    assert!(
        refused.stderr.contains(&format!(
            "bob may not update Application {}/{ns}",
            crate::harness::argocd::ARGOCD_NAMESPACE
        )) && refused
            .stderr
            .contains("policy \"gitops-argocd\", rule NotPermitted"),
        "{}",
        refused.stderr
    );
    let app = argocd().application_json(ns);
    assert_eq!(
        app["status"]["sync"]["status"],
        "OutOfSync",
        "{}",
        app_summary(ns)
    );

    // The real path, in the same mode: the fix committed, Argo CD compares and writes nothing.
    argocd().publish(ns, &git_with_the_fix(ns, None));
    let record = record_in_phase(ns, Phase::Backported).await;
    assert_eq!(
        transitions(&record).last(),
        Some(&("Backported", "ControllerFoundNothingToSync".to_owned())),
        "{record:#?}"
    );
}

/// Issue 26, section 8: with the `ServerSideApply=true` sync option Argo CD applies every object
/// of a sync server-side, with force, taking back every field Git declares (alice's replicas
/// included) into its own Apply entry. But it still writes nothing while Git equals the object,
/// and its structured-merge diff keeps a field Git dropped while another manager owns it, so
/// its Synced status proves nothing: the record waits for Argo CD's next sync, which any change
/// to the Application's manifests starts.
#[tokio::test]
async fn with_server_side_apply_the_fix_is_backported_by_the_next_sync_not_by_synced_status() {
    install_crypto_provider();
    shared();
    let ns = "argo-prod-backport-ssa";
    let settings = |level: &str| {
        format!(
            "\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: {ns}\ndata:\n  LOG_LEVEL: {level}\n"
        )
    };
    argocd().publish(ns, &(namespace_with_api(ns) + &settings("info")));
    argocd().application_with(
        ns,
        ns,
        AppOptions {
            apply: ArgoApply::ServerSide,
            retry_limit: Some(1),
            ..AppOptions::DEFAULT
        },
    );
    wait_for_replicas(ns, ns, 2, FIRST_SYNC).await;
    open_window(ns, "1h", "INC-929: api OOM, hotfix image");
    hotfix(ns);
    refused_in_status(ns, "ControllerHeld", WITHIN).await;
    wait_for_app(
        ns,
        "the refused self-heal to run out of retries",
        WITHIN,
        |app| (app["status"]["operationState"]["phase"] == "Failed").then_some(()),
    )
    .await;
    driftgate_cli(ALICE, &["break-glass", "close", "deployment/api", "-n", ns]).ok();
    record_in_phase(ns, Phase::AwaitingBackport).await;

    // Git gets exactly the fix: Synced, nothing written, and nothing settled.
    let fixed = argocd().publish(ns, &(git_with_the_fix(ns, None) + &settings("info")));
    wait_for_app(ns, "Synced at the fix", WITHIN, |app| {
        (app["status"]["sync"]["status"] == "Synced"
            && app["status"]["sync"]["revision"] == fixed.as_str())
        .then_some(())
    })
    .await;
    let synced = Instant::now();
    while synced.elapsed() < Duration::from_secs(15) {
        let phases: Vec<_> = records(ns)
            .await
            .into_iter()
            .map(|r| r.status.map(|s| s.phase))
            .collect();
        assert_eq!(phases, [Some(Phase::AwaitingBackport)]);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }

    // Another change in Git: Argo CD syncs and applies every object, the Deployment too.
    argocd().publish(ns, &(git_with_the_fix(ns, None) + &settings("debug")));
    let record = record_in_phase(ns, Phase::Backported).await;
    assert_eq!(
        transitions(&record).last(),
        Some(&("Backported", "ControllerCarriedChange".to_owned())),
        "{record:#?}"
    );
    let deployment = deployment_json(ns);
    let managers = deployment["metadata"]["managedFields"].as_array().unwrap();
    assert!(
        managers.iter().any(|m| m["manager"] == "argocd-controller"
            && m["operation"] == "Apply"
            && m["fieldsV1"]["f:spec"]["f:replicas"].is_object()),
        "server-side apply took the replicas back: {managers:#?}"
    );
}

/// Issue 26, section 8: with the compare option `ServerSideDiff=true`, Argo CD compares by
/// server-side dry runs of its apply, which reach driftgate as the controller's writes. Under a
/// window they are refused like its writes, so Argo CD cannot compare the Application at all
/// (ComparisonError carrying driftgate's sentence) and never self-heals; once the fix is in Git
/// and the window closed, its dry runs carry the values, and two of them settle the record as
/// Flux's do (ControllerFoundNothingToApply; the shared driftgate authenticates the API server).
#[tokio::test]
async fn with_server_side_diff_argo_cds_dry_runs_are_held_and_then_settle_the_backport() {
    install_crypto_provider();
    shared();
    let ns = "argo-prod-backport-ssd";
    deploy(
        ns,
        AppOptions {
            server_side_diff: true,
            ..AppOptions::DEFAULT
        },
    )
    .await;
    let dry_runs = || {
        shared()
            .log_tail(usize::MAX)
            .lines()
            .filter(|l| {
                l.contains(&format!(
                    "kind=Deployment subresource= namespace={ns} name=api user={}",
                    ARGOCD.user
                )) && l.contains("dry_run=true")
            })
            .count()
    };
    eventually(
        "Argo CD's server-side dry runs to reach driftgate",
        || async { (dry_runs() > 0).then_some(()) },
    )
    .await;
    open_window(ns, "1h", "INC-930: api OOM, scaling out");
    kubectl(
        ALICE,
        &["scale", "deployment/api", "-n", ns, "--replicas=5"],
    )
    .ok();
    let message = wait_for_app(ns, "a comparison refused by driftgate", WITHIN, |app| {
        app["status"]["conditions"]
            .as_array()?
            .iter()
            .filter(|c| c["type"] == "ComparisonError")
            .filter_map(|c| c["message"].as_str())
            .find(|m| m.contains("rule ControllerHeld)"))
            .map(str::to_owned)
    })
    .await;
    eprintln!("with server-side diff, the real Argo CD reports: {message}");
    assert_eq!(replicas(ns), Some(5));

    // The fix put in Git, the window closed: Argo CD's next dry runs carry it.
    let revision = argocd().publish(ns, &git_with_the_fix(ns, None).replace(HOTFIX, IMAGE));
    driftgate_cli(ALICE, &["break-glass", "close", "deployment/api", "-n", ns]).ok();
    record_in_phase(ns, Phase::AwaitingBackport).await;
    let start = Instant::now();
    let record = loop {
        if let Some(record) = records(ns).await.into_iter().find(|r| {
            r.status
                .as_ref()
                .is_some_and(|s| s.phase == Phase::Backported)
        }) {
            break record;
        }
        assert!(
            start.elapsed() < WITHIN,
            "not Backported by Argo CD's dry runs.\n{}",
            app_summary(ns)
        );
        // A requested refresh misses Argo CD's diff cache: it dry-runs again.
        control_plane().kubectl(
            ADMIN,
            &[
                "annotate",
                "--overwrite",
                "application",
                ns,
                "-n",
                crate::harness::argocd::ARGOCD_NAMESPACE,
                "argocd.argoproj.io/refresh=normal",
            ],
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    };
    // Two of Argo CD's dry runs carrying the fix settle it; or, when its sync of the new
    // revision comes first, that sync's apply does (its last-applied annotation changes, so the
    // patch is not empty): seen once on a loaded machine. Either is Git caught up, seen in what
    // the controller sent; a comparison's status alone never settles it here.
    let settled_by = transitions(&record).last().cloned();
    assert!(
        matches!(
            settled_by
                .as_ref()
                .map(|(phase, reason)| (*phase, reason.as_str())),
            Some((
                "Backported",
                "ControllerFoundNothingToApply" | "ControllerCarriedChange"
            ))
        ),
        "{record:#?}"
    );
    eprintln!("{ns}: {settled_by:?}");
    wait_for_app(ns, "Synced at the fix", WITHIN, |app| {
        (app["status"]["sync"]["status"] == "Synced"
            && app["status"]["sync"]["revision"] == revision.as_str())
        .then_some(())
    })
    .await;
    assert_eq!(replicas(ns), Some(5));
}
