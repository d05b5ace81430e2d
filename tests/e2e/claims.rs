//! Issue 24, section 1: a review is a claim. Every break-glass change is recorded before it is
//! answered, so what the ledger writes then rests on the review's word; once the API server has
//! had the write, driftgate reads the object back. Against a driftgate without client
//! authentication (the chart's default), reviews forged with curl: alice's real change is
//! marked `landed`; a forged change appended to her record is withdrawn, and its value (kept
//! with `recordValues`) never reaches `driftgate backport`; a forged window opened on an object
//! gets a record that becomes `Withdrawn`. Each outcome read back from the API server.

use std::time::Duration;

use serde_json::{Value, json};

use crate::harness::forge::{CONFIG_MAP, DEPLOYMENT, Resource, forge, patch_options, request};
use crate::harness::{ADMIN, ALICE, Driftgate, FLUX, control_plane};
use crate::ledger::{Scene, TICK, wait_for};

/// Longer than driftgate reads a write back (about 6 s), with room for a loaded machine.
const READ_BACK_WITHIN: Duration = Duration::from_secs(30);

/// alice's forged UPDATE of `old` into `new`, as the API server would send it; the request uid.
fn forge_alices_update(
    driftgate: &Driftgate,
    resource: Resource,
    old: &Value,
    new: &Value,
) -> String {
    let mut forged = request(
        resource,
        "UPDATE",
        old["metadata"]["namespace"].as_str().unwrap_or_default(),
        old["metadata"]["name"].as_str().unwrap_or_default(),
        ALICE,
        (new.clone(), old.clone()),
        patch_options("kubectl-patch"),
    );
    let uid = forged["uid"].as_str().unwrap_or_default().to_owned();
    forged["options"]["kind"] = json!("UpdateOptions");
    let answer = forge(driftgate, forged);
    assert_eq!(answer["allowed"], true, "{answer:#}");
    uid
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
    let forged = forge_alices_update(&driftgate, DEPLOYMENT, &live, &claimed);
    let appended = changes(&scene.record());
    assert!(
        appended.iter().any(|c| c["requestUid"] == forged.as_str()),
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
    forge_alices_update(&driftgate, CONFIG_MAP, &live, &opened);
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
