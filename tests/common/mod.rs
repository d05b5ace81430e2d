//! Helpers shared by the tests that need fixtures, decisions or a mocked API server.
// Each test crate uses a different subset of these helpers.
#![allow(dead_code)]

pub mod admin;
pub mod binary;
pub mod captured_log;
pub mod log_file;
pub mod scratch;
pub mod webhook;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use driftgate::certs::DevCertPaths;
use driftgate::decision::{Decision, DecisionInput, decide};
use driftgate::files::{read_object, read_review};
use driftgate::policy::PolicySet;
use driftgate::request::RequestFacts;
use driftgate::server::tls::TlsFiles;
use http_body_util::BodyExt;
use hyper::{Request, Response, StatusCode};
use kube::Client;
use kube::client::Body;
use kube::core::DynamicObject;
use kube::core::admission::AdmissionRequest;
use serde_json::Value;
use tower_test::mock;

pub type Handle = mock::Handle<Request<Body>, Response<Body>>;
pub type Responder = mock::SendResponse<Response<Body>>;

pub const NOW: &str = "2026-11-30T09:00:00Z";

pub fn path(relative: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(relative)
}

pub fn policies() -> PolicySet {
    PolicySet::load(&path("policies/example.yaml")).expect("the example policy loads")
}

pub fn review(name: &str) -> AdmissionRequest<DynamicObject> {
    read_review(&path(&format!("tests/fixtures/{name}"))).expect("the fixture reads")
}

pub fn parent(name: &str) -> DynamicObject {
    read_object(&path(&format!("tests/fixtures/parents/{name}"))).expect("the parent reads")
}

/// Decides a request against `policies` at `now`, with an optional parent object.
pub fn decide_with(
    policies: &PolicySet,
    request: &AdmissionRequest<DynamicObject>,
    parent: Option<&DynamicObject>,
    now: &str,
) -> Decision {
    decide(
        policies,
        &DecisionInput {
            request: &RequestFacts::new(request),
            resource: None,
            namespace: None,
            parent,
            recent_deletes: None,
            now: now.parse().expect("an RFC 3339 time"),
            silence: None,
        },
    )
}

/// A fixture decided against the example policy at [`NOW`].
pub fn decided(name: &str) -> (AdmissionRequest<DynamicObject>, Decision) {
    let request = review(name);
    let decision = decide_with(&policies(), &request, None, NOW);
    (request, decision)
}

/// A kube Client whose every request arrives at the returned handle.
pub fn mock_client() -> (Client, Handle) {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    (Client::new(service, "default"), handle)
}

/// The next request the client sends, waiting at most 5 s.
pub async fn next_request(handle: &mut Handle) -> (Request<Body>, Responder) {
    tokio::time::timeout(Duration::from_secs(5), handle.next_request())
        .await
        .expect("a request within 5 s")
        .expect("the client is alive")
}

/// Asserts that no request arrives within `wait`.
pub async fn no_request(handle: &mut Handle, wait: Duration) {
    if let Ok(Some((request, _))) = tokio::time::timeout(wait, handle.next_request()).await {
        panic!("unexpected request: {} {}", request.method(), request.uri());
    }
}

pub async fn body_json(request: Request<Body>) -> Value {
    let bytes = request
        .into_body()
        .collect()
        .await
        .expect("the request body reads")
        .to_bytes();
    serde_json::from_slice(&bytes).expect("the request body is JSON")
}

pub fn respond(send: Responder, status: u16, body: &Value) {
    let response = Response::builder()
        .status(StatusCode::from_u16(status).unwrap())
        .header("content-type", "application/json")
        .body(Body::from(serde_json::to_vec(body).unwrap()))
        .unwrap();
    send.send_response(response);
}

/// A Kubernetes Status error body, as the API server sends with a failure.
pub fn status(code: u16, reason: &str, message: &str) -> Value {
    serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "message": message, "reason": reason, "code": code
    })
}

/// Waits until `condition` holds, for at most 10 s (longer than any timeout in the code under
/// test, so that with paused time the code's timeout fires first).
pub async fn eventually(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !condition() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting until {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Runs `future`, failing the test if it takes more than 5 s.
pub async fn within_5s<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(5), future)
        .await
        .unwrap_or_else(|_| panic!("{what} took more than 5 s"))
}

/// Lays out `pair` the way the kubelet mounts a Secret: `tls.crt -> ..data/tls.crt`, with
/// `..data` a symlink to a versioned directory, swapped atomically on update.
pub fn mount_secret(dir: &Path, version: &str, pair: &DevCertPaths) -> TlsFiles {
    let versioned = dir.join(format!("..{version}"));
    std::fs::create_dir(&versioned).unwrap();
    std::fs::write(
        versioned.join("tls.crt"),
        std::fs::read(&pair.cert).unwrap(),
    )
    .unwrap();
    std::fs::write(versioned.join("tls.key"), std::fs::read(&pair.key).unwrap()).unwrap();
    let staged = dir.join("..data_tmp");
    std::os::unix::fs::symlink(format!("..{version}"), &staged).unwrap();
    std::fs::rename(&staged, dir.join("..data")).unwrap();
    for name in ["tls.crt", "tls.key"] {
        let link = dir.join(name);
        if std::fs::symlink_metadata(&link).is_err() {
            std::os::unix::fs::symlink(format!("..data/{name}"), &link).unwrap();
        }
    }
    TlsFiles {
        cert: dir.join("tls.crt"),
        key: dir.join("tls.key"),
    }
}
