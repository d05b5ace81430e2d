//! The ledger cannot be erased (issue 10, item 11), on the real API server with the chart's
//! records webhook: a namespace admin whose Role grants `*` on `*` tries to delete a record, to
//! settle it, to resolve it without being an opener, and to edit it, and a cluster admin
//! outside `--ledger-crd-admin-*` tries to delete the CRD; each is refused by driftgate and the
//! object reads back unchanged. An opener resolves with a note, and the record keeps who and
//! when; driftgate itself creates, expires and (after its retention) deletes the record.

use std::time::Duration;

use driftgate::ledger::record::BackportRequirement;
use kube::Api;
use kube::api::{DeleteParams, ListParams};
use serde_json::{Value, json};

use crate::harness::{
    ADMIN, ALICE, Driftgate, Identity, KubectlOutput, control_plane, driftgate_cli,
    records_webhook_configuration,
};
use crate::ledger::{Scene, TICK, wait_for};

/// A namespace admin: a RoleBinding to a Role with every verb on every resource of her
/// namespace (the common "namespace owner" role), the backport records included.
const NINA: Identity = Identity {
    user: "nina",
    groups: &[],
};

/// A cluster admin by RBAC (ClusterRole cluster-admin) who is not named in
/// `--ledger-crd-admin-*` (not in system:masters).
const CARL: Identity = Identity {
    user: "carl",
    groups: &[],
};

const NS: &str = "ledger-guard";
const CRD: &str = "backportrequirements.driftgate.dev";
/// Settled records are deleted this long after they settle (`--record-retention`).
const RETENTION: &str = "20s";

fn rbac(ns: &str) -> String {
    format!(
        r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: namespace-admin, namespace: {ns}}}
rules:
  - apiGroups: ["*"]
    resources: ["*"]
    verbs: ["*"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: nina-admin, namespace: {ns}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: namespace-admin}}
subjects:
  - {{apiGroup: rbac.authorization.k8s.io, kind: User, name: nina}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: driftgate-e2e-carl-cluster-admin}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}}
subjects:
  - {{apiGroup: rbac.authorization.k8s.io, kind: User, name: carl}}
"#
    )
}

/// The chart's records webhook, for this test's namespace only (the CRD, cluster-scoped, is
/// matched whatever the selector), and without the chart's `not-driftgate` condition, so that
/// driftgate's own writes of the record are judged by its decision too.
fn register_records_webhook(driftgate: &Driftgate) {
    let mut configuration = records_webhook_configuration(
        "driftgate-e2e-ledger-guard-records",
        &driftgate.webhook_url(),
        driftgate.ca_pem(),
    );
    let webhook = &mut configuration["webhooks"][0];
    webhook["namespaceSelector"] = json!({"matchLabels": {"kubernetes.io/metadata.name": NS}});
    webhook["matchConditions"]
        .as_array_mut()
        .expect("the records webhook has matchConditions")
        .retain(|c| c["name"] != "not-driftgate");
    let probe = format!(
        r#"{{"apiVersion": "driftgate.dev/v1alpha1", "kind": "BackportRequirement",
            "metadata": {{"name": "probe", "namespace": "{NS}"}},
            "spec": {{"object": {{"apiVersion": "v1", "kind": "ConfigMap", "name": "x"}}, "scope": "Object",
                     "window": {{"expiresAt": "2026-01-01T00:00:00Z", "labelValue": "20260101T0000Z"}}, "policy": "p"}}}}"#
    );
    driftgate.register_with_probe(configuration, || {
        control_plane().kubectl_with_stdin(
            ADMIN,
            &["create", "--dry-run=server", "-f", "-"],
            Some(&probe),
        );
    });
}

/// The record as stored, and the parts a refused write must leave as they were.
fn stored(name: &str) -> (Value, Value) {
    let out = control_plane()
        .kubectl(
            ADMIN,
            &["get", "backportrequirement", name, "-n", NS, "-o", "json"],
        )
        .ok();
    let record: Value = serde_json::from_str(&out.stdout).expect("the record as JSON");
    let kept = json!({
        "resourceVersion": record["metadata"]["resourceVersion"],
        "labels": record["metadata"]["labels"],
        "ownerReferences": record["metadata"]["ownerReferences"],
        "spec": record["spec"],
        "status": record["status"],
    });
    (record, kept)
}

/// `attempt` by nina (or carl) is refused by driftgate with `rule`, naming the user and the
/// object, and the record reads back exactly as before.
#[track_caller]
fn refused_and_unchanged(name: &str, rule: &str, who: &str, attempt: KubectlOutput) {
    let (_, before) = stored(name);
    let refused = attempt.failed();
    assert!(
        refused
            .stderr
            .contains("admission webhook \"records.driftgate.dev\" denied")
            && refused.stderr.contains(&format!("rule {rule}"))
            && refused.stderr.contains(&format!("{who} may not"))
            && refused
                .stderr
                .contains(&format!("BackportRequirement {NS}/{name}")),
        "{}",
        refused.stderr
    );
    assert_eq!(
        stored(name).1,
        before,
        "the record changed although the write was refused"
    );
}

/// `DELETE .../namespaces/NS/backportrequirements` as `who`, which must be refused: its message.
fn delete_collection_as(who: Identity) -> String {
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let refused = runtime.block_on(async {
        crate::harness::install_crypto_provider();
        let api: Api<BackportRequirement> = Api::namespaced(control_plane().client(who).await, NS);
        api.delete_collection(&DeleteParams::default(), &ListParams::default())
            .await
    });
    match refused {
        Err(kube::Error::Api(status)) if status.code == 403 => status.message,
        other => panic!("the collection DELETE was not refused: {other:?}"),
    }
}

#[test]
fn a_namespace_admin_cannot_erase_or_settle_a_record_and_an_opener_resolves_it() {
    let control_plane = control_plane();
    let scene = Scene::new(NS, &[]);
    control_plane.apply(ADMIN, &rbac(NS)).ok();
    let driftgate = scene.start(NS, &[TICK, &["--record-retention", RETENTION]].concat());
    register_records_webhook(&driftgate);
    let dg = &[&driftgate];

    // driftgate records alice's emergency change: its own writes pass its records webhook.
    scene.flux_apply(2, &[]).ok();
    scene.open_window("30s", "INC-7: api saturated");
    scene.alice_scale(5, &[]).ok();
    let record = scene.record();
    let name = record["metadata"]["name"]
        .as_str()
        .expect("a name")
        .to_owned();
    let writer_reviews = driftgate.counter(
        "driftgate_admission_reviews_total",
        &["rule=\"LedgerWriter\""],
    );
    assert!(
        writer_reviews >= 1.0,
        "driftgate's own record writes were reviewed and admitted: {writer_reviews}"
    );

    // An opener may not resolve while the window is open and changes are still recorded.
    let early = driftgate_cli(
        ALICE,
        &["backlog", "resolve", &name, "-n", NS, "--note", "too early"],
    );
    assert!(
        !early.success()
            && early.stderr.contains("rule ResolveRefused")
            && early.stderr.contains("window is open until"),
        "{}",
        early.stderr
    );

    // The namespace admin, with `*` on `*` in her namespace.
    let kubectl = |args: &[&str]| control_plane.kubectl(NINA, args);
    refused_and_unchanged(
        &name,
        "RecordErased",
        "nina",
        kubectl(&["delete", "backportrequirement", &name, "-n", NS]),
    );
    // A DELETE of the collection (kubectl deletes one by one; kube-rs sends one request): the
    // API server reviews it record by record, each without a name.
    let (_, before) = stored(&name);
    let message = delete_collection_as(NINA);
    assert!(
        message.starts_with(&format!(
            "admission webhook \"records.driftgate.dev\" denied the request: nina may not delete BackportRequirement {NS}/{name}: "
        )) && message.contains("rule RecordErased"),
        "{message}"
    );
    assert_eq!(
        stored(&name).1,
        before,
        "the record changed although the DELETE was refused"
    );
    refused_and_unchanged(
        &name,
        "RecordTampered",
        "nina",
        kubectl(&[
            "patch",
            "backportrequirement",
            &name,
            "-n",
            NS,
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status": {"phase": "Backported"}}"#,
        ]),
    );
    refused_and_unchanged(
        &name,
        "RecordTampered",
        "nina",
        kubectl(&[
            "patch",
            "backportrequirement",
            &name,
            "-n",
            NS,
            "--type=merge",
            "-p",
            r#"{"spec": {"changes": []}}"#,
        ]),
    );
    refused_and_unchanged(
        &name,
        "RecordTampered",
        "nina",
        kubectl(&[
            "patch",
            "backportrequirement",
            &name,
            "-n",
            NS,
            "--type=json",
            "-p",
            r#"[{"op": "remove", "path": "/metadata/labels"}]"#,
        ]),
    );
    // Resolving needs an opener of the record's policy, whatever the note says.
    refused_and_unchanged(
        &name,
        "ResolveRefused",
        "nina",
        driftgate_cli(
            NINA,
            &[
                "backlog",
                "resolve",
                &name,
                "-n",
                NS,
                "--note",
                "nothing to see",
            ],
        ),
    );

    // The CRD: a server-side dry run first, so that a guard that failed could not take the CRD
    // (and every other test's records) with it.
    let crd_uid = |who| {
        control_plane
            .kubectl(who, &["get", "crd", CRD, "-o", "jsonpath={.metadata.uid}"])
            .ok()
            .stdout
    };
    let uid = crd_uid(ADMIN);
    for extra in [&["--dry-run=server"][..], &[][..]] {
        let mut args = vec!["delete", "crd", CRD, "--wait=false"];
        args.extend_from_slice(extra);
        let refused = control_plane.kubectl(CARL, &args).failed();
        assert!(
            refused.stderr.contains(
                "carl may not delete CustomResourceDefinition backportrequirements.driftgate.dev"
            ) && refused.stderr.contains("rule LedgerCrdProtected"),
            "{}",
            refused.stderr
        );
        assert_eq!(crd_uid(ADMIN), uid);
    }
    let deleting = control_plane
        .kubectl(
            ADMIN,
            &[
                "get",
                "crd",
                CRD,
                "-o",
                "jsonpath={.metadata.deletionTimestamp}",
            ],
        )
        .ok();
    assert_eq!(deleting.stdout, "", "the CRD is not being deleted");

    // The window ends; driftgate moves the record on. Then alice, an opener, resolves it.
    let awaiting = wait_for(
        "the record to await backport",
        Duration::from_secs(40),
        dg,
        || {
            let (record, _) = stored(&name);
            (record["status"]["phase"] == "AwaitingBackport").then_some(record)
        },
    );
    let note = "backported in payments-gitops#77";
    let resolved = driftgate_cli(
        ALICE,
        &["backlog", "resolve", &name, "-n", NS, "--note", note],
    );
    assert!(resolved.success(), "{}{}", resolved.stdout, resolved.stderr);
    let (record, _) = stored(&name);
    let status = &record["status"];
    assert_eq!(status["phase"], "Resolved", "{record:#}");
    assert_eq!(status["resolutionNote"], note);
    assert_eq!(status["resolvedBy"], "alice");
    let at: jiff::Timestamp = status["resolvedAt"]
        .as_str()
        .and_then(|t| t.parse().ok())
        .expect("resolvedAt");
    assert!(
        jiff::Timestamp::now().duration_since(at).abs() < jiff::SignedDuration::from_secs(60),
        "{at}"
    );
    let transitions = status["transitions"].as_array().expect("transitions");
    assert_eq!(
        transitions[..transitions.len() - 1],
        awaiting["status"]["transitions"].as_array().unwrap()[..]
    );
    assert_eq!(transitions.last().unwrap()["phase"], "Resolved");
    assert_eq!(transitions.last().unwrap()["message"], note);

    // Who and when stay.
    refused_and_unchanged(
        &name,
        "RecordTampered",
        "nina",
        kubectl(&[
            "patch",
            "backportrequirement",
            &name,
            "-n",
            NS,
            "--subresource=status",
            "--type=json",
            "-p",
            r#"[{"op": "remove", "path": "/status/resolvedBy"}]"#,
        ]),
    );

    // Settled, the record is deleted by driftgate's retention, and by nobody else.
    wait_for(
        "the retention to delete the settled record",
        Duration::from_secs(60),
        dg,
        || scene.records().is_empty().then_some(()),
    );
    assert!(
        driftgate
            .log_tail(200)
            .contains("deleted a settled backport record past its retention")
    );
    for rule in [
        "RecordErased",
        "RecordTampered",
        "ResolveRefused",
        "LedgerCrdProtected",
        "RecordResolved",
    ] {
        assert!(
            driftgate.counter(
                "driftgate_admission_reviews_total",
                &[&format!("rule=\"{rule}\"")]
            ) >= 1.0,
            "no review counted with rule {rule}"
        );
    }
}
