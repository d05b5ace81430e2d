//! A review is a claim; the API server is the truth (issue 24, section 1). Each test runs a
//! driftgate of its own WITHOUT client authentication (the chart's default), so anyone who
//! reaches its port may POST a review: the forgeries are POSTed with curl
//! (`harness::forge`), and what they would have changed is read back from the API server.
//! Each test then shows the real path working in the same mode. (`ledger.rs`'s
//! `forged_flux_reviews_settle_nothing_and_the_real_apply_does` is the same for settlements.)

use std::time::{Duration, Instant, SystemTime};

use serde_json::{Value, json};

use crate::harness::chart::NAMESPACE as DRIFTGATE_NAMESPACE;
use crate::harness::forge::{self, CONFIG_MAP, DEPLOYMENT, forge};
use crate::harness::policy_report_crd::PolicyReportCrd;
use crate::harness::{ADMIN, ALICE, BOB, Driftgate, FLUX, Identity, control_plane, driftgate_cli};
use crate::ledger::{Scene, TICK, wait_for};
use crate::silence::{bob_told_flux_may_be_down, flux_last_write, flux_record, same_time};

const LABEL: &str = "driftgate.dev/break-glass";
const REASON: &str = "driftgate.dev/break-glass-reason";
/// Longer than driftgate reads a write back (about 6.3 s of delays, and the reads).
const READ_BACK_SPAN: Duration = Duration::from_secs(9);
/// Generous for a loaded machine.
const WITHIN: Duration = Duration::from_secs(60);

/// A scene whose policy has `spec_extra` (lines of YAML at `spec`'s indentation) added.
fn scene_with(ns: &str, spec_extra: &str) -> Scene {
    let scene = Scene::new(ns, &[]);
    let policy = std::fs::read_to_string(&scene.policy).expect("the policy reads");
    // breakGlass is the template's last section: `spec`'s next key goes after it.
    std::fs::write(&scene.policy, policy + spec_extra).expect("the policy is written");
    scene
}

/// `kind/name` in `ns` as the API server stores it, None when it does not exist.
fn stored(target: &str, ns: &str) -> Option<Value> {
    let out = control_plane().kubectl(ADMIN, &["get", target, "-n", ns, "-o", "json"]);
    out.success()
        .then(|| serde_json::from_str(&out.stdout).expect("kubectl prints JSON"))
}

#[track_caller]
fn stored_now(target: &str, ns: &str) -> Value {
    stored(target, ns).unwrap_or_else(|| panic!("{target} in {ns} exists"))
}

/// `object` as another object of its name: another uid, as a forger who does not know the
/// real one would send it.
fn with_other_uid(object: &Value) -> Value {
    let mut other = object.clone();
    other["metadata"]["uid"] = json!(forge::uuid_ish());
    other
}

/// `object` at a resourceVersion the API server moved past long ago.
fn stale(object: &Value) -> Value {
    let mut stale = object.clone();
    stale["metadata"]["resourceVersion"] = json!("1");
    stale
}

/// The break-glass label's value for an expiry `seconds` from now (basic ISO 8601).
fn label_in(seconds: i64) -> String {
    let at = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(seconds);
    at.strftime("%Y%m%dT%H%M%SZ").to_string()
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// `spec.window` of the namespace's only record.
fn window(scene: &Scene) -> Value {
    scene.record()["spec"]["window"].clone()
}

/// A forged opener's review that extends an open window and rewrites its reason changes
/// nothing: the record keeps its expiry and reason (it extends only once the object the API
/// server stores carries the new label and reason), and expires as planned. Alice's real
/// extension, made before, is recorded.
#[test]
fn a_forged_extension_of_a_window_changes_no_record_and_it_expires_as_planned() {
    let scene = Scene::new("forged-window", &[]);
    let driftgate = scene.start("forged-window", TICK);
    let dg = &[&driftgate];
    scene.flux_apply(2, &[]).ok();
    scene.open_window("20s", "INC-2401: api saturated");
    let opened = wait_for("the window's record", WITHIN, dg, || {
        let records = scene.records();
        (records.len() == 1).then(|| records[0]["spec"]["window"].clone())
    });

    // The real path, unauthenticated: alice extends it and rewrites its reason.
    let reason = "INC-2402: api still saturated, window extended";
    scene.open_window("40s", reason);
    let extended = wait_for("the extension to be recorded", WITHIN, dg, || {
        let window = window(&scene);
        (window["reason"] == reason && window["expiresAt"] != opened["expiresAt"]).then_some(window)
    });
    eprintln!(
        "forgeries: alice's window {} extended to {}",
        opened["expiresAt"], extended["expiresAt"]
    );

    // The forger: alice's review setting the window to end in 110 s (within maxDuration), with
    // a reason of its own, against the object as stored, a stale copy and another uid.
    let live = stored_now("deployment/api", &scene.ns);
    let mut claimed = live.clone();
    claimed["metadata"]["labels"][LABEL] = json!(label_in(110));
    claimed["metadata"]["annotations"][REASON] = json!("INC-666: forged, window kept open");
    // Admitted: a review decides its own answer (here, into the void).
    forge_update_three_ways(
        &driftgate,
        &scene.ns,
        (&live, &claimed),
        ALICE,
        "kubectl-label",
    );
    std::thread::sleep(READ_BACK_SPAN);
    assert_eq!(window(&scene), extended, "the record is as alice left it");
    let live = stored_now("deployment/api", &scene.ns);
    assert_eq!(live["metadata"]["labels"][LABEL], extended["labelValue"]);
    assert_eq!(live["metadata"]["annotations"][REASON], reason);

    // It expires as planned.
    let expired = scene.wait_for_expiry(dg);
    assert_eq!(expired["spec"]["window"], extended, "{expired:#}");
}

/// A forged review that resumes a suspension changes nothing: the Suspension record stays
/// Open, nobody is recorded resuming it, and the object stays suspended (read back). Bob's
/// real `driftgate resume` then resumes it and is recorded.
#[test]
fn a_forged_resume_leaves_the_suspension_and_its_record_as_they_were() {
    // Suspensions judged in the policy's own namespace (the example's `production` does so).
    let scene = scene_with("forged-suspension", "  suspensions: {namespaces: []}\n");
    let driftgate = scene.start("forged-suspension", TICK);
    let dg = &[&driftgate];
    scene.flux_apply(2, &[]).ok();
    driftgate_cli(
        ALICE,
        &[
            "suspend",
            "deployment/api",
            "-n",
            &scene.ns,
            "--for",
            "90s",
            "--reason",
            "INC-2403: flux reverts the hotfix",
        ],
    )
    .ok();
    let suspended = wait_for("the suspension's record", WITHIN, dg, || {
        let records = scene.records();
        (records.len() == 1 && records[0]["spec"]["scope"] == "Suspension")
            .then(|| records[0].clone())
    });
    assert_eq!(suspended["status"]["phase"], "Open", "{suspended:#}");
    let live = stored_now("deployment/api", &scene.ns);
    let annotation = "kustomize.toolkit.fluxcd.io/reconcile";
    assert_eq!(live["metadata"]["annotations"][annotation], "disabled");

    // The forger: bob's review removing the suspension, its label and reason, as `driftgate
    // resume` would, against the object as stored, a stale copy and another uid.
    let mut resumed = live.clone();
    for (field, key) in [
        ("annotations", annotation),
        ("labels", LABEL),
        ("annotations", REASON),
    ] {
        resumed["metadata"][field]
            .as_object_mut()
            .unwrap()
            .remove(key);
    }
    // Resuming is always admitted.
    forge_update_three_ways(&driftgate, &scene.ns, (&live, &resumed), BOB, "driftgate");
    std::thread::sleep(READ_BACK_SPAN);
    let record = scene.record();
    assert_eq!(record["status"]["phase"], "Open", "{record:#}");
    assert!(record["status"]["resumedBy"].is_null(), "{record:#}");
    let live = stored_now("deployment/api", &scene.ns);
    assert_eq!(live["metadata"]["annotations"][annotation], "disabled");

    // The real resume, unauthenticated, is recorded.
    driftgate_cli(BOB, &["resume", "deployment/api", "-n", &scene.ns]).ok();
    let record = scene.wait_for_phase("Resumed", WITHIN, dg);
    assert_eq!(record["status"]["resumedBy"], "bob", "{record:#}");
}

/// With Flux (played) stopped, forged Flux reviews every second do not keep it fresh: the
/// gauge and the Lease stay at its last real write, and past the threshold bob's refusal says
/// Flux may be down. Forged: an apply of the object as stored (never stored), updates naming
/// an object that does not exist or with another uid, a create of a new object and a delete
/// of one that does not exist (each read back gone at once, which once counted as a write).
/// Then the real path: Flux writing again moves the gauge, and its stop is seen again.
#[test]
fn forged_flux_reviews_do_not_keep_a_stopped_flux_fresh_and_real_writes_do() {
    const THRESHOLD: f64 = 3.0;
    let ns = "forged-silence";
    let scene = Scene::new(ns, &[]);
    let driftgate = scene.start(
        ns,
        &[
            "--controller-silence-after",
            "3s",
            "--controller-silence-namespace",
            DRIFTGATE_NAMESPACE,
        ],
    );
    let dg = &[&driftgate];
    scene.flux_apply(1, &[]).ok();
    let first = wait_for("flux's create read back", WITHIN, dg, || {
        flux_last_write(&driftgate, ns)
    });
    wait_for("the Lease to hold it", WITHIN, dg, || {
        flux_record(ns).filter(|(at, _)| same_time(*at, first))
    });
    eprintln!("forgeries: flux's real write at {first:.3}; flux stops");

    let live = stored_now("deployment/api", ns);
    let mut applied = live.clone();
    applied["spec"]["replicas"] = json!(4);
    applied["metadata"]["managedFields"] = json!([{
        "manager": "kustomize-controller", "operation": "Apply", "apiVersion": "apps/v1",
        "time": jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}}},
    }]);
    let ghost = |name: &str| {
        let mut ghost = with_other_uid(&applied);
        ghost["metadata"]["name"] = json!(name);
        ghost
    };
    let apply = forge::apply_options("kustomize-controller");
    let forgeries: Vec<Value> = vec![
        forge::request(
            DEPLOYMENT,
            "UPDATE",
            ns,
            "ghost",
            FLUX,
            (ghost("ghost"), ghost("ghost")),
            apply.clone(),
        ),
        forge::request(
            DEPLOYMENT,
            "UPDATE",
            ns,
            "api",
            FLUX,
            (with_other_uid(&applied), with_other_uid(&live)),
            apply.clone(),
        ),
        forge::request(
            DEPLOYMENT,
            "CREATE",
            ns,
            "ghost-new",
            FLUX,
            (ghost("ghost-new"), Value::Null),
            apply.clone(),
        ),
        forge::request(
            DEPLOYMENT,
            "DELETE",
            ns,
            "ghost",
            FLUX,
            (Value::Null, ghost("ghost")),
            forge::delete_options(),
        ),
        forge::request(
            DEPLOYMENT,
            "UPDATE",
            ns,
            "api",
            FLUX,
            (applied.clone(), live.clone()),
            apply,
        ),
    ];
    // Every second for 25 s, across the 10 s between two confirmations of one controller's
    // writes. The forgery that comes first when one is due is the one read back: each batch
    // starts with one of the three that read back gone (which once counted as a write).
    let started = Instant::now();
    let mut batch = 0;
    while started.elapsed() < Duration::from_secs(25) {
        let gone_first = batch % 3;
        let order =
            std::iter::once(gone_first).chain((0..forgeries.len()).filter(|i| *i != gone_first));
        for i in order {
            let answer = forge(&driftgate, forgeries[i].clone());
            assert_eq!(answer["allowed"], true, "{answer:#}");
        }
        batch += 1;
        std::thread::sleep(Duration::from_secs(1));
    }
    std::thread::sleep(READ_BACK_SPAN);
    let last = flux_last_write(&driftgate, ns).expect("the series stays");
    assert_eq!(last, first, "no forged review moved flux's last write");
    let (at, _) = flux_record(ns).expect("the Lease stays");
    assert!(
        same_time(at, first),
        "the Lease holds {at}, flux wrote at {first}"
    );
    assert!(unix_now() - last > THRESHOLD);
    let (told, message) = bob_told_flux_may_be_down(ns, "forged");
    assert!(told, "{message}");
    assert!(stored("deployment/ghost", ns).is_none());
    assert!(stored("deployment/ghost-new", ns).is_none());
    eprintln!(
        "forgeries: {batch} batches of forged Flux reviews; the gauge stayed {:.1}s old; bob was told: {}",
        unix_now() - last,
        message.trim()
    );

    // The real path: Flux writes again (a change each time: an apply that changes nothing is
    // not stored), as a running Flux does every interval, until one is confirmed.
    let mut replicas = 1;
    let moved = wait_for("a real write of flux to move the gauge", WITHIN, dg, || {
        replicas = 3 - replicas;
        scene.flux_apply(replicas, &["--force-conflicts"]).ok();
        std::thread::sleep(Duration::from_millis(900));
        flux_last_write(&driftgate, ns).filter(|at| *at > first)
    });
    wait_for("the Lease to hold it", WITHIN, dg, || {
        flux_record(ns).filter(|(at, _)| same_time(*at, moved))
    });
    // Stopped again: seen again.
    let message = wait_for("bob's refusal to say flux may be down", WITHIN, dg, || {
        let (told, message) = bob_told_flux_may_be_down(ns, "stopped-again");
        told.then_some(message)
    });
    assert_eq!(flux_last_write(&driftgate, ns), Some(moved));
    eprintln!(
        "forgeries: flux's real write at {moved:.3} moved the gauge; stopped, bob was told: {}",
        message.trim()
    );
}

/// ConfigMaps `cm-0`… in `ns`, as Flux applies them.
fn flux_config_maps(ns: &str, count: usize) {
    let manifest: String = (0..count)
        .map(|i| {
            format!(
                "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-{i}\n  namespace: {ns}\ndata: {{n: \"{i}\"}}\n"
            )
        })
        .collect();
    crate::scenarios::flux_apply(&manifest).ok();
}

/// The names of the ConfigMaps `cm-*` left in `ns`.
fn config_maps_left(ns: &str) -> Vec<String> {
    let out = control_plane().kubectl(ADMIN, &["get", "configmaps", "-n", ns, "-o", "name"]);
    let mut left: Vec<String> = out
        .ok()
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix("configmap/"))
        .filter(|n| n.starts_with("cm-"))
        .map(str::to_owned)
        .collect();
    left.sort();
    left
}

/// Forged Flux deletes do not fill the deletion tally (`controllerLimit: 3 per 1m`): ten of
/// names that do not exist, two of existing objects under another uid, three of existing
/// objects (their own uids) that are then not deleted. A real prune burst afterwards, six
/// deletes in one `kubectl delete` as Flux, is judged on the real count only: three deleted,
/// the rest refused with `DeletionLimit`.
#[test]
fn forged_flux_deletes_do_not_fill_the_tally_and_a_real_prune_burst_stops_at_the_limit() {
    let scene = scene_with(
        "forged-deletes",
        "  deletions:\n    controllerLimit: {deletes: 3, per: 1m}\n",
    );
    let ns = scene.ns.as_str();
    let driftgate = scene.start("forged-deletes", TICK);
    flux_config_maps(ns, 8);
    assert_eq!(config_maps_left(ns).len(), 8);

    let delete = |name: &str, old: Value| {
        forge(
            &driftgate,
            forge::request(
                CONFIG_MAP,
                "DELETE",
                ns,
                name,
                FLUX,
                (Value::Null, old),
                forge::delete_options(),
            ),
        )
    };
    let cm0 = stored_now("configmap/cm-0", ns);
    for i in 0..10 {
        let mut ghost = with_other_uid(&cm0);
        ghost["metadata"]["name"] = json!(format!("ghost-{i}"));
        let answer = delete(&format!("ghost-{i}"), ghost);
        assert_eq!(answer["allowed"], true, "nothing counted: {answer:#}");
        // Time for a read back to see it "gone", as it would have before.
        std::thread::sleep(Duration::from_millis(300));
    }
    for name in ["cm-3", "cm-4"] {
        let answer = delete(
            name,
            with_other_uid(&stored_now(&format!("configmap/{name}"), ns)),
        );
        assert_eq!(answer["allowed"], true, "nothing counted: {answer:#}");
    }
    for name in ["cm-0", "cm-1", "cm-2"] {
        let answer = delete(name, stored_now(&format!("configmap/{name}"), ns));
        assert_eq!(answer["allowed"], true, "{answer:#}");
    }
    std::thread::sleep(READ_BACK_SPAN);
    assert_eq!(
        config_maps_left(ns).len(),
        8,
        "the forgeries deleted nothing"
    );

    // The real prune burst, one request after the other as Flux sends them.
    let names: Vec<String> = (0..6).map(|i| format!("configmap/cm-{i}")).collect();
    let mut args = vec!["delete", "-n", ns, "--wait=false"];
    args.extend(names.iter().map(String::as_str));
    let out = control_plane().kubectl(FLUX, &args);
    eprintln!(
        "forgeries: the real prune burst: {}{}",
        out.stdout, out.stderr
    );
    assert_eq!(
        config_maps_left(ns),
        ["cm-3", "cm-4", "cm-5", "cm-6", "cm-7"],
        "three deleted, then the limit: {}",
        driftgate.log_tail(20)
    );
    assert!(out.stderr.contains("rule DeletionLimit"), "{}", out.stderr);
    assert!(
        out.stderr
            .contains(&format!("it deleted 3 objects in {ns} within 1m")),
        "{}",
        out.stderr
    );
}

/// A forged refused write does not show in the namespace's PolicyReport (unauthenticated, a
/// refusal leaves nothing stored to confirm it by): the report, written after the forgeries
/// and showing the window opened after them, holds no `fail`, though driftgate refused them.
#[test]
fn a_forged_refused_write_does_not_show_in_the_policy_report() {
    let crd = PolicyReportCrd::hold();
    let scene = Scene::new("forged-reports", &[]);
    let ns = scene.ns.clone();
    crd.install();
    {
        let driftgate = scene.start(
            "forged-reports",
            &[
                "--expiry-check-interval",
                "1s",
                "--policy-reports",
                "--policy-report-interval",
                "1s",
            ],
        );
        let dg = &[&driftgate];
        scene.flux_apply(2, &[]).ok();

        let live = stored_now("deployment/api", &ns);
        let mut scaled = live.clone();
        scaled["spec"]["replicas"] = json!(9);
        for who in [BOB, ALICE] {
            let answer = forge(
                &driftgate,
                forge::request(
                    DEPLOYMENT,
                    "UPDATE",
                    &ns,
                    "api",
                    who,
                    (scaled.clone(), live.clone()),
                    forge::patch_options("kubectl-edit"),
                ),
            );
            assert_eq!(answer["allowed"], false, "{answer:#}");
        }
        let denied = driftgate.counter(
            "driftgate_admission_reviews_total",
            &["decision=\"denied\""],
        );
        assert!(denied >= 2.0, "driftgate refused the forgeries: {denied}");

        // Something the report does show, after the forgeries: an open window.
        scene.open_window("2m", "INC-2405: api saturated");
        let report = wait_for("the report to show the window", WITHIN, dg, || {
            let out = control_plane().kubectl(
                ADMIN,
                &[
                    "get",
                    "policyreports.wgpolicyk8s.io",
                    "driftgate",
                    "-n",
                    &ns,
                    "-o",
                    "json",
                ],
            );
            let report: Value = out
                .success()
                .then(|| serde_json::from_str(&out.stdout).ok())??;
            report["results"]
                .as_array()?
                .iter()
                .any(|r| r["rule"] == "BreakGlassWindowOpen")
                .then_some(report)
        });
        let fails: Vec<&Value> = report["results"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["result"] == "fail")
            .collect();
        assert!(fails.is_empty(), "{report:#}");
        assert_eq!(report["summary"]["fail"], 0, "{report:#}");
        eprintln!(
            "forgeries: {denied} refusals, the report: {}",
            report["summary"]
        );
    }
    // The driftgate is gone (its block has ended) before `crd` removes the CRD: nothing
    // writes reports while it goes.
}

/// Three times a second apart, `who`'s forged UPDATE of Deployment api into `claimed`, made to
/// the object as stored, to a stale copy and to one under another uid; each must be admitted
/// (a review decides only its own answer).
fn forge_update_three_ways(
    driftgate: &Driftgate,
    ns: &str,
    (live, claimed): (&Value, &Value),
    who: Identity,
    field_manager: &str,
) {
    for _ in 0..3 {
        for old in [live.clone(), stale(live), with_other_uid(live)] {
            let mut object = claimed.clone();
            object["metadata"]["uid"] = old["metadata"]["uid"].clone();
            let answer = forge(
                driftgate,
                forge::request(
                    DEPLOYMENT,
                    "UPDATE",
                    ns,
                    "api",
                    who,
                    (object, old),
                    forge::patch_options(field_manager),
                ),
            );
            assert_eq!(answer["allowed"], true, "{answer:#}");
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}
