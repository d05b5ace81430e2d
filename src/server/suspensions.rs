//! The suspension gauges' thin sink: every interval, lists the objects of the kinds that carry a
//! suspension field under some policy (Flux's Kustomizations, HelmReleases and sources, Argo
//! CD's Applications, by default), counts them with [`crate::suspensions::count_suspensions`]
//! and sets `driftgate_suspensions{policy,state}`. Every replica counts the same cluster, so
//! an alert reads the maximum.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use jiff::Timestamp;
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::ApiResource;
use kube::discovery::{Discovery, verbs};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::metrics::{Metrics, SuspensionLabels};
use crate::policy::PolicySet;
use crate::suspensions::{Listed, count_suspensions};

/// Starts the count, every `interval` until `shutdown`.
pub fn spawn(
    client: kube::Client,
    policies: Arc<ArcSwap<PolicySet>>,
    metrics: Arc<Metrics>,
    interval: Duration,
    shutdown: CancellationToken,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = ticker.tick() => {}
            }
            let policies = policies.load_full();
            if policies.policies().iter().any(|p| p.suspensions.is_some()) {
                count_once(&client, &policies, &metrics).await;
            }
        }
    })
}

/// One count. A kind that cannot be listed (RBAC not granted, an error) is left out and logged;
/// the gauges then say what the rest shows.
async fn count_once(client: &kube::Client, policies: &PolicySet, metrics: &Metrics) {
    let resources = match suspendable_resources(client, policies).await {
        Ok(resources) => resources,
        Err(error) => {
            tracing::warn!(%error, "suspensions: API discovery failed; the gauges keep their last values");
            return;
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
    let listed: Vec<Listed<'_>> = objects
        .iter()
        .map(|(resource, object)| Listed {
            group: &resource.group,
            kind: &resource.kind,
            object,
        })
        .collect();
    let counts = count_suspensions(policies, &listed, Timestamp::now());
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
