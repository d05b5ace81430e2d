//! A capture webhook: an HTTPS server on loopback that admits every AdmissionReview and keeps
//! the bodies the API server sends it, registered with a ValidatingWebhookConfiguration of its
//! own whose `namespaceSelector` matches one label. It shows what a controller really sends
//! (identity, options, managedFields), next to the shared driftgate judging the same requests.
//!
//! It runs on a thread and Tokio runtime of its own: the tests' runtimes are single-threaded
//! and block in kubectl, and a webhook that cannot answer meanwhile would be skipped
//! (`failurePolicy: Ignore`) rather than captured.

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::routing::post;
use axum_server::Handle;
use axum_server::tls_rustls::RustlsConfig;
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    RuleWithOperations, ValidatingWebhook, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::api::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};
use serde_json::Value;

use super::control_plane::{ADMIN, control_plane};
use super::pki::Ca;

/// The bodies received so far, in order of arrival.
type Reviews = Arc<Mutex<Vec<Value>>>;

pub struct CaptureWebhook {
    configuration: String,
    reviews: Reviews,
    handle: Handle<SocketAddr>,
    server: Option<JoinHandle<()>>,
}

impl CaptureWebhook {
    /// Starts the server, registers it as ValidatingWebhookConfiguration `configuration` for
    /// every write (and `*/scale`) in namespaces labelled `label` (key, value), and waits until
    /// the API server calls it: a server-side dry-run ConfigMap create by the admin in
    /// `probe_namespace` (which must carry the label), repeated until one is captured.
    pub fn register(
        configuration: &str,
        label: (&str, &str),
        probe_namespace: &str,
    ) -> CaptureWebhook {
        let ca = Ca::new();
        let serving = ca.serving("driftgate-e2e-capture");
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port binds");
        listener
            .set_nonblocking(true)
            .expect("the listener is made non-blocking for Tokio");
        let addr = listener.local_addr().expect("the listener has an address");
        let reviews = Reviews::default();
        let handle = Handle::new();
        let server = spawn_server(listener, serving.cert, serving.key, &reviews, &handle);
        let capture = CaptureWebhook {
            configuration: configuration.to_owned(),
            reviews,
            handle,
            server: Some(server),
        };
        let url = format!("https://{addr}/capture");
        let manifest = webhook_configuration(configuration, &url, &ca.cert_pem(), label);
        control_plane().apply(ADMIN, &serde_json::to_string(&manifest).unwrap());
        capture.wait_until_called(probe_namespace);
        capture
    }

    fn wait_until_called(&self, probe_namespace: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        let probe = format!("{}-probe", self.configuration);
        loop {
            let before = self.reviews().len();
            // Admitted or not by the other webhooks: only the count tells whether this one
            // was called.
            control_plane().kubectl(
                ADMIN,
                &[
                    "create",
                    "configmap",
                    &probe,
                    "-n",
                    probe_namespace,
                    "--dry-run=server",
                ],
            );
            if self.reviews().len() > before {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the API server never called capture webhook {} for namespace {probe_namespace}",
                self.configuration
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Every AdmissionReview received so far, as the API server sent it.
    pub fn reviews(&self) -> Vec<Value> {
        self.reviews
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl Drop for CaptureWebhook {
    /// Unregisters first, so the API server stops calling a server about to go.
    fn drop(&mut self) {
        let _ = control_plane().kubectl(
            ADMIN,
            &[
                "delete",
                "validatingwebhookconfiguration",
                &self.configuration,
                "--ignore-not-found",
            ],
        );
        self.handle.shutdown();
        if let Some(server) = self.server.take() {
            let _ = server.join();
        }
    }
}

fn spawn_server(
    listener: TcpListener,
    cert: String,
    key: String,
    reviews: &Reviews,
    handle: &Handle<SocketAddr>,
) -> JoinHandle<()> {
    let reviews = reviews.clone();
    let handle = handle.clone();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("the capture webhook's runtime builds");
        runtime.block_on(async move {
            let tls = RustlsConfig::from_pem(cert.into_bytes(), key.into_bytes())
                .await
                .expect("the capture webhook's certificate loads");
            let app = Router::new()
                .route("/capture", post(admit))
                .with_state(reviews);
            axum_server::from_tcp_rustls(listener, tls)
                .expect("the capture webhook takes its listener")
                .handle(handle)
                .serve(app.into_make_service())
                .await
                .expect("the capture webhook serves");
        });
    })
}

/// Keeps the body and admits the request. A body kube-rs cannot read as a review is kept too
/// (and answered 400, which `failurePolicy: Ignore` lets through): it is what the test is
/// about to look at.
async fn admit(
    State(reviews): State<Reviews>,
    body: Bytes,
) -> Result<axum::Json<Value>, (axum::http::StatusCode, String)> {
    let bad = |e: String| (axum::http::StatusCode::BAD_REQUEST, e);
    let raw: Value = serde_json::from_slice(&body).map_err(|e| bad(e.to_string()))?;
    reviews
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(raw.clone());
    let review: AdmissionReview<DynamicObject> =
        serde_json::from_value(raw).map_err(|e| bad(e.to_string()))?;
    let request: AdmissionRequest<DynamicObject> =
        review.try_into().map_err(|e| bad(format!("{e}")))?;
    let answer = AdmissionResponse::from(&request).into_review();
    Ok(axum::Json(serde_json::to_value(answer).unwrap()))
}

/// Every group, version and resource (`*/scale` too), CREATE/UPDATE/DELETE, in namespaces
/// labelled `label`, never refusing anything: `failurePolicy: Ignore`, no side effects.
fn webhook_configuration(
    name: &str,
    url: &str,
    ca_pem: &str,
    (key, value): (&str, &str),
) -> ValidatingWebhookConfiguration {
    let all = || Some(vec!["*".to_owned()]);
    ValidatingWebhookConfiguration {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..ObjectMeta::default()
        },
        webhooks: Some(vec![ValidatingWebhook {
            name: "capture.e2e.driftgate.dev".to_owned(),
            admission_review_versions: vec!["v1".to_owned()],
            client_config: WebhookClientConfig {
                url: Some(url.to_owned()),
                ca_bundle: Some(ByteString(ca_pem.as_bytes().to_vec())),
                service: None,
            },
            failure_policy: Some("Ignore".to_owned()),
            namespace_selector: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([(key.to_owned(), value.to_owned())])),
                match_expressions: None,
            }),
            rules: Some(vec![RuleWithOperations {
                api_groups: all(),
                api_versions: all(),
                operations: Some(vec!["CREATE".into(), "UPDATE".into(), "DELETE".into()]),
                resources: Some(vec!["*".to_owned(), "*/scale".to_owned()]),
                scope: Some("*".to_owned()),
            }]),
            side_effects: "None".to_owned(),
            timeout_seconds: Some(5),
            ..ValidatingWebhook::default()
        }]),
    }
}
