//! The suspensions that exist, counted for the gauges: every object of a kind with a
//! suspension field that a policy's `suspensions` find suspended, by whether its window (the
//! break-glass label on it) is open, past its expiry, or absent. Pure: the objects and the
//! clock are passed in; `server::suspensions` lists them and sets the gauges.

use std::collections::BTreeMap;

use jiff::Timestamp;
use kube::core::DynamicObject;

use crate::policy::{GatePolicy, NamespaceLabels, PolicySet};
use crate::timefmt::parse_expiry;

/// Where a suspension stands against its expiry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SuspensionState {
    /// Suspended, its expiry ahead.
    Open,
    /// Suspended past its expiry: nobody resumed it (what the alert is for).
    Expired,
    /// Suspended with no expiry driftgate can read (declared in Git, or set before driftgate).
    Unbounded,
}

impl SuspensionState {
    pub const ALL: [SuspensionState; 3] = [
        SuspensionState::Open,
        SuspensionState::Expired,
        SuspensionState::Unbounded,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SuspensionState::Open => "open",
            SuspensionState::Expired => "expired",
            SuspensionState::Unbounded => "unbounded",
        }
    }
}

/// One listed object: its API group and kind, and the object.
pub struct Listed<'a> {
    pub group: &'a str,
    pub kind: &'a str,
    pub object: &'a DynamicObject,
}

/// How many suspensions each policy with a `suspensions` section counts, in each state (every
/// state present, zero or not, so that the series an alert reads always exist).
pub fn count_suspensions(
    policies: &PolicySet,
    listed: &[Listed<'_>],
    now: Timestamp,
) -> BTreeMap<(String, SuspensionState), i64> {
    let mut counts = BTreeMap::new();
    for policy in policies.policies() {
        let (Some(rules), Some(break_glass)) = (&policy.suspensions, &policy.break_glass) else {
            continue;
        };
        for state in SuspensionState::ALL {
            counts.entry((policy.name.clone(), state)).or_insert(0);
        }
        for item in listed {
            let namespace = item.object.metadata.namespace.as_deref().unwrap_or("");
            if !counted_in(policy, rules.holds_namespace(namespace), namespace)
                || rules
                    .suspensions(item.group, item.kind, item.object)
                    .is_empty()
            {
                continue;
            }
            let label = item
                .object
                .metadata
                .labels
                .as_ref()
                .and_then(|labels| labels.get(&break_glass.label));
            let state = match label.map(|value| parse_expiry(value)) {
                Some(Ok(expiry)) if expiry > now => SuspensionState::Open,
                Some(Ok(_)) => SuspensionState::Expired,
                None | Some(Err(_)) => SuspensionState::Unbounded,
            };
            *counts.entry((policy.name.clone(), state)).or_insert(0) += 1;
        }
    }
    counts
}

/// Suspensions are counted where the GitOps objects are, and in the namespaces the policy
/// includes by name (a label selector's are not known here).
fn counted_in(policy: &GatePolicy, gitops_namespace: bool, namespace: &str) -> bool {
    static NO_LABELS: BTreeMap<String, String> = BTreeMap::new();
    gitops_namespace || policy.guards_namespace(namespace, NamespaceLabels::Known(&NO_LABELS))
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: &str = r#"
apiVersion: driftgate.dev/v1alpha1
kind: GatePolicy
metadata: {name: production}
spec:
  namespaces: {include: ["prod-*"]}
  breakGlass: {maxDuration: 4h, openers: {groups: [sre-oncall]}}
  suspensions: {}
"#;

    fn object(namespace: &str, suspend: bool, label: Option<&str>) -> DynamicObject {
        let mut labels = serde_json::Map::new();
        if let Some(label) = label {
            labels.insert("driftgate.dev/break-glass".into(), label.into());
        }
        serde_json::from_value(serde_json::json!({
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
            "metadata": {"name": "apps", "namespace": namespace, "labels": labels},
            "spec": {"suspend": suspend}
        }))
        .unwrap()
    }

    #[test]
    fn suspensions_are_counted_by_their_expiry() {
        let policies = PolicySet::from_yaml("inline", POLICY).unwrap();
        let now: Timestamp = "2026-11-30T09:00:00Z".parse().unwrap();
        let objects = [
            object("flux-system", true, Some("20261130T1000Z")),
            object("flux-system", true, Some("20261130T0800Z")),
            object("prod-apps", true, Some("20261130T0800Z")),
            object("flux-system", true, None),
            object("flux-system", true, Some("tomorrow")),
            // Not suspended, or where this policy does not look.
            object("flux-system", false, Some("20261130T0800Z")),
            object("team-a", true, Some("20261130T0800Z")),
        ];
        let listed: Vec<Listed<'_>> = objects
            .iter()
            .map(|object| Listed {
                group: "kustomize.toolkit.fluxcd.io",
                kind: "Kustomization",
                object,
            })
            .collect();
        let counts = count_suspensions(&policies, &listed, now);
        let count = |state| counts[&("production".to_owned(), state)];
        assert_eq!(count(SuspensionState::Open), 1);
        assert_eq!(count(SuspensionState::Expired), 2);
        assert_eq!(count(SuspensionState::Unbounded), 2);
        // Zero series exist from the start.
        let none = count_suspensions(&policies, &[], now);
        assert_eq!(none.len(), 3);
        assert!(none.values().all(|n| *n == 0));
    }
}
