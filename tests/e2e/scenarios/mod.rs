//! The scenarios of the end-to-end issue, each against the real API server with real kubectl,
//! the `driftgate break-glass` CLI and kube-rs clients as the test identities.
//!
//! Every test uses namespaces of its own (`prod-s1`, `prod-s3`, …), created by Flux (or by the
//! admin where no driftgate guards them yet), so the tests run in parallel against the shared
//! control plane and the shared driftgate. Anything asynchronous (Events, caches) is polled with
//! a deadline.

mod argocd_auto_resume;
mod argocd_capture;
mod auto_resume;
mod backport;
mod blast_radius;
mod break_glass;
mod bypass;
mod cluster_scoped;
mod deep;
mod deletion_cascade;
mod effects;
mod gatepolicy;
mod gitops;
mod gitops_objects;
mod ledger_guard;
mod normal_day;
mod quickstart;
mod real_argocd;
mod real_flux;
mod real_flux_capture;
mod rotation;
pub mod scan;
mod scope;
mod subresources;
mod suspensions;

use std::future::Future;
use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use driftgate::ledger::record::BackportRequirement;
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::ListParams;
use serde_json::Value;

use crate::harness::{ADMIN, FLUX, Identity, KubectlOutput, control_plane};

/// The webhook's name in [`crate::harness::webhook_configuration`]; kubectl quotes it.
pub const WEBHOOK: &str = "gate.driftgate.dev";

/// Flux's field manager in the example policy.
pub const FLUX_FIELD_MANAGER: &str = "kustomize-controller";

/// driftgate's Events name this reporting controller.
pub const REPORTING_CONTROLLER: &str = "driftgate.dev/webhook";

/// The image Git declares for `api`.
pub const IMAGE: &str = "registry.example/payments-api:1.4.2";

/// How long anything asynchronous (an Event, a cache) may take before a test fails.
const DEADLINE: Duration = Duration::from_secs(30);

/// Deployment `api` in `namespace` as Git declares it.
pub fn api_deployment(namespace: &str, replicas: u32) -> String {
    format!(
        r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: api
  namespace: {namespace}
spec:
  replicas: {replicas}
  selector:
    matchLabels: {{app: api}}
  template:
    metadata:
      labels: {{app: api}}
    spec:
      containers:
        - name: api
          image: {IMAGE}
"#
    )
}

/// A Namespace and, in it, [`api_deployment`] with 2 replicas.
pub fn namespace_with_api(namespace: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {namespace}\n---{}",
        api_deployment(namespace, 2)
    )
}

/// Flux's kustomize-controller applying `manifest`: server-side apply with its field manager,
/// forcing conflicts as Flux does (after a `kubectl scale`, `spec.replicas` belongs to kubectl).
pub fn flux_apply(manifest: &str) -> KubectlOutput {
    let field_manager = format!("--field-manager={FLUX_FIELD_MANAGER}");
    control_plane().kubectl_with_stdin(
        FLUX,
        &[
            "apply",
            "--server-side",
            &field_manager,
            "--force-conflicts",
            "-f",
            "-",
        ],
        Some(manifest),
    )
}

/// `kubectl edit TARGET -n NAMESPACE` as `who`, non-interactively: the editor is a script that
/// runs `sed -i -e SED` on the file kubectl hands it. `sed` must hold no single quote.
pub fn kubectl_edit(who: Identity, target: &str, namespace: &str, sed: &str) -> KubectlOutput {
    assert!(!sed.contains('\''), "the sed expression is single-quoted");
    static EDITORS: AtomicUsize = AtomicUsize::new(0);
    let control_plane = control_plane();
    let dir = control_plane.dir().join("editors");
    std::fs::create_dir_all(&dir).expect("the editors directory is created");
    let script = dir.join(format!(
        "edit-{}.sh",
        EDITORS.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::write(
        &script,
        format!("#!/bin/sh\nexec sed -i -e '{sed}' \"$1\"\n"),
    )
    .expect("the editor script is written");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))
        .expect("the editor script is made executable");
    let editor = script.to_str().expect("the scratch path is UTF-8");
    assert!(!editor.contains(' '), "kubectl would split {editor}");
    // A refused edit is saved in a temporary file "to try again": keep those in the scratch
    // directory, which goes when the test binary exits.
    let tmp = dir.to_str().expect("the scratch path is UTF-8");
    show(control_plane.kubectl_with_env(
        who,
        &["edit", target, "-n", namespace],
        None,
        &[("KUBE_EDITOR", editor), ("TMPDIR", tmp)],
    ))
}

/// Prints what a command printed (visible with `--nocapture`), and hands it back.
pub fn show(out: KubectlOutput) -> KubectlOutput {
    eprintln!(
        "$ {} {}  # exit {:?}\n{}{}",
        out.program,
        out.args.join(" "),
        out.code,
        out.stdout,
        out.stderr
    );
    out
}

/// kubectl as `who`, shown.
pub fn kubectl(who: Identity, args: &[&str]) -> KubectlOutput {
    show(control_plane().kubectl(who, args))
}

/// The command failed, and its stderr carries driftgate's refusal as the API server relays it:
/// `admission webhook "gate.driftgate.dev" denied the request: SENTENCE…`, naming `rule`.
#[track_caller]
pub fn assert_denied(out: &KubectlOutput, sentence: &str, rule: &str) {
    assert!(
        !out.success(),
        "{} {} was admitted:\n{}{}",
        out.program,
        out.args.join(" "),
        out.stdout,
        out.stderr
    );
    let denied = format!("admission webhook \"{WEBHOOK}\" denied the request: {sentence}");
    assert!(
        out.stderr.contains(&denied),
        "{} {}: stderr lacks `{denied}`:\n{}",
        out.program,
        out.args.join(" "),
        out.stderr
    );
    assert!(
        out.stderr.contains(&format!("rule {rule})")),
        "{} {}: stderr does not name rule {rule}:\n{}",
        out.program,
        out.args.join(" "),
        out.stderr
    );
}

/// The object as the admin reads it, as JSON.
pub fn get_json(target: &str, namespace: &str) -> Value {
    let out = control_plane()
        .kubectl(ADMIN, &["get", target, "-n", namespace, "-o", "json"])
        .ok();
    serde_json::from_str(&out.stdout).expect("kubectl prints JSON")
}

/// Polls `check` every 200 ms until it returns Some, failing after [`DEADLINE`].
pub async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + DEADLINE;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {DEADLINE:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The `events.k8s.io/v1` Events driftgate reported in `namespace`.
pub async fn driftgate_events(namespace: &str) -> Vec<Event> {
    let events: Api<Event> = Api::namespaced(control_plane().client(ADMIN).await, namespace);
    events
        .list(&ListParams::default())
        .await
        .expect("the admin lists Events")
        .items
        .into_iter()
        .filter(|e| e.reporting_controller.as_deref() == Some(REPORTING_CONTROLLER))
        .collect()
}

/// Waits for driftgate's Event of `reason` about `kind`/`name` in `namespace` whose note
/// contains `note`.
pub async fn wait_for_event(
    namespace: &str,
    reason: &str,
    kind: &str,
    name: &str,
    note: &str,
) -> Event {
    eventually(
        &format!("a {reason} Event on {kind} {namespace}/{name} saying \"{note}\""),
        || async {
            driftgate_events(namespace).await.into_iter().find(|e| {
                let regarding = e.regarding.clone().unwrap_or_default();
                e.reason.as_deref() == Some(reason)
                    && regarding.kind.as_deref() == Some(kind)
                    && regarding.name.as_deref() == Some(name)
                    && e.note.as_deref().is_some_and(|n| n.contains(note))
            })
        },
    )
    .await
}

/// The backport records in `namespace`.
pub async fn records(namespace: &str) -> Vec<BackportRequirement> {
    let api: Api<BackportRequirement> =
        Api::namespaced(control_plane().client(ADMIN).await, namespace);
    api.list(&ListParams::default())
        .await
        .expect("the admin lists BackportRequirements")
        .items
}

/// Applies a CustomResourceDefinition as the admin and waits until it is served.
pub fn establish_crd(manifest: &str, name: &str) {
    let control_plane = control_plane();
    control_plane.apply(ADMIN, manifest);
    control_plane
        .kubectl(
            ADMIN,
            &[
                "wait",
                "--for=condition=Established",
                "--timeout=30s",
                &format!("crd/{name}"),
            ],
        )
        .ok();
}
