//! Issue 14, section 1, optional: driftgate resumes an expired suspension itself. A driftgate of
//! this test's own runs with `--resume-expired-suspensions` (and a 2 s expiry check), as
//! driftgate's service account with the chart's RBAC for `suspensions.autoResume`, under a
//! policy whose `suspensions` cover only namespace [`FLUX_NS`]: the shared driftgate never
//! resumes anything (other tests wait for expired suspensions to stay), and this one touches
//! nothing outside that namespace.
//!
//! Its own webhook configuration, with a namespaceSelector on [`FLUX_NS`], sends it the writes
//! there: it judges alice's `driftgate suspend --for 20s` (Suspended) and then its own resume
//! (Resumed, and the Event naming driftgate's service account). The shared driftgate sees the
//! same writes and leaves them alone (no policy of its covers the namespace).
//!
//! After the expiry, the real kustomize-controller reconciles again: the revision published while
//! suspended is applied and a manual change undone. A second Kustomization is "suspended" by a
//! field whose absence suspends (this policy's own definition): driftgate cannot undo that, so it
//! leaves it alone and says so once (a SuspensionNotResumed Event).

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::harness::flux::{FLUX_NAMESPACE, flux};
use crate::harness::{
    ADMIN, ALICE, DRIFTGATE, Driftgate, control_plane, driftgate_cli, install_crypto_provider,
    shared, webhook_configuration,
};

use super::{kubectl, wait_for_event};

/// Where the Kustomizations live: the only namespace this test's policy counts suspensions in.
const FLUX_NS: &str = "resume-e2e-flux";
/// Where the resumed Kustomization applies its ConfigMap; nobody guards it, so the admin's
/// manual change is admitted and only Flux would undo it.
const APPS: &str = "resume-e2e-apps";
/// The Kustomization driftgate resumes, and its source.
const NAME: &str = "resume-e2e";
/// The Kustomization whose suspension driftgate cannot undo.
const UNDOABLE_NOT: &str = "resume-e2e-manual";
const REASON: &str = "INC-1415: flux fights the hotfix, suspending for a few seconds";
/// The first reconcile may wait for the controller's caches.
const APPLIED: Duration = Duration::from_secs(120);
/// A 20 s suspension is past its expiry, and resumed (expiry checks every 2 s), well within
/// this; a loaded machine is slow, not wrong.
const RESUMED_WITHIN: Duration = Duration::from_secs(120);

const POLICY: &str = r#"
apiVersion: driftgate.dev/v1alpha1
kind: GatePolicy
metadata: {name: resume-e2e}
spec:
  mode: Enforce
  # Guards no namespace of its own: it only judges and resumes suspensions in resume-e2e-flux.
  namespaces: {include: ["resume-e2e-guarded-none"]}
  controllers:
    - name: flux
      usernames: ["system:serviceaccount:flux-system:kustomize-controller"]
      fieldManagers: ["kustomize-controller"]
  breakGlass:
    maxDuration: 1h
    openers: {groups: [sre-oncall]}
  suspensions:
    namespaces: ["resume-e2e-flux"]
    fields:
      - kinds: [kustomize.toolkit.fluxcd.io/Kustomization]
        path: spec.suspend
        suspendedWhen: isTrue
      # What driftgate cannot undo, as Argo CD's removed automated sync: what the field held is
      # unknown. (Flux does not read spec.timeout as a suspension; this test's policy does.)
      - kinds: [kustomize.toolkit.fluxcd.io/Kustomization]
        path: spec.timeout
        suspendedWhen: absent
"#;

fn revision(log_level: &str, extra: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {APPS}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: {APPS}\ndata:\n  LOG_LEVEL: {log_level}\n{extra}"
    )
}

/// A Kustomization in [`FLUX_NS`] applying the ExternalArtifact `source` of flux-system every
/// 5 s, with `metadata` and `spec` lines added (indented).
fn kustomization_manifest(name: &str, source: &str, metadata: &str, spec: &str) -> String {
    format!(
        r#"apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata:
  name: {name}
  namespace: {FLUX_NS}
{metadata}spec:
  interval: 5s
  retryInterval: 5s
{spec}  prune: true
  path: ./
  sourceRef:
    kind: ExternalArtifact
    name: {source}
    namespace: {FLUX_NAMESPACE}
"#
    )
}

fn get(kind: &str, name: &str, namespace: &str) -> Value {
    let out = control_plane()
        .kubectl(ADMIN, &["get", kind, name, "-n", namespace, "-o", "json"])
        .ok();
    serde_json::from_str(&out.stdout).expect("kubectl prints JSON")
}

fn applied_revision() -> String {
    get("kustomization", NAME, FLUX_NS)["status"]["lastAppliedRevision"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

async fn wait_applied(revision: &str, within: Duration) {
    let start = Instant::now();
    while applied_revision() != revision {
        assert!(
            start.elapsed() < within,
            "Flux did not apply {revision} within {within:?} (last applied {:?}); log: {}",
            applied_revision(),
            flux().log().display()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn resumes(driftgate: &Driftgate, result: &str) -> f64 {
    driftgate.counter(
        "driftgate_suspension_resumes_total",
        &["policy=\"resume-e2e\"", &format!("result=\"{result}\"")],
    )
}

#[tokio::test]
async fn driftgate_resumes_an_expired_suspension_itself_and_the_real_flux_reconciles_again() {
    install_crypto_provider();
    shared();
    let plane = control_plane();
    plane
        .apply(
            ADMIN,
            &format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {FLUX_NS}\n"),
        )
        .ok();
    let first = flux().publish(NAME, &revision("info", ""));
    plane
        .apply(
            ADMIN,
            &kustomization_manifest(NAME, NAME, "", "  timeout: 1m\n"),
        )
        .ok();
    wait_applied(&first, APPLIED).await;

    let policy = plane.dir().join("policy-resume-e2e.yaml");
    std::fs::write(&policy, POLICY).expect("the policy is written");
    let driftgate = Driftgate::start_as(
        "resume",
        &policy,
        DRIFTGATE,
        &[
            "--resume-expired-suspensions",
            "--expiry-check-interval",
            "2s",
        ],
    );
    let mut configuration = webhook_configuration(
        "driftgate-e2e-resume",
        &driftgate.webhook_url(),
        driftgate.ca_pem(),
    );
    configuration["webhooks"][0]["namespaceSelector"] =
        json!({"matchLabels": {"kubernetes.io/metadata.name": FLUX_NS}});
    driftgate.register_probing(configuration, FLUX_NS);

    // alice suspends for 20 s, through this driftgate's webhook.
    let suspend = driftgate_cli(
        ALICE,
        &[
            "suspend",
            &format!("kustomization/{NAME}"),
            "-n",
            FLUX_NS,
            "--for",
            "20s",
            "--reason",
            REASON,
        ],
    )
    .ok();
    assert!(
        suspend.stdout.contains(&format!(
            "driftgate: Kustomization {FLUX_NS}/{NAME} suspended (spec.suspend) until "
        )),
        "{}",
        suspend.stdout
    );
    let suspended = Instant::now();
    let live = get("kustomization", NAME, FLUX_NS);
    let expiry = live["metadata"]["labels"]["driftgate.dev/break-glass"]
        .as_str()
        .expect("the suspension's expiry is set")
        .to_owned();
    // The same expiry on an object suspended in a way driftgate cannot undo (set at creation,
    // which nothing judges), and by spec.suspend, so that Flux leaves it alone.
    plane
        .apply(
            ADMIN,
            &kustomization_manifest(
                UNDOABLE_NOT,
                "resume-e2e-no-source",
                &format!(
                    "  labels: {{driftgate.dev/break-glass: \"{expiry}\"}}\n  annotations: {{driftgate.dev/break-glass-reason: \"{REASON}\"}}\n"
                ),
                "  suspend: true\n",
            ),
        )
        .ok();

    // While suspended, Flux applies nothing: a manual change stays and a new revision waits.
    kubectl(
        ADMIN,
        &[
            "patch",
            "configmap",
            "settings",
            "-n",
            APPS,
            "--type=merge",
            "-p",
            r#"{"data":{"LOG_LEVEL":"debug"}}"#,
        ],
    )
    .ok();
    let second = flux().publish(NAME, &revision("info", "  FEATURE: \"on\"\n"));

    // Past the expiry, driftgate resumes it; until then it stays suspended and nothing applies.
    let resumed_at = loop {
        let live = get("kustomization", NAME, FLUX_NS);
        if live["spec"]["suspend"] == false {
            break live;
        }
        assert_eq!(live["spec"]["suspend"], true, "{live}");
        assert_eq!(
            applied_revision(),
            first,
            "a suspended Kustomization applied; log: {}",
            flux().log().display()
        );
        assert!(
            suspended.elapsed() < RESUMED_WITHIN,
            "driftgate did not resume the suspension (until {expiry}) within {RESUMED_WITHIN:?}; its log:\n{}",
            driftgate.log_tail(40)
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    eprintln!(
        "driftgate resumed a 20 s suspension {:.1} s after driftgate suspend",
        suspended.elapsed().as_secs_f64()
    );
    let labels = &resumed_at["metadata"]["labels"];
    let annotations = &resumed_at["metadata"]["annotations"];
    assert!(
        labels.get("driftgate.dev/break-glass").is_none()
            && annotations
                .get("driftgate.dev/break-glass-reason")
                .is_none(),
        "{resumed_at}"
    );
    // Judged by this driftgate like anyone's resume: admitted, with the Event naming driftgate.
    wait_for_event(
        FLUX_NS,
        "Resumed",
        "Kustomization",
        NAME,
        &format!(
            "{} resumed the GitOps controller's reconciliation of Kustomization {FLUX_NS}/{NAME} (suspended until ",
            DRIFTGATE.user
        ),
    )
    .await;
    assert_eq!(resumes(&driftgate, "success"), 1.0);
    assert_eq!(resumes(&driftgate, "failure"), 0.0);

    // The real Flux reconciles again: the waiting revision applies and the manual change goes.
    let resumed = Instant::now();
    wait_applied(&second, APPLIED).await;
    eprintln!(
        "after driftgate's resume, the real Flux applied the waiting revision in {:.1} s",
        resumed.elapsed().as_secs_f64()
    );
    let data = get("configmap", "settings", APPS)["data"].clone();
    assert_eq!(
        (&data["LOG_LEVEL"], &data["FEATURE"]),
        (&json!("info"), &json!("on")),
        "{data}"
    );

    // The suspension it cannot undo is left as it was, and said so once.
    let event = wait_for_event(
        FLUX_NS,
        "SuspensionNotResumed",
        "Kustomization",
        UNDOABLE_NOT,
        &format!(
            "driftgate did not resume the GitOps controller's reconciliation of Kustomization {FLUX_NS}/{UNDOABLE_NOT}, suspended until "
        ),
    )
    .await;
    let note = event.note.unwrap_or_default();
    assert!(
        note.contains("it cannot undo spec.timeout (removed: what it held is unknown)"),
        "{note}"
    );
    let rounds_later = Instant::now();
    while rounds_later.elapsed() < Duration::from_secs(6) {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(resumes(&driftgate, "not_undoable"), 1.0);
    let left = get("kustomization", UNDOABLE_NOT, FLUX_NS);
    assert_eq!(left["spec"]["suspend"], true, "{left}");
    assert_eq!(
        left["metadata"]["labels"]["driftgate.dev/break-glass"],
        expiry.as_str(),
        "{left}"
    );
    plane
        .kubectl(
            ADMIN,
            &["delete", "kustomization", UNDOABLE_NOT, "-n", FLUX_NS],
        )
        .ok();
}
