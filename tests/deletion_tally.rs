//! The deletion tally (`deletions.controllerLimit`) without client authentication, through the
//! webhook router with a mocked API server: a review is a claim, so a controller's delete counts
//! only when its object was there, as the review names it, while the review was answered (the
//! API server reviews a DELETE before it deletes), and then reads back gone. A forged review of
//! an object that does not exist, or exists with another uid, counts nothing and is not read
//! back; several reviews of one object count once. The same on a real API server:
//! tests/e2e/forgeries.rs.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use driftgate::event_sink::EventSink;
use driftgate::kube_state::{NamespaceCache, ParentLookup};
use driftgate::metrics::Metrics;
use driftgate::policy::PolicySet;
use driftgate::server::{AppState, admin_router, router};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use common::{Handle, mock_client, next_request, no_request, respond, status};

/// flux-real-prune.json: the real Flux's prune of ConfigMap settings, under the example
/// policy's `production` (a limit of 20 deletes per minute).
const PRUNE: &str = "tests/fixtures/flux-real-prune.json";
const NS: &str = "prod-flux-capture";
const GAUGE: &str =
    "driftgate_controller_last_write_timestamp_seconds{policy=\"production\",controller=\"flux\"}";

struct Harness {
    state: Arc<AppState>,
    api: Handle,
    _shutdown: CancellationToken,
}

/// The example policy, every caller unauthenticated, reading through a mocked API server.
fn harness() -> Harness {
    let metrics = Arc::new(Metrics::new());
    let shutdown = CancellationToken::new();
    let policies = PolicySet::load(Path::new("policies/example.yaml")).unwrap();
    let (events, _task) =
        EventSink::spawn(None, "test".into(), 16, metrics.clone(), shutdown.clone());
    let (client, api) = mock_client();
    let state = Arc::new(
        AppState::new(
            Arc::new(ArcSwap::from_pointee(policies)),
            NamespaceCache::disabled(),
            ParentLookup::new(None, Duration::from_secs(1), metrics.clone()),
            events,
            metrics,
        )
        .with_read_back(Some(client), false),
    );
    Harness {
        state,
        api,
        _shutdown: shutdown,
    }
}

/// The prune review with `uid` as its object's uid.
fn prune(uid: &str) -> Value {
    let mut review: Value =
        serde_json::from_slice(&std::fs::read(PRUNE).expect("the fixture reads")).unwrap();
    review["request"]["oldObject"]["metadata"]["uid"] = json!(uid);
    review
}

/// ConfigMap settings as the API server stores it.
fn stored(uid: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "settings", "namespace": NS, "uid": uid, "resourceVersion": "1"},
        "data": {"LOG_LEVEL": "info"},
    })
}

fn not_found() -> Value {
    status(404, "NotFound", "configmaps \"settings\" not found")
}

impl Harness {
    /// POSTs `review` and, while it is answered, answers the read of its object with
    /// `(code, body)`; returns whether it was admitted.
    async fn review_reading(&mut self, review: &Value, code: u16, body: &Value) -> bool {
        let webhook = router(self.state.clone(), Duration::from_secs(4));
        let request = Request::post("/validate")
            .header("content-type", "application/json")
            .body(Body::from(review.to_string()))
            .unwrap();
        let answer = tokio::spawn(webhook.oneshot(request));
        self.answer_read(code, body).await;
        let response = answer.await.unwrap().unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        let answer: Value = serde_json::from_slice(&bytes).unwrap();
        answer["response"]["allowed"] == true
    }

    /// Answers the next request, a GET of ConfigMap settings, with `(code, body)`.
    async fn answer_read(&mut self, code: u16, body: &Value) {
        let (request, send) = next_request(&mut self.api).await;
        assert_eq!(request.method(), "GET");
        assert_eq!(
            request.uri().path(),
            format!("/api/v1/namespaces/{NS}/configmaps/settings")
        );
        respond(send, code, body);
    }

    fn counted(&self) -> usize {
        self.state
            .effects
            .deletions
            .lock()
            .unwrap()
            .recent(NS)
            .get("production")
            .map_or(0, Vec::len)
    }

    async fn flux_gauge(&self) -> Option<f64> {
        let response = admin_router(self.state.clone())
            .oneshot(Request::get("/metrics").body(Body::empty()).unwrap())
            .await
            .unwrap();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        String::from_utf8_lossy(&bytes)
            .lines()
            .find_map(|line| line.strip_prefix(&format!("{GAUGE} "))?.parse().ok())
    }
}

#[tokio::test]
async fn a_forged_delete_of_an_object_that_is_not_there_counts_nothing_and_is_not_read_back() {
    let mut h = harness();
    // Nothing of that name, then another object of that name: each read once, before the answer.
    assert!(
        h.review_reading(&prune("forged-uid"), 404, &not_found())
            .await
    );
    assert!(
        h.review_reading(&prune("forged-uid"), 200, &stored("the-real-uid"))
            .await
    );
    no_request(&mut h.api, Duration::from_millis(500)).await;
    assert_eq!(h.counted(), 0);
    assert_eq!(h.flux_gauge().await, None, "no write of flux shown");
}

#[tokio::test]
async fn a_delete_whose_object_was_there_counts_at_once_and_stays_counted_once_gone() {
    let mut h = harness();
    assert!(
        h.review_reading(&prune("uid-1"), 200, &stored("uid-1"))
            .await
    );
    // Counted while it is awaited: the next delete of a burst is judged before this one can
    // be seen gone.
    assert_eq!(h.counted(), 1);
    h.answer_read(404, &not_found()).await;
    // Flux's delete, seen gone, is its write for the silence gauge.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while h.flux_gauge().await.is_none() {
        assert!(tokio::time::Instant::now() < deadline, "no write of flux");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    no_request(&mut h.api, Duration::from_millis(500)).await;
    assert_eq!(h.counted(), 1, "seen gone: counted for good");
}

#[tokio::test]
async fn a_delete_whose_object_stays_is_forgotten_when_its_wait_ends() {
    let mut h = harness();
    assert!(
        h.review_reading(&prune("uid-1"), 200, &stored("uid-1"))
            .await
    );
    assert_eq!(h.counted(), 1, "awaited");
    // Read back until the read-back delays run out (about 6 s): the object stays as it was.
    for _ in 0..6 {
        h.answer_read(200, &stored("uid-1")).await;
    }
    common::eventually("the awaited delete to be forgotten", || h.counted() == 0).await;
    no_request(&mut h.api, Duration::from_millis(500)).await;
    assert_eq!(h.flux_gauge().await, None, "no write of flux shown");
}

#[tokio::test]
async fn reviews_naming_one_object_count_it_once() {
    let mut h = harness();
    // A forger's review of an object that is about to go, then the API server's.
    assert!(
        h.review_reading(&prune("uid-1"), 200, &stored("uid-1"))
            .await
    );
    assert!(
        h.review_reading(&prune("uid-1"), 200, &stored("uid-1"))
            .await
    );
    assert_eq!(h.counted(), 1);
    h.answer_read(404, &not_found()).await;
    // The second review started no read back of its own.
    no_request(&mut h.api, Duration::from_millis(500)).await;
    assert_eq!(h.counted(), 1);
}
