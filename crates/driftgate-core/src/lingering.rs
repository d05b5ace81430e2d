//! Break-glass labels that outlived their window: after a window ends (and its record settles)
//! its label stays on the object until somebody removes it, and an expired label is easy to
//! miss. driftgate cannot list every guarded kind (its RBAC does not reach them), but it sees
//! the objects it reviews: Flux dry-runs every object it manages on every interval, so each
//! labelled object shows its label at least once an interval. This keeps, per object, the
//! label's expiry as last reviewed, and counts those past it.
//!
//! Pure: the clock is passed in; `server` feeds it and sets the gauge.

use std::collections::BTreeMap;

use jiff::Timestamp;
use kube_core::admission::Operation;

use crate::decision::Decision;
use crate::policy::PolicySet;
use crate::request::RequestFacts;
use crate::window::{WindowScope, window_state};

/// At most this many labelled objects are remembered (the oldest-seen go first beyond it).
pub const MAX_TRACKED: usize = 10_000;

#[derive(Clone, Debug, PartialEq, Eq)]
struct Labelled {
    policy: String,
    expires_at: Timestamp,
    seen: Timestamp,
}

/// The break-glass labels seen on reviewed objects, by object uid.
#[derive(Clone, Debug, Default)]
pub struct LingeringLabels {
    by_uid: BTreeMap<String, Labelled>,
}

impl LingeringLabels {
    /// Whether `observe` could change anything for this review: an object it remembers, or one
    /// whose object (stored or written) carries the break-glass label of a policy that judged
    /// it. Every review passes here and most concern it not, so this is asked under a shared
    /// read lock and only `observe` takes the exclusive one.
    pub fn concerns(
        &self,
        policies: &PolicySet,
        facts: &RequestFacts<'_>,
        decision: &Decision,
    ) -> bool {
        if facts
            .object_uid()
            .is_some_and(|uid| self.by_uid.contains_key(uid))
        {
            return true;
        }
        let carries = |label: &str| {
            [facts.old_object(), facts.object()]
                .into_iter()
                .flatten()
                .any(|o| {
                    o.metadata()
                        .labels
                        .as_ref()
                        .is_some_and(|l| l.contains_key(label))
                })
        };
        decision.record.verdicts.iter().any(|verdict| {
            verdict
                .policy_in(policies)
                .and_then(|p| p.break_glass.as_ref())
                .is_some_and(|rules| carries(&rules.label))
        })
    }

    /// Takes in what one review shows of its object's label: the stored object's for a dry run
    /// (its write is not made), the written one's otherwise; a delete forgets the object.
    /// True when something changed.
    pub fn observe(
        &mut self,
        policies: &PolicySet,
        facts: &RequestFacts<'_>,
        decision: &Decision,
        now: Timestamp,
    ) -> bool {
        let request = facts.request();
        let Some(uid) = facts.object_uid() else {
            return false;
        };
        // A subresource's object is not the object (a Scale), except status, which is whole.
        if !matches!(decision.record.object.subresource.as_str(), "" | "status") {
            return false;
        }
        if request.operation() == Operation::Delete {
            return self.by_uid.remove(uid).is_some();
        }
        let object = if request.dry_run() {
            facts.old_object()
        } else {
            facts.object()
        };
        let Some(meta) = object.map(|o| o.metadata()) else {
            return false;
        };
        let found = decision.record.verdicts.iter().find_map(|verdict| {
            let policy = verdict.policy_in(policies)?;
            let rules = policy.break_glass.as_ref()?;
            let state = window_state(meta, rules, now, WindowScope::Object);
            Some(Labelled {
                policy: policy.name.clone(),
                expires_at: state.window()?.expires_at,
                seen: now,
            })
        });
        match found {
            Some(labelled) => {
                let changed = self.by_uid.get(uid).is_none_or(|known| {
                    (&known.policy, known.expires_at) != (&labelled.policy, labelled.expires_at)
                });
                self.by_uid.insert(uid.to_owned(), labelled);
                self.keep_within(MAX_TRACKED);
                changed
            }
            None => self.by_uid.remove(uid).is_some(),
        }
    }

    /// How many remembered labels are past their expiry, per policy (every policy with
    /// break-glass rules present, zero or not, so the series always exist).
    pub fn expired(&self, policies: &PolicySet, now: Timestamp) -> BTreeMap<String, i64> {
        let mut counts: BTreeMap<String, i64> = policies
            .policies()
            .iter()
            .filter(|p| p.break_glass.is_some())
            .map(|p| (p.name.clone(), 0))
            .collect();
        for labelled in self.by_uid.values().filter(|l| l.expires_at <= now) {
            if let Some(count) = counts.get_mut(&labelled.policy) {
                *count += 1;
            }
        }
        counts
    }

    fn keep_within(&mut self, max: usize) {
        while self.by_uid.len() > max {
            let oldest = self
                .by_uid
                .iter()
                .min_by_key(|(_, l)| l.seen)
                .map(|(uid, _)| uid.clone());
            match oldest {
                Some(uid) => self.by_uid.remove(&uid),
                None => break,
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decision::{DecisionInput, decide};
    use kube_core::DynamicObject;
    use kube_core::admission::AdmissionRequest;
    use serde_json::json;

    const POLICY: &str = r#"
apiVersion: driftgate.dev/v1alpha1
kind: GatePolicy
metadata: {name: production}
spec:
  namespaces: {include: ["prod-*"]}
  controllers:
    - {name: flux, usernames: ["system:serviceaccount:flux-system:kustomize-controller"]}
  breakGlass: {maxDuration: 4h, openers: {groups: [sre]}}
"#;

    fn review(
        operation: &str,
        dry_run: bool,
        label: Option<&str>,
    ) -> AdmissionRequest<DynamicObject> {
        let object = |label: Option<&str>| {
            let mut labels = serde_json::Map::new();
            if let Some(label) = label {
                labels.insert("driftgate.dev/break-glass".into(), label.into());
            }
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "c", "namespace": "prod-a", "uid": "u1", "labels": labels}})
        };
        serde_json::from_value(json!({
            "uid": "r", "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
            "resource": {"group": "", "version": "v1", "resource": "configmaps"},
            "name": "c", "namespace": "prod-a", "operation": operation,
            "userInfo": {"username": "system:serviceaccount:flux-system:kustomize-controller"},
            "object": if operation == "DELETE" { serde_json::Value::Null } else { object(if dry_run { None } else { label }) },
            "oldObject": object(label),
            "dryRun": dry_run,
        }))
        .unwrap()
    }

    fn observe(
        tracker: &mut LingeringLabels,
        policies: &PolicySet,
        request: &AdmissionRequest<DynamicObject>,
        now: Timestamp,
    ) -> bool {
        let facts = RequestFacts::new(request);
        let decision = decided(policies, &facts, now);
        tracker.observe(policies, &facts, &decision, now)
    }

    /// The decision without a cluster (no Namespace, parent, tallies or silence).
    fn decided(policies: &PolicySet, facts: &RequestFacts<'_>, now: Timestamp) -> Decision {
        decide(
            policies,
            &DecisionInput {
                request: facts,
                namespace: None,
                parent: None,
                resource: None,
                recent_deletes: None,
                now,
                silence: None,
            },
        )
    }

    #[test]
    fn an_expired_label_seen_in_a_review_is_counted_until_a_review_shows_it_gone() {
        let policies = PolicySet::from_yaml("inline", POLICY).unwrap();
        let mut tracker = LingeringLabels::default();
        let at = |t: &str| t.parse::<Timestamp>().unwrap();
        // A dry run (Flux's, every interval) shows the stored label: 09:00.
        assert!(observe(
            &mut tracker,
            &policies,
            &review("UPDATE", true, Some("20261130T0900Z")),
            at("2026-11-30T08:00:00Z")
        ));
        assert_eq!(
            tracker.expired(&policies, at("2026-11-30T08:59:00Z"))["production"],
            0
        );
        assert_eq!(
            tracker.expired(&policies, at("2026-11-30T09:00:00Z"))["production"],
            1
        );
        // Seen again unchanged: nothing changes.
        assert!(!observe(
            &mut tracker,
            &policies,
            &review("UPDATE", true, Some("20261130T0900Z")),
            at("2026-11-30T10:00:00Z")
        ));
        // A write without the label forgets it; a delete too.
        assert!(observe(
            &mut tracker,
            &policies,
            &review("UPDATE", false, None),
            at("2026-11-30T10:05:00Z")
        ));
        assert_eq!(
            tracker.expired(&policies, at("2026-11-30T11:00:00Z"))["production"],
            0
        );
        observe(
            &mut tracker,
            &policies,
            &review("UPDATE", false, Some("20261130T0900Z")),
            at("2026-11-30T10:06:00Z"),
        );
        assert!(observe(
            &mut tracker,
            &policies,
            &review("DELETE", false, Some("20261130T0900Z")),
            at("2026-11-30T10:07:00Z")
        ));
        assert_eq!(
            tracker.expired(&policies, at("2026-11-30T11:00:00Z"))["production"],
            0
        );
    }

    #[test]
    fn only_remembered_and_labelled_objects_concern_it() {
        let policies = PolicySet::from_yaml("inline", POLICY).unwrap();
        let now: Timestamp = "2026-11-30T08:00:00Z".parse().unwrap();
        let concerns = |request: &AdmissionRequest<DynamicObject>| {
            let facts = RequestFacts::new(request);
            let decision = decided(&policies, &facts, now);
            LingeringLabels::default().concerns(&policies, &facts, &decision)
        };
        assert!(!concerns(&review("UPDATE", false, None)));
        assert!(concerns(&review("UPDATE", false, Some("20261130T0900Z"))));
    }

    #[test]
    fn the_oldest_seen_go_first_beyond_the_bound() {
        let mut tracker = LingeringLabels::default();
        for i in 0..5 {
            tracker.by_uid.insert(
                format!("u{i}"),
                Labelled {
                    policy: "p".into(),
                    expires_at: Timestamp::UNIX_EPOCH,
                    seen: Timestamp::from_second(i).unwrap(),
                },
            );
        }
        tracker.keep_within(3);
        assert_eq!(
            tracker.by_uid.keys().cloned().collect::<Vec<_>>(),
            ["u2", "u3", "u4"]
        );
    }
}
