//! What a delete would take with it, read against a mocked API server: the requests (metadata
//! lists, page by page, in the deleted object's namespace) and the failures the real API server
//! suite does not reach (a second page, a list that fails, no answer). The real-API-server
//! suite reads the same path with claims, StatefulSets and a custom resource
//! (`scenarios::deletion_cascade`, `real_flux::pruning_a_statefulset_…`).

mod common;

use std::time::Duration;

use common::*;
use driftgate::cascade::DeletionCascade;
use driftgate::decision::{CascadeQuery, DecisionInput, cascade_query};
use driftgate::kube_state::ResourceCatalog;
use driftgate::request::RequestFacts;
use driftgate::tasks::cascade::CascadeReader;
use hyper::Request;
use kube::client::Body;
use serde_json::{Value, json};

const NS: &str = "prod-db";
const DELETED: &str = "web-uid";

/// Aggregated discovery: claims in the core group, StatefulSets in apps.
fn discovery(path: &str) -> Value {
    let resource = |group: &str, version: &str, plural: &str, kind: &str| {
        json!({"resource": plural, "responseKind": {"group": group, "version": version, "kind": kind},
            "scope": "Namespaced", "verbs": ["get", "list", "watch"]})
    };
    let group = |name: &str, version: &str, resources: Vec<Value>| json!({"metadata": {"name": name}, "versions": [{"version": version, "resources": resources}]});
    let items = match path {
        "/api" => vec![group(
            "",
            "v1",
            vec![resource(
                "",
                "v1",
                "persistentvolumeclaims",
                "PersistentVolumeClaim",
            )],
        )],
        _ => vec![group(
            "apps",
            "v1",
            vec![resource("apps", "v1", "statefulsets", "StatefulSet")],
        )],
    };
    json!({"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "items": items})
}

fn claim(name: &str, owner: (&str, &str, &str)) -> Value {
    let (kind, owner_name, uid) = owner;
    let api_version = if kind == "StatefulSet" {
        "apps/v1"
    } else {
        "v1"
    };
    json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
        "metadata": {"name": name, "namespace": NS, "uid": format!("{name}-uid"),
            "ownerReferences": [{"apiVersion": api_version, "kind": kind, "name": owner_name,
                "uid": uid, "controller": true}]}})
}

fn page(items: Vec<Value>, next: Option<&str>) -> Value {
    json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadataList",
        "metadata": {"continue": next.unwrap_or("")}, "items": items})
}

/// Flux pruning StatefulSet `web` in [`NS`], under the example policy.
fn prune() -> kube::core::admission::AdmissionRequest<kube::core::DynamicObject> {
    serde_json::from_value(json!({
        "uid": "00000000-0000-4000-8000-000000000000",
        "kind": {"group": "apps", "version": "v1", "kind": "StatefulSet"},
        "resource": {"group": "apps", "version": "v1", "resource": "statefulsets"},
        "name": "web", "namespace": NS, "operation": "DELETE",
        "userInfo": {"username": "system:serviceaccount:flux-system:kustomize-controller"},
        "oldObject": {"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "web", "namespace": NS, "uid": DELETED}},
        "options": {"propagationPolicy": "Background"},
        "dryRun": false,
    }))
    .unwrap()
}

/// Reads the prune's cascade with a reader of `timeout`, answering each request the client
/// sends with `answer`; the cascade and the requests' paths and queries.
async fn read_with(
    timeout: Duration,
    answer: impl Fn(&Request<Body>) -> Option<(u16, Value)> + Send + 'static,
) -> (DeletionCascade, Vec<String>) {
    let (client, mut handle) = mock_client();
    let catalog = ResourceCatalog::new(client.clone(), Duration::from_secs(1));
    let reader = CascadeReader::new(client, catalog, timeout);
    let server = tokio::spawn(async move {
        let mut seen = Vec::new();
        while let Ok(Some((request, send))) =
            tokio::time::timeout(Duration::from_secs(3), handle.next_request()).await
        {
            let uri = request.uri().to_string();
            if !uri.starts_with("/api?") && uri != "/api" && !uri.starts_with("/apis") {
                // Metadata only, never whole objects.
                let accept = request.headers()["accept"].to_str().unwrap().to_owned();
                assert!(accept.contains("as=PartialObjectMetadataList"), "{accept}");
            }
            seen.push(uri);
            match request.uri().path() {
                path @ ("/api" | "/apis") => respond(send, 200, &discovery(path)),
                _ => match answer(&request) {
                    Some((code, body)) => respond(send, code, &body),
                    // No answer: the reader's timeout ends the wait.
                    None => std::mem::forget(send),
                },
            }
        }
        seen
    });
    let policies = policies();
    let request = prune();
    let namespace: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta =
        serde_json::from_value(json!({"name": NS})).unwrap();
    let input = DecisionInput {
        request: &RequestFacts::new(&request),
        resource: None,
        namespace: Some(&namespace),
        parent: None,
        recent_deletes: None,
        now: NOW.parse().unwrap(),
        silence: None,
    };
    let query: CascadeQuery<'_> = cascade_query(&policies, &input).expect("a query");
    let cascade = reader.read(&query).await.expect("a reader with a cluster");
    drop(reader);
    (cascade, server.await.unwrap())
}

#[tokio::test]
async fn claims_are_read_page_by_page_and_an_owner_kind_it_may_not_list_is_said() {
    let (cascade, seen) = read_with(Duration::from_secs(2), |request| {
        let query = request.uri().query().unwrap_or("");
        match request.uri().path() {
            "/api/v1/namespaces/prod-db/persistentvolumeclaims" if !query.contains("continue") => {
                Some((
                    200,
                    page(
                        vec![claim("data-web-0", ("StatefulSet", "web", DELETED))],
                        Some("page-2"),
                    ),
                ))
            }
            "/api/v1/namespaces/prod-db/persistentvolumeclaims" => Some((
                200,
                page(
                    vec![claim("data-db-0", ("StatefulSet", "db", "db-uid"))],
                    None,
                ),
            )),
            "/apis/apps/v1/namespaces/prod-db/statefulsets" => Some((
                403,
                status(403, "Forbidden", "statefulsets.apps is forbidden"),
            )),
            _ => None,
        }
    })
    .await;
    let DeletionCascade::Read(dependents) = cascade else {
        panic!("read: {cascade:?}");
    };
    let found: Vec<(&str, Option<&str>)> = dependents
        .iter()
        .map(|d| (d.name(), d.undetermined.as_deref()))
        .collect();
    assert_eq!(
        found,
        [
            ("data-web-0", None),
            (
                "data-db-0",
                Some(
                    "driftgate may not list statefulsets.apps in prod-db: grant its ClusterRole list on statefulsets.apps (the chart's rbac.deletionCascade)"
                )
            )
        ]
    );
    let lists: Vec<&String> = seen.iter().filter(|u| u.contains("/namespaces/")).collect();
    assert_eq!(lists.len(), 3, "{seen:?}");
    assert!(lists[0].contains("limit=500"), "{seen:?}");
    assert!(lists[1].contains("continue=page-2"), "{seen:?}");
}

#[tokio::test]
async fn claims_that_cannot_be_listed_or_no_answer_leave_nothing_to_judge_but_why() {
    let (cascade, _) = read_with(Duration::from_secs(2), |_| {
        Some((500, status(500, "InternalError", "etcd is down")))
    })
    .await;
    let DeletionCascade::Unreadable(why) = cascade else {
        panic!("read: {cascade:?}");
    };
    assert!(
        why.starts_with("could not list persistentvolumeclaims in prod-db: ")
            && why.contains("etcd is down"),
        "{why}"
    );

    let (cascade, _) = read_with(Duration::from_millis(300), |_| None).await;
    let DeletionCascade::Unreadable(why) = cascade else {
        panic!("read: {cascade:?}");
    };
    assert_eq!(why, "the API server did not answer within 300ms");
}
