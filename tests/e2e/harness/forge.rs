//! Forged AdmissionReviews (issue 24, section 1): what anyone who reaches a driftgate's webhook
//! port can POST when it does not require the API server's client certificate (the chart's
//! default). Sent with curl and no client certificate, trusting only the serving CA, as a
//! stranger on the cluster network would.

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use super::{Driftgate, Identity};

/// A resource as a review names it: group, version, kind and plural.
#[derive(Clone, Copy)]
pub struct Resource {
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    pub plural: &'static str,
}

pub const DEPLOYMENT: Resource = Resource {
    group: "apps",
    version: "v1",
    kind: "Deployment",
    plural: "deployments",
};

pub const CONFIG_MAP: Resource = Resource {
    group: "",
    version: "v1",
    kind: "ConfigMap",
    plural: "configmaps",
};

/// `userInfo` as the API server fills it for `who`.
pub fn user_info(who: Identity) -> Value {
    let mut groups: Vec<&str> = who.groups.to_vec();
    groups.push("system:authenticated");
    json!({"username": who.user, "groups": groups})
}

/// The request of a review of `operation` on `resource` `namespace/name` by `who`, with the
/// objects and options given (Null: none).
pub fn request(
    resource: Resource,
    operation: &str,
    namespace: &str,
    name: &str,
    who: Identity,
    objects: (Value, Value),
    options: Value,
) -> Value {
    let (object, old_object) = objects;
    let gvk = json!({"group": resource.group, "version": resource.version, "kind": resource.kind});
    let gvr =
        json!({"group": resource.group, "version": resource.version, "resource": resource.plural});
    json!({
        "uid": format!("forged-{}", uuid_ish()),
        "kind": gvk, "requestKind": gvk,
        "resource": gvr, "requestResource": gvr,
        "name": name, "namespace": namespace, "operation": operation,
        "userInfo": user_info(who),
        "object": object, "oldObject": old_object, "dryRun": false,
        "options": options,
    })
}

/// Options of a server-side apply by field manager `manager`.
pub fn apply_options(manager: &str) -> Value {
    json!({"apiVersion": "meta.k8s.io/v1", "kind": "PatchOptions", "fieldManager": manager, "force": true})
}

/// Options of a merge patch by field manager `manager`.
pub fn patch_options(manager: &str) -> Value {
    json!({"apiVersion": "meta.k8s.io/v1", "kind": "PatchOptions", "fieldManager": manager})
}

/// Options of a delete, as Flux prunes.
pub fn delete_options() -> Value {
    json!({"apiVersion": "meta.k8s.io/v1", "kind": "DeleteOptions", "propagationPolicy": "Background"})
}

/// POSTs an AdmissionReview of `request` to `driftgate`'s webhook with curl, without a client
/// certificate, and returns the answer's `response`.
#[track_caller]
pub fn forge(driftgate: &Driftgate, request: Value) -> Value {
    let ca = driftgate.dir().join("forger-ca.pem");
    if !ca.exists() {
        std::fs::write(&ca, driftgate.ca_pem()).expect("the CA is written");
    }
    let review =
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request});
    let out = Command::new("curl")
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
        .and_then(|mut child| {
            child
                .stdin
                .take()
                .expect("curl's stdin")
                .write_all(review.to_string().as_bytes())?;
            child.wait_with_output()
        })
        .expect("curl runs");
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not an AdmissionReview answer ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    answer["response"].clone()
}

/// A fresh uid-shaped string: forged requests and objects need uids no object has.
pub fn uuid_ish() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    format!(
        "f0f0f0f0-{:04x}-4000-8000-{:012x}",
        n & 0xffff,
        nanos & 0xffff_ffff_ffff
    )
}
