//! When each policy's GitOps controller last wrote in the policy's namespaces, and whether it has
//! been silent for longer than expected: a stopped controller is seen (issue 14, section 2).
//!
//! Pure: the clock is passed in. Only controllers that break-glass windows hold are tracked
//! (`heldByWindows`, the default): those reconcile from Git on an interval, so their silence
//! means something. Kubernetes' own controllers (`heldByWindows: false`) write only when
//! something happens (a namespace deleted, a Pod created) and may rightly be silent for days.
//!
//! A review counts whether it was admitted or refused, dry run or not: Flux dry-runs every object
//! on every interval, and a controller that a window holds off (ControllerHeld), or whose revert
//! the ledger refuses (RevertRefused), is still running.
//!
//! Every replica sees a share of the writes (the API server spreads reviews), and a restart
//! forgets: so each replica also records the writes it sees in a durable record shared by all
//! ([`record`]), and takes in the others' from it. What it knows is the later of both.

pub mod record;

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

use crate::decision::{Decision, PolicyVerdict};
use crate::policy::{GatePolicy, PolicySet};
use crate::text::{MAX_NAME_CHARS, echo};
use crate::timefmt::human_utc;

/// The default of `serve --controller-silence-after`: a few of Flux's usual intervals (5m to
/// 10m), so that one slow reconciliation does not count as a stop.
pub const DEFAULT_SILENCE_AFTER: Duration = Duration::from_secs(30 * 60);

/// Writes closer together than this are one write to the gauge: it counts in seconds, and a
/// silence in minutes.
pub const RESOLUTION: SignedDuration = SignedDuration::from_secs(1);

/// At most this many silent controllers are named in one denial.
const MAX_NAMED: usize = 3;

/// One policy's controller, by name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ControllerKey {
    pub policy: String,
    pub controller: String,
}

/// The last write seen of every tracked controller, and how long a silence may last.
#[derive(Clone, Debug)]
pub struct ControllerSilence {
    silent_after: SignedDuration,
    last_write: BTreeMap<ControllerKey, Timestamp>,
    /// What the durable record is known to hold (read from it, or written to it).
    recorded: BTreeMap<ControllerKey, Timestamp>,
    /// Records of controllers this replica knew and the policies no longer configure: to
    /// delete, so that `driftgate backlog` does not call a removed controller stopped.
    retired: std::collections::BTreeSet<ControllerKey>,
}

/// A controller that has not written for longer than the threshold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Silence {
    pub controller: String,
    pub last_write: Timestamp,
    pub silent_for: SignedDuration,
}

/// What [`ControllerSilence::observe`] changed, for the gauge.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SilenceChanges {
    /// Controllers whose last write is now this time.
    pub written: Vec<(ControllerKey, Timestamp)>,
    /// Controllers no longer configured (policy reloaded), forgotten.
    pub forgotten: Vec<ControllerKey>,
}

impl ControllerSilence {
    pub fn new(silent_after: Duration) -> Self {
        ControllerSilence {
            silent_after: SignedDuration::try_from(silent_after).unwrap_or(SignedDuration::MAX),
            last_write: BTreeMap::new(),
            recorded: BTreeMap::new(),
            retired: Default::default(),
        }
    }

    pub fn silent_after(&self) -> SignedDuration {
        self.silent_after
    }

    /// The last write seen of `controller` in `policy`'s namespaces; None before the first.
    pub fn last_write(&self, policy: &str, controller: &str) -> Option<Timestamp> {
        self.last_write
            .get(&ControllerKey {
                policy: policy.to_owned(),
                controller: controller.to_owned(),
            })
            .copied()
    }

    /// Records the tracked controllers `decision` shows writing at `now`, and forgets those
    /// that `policies` no longer configure, so that the labels stay bounded by the policies.
    pub fn observe(
        &mut self,
        policies: &PolicySet,
        decision: &Decision,
        now: Timestamp,
    ) -> SilenceChanges {
        self.observe_writers(policies, tracked_writers(policies, decision), now)
    }

    /// Records that `writers` wrote at `at` (forward only), and forgets those that `policies`
    /// no longer configure.
    pub fn observe_writers(
        &mut self,
        policies: &PolicySet,
        writers: Vec<ControllerKey>,
        at: Timestamp,
    ) -> SilenceChanges {
        let mut changes = SilenceChanges::default();
        for key in writers {
            let last = self.last_write.entry(key.clone()).or_insert(at);
            *last = (*last).max(at);
            changes.written.push((key, *last));
        }
        self.forget_unconfigured(policies, &mut changes);
        changes
    }

    /// Takes in last writes read from the durable records (every replica's): a tracked
    /// controller's time moves forward to the record's, never back.
    pub fn merge_recorded(
        &mut self,
        policies: &PolicySet,
        records: impl IntoIterator<Item = (ControllerKey, Timestamp)>,
    ) -> SilenceChanges {
        let mut changes = SilenceChanges::default();
        for (key, at) in records {
            if !is_tracked(policies, &key.policy, &key.controller) {
                continue;
            }
            self.mark_recorded(&key, at);
            if self.last_write.get(&key).is_none_or(|last| at > *last) {
                self.last_write.insert(key.clone(), at);
                changes.written.push((key, at));
            }
        }
        self.forget_unconfigured(policies, &mut changes);
        changes
    }

    /// The durable record holds `at` (or later) for `key`.
    pub fn mark_recorded(&mut self, key: &ControllerKey, at: Timestamp) {
        let recorded = self.recorded.entry(key.clone()).or_insert(at);
        *recorded = (*recorded).max(at);
    }

    /// The writes seen here that the durable record does not hold yet: what to record.
    pub fn unrecorded(&self) -> Vec<(ControllerKey, Timestamp)> {
        self.last_write
            .iter()
            .filter(|(key, at)| self.recorded.get(*key).is_none_or(|r| r < *at))
            .map(|(key, at)| (key.clone(), *at))
            .collect()
    }

    /// The records to delete: of controllers this replica knew that `policies` no longer
    /// configure. Only those it knew: a record it never took in may be of a policy not loaded
    /// yet (GatePolicy objects come after the start).
    pub fn retired(&self) -> Vec<ControllerKey> {
        self.retired.iter().cloned().collect()
    }

    /// The record of `key` is deleted (or was already gone).
    pub fn mark_deleted(&mut self, key: &ControllerKey) {
        self.retired.remove(key);
    }

    fn forget_unconfigured(&mut self, policies: &PolicySet, changes: &mut SilenceChanges) {
        let tracked = |key: &ControllerKey| is_tracked(policies, &key.policy, &key.controller);
        self.last_write.retain(|key, _| {
            let configured = tracked(key);
            if !configured {
                changes.forgotten.push(key.clone());
            }
            configured
        });
        let retired: Vec<ControllerKey> = self
            .recorded
            .keys()
            .filter(|key| !tracked(key))
            .cloned()
            .collect();
        for key in retired {
            self.recorded.remove(&key);
            self.retired.insert(key);
        }
        // Configured again (a reload undone): its record is live.
        self.retired.retain(|key| !tracked(key));
    }

    /// Whether [`observe`](Self::observe) would change anything that matters: a tracked
    /// controller's write at least [`RESOLUTION`] after the last one recorded, or a controller
    /// no longer configured. Lets the server skip a copy for most reviews.
    pub fn would_change(&self, policies: &PolicySet, decision: &Decision, now: Timestamp) -> bool {
        let newer = decision.record.verdicts.iter().any(|verdict| {
            tracked_writer(policies, verdict).is_some_and(|key| {
                self.last_write
                    .get(&key)
                    .is_none_or(|last| now.duration_since(*last) >= RESOLUTION)
            })
        });
        newer
            || self
                .last_write
                .keys()
                .any(|key| !is_tracked(policies, &key.policy, &key.controller))
    }

    /// The tracked controllers of `policy` that have written and then been silent for longer
    /// than the threshold at `now`, the longest silence first.
    pub fn silences(&self, policy: &GatePolicy, now: Timestamp) -> Vec<Silence> {
        let mut silences: Vec<Silence> = policy
            .controllers
            .iter()
            .filter(|c| c.held_by_windows)
            .filter_map(|c| {
                let last_write = self.last_write(&policy.name, &c.name)?;
                let silent_for = now.duration_since(last_write);
                (silent_for > self.silent_after).then(|| Silence {
                    controller: c.name.clone(),
                    last_write,
                    silent_for,
                })
            })
            .collect();
        silences.sort_by_key(|s| std::cmp::Reverse(s.silent_for));
        silences
    }

    /// The sentence a refused person reads when `policy`'s GitOps controller looks stopped, or
    /// None: it has not been seen writing since driftgate started, or it wrote recently.
    pub fn sentence(&self, policy: &GatePolicy, now: Timestamp) -> Option<String> {
        let silences = self.silences(policy, now);
        let sentences: Vec<String> = silences
            .iter()
            .take(MAX_NAMED)
            .map(|s| {
                format!(
                    "{}, and then a change in Git does not reach the cluster until it is back.",
                    s.sentence_start(&policy.name)
                )
            })
            .collect();
        (!sentences.is_empty()).then(|| sentences.join(" "))
    }
}

impl crate::decision::StoppedControllers for ControllerSilence {
    fn sentence(&self, policy: &GatePolicy, now: Timestamp) -> Option<String> {
        ControllerSilence::sentence(self, policy, now)
    }
}

impl Silence {
    /// "flux has not written in policy "production"'s namespaces for 3h 12m (since
    /// 2026-12-01 03:00 UTC); it may be down": what a refusal and `driftgate backlog` say.
    pub fn sentence_start(&self, policy: &str) -> String {
        format!(
            "{} has not written in policy \"{}\"'s namespaces for {} (since {}); it may be down",
            echo(&self.controller, MAX_NAME_CHARS),
            echo(policy, MAX_NAME_CHARS),
            human_duration(self.silent_for),
            human_utc(
                self.last_write
                    .round(jiff::Unit::Second)
                    .unwrap_or(self.last_write)
            ),
        )
    }
}

/// The tracked controller whose write `verdict` judged, if any. `matched` names a controller
/// for these rules only (a delegation's name otherwise).
/// The tracked controllers `decision` shows writing.
pub fn tracked_writers(policies: &PolicySet, decision: &Decision) -> Vec<ControllerKey> {
    decision
        .record
        .verdicts
        .iter()
        .filter_map(|verdict| tracked_writer(policies, verdict))
        .collect()
}

fn tracked_writer(policies: &PolicySet, verdict: &PolicyVerdict) -> Option<ControllerKey> {
    let by_controller = verdict.rule.properties().judges_a_controllers_write;
    let controller = verdict.matched.as_deref().filter(|_| by_controller)?;
    let policy = verdict.policy_in(policies)?;
    tracks(policy, controller).then(|| ControllerKey {
        policy: verdict.policy.clone(),
        controller: controller.to_owned(),
    })
}

/// Whether a controller of a policy named `policy` is tracked: a key's policy is only a name.
fn is_tracked(policies: &PolicySet, policy: &str, controller: &str) -> bool {
    policies
        .policies()
        .iter()
        .filter(|p| p.name == policy)
        .any(|p| tracks(p, controller))
}

fn tracks(policy: &GatePolicy, controller: &str) -> bool {
    policy
        .controllers
        .iter()
        .any(|c| c.name == controller && c.held_by_windows)
}

/// A silence for people, to the minute once it is an hour long: `45s`, `12m`, `3h 12m`,
/// `2d 5h`.
pub fn human_duration(duration: SignedDuration) -> String {
    let seconds = duration.as_secs().max(0);
    let (days, hours, minutes) = (seconds / 86_400, seconds / 3_600 % 24, seconds / 60 % 60);
    match seconds {
        s if s >= 86_400 => format!("{days}d {hours}h"),
        s if s >= 3_600 => format!("{}h {minutes}m", seconds / 3_600),
        s if s >= 60 => format!("{}m", seconds / 60),
        s => format!("{s}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decision::{DecisionRecord, ObjectRef, PolicyVerdict, Rule};
    use crate::policy::PolicyMode;

    const POLICY: &str = r#"
apiVersion: driftgate.dev/v1alpha1
kind: GatePolicy
metadata: {name: production}
spec:
  namespaces: {include: ["prod-*"]}
  controllers:
    - name: flux
      usernames: ["system:serviceaccount:flux-system:kustomize-controller"]
    - name: kubernetes
      usernames: ["system:kube-controller-manager"]
      heldByWindows: false
  delegations:
    - name: hpa
      usernames: ["system:serviceaccount:kube-system:horizontal-pod-autoscaler"]
      fields: ["spec.replicas"]
  breakGlass: {maxDuration: 4h, openers: {groups: [sre-oncall]}}
"#;

    fn policies() -> PolicySet {
        PolicySet::from_yaml("inline", POLICY).unwrap()
    }

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    fn verdict(policy: &str, rule: Rule, matched: Option<&str>) -> PolicyVerdict {
        PolicyVerdict {
            matched: matched.map(str::to_owned),
            ..PolicyVerdict::enforced(policy.to_owned(), rule, None)
        }
    }

    fn decision(verdicts: Vec<PolicyVerdict>) -> Decision {
        Decision {
            allowed: true,
            message: String::new(),
            warnings: Vec::new(),
            audit_annotations: Default::default(),
            record: DecisionRecord {
                uid: "u".into(),
                operation: "UPDATE".into(),
                user: "someone".into(),
                groups: Vec::new(),
                field_manager: None,
                dry_run: true,
                object: ObjectRef {
                    group: "apps".into(),
                    version: "v1".into(),
                    kind: "Deployment".into(),
                    resource: "deployments".into(),
                    subresource: String::new(),
                    namespace: "prod-payments".into(),
                    name: "api".into(),
                },
                rule: verdicts.first().map_or(Rule::OutOfScope, |v| v.rule),
                verdicts,
                changed_fields: Vec::new(),
            },
        }
    }

    fn flux_wrote(rule: Rule) -> Decision {
        decision(vec![verdict("production", rule, Some("flux"))])
    }

    fn silence_after_30m() -> ControllerSilence {
        ControllerSilence::new(Duration::from_secs(30 * 60))
    }

    #[test]
    fn a_controller_write_is_recorded_with_its_time() {
        let mut silence = silence_after_30m();
        let changes = silence.observe(
            &policies(),
            &flux_wrote(Rule::Controller),
            at("2026-12-01T03:00:00Z"),
        );
        let key = ControllerKey {
            policy: "production".into(),
            controller: "flux".into(),
        };
        assert_eq!(changes.written, vec![(key, at("2026-12-01T03:00:00Z"))]);
        assert_eq!(
            silence.last_write("production", "flux"),
            Some(at("2026-12-01T03:00:00Z"))
        );
    }

    #[test]
    fn held_and_refused_reverts_count_as_writes_a_delegation_does_not() {
        let mut silence = silence_after_30m();
        let now = at("2026-12-01T03:00:00Z");
        // The controller closing a window (removing the label Git does not declare) is its write.
        for rule in [
            Rule::ControllerHeld,
            Rule::RevertRefused,
            Rule::BreakGlassClosed,
        ] {
            silence.last_write.clear();
            silence.observe(&policies(), &flux_wrote(rule), now);
            assert_eq!(
                silence.last_write("production", "flux"),
                Some(now),
                "{rule}"
            );
        }
        silence.last_write.clear();
        let hpa = decision(vec![verdict("production", Rule::Delegation, Some("hpa"))]);
        assert!(silence.observe(&policies(), &hpa, now).written.is_empty());
        let person = decision(vec![verdict("production", Rule::NotPermitted, None)]);
        assert!(
            silence
                .observe(&policies(), &person, now)
                .written
                .is_empty()
        );
    }

    #[test]
    fn only_configured_controllers_held_by_windows_are_tracked() {
        let mut silence = silence_after_30m();
        let now = at("2026-12-01T03:00:00Z");
        let others = decision(vec![
            verdict("production", Rule::Controller, Some("kubernetes")),
            verdict("production", Rule::Controller, Some("argocd")),
            verdict("elsewhere", Rule::Controller, Some("flux")),
        ]);
        assert!(
            silence
                .observe(&policies(), &others, now)
                .written
                .is_empty()
        );
        assert!(silence.last_write.is_empty());
    }

    #[test]
    fn a_controller_no_longer_configured_is_forgotten() {
        let mut silence = silence_after_30m();
        let now = at("2026-12-01T03:00:00Z");
        silence.observe(&policies(), &flux_wrote(Rule::Controller), now);
        let renamed =
            PolicySet::from_yaml("inline", &POLICY.replace("name: flux", "name: argo")).unwrap();
        let changes = silence.observe(&renamed, &decision(Vec::new()), now);
        assert_eq!(changes.forgotten.len(), 1);
        assert_eq!(silence.last_write("production", "flux"), None);
    }

    #[test]
    fn only_a_later_write_or_a_forgotten_controller_is_a_change() {
        let policies = policies();
        let mut silence = silence_after_30m();
        let flux = flux_wrote(Rule::Controller);
        let now = at("2026-12-01T03:00:00Z");
        assert!(silence.would_change(&policies, &flux, now));
        silence.observe(&policies, &flux, now);
        assert!(!silence.would_change(&policies, &flux, at("2026-12-01T03:00:00.5Z")));
        assert!(silence.would_change(&policies, &flux, at("2026-12-01T03:00:01Z")));
        let person = decision(vec![verdict("production", Rule::NotPermitted, None)]);
        assert!(!silence.would_change(&policies, &person, at("2026-12-01T04:00:00Z")));
        let renamed =
            PolicySet::from_yaml("inline", &POLICY.replace("name: flux", "name: argo")).unwrap();
        assert!(silence.would_change(&renamed, &person, now));
    }

    #[test]
    fn an_older_write_seen_late_does_not_move_the_time_back() {
        let mut silence = silence_after_30m();
        silence.observe(
            &policies(),
            &flux_wrote(Rule::Controller),
            at("2026-12-01T03:00:10Z"),
        );
        silence.observe(
            &policies(),
            &flux_wrote(Rule::Controller),
            at("2026-12-01T03:00:00Z"),
        );
        assert_eq!(
            silence.last_write("production", "flux"),
            Some(at("2026-12-01T03:00:10Z"))
        );
    }

    #[test]
    fn silent_only_after_a_write_and_past_the_threshold() {
        let policies = policies();
        let policy = &policies.policies()[0];
        let mut silence = silence_after_30m();
        assert_eq!(silence.sentence(policy, at("2026-12-01T06:00:00Z")), None);
        silence.observe(
            &policies,
            &flux_wrote(Rule::Controller),
            at("2026-12-01T03:00:00Z"),
        );
        assert_eq!(silence.sentence(policy, at("2026-12-01T03:30:00Z")), None);
        let sentence = silence
            .sentence(policy, at("2026-12-01T06:12:30Z"))
            .unwrap();
        assert_eq!(
            sentence,
            "flux has not written in policy \"production\"'s namespaces for 3h 12m (since 2026-12-01 03:00 UTC); it may be down, and then a change in Git does not reach the cluster until it is back."
        );
    }

    #[test]
    fn an_audit_policy_records_its_controller_too() {
        let policies = policies();
        let mut silence = silence_after_30m();
        let mut audit = verdict("production", Rule::Controller, Some("flux"));
        audit.mode = PolicyMode::Audit;
        silence.observe(
            &policies,
            &decision(vec![audit]),
            at("2026-12-01T03:00:00Z"),
        );
        assert!(silence.last_write("production", "flux").is_some());
    }

    #[test]
    fn refusals_that_point_to_git() {
        let points_to_git = |rule: Rule| rule.properties().refusal_points_to_git;
        assert!(points_to_git(Rule::NotPermitted));
        assert!(points_to_git(Rule::WindowExpired));
        assert!(points_to_git(Rule::FieldManagerSpoofing));
        assert!(!points_to_git(Rule::ControllerHeld));
        assert!(!points_to_git(Rule::BreakGlassRefused));
        assert!(!points_to_git(Rule::Unreadable));
    }

    fn flux_key() -> ControllerKey {
        ControllerKey {
            policy: "production".into(),
            controller: "flux".into(),
        }
    }

    #[test]
    fn what_is_seen_here_and_not_yet_recorded_is_to_record() {
        let policies = policies();
        let mut silence = silence_after_30m();
        silence.observe(
            &policies,
            &flux_wrote(Rule::Controller),
            at("2026-12-01T03:00:00Z"),
        );
        assert_eq!(
            silence.unrecorded(),
            vec![(flux_key(), at("2026-12-01T03:00:00Z"))]
        );
        silence.mark_recorded(&flux_key(), at("2026-12-01T03:00:00Z"));
        assert_eq!(silence.unrecorded(), Vec::new());
        silence.observe(
            &policies,
            &flux_wrote(Rule::Controller),
            at("2026-12-01T03:00:20Z"),
        );
        assert_eq!(
            silence.unrecorded(),
            vec![(flux_key(), at("2026-12-01T03:00:20Z"))]
        );
    }

    #[test]
    fn another_replicas_later_write_is_taken_in_an_earlier_one_is_not() {
        let policies = policies();
        let mut silence = silence_after_30m();
        silence.observe(
            &policies,
            &flux_wrote(Rule::Controller),
            at("2026-12-01T03:00:10Z"),
        );
        let earlier = silence.merge_recorded(&policies, [(flux_key(), at("2026-12-01T03:00:00Z"))]);
        assert!(earlier.written.is_empty());
        assert_eq!(
            silence.last_write("production", "flux"),
            Some(at("2026-12-01T03:00:10Z"))
        );
        // The record is behind: this replica's write is still to record.
        assert_eq!(silence.unrecorded().len(), 1);
        let later = silence.merge_recorded(&policies, [(flux_key(), at("2026-12-01T03:05:00Z"))]);
        assert_eq!(
            later.written,
            vec![(flux_key(), at("2026-12-01T03:05:00Z"))]
        );
        assert_eq!(
            silence.last_write("production", "flux"),
            Some(at("2026-12-01T03:05:00Z"))
        );
        assert_eq!(silence.unrecorded(), Vec::new(), "the record holds it");
    }

    #[test]
    fn a_record_read_at_start_is_the_last_write_and_untracked_records_are_ignored() {
        let policies = policies();
        let mut silence = silence_after_30m();
        let kubernetes = ControllerKey {
            policy: "production".into(),
            controller: "kubernetes".into(),
        };
        let changes = silence.merge_recorded(
            &policies,
            [
                (flux_key(), at("2026-12-01T03:00:00Z")),
                (kubernetes, at("2026-12-01T03:00:00Z")),
            ],
        );
        assert_eq!(
            changes.written,
            vec![(flux_key(), at("2026-12-01T03:00:00Z"))]
        );
        assert_eq!(silence.last_write("production", "kubernetes"), None);
        let policy = &policies.policies()[0];
        assert!(
            silence
                .sentence(policy, at("2026-12-01T04:00:00Z"))
                .is_some()
        );
    }

    #[test]
    fn the_record_of_a_controller_no_longer_configured_is_to_delete_unless_it_comes_back() {
        let policies = policies();
        let renamed =
            PolicySet::from_yaml("inline", &POLICY.replace("name: flux", "name: argo")).unwrap();
        let mut silence = silence_after_30m();
        silence.merge_recorded(&policies, [(flux_key(), at("2026-12-01T03:00:00Z"))]);
        assert_eq!(silence.retired(), Vec::new());
        silence.merge_recorded(&renamed, []);
        assert_eq!(silence.retired(), vec![flux_key()]);
        silence.merge_recorded(&policies, []);
        assert_eq!(silence.retired(), Vec::new(), "configured again: kept");
        silence.merge_recorded(&policies, [(flux_key(), at("2026-12-01T03:00:00Z"))]);
        silence.observe(&renamed, &decision(Vec::new()), at("2026-12-01T03:00:00Z"));
        assert_eq!(silence.retired(), vec![flux_key()]);
        silence.mark_deleted(&flux_key());
        assert_eq!(silence.retired(), Vec::new());
        // A record never taken in (its policy not loaded yet) is never to delete.
        let mut fresh = silence_after_30m();
        fresh.merge_recorded(&renamed, [(flux_key(), at("2026-12-01T03:00:00Z"))]);
        assert_eq!(fresh.retired(), Vec::new());
    }

    #[test]
    fn durations_for_people() {
        let d = SignedDuration::from_secs;
        assert_eq!(human_duration(d(45)), "45s");
        assert_eq!(human_duration(d(12 * 60 + 59)), "12m");
        assert_eq!(human_duration(d(3 * 3600 + 12 * 60 + 30)), "3h 12m");
        assert_eq!(human_duration(d(2 * 86_400 + 5 * 3600 + 7)), "2d 5h");
        assert_eq!(human_duration(d(-5)), "0s");
    }
}
