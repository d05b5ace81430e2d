//! The controllers' recent deletes, per policy and namespace, so that a prune that suddenly
//! deletes everything stops at the policy's `deletions.controllerLimit`. Pure: the clock is
//! passed in; the server keeps one tally and feeds it each admitted delete.

use std::collections::{BTreeMap, VecDeque};

use jiff::Timestamp;
use kube::core::admission::Operation;

use crate::decision::{Decision, Rule};
use crate::policy::PolicySet;
use crate::request::RequestFacts;

/// The times of the controllers' recent deletes in one namespace, by policy: what a decision
/// about a delete there reads.
pub type RecentDeletes = BTreeMap<String, Vec<Timestamp>>;

/// Every policy's recent controller deletes, by namespace. Bounded: each list keeps only what
/// its policy's limit can still count, and nothing is kept for policies without a limit.
#[derive(Debug, Default)]
pub struct DeletionTally {
    by_namespace: BTreeMap<String, BTreeMap<String, VecDeque<Timestamp>>>,
}

impl DeletionTally {
    /// The recent deletes in `namespace`, for a decision about a delete there.
    pub fn recent(&self, namespace: &str) -> RecentDeletes {
        self.by_namespace
            .get(namespace)
            .map(|policies| {
                policies
                    .iter()
                    .map(|(policy, times)| (policy.clone(), times.iter().copied().collect()))
                    .collect()
            })
            .unwrap_or_default()
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
            let (_, limit) = policies
                .policies()
                .iter()
                .find(|p| p.name == verdict.policy)
                .and_then(|p| p.deletion_limit_for(user))?;
            Some(CountedDelete {
                namespace: namespace.to_owned(),
                policy: verdict.policy.clone(),
                per: limit.per.as_signed(),
            })
        })
        .collect()
}

/// How many of `times` fall within `per` before `now`.
pub fn within(times: &[Timestamp], per: jiff::SignedDuration, now: Timestamp) -> usize {
    let since = now - per;
    times.iter().filter(|t| **t > since).count()
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
}
