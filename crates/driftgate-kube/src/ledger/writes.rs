//! The API writes that apply the ledger's plans ([`plan`](driftgate_core::ledger::plan),
//! [`controller`](driftgate_core::ledger::controller), [`upkeep`](driftgate_core::ledger::upkeep)), with their retries. No
//! judgement here: every step is conditioned on the record's resourceVersion, so with several
//! replicas exactly one makes it, and only that one emits the Event; on a conflict the record
//! is read again and the pure step asked again.

use std::sync::Arc;

use jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};

use crate::event_sink::EventSink;
use crate::metrics::Metrics;
use driftgate_core::ledger::claims::{ClaimWrite, Claimed, Shown, WriteKind, plan_claims};
use driftgate_core::ledger::controller::{DryRunMark, SettleStep, Settlement, settle_step};
use driftgate_core::ledger::phase::{
    PhaseChange, dry_run_matched, has_transitions, phase_of, status_patch, transitioned,
};
use driftgate_core::ledger::plan::{
    AppendTo, NewRecord, RecordWrite, RecordingPlan, append_patch, holds,
};
use driftgate_core::ledger::record::{BackportRequirement, BackportStatus, Phase, RecordedChange};
use driftgate_core::ledger::upkeep::{Deletion, Expiry, expiry_of};

pub const FIELD_MANAGER: &str = "driftgate";

/// Writes records through the API server, and publishes the Events of the moves it makes.
pub struct RecordWriter {
    pub client: kube::Client,
    pub events: EventSink,
    pub metrics: Arc<Metrics>,
}

impl RecordWriter {
    fn api(&self, namespace: &str) -> Api<BackportRequirement> {
        Api::namespaced(self.client.clone(), namespace)
    }

    /// The records of one window's object, fresh from the API server (the cache may not hold
    /// a record created a moment ago).
    pub async fn list(
        &self,
        namespace: &str,
        selector: &str,
    ) -> Result<Vec<BackportRequirement>, kube::Error> {
        let listed = self
            .api(namespace)
            .list(&ListParams::default().labels(selector))
            .await?;
        Ok(listed.items)
    }

    /// Makes the writes of `plan`, in `namespace`, before the write it records is admitted.
    pub async fn record(
        &self,
        namespace: &str,
        plan: RecordingPlan<'_>,
        now: Timestamp,
    ) -> Result<(), kube::Error> {
        for expiry in plan.expire {
            if let Err(error) = self.expire(&expiry, now).await {
                tracing::warn!(%error, record = %expiry.record.name_any(), "could not mark an expired window");
            }
        }
        let api = self.api(namespace);
        match plan.write {
            RecordWrite::Nothing => Ok(()),
            RecordWrite::Transition { record, change } => {
                self.transition(record, &change, now).await.map(|_| ())
            }
            RecordWrite::UpdateWindow { record, patch } => {
                api.patch(
                    &record.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await?;
                Ok(())
            }
            RecordWrite::Renew {
                record,
                change,
                patch,
            } => self.renew(&api, record, &change, &patch, now).await,
            RecordWrite::Create(new) => self.create(&api, *new, now).await.map(|_| ()),
            RecordWrite::Append { to, change } => {
                let record = match to {
                    AppendTo::Existing(record) => record.clone(),
                    AppendTo::New(new) => self.create(&api, *new, now).await?,
                };
                self.append(&api, record, change).await
            }
        }
    }

    /// Moves an expired suspension's record back to Open, then patches its window. Open first:
    /// should the window's patch fail, the expiry check finds the record Open past its old
    /// expiry and marks it Expired again. A conflict is read again, and the move made while the
    /// record is still Expired (another replica may have made it).
    async fn renew(
        &self,
        api: &Api<BackportRequirement>,
        record: &BackportRequirement,
        change: &PhaseChange,
        patch: &serde_json::Value,
        now: Timestamp,
    ) -> Result<(), kube::Error> {
        let mut record = record.clone();
        for _ in 0..3 {
            if phase_of(&record) != Phase::Expired
                || self.transition(&record, change, now).await?.is_some()
            {
                break;
            }
            record = api.get(&record.name_any()).await?;
        }
        api.patch(
            &record.name_any(),
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await?;
        Ok(())
    }

    /// Appends `change` to `record` unless it holds the change already. The append is
    /// conditioned on the record's resourceVersion, and on a conflict the record is read again
    /// and checked again: several replicas called for the same request (the API server calls
    /// validating webhooks in parallel), or a retry of a request whose answer was lost, record
    /// the change once.
    async fn append(
        &self,
        api: &Api<BackportRequirement>,
        mut record: BackportRequirement,
        change: RecordedChange,
    ) -> Result<(), kube::Error> {
        const ATTEMPTS: usize = 5;
        for attempt in 1..=ATTEMPTS {
            if holds(&record, &change) {
                return Ok(());
            }
            let patch = append_patch(&record, &change);
            match api
                .patch(
                    &record.name_any(),
                    &PatchParams::default(),
                    &Patch::<()>::Json(patch),
                )
                .await
            {
                Ok(_) => return Ok(()),
                Err(kube::Error::Api(status)) if status.code == 409 && attempt < ATTEMPTS => {
                    record = api.get(&record.name_any()).await?;
                }
                Err(error) => return Err(error),
            }
        }
        unreachable!("the last attempt returns")
    }

    /// Creates the record of a window and marks it Open with its first transition; a record of
    /// the same window that exists already (another replica, or a retry of this request) is
    /// returned as it is.
    async fn create(
        &self,
        api: &Api<BackportRequirement>,
        new: NewRecord,
        now: Timestamp,
    ) -> Result<BackportRequirement, kube::Error> {
        let name = new.record.name_any();
        let params = PostParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..Default::default()
        };
        match api.create(&params, &new.record).await {
            Ok(created) => Ok(self.mark_open(api, created, &new.first, now).await),
            // Another replica (or a retry of this request) recorded the same window.
            Err(kube::Error::Api(status)) if status.code == 409 => api.get(&name).await,
            Err(error) => Err(error),
        }
    }

    /// Writes a new record's status, phase Open: the API server ignores the status of a create
    /// (it is a subresource), and without it `kubectl get backportrequirements` shows no phase.
    /// Retried when the record changed meanwhile (another replica appended a change); a failure
    /// is only logged, since the record itself exists and reads as Open without a status.
    async fn mark_open(
        &self,
        api: &Api<BackportRequirement>,
        mut record: BackportRequirement,
        first: &PhaseChange,
        now: Timestamp,
    ) -> BackportRequirement {
        for _ in 0..3 {
            if has_transitions(&record) {
                return record;
            }
            match self.transition(&record, first, now).await {
                Ok(Some(written)) => return written,
                Ok(None) => match api.get(&record.name_any()).await {
                    Ok(latest) => record = latest,
                    Err(error) => {
                        tracing::warn!(%error, record = %record.name_any(), "could not read a new record back");
                        return record;
                    }
                },
                Err(error) => {
                    tracing::warn!(%error, record = %record.name_any(), "could not write a new record's status");
                    return record;
                }
            }
        }
        record
    }

    /// Makes `change` on `record`, conditioned on its resourceVersion. Returns the record as
    /// written when this call made the transition, None when it did not (somebody else did, or
    /// the record changed meanwhile).
    async fn transition(
        &self,
        record: &BackportRequirement,
        change: &PhaseChange,
        now: Timestamp,
    ) -> Result<Option<BackportRequirement>, kube::Error> {
        let status = transitioned(record.status.as_ref(), change, now);
        self.write_status(record, &status).await
    }

    /// Writes `status` on `record`, conditioned on its resourceVersion: None on a conflict.
    async fn write_status(
        &self,
        record: &BackportRequirement,
        status: &BackportStatus,
    ) -> Result<Option<BackportRequirement>, kube::Error> {
        let patch = status_patch(record.metadata.resource_version.as_deref(), status);
        let namespace = record.metadata.namespace.clone().unwrap_or_default();
        match self
            .api(&namespace)
            .patch_status(
                &record.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(written) => Ok(Some(written)),
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// Makes a settlement's move, with its Event (and for a revert, the metric).
    pub async fn settle(&self, settlement: Settlement, now: Timestamp) {
        let Settlement {
            record,
            change,
            event,
        } = settlement;
        let settled = self
            .step(
                &record,
                |latest| transitioned(latest.status.as_ref(), &change, now),
                now,
            )
            .await;
        if settled {
            if change.phase == Phase::Reverted {
                self.metrics.emergency_changes_reverted.inc();
            }
            self.events.publish(event);
        }
    }

    /// Remembers a controller's dry run that carried the recorded values on the record.
    pub async fn mark_dry_run(&self, mark: DryRunMark, now: Timestamp) {
        let DryRunMark { record, mark } = mark;
        self.step(
            &record,
            |latest| dry_run_matched(latest.status.as_ref(), &mark),
            now,
        )
        .await;
    }

    /// Writes the status `status_of` builds from the record as last read, while it awaits
    /// backport. A record whose window ended since the last expiry check is expired first
    /// (with its Event); each step is conditioned on the record's resourceVersion, and a
    /// conflict is read again: another replica may have made the step. True when this call
    /// wrote the status.
    async fn step(
        &self,
        record: &BackportRequirement,
        status_of: impl Fn(&BackportRequirement) -> BackportStatus,
        now: Timestamp,
    ) -> bool {
        let api = self.api(record.metadata.namespace.as_deref().unwrap_or_default());
        let mut record = record.clone();
        for _ in 0..4 {
            let step = match settle_step(&record, now) {
                SettleStep::Expire => self.expire(&expiry_of(&record), now).await,
                SettleStep::Settle => match self.write_status(&record, &status_of(&record)).await {
                    Ok(Some(_)) => return true,
                    other => other,
                },
                SettleStep::Done => return false,
            };
            record = match step {
                Ok(Some(written)) => written,
                Ok(None) => match api.get(&record.name_any()).await {
                    Ok(latest) => latest,
                    Err(error) => {
                        tracing::warn!(%error, record = %record.name_any(), "could not read a record back");
                        return false;
                    }
                },
                Err(error) => {
                    tracing::warn!(%error, record = %record.name_any(), "could not record the backport outcome");
                    return false;
                }
            };
        }
        false
    }

    /// Moves an Open record whose window has ended to AwaitingBackport and publishes its
    /// BreakGlassExpired Event. Returns the record as written, or None when this call did not
    /// make the transition (another replica did, or the record changed meanwhile).
    pub async fn expire(
        &self,
        expiry: &Expiry<'_>,
        now: Timestamp,
    ) -> Result<Option<BackportRequirement>, kube::Error> {
        let written = self.transition(expiry.record, &expiry.change, now).await?;
        if written.is_some() {
            self.events.publish(expiry.event.clone());
        }
        Ok(written)
    }

    /// Settles the claims of one write against the records of its window's object (listed
    /// by `selector` in `namespace`) as [`plan_claims`] says, given what the API server showed.
    /// Each write is conditioned (a status write on the record's resourceVersion, a change's
    /// on the change still being at its index): on a conflict the records are listed again
    /// and the plan asked again, since another replica may have made the same step.
    pub async fn settle_claims(
        &self,
        namespace: &str,
        selector: &str,
        claims: &[Claimed],
        shown: (WriteKind, Shown<'_>),
        now: Timestamp,
    ) -> Result<(), kube::Error> {
        let api = self.api(namespace);
        'attempts: for _ in 0..3 {
            let listed = self.list(namespace, selector).await?;
            for write in plan_claims(&listed, claims, shown, now) {
                let record = write.record().name_any();
                let written = match (&write, write.change_patch()) {
                    (ClaimWrite::WithdrawRecord { record, change }, _) => self
                        .transition(record, change, now)
                        .await
                        .map(|written| written.is_some()),
                    (_, Some(patch)) => match api
                        .patch(&record, &PatchParams::default(), &Patch::<()>::Json(patch))
                        .await
                    {
                        Ok(_) => Ok(true),
                        // The test failed (the change moved) or the record changed meanwhile.
                        Err(kube::Error::Api(status)) if matches!(status.code, 409 | 422) => {
                            Ok(false)
                        }
                        Err(error) => Err(error),
                    },
                    (_, None) => Ok(true),
                };
                if !written? {
                    continue 'attempts;
                }
                match &write {
                    ClaimWrite::Landed { .. } => {}
                    ClaimWrite::WithdrawChange { .. } => {
                        tracing::warn!(%record, %namespace, "a break-glass change recorded from a review was never stored by the API server (refused after driftgate admitted it, or a forged review): withdrawn from its record")
                    }
                    ClaimWrite::WithdrawRecord { .. } => {
                        tracing::warn!(%record, %namespace, "the write a backport record was created for was never stored by the API server (refused after driftgate admitted it, or a forged review): the record is Withdrawn")
                    }
                }
            }
            return Ok(());
        }
        Ok(())
    }

    /// Deletes a settled record past its retention, conditioned on the version planned from.
    /// The only deletion of records driftgate's webhook admits.
    pub async fn delete(&self, deletion: &Deletion) {
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                resource_version: deletion.resource_version.clone(),
                uid: deletion.uid.clone(),
            }),
            ..DeleteParams::default()
        };
        let (name, namespace) = (&deletion.name, &deletion.namespace);
        match self.api(namespace).delete(name, &params).await {
            Ok(_) => {
                tracing::info!(record = %name, %namespace, phase = deletion.phase.word(), "deleted a settled backport record past its retention")
            }
            Err(kube::Error::Api(status)) if matches!(status.code, 404 | 409) => {}
            Err(error) => {
                tracing::warn!(%error, record = %name, "could not delete a settled record past its retention")
            }
        }
    }
}
