//! Which writes a policy may judge: one definition, shared by the decision, the envelope-first
//! read of a review (`decision::may_guard`), the blast-radius keeper (which leaves every other
//! namespace out of the gate webhook), the ledger's upkeep and `driftgate scan`. Were they to
//! answer apart, a write the decision would refuse could be left out of the webhook and admitted
//! unseen (issue 24: a suspension in flux-system, excluded by the keeper).

use super::{GatePolicy, NamespaceLabels, PolicySet};

/// Which of one policy's rules judge writes in a namespace (for a Namespace object, its own).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NamespaceScope {
    /// `spec.namespaces` selects it: every rule judges the kinds, operations and subresources
    /// the policy guards there, `deletions` protect their kinds, `suspensions` judge suspensions.
    pub guarded: bool,
    /// `spec.suspensions.namespaces` holds it (where the GitOps objects live): the suspension
    /// rules judge updates of any object there that may carry a suspension
    /// ([`may_carry_suspension`]), whatever else the policy guards.
    pub suspensions: bool,
}

impl NamespaceScope {
    /// Whether any rule of the policy may judge a write there.
    pub fn judged(self) -> bool {
        self.guarded || self.suspensions
    }
}

impl GatePolicy {
    /// Where this policy's rules judge writes in `namespace`. Labels that are not known count
    /// as matching a label selector (guarding on a guess is safe, admitting on one is not).
    pub fn namespace_scope(&self, namespace: &str, labels: NamespaceLabels<'_>) -> NamespaceScope {
        NamespaceScope {
            guarded: self.guards_namespace(namespace, labels),
            suspensions: self
                .suspensions
                .as_ref()
                .is_some_and(|rules| rules.holds_namespace(namespace)),
        }
    }
}

impl PolicySet {
    /// Whether some policy may judge a write in `namespace`: the gate webhook must be sent its
    /// writes, and the blast-radius keeper leaves out only the namespaces for which this is false.
    pub fn judges_namespace(&self, namespace: &str, labels: NamespaceLabels<'_>) -> bool {
        self.policies
            .iter()
            .any(|policy| policy.namespace_scope(namespace, labels).judged())
    }
}

/// Whether objects of `group/kind` are judged as suspensions where the GitOps objects live:
/// every kind but Leases, which controllers renew there every few seconds, and Events, which
/// nothing reconciles (the chart never sends either).
pub fn may_carry_suspension(group: &str, kind: &str) -> bool {
    !matches!(
        (group, kind),
        ("coordination.k8s.io", "Lease") | ("" | "core", "Event") | ("events.k8s.io", "Event")
    )
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    const POLICIES: &str = r#"
apiVersion: driftgate.dev/v1alpha1
kind: GatePolicy
metadata: {name: prod}
spec:
  namespaces: {include: ["prod-*"], selector: {matchLabels: {gitops: enforced}}}
  controllers: [{name: flux, usernames: [flux]}]
  breakGlass: {maxDuration: 1h, openers: {groups: [sre]}}
  suspensions: {}
---
apiVersion: driftgate.dev/v1alpha1
kind: GatePolicy
metadata: {name: staging}
spec:
  namespaces: {include: ["staging-*"]}
  controllers: [{name: flux, usernames: [flux]}]
"#;

    #[test]
    fn a_namespace_is_judged_where_a_policy_guards_it_or_holds_its_gitops_objects() {
        let set = PolicySet::from_yaml("inline", POLICIES).unwrap();
        let none = BTreeMap::new();
        let enforced = BTreeMap::from([("gitops".to_owned(), "enforced".to_owned())]);
        let prod = &set.policies()[0];
        let scope = |ns, labels| prod.namespace_scope(ns, NamespaceLabels::Known(labels));
        assert_eq!(
            scope("prod-a", &none),
            NamespaceScope {
                guarded: true,
                suspensions: false
            }
        );
        assert_eq!(
            scope("flux-system", &none),
            NamespaceScope {
                guarded: false,
                suspensions: true
            }
        );
        assert!(scope("team-a", &enforced).guarded);
        assert!(!scope("team-a", &none).judged());
        assert!(
            prod.namespace_scope("team-a", NamespaceLabels::Unknown)
                .guarded
        );
        for (namespace, judged) in [
            ("prod-a", true),
            ("staging-a", true),
            ("flux-system", true),
            ("argocd", true),
            ("default", false),
        ] {
            assert_eq!(
                set.judges_namespace(namespace, NamespaceLabels::Known(&none)),
                judged,
                "{namespace}"
            );
        }
    }

    #[test]
    fn leases_and_events_carry_no_suspension() {
        for (group, kind) in [
            ("coordination.k8s.io", "Lease"),
            ("", "Event"),
            ("events.k8s.io", "Event"),
        ] {
            assert!(!may_carry_suspension(group, kind), "{group}/{kind}");
        }
        assert!(may_carry_suspension(
            "kustomize.toolkit.fluxcd.io",
            "Kustomization"
        ));
        assert!(may_carry_suspension("apps", "Deployment"));
    }
}
