//! `serve --policy-reports`: the thin sink of [`driftgate_core::reports`]. Every interval, the leader
//! plans each guarded namespace's PolicyReport from the records and the recent denials and
//! server-side applies those whose content changed since it last wrote them. Without the CRD
//! nothing is written, and the log says so once (again only if it comes and goes).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use arc_swap::ArcSwap;
use jiff::Timestamp;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::kube_state::NamespaceCache;
use crate::ledger::service::Ledger;
use crate::ledger::writes::FIELD_MANAGER;
use crate::metrics::Metrics;
use driftgate_core::policy::PolicySet;
use driftgate_core::reports::{
    GROUP, KIND, PLURAL, REPORT_NAME, RecentDenials, ReportBody, VERSION, guarded_namespaces,
    plan_reports,
};

/// What the reports are planned from, and how often.
pub struct ReportInputs {
    pub ledger: Ledger,
    pub policies: Arc<ArcSwap<PolicySet>>,
    pub namespaces: NamespaceCache,
    /// Filled by the reviews (see `observe` in the server).
    pub denials: Arc<Mutex<RecentDenials>>,
    pub leading: watch::Receiver<bool>,
    pub metrics: Arc<Metrics>,
    pub interval: Duration,
}

pub fn spawn(
    client: kube::Client,
    inputs: ReportInputs,
    shutdown: CancellationToken,
) -> JoinHandle<()> {
    tokio::spawn(publish(client, inputs, shutdown))
}

/// Whether the CRD was found at the last look; the log speaks only when this changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Crd {
    NotLookedAt,
    Installed,
    Absent,
}

struct Sink {
    client: kube::Client,
    resource: ApiResource,
    metrics: Arc<Metrics>,
    crd: Crd,
    /// What this replica last wrote, per namespace: unchanged reports are not written again.
    written: BTreeMap<String, ReportBody>,
}

async fn publish(client: kube::Client, inputs: ReportInputs, shutdown: CancellationToken) {
    let mut sink = Sink {
        client,
        resource: ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(GROUP, VERSION, KIND),
            PLURAL,
        ),
        metrics: inputs.metrics.clone(),
        crd: Crd::NotLookedAt,
        written: BTreeMap::new(),
    };
    let mut ticker = tokio::time::interval(inputs.interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = ticker.tick() => {}
        }
        if !*inputs.leading.borrow() {
            // Another replica writes meanwhile: what this one wrote is no guide on its return.
            sink.written.clear();
            continue;
        }
        // Until the records and namespaces are synced, a report would claim too little.
        let (Some(records), Some(known)) = (inputs.ledger.records(), inputs.namespaces.snapshot())
        else {
            continue;
        };
        if !sink.crd_installed().await {
            continue;
        }
        let now = Timestamp::now();
        let planned = {
            let mut denials = inputs
                .denials
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            denials.forget_old(now);
            let guarded = guarded_namespaces(&inputs.policies.load(), &known);
            plan_reports(&guarded, &records, &denials, now)
        };
        sink.write_changed(planned).await;
    }
}

impl Sink {
    /// Asks API discovery whether `policyreports.wgpolicyk8s.io/v1alpha2` is served.
    async fn crd_installed(&mut self) -> bool {
        let group_version = format!("{GROUP}/{VERSION}");
        let found = match self.client.list_api_group_resources(&group_version).await {
            Ok(list) => list.resources.iter().any(|r| r.name == PLURAL),
            Err(kube::Error::Api(status)) if status.code == 404 => false,
            Err(error) => {
                tracing::warn!(%error, "could not ask API discovery whether the PolicyReport CRD is installed; asking again next interval");
                return false;
            }
        };
        let now = if found { Crd::Installed } else { Crd::Absent };
        if now != self.crd {
            if found {
                tracing::info!(
                    "the PolicyReport CRD ({PLURAL}.{GROUP}, {VERSION}) is installed: publishing one PolicyReport per guarded namespace"
                );
            } else {
                tracing::warn!(
                    "--policy-reports: no PolicyReport is written because the PolicyReport CRD ({PLURAL}.{GROUP}, version {VERSION}) is not installed; install it (Kyverno and policy-reporter ship it) and driftgate publishes within one interval"
                );
                // Deleting the CRD deletes the reports: write them all again when it returns.
                self.written.clear();
            }
            self.crd = now;
        }
        found
    }

    async fn write_changed(&mut self, planned: BTreeMap<String, ReportBody>) {
        // A namespace no longer guarded is written again if it comes back.
        self.written
            .retain(|namespace, _| planned.contains_key(namespace));
        for (namespace, body) in planned {
            if self.written.get(&namespace) == Some(&body) {
                continue;
            }
            match self.apply(&namespace, &body).await {
                Ok(()) => {
                    Metrics::count_result(&self.metrics.policy_report_writes, true);
                    self.written.insert(namespace, body);
                }
                Err(error) => {
                    Metrics::count_result(&self.metrics.policy_report_writes, false);
                    tracing::warn!(%error, namespace, "could not write the namespace's PolicyReport; trying again next interval");
                }
            }
        }
    }

    async fn apply(&self, namespace: &str, body: &ReportBody) -> Result<(), kube::Error> {
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), namespace, &self.resource);
        let mut object = serde_json::to_value(body).map_err(kube::Error::SerdeError)?;
        object["apiVersion"] = json!(format!("{GROUP}/{VERSION}"));
        object["kind"] = json!(KIND);
        object["metadata"] = json!({
            "name": REPORT_NAME,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/managed-by": "driftgate"},
        });
        let params = PatchParams::apply(FIELD_MANAGER).force();
        api.patch(REPORT_NAME, &params, &Patch::Apply(object))
            .await
            .map(|_| ())
    }
}
