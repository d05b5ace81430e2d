//! Reads what a DELETE would take with it, for the decision (see `cascade`): the objects of the
//! protected kinds in the deleted object's namespace, then, as the [`Walk`] asks, their owners'
//! kinds, a level at a time. Metadata only, listed rather than fetched one by one (the owners of
//! a namespace's claims are mostly a few StatefulSets: one list answers for all of them), and
//! bounded: at most [`MAX_OWNER_KINDS`] owner kinds, [`MAX_OBJECTS_PER_KIND`] objects of a kind,
//! all within the reader's timeout. What cannot be read is said, and the decision refuses.
//!
//! Only DELETEs whose cascade a policy judges come here (`decision::cascade_query`): deletes of
//! the kinds a policy guards, which are rare next to the other writes.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::Api;
use kube::api::ListParams;
use kube::core::DynamicObject;

use crate::kube_state::{ResourceCatalog, ServedKind};
use crate::throttle::Throttle;
use driftgate_core::cascade::{DeletionCascade, GroupKind, ReadObject, Walk};
use driftgate_core::decision::CascadeQuery;

/// At most this many owner kinds are listed for one delete; owners of further kinds are not
/// known, and the protected objects below them are judged as possibly deleted.
pub const MAX_OWNER_KINDS: usize = 8;
/// At most this many objects of one kind are read in a namespace.
pub const MAX_OBJECTS_PER_KIND: usize = 5000;
/// Objects per page of a list.
const PAGE: u32 = 500;

/// Lists objects for cascades; disabled without a cluster (then cascades are not judged).
#[derive(Clone)]
pub struct CascadeReader {
    inner: Option<Arc<ReaderInner>>,
}

struct ReaderInner {
    client: kube::Client,
    catalog: ResourceCatalog,
    timeout: Duration,
    throttle: Mutex<Throttle>,
}

impl CascadeReader {
    pub fn disabled() -> Self {
        CascadeReader { inner: None }
    }

    /// A reader through `client`, which finds resources in `catalog` and gives up on a cascade
    /// after `timeout`.
    pub fn new(client: kube::Client, catalog: ResourceCatalog, timeout: Duration) -> Self {
        CascadeReader {
            inner: Some(Arc::new(ReaderInner {
                client,
                catalog,
                timeout,
                throttle: Mutex::default(),
            })),
        }
    }

    /// What the query's DELETE would take with it; None without a cluster.
    pub async fn read(&self, query: &CascadeQuery<'_>) -> Option<DeletionCascade> {
        let inner = self.inner.as_ref()?;
        let cascade = match tokio::time::timeout(inner.timeout, inner.read(query)).await {
            Ok(cascade) => cascade,
            Err(_) => DeletionCascade::Unreadable(format!(
                "the API server did not answer within {:?}",
                inner.timeout
            )),
        };
        let problem = match &cascade {
            DeletionCascade::Unreadable(problem) => Some(problem.as_str()),
            DeletionCascade::Read(dependents) => {
                dependents.iter().find_map(|d| d.undetermined.as_deref())
            }
        };
        let mut throttle = inner.throttle.lock().unwrap_or_else(|e| e.into_inner());
        match problem {
            Some(problem) => match throttle.failure() {
                Some(suppressed) => tracing::warn!(
                    namespace = %query.namespace,
                    problem,
                    suppressed,
                    "could not read what a delete would take with it; deletes there that may take protected objects are refused"
                ),
                None => {
                    tracing::debug!(namespace = %query.namespace, problem, "cascade read failed again")
                }
            },
            None => {
                if throttle.success() {
                    tracing::info!("cascades are read again");
                }
            }
        }
        Some(cascade)
    }
}

impl ReaderInner {
    async fn read(&self, query: &CascadeQuery<'_>) -> DeletionCascade {
        let started = tokio::time::Instant::now();
        let Some(uid) = &query.deleted_uid else {
            return DeletionCascade::Unreadable(
                "the review's oldObject carries no uid, so nothing can be found to be owned by it"
                    .to_owned(),
            );
        };
        let Some(served) = self.catalog.served().await else {
            return DeletionCascade::Read(Vec::new());
        };
        if served.read_at.is_none() {
            return DeletionCascade::Unreadable("API discovery could not be read".to_owned());
        }
        let mut walk = Walk::new(uid.clone());
        for resource in served
            .kinds
            .iter()
            .filter(|s| s.namespaced && query.protects(&s.group, &s.kind, &s.resource))
        {
            match self.list(resource, &query.namespace).await {
                Ok(objects) => {
                    walk.protected(GroupKind::new(&resource.group, &resource.kind), objects)
                }
                Err(problem) => return DeletionCascade::Unreadable(problem),
            }
        }
        let mut listed = 0;
        loop {
            let kinds = walk.kinds_to_read();
            if kinds.is_empty() {
                break;
            }
            for kind in kinds {
                if listed == MAX_OWNER_KINDS {
                    walk.unreadable(
                        kind,
                        format!("driftgate reads at most {MAX_OWNER_KINDS} kinds of owners for one delete"),
                    );
                    continue;
                }
                let served = self
                    .catalog
                    .served_kind_since(&kind.group, &kind.kind, started)
                    .await;
                match served {
                    Err(unread) => walk.unreadable(kind, unread.to_string()),
                    // Not served (discovery read since this delete came): the collector cannot
                    // resolve such an owner either. Cluster-scoped: it has no namespaced
                    // owner, so it cannot go with this object.
                    Ok(None) => walk.never_cascades(kind),
                    Ok(Some(resource)) if !resource.namespaced => walk.never_cascades(kind),
                    Ok(Some(resource)) => {
                        listed += 1;
                        match self.list(&resource, &query.namespace).await {
                            Ok(objects) => walk.listed(kind, objects),
                            Err(problem) => walk.unreadable(kind, problem),
                        }
                    }
                }
            }
        }
        DeletionCascade::Read(walk.finish())
    }

    /// The metadata of every object of `resource` in `namespace`, page by page.
    async fn list(
        &self,
        resource: &ServedKind,
        namespace: &str,
    ) -> Result<Vec<ReadObject>, String> {
        let what = format!("{} in {namespace}", resource.qualified());
        if !resource.listable {
            return Err(format!("{what} cannot be listed"));
        }
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), namespace, &resource.api_resource());
        let kind = GroupKind::new(&resource.group, &resource.kind);
        let mut objects = Vec::new();
        let mut params = ListParams::default().limit(PAGE);
        loop {
            let page = api.list_metadata(&params).await.map_err(|error| match error {
                kube::Error::Api(status) if status.code == 403 => format!(
                    "driftgate may not list {what}: grant its ClusterRole list on {} (the chart's rbac.deletionCascade)",
                    resource.qualified()
                ),
                error => format!("could not list {what}: {error}"),
            })?;
            objects.extend(page.items.into_iter().map(|item| ReadObject {
                kind: kind.clone(),
                resource: resource.resource.clone(),
                meta: item.metadata,
            }));
            if objects.len() > MAX_OBJECTS_PER_KIND {
                return Err(format!(
                    "{what}: more than {MAX_OBJECTS_PER_KIND} objects, more than driftgate reads for one delete"
                ));
            }
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => params = params.continue_token(&token),
                None => return Ok(objects),
            }
        }
    }
}
