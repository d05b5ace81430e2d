//! Cluster state against a mocked API server: the namespace cache (list, watch, fail closed on
//! watch errors) and the parent lookup of `scale` requests. The real-API-server suite covers the
//! same paths later; the mock pins down the requests and the failure handling.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use driftgate::decision::Rule;
use driftgate::files::read_object;
use driftgate::kube_state::{NamespaceCache, Parent, ParentLookup};
use driftgate::metrics::{Metrics, ResultLabels};
use driftgate::request::RequestFacts;
use hyper::Method;
use hyper::Request;
use kube::client::Body;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const WINDOW_LABEL: &str = "driftgate.dev/break-glass";

fn namespace(file: &str) -> Value {
    let object = read_object(&path(&format!("tests/fixtures/namespaces/{file}"))).unwrap();
    serde_json::to_value(object).unwrap()
}

fn namespace_list(resource_version: &str, items: Vec<Value>) -> Value {
    json!({
        "apiVersion": "v1", "kind": "NamespaceList",
        "metadata": {"resourceVersion": resource_version},
        "items": items,
    })
}

fn query(request: &Request<Body>) -> String {
    request.uri().query().unwrap_or("").to_owned()
}

fn assert_list(request: &Request<Body>) {
    assert_eq!(request.method(), Method::GET);
    assert_eq!(request.uri().path(), "/api/v1/namespaces");
    assert!(
        !query(request).contains("watch=true"),
        "expected a LIST, got {}",
        request.uri()
    );
}

fn assert_watch_from(request: &Request<Body>, resource_version: &str) {
    assert_eq!(request.method(), Method::GET);
    assert_eq!(request.uri().path(), "/api/v1/namespaces");
    let query = query(request);
    assert!(
        query.contains("watch=true"),
        "expected a watch, got {query}"
    );
    assert!(
        query.contains(&format!("resourceVersion={resource_version}")),
        "expected a watch from {resource_version}, got {query}"
    );
}

fn window_of(cache: &NamespaceCache, name: &str) -> Option<String> {
    cache
        .get(name)
        .expect("the namespace is cached")
        .metadata
        .labels
        .as_ref()
        .and_then(|labels| labels.get(WINDOW_LABEL).cloned())
}

struct Cache {
    cache: NamespaceCache,
    task: tokio::task::JoinHandle<()>,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
    handle: Handle,
}

/// Starts the cache and answers its first LIST with the two prod namespaces (one with a window);
/// returns once it is ready, with its watch request held open.
async fn synced_cache() -> (Cache, Responder) {
    let (client, mut handle) = mock_client();
    let metrics = Arc::new(Metrics::new());
    let shutdown = CancellationToken::new();
    let (cache, task) = NamespaceCache::spawn(client, metrics.clone(), shutdown.clone());

    let (list, send) = next_request(&mut handle).await;
    assert_list(&list);
    assert!(!cache.is_ready(), "not ready before the list completes");
    assert!(!cache.has_synced(), "no readiness before the first list");
    assert!(cache.get("prod-payments").is_none());
    assert_eq!(metrics.namespace_cache_ready.get(), 0);
    respond(
        send,
        200,
        &namespace_list(
            "100",
            vec![
                namespace("prod-payments.yaml"),
                namespace("prod-orders-window.yaml"),
            ],
        ),
    );
    let (watch, watch_send) = next_request(&mut handle).await;
    assert_watch_from(&watch, "100");
    eventually("the cache is ready", || cache.is_ready()).await;
    let cache = Cache {
        cache,
        task,
        metrics,
        shutdown,
        handle,
    };
    (cache, watch_send)
}

impl Cache {
    async fn stop(self) {
        self.shutdown.cancel();
        within_5s("stopping the cache", self.task)
            .await
            .expect("the cache task does not panic");
        assert!(!self.cache.is_ready(), "a stopped cache is not trusted");
        assert_eq!(self.metrics.namespace_cache_ready.get(), 0);
    }
}

#[tokio::test]
async fn the_namespace_cache_is_ready_after_the_initial_list() {
    let (c, _watch_held_open) = synced_cache().await;
    assert_eq!(c.metrics.namespace_cache_ready.get(), 1);
    assert_eq!(
        window_of(&c.cache, "prod-orders").as_deref(),
        Some("20261130T1000Z")
    );
    let payments = c.cache.get("prod-payments").unwrap();
    assert!(
        payments
            .metadata
            .labels
            .as_ref()
            .unwrap()
            .contains_key("team")
    );
    assert_eq!(window_of(&c.cache, "prod-payments"), None);
    assert!(
        payments.metadata.managed_fields.is_none()
            || payments
                .metadata
                .managed_fields
                .as_ref()
                .unwrap()
                .is_empty(),
        "managed fields are not kept"
    );
    assert!(c.cache.get("prod-unknown").is_none());
    c.stop().await;
}

#[tokio::test]
async fn watch_events_update_the_cache_and_a_closed_watch_resumes_without_distrust() {
    let (mut c, watch_send) = synced_cache().await;
    // The window on prod-orders is closed: a MODIFIED event, then the API server ends the watch
    // (as it does after its timeout).
    let mut closed = namespace("prod-orders-window.yaml");
    closed["metadata"]["labels"]
        .as_object_mut()
        .unwrap()
        .remove(WINDOW_LABEL);
    closed["metadata"]["resourceVersion"] = json!("101");
    let line = serde_json::to_vec(&json!({"type": "MODIFIED", "object": closed})).unwrap();
    watch_send.send_response(
        hyper::Response::builder()
            .status(200)
            .body(Body::from(line))
            .unwrap(),
    );
    eventually("the window is gone from the cache", || {
        c.cache.get("prod-orders").is_some_and(|ns| {
            !ns.metadata
                .labels
                .as_ref()
                .unwrap()
                .contains_key(WINDOW_LABEL)
        })
    })
    .await;
    // A watch that ends without an error resumes from where it was: no relist, still trusted.
    let (watch, _held_open) = next_request(&mut c.handle).await;
    assert_watch_from(&watch, "101");
    assert!(c.cache.is_ready());
    assert_eq!(c.metrics.namespace_cache_ready.get(), 1);
    c.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_watch_error_fails_closed_until_a_fresh_list_completes() {
    let (mut c, watch_send) = synced_cache().await;
    // The API server fails the watch.
    respond(
        watch_send,
        500,
        &status(500, "InternalError", "etcdserver: leader changed"),
    );
    eventually("the cache is distrusted", || !c.cache.is_ready()).await;
    assert!(
        c.cache.get("prod-orders").is_none(),
        "a window must not be honoured on stale data"
    );
    assert!(c.cache.get("prod-payments").is_none());
    assert_eq!(c.metrics.namespace_cache_ready.get(), 0);
    // Distrusted, but readiness stays: decisions without namespace windows go on.
    assert!(c.cache.has_synced());

    // After the backoff the watcher starts over with a LIST, not a resumed watch.
    let (relist, send) = next_request(&mut c.handle).await;
    assert_list(&relist);
    assert!(!c.cache.is_ready(), "not trusted until the list completes");
    let mut closed = namespace("prod-orders-window.yaml");
    closed["metadata"]["labels"]
        .as_object_mut()
        .unwrap()
        .remove(WINDOW_LABEL);
    respond(
        send,
        200,
        &namespace_list("200", vec![namespace("prod-payments.yaml"), closed]),
    );
    let (watch, _held_open) = next_request(&mut c.handle).await;
    assert_watch_from(&watch, "200");
    eventually("the cache is trusted again", || c.cache.is_ready()).await;
    assert_eq!(window_of(&c.cache, "prod-orders"), None);
    assert_eq!(c.metrics.namespace_cache_ready.get(), 1);
    c.stop().await;
}

#[tokio::test(start_paused = true)]
async fn an_error_event_in_the_watch_also_fails_closed_and_relists() {
    let (mut c, watch_send) = synced_cache().await;
    let gone = json!({"type": "ERROR", "object": status(410, "Expired", "too old resource version: 100 (150)")});
    watch_send.send_response(
        hyper::Response::builder()
            .status(200)
            .body(Body::from(serde_json::to_vec(&gone).unwrap()))
            .unwrap(),
    );
    eventually("the cache is distrusted", || !c.cache.is_ready()).await;
    assert!(c.cache.get("prod-orders").is_none());
    let (relist, send) = next_request(&mut c.handle).await;
    assert_list(&relist);
    respond(
        send,
        200,
        &namespace_list("300", vec![namespace("prod-orders-window.yaml")]),
    );
    let (_watch, _held_open) = next_request(&mut c.handle).await;
    eventually("the cache is trusted again", || c.cache.is_ready()).await;
    assert!(
        c.cache.get("prod-payments").is_none(),
        "the relist replaced the store"
    );
    c.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_failing_initial_list_keeps_the_cache_not_ready() {
    let (client, mut handle) = mock_client();
    let metrics = Arc::new(Metrics::new());
    let shutdown = CancellationToken::new();
    let (cache, task) = NamespaceCache::spawn(client, metrics.clone(), shutdown.clone());
    for _ in 0..3 {
        let (list, send) = next_request(&mut handle).await;
        assert_list(&list);
        respond(
            send,
            403,
            &status(
                403,
                "Forbidden",
                "namespaces is forbidden: User \"system:serviceaccount:driftgate:driftgate\" cannot list resource \"namespaces\"",
            ),
        );
        tokio::task::yield_now().await;
        assert!(!cache.is_ready());
        assert!(cache.get("prod-payments").is_none());
    }
    assert_eq!(metrics.namespace_cache_ready.get(), 0);
    shutdown.cancel();
    within_5s("stopping the cache", task).await.unwrap();
}

#[test]
fn the_disabled_cache_is_ready_and_knows_no_namespace() {
    let cache = NamespaceCache::disabled();
    assert!(cache.is_ready());
    assert!(cache.get("prod-payments").is_none());
}

// ---- Parent lookup ----

const DEPLOYMENT_PATH: &str = "/apis/apps/v1/namespaces/prod-payments/deployments/api";

fn lookups(metrics: &Metrics, result: &str) -> u64 {
    metrics
        .parent_lookups
        .get_or_create(&ResultLabels {
            result: result.into(),
        })
        .get()
}

#[tokio::test]
async fn the_parent_is_read_through_the_request_resource_and_opens_its_window() {
    let (client, mut handle) = mock_client();
    let metrics = Arc::new(Metrics::new());
    let lookup = ParentLookup::new(Some(client), Duration::from_secs(2), metrics.clone());
    let request = review("break-glass-use-scale.json");
    let server = async {
        let (http, send) = next_request(&mut handle).await;
        assert_eq!(http.method(), Method::GET);
        assert_eq!(http.uri().path(), DEPLOYMENT_PATH);
        respond(
            send,
            200,
            &serde_json::to_value(parent("api-with-window.yaml")).unwrap(),
        );
    };
    let facts = RequestFacts::new(&request);
    let (fetched, ()) = tokio::join!(lookup.fetch(&facts), server);
    let fetched = fetched.expect("the parent");
    assert_eq!(fetched.types.as_ref().unwrap().kind, "Deployment");
    assert_eq!(
        fetched.metadata.labels.as_ref().unwrap()[WINDOW_LABEL],
        "20261130T1000Z"
    );
    assert_eq!(
        (lookups(&metrics, "success"), lookups(&metrics, "failure")),
        (1, 0)
    );

    // What the lookup is for: alice's scale is admitted under the Deployment's window.
    let decision = decide_with(&policies(), &request, Some(&fetched), NOW);
    assert!(decision.allowed);
    assert_eq!(decision.record.rule, Rule::BreakGlassWindow);
}

#[tokio::test]
async fn a_missing_or_failing_parent_is_none() {
    let (client, mut handle) = mock_client();
    let metrics = Arc::new(Metrics::new());
    let lookup = ParentLookup::new(Some(client), Duration::from_secs(2), metrics.clone());
    let request = review("break-glass-use-scale.json");
    for (code, reason, message) in [
        (404, "NotFound", "deployments.apps \"api\" not found"),
        (500, "InternalError", "etcdserver: request timed out"),
        (403, "Forbidden", "deployments.apps \"api\" is forbidden"),
    ] {
        let server = async {
            let (http, send) = next_request(&mut handle).await;
            assert_eq!(http.uri().path(), DEPLOYMENT_PATH);
            respond(send, code, &status(code, reason, message));
        };
        let facts = RequestFacts::new(&request);
        let (fetched, ()) = tokio::join!(lookup.fetch(&facts), server);
        assert!(fetched.is_none(), "{code}");
    }
    assert_eq!(
        (lookups(&metrics, "success"), lookups(&metrics, "failure")),
        (0, 3)
    );

    // Without the parent no object window applies: alice's scale is refused like anyone's.
    let decision = decide_with(&policies(), &request, None, NOW);
    assert!(!decision.allowed);
    assert_eq!(decision.record.rule, Rule::NotPermitted);
}

/// A parent that does not exist opens no window; one that could not be read might have, and
/// the refusal says so.
#[tokio::test]
async fn a_missing_parent_is_absent_and_a_failing_one_unreadable() {
    let (client, mut handle) = mock_client();
    let metrics = Arc::new(Metrics::new());
    let lookup = ParentLookup::new(Some(client), Duration::from_secs(2), metrics);
    let request = review("break-glass-use-scale.json");
    for (code, reason, message, unreadable) in [
        (404, "NotFound", "deployments.apps \"api\" not found", false),
        (500, "InternalError", "etcdserver: request timed out", true),
        (
            403,
            "Forbidden",
            "deployments.apps \"api\" is forbidden",
            true,
        ),
    ] {
        let server = async {
            let (_, send) = next_request(&mut handle).await;
            respond(send, code, &status(code, reason, message));
        };
        let facts = RequestFacts::new(&request);
        let (found, ()) = tokio::join!(lookup.lookup(&facts), server);
        match found {
            Parent::Unreadable(error) if unreadable => {
                assert!(error.contains(message), "{code}: {error}")
            }
            Parent::Absent if !unreadable => {}
            other => panic!("{code}: {other:?}"),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_slow_parent_lookup_gives_up_at_its_timeout() {
    let (client, mut handle) = mock_client();
    let metrics = Arc::new(Metrics::new());
    let lookup = ParentLookup::new(Some(client), Duration::from_millis(300), metrics.clone());
    let request = review("break-glass-use-scale.json");
    let server = async {
        let (http, send) = next_request(&mut handle).await;
        assert_eq!(http.uri().path(), DEPLOYMENT_PATH);
        // Never answered while the lookup waits.
        tokio::time::sleep(Duration::from_secs(3)).await;
        drop(send);
    };
    let started = tokio::time::Instant::now();
    let facts = RequestFacts::new(&request);
    let (fetched, ()) = tokio::join!(lookup.fetch(&facts), server);
    assert!(fetched.is_none());
    assert_eq!(lookups(&metrics, "failure"), 1);
    assert!(started.elapsed() >= Duration::from_millis(300));
}

#[tokio::test]
async fn only_subresource_requests_have_a_parent() {
    let (client, mut handle) = mock_client();
    let metrics = Arc::new(Metrics::new());
    let lookup = ParentLookup::new(Some(client), Duration::from_secs(2), metrics.clone());
    assert!(
        lookup
            .fetch(&RequestFacts::new(&review("kubectl-edit.json")))
            .await
            .is_none()
    );
    no_request(&mut handle, Duration::from_millis(100)).await;
    assert_eq!(
        (lookups(&metrics, "success"), lookups(&metrics, "failure")),
        (0, 0)
    );

    let offline = ParentLookup::new(None, Duration::from_secs(2), metrics.clone());
    assert!(
        offline
            .fetch(&RequestFacts::new(&review("break-glass-use-scale.json")))
            .await
            .is_none()
    );
    assert_eq!(
        (lookups(&metrics, "success"), lookups(&metrics, "failure")),
        (0, 0)
    );
}

/// The catalog reads kinds and status subresources from aggregated discovery (the shape
/// kube-apiserver 1.35 serves at /apis): the kind behind `rollouts/scale` is Rollout, not Scale.
#[test]
fn the_catalog_reads_kinds_and_status_subresources_from_discovery() {
    use driftgate::kube_state::catalog_from_discovery;
    let apis: kube::core::discovery::v2::APIGroupDiscoveryList = serde_json::from_value(json!({
        "kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2",
        "items": [{
            "metadata": {"name": "argoproj.io"},
            "versions": [{"version": "v1alpha1", "resources": [
                {"resource": "rollouts", "responseKind": {"group": "argoproj.io", "version": "v1alpha1", "kind": "Rollout"},
                 "scope": "Namespaced", "verbs": ["get", "update"],
                 "subresources": [
                    {"subresource": "scale", "responseKind": {"group": "autoscaling", "version": "v1", "kind": "Scale"}, "verbs": ["get", "update"]},
                    {"subresource": "status", "responseKind": {"group": "argoproj.io", "version": "v1alpha1", "kind": "Rollout"}, "verbs": ["get", "update"]}]},
                {"resource": "analysisruns", "responseKind": {"group": "argoproj.io", "version": "v1alpha1", "kind": "AnalysisRun"},
                 "scope": "Namespaced", "verbs": ["get"]}
            ]}]
        }]
    }))
    .unwrap();
    let catalog = catalog_from_discovery(&[apis]);
    let rollouts = &catalog["argoproj.io"]["rollouts"];
    assert_eq!(rollouts.kind, "Rollout");
    assert!(rollouts.has_status);
    let runs = &catalog["argoproj.io"]["analysisruns"];
    assert_eq!(runs.kind, "AnalysisRun");
    assert!(!runs.has_status);
}

/// The same discovery as a list of served resources, to list a kind's objects (what a delete
/// would take with it): the preferred version, the scope, whether it can be listed.
#[test]
fn served_resources_carry_their_preferred_version_scope_and_verbs() {
    use driftgate::kube_state::{ServedKind, served_from_discovery};
    let apis: kube::core::discovery::v2::APIGroupDiscoveryList = serde_json::from_value(json!({
        "kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2",
        "items": [{
            "metadata": {"name": "example.com"},
            "versions": [
                {"version": "v2", "resources": [
                    {"resource": "databases", "responseKind": {"group": "example.com", "version": "v2", "kind": "Database"},
                     "scope": "Namespaced", "verbs": ["get", "list", "watch"]},
                    {"resource": "regions", "responseKind": {"group": "example.com", "version": "v2", "kind": "Region"},
                     "scope": "Cluster", "verbs": ["get"]}]},
                {"version": "v1", "resources": [
                    {"resource": "databases", "responseKind": {"group": "example.com", "version": "v1", "kind": "Database"},
                     "scope": "Namespaced", "verbs": ["get", "list"]}]}
            ]
        }]
    }))
    .unwrap();
    let served = served_from_discovery(&[apis]);
    assert_eq!(
        served,
        [
            ServedKind {
                group: "example.com".into(),
                version: "v2".into(),
                resource: "databases".into(),
                kind: "Database".into(),
                namespaced: true,
                listable: true,
            },
            ServedKind {
                group: "example.com".into(),
                version: "v2".into(),
                resource: "regions".into(),
                kind: "Region".into(),
                namespaced: false,
                listable: false,
            },
        ]
    );
    assert_eq!(served[0].qualified(), "databases.example.com");
    assert_eq!(served[0].api_resource().api_version, "example.com/v2");
}
