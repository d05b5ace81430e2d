//! What driftgate reads from the cluster: Namespace labels (a reflector), for a `scale`
//! request the parent object (one GET, only when a decision needs its window), and API
//! discovery (the kind behind each resource, and which have a `status` subresource).

use std::collections::HashMap;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::ResourceExt;
use kube::core::discovery::v2::APIGroupDiscoveryList;
use kube::core::{ApiResource, DynamicObject};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use crate::throttle::Throttle;
use driftgate_core::decision::DiscoveredResource;
use driftgate_core::request::{AdmittedWrite, Landed, RequestFacts, StoredAddress};

/// Namespace objects kept current by a list/watch. Cheap to clone.
#[derive(Clone)]
pub struct NamespaceCache {
    /// None: running without a cluster.
    inner: Option<CacheInner>,
}

#[derive(Clone)]
struct CacheInner {
    store: Store<Namespace>,
    /// True from the end of a complete LIST until the watch reports an error. A namespace-wide
    /// break-glass window read from a cache that may have missed its closing must not be
    /// honoured, so an error makes the whole cache unusable until the next complete LIST.
    trusted: Arc<AtomicBool>,
    /// True from the end of the first complete LIST on, whatever happens later.
    synced: Arc<AtomicBool>,
    /// Notified on every change of the store (one waiter: the gate selector's keeper).
    changes: Arc<Notify>,
}

impl NamespaceCache {
    /// Starts the reflector. Not ready until the first list has synced; if the watch fails and
    /// cannot resume, the cache is no longer trusted (`get` returns None) until it resyncs.
    ///
    /// Any watch error counts as "cannot resume": the watcher is restarted with a fresh LIST
    /// (after kube-runtime's default backoff), rather than resuming from the last
    /// resourceVersion, because a resumed watch gives no signal of having caught up.
    pub fn spawn(
        client: kube::Client,
        metrics: Arc<Metrics>,
        shutdown: CancellationToken,
    ) -> (NamespaceCache, JoinHandle<()>) {
        let (store, writer) = reflector::store();
        let trusted = Arc::new(AtomicBool::new(false));
        let synced = Arc::new(AtomicBool::new(false));
        let changes = Arc::new(Notify::new());
        metrics.namespace_cache_ready.set(0);
        let api = Api::<Namespace>::all(client);
        let events = relisting_watcher(api, watcher::Config::default())
            // Only labels (and the name) matter to decisions; managed fields are most of the size.
            .modify(|ns| ns.managed_fields_mut().clear())
            .default_backoff();
        let events = reflector::reflector(writer, events);
        let task = tokio::spawn(drive(
            events,
            trusted.clone(),
            synced.clone(),
            changes.clone(),
            metrics,
            shutdown,
        ));
        let cache = NamespaceCache {
            inner: Some(CacheInner {
                store,
                trusted,
                synced,
                changes,
            }),
        };
        (cache, task)
    }

    /// A cache for running without a cluster: ready, and never knows any namespace.
    pub fn disabled() -> NamespaceCache {
        NamespaceCache { inner: None }
    }

    pub fn is_ready(&self) -> bool {
        self.inner
            .as_ref()
            .is_none_or(|inner| inner.trusted.load(Ordering::Acquire))
    }

    /// Whether the first complete LIST has arrived (always, without a cluster): what readiness
    /// waits for. A later watch failure distrusts the cache (namespace windows are not
    /// honoured) but does not undo this: decisions without namespace windows go on, and a pod
    /// that turned unready whenever the API server is out of its reach would take the webhook's
    /// endpoints away with it (every replica at once, when the API server is the one at fault),
    /// so that every guarded write, Flux's included, would fail.
    pub fn has_synced(&self) -> bool {
        self.inner
            .as_ref()
            .is_none_or(|inner| inner.synced.load(Ordering::Acquire))
    }

    /// The Namespace, when the cache is synced and trusted; None otherwise (fail closed).
    pub fn get(&self, name: &str) -> Option<Arc<Namespace>> {
        let inner = self.inner.as_ref()?;
        if !inner.trusted.load(Ordering::Acquire) {
            return None;
        }
        inner.store.get(&ObjectRef::new(name))
    }

    /// Every Namespace, when the cache is synced and trusted; None otherwise (fail closed).
    pub fn snapshot(&self) -> Option<Vec<Arc<Namespace>>> {
        let inner = self.inner.as_ref()?;
        if !inner.trusted.load(Ordering::Acquire) {
            return None;
        }
        Some(inner.store.state())
    }

    /// Notified after the store changed; None without a cluster.
    pub fn changes(&self) -> Option<Arc<Notify>> {
        self.inner.as_ref().map(|inner| inner.changes.clone())
    }
}

/// A watcher that starts over with a LIST after every error. kube-runtime's watcher resumes a
/// broken watch from its last resourceVersion without a new LIST (only a 410 Gone relists), so
/// each inner watcher is dropped right after its first error, before it is polled again (which
/// would send that resuming watch), and replaced by a fresh one; the backoff around this stream
/// spaces the restarts.
fn relisting_watcher(
    api: Api<Namespace>,
    config: watcher::Config,
) -> impl Stream<Item = watcher::Result<watcher::Event<Namespace>>> + Send {
    futures::stream::repeat(()).flat_map(move |()| {
        let fresh = watcher(api.clone(), config.clone()).boxed();
        futures::stream::unfold(Some(fresh), |inner| async move {
            let mut inner = inner?;
            let item = inner.next().await?;
            let keep = item.is_ok().then_some(inner);
            Some((item, keep))
        })
    })
}

/// Drives the reflector and keeps `trusted` (and the gauge) in step with it.
async fn drive(
    events: impl Stream<Item = watcher::Result<watcher::Event<Namespace>>>,
    trusted: Arc<AtomicBool>,
    synced: Arc<AtomicBool>,
    changes: Arc<Notify>,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) {
    let mut events = pin!(events);
    let mut throttle = Throttle::default();
    let set = |value: bool| {
        trusted.store(value, Ordering::Release);
        metrics.namespace_cache_ready.set(i64::from(value));
    };
    loop {
        let event = tokio::select! {
            biased;
            () = shutdown.cancelled() => break,
            event = events.next() => event,
        };
        match event {
            // The reflector has swapped the complete LIST into the store before passing this on.
            Some(Ok(watcher::Event::InitDone)) => {
                set(true);
                synced.store(true, Ordering::Release);
                if throttle.success() {
                    tracing::info!(
                        "namespace cache resynced; namespace windows are honoured again"
                    );
                } else {
                    tracing::info!("namespace cache synced");
                }
                changes.notify_one();
            }
            // A new LIST has begun; until it completes the store holds the old state.
            Some(Ok(watcher::Event::Init)) => set(false),
            Some(Ok(_)) => changes.notify_one(),
            Some(Err(error)) => {
                set(false);
                match throttle.failure() {
                    Some(suppressed) => tracing::warn!(
                        %error,
                        suppressed,
                        "namespace watch failed; namespace windows are not honoured until a fresh list completes"
                    ),
                    None => tracing::debug!(%error, "namespace watch failed again"),
                }
            }
            // The default backoff never gives up, so this is not expected; fail closed anyway.
            None => break,
        }
    }
    set(false);
}

/// What a parent lookup found.
#[derive(Debug)]
pub enum Parent {
    /// The parent as stored.
    Found(Box<DynamicObject>),
    /// No parent: not a subresource request, no cluster, or the object does not exist.
    Absent,
    /// The parent could not be read (API error, timeout): whether a window is open on it is
    /// unknown.
    Unreadable(String),
}

/// GETs the parent of a subresource request through the request's own resource
/// (group/version/plural), so no discovery round trip is needed.
#[derive(Clone)]
pub struct ParentLookup {
    client: Option<kube::Client>,
    timeout: Duration,
    metrics: Arc<Metrics>,
    throttle: Arc<Mutex<Throttle>>,
}

impl ParentLookup {
    /// With `client` None, every lookup returns None.
    pub fn new(client: Option<kube::Client>, timeout: Duration, metrics: Arc<Metrics>) -> Self {
        ParentLookup {
            client,
            timeout,
            metrics,
            throttle: Arc::default(),
        }
    }

    /// The parent object as stored, or None (no client, not found, error, timeout): then no
    /// object window applies. Counts `driftgate_parent_lookups_total{result}`.
    ///
    /// Requests without a subresource have no parent: None, and nothing is counted or sent.
    pub async fn fetch(&self, request: &RequestFacts<'_>) -> Option<DynamicObject> {
        match self.lookup(request).await {
            Parent::Found(parent) => Some(*parent),
            Parent::Absent | Parent::Unreadable(_) => None,
        }
    }

    /// [`ParentLookup::fetch`], telling a parent that does not exist (or a request without
    /// one) from one that could not be read.
    pub async fn lookup(&self, facts: &RequestFacts<'_>) -> Parent {
        let subresource = facts.subresource();
        if subresource.is_empty() {
            return Parent::Absent;
        }
        let Some(client) = self.client.clone() else {
            return Parent::Absent;
        };
        let request = facts.request();
        let gvr = request.resource();
        let error = match facts.stored_address() {
            None => "the request names no object".to_owned(),
            Some(address) => match read_stored(client, &address, self.timeout).await {
                Ok(Some(parent)) => {
                    Metrics::count_result(&self.metrics.parent_lookups, true);
                    if self.lock_throttle().success() {
                        tracing::info!("parent lookups succeed again");
                    }
                    return Parent::Found(Box::new(parent));
                }
                Ok(None) => {
                    Metrics::count_result(&self.metrics.parent_lookups, false);
                    return Parent::Absent;
                }
                Err(error) => error.to_string(),
            },
        };
        Metrics::count_result(&self.metrics.parent_lookups, false);
        let suppressed = self.lock_throttle().failure();
        let parent = format!(
            "{}/{} {}",
            gvr.resource,
            request.name(),
            request.namespace().unwrap_or("")
        );
        match suppressed {
            Some(suppressed) => tracing::warn!(
                %error,
                parent,
                subresource,
                suppressed,
                "could not read the parent object; a break-glass window on it is not honoured"
            ),
            None => tracing::debug!(%error, parent, subresource, "parent lookup failed"),
        }
        Parent::Unreadable(error)
    }

    fn lock_throttle(&self) -> std::sync::MutexGuard<'_, Throttle> {
        // A panic while holding this lock cannot leave a Throttle inconsistent in a way that
        // matters: it only decides whether to log.
        self.throttle.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Why an object could not be read back.
#[derive(Debug, thiserror::Error)]
pub enum ReadStoredError {
    #[error("the API server answered: {0}")]
    Api(#[from] kube::Error),
    #[error("the API server did not answer within {0:?}")]
    Timeout(Duration),
}

/// The object stored at `address`, as the API server has it now; None when it does not exist.
pub async fn read_stored(
    client: kube::Client,
    address: &StoredAddress,
    timeout: Duration,
) -> Result<Option<DynamicObject>, ReadStoredError> {
    let resource = ApiResource {
        group: address.group.clone(),
        version: address.version.clone(),
        api_version: address.api_version(),
        // Only group, version and plural make the URL; the kind comes back with the object.
        kind: String::new(),
        plural: address.plural.clone(),
    };
    let api: Api<DynamicObject> = match &address.namespace {
        Some(ns) => Api::namespaced_with(client, ns, &resource),
        None => Api::all_with(client, &resource),
    };
    match tokio::time::timeout(timeout, api.get_opt(&address.name)).await {
        Ok(read) => Ok(read?),
        Err(_) => Err(ReadStoredError::Timeout(timeout)),
    }
}

/// When an admitted write is read back, after the answer: the API server stores it a moment
/// after driftgate admits it, later under load.
const READ_BACK_DELAYS: [Duration; 6] = [
    Duration::from_millis(100),
    Duration::from_millis(200),
    Duration::from_millis(400),
    Duration::from_millis(800),
    Duration::from_millis(1600),
    Duration::from_millis(3200),
];

/// How long one read back may take.
const READ_BACK_TIMEOUT: Duration = Duration::from_secs(5);

/// Reads admitted writes back: what the API server stored is the truth, a review only a claim.
/// Cheap to clone; without a cluster every read back finds nothing.
#[derive(Clone)]
pub struct StoredReader {
    client: Option<kube::Client>,
}

impl StoredReader {
    pub fn new(client: Option<kube::Client>) -> StoredReader {
        StoredReader { client }
    }

    /// Reads `write`'s object back until the write has landed: Some(None) once the object is
    /// gone, Some(Some(object)) once stored at a newer version; None when it never lands within
    /// the read-back delays (refused by another webhook, or never made: a forged review), or
    /// cannot be read.
    pub async fn read_back(&self, write: &AdmittedWrite) -> Option<Option<DynamicObject>> {
        match self.read_back_outcome(write).await {
            ReadBack::Stored(live) => Some(Some(*live)),
            ReadBack::Gone => Some(None),
            ReadBack::NeverStored | ReadBack::Unreadable => None,
        }
    }

    /// Reads `write`'s object back as [`read_back`](Self::read_back) does, telling a write the
    /// API server never stored (every read showed the version it was made to) from one that
    /// could not be read.
    pub async fn read_back_outcome(&self, write: &AdmittedWrite) -> ReadBack {
        self.read_back_showing(write, |_| true).await
    }

    /// [`read_back_outcome`](Self::read_back_outcome), reading on while the object is stored at
    /// a newer version that does not `show` the write: another write (a controller's status)
    /// may have moved the version before this one landed, and the API server retries a write
    /// that met such a conflict as a new request. Stored is then the last object read.
    pub async fn read_back_showing(
        &self,
        write: &AdmittedWrite,
        shows: impl Fn(&DynamicObject) -> bool,
    ) -> ReadBack {
        let Some(client) = self.client.clone() else {
            return ReadBack::Unreadable;
        };
        let mut last_read_answered = false;
        let mut stored_without_it = None;
        for delay in READ_BACK_DELAYS {
            tokio::time::sleep(delay).await;
            let live = match read_stored(client.clone(), &write.address, READ_BACK_TIMEOUT).await {
                Ok(live) => live,
                Err(ReadStoredError::Api(kube::Error::Api(status))) if status.code == 403 => {
                    tracing::warn!(resource = %write.address.plural, group = %write.address.group, "driftgate may not read this kind back (RBAC), so what a write of it claims is never confirmed and nothing is recorded of it after the answer; add the kind to the chart's rbac.readBack");
                    return ReadBack::Unreadable;
                }
                Err(error) => {
                    tracing::debug!(%error, object = %write.address.name, "could not read a write back; retrying");
                    last_read_answered = false;
                    continue;
                }
            };
            match write.landed(live.as_ref()) {
                Landed::NotYet => last_read_answered = true,
                Landed::Gone => return ReadBack::Gone,
                Landed::Object(_) => match live {
                    Some(live) if shows(&live) => return ReadBack::Stored(Box::new(live)),
                    Some(live) => {
                        last_read_answered = true;
                        stored_without_it = Some(live);
                    }
                    None => return ReadBack::Gone,
                },
            }
        }
        if let Some(live) = stored_without_it {
            return ReadBack::Stored(Box::new(live));
        }
        if last_read_answered {
            tracing::debug!(object = %write.address.name, "an admitted write was not stored (refused elsewhere, or never made)");
            ReadBack::NeverStored
        } else {
            ReadBack::Unreadable
        }
    }
}

/// What the API server shows of an admitted write after it was answered.
#[derive(Clone, Debug, PartialEq)]
pub enum ReadBack {
    /// Stored at a newer version than the write was made to (boxed: an object is large).
    Stored(Box<DynamicObject>),
    /// Gone, replaced (another uid) or, for a delete, being deleted.
    Gone,
    /// Still at the version the write was made to on the last read, seconds after the answer:
    /// refused after driftgate admitted it, or never made (a forged review).
    NeverStored,
    /// Could not be read (no cluster, no RBAC, or the last read failed): nothing is known.
    Unreadable,
}

/// Every resource the API server serves, by group and plural name: its kind and whether it has
/// a `status` subresource, from aggregated discovery (two requests). Read once at start and
/// again when a review names a resource it does not know (a new CRD), at most every
/// [`CATALOG_REFRESH_INTERVAL`]. Cheap to clone.
#[derive(Clone)]
pub struct ResourceCatalog {
    /// None: running without a cluster; nothing is ever known.
    inner: Option<Arc<CatalogInner>>,
}

struct CatalogInner {
    client: kube::Client,
    resources: arc_swap::ArcSwap<Catalog>,
    /// The same resources as a list, with their versions and scopes, for listing a kind.
    served: arc_swap::ArcSwap<Served>,
    /// Held while refreshing, so that concurrent misses share one refresh; holds when the
    /// last refresh started.
    refreshing: tokio::sync::Mutex<Option<tokio::time::Instant>>,
    timeout: Duration,
}

/// group → resource (plural) → what discovery says about it. Nested, so that a lookup borrows
/// the request's strings.
pub type Catalog = HashMap<String, HashMap<String, DiscoveredResource>>;

/// A miss refreshes discovery at most this often: an unknown resource that stays unknown must
/// not turn every review into two discovery requests.
pub const CATALOG_REFRESH_INTERVAL: Duration = Duration::from_secs(10);

impl ResourceCatalog {
    pub fn disabled() -> Self {
        ResourceCatalog { inner: None }
    }

    /// A catalog that reads discovery through `client`, each refresh bounded by `timeout`.
    /// Empty until the first refresh.
    pub fn new(client: kube::Client, timeout: Duration) -> Self {
        ResourceCatalog {
            inner: Some(Arc::new(CatalogInner {
                client,
                resources: arc_swap::ArcSwap::from_pointee(Catalog::new()),
                served: arc_swap::ArcSwap::from_pointee(Served::default()),
                refreshing: tokio::sync::Mutex::new(None),
                timeout,
            })),
        }
    }

    /// What discovery says about `group`/`resource`; on a miss, refreshes (once per
    /// [`CATALOG_REFRESH_INTERVAL`]) and looks again. None: unknown, which the decision treats
    /// as guarded (fail closed).
    pub async fn lookup(&self, group: &str, resource: &str) -> Option<DiscoveredResource> {
        let inner = self.inner.as_ref()?;
        let find = |catalog: &Catalog| catalog.get(group)?.get(resource).cloned();
        if let Some(found) = find(&inner.resources.load()) {
            return Some(found);
        }
        self.refresh(false).await;
        find(&inner.resources.load())
    }

    /// Reads discovery again; unless `force`d, not when the last refresh started less than
    /// [`CATALOG_REFRESH_INTERVAL`] ago. A failure keeps what was known.
    pub async fn refresh(&self, force: bool) {
        self.refresh_if(|last| {
            force || last.is_none_or(|at| at.elapsed() >= CATALOG_REFRESH_INTERVAL)
        })
        .await;
    }

    /// Reads discovery again, unless a read started at or after `since`: concurrent callers
    /// that need discovery as of `since` share one read.
    async fn refresh_since(&self, since: tokio::time::Instant) {
        self.refresh_if(|last| last.is_none_or(|at| at < since))
            .await;
    }

    /// Reads discovery again when `due` says so of the last read's start.
    async fn refresh_if(&self, due: impl FnOnce(Option<tokio::time::Instant>) -> bool) {
        let Some(inner) = self.inner.as_ref() else {
            return;
        };
        let mut last = inner.refreshing.lock().await;
        if !due(*last) {
            return;
        }
        let started = tokio::time::Instant::now();
        *last = Some(started);
        let read = async {
            let groups = inner.client.list_api_groups_aggregated().await?;
            let core = inner.client.list_core_api_versions_aggregated().await?;
            let lists = [core, groups];
            Ok::<_, kube::Error>((
                catalog_from_discovery(&lists),
                served_from_discovery(&lists),
            ))
        };
        match tokio::time::timeout(inner.timeout, read).await {
            Ok(Ok((catalog, served))) => {
                let resources: usize = catalog.values().map(HashMap::len).sum();
                tracing::debug!(resources, "API discovery read");
                inner.resources.store(Arc::new(catalog));
                inner.served.store(Arc::new(Served {
                    read_at: Some(started),
                    kinds: served,
                }));
            }
            Ok(Err(error)) => tracing::warn!(
                %error,
                "could not read API discovery; subresources of unknown resources are judged as guarded"
            ),
            Err(_) => tracing::warn!(
                timeout = ?inner.timeout,
                "API discovery did not answer; subresources of unknown resources are judged as guarded"
            ),
        }
    }
}

impl ResourceCatalog {
    /// Every resource served, read first if discovery has not been read yet; None without a
    /// cluster.
    pub async fn served(&self) -> Option<Arc<Served>> {
        let inner = self.inner.as_ref()?;
        if inner.served.load().read_at.is_none() {
            self.refresh(false).await;
        }
        Some(inner.served.load_full())
    }

    /// The resource serving `group`/`kind` as discovery says at `since` or later: on a miss,
    /// discovery is read again unless it was read since (a kind installed a moment ago is not
    /// taken for one that is not served). `Ok(None)`: not served; an error: discovery could
    /// not be read since. `Ok(None)` too without a cluster.
    pub async fn served_kind_since(
        &self,
        group: &str,
        kind: &str,
        since: tokio::time::Instant,
    ) -> Result<Option<ServedKind>, DiscoveryUnread> {
        let Some(inner) = self.inner.as_ref() else {
            return Ok(None);
        };
        let find = |served: &Served| -> Option<Result<Option<ServedKind>, DiscoveryUnread>> {
            match served
                .kinds
                .iter()
                .find(|s| s.group == group && s.kind == kind)
            {
                Some(found) => Some(Ok(Some(found.clone()))),
                None if served.read_at.is_some_and(|at| at >= since) => Some(Ok(None)),
                None => None,
            }
        };
        if let Some(found) = find(&inner.served.load()) {
            return found;
        }
        self.refresh_since(since).await;
        find(&inner.served.load()).unwrap_or(Err(DiscoveryUnread))
    }
}

/// API discovery could not be read when it was needed.
#[derive(Debug, thiserror::Error)]
#[error("API discovery could not be read")]
pub struct DiscoveryUnread;

/// Every resource served, as of the last complete read of discovery.
#[derive(Debug, Default)]
pub struct Served {
    /// When that read started; None before the first.
    pub read_at: Option<tokio::time::Instant>,
    pub kinds: Vec<ServedKind>,
}

/// A resource as API discovery serves it, to list the objects of its kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServedKind {
    /// "" for the core group.
    pub group: String,
    /// The preferred version.
    pub version: String,
    /// The plural: `persistentvolumeclaims`.
    pub resource: String,
    pub kind: String,
    pub namespaced: bool,
    /// Whether the resource can be listed (its verbs include `list`).
    pub listable: bool,
}

impl ServedKind {
    /// The resource for a dynamic [`Api`].
    pub fn api_resource(&self) -> ApiResource {
        ApiResource {
            group: self.group.clone(),
            version: self.version.clone(),
            api_version: if self.group.is_empty() {
                self.version.clone()
            } else {
                format!("{}/{}", self.group, self.version)
            },
            kind: self.kind.clone(),
            plural: self.resource.clone(),
        }
    }

    /// How kubectl and RBAC name it: `persistentvolumeclaims`, `statefulsets.apps`.
    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.resource.clone()
        } else {
            format!("{}.{}", self.resource, self.group)
        }
    }
}

/// The resources in aggregated discovery documents, each once: the first version listed (the
/// preferred) wins.
pub fn served_from_discovery(lists: &[APIGroupDiscoveryList]) -> Vec<ServedKind> {
    let mut served: Vec<ServedKind> = Vec::new();
    for group in lists.iter().flat_map(|list| &list.items) {
        let group_name = group
            .metadata
            .as_ref()
            .and_then(|m| m.name.clone())
            .unwrap_or_default();
        for version in &group.versions {
            let Some(version_name) = &version.version else {
                continue;
            };
            for resource in &version.resources {
                let (Some(plural), Some(kind)) = (
                    &resource.resource,
                    resource
                        .response_kind
                        .as_ref()
                        .and_then(|k| k.kind.as_ref()),
                ) else {
                    continue;
                };
                if served
                    .iter()
                    .any(|s| s.group == group_name && &s.resource == plural)
                {
                    continue;
                }
                served.push(ServedKind {
                    group: group_name.clone(),
                    version: version_name.clone(),
                    resource: plural.clone(),
                    kind: kind.clone(),
                    namespaced: resource.scope.as_deref() == Some("Namespaced"),
                    listable: resource.verbs.iter().any(|v| v == "list"),
                });
            }
        }
    }
    served
}

/// The catalog in aggregated discovery documents (`/api` and `/apis`, apidiscovery.k8s.io/v2).
/// A resource served in several versions has one kind; the first version listed (the
/// preferred) wins.
pub fn catalog_from_discovery(lists: &[APIGroupDiscoveryList]) -> Catalog {
    let mut catalog = Catalog::new();
    for group in lists.iter().flat_map(|list| &list.items) {
        let group_name = group
            .metadata
            .as_ref()
            .and_then(|m| m.name.clone())
            .unwrap_or_default();
        for resource in group.versions.iter().flat_map(|v| &v.resources) {
            let (Some(plural), Some(kind)) = (
                &resource.resource,
                resource
                    .response_kind
                    .as_ref()
                    .and_then(|k| k.kind.as_ref()),
            ) else {
                continue;
            };
            let has_status = resource
                .subresources
                .iter()
                .any(|s| s.subresource.as_deref() == Some("status"));
            catalog
                .entry(group_name.clone())
                .or_default()
                .entry(plural.clone())
                .or_insert_with(|| DiscoveredResource {
                    kind: kind.clone(),
                    has_status,
                });
        }
    }
    catalog
}

/// Why no client could be made for the cluster: which of the flags (or the inference) failed.
#[derive(Debug, thiserror::Error)]
pub enum ClusterConfigError {
    #[error("--kubeconfig {}: {source}", path.display())]
    Kubeconfig {
        path: std::path::PathBuf,
        source: kube::config::KubeconfigError,
    },
    #[error("--context {context}: {source}")]
    KubeContext {
        context: String,
        source: kube::config::KubeconfigError,
    },
    #[error("no cluster configuration found ({source}); pass --kubeconfig")]
    NoClusterConfig {
        source: kube::config::InferConfigError,
    },
    #[error("cannot build the Kubernetes client: {source}")]
    KubeClient { source: kube::Error },
}

/// The cluster configuration from `--kubeconfig FILE`, or inferred (in-cluster, then
/// `$KUBECONFIG`, then `~/.kube/config`), with errors that say which.
pub async fn client_config(
    kubeconfig: Option<&std::path::Path>,
    context: Option<&str>,
) -> Result<kube::Config, ClusterConfigError> {
    use ClusterConfigError as Error;
    let options = kube::config::KubeConfigOptions {
        context: context.map(str::to_owned),
        ..Default::default()
    };
    match (kubeconfig, context) {
        (Some(path), _) => {
            let bad = |source| Error::Kubeconfig {
                path: path.to_path_buf(),
                source,
            };
            let kubeconfig = kube::config::Kubeconfig::read_from(path).map_err(bad)?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .map_err(bad)
        }
        (None, Some(context)) => kube::Config::from_kubeconfig(&options)
            .await
            .map_err(|source| Error::KubeContext {
                context: context.to_owned(),
                source,
            }),
        (None, None) => kube::Config::infer()
            .await
            .map_err(|source| Error::NoClusterConfig { source }),
    }
}

/// A client for `config`.
pub fn client_for(config: kube::Config) -> Result<kube::Client, ClusterConfigError> {
    kube::Client::try_from(config).map_err(|source| ClusterConfigError::KubeClient { source })
}
