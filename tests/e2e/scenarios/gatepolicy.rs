//! Policies as GatePolicy objects: the chart's CRD on the real API server, a driftgate of this
//! test's own with `--gatepolicies`, its gate narrowed to this test's namespace and the chart's
//! policies webhook. GatePolicy objects are cluster-scoped and only this driftgate reads them,
//! so their names are this test's own (`e2e-gp-*`).

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use driftgate::metrics::Metrics;
use driftgate::policy::{PolicyMode, PolicySet};
use driftgate::tasks::gatepolicies::{GatePolicyHealth, GatePolicyWatch, PolicySources};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::{establish_crd, eventually, kubectl, show};
use crate::harness::{
    ADMIN, BOB, DRIFTGATE, Driftgate, KubectlOutput, control_plane, install_crypto_provider,
    policies_webhook_configuration, repo_path, webhook_configuration,
};

const NS: &str = "gp-team";
const POLICY: &str = "e2e-gp-team";
const BAD: &str = "e2e-gp-bad";
const POLICIES_WEBHOOK: &str = "policies.driftgate.dev";
const FOLLOWER: &str = "e2e-gp-follower";

/// A GatePolicy document; the same text is a policy file.
fn gatepolicy(name: &str, spec: &str) -> String {
    format!(
        "apiVersion: driftgate.dev/v1alpha1\nkind: GatePolicy\nmetadata:\n  name: {name}\nspec:\n{spec}"
    )
}

fn team_spec(mode: &str) -> String {
    format!(
        "  mode: {mode}\n  namespaces:\n    include: [{NS}]\n  resources:\n    include: [core/ConfigMap]\n  controllers:\n    - name: flux\n      usernames: [\"system:serviceaccount:flux-system:kustomize-controller\"]\n"
    )
}

const BAD_SPEC: &str = "  namespaces:\n    include: []\n  breakGlass:\n    maxDuration: forever\n    openers:\n      groups: [sre-oncall]\n";

fn gatepolicy_json(name: &str) -> Value {
    let out = control_plane()
        .kubectl(ADMIN, &["get", "gatepolicy", name, "-o", "json"])
        .ok();
    serde_json::from_str(&out.stdout).expect("kubectl prints JSON")
}

/// The Ready condition once driftgate has written it for `generation`.
async fn ready_at(name: &str, generation: i64) -> Value {
    eventually(
        &format!("{name}'s status for generation {generation}"),
        || async {
            let object = gatepolicy_json(name);
            let ready = object["status"]["conditions"]
                .as_array()?
                .iter()
                .find(|c| c["type"] == "Ready")?
                .clone();
            (object["metadata"]["generation"] == generation
                && object["status"]["observedGeneration"] == generation
                && ready["observedGeneration"] == generation)
                .then_some(ready)
        },
    )
    .await
}

fn bob_writes(value: &str) -> KubectlOutput {
    let manifest = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: {NS}\ndata:\n  key: {value}\n"
    );
    control_plane().kubectl_with_stdin(BOB, &["apply", "-f", "-"], Some(&manifest))
}

/// `field: problem` of each error `driftgate policy check` prints for `text` as a file.
fn policy_check_problems(text: &str) -> Vec<String> {
    let file = std::env::temp_dir().join(format!("driftgate-e2e-gp-{}.yaml", std::process::id()));
    std::fs::write(&file, text).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_driftgate"))
        .args(["policy", "check"])
        .arg(&file)
        .output()
        .expect("the driftgate binary runs");
    let _ = std::fs::remove_file(&file);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !out.status.success(),
        "policy check accepted the bad policy: {stderr}"
    );
    let prefix = format!("{}:", file.display());
    let problems: Vec<String> = stderr
        .lines()
        .filter_map(|line| line.strip_prefix(&prefix))
        .map(|rest| {
            let rest = rest.split_once(": ").expect("file:line: field: problem").1;
            rest.split(" (document ").next().unwrap().to_owned()
        })
        .collect();
    assert!(problems.len() >= 2, "{stderr}");
    problems
}

fn apply_as_admin(manifest: &str) {
    show(control_plane().kubectl_with_stdin(ADMIN, &["apply", "-f", "-"], Some(manifest))).ok();
}

fn active_mode(active: &ArcSwap<PolicySet>, name: &str) -> Option<PolicyMode> {
    active
        .load()
        .policies()
        .iter()
        .find(|p| p.name == name)
        .map(|p| p.mode)
}

/// A replica that is not the leader compiles and serves GatePolicies but writes no status,
/// until it leads. Run before this test's driftgate starts: that one leads, and would write.
async fn a_follower_writes_no_status_until_it_leads() {
    let active = Arc::new(ArcSwap::from_pointee(PolicySet::default()));
    let (lead, leader) = tokio::sync::watch::channel(false);
    let shutdown = CancellationToken::new();
    let watch = GatePolicyWatch {
        client: control_plane().client(DRIFTGATE).await,
        sources: Arc::new(PolicySources::new(active.clone(), false)),
        health: Arc::new(GatePolicyHealth::default()),
        metrics: Arc::new(Metrics::new()),
        leader,
        resync: Duration::from_secs(3600),
    };
    let task = watch.spawn(shutdown.clone());
    apply_as_admin(&gatepolicy(FOLLOWER, &team_spec("Enforce")));
    eventually("the follower serves generation 1", || async {
        (active_mode(&active, FOLLOWER) == Some(PolicyMode::Enforce)).then_some(())
    })
    .await;
    apply_as_admin(&gatepolicy(FOLLOWER, &team_spec("Audit")));
    eventually("the follower serves generation 2", || async {
        (active_mode(&active, FOLLOWER) == Some(PolicyMode::Audit)).then_some(())
    })
    .await;
    // Passes run one at a time, each with its writes: the first one's are over, and there
    // were none.
    let object = gatepolicy_json(FOLLOWER);
    assert!(object["status"].is_null(), "a follower wrote: {object}");

    lead.send(true).unwrap();
    let ready = ready_at(FOLLOWER, 2).await;
    assert_eq!(ready["status"], "True", "{ready}");
    shutdown.cancel();
    task.await.unwrap();
    control_plane()
        .kubectl(ADMIN, &["delete", "gatepolicy", FOLLOWER])
        .ok();
}

#[tokio::test]
async fn a_gatepolicy_is_checked_at_apply_reports_ready_and_guards_its_namespace() {
    install_crypto_provider();
    let crd = std::fs::read_to_string(repo_path(
        "charts/driftgate/files/crds/gatepolicies.driftgate.dev.yaml",
    ))
    .unwrap();
    establish_crd(&crd, "gatepolicies.driftgate.dev");
    a_follower_writes_no_status_until_it_leads().await;
    control_plane().apply(
        ADMIN,
        &format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {NS}\n"),
    );

    // The file source holds a policy for a namespace nobody uses: GatePolicies come beside it.
    let files = std::env::temp_dir().join(format!(
        "driftgate-e2e-gp-files-{}.yaml",
        std::process::id()
    ));
    std::fs::write(
        &files,
        gatepolicy("e2e-gp-files", "  namespaces:\n    include: [gp-unused]\n"),
    )
    .unwrap();
    let driftgate = Driftgate::start("gp", &files, &["--gatepolicies"]);
    let mut gate = webhook_configuration(
        "driftgate-e2e-gp",
        &driftgate.webhook_url(),
        driftgate.ca_pem(),
    );
    gate["webhooks"][0]["namespaceSelector"] =
        json!({"matchLabels": {"kubernetes.io/metadata.name": NS}});
    driftgate.register_probing(gate, NS);
    let policies = policies_webhook_configuration(
        "driftgate-e2e-gp-policies",
        &driftgate.webhook_url(),
        driftgate.ca_pem(),
    );
    let probe = gatepolicy("e2e-gp-probe", &team_spec("Audit"));
    driftgate.register_with_probe(policies, || {
        control_plane().kubectl_with_stdin(
            ADMIN,
            &["apply", "--dry-run=server", "-f", "-"],
            Some(&probe),
        );
    });

    // A bad policy is refused at apply, with every problem `policy check` finds in it as a file.
    let bad = gatepolicy(BAD, BAD_SPEC);
    let refused =
        show(control_plane().kubectl_with_stdin(ADMIN, &["apply", "-f", "-"], Some(&bad)));
    assert!(!refused.success(), "{refused:?}");
    assert!(
        refused.stderr.contains(&format!(
            "admission webhook \"{POLICIES_WEBHOOK}\" denied the request: admin may not write GatePolicy {BAD}: it has "
        )) && refused.stderr.contains(&format!("(policy \"{BAD}\", rule PolicyRefused)")),
        "{}",
        refused.stderr
    );
    for problem in policy_check_problems(&bad) {
        let line = format!("gatepolicy/{BAD}: {problem}");
        assert!(
            refused.stderr.contains(&line),
            "`{line}` missing from:\n{}",
            refused.stderr
        );
    }
    let stored = control_plane().kubectl(ADMIN, &["get", "gatepolicy", BAD]);
    assert!(
        !stored.success(),
        "the refused policy was stored: {stored:?}"
    );

    // Before the policy, bob's write in the namespace is out of scope.
    show(bob_writes("before")).ok();

    // A good one is admitted, compiled and Ready for its generation, then guards the namespace.
    show(control_plane().kubectl_with_stdin(
        ADMIN,
        &["apply", "-f", "-"],
        Some(&gatepolicy(POLICY, &team_spec("Enforce"))),
    ))
    .ok();
    let ready = ready_at(POLICY, 1).await;
    assert_eq!(
        (ready["status"].as_str(), ready["reason"].as_str()),
        (Some("True"), Some("Compiled")),
        "{ready}"
    );
    let denied = eventually("bob's write refused by the GatePolicy", || async {
        let out = bob_writes("after");
        (!out.success()).then_some(out)
    })
    .await;
    assert!(
        denied
            .stderr
            .contains("admission webhook \"gate.driftgate.dev\" denied the request: bob may not")
            && denied.stderr.contains(&format!("policy \"{POLICY}\"")),
        "{}",
        denied.stderr
    );
    let metrics = driftgate.metrics();
    assert!(
        metrics.contains("driftgate_policy_valid{source=\"gatepolicies\"} 1"),
        "{metrics}"
    );

    // kubectl get shows MODE, NAMESPACES, READY.
    let listed = kubectl(ADMIN, &["get", "gatepolicy", POLICY]).ok();
    let mut lines = listed.stdout.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "MODE", "NAMESPACES", "READY", "AGE"],
        "{}",
        listed.stdout
    );
    let row: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(
        &row[..4],
        [POLICY, "Enforce", NS, "True"],
        "{}",
        listed.stdout
    );

    // Loosened to Audit: bob's write is admitted with the audit warning.
    show(control_plane().kubectl_with_stdin(
        ADMIN,
        &["apply", "-f", "-"],
        Some(&gatepolicy(POLICY, &team_spec("Audit"))),
    ))
    .ok();
    ready_at(POLICY, 2).await;
    let audited = eventually("bob's write admitted under Audit", || async {
        let out = bob_writes("audited");
        out.success().then_some(out)
    })
    .await;
    assert!(
        audited
            .stderr
            .contains(&format!("policy \"{POLICY}\" would deny in Enforce mode")),
        "{}",
        audited.stderr
    );

    // Tightened again: refused again.
    show(control_plane().kubectl_with_stdin(
        ADMIN,
        &["apply", "-f", "-"],
        Some(&gatepolicy(POLICY, &team_spec("Enforce"))),
    ))
    .ok();
    ready_at(POLICY, 3).await;
    eventually("bob's write refused again", || async {
        (!bob_writes("tightened").success()).then_some(())
    })
    .await;

    // Written past the webhook (it is gone), a bad generation never takes the good one away:
    // generation 3 keeps serving, and the object, the gauge and /readyz say why.
    driftgate.unregister("driftgate-e2e-gp-policies");
    let bad_update = gatepolicy(POLICY, BAD_SPEC);
    eventually(
        "the bad update stored once the policies webhook is gone",
        || async {
            control_plane()
                .kubectl_with_stdin(ADMIN, &["apply", "-f", "-"], Some(&bad_update))
                .success()
                .then_some(())
        },
    )
    .await;
    let ready = ready_at(POLICY, 4).await;
    assert_eq!(ready["status"], "False", "{ready}");
    assert_eq!(ready["reason"], "RefusedLastGoodServes", "{ready}");
    let message = ready["message"].as_str().unwrap();
    assert!(message.contains("generation 3 keeps serving"), "{message}");
    assert!(
        message.contains(&format!(
            "gatepolicy/{POLICY}: spec.namespaces.include: is empty"
        )),
        "{message}"
    );
    assert!(!bob_writes("still-guarded").success());
    let metrics = driftgate.metrics();
    assert!(
        metrics.contains("driftgate_policy_valid{source=\"gatepolicies\"} 0"),
        "{metrics}"
    );
    let (code, body) = driftgate.admin_get("/readyz").unwrap();
    assert_eq!(code, 200, "{body}");
    assert!(
        body.contains(&format!("gatepolicy/{POLICY}: spec.namespaces.include")),
        "{body}"
    );

    control_plane()
        .kubectl(ADMIN, &["delete", "gatepolicy", POLICY, "--wait=false"])
        .ok();
    control_plane()
        .kubectl(ADMIN, &["delete", "namespace", NS, "--wait=false"])
        .ok();
    let _ = std::fs::remove_file(&files);
    drop(driftgate);
}
