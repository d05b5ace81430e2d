//! The controllers' recent deletes, per policy and namespace, so that a prune that suddenly
//! deletes everything stops at the policy's `deletions.controllerLimit`. Pure: the clock is
//! passed in; the server keeps one tally and feeds it each admitted delete.

use std::collections::{BTreeMap, VecDeque};

use jiff::Timestamp;
use kube_core::DynamicObject;
use kube_core::admission::Operation;

// The decision reads these (a delete's limit); the tally keeps them.
pub use crate::decision::{RecentDeletes, within};

use crate::decision::{Decision, Rule};
use crate::policy::PolicySet;
use crate::request::{AdmittedWrite, Landed, RequestFacts};

/// Every policy's recent controller deletes, by namespace. Bounded: each list keeps only what
/// its policy's limit can still count, and nothing is kept for policies without a limit.
#[derive(Debug, Default)]
pub struct DeletionTally {
    by_namespace: BTreeMap<String, BTreeMap<String, VecDeque<Timestamp>>>,
    /// The deletes waiting to be seen gone (without client authentication), by their object's
    /// uid, with when they were reviewed: each is removed when its wait ends, so this holds
    /// only the deletes in flight.
    awaited: BTreeMap<String, (Vec<CountedDelete>, Timestamp)>,
}

impl DeletionTally {
    /// The recent deletes in `namespace`, for a decision about a delete there: those counted
    /// and those still awaited. An awaited delete counts while it is awaited: a controller's
    /// burst of deletes is reviewed faster than the first of them can be seen gone, and would
    /// otherwise pass the limit whole.
    pub fn recent(&self, namespace: &str) -> RecentDeletes {
        let mut recent: RecentDeletes = self
            .by_namespace
            .get(namespace)
            .map(|policies| {
                policies
                    .iter()
                    .map(|(policy, times)| (policy.clone(), times.iter().copied().collect()))
                    .collect()
            })
            .unwrap_or_default();
        for (deletes, at) in self.awaited.values() {
            for delete in deletes.iter().filter(|d| d.namespace == namespace) {
                recent.entry(delete.policy.clone()).or_default().push(*at);
            }
        }
        recent
    }

    /// Counts the deletes `decision` admitted for the controllers of policies with a limit,
    /// and forgets in that namespace what no limit counts any more.
    pub fn observe(
        &mut self,
        facts: &RequestFacts<'_>,
        decision: &Decision,
        policies: &PolicySet,
        now: Timestamp,
    ) {
        self.count_all(&counted_deletes(facts, decision, policies), now);
    }

    /// Counts `deletes` at `now`.
    pub fn count_all(&mut self, deletes: &[CountedDelete], now: Timestamp) {
        for delete in deletes {
            self.count(&delete.namespace, &delete.policy, delete.per, now);
        }
    }

    /// Starts waiting for the delete of the object `uid`, reviewed at `at`, to be seen gone;
    /// false when a wait for it is under way already, so that an object deleted once is counted
    /// once however many reviews (a forger's beside the API server's) name it.
    pub fn await_gone(&mut self, uid: &str, deletes: Vec<CountedDelete>, at: Timestamp) -> bool {
        if self.awaited.contains_key(uid) {
            return false;
        }
        self.awaited.insert(uid.to_owned(), (deletes, at));
        true
    }

    /// Ends the wait for the delete of `uid`: counted (at its review's time) when its object was
    /// seen gone, forgotten otherwise.
    pub fn end_wait(&mut self, uid: &str, gone: bool) {
        if let Some((deletes, at)) = self.awaited.remove(uid)
            && gone
        {
            self.count_all(&deletes, at);
        }
    }

    /// Counts one delete at `now`, forgetting those `per` or more before it.
    fn count(&mut self, namespace: &str, policy: &str, per: jiff::SignedDuration, now: Timestamp) {
        let times = self
            .by_namespace
            .entry(namespace.to_owned())
            .or_default()
            .entry(policy.to_owned())
            .or_default();
        times.push_back(now);
        let since = now - per;
        while times.front().is_some_and(|t| *t <= since) {
            times.pop_front();
        }
    }
}

/// A delete that a policy's `controllerLimit` counts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CountedDelete {
    pub namespace: String,
    pub policy: String,
    pub per: jiff::SignedDuration,
}

/// The deletes `decision` admitted for the controllers of policies with a limit.
pub fn counted_deletes(
    facts: &RequestFacts<'_>,
    decision: &Decision,
    policies: &PolicySet,
) -> Vec<CountedDelete> {
    let request = facts.request();
    if request.operation() != Operation::Delete || request.dry_run() || !decision.allowed {
        return Vec::new();
    }
    let Some(namespace) = facts.scope_namespace() else {
        return Vec::new();
    };
    let user = request.user_info();
    decision
        .record
        .verdicts
        .iter()
        .filter(|v| v.rule == Rule::Controller)
        .filter_map(|verdict| {
            let (_, limit) = verdict
                .policy_in(policies)
                .and_then(|p| p.deletion_limit_for(user))?;
            Some(CountedDelete {
                namespace: namespace.to_owned(),
                policy: verdict.policy.clone(),
                per: limit.per.as_signed(),
            })
        })
        .collect()
}

/// Whether the object of the DELETE `write`, as read while the review was answered
/// (`stored`; None: not found), is the object the review names (its uid) and not already being
/// deleted. The API server reviews a DELETE before it deletes, so a delete it makes always
/// finds its object so; a forged review naming an object that does not exist, was replaced or
/// is already going, does not, and would otherwise read back gone at once.
pub fn existed_when_reviewed(write: &AdmittedWrite, stored: Option<&DynamicObject>) -> bool {
    write.deleted && !matches!(write.landed(stored), Landed::Gone)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_764_000_000 + seconds).unwrap()
    }

    #[test]
    fn the_tally_keeps_what_the_limit_can_count_per_namespace_and_policy() {
        let minute = jiff::SignedDuration::from_mins(1);
        let mut tally = DeletionTally::default();
        for second in [0, 10, 50] {
            tally.count("prod-a", "production", minute, at(second));
        }
        tally.count("prod-b", "production", minute, at(55));
        let recent = tally.recent("prod-a");
        assert_eq!(recent["production"], [at(0), at(10), at(50)]);
        assert_eq!(within(&recent["production"], minute, at(59)), 3);
        assert_eq!(within(&recent["production"], minute, at(65)), 2);
        // The next delete forgets what no limit counts any more.
        tally.count("prod-a", "production", minute, at(70));
        assert_eq!(tally.recent("prod-a")["production"], [at(50), at(70)]);
        assert_eq!(tally.recent("prod-b")["production"], [at(55)]);
        assert!(tally.recent("prod-c").is_empty());
    }

    fn delete_of(uid: &str) -> AdmittedWrite {
        AdmittedWrite {
            address: crate::request::StoredAddress {
                group: String::new(),
                version: "v1".into(),
                plural: "configmaps".into(),
                namespace: Some("prod-a".into()),
                name: "settings".into(),
            },
            uid: uid.into(),
            old_resource_version: Some("7".into()),
            deleted: true,
        }
    }

    fn stored(uid: &str, resource_version: &str, deleting: bool) -> DynamicObject {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {
                "name": "settings", "namespace": "prod-a", "uid": uid,
                "resourceVersion": resource_version,
                "deletionTimestamp": deleting.then_some("2026-12-02T10:00:00Z"),
            },
        }))
        .unwrap()
    }

    #[test]
    fn a_delete_counts_only_when_its_object_was_there_as_reviewed() {
        let delete = delete_of("uid-1");
        // The API server's review: the object is there, as the review names it.
        assert!(existed_when_reviewed(
            &delete,
            Some(&stored("uid-1", "7", false))
        ));
        // At another version (a forger's stale copy, or a write since): still this object, and
        // the read back after the answer decides.
        assert!(existed_when_reviewed(
            &delete,
            Some(&stored("uid-1", "9", false))
        ));
        // A forged review naming an object that is not there, or another object of that name.
        assert!(!existed_when_reviewed(&delete, None));
        assert!(!existed_when_reviewed(
            &delete,
            Some(&stored("uid-2", "7", false))
        ));
        // Already being deleted: counted by the review that started it.
        assert!(!existed_when_reviewed(
            &delete,
            Some(&stored("uid-1", "8", true))
        ));
        // Not a delete at all.
        let update = AdmittedWrite {
            deleted: false,
            ..delete_of("uid-1")
        };
        assert!(!existed_when_reviewed(
            &update,
            Some(&stored("uid-1", "7", false))
        ));
    }

    #[test]
    fn an_awaited_delete_counts_until_its_wait_ends_and_then_only_if_gone() {
        let minute = jiff::SignedDuration::from_mins(1);
        let deletes = |namespace: &str| {
            vec![CountedDelete {
                namespace: namespace.into(),
                policy: "production".into(),
                per: minute,
            }]
        };
        let mut tally = DeletionTally::default();
        tally.count("prod-a", "production", minute, at(0));
        assert!(tally.await_gone("uid-1", deletes("prod-a"), at(1)));
        // A second review of the same object while the first waits: no second wait.
        assert!(!tally.await_gone("uid-1", deletes("prod-a"), at(2)));
        assert!(tally.await_gone("uid-2", deletes("prod-a"), at(3)));
        assert!(tally.await_gone("uid-3", deletes("prod-b"), at(3)));
        // Awaited, they count: a burst is judged before the first of it reads back gone.
        assert_eq!(tally.recent("prod-a")["production"], [at(0), at(1), at(3)]);
        assert_eq!(tally.recent("prod-b")["production"], [at(3)]);
        // Seen gone: counted at its review's time, once.
        tally.end_wait("uid-1", true);
        tally.end_wait("uid-1", true);
        // Not seen gone (a forged review of an object that stays): forgotten.
        tally.end_wait("uid-2", false);
        tally.end_wait("uid-3", false);
        assert_eq!(tally.recent("prod-a")["production"], [at(0), at(1)]);
        assert!(tally.recent("prod-b").is_empty());
        assert!(tally.awaited.is_empty());
        // Once a wait is over, a new review of the object may wait again.
        assert!(tally.await_gone("uid-2", deletes("prod-a"), at(4)));
    }
}
