//! Issue 24, section 1: a review is a claim. Every break-glass change is recorded before it is
//! answered, so what the ledger writes then rests on the review's word; once the API server has
//! had the write, driftgate reads the object back. Against a driftgate without client
//! authentication (the chart's default), reviews forged with curl: alice's real change is
//! marked `landed`; a forged change appended to her record is withdrawn, and its value (kept
//! with `recordValues`) never reaches `driftgate backport`; a forged window opened on an object
//! gets a record that becomes `Withdrawn`. Each outcome read back from the API server.

use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::harness::{ADMIN, Driftgate, FLUX, control_plane};
use crate::ledger::{Scene, TICK, wait_for};

/// Longer than driftgate reads a write back (about 6 s), with room for a loaded machine.
const READ_BACK_WITHIN: Duration = Duration::from_secs(30);

/// POSTs `review` to `driftgate`'s webhook with curl, as anyone who reaches the port can (no
/// client certificate), and returns the answer.
fn post_review(driftgate: &Driftgate, name: &str, review: &Value) -> Value {
    let ca = control_plane().dir().join(format!("{name}-ca.pem"));
    std::fs::write(&ca, driftgate.ca_pem()).expect("the CA is written");
    let mut child = Command::new("curl")
        .args(["-sS", "--cacert"])
        .arg(&ca)
        .args([
            "-H",
            "Content-Type: application/json",
            "--data-binary",
            "@-",
        ])
        .arg(driftgate.webhook_url())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("curl runs");
    {
        use std::io::Write;
        child
            .stdin
            .take()
            .expect("curl's stdin")
            .write_all(review.to_string().as_bytes())
            .expect("the review is sent");
    }
    let out = child.wait_with_output().expect("curl ends");
    serde_json::from_slice(&out.stdout).expect("an AdmissionReview answer")
}

/// A review of alice's UPDATE of `old` into `new`, as the API server would send it.
fn alice_update(
    uid: &str,
    resource: (&str, &str, &str),
    kind: &str,
    old: &Value,
    new: &Value,
) -> Value {
    let (group, version, plural) = resource;
    json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": group, "version": version, "kind": kind},
            "resource": {"group": group, "version": version, "resource": plural},
            "name": old["metadata"]["name"], "namespace": old["metadata"]["namespace"],
            "operation": "UPDATE",
            "userInfo": {"username": "alice", "groups": ["sre-oncall", "system:authenticated"]},
            "object": new, "oldObject": old, "dryRun": false,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "UpdateOptions", "fieldManager": "kubectl-edit"},
        },
    })
}

fn get(kind_name: &str, ns: &str) -> Value {
    let out = control_plane()
        .kubectl(ADMIN, &["get", kind_name, "-n", ns, "-o", "json"])
        .ok();
    serde_json::from_str(&out.stdout).expect("the object as JSON")
}

fn changes(record: &Value) -> Vec<Value> {
    record["spec"]["changes"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[test]
fn a_forged_break_glass_change_is_withdrawn_and_alices_real_one_lands() {
    let scene = Scene::new("ledger-claims", &["recordValues: true"]);
    let driftgate = scene.start("ledger-claims", TICK);
    let dg = &[&driftgate];
    scene.flux_apply(2, &[]).ok();
    scene.open_window("90s", "INC-24: claims");
    scene.alice_scale(5, &[]).ok();
    let record = wait_for("alice's change marked landed", READ_BACK_WITHIN, dg, || {
        let record = scene.record();
        changes(&record)
            .first()
            .is_some_and(|c| c["landed"].is_string())
            .then_some(record)
    });
    let alices = changes(&record)[0]["requestUid"].clone();

    // A forged change under the open window: alice setting 9 replicas. Admitted (she is an
    // opener, the window is open) and appended before the answer, then withdrawn: the API
    // server stored no such write.
    let live = get("deployment/api", &scene.ns);
    let mut claimed = live.clone();
    claimed["spec"]["replicas"] = json!(9);
    let review = alice_update(
        "forged-change",
        ("apps", "v1", "deployments"),
        "Deployment",
        &live,
        &claimed,
    );
    let answer = post_review(&driftgate, "ledger-claims", &review);
    assert_eq!(answer["response"]["allowed"], true, "{answer:#}");
    let appended = changes(&scene.record());
    assert!(
        appended.iter().any(|c| c["requestUid"] == "forged-change"),
        "recorded before the answer: {appended:#?}"
    );
    let record = wait_for("the forged change withdrawn", READ_BACK_WITHIN, dg, || {
        let record = scene.record();
        (changes(&record).len() == 1).then_some(record)
    });
    let kept = &changes(&record)[0];
    assert_eq!(kept["requestUid"], alices, "{record:#}");
    assert_eq!(kept["fields"][0]["value"], 5, "{record:#}");
    assert_eq!(record["status"]["phase"], "Open", "{record:#}");
    assert_eq!(scene.replicas(), "5");

    // A forged window opened on a ConfigMap Flux applied: its record is created before the
    // answer, and Withdrawn once the ConfigMap reads back without the label.
    control_plane()
        .kubectl_with_stdin(
            FLUX,
            &["apply", "--server-side", "--field-manager=kustomize-controller", "-f", "-"],
            Some(&format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: settings, namespace: {}}}\ndata: {{LEVEL: info}}\n",
                scene.ns
            )),
        )
        .ok();
    let live = get("configmap/settings", &scene.ns);
    let expiry = (jiff::Timestamp::now() + jiff::SignedDuration::from_secs(90))
        .strftime("%Y%m%dT%H%MZ")
        .to_string();
    let mut opened = live.clone();
    opened["metadata"]["labels"] = json!({"driftgate.dev/break-glass": expiry});
    opened["metadata"]["annotations"] =
        json!({"driftgate.dev/break-glass-reason": "INC-24: a window nobody opened"});
    let review = alice_update(
        "forged-open",
        ("", "v1", "configmaps"),
        "ConfigMap",
        &live,
        &opened,
    );
    let answer = post_review(&driftgate, "ledger-claims", &review);
    assert_eq!(answer["response"]["allowed"], true, "{answer:#}");
    let withdrawn = wait_for(
        "the forged window's record Withdrawn",
        READ_BACK_WITHIN,
        dg,
        || {
            scene
                .records()
                .into_iter()
                .find(|r| r["spec"]["object"]["kind"] == "ConfigMap")
                .filter(|r| r["status"]["phase"] == "Withdrawn")
        },
    );
    let last = withdrawn["status"]["transitions"]
        .as_array()
        .and_then(|t| t.last())
        .cloned()
        .unwrap_or_default();
    assert_eq!(last["reason"], "NeverStored", "{withdrawn:#}");
    let labels = get("configmap/settings", &scene.ns)["metadata"]["labels"].clone();
    assert!(labels.is_null() || labels.get("driftgate.dev/break-glass").is_none());
}
