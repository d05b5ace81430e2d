//! Scenarios 3, 4, 6 and 7: break-glass windows opened and closed with `driftgate break-glass`,
//! used with kubectl, holding Flux off, expired, namespace-wide, and dry runs under them.

use driftgate::ledger::record::{Phase, RecordScope};
use driftgate::timefmt::format_expiry;
use jiff::{SignedDuration, Timestamp};
use serde_json::json;

use crate::harness::{
    ADMIN, ALICE, BOB, Driftgate, control_plane, driftgate_cli, install_crypto_provider, repo_path,
    shared, webhook_configuration,
};

use super::{
    api_deployment, assert_denied, driftgate_events, eventually, flux_apply, get_json, kubectl,
    kubectl_edit, namespace_with_api, records, show, wait_for_event,
};

const REASON: &str = "INC-4711: api pods OOM, scaling out";

#[tokio::test]
async fn alice_scales_under_a_window_that_holds_flux_off_until_she_closes_it() {
    install_crypto_provider();
    shared();
    let ns = "prod-s3";
    show(flux_apply(&namespace_with_api(ns))).ok();
    let uid = get_json("deployment/api", ns)["metadata"]["uid"]
        .as_str()
        .expect("the Deployment has a uid")
        .to_owned();

    // alice opens a 1h window with the CLI.
    let open = show(driftgate_cli(
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
            REASON,
        ],
    ))
    .ok();
    assert!(
        open.stdout
            .contains("break-glass window open on deployment/api in namespace prod-s3 until"),
        "{}",
        open.stdout
    );
    // What the window does, from driftgate's own warning; what happens at expiry; what next.
    let lines: Vec<&str> = open.stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{}", open.stdout);
    assert!(
        lines[1].starts_with("driftgate: break-glass window open on Deployment prod-s3/api until ")
            && lines[1].contains("; controller flux is held off it until then; "),
        "{}",
        open.stdout
    );
    assert!(
        lines[2].starts_with("At expiry the controller reconciles it back to Git"),
        "{}",
        open.stdout
    );
    assert!(
        lines[3].contains("`driftgate backlog -n prod-s3`")
            && lines[3].contains("`driftgate break-glass close deployment/api -n prod-s3`"),
        "{}",
        open.stdout
    );
    let live = get_json("deployment/api", ns);
    let label = live["metadata"]["labels"]["driftgate.dev/break-glass"]
        .as_str()
        .expect("the window's label is set")
        .to_owned();
    assert_eq!(
        live["metadata"]["annotations"]["driftgate.dev/break-glass-reason"],
        REASON
    );
    // The ledger recorded the window before admitting it.
    let opened = records(ns).await;
    assert_eq!(opened.len(), 1, "{opened:?}");
    assert_eq!(opened[0].spec.window.opener.as_deref(), Some("alice"));
    assert_eq!(opened[0].spec.window.label_value, label);
    assert!(opened[0].spec.changes.is_empty());
    wait_for_event(
        ns,
        "BreakGlassOpened",
        "Deployment",
        "api",
        "alice opened a break-glass window on Deployment prod-s3/api",
    )
    .await;

    // alice scales: admitted, with driftgate's warning printed by kubectl.
    let scale = kubectl(
        ALICE,
        &["scale", "deployment/api", "-n", ns, "--replicas=5"],
    )
    .ok();
    assert!(
        scale.stderr.contains(
            "Warning: driftgate: alice changed Deployment prod-s3/api (scale) under the break-glass window on the object"
        ),
        "{}",
        scale.stderr
    );
    assert!(scale.stderr.contains(REASON), "{}", scale.stderr);
    assert_eq!(get_json("deployment/api", ns)["spec"]["replicas"], 5);
    let change = wait_for_event(
        ns,
        "BreakGlassChange",
        "Deployment",
        "api",
        "alice changed Deployment prod-s3/api (scale) under the break-glass window on the object",
    )
    .await;
    let regarding = change.regarding.clone().unwrap_or_default();
    assert_eq!(regarding.api_version.as_deref(), Some("apps/v1"));
    assert_eq!(regarding.namespace.as_deref(), Some(ns));
    assert_eq!(regarding.uid.as_deref(), Some(uid.as_str()));
    assert_eq!(change.type_.as_deref(), Some("Warning"));
    assert_eq!(
        change.reporting_instance.as_deref(),
        Some("driftgate-e2e-shared")
    );
    assert!(
        change
            .note
            .as_deref()
            .is_some_and(|n| n.contains("spec.replicas")),
        "{change:?}"
    );
    // What the README tells people to run.
    let listed = kubectl(ADMIN, &["events", "-n", ns, "--for", "deployment/api"]).ok();
    assert!(
        listed.stdout.contains("BreakGlassChange") && listed.stdout.contains("BreakGlassOpened"),
        "{}",
        listed.stdout
    );
    // ... and appended to the window's record before it was admitted.
    let recorded = records(ns).await;
    assert_eq!(recorded.len(), 1, "{recorded:?}");
    let changes = &recorded[0].spec.changes;
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert_eq!(changes[0].user, "alice");
    assert_eq!(changes[0].subresource, "scale");
    let fields: Vec<&str> = changes[0].fields.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(fields, ["spec.replicas"]);

    // Flux re-applies Git's replica count: held off while the window is open.
    let held = show(flux_apply(&api_deployment(ns, 2)));
    assert_denied(
        &held,
        "Controller flux (system:serviceaccount:flux-system:kustomize-controller) may not update Deployment prod-s3/api while the break-glass window on the object",
        "ControllerHeld",
    );
    assert!(held.stderr.contains(REASON), "{}", held.stderr);
    assert_eq!(get_json("deployment/api", ns)["spec"]["replicas"], 5);
    wait_for_event(
        ns,
        "ControllerHeld",
        "Deployment",
        "api",
        "Controller flux (system:serviceaccount:flux-system:kustomize-controller) may not update Deployment prod-s3/api",
    )
    .await;

    // alice closes the window; Flux reconciles again.
    let close = show(driftgate_cli(
        ALICE,
        &["break-glass", "close", "deployment/api", "-n", ns],
    ))
    .ok();
    assert!(
        close
            .stdout
            .contains("break-glass window closed on deployment/api in namespace prod-s3"),
        "{}",
        close.stdout
    );
    let live = get_json("deployment/api", ns);
    assert!(
        live["metadata"]["labels"]["driftgate.dev/break-glass"].is_null(),
        "{live}"
    );
    let mut closed = records(ns).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while closed[0].status.as_ref().map(|s| s.phase) != Some(Phase::AwaitingBackport)
        && std::time::Instant::now() < deadline
    {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        closed = records(ns).await;
    }
    assert_eq!(
        closed[0].status.as_ref().map(|s| s.phase),
        Some(Phase::AwaitingBackport),
        "{closed:?}"
    );
    backlog_lists_the_record_in_every_format(ns, &closed[0]);
    show(flux_apply(&api_deployment(ns, 2))).ok();
    assert_eq!(get_json("deployment/api", ns)["spec"]["replicas"], 2);

    // bob may not open a window: driftgate's refusal, printed by the CLI, exit code 1.
    let refused = show(driftgate_cli(
        BOB,
        &[
            "break-glass",
            "open",
            "deployment/api",
            "-n",
            ns,
            "--for",
            "1h",
            "--reason",
            "INC-4712: bob wants in",
        ],
    ));
    assert_eq!(refused.code, Some(1), "{refused:?}");
    assert_denied(
        &refused,
        "bob may not change the break-glass window on Deployment prod-s3/api: only group sre-oncall may open, extend or amend a window",
        "BreakGlassRefused",
    );
    assert!(
        refused
            .stderr
            .starts_with("driftgate break-glass: opening the window was refused: "),
        "{}",
        refused.stderr
    );

    // alice may not open one longer than the policy's maxDuration (4h).
    let too_long = show(driftgate_cli(
        ALICE,
        &[
            "break-glass",
            "open",
            "deployment/api",
            "-n",
            ns,
            "--for",
            "5h",
            "--reason",
            REASON,
        ],
    ));
    assert_eq!(too_long.code, Some(1), "{too_long:?}");
    assert_denied(
        &too_long,
        "alice may not change the break-glass window on Deployment prod-s3/api: the expiry",
        "BreakGlassRefused",
    );
    assert!(
        too_long
            .stderr
            .contains("is more than maxDuration 4h from now"),
        "{}",
        too_long.stderr
    );
    let live = get_json("deployment/api", ns);
    assert!(
        live["metadata"]["labels"]["driftgate.dev/break-glass"].is_null(),
        "{live}"
    );
}

/// `driftgate backlog -n NS` on the window's record, awaiting backport: the table, wide,
/// --no-headers, name, JSON and YAML say the same record; AGE is the record's.
fn backlog_lists_the_record_in_every_format(
    ns: &str,
    record: &driftgate::ledger::record::BackportRequirement,
) {
    use kube::ResourceExt;
    let name = record.name_any();
    let backlog = |extra: &[&str]| {
        let out = show(driftgate_cli(
            ALICE,
            &[&["backlog", "-n", ns], extra].concat(),
        ))
        .ok();
        out.stdout
    };
    let table = backlog(&[]);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 2, "{table}");
    assert!(
        lines[0].starts_with("NAMESPACE   NAME") && lines[0].ends_with("   REASON"),
        "{table}"
    );
    assert!(
        lines[1].starts_with(&format!(
            "{ns}     {name}   AwaitingBackport   deployment/api   "
        )),
        "{table}"
    );
    assert!(lines[1].ends_with(REASON), "{table}");
    let wide = backlog(&["-o", "wide", "--no-headers"]);
    assert_eq!(wide.lines().count(), 1, "{wide}");
    // CHANGED-BY, then PULL-REQUEST (none linked yet), then the reason.
    assert!(wide.contains(&format!("   alice   -   {REASON}")), "{wide}");
    assert_eq!(
        backlog(&["-o", "name"]),
        format!("backportrequirement.driftgate.dev/{name}\n")
    );
    let before = Timestamp::now();
    let mut json: serde_json::Value = serde_json::from_str(&backlog(&["-o", "json"])).unwrap();
    let mut yaml: serde_json::Value = serde_saphyr::from_str(&backlog(&["-o", "yaml"])).unwrap();
    let created = record.metadata.creation_timestamp.as_ref().unwrap().0;
    // The record's age, read between `before` and now (the phase began later, at the close);
    // each command reads it at its own moment, so a second may pass between the two.
    let (least, most) = (
        (before - created).get_seconds(),
        (Timestamp::now() - created).get_seconds(),
    );
    for listed in [&mut json, &mut yaml] {
        let age = listed["items"][0]["ageSeconds"].take().as_i64().unwrap();
        assert!(
            (least..=most).contains(&age),
            "{age} not in {least}..={most}"
        );
    }
    assert_eq!(json, yaml);
    assert_eq!(json["items"][0]["name"], name.as_str());
    assert_eq!(json["items"][0]["phase"], "AwaitingBackport");
}

/// The example policy, guarding `namespace` instead of `prod-*` and `payments`: a driftgate of
/// its own, registered only for that namespace, so that the shared driftgate (to which the
/// namespace is out of scope) lets the admin set things up first.
fn example_policy_for(namespace: &str) -> std::path::PathBuf {
    let example =
        std::fs::read_to_string(repo_path("policies/example.yaml")).expect("the example reads");
    let guarded = r#"include: ["prod-*", "payments"]"#;
    assert!(example.contains(guarded), "policies/example.yaml changed");
    let policy = example.replace(guarded, &format!("include: [\"{namespace}\"]"));
    let path = control_plane()
        .dir()
        .join(format!("policy-{namespace}.yaml"));
    std::fs::write(&path, policy).expect("the policy is written");
    path
}

#[tokio::test]
async fn a_window_that_expired_before_driftgate_guarded_the_namespace_admits_nothing() {
    install_crypto_provider();
    shared();
    let ns = "preinstall-s4";
    // Before driftgate guards the namespace (the shared one leaves it out of scope), the admin
    // sets a window that expired an hour ago.
    control_plane().apply(ADMIN, &namespace_with_api(ns));
    let expired = format_expiry(Timestamp::now() - SignedDuration::from_hours(1));
    kubectl(
        ADMIN,
        &[
            "label",
            "deployment/api",
            "-n",
            ns,
            &format!("driftgate.dev/break-glass={expired}"),
        ],
    )
    .ok();
    kubectl(
        ADMIN,
        &[
            "annotate",
            "deployment/api",
            "-n",
            ns,
            "driftgate.dev/break-glass-reason=INC-4700: last night's incident",
        ],
    )
    .ok();

    let driftgate = Driftgate::start("s4", &example_policy_for(ns), &[]);
    let mut configuration = webhook_configuration(
        "driftgate-e2e-s4",
        &driftgate.webhook_url(),
        driftgate.ca_pem(),
    );
    configuration["webhooks"][0]["namespaceSelector"] =
        json!({"matchLabels": {"kubernetes.io/metadata.name": ns}});
    driftgate.register_probing(configuration, ns);

    let edit = kubectl_edit(
        ALICE,
        "deployment/api",
        ns,
        "s|payments-api:1.4.2|payments-api:1.4.3-hotfix|",
    );
    assert_denied(
        &edit,
        "alice may not update Deployment preinstall-s4/api: the break-glass window on the object (until",
        "WindowExpired",
    );
    assert!(
        edit.stderr.contains("INC-4700: last night's incident") && edit.stderr.contains("expired"),
        "{}",
        edit.stderr
    );
    // The scale subresource reads the window from the Deployment: expired there too.
    let scale = kubectl(
        ALICE,
        &["scale", "deployment/api", "-n", ns, "--replicas=5"],
    );
    assert_denied(
        &scale,
        "alice may not update Deployment preinstall-s4/api (scale): the break-glass window on the object",
        "WindowExpired",
    );
    let live = get_json("deployment/api", ns);
    assert_eq!(live["spec"]["replicas"], 2);
    assert_eq!(
        live["spec"]["template"]["spec"]["containers"][0]["image"],
        super::IMAGE
    );
    assert!(records(ns).await.is_empty());
}

#[tokio::test]
async fn a_namespace_wide_window_admits_alices_edit_of_a_configmap_from_flux() {
    install_crypto_provider();
    shared();
    let ns = "prod-s6";
    show(flux_apply(&format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n---\n\
         apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: {ns}\n\
         data:\n  mode: normal\n"
    )))
    .ok();

    show(driftgate_cli(
        ALICE,
        &[
            "break-glass",
            "open",
            &format!("namespace/{ns}"),
            "--for",
            "1h",
            "--reason",
            REASON,
        ],
    ))
    .ok();
    let namespace = get_json(&format!("namespace/{ns}"), ns);
    assert!(
        namespace["metadata"]["labels"]["driftgate.dev/break-glass"].is_string(),
        "{namespace}"
    );

    // driftgate reads Namespaces from a watch: wait until it has seen the window (a server-side
    // dry run is decided like the real write, and leaves nothing behind).
    eventually("driftgate to see the namespace window", || async {
        control_plane()
            .kubectl(
                ALICE,
                &[
                    "patch",
                    "configmap/settings",
                    "-n",
                    ns,
                    "--type=merge",
                    "-p",
                    r#"{"data":{"probe":"x"}}"#,
                    "--dry-run=server",
                ],
            )
            .success()
            .then_some(())
    })
    .await;

    let edit = kubectl_edit(
        ALICE,
        "configmap/settings",
        ns,
        "s|mode: normal|mode: degraded|",
    )
    .ok();
    assert!(
        edit.stderr.contains(
            "Warning: driftgate: alice changed ConfigMap prod-s6/settings under the break-glass window on the namespace"
        ),
        "{}",
        edit.stderr
    );
    assert_eq!(
        get_json("configmap/settings", ns)["data"]["mode"],
        "degraded"
    );
    wait_for_event(
        ns,
        "BreakGlassChange",
        "ConfigMap",
        "settings",
        "alice changed ConfigMap prod-s6/settings under the break-glass window on the namespace",
    )
    .await;
    let recorded = records(ns).await;
    assert_eq!(recorded.len(), 1, "{recorded:?}");
    assert_eq!(recorded[0].spec.scope, RecordScope::Namespace);
    assert_eq!(recorded[0].spec.object.kind, "Namespace");
    let changes = &recorded[0].spec.changes;
    assert_eq!(changes.len(), 1, "{changes:?}");
    let object = changes[0]
        .object
        .as_ref()
        .expect("the change names its object");
    assert_eq!(
        (object.kind.as_str(), object.name.as_str()),
        ("ConfigMap", "settings")
    );
    assert_eq!(changes[0].fields[0].path, "data.mode");

    // The window is alice's group's: bob is still refused, and told so.
    let bob = kubectl_edit(BOB, "configmap/settings", ns, "s|mode: degraded|mode: bob|");
    assert_denied(
        &bob,
        "bob may not update ConfigMap prod-s6/settings:",
        "NotPermitted",
    );
    assert!(
        bob.stderr
            .contains("rule NotPermitted). The break-glass window on the namespace (until"),
        "{}",
        bob.stderr
    );
}

#[tokio::test]
async fn server_side_dry_runs_emit_no_event_and_record_no_change() {
    install_crypto_provider();
    shared();
    let ns = "prod-s7";
    show(flux_apply(&namespace_with_api(ns))).ok();

    // bob's dry run is denied like the real write...
    let dry = kubectl(
        BOB,
        &[
            "scale",
            "deployment/api",
            "-n",
            ns,
            "--replicas=9",
            "--dry-run=server",
        ],
    );
    assert_denied(
        &dry,
        "bob may not update Deployment prod-s7/api (scale):",
        "NotPermitted",
    );
    // ... but reports nothing. Events are published in order by one task: once the Event of a
    // later real denial is there, one for the dry run would be too.
    let delete = kubectl(BOB, &["delete", "deployment/api", "-n", ns, "--wait=false"]);
    assert_denied(
        &delete,
        "bob may not delete Deployment prod-s7/api:",
        "NotPermitted",
    );
    wait_for_event(
        ns,
        "WriteDenied",
        "Deployment",
        "api",
        "bob may not delete Deployment prod-s7/api",
    )
    .await;
    let events = driftgate_events(ns).await;
    assert!(
        !events.iter().any(|e| e
            .note
            .as_deref()
            .is_some_and(|n| n.contains("bob may not update"))),
        "the dry run was reported: {events:?}"
    );

    // Under alice's window, her dry run is admitted with the warning, but neither reported nor
    // recorded.
    show(driftgate_cli(
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
            REASON,
        ],
    ))
    .ok();
    let dry = kubectl(
        ALICE,
        &[
            "scale",
            "deployment/api",
            "-n",
            ns,
            "--replicas=9",
            "--dry-run=server",
        ],
    )
    .ok();
    assert!(
        dry.stderr
            .contains("Warning: driftgate: alice changed Deployment prod-s7/api (scale)"),
        "{}",
        dry.stderr
    );
    assert_eq!(get_json("deployment/api", ns)["spec"]["replicas"], 2);
    let recorded = records(ns).await;
    assert_eq!(recorded.len(), 1, "{recorded:?}");
    assert!(
        recorded[0].spec.changes.is_empty(),
        "the dry run was recorded: {:?}",
        recorded[0].spec.changes
    );

    // A real change afterwards is reported and recorded, and it is the only one.
    kubectl(
        ALICE,
        &["label", "deployment/api", "-n", ns, "hotfix=inc-4711"],
    )
    .ok();
    wait_for_event(
        ns,
        "BreakGlassChange",
        "Deployment",
        "api",
        "alice changed Deployment prod-s7/api under",
    )
    .await;
    let changes: Vec<_> = driftgate_events(ns)
        .await
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("BreakGlassChange"))
        .collect();
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert!(
        changes[0]
            .note
            .as_deref()
            .is_some_and(|n| n.contains("metadata.labels.hotfix")),
        "{changes:?}"
    );
    let recorded = records(ns).await;
    let changes = &recorded[0].spec.changes;
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert_eq!(changes[0].subresource, "");
    assert_eq!(changes[0].fields[0].path, "metadata.labels.hotfix");
}

/// `driftgate_break_glass_labels_expired{policy="production"}` on the shared driftgate.
fn labels_expired_gauge() -> Option<i64> {
    let series = "driftgate_break_glass_labels_expired{policy=\"production\"} ";
    shared()
        .metrics()
        .lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
}

/// Issue 15, section 3: a label that outlived its window is listed with the command that
/// removes it, counted, and removed by bob, who is no opener: it holds no window any more.
#[tokio::test]
async fn an_expired_label_is_listed_with_its_removal_counted_and_removed_without_an_opener() {
    install_crypto_provider();
    shared();
    let ns = "prod-s-lingering";
    show(flux_apply(&namespace_with_api(ns))).ok();
    show(driftgate_cli(
        ALICE,
        &[
            "break-glass",
            "open",
            "deployment/api",
            "-n",
            ns,
            "--for",
            "3s",
            "--reason",
            REASON,
        ],
    ))
    .ok();
    // bob may not close an open window.
    let early = show(driftgate_cli(
        BOB,
        &["break-glass", "close", "deployment/api", "-n", ns],
    ));
    assert_denied(
        &early,
        "bob may not change the break-glass window on Deployment",
        "BreakGlassRefused",
    );
    tokio::time::sleep(std::time::Duration::from_secs(4)).await;

    let list = show(driftgate_cli(ALICE, &["break-glass", "list", "-n", ns])).ok();
    assert!(
        list.stdout.contains("deployment/api   expired"),
        "{}",
        list.stdout
    );
    let command = format!("driftgate break-glass close deployment/api -n {ns}");
    assert!(
        list.stdout.contains(&format!("no longer hold a window (expired, or not an expiry); nothing holds the controller off, but the label stays until removed. Remove each (no opener needed):\n  {command}\n")),
        "{}",
        list.stdout
    );
    let json = show(driftgate_cli(
        ALICE,
        &["break-glass", "list", "-n", ns, "-o", "json"],
    ))
    .ok();
    let rows: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(rows["kind"], "List", "{rows}");
    assert_eq!(rows["items"][0]["removeWith"], command.as_str(), "{rows}");

    // Flux's next apply shows driftgate the label, past its expiry: counted.
    show(flux_apply(&namespace_with_api(ns))).ok();
    eventually("the expired label to be counted", || async {
        labels_expired_gauge().filter(|n| *n >= 1)
    })
    .await;

    let closed = show(driftgate_cli(
        BOB,
        &["break-glass", "close", "deployment/api", "-n", ns],
    ))
    .ok();
    assert!(
        closed
            .stdout
            .contains("break-glass window closed on deployment/api"),
        "{}",
        closed.stdout
    );
    let live = get_json("deployment/api", ns);
    assert!(
        live["metadata"]["labels"]
            .get("driftgate.dev/break-glass")
            .is_none(),
        "{live}"
    );
    let after = show(driftgate_cli(ALICE, &["break-glass", "list", "-n", ns])).ok();
    assert!(!after.stdout.contains("deployment/api"), "{}", after.stdout);
}
