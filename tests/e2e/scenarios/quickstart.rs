//! docs/quickstart-kind.md's commands as written there: kind's admin impersonating Flux, bob
//! and alice with kubectl `--as`, against the shared driftgate and its example policy.
//! `prod-quickstart` stands for the quickstart's `payments`: both are policy "production"'s.

use std::process::Command;

use driftgate::ledger::record::{BackportRequirement, Phase};

use crate::harness::{ADMIN, control_plane, install_crypto_provider, shared};

use super::{assert_denied, eventually, flux_apply, get_json, kubectl, records, show};

const NS: &str = "prod-quickstart";
const AS_FLUX: &str = "--as=system:serviceaccount:flux-system:kustomize-controller";

/// Step 3 comes from Git once driftgate runs: Flux applies the namespace and its RoleBinding.
fn namespace_and_rolebinding() -> String {
    format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {NS}\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\n\
         metadata:\n  name: demo-edit\n  namespace: {NS}\n\
         roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: edit}}\n\
         subjects:\n\
         - {{apiGroup: rbac.authorization.k8s.io, kind: User, name: bob}}\n\
         - {{apiGroup: rbac.authorization.k8s.io, kind: Group, name: sre-oncall}}\n"
    )
}

/// `kubectl --as=...kustomize-controller apply --server-side ... -f api.yaml`, as in steps 5 and 8.
fn flux_applies(api_yaml: &str) -> crate::harness::KubectlOutput {
    kubectl(
        ADMIN,
        &[
            AS_FLUX,
            "apply",
            "--server-side",
            "--field-manager=kustomize-controller",
            "--force-conflicts",
            "-f",
            api_yaml,
        ],
    )
}

fn phases(records: &[BackportRequirement]) -> Vec<Option<Phase>> {
    records
        .iter()
        .map(|r| r.status.as_ref().map(|s| s.phase))
        .collect()
}

async fn wait_for_phase(phase: Phase) {
    eventually(&format!("the record in {NS} to be {phase:?}"), || async {
        let now = phases(&records(NS).await);
        (now == [Some(phase)]).then_some(())
    })
    .await;
}

#[tokio::test]
async fn the_kind_quickstart_works_as_written() {
    install_crypto_provider();
    shared();
    show(flux_apply(&namespace_and_rolebinding())).ok();

    // Step 5: api.yaml plays Git.
    let api = kubectl(
        ADMIN,
        &[
            "-n",
            NS,
            "create",
            "deployment",
            "api",
            "--image=registry.k8s.io/pause:3.10",
        ]
        .into_iter()
        .chain(["--dry-run=client", "-o", "yaml"])
        .collect::<Vec<_>>(),
    )
    .ok()
    .stdout;
    let dir = control_plane().dir().join("quickstart");
    std::fs::create_dir_all(&dir).expect("the quickstart directory is created");
    let api_yaml = dir.join("api.yaml");
    let api_yaml_path = api_yaml.to_str().expect("the scratch path is UTF-8");
    std::fs::write(&api_yaml, &api).expect("api.yaml is written");
    flux_applies(api_yaml_path).ok();

    // Step 6: bob, and the admin, are refused.
    let set_image = [
        "-n",
        NS,
        "set",
        "image",
        "deployment/api",
        "pause=registry.k8s.io/pause:3.9",
    ];
    let bob = kubectl(ADMIN, &[&set_image[..], &["--as=bob"]].concat());
    assert_denied(
        &bob,
        &format!(
            "bob may not update Deployment {NS}/api: only its controllers (flux, kubernetes) write here"
        ),
        "NotPermitted",
    );
    let admin = kubectl(
        ADMIN,
        &["-n", NS, "scale", "deployment", "api", "--replicas=2"],
    );
    assert_denied(&admin, "admin may not", "NotPermitted");

    // Step 7: alice opens a window with the documented `date` and patch, and fixes the image.
    let date = Command::new("date")
        .args(["-u", "-d", "+1 hour", "+%Y%m%dT%H%MZ"])
        .output()
        .expect("date runs");
    let until = String::from_utf8(date.stdout).expect("date prints UTF-8");
    let open = format!(
        r#"{{"metadata":{{"labels":{{"driftgate.dev/break-glass":"{}"}},"annotations":{{"driftgate.dev/break-glass-reason":"INC-1: trying driftgate on kind"}}}}}}"#,
        until.trim()
    );
    let as_alice = ["--as=alice", "--as-group=sre-oncall"];
    let patch = ["-n", NS, "patch", "deployment", "api"];
    kubectl(
        ADMIN,
        &[&patch[..], &as_alice, &["--type=merge", "-p", &open]].concat(),
    )
    .ok();
    let fixed = kubectl(ADMIN, &[&set_image[..], &as_alice].concat()).ok();
    assert!(
        fixed.stderr.contains(&format!(
            "Warning: driftgate: alice changed Deployment {NS}/api under the break-glass window"
        )),
        "{}",
        fixed.stderr
    );
    assert_denied(&flux_applies(api_yaml_path), "", "ControllerHeld");
    assert_eq!(phases(&records(NS).await), [Some(Phase::Open)]);

    // Step 8: alice closes the window; Git gets the fix and Flux applies it.
    let close = r#"{"metadata":{"labels":{"driftgate.dev/break-glass":null},"annotations":{"driftgate.dev/break-glass-reason":null}}}"#;
    kubectl(
        ADMIN,
        &[&patch[..], &as_alice, &["--type=merge", "-p", close]].concat(),
    )
    .ok();
    wait_for_phase(Phase::AwaitingBackport).await;
    std::fs::write(&api_yaml, api.replace("pause:3.10", "pause:3.9"))
        .expect("api.yaml is rewritten");
    flux_applies(api_yaml_path).ok();
    wait_for_phase(Phase::Backported).await;
    assert_eq!(
        get_json("deployment/api", NS)["spec"]["template"]["spec"]["containers"][0]["image"],
        "registry.k8s.io/pause:3.9"
    );
}
