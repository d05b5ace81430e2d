//! The effects stage: what a decision calls for once it stands. Before the answer, a
//! controller's admitted delete is counted (it may read the object first); with the answer,
//! its Events are queued, the in-memory trackers fed, the metrics counted and the one log line
//! written. None of them changes the decision, and none but the count delays it.

use std::time::{Duration, Instant};

use axum::response::{IntoResponse, Response};
use jiff::Timestamp;
use kube::core::DynamicObject;
use kube::core::admission::Operation;

use driftgate_core::decision::Decision;
use driftgate_core::policy::PolicySet;
use driftgate_core::request::{AdmittedWrite, RequestFacts};
use driftgate_core::text::{MAX_NAME_CHARS, echo};
use driftgate_kube::metrics::ReviewLabels;

use crate::server::state::{EffectsState, LOG_TARGET};

/// Publishes what a decision calls for and answers the API server with it.
pub fn answer(
    state: &EffectsState,
    policies: &PolicySet,
    facts: &RequestFacts<'_>,
    decision: &Decision,
    started: Instant,
) -> Response {
    // Side effects never delay the answer: `record` only queues.
    state.events.record(facts, decision);
    remember(state, policies, facts, decision);
    let response = decision.to_response(facts.request()).into_review();
    let elapsed = started.elapsed();
    observe(state, facts, decision, elapsed);
    axum::Json(response).into_response()
}

/// What the in-memory trackers keep of one review (for gauges, refusals and reports): each is
/// fed after the decision and never delays it, and each takes an exclusive lock only for the
/// reviews that concern it (every review passes here).
fn remember(
    state: &EffectsState,
    policies: &PolicySet,
    facts: &RequestFacts<'_>,
    decision: &Decision,
) {
    let now = (state.clock)();
    if !facts.request().dry_run() && !state.ledger_connected {
        state.windows.observe(decision, now);
    }
    if state.caller_authenticated {
        // Dry runs count: Flux dry-runs every object on every interval.
        state.silence.observe(policies, decision, now);
    } else {
        confirm_controller_write(state, policies, facts, decision, now);
    }
    let lingering = &state.lingering;
    let concerns = lingering
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .concerns(policies, facts, decision);
    if concerns {
        lingering
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .observe(policies, facts, decision, now);
    }
    // A refused write leaves nothing in the API server to confirm it by: only the
    // authenticated API server's reviews are reported.
    if let Some(denials) = &state.denials
        && state.caller_authenticated
        && let Some(denial) = driftgate_core::reports::denial_of(decision, now)
    {
        denials
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .note(denial);
    }
}

/// A controller's write, claimed by a review that may not come from the API server, moves its
/// last write only as the API server shows it: read back (at most every few seconds per
/// controller), the time of the controller's own managedFields entry. Dry runs and refused
/// writes leave nothing stored, so they move nothing; deletes are confirmed by
/// [`count_deletes`], which reads their object before the answer.
fn confirm_controller_write(
    state: &EffectsState,
    policies: &PolicySet,
    facts: &RequestFacts<'_>,
    decision: &Decision,
    now: Timestamp,
) {
    if !decision.allowed || facts.request().operation() == Operation::Delete {
        return;
    }
    let writers = driftgate_core::silence::tracked_writers(policies, decision);
    let Some(write) = AdmittedWrite::of(facts).filter(|_| !writers.is_empty()) else {
        return;
    };
    if !state.silence.should_confirm(&writers, now) {
        return;
    }
    let manager = facts.field_manager().map(str::to_owned);
    let (reader, silence) = (state.stored.clone(), state.silence.clone());
    let policies = state.policies.clone();
    tokio::spawn(async move {
        // Gone is no evidence of a create or an update: a forged review naming an object that
        // does not exist, or with another uid, reads back gone at once.
        let Some(Some(live)) = reader.read_back(&write).await else {
            return;
        };
        let Some(written_at) = manager.as_deref().and_then(|m| entry_time(&live, m)) else {
            return;
        };
        silence.observe_stored(&policies.load(), writers, written_at);
    });
}

/// When `manager` last wrote `object` itself (no subresource), as its managedFields say.
fn entry_time(object: &DynamicObject, manager: &str) -> Option<Timestamp> {
    object
        .metadata
        .managed_fields
        .as_ref()?
        .iter()
        .filter(|e| e.manager.as_deref() == Some(manager))
        .filter(|e| e.subresource.as_deref().unwrap_or("").is_empty())
        .filter_map(|e| e.time.as_ref().map(|t| t.0))
        .max()
}

/// How long the read of a delete's object may hold up its answer (without client
/// authentication): well within the webhook's timeout, and an answer still comes if it fails.
const DELETE_READ_TIMEOUT: Duration = Duration::from_secs(2);

/// Counts a controller's admitted delete for `deletions.controllerLimit`, and takes it as the
/// controller's write for the silence gauge: at once when the caller is the authenticated API
/// server. Otherwise the review is a claim: the delete counts only if its object was there, as
/// the review names it, when the review was answered (the API server reviews a DELETE before
/// it deletes); it then counts while it is awaited (a burst is reviewed faster than its first
/// delete can be seen gone), for good once the API server shows it gone, and is forgotten if it
/// never goes. A forged review of an object that does not exist would otherwise read back gone
/// at once, fill the tally and stop a real prune.
pub async fn count_deletes(
    state: &EffectsState,
    facts: &RequestFacts<'_>,
    decision: &Decision,
    policies: &PolicySet,
    now: Timestamp,
) {
    // Every review passes here: the lock is taken for deletes only.
    if facts.request().operation() != Operation::Delete || !decision.allowed {
        return;
    }
    let deletes = driftgate_core::deletions::counted_deletes(facts, decision, policies);
    if state.caller_authenticated {
        if !deletes.is_empty() {
            state
                .deletions
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .count_all(&deletes, now);
        }
        return;
    }
    // The read is paid only for deletes something counts: the tally, or a controller's
    // silence due for a confirmation.
    let mut writers = driftgate_core::silence::tracked_writers(policies, decision);
    if writers.is_empty() || !state.silence.should_confirm(&writers, now) {
        writers.clear();
    }
    if deletes.is_empty() && writers.is_empty() {
        return;
    }
    let (Some(write), Some(client)) = (AdmittedWrite::of(facts), state.api.clone()) else {
        return;
    };
    let stored = match driftgate_kube::kube_state::read_stored(
        client,
        &write.address,
        DELETE_READ_TIMEOUT,
    )
    .await
    {
        Ok(stored) => stored,
        Err(error) => {
            tracing::debug!(target: LOG_TARGET, %error, object = %write.address.name, "could not read the object of a controller's delete: the delete is not counted");
            return;
        }
    };
    if !driftgate_core::deletions::existed_when_reviewed(&write, stored.as_ref()) {
        tracing::info!(target: LOG_TARGET, object = %write.address.name, uid = %write.uid, "a delete was reviewed of an object that is not there as the review names it (forged, or deleted already): it is not counted");
        return;
    }
    // One wait per object: several reviews naming it (forged beside the API server's) count once.
    let tally = state.deletions.clone();
    let counted = !deletes.is_empty()
        && tally
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .await_gone(&write.uid, deletes, now);
    if !counted && writers.is_empty() {
        return;
    }
    let (reader, silence, policies) = (
        state.stored.clone(),
        state.silence.clone(),
        state.policies.clone(),
    );
    tokio::spawn(async move {
        let gone = matches!(reader.read_back(&write).await, Some(None));
        if counted {
            tally
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .end_wait(&write.uid, gone);
        }
        if gone && !writers.is_empty() {
            silence.observe_stored(&policies.load(), writers, Timestamp::now());
        }
    });
}

/// Metrics and the one structured log line per review.
fn observe(
    state: &EffectsState,
    request: &RequestFacts<'_>,
    decision: &Decision,
    elapsed: Duration,
) {
    let record = &decision.record;
    let verdict = decision.verdict_word();
    let policy = decision
        .audit_annotations
        .get(driftgate_core::decision::AUDIT_POLICY)
        .map_or("", String::as_str);
    state
        .metrics
        .reviews
        .get_or_create(&ReviewLabels {
            decision: verdict.into(),
            rule: record.rule.as_str().into(),
            policy: match policy {
                "" => "".into(),
                named => named.to_owned().into(),
            },
            operation: request.operation_name().into(),
        })
        .inc();
    state.metrics.review_duration.observe(elapsed.as_secs_f64());
    // Request text is escaped: in the text format a newline in a username would forge a line.
    // Borrowed unless it needs escaping, and built only when the line is logged at all.
    fn text(value: &str) -> std::borrow::Cow<'_, str> {
        echo(value, MAX_NAME_CHARS)
    }
    // A level is part of a log call site, so the line is written out once per level.
    macro_rules! review_line {
        ($level:ident) => {
            tracing::$level!(
                target: LOG_TARGET,
                uid = %text(request.request().uid()),
                operation = %record.operation,
                kind = %text(&record.object.kind),
                subresource = %text(&record.object.subresource),
                namespace = %text(&record.object.namespace),
                name = %text(&record.object.name),
                user = %text(&record.user),
                dry_run = record.dry_run,
                decision = verdict,
                policy,
                rule = record.rule.as_str(),
                latency_us = elapsed.as_micros() as u64,
                "review"
            )
        };
    }
    // Writes no policy guards are most of a cluster's (every write outside kube-system reaches
    // driftgate): at info they would be most of the log, and of its cost.
    if record.rule == driftgate_core::decision::Rule::OutOfScope {
        review_line!(debug);
    } else {
        review_line!(info);
    }
}
