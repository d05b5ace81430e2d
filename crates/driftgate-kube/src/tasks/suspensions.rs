//! The suspension gauges' thin sink: every interval, lists the objects of the kinds that carry a
//! suspension field under some policy (Flux's Kustomizations, HelmReleases and sources, Argo
//! CD's Applications, by default), counts them with [`driftgate_core::suspensions::count_suspensions`]
//! and sets `driftgate_suspensions{policy,state}`. Every replica counts the same cluster, so
//! an alert reads the maximum.
//!
//! With `--resume-expired-suspensions`, the leader then applies the resumes that
//! [`driftgate_core::suspensions::plan_resumes`] plans for what it just listed: one merge patch per
//! object, an ordinary write that driftgate's webhook reviews like anyone's (Rule::Resumed, its
//! Event). A patch refused as a conflict (the object changed since it was listed) is left for
//! the next round, which reads it again.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::ApiResource;
use kube::discovery::{Discovery, verbs};
use serde_json::Value;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use driftgate_core::events::{EventReason, PlannedEvent};

use crate::event_sink::EventSink;
use crate::metrics::{Metrics, ResumeLabels, SuspensionLabels};
use driftgate_core::policy::PolicySet;
use driftgate_core::suspensions::{
    Listed, Reported, ResumeAction, ResumePlan, cannot_resume_note, count_suspensions,
    object_words, plan_resumes,
};

/// driftgate's field manager on the resumes it makes.
pub const RESUME_FIELD_MANAGER: &str = "driftgate-resume";

/// Resuming expired suspensions (`serve --resume-expired-suspensions`): only while `leading`,
/// and with the sink for the Events about what cannot be undone.
pub struct AutoResume {
    pub leading: watch::Receiver<bool>,
    pub events: EventSink,
}

/// Starts the count (and the resumes, with `auto_resume`), every `interval` until `shutdown`.
pub fn spawn(
    client: kube::Client,
    policies: Arc<ArcSwap<PolicySet>>,
    metrics: Arc<Metrics>,
    interval: Duration,
    auto_resume: Option<AutoResume>,
    shutdown: CancellationToken,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut reported = Reported::default();
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = ticker.tick() => {}
            }
            let policies = policies.load_full();
            if !policies.policies().iter().any(|p| p.suspensions.is_some()) {
                continue;
            }
            let Some(objects) = list_suspendable(&client, &policies).await else {
                continue;
            };
            let listed = listed(&objects);
            let now = Timestamp::now();
            set_gauges(&metrics, &policies, &listed, now);
            if let Some(auto) = auto_resume.as_ref().filter(|a| *a.leading.borrow()) {
                let plans = plan_resumes(&policies, &listed, now);
                let round = Round {
                    client: &client,
                    objects: &objects,
                    listed: &listed,
                    metrics: &metrics,
                };
                round.say_cannot_undo(&auto.events, reported.first_time(&listed, &plans));
                round.resume(&plans).await;
            }
        }
    })
}

fn listed(objects: &[(ApiResource, DynamicObject)]) -> Vec<Listed<'_>> {
    objects
        .iter()
        .map(|(resource, object)| Listed {
            group: &resource.group,
            kind: &resource.kind,
            object,
        })
        .collect()
}

/// The objects of the suspendable kinds. A kind that cannot be listed (RBAC not granted, an
/// error) is left out and logged; the gauges then say what the rest shows. `None`: discovery
/// failed, and the gauges keep their last values.
async fn list_suspendable(
    client: &kube::Client,
    policies: &PolicySet,
) -> Option<Vec<(ApiResource, DynamicObject)>> {
    let resources = match suspendable_resources(client, policies).await {
        Ok(resources) => resources,
        Err(error) => {
            tracing::warn!(%error, "suspensions: API discovery failed; the gauges keep their last values");
            return None;
        }
    };
    let mut objects: Vec<(ApiResource, DynamicObject)> = Vec::new();
    for resource in resources {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
        match api.list(&ListParams::default()).await {
            Ok(list) => objects.extend(list.items.into_iter().map(|o| (resource.clone(), o))),
            Err(error) => tracing::warn!(
                %error,
                group = %resource.group,
                kind = %resource.kind,
                "suspensions: cannot list this kind; its suspensions are not counted (see the chart's rbac.suspensionKinds)"
            ),
        }
    }
    Some(objects)
}

fn set_gauges(metrics: &Metrics, policies: &PolicySet, listed: &[Listed<'_>], now: Timestamp) {
    let counts = count_suspensions(policies, listed, now);
    // Policies gone since the last count leave no stale series.
    metrics.suspensions.clear();
    for ((policy, state), count) in counts {
        metrics
            .suspensions
            .get_or_create(&SuspensionLabels {
                policy,
                state: state.as_str().to_owned(),
            })
            .set(count);
    }
}

/// One round of resumes, over what was just listed.
struct Round<'r> {
    client: &'r kube::Client,
    objects: &'r [(ApiResource, DynamicObject)],
    listed: &'r [Listed<'r>],
    metrics: &'r Metrics,
}

impl Round<'_> {
    /// Logs, publishes an Event on and counts each suspension that cannot be undone, the first
    /// round it is seen expired.
    fn say_cannot_undo(&self, events: &EventSink, plans: Vec<&ResumePlan>) {
        for plan in plans {
            let ResumeAction::CannotUndo(cannot) = &plan.action else {
                continue;
            };
            let (resource, object) = &self.objects[plan.at];
            let note = cannot_resume_note(&self.listed[plan.at], plan, cannot);
            tracing::warn!(policy = %plan.policy, object = %object_words(&self.listed[plan.at]), "suspensions: {note}");
            events.publish(PlannedEvent::new(
                EventReason::SuspensionNotResumed,
                note,
                regarding(resource, object),
            ));
            self.count(plan, "not_undoable");
        }
    }

    /// Applies each planned patch, one at a time.
    async fn resume(&self, plans: &[ResumePlan]) {
        for plan in plans {
            let ResumeAction::Patch(patch) = &plan.action else {
                continue;
            };
            let result = self.apply(plan, patch).await;
            self.count(plan, result);
        }
    }

    async fn apply(&self, plan: &ResumePlan, patch: &Value) -> &'static str {
        let (resource, object) = &self.objects[plan.at];
        let words = object_words(&self.listed[plan.at]);
        let api: Api<DynamicObject> = match &object.metadata.namespace {
            Some(namespace) => Api::namespaced_with(self.client.clone(), namespace, resource),
            None => Api::all_with(self.client.clone(), resource),
        };
        let params = PatchParams {
            field_manager: Some(RESUME_FIELD_MANAGER.to_owned()),
            ..PatchParams::default()
        };
        let name = object.metadata.name.as_deref().unwrap_or_default();
        match api.patch(name, &params, &Patch::Merge(patch)).await {
            Ok(_) => {
                tracing::info!(policy = %plan.policy, object = %words, label = %plan.label_value, "suspensions: resumed a suspension past its expiry; the GitOps controller reconciles it again");
                "success"
            }
            // Changed or gone since it was listed (extended, resumed, deleted): the next round
            // reads it again.
            Err(kube::Error::Api(status)) if matches!(status.code, 404 | 409) => {
                tracing::info!(policy = %plan.policy, object = %words, code = status.code, "suspensions: the object changed since it was listed; it is read again next round");
                "conflict"
            }
            Err(error) => {
                tracing::warn!(%error, policy = %plan.policy, object = %words, "suspensions: resuming a suspension past its expiry failed (is patch granted on this kind? see the chart's suspensions.autoResume); retried next round");
                "failure"
            }
        }
    }

    fn count(&self, plan: &ResumePlan, result: &str) {
        self.metrics
            .suspension_resumes
            .get_or_create(&ResumeLabels {
                policy: plan.policy.clone(),
                result: result.to_owned(),
            })
            .inc();
    }
}

/// The object an Event is about.
fn regarding(resource: &ApiResource, object: &DynamicObject) -> ObjectReference {
    ObjectReference {
        api_version: Some(resource.api_version.clone()),
        kind: Some(resource.kind.clone()),
        namespace: object.metadata.namespace.clone(),
        name: object.metadata.name.clone(),
        uid: object.metadata.uid.clone(),
        ..ObjectReference::default()
    }
}

/// The listable resources whose kind has a suspension field under some policy.
async fn suspendable_resources(
    client: &kube::Client,
    policies: &PolicySet,
) -> Result<Vec<ApiResource>, kube::Error> {
    let discovery = match groups_named(policies) {
        Some(groups) => {
            let groups: Vec<&str> = groups.iter().map(String::as_str).collect();
            Discovery::new(client.clone()).filter(&groups).run().await?
        }
        None => Discovery::new(client.clone()).run().await?,
    };
    let mut found = Vec::new();
    for group in discovery.groups() {
        for (resource, caps) in group.recommended_resources() {
            let suspendable = policies.policies().iter().any(|policy| {
                policy
                    .suspensions
                    .as_ref()
                    .is_some_and(|rules| rules.has_field(&resource.group, &resource.kind))
            });
            if suspendable && caps.supports_operation(verbs::LIST) {
                found.push(resource);
            }
        }
    }
    Ok(found)
}

/// The API groups the suspension fields' kinds name, so that discovery asks only for those;
/// `None` when a pattern's group is a glob (then every group is discovered).
fn groups_named(policies: &PolicySet) -> Option<Vec<String>> {
    let mut groups = Vec::new();
    let patterns = policies
        .policies()
        .iter()
        .filter_map(|p| p.suspensions.as_ref())
        .flat_map(|rules| &rules.fields)
        .flat_map(|field| &field.kind_patterns);
    for pattern in patterns {
        let group = pattern.split_once('/').map_or(pattern.as_str(), |(g, _)| g);
        if group.contains(['*', '?', '[', '{']) {
            return None;
        }
        let group = if group == "core" { "" } else { group };
        if !groups.iter().any(|g| g == group) {
            groups.push(group.to_owned());
        }
    }
    Some(groups)
}
