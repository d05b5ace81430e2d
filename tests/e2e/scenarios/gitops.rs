//! Scenarios 1 and 2: only Flux writes; people's kubectl writes, and a person posing as Flux
//! through its field manager, are denied with driftgate's message.

use crate::harness::{BOB, install_crypto_provider, shared};

use super::{
    IMAGE, api_deployment, assert_denied, flux_apply, get_json, kubectl, kubectl_edit,
    namespace_with_api, show, wait_for_event,
};

#[tokio::test]
async fn flux_applies_and_bobs_edit_patch_scale_label_and_delete_are_denied() {
    install_crypto_provider();
    shared();
    let ns = "prod-s1";
    show(flux_apply(&namespace_with_api(ns))).ok();

    let edit = kubectl_edit(
        BOB,
        "deployment/api",
        ns,
        "s|payments-api:1.4.2|payments-api:1.4.3-hotfix|",
    );
    assert_denied(
        &edit,
        "bob may not update Deployment prod-s1/api: only its controllers (flux, kubernetes) write here",
        "NotPermitted",
    );
    // The refusal says how to proceed.
    assert!(
        edit.stderr.contains(
            "driftgate break-glass open deployment/api -n prod-s1 --for 1h --reason \"INC-…: what and why\""
        ),
        "{}",
        edit.stderr
    );

    let patch = kubectl(
        BOB,
        &[
            "patch",
            "deployment/api",
            "-n",
            ns,
            "--type=merge",
            "-p",
            r#"{"spec":{"replicas":3}}"#,
        ],
    );
    assert_denied(
        &patch,
        "bob may not update Deployment prod-s1/api:",
        "NotPermitted",
    );

    let scale = kubectl(BOB, &["scale", "deployment/api", "-n", ns, "--replicas=5"]);
    assert_denied(
        &scale,
        "bob may not update Deployment prod-s1/api (scale):",
        "NotPermitted",
    );

    let label = kubectl(BOB, &["label", "deployment/api", "-n", ns, "owner=bob"]);
    assert_denied(
        &label,
        "bob may not update Deployment prod-s1/api:",
        "NotPermitted",
    );

    let delete = kubectl(BOB, &["delete", "deployment/api", "-n", ns, "--wait=false"]);
    assert_denied(
        &delete,
        "bob may not delete Deployment prod-s1/api:",
        "NotPermitted",
    );

    // Nothing bob tried happened.
    let live = get_json("deployment/api", ns);
    assert_eq!(live["spec"]["replicas"], 2, "{live}");
    assert_eq!(
        live["spec"]["template"]["spec"]["containers"][0]["image"],
        IMAGE
    );
    assert!(live["metadata"]["labels"]["owner"].is_null(), "{live}");
    assert!(live["metadata"]["deletionTimestamp"].is_null(), "{live}");

    // Each denial is reported on the Deployment.
    wait_for_event(
        ns,
        "WriteDenied",
        "Deployment",
        "api",
        "bob may not delete Deployment prod-s1/api",
    )
    .await;
}

#[tokio::test]
async fn bob_applying_with_fluxs_field_manager_is_denied_as_spoofing() {
    install_crypto_provider();
    shared();
    let ns = "prod-s2";
    show(flux_apply(&namespace_with_api(ns))).ok();

    let spoofed = show(crate::harness::control_plane().kubectl_with_stdin(
        BOB,
        &[
            "apply",
            "--server-side",
            "--field-manager=kustomize-controller",
            "-f",
            "-",
        ],
        Some(&api_deployment(ns, 7)),
    ));
    assert_denied(
        &spoofed,
        "bob may not update Deployment prod-s2/api with field manager \"kustomize-controller\": it belongs to controller flux",
        "FieldManagerSpoofing",
    );
    assert_eq!(get_json("deployment/api", ns)["spec"]["replicas"], 2);
}
