//! The GatePolicy source's I/O: a reflector over GatePolicy objects, the active policy set
//! as the union of the file source and the objects, and the status writer. What to serve and
//! what each status should say are decided in `policy::gatepolicy` (pure); this only reads,
//! swaps and patches.

use std::collections::{BTreeMap, BTreeSet};
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use futures::StreamExt;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::core::DynamicObject;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::metrics::{GATEPOLICIES_SOURCE, Metrics};
use crate::tasks::reload::FilePolicies;
use driftgate_core::policy::gatepolicy::{
    LastGood, ObjectOutcome, api_resource, reconcile, status_writes,
};
use driftgate_core::policy::{GatePolicy, PolicySet};

/// The file source's last good set and the GatePolicy source's policies, joined into the set
/// reviews read. Each source swaps only its own half; the union is published under a lock so
/// that two sources swapping at once never publish a stale half.
#[derive(Debug)]
pub struct PolicySources {
    /// Serve every policy in Audit (`serve --audit-only`).
    audit_only: bool,
    files: ArcSwap<PolicySet>,
    gatepolicies: ArcSwap<Vec<GatePolicy>>,
    active: Arc<ArcSwap<PolicySet>>,
    publishing: Mutex<()>,
}

impl PolicySources {
    pub fn new(active: Arc<ArcSwap<PolicySet>>, audit_only: bool) -> PolicySources {
        PolicySources {
            audit_only,
            files: ArcSwap::from_pointee(PolicySet::clone(&active.load())),
            gatepolicies: ArcSwap::from_pointee(Vec::new()),
            active,
            publishing: Mutex::new(()),
        }
    }

    /// The file source's last good set (a GatePolicy may not reuse its names).
    pub fn files(&self) -> Arc<PolicySet> {
        self.files.load_full()
    }

    pub fn store_gatepolicies(&self, policies: Vec<GatePolicy>) {
        self.publish(|| self.gatepolicies.store(Arc::new(policies)));
    }

    fn publish(&self, swap: impl FnOnce()) {
        let _publishing = self.publishing.lock().unwrap_or_else(|e| e.into_inner());
        swap();
        let union = PolicySet::union(&self.files.load(), &self.gatepolicies.load());
        let active = if self.audit_only {
            union.audit_only()
        } else {
            union
        };
        self.active.store(Arc::new(active));
    }
}

impl FilePolicies for PolicySources {
    fn store_files(&self, set: PolicySet) {
        self.publish(|| self.files.store(Arc::new(set)));
    }
}

/// What readiness and `/readyz` know of the GatePolicy source.
#[derive(Debug, Default)]
pub struct GatePolicyHealth {
    synced: AtomicBool,
    problems: ArcSwap<Option<String>>,
    /// The watch's last error while it has not listed yet (the CRD not installed, RBAC).
    list_error: ArcSwap<Option<String>>,
}

impl GatePolicyHealth {
    /// Whether the first complete LIST has been read: before it, a GatePolicy's namespaces
    /// would be admitted unguarded, so the pod is not ready.
    pub fn has_synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    /// Why the pod is not ready yet: None once listed.
    pub fn not_listed(&self) -> Option<String> {
        if self.has_synced() {
            return None;
        }
        Some(match self.list_error.load().as_ref() {
            Some(error) => format!("GatePolicy objects cannot be listed yet: {error}"),
            None => "GatePolicy objects not listed from the API server yet".to_owned(),
        })
    }

    /// Every refused object's problems, one a line.
    pub fn problems(&self) -> Option<String> {
        self.problems.load().as_ref().clone()
    }
}

/// Everything the GatePolicy watch needs.
pub struct GatePolicyWatch {
    pub client: kube::Client,
    pub sources: Arc<PolicySources>,
    pub health: Arc<GatePolicyHealth>,
    pub metrics: Arc<Metrics>,
    /// True while this replica is the leader: only the leader writes statuses.
    pub leader: watch::Receiver<bool>,
    /// How often everything is compiled again without an event (a policy file's change can
    /// make or end a name conflict; a new leader writes what the last one left).
    pub resync: Duration,
}

impl GatePolicyWatch {
    pub fn spawn(self, shutdown: CancellationToken) -> JoinHandle<()> {
        // 0 until the first list says otherwise: an alert on 0 must not miss a bad start.
        self.metrics.set_policy_valid(GATEPOLICIES_SOURCE, false);
        tokio::spawn(self.run(shutdown))
    }

    async fn run(mut self, shutdown: CancellationToken) {
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &api_resource());
        let writer = reflector::store::Writer::new(api_resource());
        let store = writer.as_reader();
        let events = watcher(api.clone(), watcher::Config::default())
            .modify(|object| object.managed_fields_mut().clear())
            .default_backoff();
        let mut events = pin!(reflector::reflector(writer, events));
        let mut ticker = tokio::time::interval(self.resync);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut pass = Pass::default();
        loop {
            tokio::select! {
                biased;
                () = shutdown.cancelled() => return,
                event = events.next() => match event {
                    // The reflector has swapped the complete LIST into the store by now.
                    Some(Ok(watcher::Event::InitDone)) => {
                        self.health.synced.store(true, Ordering::Release);
                        tracing::info!(objects = store.state().len(), "GatePolicy objects listed");
                    }
                    Some(Ok(_)) => {}
                    Some(Err(error)) => {
                        if !self.health.has_synced() {
                            self.health.list_error.store(Arc::new(Some(format!(
                                "{error} (is the CRD gatepolicies.driftgate.dev installed, and may driftgate list it?)"
                            ))));
                        }
                        tracing::warn!(%error, "GatePolicy watch failed; the last policies read keep serving while it retries");
                        continue;
                    }
                    None => return,
                },
                _ = ticker.tick() => {}
                Ok(()) = self.leader.changed() => {}
            }
            if self.health.has_synced() {
                pass = self.compile_all(&api, &store, pass).await;
            }
        }
    }

    /// One pass: compile every object, swap the policies in, record the outcome, write the
    /// statuses that differ (as the leader).
    async fn compile_all(
        &self,
        api: &Api<DynamicObject>,
        store: &Store<DynamicObject>,
        last: Pass,
    ) -> Pass {
        let objects = store.state();
        let reconciled = reconcile(&objects, &self.sources.files(), &last.serving);
        self.sources.store_gatepolicies(reconciled.policies());
        self.metrics
            .set_policy_valid(GATEPOLICIES_SOURCE, reconciled.all_valid());
        self.health.problems.store(Arc::new(reconciled.problems()));
        let reported = log_new_outcomes(&reconciled.outcomes, &last.reported);
        if *self.leader.borrow() {
            write_statuses(api, &objects, &reconciled.outcomes).await;
        }
        Pass {
            serving: reconciled.serving,
            reported,
        }
    }
}

/// What one pass leaves for the next.
#[derive(Default)]
struct Pass {
    serving: BTreeMap<String, LastGood>,
    /// (name, generation, valid) already logged, so that a resync does not repeat them.
    reported: BTreeSet<(String, i64, bool)>,
}

fn log_new_outcomes(
    outcomes: &[ObjectOutcome],
    reported: &BTreeSet<(String, i64, bool)>,
) -> BTreeSet<(String, i64, bool)> {
    let mut now = BTreeSet::new();
    for outcome in outcomes {
        let key = (outcome.name.clone(), outcome.generation, outcome.is_valid());
        if !reported.contains(&key) {
            if outcome.is_valid() {
                tracing::info!(gatepolicy = %outcome.name, generation = outcome.generation, "GatePolicy compiled and active");
            } else {
                for problem in &outcome.problems {
                    tracing::error!(gatepolicy = %outcome.name, generation = outcome.generation, serving_generation = ?outcome.serving_generation, %problem, "GatePolicy refused");
                }
            }
        }
        now.insert(key);
    }
    now
}

/// Patches the status subresource of each object whose status differs from its outcome's.
async fn write_statuses(
    api: &Api<DynamicObject>,
    objects: &[Arc<DynamicObject>],
    outcomes: &[ObjectOutcome],
) {
    for (name, status) in status_writes(objects, outcomes, jiff::Timestamp::now()) {
        let patch = Patch::Merge(serde_json::json!({ "status": status }));
        if let Err(error) = api
            .patch_status(&name, &PatchParams::default(), &patch)
            .await
        {
            tracing::warn!(gatepolicy = %name, %error, "could not write the GatePolicy's status; retried on the next pass");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use driftgate_core::policy::PolicyMode;

    fn set(source: &str, text: &str) -> PolicySet {
        PolicySet::from_yaml(source, text).unwrap()
    }

    fn policy(name: &str) -> String {
        format!(
            "apiVersion: driftgate.dev/v1alpha1\nkind: GatePolicy\nmetadata:\n  name: {name}\nspec:\n  namespaces:\n    include: [{name}]\n"
        )
    }

    fn names(active: &ArcSwap<PolicySet>) -> Vec<String> {
        active
            .load()
            .policies()
            .iter()
            .map(|p| p.name.clone())
            .collect()
    }

    #[test]
    fn each_source_swaps_its_half_and_the_union_is_published() {
        let active = Arc::new(ArcSwap::from_pointee(PolicySet::default()));
        let sources = PolicySources::new(active.clone(), false);
        sources.store_files(set("files.yaml", &policy("files-a")));
        assert_eq!(names(&active), ["files-a"]);
        let objects = set("gatepolicy/team-b", &policy("team-b")).into_policies();
        sources.store_gatepolicies(objects);
        assert_eq!(names(&active), ["files-a", "team-b"]);
        // A reload of the files keeps the objects' policies.
        sources.store_files(set("files.yaml", &policy("files-c")));
        assert_eq!(names(&active), ["files-c", "team-b"]);
        sources.store_gatepolicies(Vec::new());
        assert_eq!(names(&active), ["files-c"]);
    }

    /// `serve --audit-only`: both sources' policies are served in Audit, whatever their mode;
    /// without it, as written.
    #[test]
    fn audit_only_serves_every_source_in_audit() {
        let modes = |audit_only: bool| {
            let active = Arc::new(ArcSwap::from_pointee(PolicySet::default()));
            let sources = PolicySources::new(active.clone(), audit_only);
            sources.store_files(set("files.yaml", &policy("files-a")));
            sources.store_gatepolicies(set("gatepolicy/b", &policy("team-b")).into_policies());
            active
                .load()
                .policies()
                .iter()
                .map(|p| p.mode)
                .collect::<Vec<_>>()
        };
        assert_eq!(modes(false), [PolicyMode::Enforce, PolicyMode::Enforce]);
        assert_eq!(modes(true), [PolicyMode::Audit, PolicyMode::Audit]);
    }

    #[test]
    fn not_ready_until_listed_with_the_reason() {
        let health = GatePolicyHealth::default();
        assert_eq!(
            health.not_listed().as_deref(),
            Some("GatePolicy objects not listed from the API server yet")
        );
        health
            .list_error
            .store(Arc::new(Some("404 Not Found".to_owned())));
        assert!(health.not_listed().unwrap().contains("404 Not Found"));
        health.synced.store(true, Ordering::Release);
        assert_eq!(health.not_listed(), None);
    }
}
