//! Deleting an owner whose cascade would delete a protected object is judged as deleting that
//! object (issue 24, section 5): the decision given what the server read of the cascade, and
//! which deletes the server reads it for.

mod common;

use driftgate::cascade::{DeletionCascade, Dependent, GroupKind};
use driftgate::decision::ledger_guard::LedgerGuard;
use driftgate::decision::{
    Decision, DecisionInput, Rule, cascade_query, decide_with_cascade, may_guard,
};
use driftgate::policy::PolicySet;
use driftgate::request::RequestFacts;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::DynamicObject;
use kube::core::admission::AdmissionRequest;
use serde_json::{Value, json};

use common::{NOW, policies};

const FLUX: &str = "system:serviceaccount:flux-system:kustomize-controller";
const GARBAGE_COLLECTOR: &str = "system:serviceaccount:kube-system:generic-garbage-collector";
const NS: &str = "prod-db";
const ALLOW: &str = "driftgate.dev/allow-deletion";
const LABEL: &str = "driftgate.dev/break-glass";

/// A DELETE as the API server reviews it.
struct Delete {
    user: &'static str,
    groups: Vec<&'static str>,
    kind: (&'static str, &'static str, &'static str),
    resource: &'static str,
    name: &'static str,
    options: Value,
    finalizers: Vec<&'static str>,
}

/// Flux pruning StatefulSet `web`, as the real Flux sends it (`propagationPolicy: Background`).
fn prune_statefulset() -> Delete {
    Delete {
        user: FLUX,
        groups: vec![
            "system:serviceaccounts",
            "system:serviceaccounts:flux-system",
        ],
        kind: ("apps", "v1", "StatefulSet"),
        resource: "statefulsets",
        name: "web",
        options: json!({"apiVersion": "meta.k8s.io/v1", "kind": "DeleteOptions",
            "propagationPolicy": "Background"}),
        finalizers: vec![],
    }
}

impl Delete {
    fn by(mut self, user: &'static str, groups: Vec<&'static str>) -> Self {
        self.user = user;
        self.groups = groups;
        self
    }

    fn of(
        mut self,
        kind: (&'static str, &'static str, &'static str),
        resource: &'static str,
        name: &'static str,
    ) -> Self {
        self.kind = kind;
        self.resource = resource;
        self.name = name;
        self
    }

    fn options(mut self, options: Value) -> Self {
        self.options = options;
        self
    }

    fn finalizers(mut self, finalizers: Vec<&'static str>) -> Self {
        self.finalizers = finalizers;
        self
    }

    fn build(&self) -> AdmissionRequest<DynamicObject> {
        let (group, version, kind) = self.kind;
        let api_version = if group.is_empty() {
            version.to_owned()
        } else {
            format!("{group}/{version}")
        };
        serde_json::from_value(json!({
            "uid": "00000000-0000-4000-8000-000000000000",
            "kind": {"group": group, "version": version, "kind": kind},
            "resource": {"group": group, "version": version, "resource": self.resource},
            "requestKind": {"group": group, "version": version, "kind": kind},
            "requestResource": {"group": group, "version": version, "resource": self.resource},
            "name": self.name,
            "namespace": NS,
            "operation": "DELETE",
            "userInfo": {"username": self.user, "groups": self.groups},
            "object": null,
            "oldObject": {"apiVersion": api_version, "kind": kind,
                "metadata": {"name": self.name, "namespace": NS, "uid": "owner-uid",
                    "finalizers": self.finalizers}},
            "options": self.options,
            "dryRun": false,
        }))
        .expect("a valid AdmissionRequest")
    }
}

/// PersistentVolumeClaim `name` in [`NS`], owned through `through`, with `annotations` and
/// `labels`.
fn claim(name: &str, through: &[&str], annotations: Value, labels: Value) -> Dependent {
    Dependent {
        kind: GroupKind::new("", "PersistentVolumeClaim"),
        resource: "persistentvolumeclaims".to_owned(),
        meta: serde_json::from_value::<ObjectMeta>(json!({"name": name, "namespace": NS,
            "uid": format!("{name}-uid"), "annotations": annotations, "labels": labels}))
        .unwrap(),
        through: through.iter().map(|s| (*s).to_owned()).collect(),
        undetermined: None,
    }
}

fn plain(name: &str) -> Dependent {
    claim(name, &[], json!({}), json!({}))
}

fn decide(
    policies: &PolicySet,
    delete: &Delete,
    namespace: Value,
    cascade: Option<&DeletionCascade>,
) -> Decision {
    let request = delete.build();
    let namespace: ObjectMeta = serde_json::from_value(namespace).unwrap();
    decide_with_cascade(
        policies,
        &DecisionInput {
            request: &RequestFacts::new(&request),
            resource: None,
            namespace: Some(&namespace),
            parent: None,
            recent_deletes: None,
            now: NOW.parse().unwrap(),
            silence: None,
        },
        &LedgerGuard::default(),
        cascade,
    )
}

fn namespace() -> Value {
    json!({"name": NS})
}

fn verdict(decision: &Decision) -> (bool, Rule) {
    (decision.allowed, decision.record.rule)
}

#[test]
fn pruning_a_statefulset_that_would_take_its_claim_is_refused_with_what_to_do() {
    let cascade = DeletionCascade::Read(vec![plain("data-web-0")]);
    let decision = decide(
        &policies(),
        &prune_statefulset(),
        namespace(),
        Some(&cascade),
    );
    assert_eq!(verdict(&decision), (false, Rule::DeletionProtected));
    assert_eq!(
        decision.message,
        "Controller flux (system:serviceaccount:flux-system:kustomize-controller) may not delete StatefulSet prod-db/web: \
         the garbage collector would then delete PersistentVolumeClaim data-web-0, which it owns, and the policy protects it from deletion by anyone, \
         the GitOps controller included, unless deleting it is a deliberate act (policy \"production\", rule DeletionProtected). \
         If that is meant, mark it first, in Git or with kubectl annotate persistentvolumeclaim/data-web-0 -n prod-db driftgate.dev/allow-deletion=true, \
         or delete it under a break-glass window on the namespace (group sre-oncall may open one: driftgate break-glass open namespace/prod-db --for 1h --reason \"INC-…: what and why\"); \
         to delete it alone and keep what it owns: kubectl delete statefulset/web -n prod-db --cascade=orphan; \
         if the controller is pruning it, check the last change in Git (policy owner: team-platform (#platform-oncall))."
    );
    assert_eq!(decision.record.verdicts[0].matched.as_deref(), Some("flux"));

    // Each claim is named; the annotate command marks them all.
    let two = DeletionCascade::Read(vec![plain("data-web-0"), plain("data-web-1")]);
    let decision = decide(&policies(), &prune_statefulset(), namespace(), Some(&two));
    assert!(
        decision.message.contains(
            "would then delete PersistentVolumeClaims data-web-0 and data-web-1, which it owns, and the policy protects them"
        ) && decision.message.contains(
            "mark each first, in Git or with kubectl annotate persistentvolumeclaim/data-web-0 persistentvolumeclaim/data-web-1 -n prod-db"
        ),
        "{}",
        decision.message
    );
    // Five are named, and no more follow.
    let five = DeletionCascade::Read((0..5).map(|i| plain(&format!("data-web-{i}"))).collect());
    let decision = decide(&policies(), &prune_statefulset(), namespace(), Some(&five));
    assert!(
        decision
            .message
            .contains("data-web-3 and data-web-4, which it owns"),
        "{}",
        decision.message
    );
    // At most five are named.
    let many = DeletionCascade::Read((0..7).map(|i| plain(&format!("data-web-{i}"))).collect());
    let decision = decide(&policies(), &prune_statefulset(), namespace(), Some(&many));
    assert!(
        decision
            .message
            .contains("data-web-3 and data-web-4, and 2 more, which it owns"),
        "{}",
        decision.message
    );
}

#[test]
fn the_same_deliberate_acts_as_for_the_claim_allow_the_delete() {
    let policies = policies();
    let marked = DeletionCascade::Read(vec![claim(
        "data-web-0",
        &[],
        json!({ALLOW: "true"}),
        json!({}),
    )]);
    let decision = decide(&policies, &prune_statefulset(), namespace(), Some(&marked));
    assert_eq!(verdict(&decision), (true, Rule::Controller));

    // One marked, one not: the one not is named.
    let half = DeletionCascade::Read(vec![
        claim("data-web-0", &[], json!({ALLOW: "true"}), json!({})),
        plain("data-web-1"),
    ]);
    let decision = decide(&policies, &prune_statefulset(), namespace(), Some(&half));
    assert_eq!(verdict(&decision), (false, Rule::DeletionProtected));
    assert!(
        decision
            .message
            .contains("would then delete PersistentVolumeClaim data-web-1, which it owns"),
        "{}",
        decision.message
    );

    // A mark other than "true" is no mark.
    let yes = DeletionCascade::Read(vec![claim(
        "data-web-0",
        &[],
        json!({ALLOW: "yes"}),
        json!({}),
    )]);
    let decision = decide(&policies, &prune_statefulset(), namespace(), Some(&yes));
    assert_eq!(verdict(&decision), (false, Rule::DeletionProtected));

    // An opener under a window on the claim passes this rule; deleting the StatefulSet itself
    // then needs what deleting it needs (a window on it or the namespace).
    let alice = || prune_statefulset().by("alice", vec!["sre-oncall"]);
    let window = DeletionCascade::Read(vec![claim(
        "data-web-0",
        &[],
        json!({"driftgate.dev/break-glass-reason": "INC-7: disk full"}),
        json!({LABEL: "20261130T1000Z"}),
    )]);
    let decision = decide(&policies, &alice(), namespace(), Some(&window));
    assert_eq!(verdict(&decision), (false, Rule::NotPermitted));
    // Under a namespace-wide window the opener deletes both.
    let open_namespace = json!({"name": NS, "labels": {LABEL: "20261130T1000Z"},
        "annotations": {"driftgate.dev/break-glass-reason": "INC-7: disk full"}});
    let unmarked = DeletionCascade::Read(vec![plain("data-web-0")]);
    let decision = decide(&policies, &alice(), open_namespace.clone(), Some(&unmarked));
    assert_eq!(verdict(&decision), (true, Rule::BreakGlassWindow));
    // Not so bob, nor Flux: as for deleting the claim.
    let bob = prune_statefulset().by("bob", vec![]);
    let decision = decide(&policies, &bob, open_namespace, Some(&unmarked));
    assert_eq!(verdict(&decision), (false, Rule::DeletionProtected));
    assert!(
        decision
            .message
            .starts_with("bob may not delete StatefulSet prod-db/web: the garbage collector would then delete PersistentVolumeClaim data-web-0"),
        "{}",
        decision.message
    );
}

#[test]
fn an_operators_resource_that_owns_claims_through_its_statefulset_is_judged_the_same() {
    let cascade = DeletionCascade::Read(vec![claim(
        "data-orders-0",
        &["StatefulSet orders"],
        json!({}),
        json!({}),
    )]);
    let prune = prune_statefulset().of(("example.com", "v1", "Database"), "databases", "orders");
    let decision = decide(&policies(), &prune, namespace(), Some(&cascade));
    assert_eq!(verdict(&decision), (false, Rule::DeletionProtected));
    assert!(
        decision.message.contains(
            "may not delete Database prod-db/orders: the garbage collector would then delete PersistentVolumeClaim data-orders-0 (through StatefulSet orders), which it owns"
        ) && decision
            .message
            .contains("kubectl delete databases.example.com/orders -n prod-db --cascade=orphan"),
        "{}",
        decision.message
    );
}

#[test]
fn a_cascade_that_could_not_be_read_is_refused_saying_why() {
    let policies = policies();
    let unreadable = DeletionCascade::Unreadable("the API server did not answer within 2s".into());
    let decision = decide(
        &policies,
        &prune_statefulset(),
        namespace(),
        Some(&unreadable),
    );
    assert_eq!(verdict(&decision), (false, Rule::DeletionProtected));
    assert!(
        decision.message.contains(
            "driftgate could not read the objects the policy protects from deletion in prod-db to see whether the garbage collector would delete any of them with it (the API server did not answer within 2s)"
        ) && decision.message.contains("--cascade=orphan"),
        "{}",
        decision.message
    );

    let mut maybe = plain("data-orders-0");
    maybe.undetermined = Some(
        "driftgate may not list databases.example.com in prod-db: grant its ClusterRole list on databases.example.com (the chart's rbac.deletionCascade)".into(),
    );
    let cascade = DeletionCascade::Read(vec![maybe.clone()]);
    let decision = decide(&policies, &prune_statefulset(), namespace(), Some(&cascade));
    assert_eq!(verdict(&decision), (false, Rule::DeletionProtected));
    assert!(
        decision.message.contains(
            "driftgate could not tell whether the garbage collector would then delete PersistentVolumeClaim data-orders-0, which the policy protects from deletion by anyone, the GitOps controller included (driftgate may not list databases.example.com in prod-db"
        ),
        "{}",
        decision.message
    );
    // A claim it may take but that is marked needs nothing more.
    maybe.meta.annotations = Some([(ALLOW.to_owned(), "true".to_owned())].into());
    let cascade = DeletionCascade::Read(vec![maybe]);
    let decision = decide(&policies, &prune_statefulset(), namespace(), Some(&cascade));
    assert_eq!(verdict(&decision), (true, Rule::Controller));
}

#[test]
fn deletes_that_take_nothing_protected_are_judged_as_before() {
    let policies = policies();
    let nothing = DeletionCascade::Read(vec![]);
    let cascade = DeletionCascade::Read(vec![plain("data-web-0")]);
    // Nothing protected in the cascade.
    let decision = decide(&policies, &prune_statefulset(), namespace(), Some(&nothing));
    assert_eq!(verdict(&decision), (true, Rule::Controller));
    // A dependent of a kind the policy does not protect.
    let mut config = plain("settings");
    config.kind = GroupKind::new("", "ConfigMap");
    config.resource = "configmaps".to_owned();
    let decision = decide(
        &policies,
        &prune_statefulset(),
        namespace(),
        Some(&DeletionCascade::Read(vec![config])),
    );
    assert_eq!(verdict(&decision), (true, Rule::Controller));
    // A delete that orphans: the claims stay, whatever was read.
    for orphan in [
        json!({"propagationPolicy": "Orphan"}),
        json!({"orphanDependents": true}),
    ] {
        let delete = prune_statefulset().options(orphan);
        let decision = decide(&policies, &delete, namespace(), Some(&cascade));
        assert_eq!(verdict(&decision), (true, Rule::Controller));
    }
    let delete = prune_statefulset()
        .options(Value::Null)
        .finalizers(vec!["orphan"]);
    assert_eq!(
        verdict(&decide(&policies, &delete, namespace(), Some(&cascade))),
        (true, Rule::Controller)
    );
    // Kubernetes' garbage collector deletes what was admitted.
    let collector = prune_statefulset().by(GARBAGE_COLLECTOR, vec!["system:serviceaccounts"]);
    assert_eq!(
        verdict(&decide(&policies, &collector, namespace(), Some(&cascade))),
        (true, Rule::Controller)
    );
    // A Pod (left out of the example policy's resources): run-time objects of Kubernetes'
    // controllers, whose claims are their own.
    let pod = prune_statefulset()
        .by(
            "system:serviceaccount:kube-system:statefulset-controller",
            vec![],
        )
        .of(("", "v1", "Pod"), "pods", "web-0");
    assert_eq!(
        verdict(&decide(&policies, &pod, namespace(), Some(&cascade))),
        (true, Rule::OutOfScope)
    );
    // Outside the policy's namespaces.
    let request = prune_statefulset().build();
    let mut request: AdmissionRequest<DynamicObject> = request;
    request.namespace = Some("prod-sandbox".to_owned());
    let decision = decide_with_cascade(
        &policies,
        &DecisionInput {
            request: &RequestFacts::new(&request),
            resource: None,
            namespace: None,
            parent: None,
            recent_deletes: None,
            now: NOW.parse().unwrap(),
            silence: None,
        },
        &LedgerGuard::default(),
        Some(&cascade),
    );
    assert_eq!(verdict(&decision), (true, Rule::OutOfScope));
    // Without a cascade read (`eval`, no cluster) nothing is judged of it.
    let decision = decide(&policies, &prune_statefulset(), namespace(), None);
    assert_eq!(verdict(&decision), (true, Rule::Controller));
}

#[test]
fn an_audit_policy_warns_with_the_same_words() {
    let audit = std::fs::read_to_string(common::path("policies/example.yaml"))
        .unwrap()
        .replacen("mode: Enforce", "mode: Audit", 1);
    let policies = PolicySet::from_yaml("example-audit", &audit).unwrap();
    let cascade = DeletionCascade::Read(vec![plain("data-web-0")]);
    let decision = decide(&policies, &prune_statefulset(), namespace(), Some(&cascade));
    assert_eq!(verdict(&decision), (true, Rule::DeletionProtected));
    assert!(
        decision
            .warnings
            .iter()
            .any(|w| w.contains("would deny in Enforce mode")),
        "{:?}",
        decision.warnings
    );
}

/// What the server reads: only for the deletes whose cascade a policy judges, with the
/// deleted object's uid and the protected kinds of those policies.
#[test]
fn the_cascade_is_read_only_for_deletes_a_policy_judges() {
    let policies = policies();
    let query = |delete: &Delete| {
        let request = delete.build();
        let namespace: ObjectMeta = serde_json::from_value(namespace()).unwrap();
        let input = DecisionInput {
            request: &RequestFacts::new(&request),
            resource: None,
            namespace: Some(&namespace),
            parent: None,
            recent_deletes: None,
            now: NOW.parse().unwrap(),
            silence: None,
        };
        cascade_query(&policies, &input).map(|q| {
            (
                q.namespace.clone(),
                q.deleted_uid.clone(),
                q.protects("", "PersistentVolumeClaim", "persistentvolumeclaims"),
                q.protects("", "ConfigMap", "configmaps"),
            )
        })
    };
    assert_eq!(
        query(&prune_statefulset()),
        Some((NS.to_owned(), Some("owner-uid".to_owned()), true, false))
    );
    assert_eq!(
        query(&prune_statefulset().by("bob", vec![])).map(|q| q.0),
        Some(NS.to_owned())
    );
    // A ConfigMap may own claims too (a controller's anchor object): read.
    assert!(
        query(&prune_statefulset().of(("", "v1", "ConfigMap"), "configmaps", "anchor")).is_some()
    );
    for (why, delete) in [
        (
            "orphaned",
            prune_statefulset().options(json!({"propagationPolicy": "Orphan"})),
        ),
        (
            "the collector",
            prune_statefulset().by(GARBAGE_COLLECTOR, vec![]),
        ),
        (
            "a Pod",
            prune_statefulset().of(("", "v1", "Pod"), "pods", "web-0"),
        ),
        (
            "a ReplicaSet",
            prune_statefulset().of(("apps", "v1", "ReplicaSet"), "replicasets", "web-1"),
        ),
    ] {
        assert_eq!(query(&delete), None, "{why}");
    }
}

/// A policy that guards no DELETE still judges the cascade of its kinds (as it protects its
/// claims whatever `operations` say), so the server reads the objects of such deletes.
#[test]
fn a_policy_that_guards_no_deletes_still_reads_their_objects_for_the_cascade() {
    let text = std::fs::read_to_string(common::path("policies/example.yaml"))
        .unwrap()
        .replacen(
            "operations: [CREATE, UPDATE, DELETE]",
            "operations: [CREATE, UPDATE]",
            1,
        );
    let policies = PolicySet::from_yaml("no-deletes", &text).unwrap();
    let request = prune_statefulset().build();
    let meta: ObjectMeta = serde_json::from_value(namespace()).unwrap();
    assert!(may_guard(&policies, &request, Some(&meta)));
    let cascade = DeletionCascade::Read(vec![plain("data-web-0")]);
    let decision = decide(&policies, &prune_statefulset(), namespace(), Some(&cascade));
    assert_eq!(verdict(&decision), (false, Rule::DeletionProtected));
    let decision = decide(
        &policies,
        &prune_statefulset(),
        namespace(),
        Some(&DeletionCascade::Read(vec![])),
    );
    assert_eq!(verdict(&decision), (true, Rule::OutOfScope));
}

/// Without namespace-wide windows, a cascade's refusal offers none: what it offers is marking
/// the protected object, or deleting the owner alone.
#[test]
fn without_namespace_wide_windows_a_cascade_refusal_offers_no_namespace_window() {
    let text = std::fs::read_to_string(common::path("policies/example.yaml"))
        .unwrap()
        .replace("namespaceWide: true", "namespaceWide: false");
    let policies = PolicySet::from_yaml("no-namespace-windows", &text).unwrap();
    let cascade = DeletionCascade::Read(vec![plain("data-web-0")]);
    let decision = decide(&policies, &prune_statefulset(), namespace(), Some(&cascade));
    assert_eq!(verdict(&decision), (false, Rule::DeletionProtected));
    assert!(
        decision.message.contains(
            "If that is meant, mark it first, in Git or with kubectl annotate persistentvolumeclaim/data-web-0 -n prod-db \
             driftgate.dev/allow-deletion=true; to delete it alone and keep what it owns: kubectl delete statefulset/web -n prod-db --cascade=orphan;"
        ),
        "{}",
        decision.message
    );
    assert!(
        !decision.message.contains("namespace/"),
        "{}",
        decision.message
    );
}
