//! The PolicyReport (`wgpolicyk8s.io/v1alpha2`) driftgate publishes in each guarded namespace,
//! planned purely from the backport records, the denials kept in memory and the clock: what
//! policy-reporter and its UI show next to Kyverno's reports. The sink that writes it is
//! `server::reports`.
//!
//! Results, one per thing an on-call should see:
//! - an open break-glass window: `warn` (rule `BreakGlassWindowOpen`);
//! - a record awaiting backport to Git: `warn` (rule `BackportPending`);
//! - a record whose emergency change the controller undid: `fail` (rule `BackportReverted`);
//! - a recent denial: `fail` (the rule that denied, e.g. `NotPermitted`).
//!
//! Warnings are not scored and failures are, as the CRD's summary counts them.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Namespace, ObjectReference};
use kube_core::ResourceExt;
use serde::{Deserialize, Serialize};

use crate::decision::{AUDIT_POLICY, Decision};
use crate::policy::{NamespaceLabels, PolicySet};
use crate::records::phase::{awaiting_since, is_suspension, phase_of, phase_since};
use crate::records::record::{BackportRequirement, Phase};
use crate::text::{MAX_NAME_CHARS, echo};
use crate::timefmt::human_utc;

pub const GROUP: &str = crate::policy::POLICY_REPORT_GROUP;
pub const VERSION: &str = "v1alpha2";
pub const KIND: &str = "PolicyReport";
pub const PLURAL: &str = "policyreports";
/// Every namespace's report has this name: one per namespace, rewritten in place.
pub const REPORT_NAME: &str = "driftgate";
/// The `source` of every result: the engine, as policy-reporter filters by it.
pub const SOURCE: &str = "driftgate";

pub const RULE_WINDOW_OPEN: &str = "BreakGlassWindowOpen";
pub const RULE_BACKPORT_PENDING: &str = "BackportPending";
pub const RULE_BACKPORT_REVERTED: &str = "BackportReverted";

/// A refusal's message is the person's explanation, often long; the report keeps its start.
const MAX_DENIAL_MESSAGE_CHARS: usize = 400;

/// The body of a PolicyReport: everything but apiVersion, kind and metadata.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReportBody {
    pub summary: Summary,
    pub results: Vec<ReportResult>,
}

/// How many results of each outcome the report holds.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Summary {
    pub pass: u32,
    pub fail: u32,
    pub warn: u32,
    pub error: u32,
    pub skip: u32,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Pass,
    Fail,
    Warn,
    Error,
    Skip,
}

/// One result, as the CRD's `results[]` items spell it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReportResult {
    /// The GatePolicy.
    pub policy: String,
    pub rule: String,
    pub result: Outcome,
    pub message: String,
    pub source: String,
    pub scored: bool,
    pub timestamp: ResultTime,
    pub resources: Vec<ObjectReference>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub properties: BTreeMap<String, String>,
}

/// A protobuf Timestamp, as the CRD's `timestamp` is.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResultTime {
    pub seconds: i64,
    pub nanos: i32,
}

impl From<Timestamp> for ResultTime {
    fn from(at: Timestamp) -> Self {
        ResultTime {
            seconds: at.as_second(),
            nanos: at.subsec_nanosecond(),
        }
    }
}

/// One refused write, as the report keeps it.
#[derive(Clone, Debug, PartialEq)]
pub struct Denial {
    pub time: Timestamp,
    pub policy: String,
    pub rule: String,
    pub user: String,
    pub operation: String,
    pub object: ObjectReference,
    pub dry_run: bool,
    pub message: String,
}

/// The denial `decision` is, when it refused a write in a namespace.
pub fn denial_of(decision: &Decision, now: Timestamp) -> Option<Denial> {
    let record = &decision.record;
    if decision.allowed || record.object.namespace.is_empty() {
        return None;
    }
    let object = &record.object;
    let api_version = if object.group.is_empty() {
        object.version.clone()
    } else {
        format!("{}/{}", object.group, object.version)
    };
    Some(Denial {
        time: now,
        policy: decision
            .audit_annotations
            .get(AUDIT_POLICY)
            .cloned()
            .unwrap_or_default(),
        rule: record.rule.as_str().to_owned(),
        user: echo(&record.user, MAX_NAME_CHARS).into_owned(),
        operation: record.operation.clone(),
        object: ObjectReference {
            api_version: Some(api_version),
            kind: Some(object.kind.clone()),
            name: Some(object.name.clone()).filter(|n| !n.is_empty()),
            namespace: Some(object.namespace.clone()),
            ..ObjectReference::default()
        },
        dry_run: record.dry_run,
        message: echo(&decision.message, MAX_DENIAL_MESSAGE_CHARS).into_owned(),
    })
}

/// How many denials a namespace's report shows, and for how long.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DenialLimits {
    /// The most recent this many per namespace.
    pub per_namespace: usize,
    /// Denials older than this leave the report.
    pub within: Duration,
}

pub const DEFAULT_DENIAL_LIMITS: DenialLimits = DenialLimits {
    per_namespace: 20,
    within: Duration::from_secs(3600),
};

/// The recent denials, per namespace, bounded in number and age: memory, never API writes.
#[derive(Debug)]
pub struct RecentDenials {
    limits: DenialLimits,
    by_namespace: BTreeMap<String, VecDeque<Denial>>,
}

impl RecentDenials {
    pub fn new(limits: DenialLimits) -> Self {
        RecentDenials {
            limits,
            by_namespace: BTreeMap::new(),
        }
    }

    /// Keeps `denial`, dropping the namespace's oldest beyond the limit.
    pub fn note(&mut self, denial: Denial) {
        let namespace = denial.object.namespace.clone().unwrap_or_default();
        let kept = self.by_namespace.entry(namespace).or_default();
        kept.push_back(denial);
        while kept.len() > self.limits.per_namespace {
            kept.pop_front();
        }
    }

    /// Forgets denials older than the limit, and namespaces left without any.
    pub fn forget_old(&mut self, now: Timestamp) {
        let oldest = oldest_kept(now, self.limits.within);
        for kept in self.by_namespace.values_mut() {
            kept.retain(|d| d.time >= oldest);
        }
        self.by_namespace.retain(|_, kept| !kept.is_empty());
    }

    /// The namespace's denials within the limit, oldest first.
    pub fn in_namespace(&self, namespace: &str, now: Timestamp) -> Vec<&Denial> {
        let oldest = oldest_kept(now, self.limits.within);
        self.by_namespace
            .get(namespace)
            .map(|kept| kept.iter().filter(|d| d.time >= oldest).collect())
            .unwrap_or_default()
    }
}

fn oldest_kept(now: Timestamp, within: Duration) -> Timestamp {
    jiff::SignedDuration::try_from(within)
        .ok()
        .and_then(|within| now.checked_sub(within).ok())
        .unwrap_or(Timestamp::MIN)
}

/// The namespaces some policy guards, by the labels cached; those being deleted are left out
/// (nothing can be created in them).
pub fn guarded_namespaces(policies: &PolicySet, namespaces: &[Arc<Namespace>]) -> Vec<String> {
    static NO_LABELS: BTreeMap<String, String> = BTreeMap::new();
    let mut guarded: Vec<String> = namespaces
        .iter()
        .filter(|ns| ns.metadata.deletion_timestamp.is_none())
        .filter(|ns| {
            let name = ns.name_any();
            let labels = NamespaceLabels::Known(ns.metadata.labels.as_ref().unwrap_or(&NO_LABELS));
            policies
                .policies()
                .iter()
                .any(|p| p.guards_namespace(&name, labels))
        })
        .map(|ns| ns.name_any())
        .collect();
    guarded.sort();
    guarded
}

/// Every guarded namespace's report: its records' open windows, pending and reverted
/// backports, and its recent denials.
pub fn plan_reports(
    namespaces: &[String],
    records: &[Arc<BackportRequirement>],
    denials: &RecentDenials,
    now: Timestamp,
) -> BTreeMap<String, ReportBody> {
    namespaces
        .iter()
        .map(|namespace| {
            let mut results: Vec<ReportResult> = records
                .iter()
                .filter(|r| r.metadata.namespace.as_deref() == Some(namespace))
                .filter_map(|r| record_result(r, now))
                .chain(
                    denials
                        .in_namespace(namespace, now)
                        .into_iter()
                        .map(denial_result),
                )
                .collect();
            // The store's order is arbitrary; the report's must not be, or it would be
            // rewritten with nothing changed.
            results.sort_by(|a, b| order_key(a).cmp(&order_key(b)));
            let summary = summarise(&results);
            (namespace.clone(), ReportBody { summary, results })
        })
        .collect()
}

/// When, which rule, on what, and what it says: a total order over a report's results.
fn order_key(result: &ReportResult) -> (ResultTime, &str, Option<&str>, &str) {
    let object = result.resources.first().and_then(|r| r.name.as_deref());
    (result.timestamp, &result.rule, object, &result.message)
}

fn summarise(results: &[ReportResult]) -> Summary {
    let mut summary = Summary::default();
    for result in results {
        let count = match result.result {
            Outcome::Pass => &mut summary.pass,
            Outcome::Fail => &mut summary.fail,
            Outcome::Warn => &mut summary.warn,
            Outcome::Error => &mut summary.error,
            Outcome::Skip => &mut summary.skip,
        };
        *count += 1;
    }
    summary
}

/// What a record shows: its open window, its pending backport, or its reverted change;
/// nothing once settled, and nothing for a suspension (driftgate_suspensions counts those).
fn record_result(record: &BackportRequirement, now: Timestamp) -> Option<ReportResult> {
    if is_suspension(record) {
        return None;
    }
    let window = &record.spec.window;
    let name = record.name_any();
    let namespace = record.metadata.namespace.clone().unwrap_or_default();
    let changes = record.spec.changes.len();
    let who = format!(
        "opened by {} (reason \"{}\")",
        window.opener_words(),
        window.reason_words()
    );
    let (rule, outcome, since, message) = match phase_of(record) {
        Phase::Open if window.expires_at.0 > now => (
            RULE_WINDOW_OPEN,
            Outcome::Warn,
            window
                .opened_at
                .as_ref()
                .map(|t| t.0)
                .or_else(|| phase_since(record))?,
            format!(
                "Break-glass window {who} is open until {}; {changes} change(s) recorded so far must be backported to Git. Record {name}.",
                human_utc(window.expires_at.0)
            ),
        ),
        Phase::Open | Phase::AwaitingBackport => {
            let since = awaiting_since(record, now)?;
            (
                RULE_BACKPORT_PENDING,
                Outcome::Warn,
                since,
                format!(
                    "{changes} change(s) made under the break-glass window {who} await backport to Git since {}: driftgate backport {name} -n {namespace} --repo DIR writes them into the GitOps repository.",
                    human_utc(since)
                ),
            )
        }
        Phase::Reverted => {
            let fields = record
                .status
                .as_ref()
                .map(|s| s.reverted_fields.join(", "))
                .unwrap_or_default();
            (
                RULE_BACKPORT_REVERTED,
                Outcome::Fail,
                phase_since(record)?,
                format!(
                    "The controller undid the emergency change made under the window {who} ({fields}): Git never had it. Restore it through Git, then driftgate backlog resolve {name} -n {namespace} --note …"
                ),
            )
        }
        _ => return None,
    };
    let properties = BTreeMap::from([
        ("record".to_owned(), name),
        ("phase".to_owned(), phase_of(record).word().to_owned()),
        ("opener".to_owned(), window.opener_words().into_owned()),
        ("expiresAt".to_owned(), human_utc(window.expires_at.0)),
    ]);
    Some(ReportResult {
        policy: record.spec.policy.clone(),
        rule: rule.to_owned(),
        result: outcome,
        message,
        source: SOURCE.to_owned(),
        scored: outcome == Outcome::Fail,
        timestamp: since.into(),
        resources: vec![crate::records::record::regarding(record)],
        properties,
    })
}

fn denial_result(denial: &Denial) -> ReportResult {
    let dry_run = if denial.dry_run { " (dry run)" } else { "" };
    ReportResult {
        policy: denial.policy.clone(),
        rule: denial.rule.clone(),
        result: Outcome::Fail,
        message: format!(
            "{} by {}{dry_run} denied: {}",
            denial.operation, denial.user, denial.message
        ),
        source: SOURCE.to_owned(),
        scored: true,
        timestamp: denial.time.into(),
        resources: vec![denial.object.clone()],
        properties: BTreeMap::from([
            ("user".to_owned(), denial.user.clone()),
            ("operation".to_owned(), denial.operation.clone()),
        ]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::phase::tests::record_in;
    use crate::records::record::BackportStatus;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    fn named(name: &str, phase: Phase, since: &str) -> Arc<BackportRequirement> {
        let mut record = record_in(phase, since);
        record.metadata.name = Some(name.into());
        Arc::new(record)
    }

    fn denial(namespace: &str, minute: u32) -> Denial {
        Denial {
            time: at(&format!("2026-11-30T08:{minute:02}:00Z")),
            policy: "prod".into(),
            rule: "NotPermitted".into(),
            user: "bob".into(),
            operation: "UPDATE".into(),
            object: ObjectReference {
                api_version: Some("apps/v1".into()),
                kind: Some("Deployment".into()),
                name: Some("api".into()),
                namespace: Some(namespace.into()),
                ..ObjectReference::default()
            },
            dry_run: false,
            message: format!("refused #{minute}"),
        }
    }

    #[test]
    fn a_namespace_report_shows_open_windows_pending_and_reverted_backports_and_denials() {
        // record_in() windows end at 2026-11-30T09:00Z.
        let mut reverted = record_in(Phase::Reverted, "2026-11-30T07:00:00Z");
        reverted.metadata.name = Some("reverted".into());
        reverted.status = Some(BackportStatus {
            reverted_fields: vec!["spec.replicas".into()],
            ..reverted.status.unwrap()
        });
        let records = [
            named("open", Phase::Open, "2026-11-30T08:00:00Z"),
            named("awaiting", Phase::AwaitingBackport, "2026-11-29T09:00:00Z"),
            Arc::new(reverted),
            named("backported", Phase::Backported, "2026-11-29T09:00:00Z"),
        ];
        let mut denials = RecentDenials::new(DEFAULT_DENIAL_LIMITS);
        denials.note(denial("prod", 30));
        denials.note(denial("elsewhere", 31));
        let now = at("2026-11-30T08:45:00Z");
        let reports = plan_reports(&["prod".into()], &records, &denials, now);
        let report = &reports["prod"];
        assert_eq!(
            report.summary,
            Summary {
                fail: 2,
                warn: 2,
                ..Summary::default()
            }
        );
        let rules: Vec<(&str, Outcome, bool)> = report
            .results
            .iter()
            .map(|r| (r.rule.as_str(), r.result, r.scored))
            .collect();
        assert_eq!(
            rules,
            [
                (RULE_BACKPORT_PENDING, Outcome::Warn, false),
                (RULE_BACKPORT_REVERTED, Outcome::Fail, true),
                (RULE_WINDOW_OPEN, Outcome::Warn, false),
                ("NotPermitted", Outcome::Fail, true),
            ]
        );
        let pending = &report.results[0];
        assert_eq!(
            pending.message,
            "0 change(s) made under the break-glass window opened by alice (reason \"INC-1\") await backport to Git since 2026-11-29 09:00 UTC: driftgate backport awaiting -n prod --repo DIR writes them into the GitOps repository."
        );
        assert_eq!(pending.properties["record"], "awaiting");
        assert_eq!(pending.source, SOURCE);
        assert_eq!(pending.policy, "prod");
        assert_eq!(pending.resources[0].kind.as_deref(), Some("Deployment"));
        assert_eq!(pending.resources[0].namespace.as_deref(), Some("prod"));
        assert!(report.results[1].message.contains("(spec.replicas)"));
        assert!(
            report.results[2]
                .message
                .contains("is open until 2026-11-30 09:00 UTC")
        );
        assert_eq!(
            report.results[3].message,
            "UPDATE by bob denied: refused #30"
        );
    }

    #[test]
    fn a_window_that_ended_unnoticed_is_pending_since_its_end() {
        let records = [named("open", Phase::Open, "2026-11-30T08:00:00Z")];
        let denials = RecentDenials::new(DEFAULT_DENIAL_LIMITS);
        let reports = plan_reports(
            &["prod".into()],
            &records,
            &denials,
            at("2026-11-30T09:10:00Z"),
        );
        let result = &reports["prod"].results[0];
        assert_eq!(result.rule, RULE_BACKPORT_PENDING);
        assert_eq!(result.timestamp, at("2026-11-30T09:00:00Z").into());
    }

    #[test]
    fn every_guarded_namespace_gets_a_report_even_an_empty_one() {
        let denials = RecentDenials::new(DEFAULT_DENIAL_LIMITS);
        let reports = plan_reports(&["quiet".into()], &[], &denials, at("2026-11-30T09:10:00Z"));
        assert_eq!(reports["quiet"], ReportBody::default());
    }

    #[test]
    fn denials_are_bounded_per_namespace_and_by_age() {
        let limits = DenialLimits {
            per_namespace: 2,
            within: Duration::from_secs(600),
        };
        let mut denials = RecentDenials::new(limits);
        for minute in [1, 2, 3] {
            denials.note(denial("prod", minute));
        }
        let now = at("2026-11-30T08:10:00Z");
        let kept: Vec<&str> = denials
            .in_namespace("prod", now)
            .iter()
            .map(|d| d.message.as_str())
            .collect();
        assert_eq!(kept, ["refused #2", "refused #3"]);
        // Ten minutes after #2, it is gone; #3 is within the window.
        let later = at("2026-11-30T08:12:30Z");
        assert_eq!(denials.in_namespace("prod", later).len(), 1);
        denials.forget_old(at("2026-11-30T09:00:00Z"));
        assert!(denials.by_namespace.is_empty());
    }

    #[test]
    fn the_body_serialises_as_the_crd_spells_it() {
        let denials = {
            let mut d = RecentDenials::new(DEFAULT_DENIAL_LIMITS);
            d.note(denial("prod", 30));
            d
        };
        let reports = plan_reports(&["prod".into()], &[], &denials, at("2026-11-30T08:45:00Z"));
        let json = serde_json::to_value(&reports["prod"]).unwrap();
        assert_eq!(
            json["summary"],
            serde_json::json!({"pass": 0, "fail": 1, "warn": 0, "error": 0, "skip": 0})
        );
        let result = &json["results"][0];
        assert_eq!(result["result"], "fail");
        assert_eq!(result["scored"], true);
        assert_eq!(
            result["timestamp"],
            serde_json::json!({"seconds": 1_796_027_400, "nanos": 0})
        );
        assert_eq!(result["resources"][0]["apiVersion"], "apps/v1");
        let back: ReportBody = serde_json::from_value(json).unwrap();
        assert_eq!(back, reports["prod"]);
    }

    #[test]
    fn a_refusal_in_a_namespace_is_a_denial_and_an_admission_is_not() {
        use crate::decision::Rule;
        use crate::ledger::plan::tests::{decision, update};
        let request = update("bob", "Deployment", "dep-uid", 5);
        let mut refused = decision(&request, Rule::NotPermitted, None);
        let now = at("2026-11-30T08:30:00Z");
        assert_eq!(denial_of(&refused, now), None, "admitted");
        refused.refuse("production", Rule::NotPermitted, "bob may not".into());
        let denial = denial_of(&refused, now).expect("a denial");
        assert_eq!(
            (
                denial.policy.as_str(),
                denial.rule.as_str(),
                denial.user.as_str(),
                denial.operation.as_str(),
                denial.message.as_str()
            ),
            ("production", "NotPermitted", "bob", "UPDATE", "bob may not")
        );
        assert_eq!(denial.object.api_version.as_deref(), Some("apps/v1"));
        assert_eq!(denial.object.namespace.as_deref(), Some("prod-payments"));
        assert_eq!(denial.time, now);
        refused.record.object.namespace.clear();
        assert_eq!(
            denial_of(&refused, now),
            None,
            "cluster-scoped: no namespace report"
        );
    }

    #[test]
    fn no_policy_guards_policy_reports_so_driftgate_never_refuses_its_own() {
        let everything = PolicySet::from_yaml(
            "inline",
            "apiVersion: driftgate.dev/v1alpha1\nkind: GatePolicy\nmetadata: {name: p}\nspec:\n  namespaces: {include: [\"*\"]}\n  resources: {include: [\"*\"]}\n",
        )
        .unwrap();
        let policy = &everything.policies()[0];
        assert!(policy.guards_resource("apps", "Deployment", "deployments"));
        assert!(!policy.guards_resource(GROUP, KIND, PLURAL));
        assert!(!policy.guards_unresolved_resource(GROUP, PLURAL));
    }

    #[test]
    fn guarded_namespaces_are_those_a_policy_guards_and_not_being_deleted() {
        let policies = crate::ledger::plan::tests::policies();
        let namespace = |name: &str, deleting: bool| {
            let mut ns = Namespace::default();
            ns.metadata.name = Some(name.into());
            if deleting {
                ns.metadata.deletion_timestamp =
                    Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at(
                        "2026-11-30T08:00:00Z",
                    )));
            }
            Arc::new(ns)
        };
        let namespaces = [
            namespace("team-a", false),
            namespace("prod-payments", false),
            namespace("prod-gone", true),
        ];
        assert_eq!(
            guarded_namespaces(&policies, &namespaces),
            ["prod-payments"]
        );
    }
}
