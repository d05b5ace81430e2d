//! Table-driven tests for every decision rule, on requests built in code so that each case
//! varies exactly one thing. The fixtures in `tests/fixtures/` cover the same rules with
//! reviews as a real API server sends them (run as `policy test` suites in `cli.rs`).

use driftgate::decision::ledger_guard::LedgerGuard;
use driftgate::decision::{
    DecisionInput, DiscoveredResource, Rule, WindowScope, decide, decide_with_ledger, may_guard,
};
use driftgate::policy::PolicySet;
use driftgate::request::RequestFacts;
use driftgate::review::parse_review;
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::DynamicObject;
use serde_json::{Value, json};

const POLICY: &str = r#"
apiVersion: driftgate.dev/v1alpha1
kind: GatePolicy
metadata: {name: prod}
spec:
  owner: "team-platform (#platform-oncall)"
  namespaces: {include: ["prod-*"], exclude: ["prod-sandbox"]}
  resources: {exclude: ["core/Event"]}
  controllers:
    - name: flux
      usernames: ["system:serviceaccount:flux-system:*-controller"]
      fieldManagers: ["kustomize-controller", "helm-controller"]
  delegations:
    - name: hpa
      usernames: ["system:serviceaccount:kube-system:horizontal-pod-autoscaler"]
      subresources: ["scale"]
      fields: ["spec.replicas"]
    - name: revision
      usernames: ["system:serviceaccount:kube-system:deployment-controller"]
      fields: ["metadata.annotations[deployment.kubernetes.io/revision]"]
    # Covers the break-glass label and reason too; only the break-glass rules judge those.
    - name: labeller
      usernames: ["system:serviceaccount:kube-system:labeller"]
      fields: ["metadata.labels[*]", "metadata.annotations[*]"]
  breakGlass:
    maxDuration: 4h
    openers: {groups: ["sre-oncall"], usernames: ["carol"]}
    holdController: true
    namespaceWide: true
"#;

const FLUX: &str = "system:serviceaccount:flux-system:kustomize-controller";
const HPA: &str = "system:serviceaccount:kube-system:horizontal-pod-autoscaler";
const LABEL: &str = "driftgate.dev/break-glass";
const REASON: &str = "driftgate.dev/break-glass-reason";

fn now() -> Timestamp {
    "2026-11-30T09:00:00Z".parse().unwrap()
}

fn policies() -> PolicySet {
    PolicySet::from_yaml("inline", POLICY).unwrap()
}

/// A Deployment with the given labels, annotations, image and replicas.
fn deployment(labels: Value, annotations: Value, image: &str, replicas: i64) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "api", "namespace": "prod-payments", "uid": "d-1",
            "resourceVersion": "100", "generation": 4, "labels": labels, "annotations": annotations},
        "spec": {"replicas": replicas, "template": {"spec": {"containers": [{"name": "api", "image": image}]}}},
        "status": {"replicas": replicas}
    })
}

fn plain() -> Value {
    deployment(json!({"app": "api"}), json!({}), "api:1", 3)
}

fn with_window(value: &str, reason: Option<&str>) -> Value {
    let annotations = match reason {
        Some(r) => json!({REASON: r}),
        None => json!({}),
    };
    deployment(json!({"app": "api", LABEL: value}), annotations, "api:1", 3)
}

/// A Knative Service: a kind whose name collides with the core Service.
fn knative(generation: i64) -> Value {
    json!({"apiVersion": "serving.knative.dev/v1", "kind": "Service",
        "metadata": {"name": "api", "namespace": "prod-payments", "generation": generation},
        "spec": {"template": {"spec": {"containers": [{"image": format!("api:{generation}")}]}}}})
}

/// `object` with one managedFields entry: Flux's Apply entry owning `fields`.
fn owned(mut object: Value, fields: Value) -> Value {
    object["metadata"]["managedFields"] = json!([{
        "manager": "kustomize-controller", "operation": "Apply", "apiVersion": "apps/v1",
        "time": "2026-11-30T08:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": fields}]);
    object
}

fn scale(replicas: i64) -> Value {
    json!({"apiVersion": "autoscaling/v1", "kind": "Scale",
        "metadata": {"name": "api", "namespace": "prod-payments", "uid": "d-1"},
        "spec": {"replicas": replicas}, "status": {"replicas": 3, "selector": "app=api"}})
}

struct Req {
    operation: &'static str,
    user: &'static str,
    groups: Vec<&'static str>,
    field_manager: Option<&'static str>,
    namespace: &'static str,
    kind: (&'static str, &'static str),
    resource: (&'static str, &'static str),
    subresource: Option<&'static str>,
    /// "" for a DELETE of a collection.
    name: &'static str,
    old: Option<Value>,
    new: Option<Value>,
}

impl Req {
    fn update(user: &'static str, old: Value, new: Value) -> Self {
        Req {
            operation: "UPDATE",
            user,
            groups: groups_of(user),
            field_manager: Some("kubectl-edit"),
            namespace: "prod-payments",
            kind: ("apps", "Deployment"),
            resource: ("apps", "deployments"),
            subresource: None,
            name: "api",
            old: Some(old),
            new: Some(new),
        }
    }

    /// A `PUT .../namespaces/NAME/finalize` of Namespace `prod-payments`, as the API server
    /// reviews it: the whole Namespace, old and new, no field manager.
    fn namespace_finalize(mut self) -> Self {
        self.kind = ("", "Namespace");
        self.resource = ("", "namespaces");
        self.subresource = Some("finalize");
        self.namespace = "";
        self.name = "prod-payments";
        self.field_manager = None;
        self
    }

    /// A `status` write, as the API server reviews it: the whole object, old and new.
    fn status(mut self) -> Self {
        self.subresource = Some("status");
        self.field_manager = None;
        self
    }

    /// One object of a DELETE of the whole collection (`DELETE .../deployments`), as the API
    /// server reviews it: no name, the object in oldObject.
    fn collection(mut self) -> Self {
        self.operation = "DELETE";
        self.name = "";
        self.new = None;
        self.field_manager = None;
        self
    }

    fn fm(mut self, fm: Option<&'static str>) -> Self {
        self.field_manager = fm;
        self
    }

    fn ns(mut self, ns: &'static str) -> Self {
        self.namespace = ns;
        self
    }

    fn op(mut self, op: &'static str) -> Self {
        self.operation = op;
        self
    }

    fn scale(mut self) -> Self {
        self.kind = ("autoscaling", "Scale");
        self.subresource = Some("scale");
        self.field_manager = None;
        self
    }

    fn build(&self) -> kube::core::admission::AdmissionRequest<DynamicObject> {
        let options_kind = match self.operation {
            "CREATE" => "CreateOptions",
            "DELETE" => "DeleteOptions",
            _ => "UpdateOptions",
        };
        let mut options = json!({"kind": options_kind, "apiVersion": "meta.k8s.io/v1"});
        if let Some(fm) = self.field_manager {
            options["fieldManager"] = json!(fm);
        }
        let mut request = json!({
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": self.kind.0, "version": "v1", "kind": self.kind.1},
            "resource": {"group": self.resource.0, "version": "v1", "resource": self.resource.1},
            "name": self.name, "namespace": self.namespace, "operation": self.operation,
            "userInfo": {"username": self.user, "groups": self.groups},
            "object": self.new, "oldObject": self.old, "dryRun": false, "options": options,
        });
        if let Some(sub) = self.subresource {
            request["subResource"] = json!(sub);
        }
        let review = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request});
        parse_review(review.to_string().as_bytes()).unwrap()
    }
}

fn groups_of(user: &str) -> Vec<&'static str> {
    match user {
        "alice" => vec!["sre-oncall", "system:authenticated"],
        FLUX => vec![
            "system:serviceaccounts",
            "system:serviceaccounts:flux-system",
        ],
        _ => vec!["system:authenticated"],
    }
}

struct Case {
    name: &'static str,
    req: Req,
    namespace: Option<Value>,
    parent: Option<Value>,
    now: Timestamp,
    allowed: bool,
    rule: Rule,
    message: &'static str,
    /// What API discovery says about the request's resource; by default what a real cluster
    /// says (the kind behind the resource, with a status subresource).
    discovered: Option<DiscoveredResource>,
}

fn case(name: &'static str, req: Req, allowed: bool, rule: Rule) -> Case {
    let discovered = Some(DiscoveredResource {
        kind: match req.resource {
            ("apps", "deployments") => "Deployment".to_owned(),
            _ => req.kind.1.to_owned(),
        },
        has_status: true,
    });
    Case {
        name,
        req,
        namespace: None,
        parent: None,
        now: now(),
        allowed,
        rule,
        message: "",
        discovered,
    }
}

impl Case {
    fn namespace(mut self, labels: Value, annotations: Value) -> Self {
        self.namespace =
            Some(json!({"name": "prod-payments", "labels": labels, "annotations": annotations}));
        self
    }
    fn parent(mut self, parent: Value) -> Self {
        self.parent = Some(parent);
        self
    }
    fn at(mut self, now: &str) -> Self {
        self.now = now.parse().unwrap();
        self
    }
    /// API discovery does not know the resource (no cluster, or a resource it has not seen).
    fn undiscovered(mut self) -> Self {
        self.discovered = None;
        self
    }
    /// Discovery resolves the resource's kind to `kind`.
    fn resolved(mut self, kind: &str) -> Self {
        self.discovered = Some(DiscoveredResource {
            kind: kind.to_owned(),
            has_status: true,
        });
        self
    }
    /// The resource has no status subresource (a CRD without one).
    fn without_status_subresource(mut self) -> Self {
        if let Some(d) = self.discovered.as_mut() {
            d.has_status = false;
        }
        self
    }
    fn says(mut self, fragment: &'static str) -> Self {
        self.message = fragment;
        self
    }
}

fn edited() -> Value {
    deployment(json!({"app": "api"}), json!({}), "api:2", 3)
}

fn cases() -> Vec<Case> {
    let open = || with_window("20261130T1000Z", Some("INC-1: OOM"));
    let open_edited = || {
        deployment(
            json!({"app": "api", LABEL: "20261130T1000Z"}),
            json!({REASON: "INC-1: OOM"}),
            "api:2",
            3,
        )
    };
    vec![
        // 1. Scope.
        case(
            "other namespace",
            Req::update("bob", plain(), edited()).ns("dev"),
            true,
            Rule::OutOfScope,
        ),
        case(
            "excluded namespace",
            Req::update("bob", plain(), edited()).ns("prod-sandbox"),
            true,
            Rule::OutOfScope,
        ),
        case(
            "CONNECT is never guarded",
            Req::update("bob", plain(), edited()).op("CONNECT"),
            true,
            Rule::OutOfScope,
        ),
        case(
            "status subresource is not guarded by default",
            {
                let mut v = plain();
                v["status"]["replicas"] = json!(7);
                let mut r = Req::update("bob", plain(), v);
                r.subresource = Some("status");
                r
            },
            true,
            Rule::OutOfScope,
        ),
        // Judged by effect, not by path: a spec change written through status is a write to
        // the object (the Deployment strategy would drop it; other kinds' need not).
        // Through a subresource the API server starts from the stored managedFields: what
        // differs there is its bookkeeping, never a forgery (tests/SECURITY.md).
        case(
            "a status write's managedFields are the API server's bookkeeping",
            {
                let mut new = owned(plain(), json!({"f:spec": {}}));
                new["status"]["replicas"] = json!(7);
                new["metadata"]["managedFields"][0]["time"] = json!("2026-11-30T09:00:00Z");
                let mut r = Req::update("bob", owned(plain(), json!({"f:spec": {}})), new);
                r.subresource = Some("status");
                r.field_manager = None;
                r
            },
            true,
            Rule::OutOfScope,
        ),
        case(
            "a status write that changes spec is judged as the object",
            {
                let mut r = Req::update("bob", plain(), edited());
                r.subresource = Some("status");
                r
            },
            false,
            Rule::NotPermitted,
        )
        .says("Deployment prod-payments/api (through status)"),
        // The API server keeps labels changed through `status` for many kinds (measured for
        // Service and Namespace in tests/e2e/scenarios/bypass.rs): judged as the object.
        case(
            "a status write that changes a label is judged as the object",
            Req::update(
                "bob",
                plain(),
                deployment(json!({"app": "api", "tier": "x"}), json!({}), "api:1", 3),
            )
            .status(),
            false,
            Rule::NotPermitted,
        )
        .says("bob may not update Deployment prod-payments/api (through status):"),
        case(
            "bob cannot open a window through status",
            Req::update("bob", plain(), with_window("20261130T1000Z", Some("INC-1"))).status(),
            false,
            Rule::BreakGlassRefused,
        ),
        case(
            "alice opening a window through status is judged as opening it",
            Req::update(
                "alice",
                plain(),
                with_window("20261130T1000Z", Some("INC-1")),
            )
            .status(),
            true,
            Rule::BreakGlassOpened,
        ),
        case(
            "the controller changing a label through status is the controller",
            Req::update(
                FLUX,
                plain(),
                deployment(json!({"app": "api", "tier": "x"}), json!({}), "api:1", 3),
            )
            .status(),
            true,
            Rule::Controller,
        ),
        // Discovery does not know the resource: objects of the resource's own group (not a
        // Scale) are taken for the object itself; those of another group are not.
        case(
            "a status write of a kind discovery does not know that changes a label is judged as the object",
            Req::update(
                "bob",
                plain(),
                deployment(json!({"app": "api", "tier": "x"}), json!({}), "api:1", 3),
            )
            .status(),
            false,
            Rule::NotPermitted,
        )
        .undiscovered()
        .says("bob may not update Deployment prod-payments/api (through status):"),
        case(
            "a status write whose objects are of another group is not taken for the object",
            {
                let mut r = Req::update(
                    "bob",
                    plain(),
                    deployment(json!({"app": "api", "tier": "x"}), json!({}), "api:1", 3),
                )
                .status();
                r.kind = ("example.dev", "Deployment");
                r
            },
            true,
            Rule::OutOfScope,
        )
        .undiscovered(),
        case(
            "a status write that changes annotations is judged as the object",
            Req::update(
                "bob",
                plain(),
                deployment(json!({"app": "api"}), json!({"a": "b"}), "api:1", 3),
            )
            .status(),
            false,
            Rule::NotPermitted,
        )
        .says("(through status)"),
        case(
            "namespaces/finalize that adds the break-glass label is judged as the Namespace",
            {
                let r = Req::update(
                    "bob",
                    json!({"apiVersion": "v1", "kind": "Namespace",
                        "metadata": {"name": "prod-payments", "labels": {"team": "payments"}},
                        "spec": {"finalizers": ["kubernetes"]}}),
                    json!({"apiVersion": "v1", "kind": "Namespace",
                        "metadata": {"name": "prod-payments",
                            "labels": {"team": "payments", LABEL: "20261130T1000Z"},
                            "annotations": {REASON: "INC-1: x"}},
                        "spec": {"finalizers": ["kubernetes"]}}),
                );
                r.namespace_finalize()
            },
            false,
            Rule::BreakGlassRefused,
        )
        .says("Namespace prod-payments (through finalize)"),
        case(
            "the namespace controller's finalize changes spec: judged as the Namespace",
            {
                let ns = |finalizers: Value| {
                    json!({"apiVersion": "v1", "kind": "Namespace",
                        "metadata": {"name": "prod-payments"},
                        "spec": {"finalizers": finalizers},
                        "status": {"phase": "Terminating"}})
                };
                let r = Req::update(
                    "system:serviceaccount:kube-system:namespace-controller",
                    ns(json!(["kubernetes"])),
                    {
                        let mut v = ns(json!([]));
                        v["spec"] = json!({});
                        v
                    },
                );
                r.namespace_finalize()
            },
            false,
            Rule::NotPermitted,
        )
        .says("(through finalize)"),
        // driftgate's own records are judged by the ledger's guard, never by a policy's scope
        // (rows at the end of the table).
        case(
            "driftgate's own records are guarded by the ledger, not by the policy",
            Req::record("UPDATE", "bob", Some(record(awaiting())), Some(edit(record(awaiting()), |r| r["spec"]["policy"] = json!("staging")))).ns("prod-payments"),
            false,
            Rule::RecordTampered,
        ),
        case(
            "excluded kind",
            {
                let mut r = Req::update("bob", plain(), edited());
                r.kind = ("", "Event");
                r.resource = ("", "events");
                r
            },
            true,
            Rule::OutOfScope,
        ),
        // 2. Spoofing, even under an open window.
        case(
            "bob claiming Flux's field manager",
            Req::update("bob", plain(), edited()).fm(Some("kustomize-controller")),
            false,
            Rule::FieldManagerSpoofing,
        )
        .says("kustomize-controller"),
        case(
            "opener claiming Flux's field manager under a window",
            Req::update("alice", open(), open_edited()).fm(Some("helm-controller")),
            false,
            Rule::FieldManagerSpoofing,
        ),
        // 3. Controller.
        case(
            "Flux apply",
            Req::update(FLUX, plain(), edited()).fm(Some("kustomize-controller")),
            true,
            Rule::Controller,
        ),
        case(
            "Flux delete carries no field manager",
            Req::update(FLUX, plain(), edited()).op("DELETE").fm(None),
            true,
            Rule::Controller,
        ),
        case(
            "Flux identity with a foreign field manager is not the controller",
            Req::update(FLUX, plain(), edited()).fm(Some("kubectl-edit")),
            false,
            Rule::NotPermitted,
        ),
        case(
            "Flux held by an open window",
            Req::update(FLUX, open(), open_edited()).fm(Some("kustomize-controller")),
            false,
            Rule::ControllerHeld,
        )
        .says("INC-1: OOM"),
        case(
            "Flux held by a namespace window",
            Req::update(FLUX, plain(), edited()).fm(Some("kustomize-controller")),
            false,
            Rule::ControllerHeld,
        )
        .namespace(json!({LABEL: "20261130T1000Z"}), json!({REASON: "INC-2"})),
        case(
            "Flux not held by an expired window",
            Req::update(FLUX, open(), open_edited()).fm(Some("kustomize-controller")),
            true,
            Rule::Controller,
        )
        .at("2026-11-30T10:00:00Z"),
        case(
            "Flux may close the window it is held by",
            Req::update(FLUX, open(), plain()).fm(Some("kustomize-controller")),
            true,
            Rule::BreakGlassClosed,
        ),
        // 4. Delegations.
        case(
            "HPA scales",
            Req::update(HPA, scale(3), scale(6)).scale(),
            true,
            Rule::Delegation,
        ),
        case(
            "HPA changes the image",
            Req::update(HPA, plain(), edited()).fm(Some("kube-controller-manager")),
            false,
            Rule::NotPermitted,
        ),
        case(
            "HPA delegation is limited to the scale subresource",
            Req::update(
                HPA,
                plain(),
                deployment(json!({"app": "api"}), json!({}), "api:1", 6),
            ),
            false,
            Rule::NotPermitted,
        ),
        case(
            "revision annotation",
            Req::update(
                "system:serviceaccount:kube-system:deployment-controller",
                deployment(
                    json!({"app": "api"}),
                    json!({"deployment.kubernetes.io/revision": "7"}),
                    "api:1",
                    3,
                ),
                deployment(
                    json!({"app": "api"}),
                    json!({"deployment.kubernetes.io/revision": "8"}),
                    "api:1",
                    3,
                ),
            ),
            true,
            Rule::Delegation,
        ),
        case(
            "HPA writes the scale it already has: nothing delegated was used",
            Req::update(HPA, scale(3), scale(3)).scale(),
            true,
            Rule::NoEffectiveChange,
        ),
        // 5. No effective change.
        case(
            "only bookkeeping changed",
            Req::update("bob", plain(), {
                let mut v = plain();
                v["metadata"]["resourceVersion"] = json!("101");
                v["status"]["replicas"] = json!(2);
                v
            }),
            true,
            Rule::NoEffectiveChange,
        ),
        // 6. Break-glass metadata.
        case(
            "alice opens a window",
            Req::update(
                "alice",
                plain(),
                with_window("20261130T1000Z", Some("INC-1")),
            ),
            true,
            Rule::BreakGlassOpened,
        ),
        case(
            "carol (opener by name) opens a window",
            Req::update(
                "carol",
                plain(),
                with_window("20261130T1000Z", Some("INC-1")),
            ),
            true,
            Rule::BreakGlassOpened,
        ),
        case(
            "opening with seconds",
            Req::update(
                "alice",
                plain(),
                with_window("20261130T100030Z", Some("INC-1")),
            ),
            true,
            Rule::BreakGlassOpened,
        ),
        case(
            "bob may not open",
            Req::update("bob", plain(), with_window("20261130T1000Z", Some("INC-1"))),
            false,
            Rule::BreakGlassRefused,
        )
        .says("sre-oncall"),
        case(
            "no reason",
            Req::update("alice", plain(), with_window("20261130T1000Z", None)),
            false,
            Rule::BreakGlassRefused,
        )
        .says("reason"),
        case(
            "blank reason",
            Req::update("alice", plain(), with_window("20261130T1000Z", Some("   "))),
            false,
            Rule::BreakGlassRefused,
        )
        .says("reason"),
        case(
            "expiry in the past",
            Req::update(
                "alice",
                plain(),
                with_window("20261130T0800Z", Some("INC-1")),
            ),
            false,
            Rule::BreakGlassRefused,
        )
        .says("not in the future"),
        case(
            "expiry exactly maxDuration away",
            Req::update(
                "alice",
                plain(),
                with_window("20261130T1300Z", Some("INC-1")),
            ),
            true,
            Rule::BreakGlassOpened,
        ),
        // The opener's clock and each replica's may differ by seconds: 60 s of tolerance.
        case(
            "expiry at maxDuration plus 59 s (a replica 59 s behind)",
            Req::update(
                "alice",
                plain(),
                with_window("20261130T130059Z", Some("INC-1")),
            ),
            true,
            Rule::BreakGlassOpened,
        ),
        case(
            "expiry beyond maxDuration and the clock tolerance",
            Req::update(
                "alice",
                plain(),
                with_window("20261130T130101Z", Some("INC-1")),
            ),
            false,
            Rule::BreakGlassRefused,
        )
        .says("maxDuration 4h"),
        case(
            "junk expiry",
            Req::update("alice", plain(), with_window("soon", Some("INC-1"))),
            false,
            Rule::BreakGlassRefused,
        )
        .says("20261130T0930Z"),
        case(
            "junk around a valid expiry",
            Req::update(
                "alice",
                plain(),
                with_window("x20261130T1000Zx", Some("INC-1")),
            ),
            false,
            Rule::BreakGlassRefused,
        )
        .says("\"x20261130T1000Zx\" is not an expiry"),
        case(
            "a far-future expiry",
            Req::update(
                "alice",
                plain(),
                with_window("20991231T0000Z", Some("INC-1")),
            ),
            false,
            Rule::BreakGlassRefused,
        )
        .says("more than maxDuration 4h from now"),
        case(
            "alice opens a window exactly maxDuration and the clock tolerance away",
            Req::update(
                "alice",
                plain(),
                with_window("20261130T1301Z", Some("INC-1")),
            ),
            true,
            Rule::BreakGlassOpened,
        ),
        case(
            "... one minute beyond",
            Req::update(
                "alice",
                plain(),
                with_window("20261130T1302Z", Some("INC-1")),
            ),
            false,
            Rule::BreakGlassRefused,
        )
        .says("more than maxDuration 4h from now"),
        case(
            "alice extends",
            Req::update(
                "alice",
                open(),
                with_window("20261130T1200Z", Some("INC-1: OOM")),
            ),
            true,
            Rule::BreakGlassExtended,
        ),
        case(
            "alice reopens an expired window",
            Req::update(
                "alice",
                with_window("20261130T0800Z", Some("INC-1")),
                with_window("20261130T1000Z", Some("INC-1")),
            ),
            true,
            Rule::BreakGlassOpened,
        ),
        case(
            "alice amends the reason",
            Req::update(
                "alice",
                open(),
                with_window("20261130T1000Z", Some("INC-1: OOM, and disk")),
            ),
            true,
            Rule::BreakGlassAmended,
        )
        // The amended window is the one the warning (and the record) carries.
        .says("break-glass window open on Deployment prod-payments/api until"),
        case(
            "alice may not drop the reason of an open window",
            Req::update("alice", open(), with_window("20261130T1000Z", None)),
            false,
            Rule::BreakGlassRefused,
        ),
        case(
            "alice closes",
            Req::update("alice", open(), plain()),
            true,
            Rule::BreakGlassClosed,
        ),
        case(
            "bob may not close",
            Req::update("bob", open(), plain()),
            false,
            Rule::BreakGlassRefused,
        ),
        case(
            "bob may remove a label past its expiry: it holds no window",
            Req::update("bob", open(), plain()),
            true,
            Rule::BreakGlassClosed,
        )
        .at("2026-11-30T10:00:00Z"),
        case(
            "bob may remove a label that is not an expiry",
            Req::update("bob", with_window("tomorrow", Some("INC-1: OOM")), plain()),
            true,
            Rule::BreakGlassClosed,
        ),
        case(
            "bob may not remove an expired label and edit in one write",
            Req::update("bob", open(), edited()),
            false,
            Rule::WindowExpired,
        )
        .at("2026-11-30T10:00:00Z"),
        case(
            "opening and editing in one write uses no window",
            Req::update("alice", plain(), open_edited()),
            false,
            Rule::NotPermitted,
        ),
        case(
            "extending beyond maxDuration while editing is refused",
            Req::update(
                "alice",
                open(),
                deployment(
                    json!({"app": "api", LABEL: "20261201T0900Z"}),
                    json!({REASON: "INC-1: OOM"}),
                    "api:2",
                    3,
                ),
            ),
            false,
            Rule::BreakGlassRefused,
        ),
        // 7. Windows.
        case(
            "alice edits under the window",
            Req::update("alice", open(), open_edited()),
            true,
            Rule::BreakGlassWindow,
        ),
        case(
            "alice deletes under the window",
            Req::update("alice", open(), Value::Null)
                .op("DELETE")
                .fm(None),
            true,
            Rule::BreakGlassWindow,
        ),
        case(
            "bob may not use alice's window",
            Req::update("bob", open(), open_edited()),
            false,
            Rule::NotPermitted,
        )
        .says("rule NotPermitted). The break-glass window on the object (until"),
        case(
            "window expired",
            Req::update("alice", open(), open_edited()),
            false,
            Rule::WindowExpired,
        )
        .at("2026-11-30T10:00:00Z")
        .says("expired"),
        case(
            "window too long",
            Req::update(
                "alice",
                with_window("20271130T0900Z", Some("INC-1")),
                deployment(
                    json!({"app": "api", LABEL: "20271130T0900Z"}),
                    json!({REASON: "INC-1"}),
                    "api:2",
                    3,
                ),
            ),
            false,
            Rule::WindowTooLong,
        ),
        // An existing window is open up to maxDuration plus the clock tolerance from now, and
        // too long one second beyond (the bound of the webhook's check, `window_state`).
        case(
            "a window exactly maxDuration and the clock tolerance away is open",
            Req::update(
                "alice",
                with_window("20261130T130100Z", Some("INC-1")),
                deployment(
                    json!({"app": "api", LABEL: "20261130T130100Z"}),
                    json!({REASON: "INC-1"}),
                    "api:2",
                    3,
                ),
            ),
            true,
            Rule::BreakGlassWindow,
        ),
        case(
            "a window one second beyond maxDuration and the clock tolerance is too long",
            Req::update(
                "alice",
                with_window("20261130T130101Z", Some("INC-1")),
                deployment(
                    json!({"app": "api", LABEL: "20261130T130101Z"}),
                    json!({REASON: "INC-1"}),
                    "api:2",
                    3,
                ),
            ),
            false,
            Rule::WindowTooLong,
        ),
        case(
            "malformed window label",
            Req::update(
                "alice",
                with_window("never", Some("INC-1")),
                deployment(
                    json!({"app": "api", LABEL: "never"}),
                    json!({REASON: "INC-1"}),
                    "api:2",
                    3,
                ),
            ),
            false,
            Rule::NotPermitted,
        )
        .says("ignored"),
        case(
            "scale under a window on the parent",
            Req::update("alice", scale(3), scale(8)).scale(),
            true,
            Rule::BreakGlassWindow,
        )
        .parent(open()),
        case(
            "scale without the parent has no window",
            Req::update("alice", scale(3), scale(8)).scale(),
            false,
            Rule::NotPermitted,
        ),
        case(
            "namespace window admits alice",
            Req::update("alice", plain(), edited()),
            true,
            Rule::BreakGlassWindow,
        )
        .namespace(json!({LABEL: "20261130T1000Z"}), json!({REASON: "INC-2"})),
        case(
            "namespace window admits alice's create",
            Req::update("alice", Value::Null, edited())
                .op("CREATE")
                .fm(Some("kubectl-create")),
            true,
            Rule::BreakGlassWindow,
        )
        .namespace(json!({LABEL: "20261130T1000Z"}), json!({REASON: "INC-2"})),
        case(
            "create carrying a window label opens nothing",
            Req::update("alice", Value::Null, open_edited())
                .op("CREATE")
                .fm(Some("kubectl-create")),
            false,
            Rule::NotPermitted,
        ),
        case(
            "expired namespace window",
            Req::update("alice", plain(), edited()),
            false,
            Rule::WindowExpired,
        )
        .namespace(json!({LABEL: "20261130T0800Z"}), json!({})),
        // 8. Default.
        case(
            "bob edits",
            Req::update("bob", plain(), edited()),
            false,
            Rule::NotPermitted,
        )
        .says("Change it in Git"),
        case(
            "bob deletes",
            Req::update("bob", plain(), Value::Null)
                .op("DELETE")
                .fm(None),
            false,
            Rule::NotPermitted,
        ),
        // A DELETE of a collection: the API server reviews each object in turn, with an empty
        // name and the object in oldObject (measured in tests/e2e/scenarios/bypass.rs), and
        // stops at the first refusal.
        case(
            "each object of a collection DELETE is named by its oldObject",
            Req::update("bob", plain(), Value::Null).collection(),
            false,
            Rule::NotPermitted,
        )
        .says("bob may not delete Deployment prod-payments/api: only its controllers ("),
        case(
            "alice deletes each object of a collection under a namespace window",
            Req::update("alice", plain(), Value::Null).collection(),
            true,
            Rule::BreakGlassWindow,
        )
        .namespace(json!({LABEL: "20261130T1000Z"}), json!({REASON: "INC-1"})),
        case(
            "bob scales",
            Req::update("bob", scale(3), scale(5)).scale(),
            false,
            Rule::NotPermitted,
        )
        .says("Deployment prod-payments/api (scale)"),
        // Scale of a resource whose kind discovery does not know: guarded, fail closed.
        case(
            "bob scales a resource discovery does not know",
            {
                let mut r = Req::update("bob", scale(3), scale(5)).scale();
                r.resource = ("argoproj.io", "rollouts");
                r
            },
            false,
            Rule::NotPermitted,
        )
        .undiscovered()
        .says("could not resolve the kind behind resource \"rollouts.argoproj.io\""),
        // An empty kind is no kind: never taken as resolved.
        case(
            "bob scales a resource discovery names with an empty kind",
            Req::update("bob", scale(3), scale(5)).scale(),
            false,
            Rule::NotPermitted,
        )
        .resolved("")
        .says("could not resolve the kind behind resource \"deployments\""),
        case(
            "the HPA scales a resource discovery does not know: still its delegation",
            Req::update(HPA, scale(3), scale(5)).scale(),
            true,
            Rule::Delegation,
        )
        .undiscovered(),
        case(
            "bob scales a custom resource discovery resolves",
            {
                let mut r = Req::update("bob", scale(3), scale(5)).scale();
                r.resource = ("argoproj.io", "rollouts");
                r
            },
            false,
            Rule::NotPermitted,
        )
        .resolved("Rollout")
        .says("bob may not update Rollout prod-payments/api (scale)"),
        case(
            "hints name a non-core kind by its fully qualified resource",
            {
                let mut r = Req::update("bob", knative(1), knative(2));
                r.kind = ("serving.knative.dev", "Service");
                r.resource = ("serving.knative.dev", "services");
                r
            },
            false,
            Rule::NotPermitted,
        )
        .says("driftgate break-glass open services.serving.knative.dev/api -n prod-payments"),
        // .status of a kind without a status subresource is stored through the object itself.
        case(
            "bob writes .status of a kind without a status subresource",
            Req::update("bob", plain(), {
                let mut v = plain();
                v["status"]["replicas"] = json!(9);
                v
            }),
            false,
            Rule::NotPermitted,
        )
        .without_status_subresource(),
        case(
            "bob writes .status of a kind discovery does not know: judged",
            Req::update("bob", plain(), {
                let mut v = plain();
                v["status"]["replicas"] = json!(9);
                v
            }),
            false,
            Rule::NotPermitted,
        )
        .undiscovered(),
        // managedFields are ownership.
        case(
            "bob hands spec.replicas to Flux's Apply entry",
            Req::update(
                "bob",
                owned(plain(), json!({"f:spec": {"f:template": {}}})),
                owned(
                    plain(),
                    json!({"f:spec": {"f:template": {}, "f:replicas": {}}}),
                ),
            )
            .fm(Some("kubectl-patch")),
            false,
            Rule::NotPermitted,
        )
        .says("\"kustomize-controller\" (Apply) gained spec.replicas"),
        case(
            "bob renames Flux's managedFields entry",
            Req::update(
                "bob",
                owned(plain(), json!({"f:spec": {"f:replicas": {}}})),
                {
                    let mut v = owned(plain(), json!({"f:spec": {"f:replicas": {}}}));
                    v["metadata"]["managedFields"][0]["manager"] = json!("kustomize-controller-x");
                    v
                },
            )
            .fm(None),
            false,
            Rule::NotPermitted,
        )
        .says("field ownership"),
        case(
            "the API server's bookkeeping of bob's own manager is no change",
            Req::update(
                "bob",
                owned(plain(), json!({"f:spec": {"f:template": {}}})),
                {
                    let mut v = owned(plain(), json!({"f:spec": {"f:template": {}}}));
                    v["metadata"]["managedFields"].as_array_mut().unwrap().push(
                        json!({"manager": "kubectl-edit", "operation": "Update",
                            "apiVersion": "apps/v1", "time": "2026-11-30T09:00:00Z",
                            "fieldsType": "FieldsV1", "fieldsV1": {}}),
                    );
                    v
                },
            ),
            true,
            Rule::NoEffectiveChange,
        ),
        case(
            "Flux may rewrite managedFields",
            Req::update(
                FLUX,
                owned(plain(), json!({"f:spec": {"f:template": {}}})),
                owned(plain(), json!({"f:spec": {}})),
            )
            .fm(Some("kustomize-controller")),
            true,
            Rule::Controller,
        ),
        // Break-glass paths are judged only by the break-glass rules.
        case(
            "a delegation covering labels cannot open a window",
            Req::update(
                "system:serviceaccount:kube-system:labeller",
                plain(),
                with_window("20261130T1000Z", Some("INC-1")),
            ),
            false,
            Rule::BreakGlassRefused,
        ),
        // An UPDATE without both objects cannot be judged: fail closed.
        case(
            "an UPDATE without oldObject",
            {
                let mut r = Req::update("bob", plain(), edited());
                r.old = None;
                r
            },
            false,
            Rule::Unreadable,
        )
        .says("no oldObject"),
        case(
            "an UPDATE by the controller without object",
            {
                let mut r = Req::update(FLUX, plain(), edited());
                r.new = None;
                r.user = FLUX;
                r.field_manager = Some("kustomize-controller");
                r
            },
            false,
            Rule::Unreadable,
        ),
        // Reasons: the hint's placeholder is not a reason.
        case(
            "the hint's placeholder reason copied verbatim",
            Req::update(
                "alice",
                plain(),
                with_window("20261130T1000Z", Some("INC-…: what and why")),
            ),
            false,
            Rule::BreakGlassRefused,
        )
        .says("placeholder"),
        case(
            "the hint's ellipsis left in an otherwise real reason",
            Req::update(
                "alice",
                plain(),
                with_window("20261130T1000Z", Some("INC-…: api OOM")),
            ),
            false,
            Rule::BreakGlassRefused,
        )
        .says("placeholder"),
        case(
            "the placeholder's words with a real ticket",
            Req::update(
                "alice",
                plain(),
                with_window("20261130T1000Z", Some("INC-7: What and why")),
            ),
            false,
            Rule::BreakGlassRefused,
        )
        .says("placeholder"),
        case(
            "bob labels",
            Req::update(
                "bob",
                plain(),
                deployment(json!({"app": "api", "tier": "x"}), json!({}), "api:1", 3),
            )
            .fm(Some("kubectl-label")),
            false,
            Rule::NotPermitted,
        ),
        // driftgate's own backport records, in a namespace no policy guards (decision::ledger_guard).
        case(
            "driftgate creates its record",
            Req::record("CREATE", DRIFTGATE, None, Some(record(awaiting()))),
            true,
            Rule::LedgerWriter,
        ),
        case(
            "bob forges a record",
            Req::record("CREATE", "bob", None, Some(record(awaiting()))),
            false,
            Rule::RecordForged,
        )
        .says("bob may not create BackportRequirement team-a/deployment-api-0123456789: backport records are written only by driftgate itself (system:serviceaccount:driftgate:driftgate)"),
        case(
            "bob deletes a record",
            Req::record("DELETE", "bob", Some(record(awaiting())), None),
            false,
            Rule::RecordErased,
        )
        .says("driftgate backlog resolve deployment-api-0123456789 -n team-a"),
        case(
            "each record of a collection DELETE is named by its oldObject",
            Req::record("DELETE", "bob", Some(record(awaiting())), None).collection(),
            false,
            Rule::RecordErased,
        )
        .says("bob may not delete BackportRequirement team-a/deployment-api-0123456789: "),
        case(
            "an opener deletes a record",
            Req::record("DELETE", "alice", Some(record(awaiting())), None),
            false,
            Rule::RecordErased,
        ),
        case(
            "driftgate deletes a record that has not settled",
            Req::record("DELETE", DRIFTGATE, Some(record(awaiting())), None),
            false,
            Rule::RecordErased,
        )
        .says("deletes only records that have settled"),
        case(
            "driftgate's retention deletes a settled record",
            Req::record("DELETE", DRIFTGATE, Some(record(resolved_by("alice", "09:00:00"))), None),
            true,
            Rule::LedgerWriter,
        ),
        case(
            "the namespace controller deletes a record with its namespace",
            Req::record(
                "DELETE",
                "system:serviceaccount:kube-system:namespace-controller",
                Some(record(awaiting())),
                None,
            ),
            true,
            Rule::RecordDeletedWithNamespace,
        ),
        case(
            "driftgate settles a record",
            Req::record("UPDATE", DRIFTGATE, Some(record(awaiting())), Some(record(with_phase(awaiting(), "Backported")))).status(),
            true,
            Rule::LedgerWriter,
        ),
        case(
            "bob marks a record Backported",
            Req::record("UPDATE", "bob", Some(record(awaiting())), Some(record(with_phase(awaiting(), "Backported")))).status(),
            false,
            Rule::RecordTampered,
        )
        .says("it changes the record's status (phase AwaitingBackport to Backported)"),
        case(
            "an opener resolves with a note, under her name, now",
            Req::record("UPDATE", "alice", Some(record(awaiting())), Some(record(resolved_by("alice", "09:00:30")))).status(),
            true,
            Rule::RecordResolved,
        ),
        case(
            "bob resolves, not an opener",
            Req::record("UPDATE", "bob", Some(record(awaiting())), Some(record(resolved_by("bob", "09:00:00")))).status(),
            false,
            Rule::ResolveRefused,
        )
        .says("only an opener of the policy (user carol; group sre-oncall) may resolve its records"),
        case(
            "an opener resolves without a note",
            Req::record("UPDATE", "alice", Some(record(awaiting())), Some(record(without_note(resolved_by("alice", "09:00:00"))))).status(),
            false,
            Rule::ResolveRefused,
        )
        .says("needs a note"),
        case(
            "an opener resolves in another's name",
            Req::record("UPDATE", "alice", Some(record(awaiting())), Some(record(resolved_by("carol", "09:00:00")))).status(),
            false,
            Rule::ResolveRefused,
        )
        .says("status.resolvedBy must be the resolver's own username (alice)"),
        case(
            "an opener resolves an hour back",
            Req::record("UPDATE", "alice", Some(record(awaiting())), Some(record(resolved_by("alice", "08:00:00")))).status(),
            false,
            Rule::ResolveRefused,
        )
        .says("more than 120s from driftgate's clock"),
        case(
            "an opener resolves and drops the earlier transitions",
            Req::record("UPDATE", "alice", Some(record(awaiting())), Some(record(dropping_history(resolved_by("alice", "09:00:00"))))).status(),
            false,
            Rule::ResolveRefused,
        )
        .says("the transitions so far must be kept"),
        case(
            "an opener resolves a record whose window is still open",
            Req::record("UPDATE", "alice", Some(record_open_until("2026-11-30T10:00:00Z", open_status())), Some(record_open_until("2026-11-30T10:00:00Z", resolved_by("alice", "09:00:00")))).status(),
            false,
            Rule::ResolveRefused,
        )
        .says("its break-glass window is open until"),
        case(
            "an opener resolves two minutes back, to the second",
            Req::record("UPDATE", "alice", Some(record(awaiting())), Some(record(resolved_by("alice", "08:58:00")))).status(),
            true,
            Rule::RecordResolved,
        ),
        case(
            "an opener resolves and rewrites an earlier transition",
            Req::record("UPDATE", "alice", Some(record(awaiting())), Some(record(edit(resolved_by("alice", "09:00:00"), |s| s["transitions"][1]["reason"] = json!("ClosedByOpener"))))).status(),
            false,
            Rule::ResolveRefused,
        )
        .says("the transitions so far must be kept"),
        case(
            "an opener resolves with the Resolved transition at another time than resolvedAt",
            Req::record("UPDATE", "alice", Some(record(awaiting())), Some(record(edit(resolved_by("alice", "09:00:00"), |s| s["transitions"][2]["time"] = json!("2026-11-30T08:59:00Z"))))).status(),
            false,
            Rule::ResolveRefused,
        )
        .says("with one Resolved transition (at resolvedAt, the note as its message) added"),
        case(
            "an opener resolves with a transition message other than the note",
            Req::record("UPDATE", "alice", Some(record(awaiting())), Some(record(edit(resolved_by("alice", "09:00:00"), |s| s["transitions"][2]["message"] = json!("done"))))).status(),
            false,
            Rule::ResolveRefused,
        )
        .says("with one Resolved transition (at resolvedAt, the note as its message) added"),
        case(
            "an opener resolves a record the controller reverted",
            Req::record("UPDATE", "alice", Some(record(reverted())), Some(record(resolved_from(reverted(), "alice", "09:00:00")))).status(),
            true,
            Rule::RecordResolved,
        ),
        case(
            "an opener resolves a reverted record and drops its reverted fields",
            Req::record("UPDATE", "alice", Some(record(reverted())), Some(record(edit(resolved_from(reverted(), "alice", "09:00:00"), |s| { s.as_object_mut().unwrap().remove("revertedFields"); })))).status(),
            false,
            Rule::ResolveRefused,
        )
        .says("a resolution changes only the phase, the note, who, when and the transitions"),
        case(
            "an opener resolves a record still Open whose window has ended (not yet expired by driftgate)",
            Req::record("UPDATE", "alice", Some(record(open_status())), Some(record(resolved_from(open_status(), "alice", "09:00:00")))).status(),
            true,
            Rule::RecordResolved,
        ),
        case(
            "an opener resolves a record whose window ends this very second",
            Req::record("UPDATE", "alice", Some(record_open_until("2026-11-30T09:00:00Z", open_status())), Some(record_open_until("2026-11-30T09:00:00Z", resolved_from(open_status(), "alice", "09:00:00")))).status(),
            true,
            Rule::RecordResolved,
        ),
        case(
            "an opener resolves a record whose window ends in a second",
            Req::record("UPDATE", "alice", Some(record_open_until("2026-11-30T09:00:01Z", open_status())), Some(record_open_until("2026-11-30T09:00:01Z", resolved_from(open_status(), "alice", "09:00:00")))).status(),
            false,
            Rule::ResolveRefused,
        )
        .says("its break-glass window is open until"),
        case(
            "an opener resolves a record Git caught up with",
            Req::record("UPDATE", "alice", Some(record(with_phase(awaiting(), "Backported"))), Some(record(resolved_from(with_phase(awaiting(), "Backported"), "alice", "09:00:00")))).status(),
            false,
            Rule::ResolveRefused,
        )
        .says("it has settled already (Backported)"),
        case(
            "an opener removes who resolved a resolved record",
            Req::record("UPDATE", "alice", Some(record(resolved_by("alice", "09:00:00"))), Some(record(without_resolver(resolved_by("alice", "09:00:00"))))).status(),
            false,
            Rule::RecordTampered,
        ),
        case(
            "an opener edits a record's spec",
            Req::record("UPDATE", "alice", Some(record(awaiting())), Some(edit(record(awaiting()), |r| r["spec"]["changes"] = json!([])))),
            false,
            Rule::RecordTampered,
        )
        .says("it changes spec.changes"),
        case(
            "bob removes the object uid label",
            Req::record("UPDATE", "bob", Some(record(awaiting())), Some(edit(record(awaiting()), |r| r["metadata"]["labels"] = json!({})))),
            false,
            Rule::RecordTampered,
        )
        .says("metadata.labels[driftgate.dev/object-uid]"),
        case(
            "bob hands a record to an owner the garbage collector would delete it with",
            Req::record("UPDATE", "bob", Some(record(awaiting())), Some(edit(record(awaiting()), |r| r["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "c-1"}])))),
            false,
            Rule::RecordTampered,
        )
        .says("metadata.ownerReferences"),
        case(
            "bob annotates a record for his own tooling",
            Req::record("UPDATE", "bob", Some(record(awaiting())), Some(edit(record(awaiting()), |r| r["metadata"]["annotations"] = json!({"example.com/ticket": "OPS-12"})))),
            true,
            Rule::LedgerMetadata,
        ),
        case(
            "bob adds a finalizer to a record",
            Req::record("UPDATE", "bob", Some(record(awaiting())), Some(edit(record(awaiting()), |r| r["metadata"]["finalizers"] = json!(["example.com/keep"])))),
            false,
            Rule::RecordTampered,
        )
        .says("it changes metadata.finalizers"),
        case(
            "bob labels a record for his own tooling",
            Req::record("UPDATE", "bob", Some(record(awaiting())), Some(edit(record(awaiting()), |r| r["metadata"]["labels"]["team"] = json!("payments")))),
            true,
            Rule::LedgerMetadata,
        ),
    ]
}

/// [`POLICY`] with Kubernetes' own controllers, as `policies/example.yaml` lists them: not held
/// by windows, and the service controller delegated its finalizer.
fn kubernetes_policies() -> PolicySet {
    let controllers = r#"  delegations:
"#;
    let kubernetes = r#"    - name: kubernetes
      usernames: ["system:serviceaccount:kube-system:namespace-controller",
        "system:serviceaccount:kube-system:generic-garbage-collector",
        "system:serviceaccount:kube-system:root-ca-cert-publisher",
        "system:kube-controller-manager"]
      heldByWindows: false
  delegations:
    - name: service-controller-finalizer
      usernames: ["system:serviceaccount:kube-system:service-controller"]
      fields: ["metadata.finalizers"]
"#;
    assert!(POLICY.contains(controllers), "POLICY has no delegations");
    PolicySet::from_yaml("inline", &POLICY.replacen(controllers, kubernetes, 1)).unwrap()
}

/// Kubernetes' own controllers (`heldByWindows: false`): a window holds Flux, never them.
fn kubernetes_cases() -> Vec<Case> {
    vec![
        case(
            "the namespace controller deletes under a namespace window",
            Req::update(NAMESPACE_CONTROLLER, plain(), Value::Null).collection(),
            true,
            Rule::Controller,
        )
        .namespace(json!({LABEL: "20261130T1000Z"}), json!({REASON: "INC-2"})),
        case(
            "the namespace controller deletes an object that carries a window",
            Req::update(
                NAMESPACE_CONTROLLER,
                with_window("20261130T1000Z", Some("INC-1: OOM")),
                Value::Null,
            )
            .collection(),
            true,
            Rule::Controller,
        ),
        case(
            "the garbage collector deletes a dependent under a namespace window",
            Req::update(GARBAGE_COLLECTOR, plain(), Value::Null)
                .op("DELETE")
                .fm(None),
            true,
            Rule::Controller,
        )
        .namespace(json!({LABEL: "20261130T1000Z"}), json!({REASON: "INC-2"})),
        case(
            "the root CA publisher creates kube-root-ca.crt under a namespace window",
            Req::update(
                ROOT_CA_PUBLISHER,
                Value::Null,
                root_ca(json!({"ca.crt": "PEM"})),
            )
            .configmap("kube-root-ca.crt")
            .op("CREATE")
            .fm(None),
            true,
            Rule::Controller,
        )
        .namespace(json!({LABEL: "20261130T1000Z"}), json!({REASON: "INC-2"})),
        case(
            "the tokens controller fills in a token Secret under a namespace window",
            Req::update(KCM, token_secret(json!({})), token_secret(filled_token()))
                .secret("api-token")
                .fm(None),
            true,
            Rule::Controller,
        )
        .namespace(json!({LABEL: "20261130T1000Z"}), json!({REASON: "INC-2"})),
        case(
            "the tokens controller deletes a token Secret whose ServiceAccount is gone",
            Req::update(KCM, token_secret(filled_token()), Value::Null)
                .secret("api-token")
                .op("DELETE")
                .fm(None),
            true,
            Rule::Controller,
        ),
        case(
            "Flux is still held by the namespace window the controllers write under",
            Req::update(FLUX, plain(), edited()).fm(Some("kustomize-controller")),
            false,
            Rule::ControllerHeld,
        )
        .namespace(json!({LABEL: "20261130T1000Z"}), json!({REASON: "INC-2"})),
        // The service controller writes through services/status, which keeps metadata changes;
        // judged as the object itself (here built as such), its write is the finalizer only.
        case(
            "the service controller adds its load-balancer cleanup finalizer",
            Req::update(
                SERVICE_CONTROLLER,
                service(json!([])),
                service(json!([LB_CLEANUP])),
            )
            .service()
            .fm(None),
            true,
            Rule::Delegation,
        ),
        case(
            "the service controller adds its finalizer under a namespace window",
            Req::update(
                SERVICE_CONTROLLER,
                service(json!([])),
                service(json!([LB_CLEANUP])),
            )
            .service()
            .fm(None),
            true,
            Rule::Delegation,
        )
        .namespace(json!({LABEL: "20261130T1000Z"}), json!({REASON: "INC-2"})),
        case(
            "the service controller may not change anything else",
            Req::update(SERVICE_CONTROLLER, service(json!([])), {
                let mut svc = service(json!([LB_CLEANUP]));
                svc["spec"]["type"] = json!("NodePort");
                svc
            })
            .service()
            .fm(None),
            false,
            Rule::NotPermitted,
        ),
    ]
}

#[test]
fn kubernetes_controllers_are_never_held() {
    let policies = kubernetes_policies();
    let mut failures = Vec::new();
    for case in kubernetes_cases() {
        let request = case.req.build();
        let namespace: Option<ObjectMeta> =
            case.namespace.map(|v| serde_json::from_value(v).unwrap());
        let decision = decide(
            &policies,
            &DecisionInput {
                request: &RequestFacts::new(&request),
                resource: None,
                namespace: namespace.as_ref(),
                parent: None,
                recent_deletes: None,
                now: case.now,
                silence: None,
            },
        );
        if decision.allowed != case.allowed || decision.record.rule != case.rule {
            failures.push(format!(
                "{}: expected allowed={} rule={}; got allowed={} rule={} message={:?}",
                case.name,
                case.allowed,
                case.rule,
                decision.allowed,
                decision.record.rule,
                decision.message
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

const NAMESPACE_CONTROLLER: &str = "system:serviceaccount:kube-system:namespace-controller";
const GARBAGE_COLLECTOR: &str = "system:serviceaccount:kube-system:generic-garbage-collector";
const ROOT_CA_PUBLISHER: &str = "system:serviceaccount:kube-system:root-ca-cert-publisher";
const SERVICE_CONTROLLER: &str = "system:serviceaccount:kube-system:service-controller";
/// The tokens controller keeps kube-controller-manager's own credentials.
const KCM: &str = "system:kube-controller-manager";
const LB_CLEANUP: &str = "service.kubernetes.io/load-balancer-cleanup";

impl Req {
    fn configmap(mut self, name: &'static str) -> Self {
        self.kind = ("", "ConfigMap");
        self.resource = ("", "configmaps");
        self.name = name;
        self
    }

    fn secret(mut self, name: &'static str) -> Self {
        self.kind = ("", "Secret");
        self.resource = ("", "secrets");
        self.name = name;
        self
    }

    fn service(mut self) -> Self {
        self.kind = ("", "Service");
        self.resource = ("", "services");
        self
    }
}

fn root_ca(data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "kube-root-ca.crt", "namespace": "prod-payments"}, "data": data})
}

/// A service-account-token Secret as Git declares it, with `data` as the tokens controller left it.
fn token_secret(data: Value) -> Value {
    let mut annotations = json!({"kubernetes.io/service-account.name": "api"});
    if data.as_object().is_some_and(|d| !d.is_empty()) {
        annotations["kubernetes.io/service-account.uid"] =
            json!("5e1f0c2a-0b7e-4d55-9a43-1f2e3d4c5b6a");
    }
    json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
        "metadata": {"name": "api-token", "namespace": "prod-payments", "annotations": annotations},
        "data": data})
}

fn filled_token() -> Value {
    json!({"token": "ZXlK", "ca.crt": "LS0t", "namespace": "cHJvZC1wYXltZW50cw=="})
}

fn service(finalizers: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "api", "namespace": "prod-payments", "finalizers": finalizers},
        "spec": {"type": "LoadBalancer", "selector": {"app": "api"},
            "ports": [{"port": 80, "protocol": "TCP", "targetPort": 8080}]}})
}

#[test]
fn every_rule_in_order() {
    let policies = policies();
    let mut failures = Vec::new();
    for case in cases() {
        let request = case.req.build();
        let namespace: Option<ObjectMeta> =
            case.namespace.map(|v| serde_json::from_value(v).unwrap());
        let parent: Option<DynamicObject> = case.parent.map(|v| serde_json::from_value(v).unwrap());
        let decision = decide_with_ledger(
            &policies,
            &DecisionInput {
                request: &RequestFacts::new(&request),
                resource: case.discovered.as_ref(),
                namespace: namespace.as_ref(),
                parent: parent.as_ref(),
                recent_deletes: None,
                now: case.now,
                silence: None,
            },
            &ledger_guard(),
        );
        // The server answers OutOfScope without reading the objects when may_guard says no
        // from the envelope: every write a policy or the ledger judges must pass it.
        if decision.record.rule != Rule::OutOfScope
            && !may_guard(&policies, &request, namespace.as_ref())
        {
            failures.push(format!(
                "{}: judged by rule {}, yet may_guard would have answered OutOfScope unread",
                case.name, decision.record.rule
            ));
        }
        // An admitted write speaks in its warnings (a window's expiry, the backport).
        let said = format!("{} {}", decision.message, decision.warnings.join(" "));
        if decision.allowed != case.allowed
            || decision.record.rule != case.rule
            || !said.contains(case.message)
        {
            failures.push(format!(
                "{}: expected allowed={} rule={} message~{:?}; got allowed={} rule={} message={:?}",
                case.name,
                case.allowed,
                case.rule,
                case.message,
                decision.allowed,
                decision.record.rule,
                said
            ));
        }
        // Every denial says who, what, which policy and rule, and how to proceed.
        if !decision.allowed {
            let m = &decision.message;
            assert!(
                m.contains(case.req.user),
                "{}: message names no user: {m}",
                case.name
            );
            assert!(
                m.contains("policy \"prod\""),
                "{}: message names no policy: {m}",
                case.name
            );
            assert!(
                m.contains(decision.record.rule.as_str()),
                "{}: message names no rule: {m}",
                case.name
            );
            assert!(
                m.ends_with('.'),
                "{}: message is not a sentence: {m}",
                case.name
            );
        }
    }
    assert!(
        failures.is_empty(),
        "{} case(s) failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn warnings_and_records_for_break_glass_use() {
    let request = Req::update(
        "alice",
        with_window("20261130T1000Z", Some("INC-1: OOM")),
        deployment(
            json!({"app": "api", LABEL: "20261130T1000Z"}),
            json!({REASON: "INC-1: OOM"}),
            "api:2",
            3,
        ),
    )
    .build();
    let decision = decide(
        &policies(),
        &DecisionInput {
            request: &RequestFacts::new(&request),
            resource: None,
            namespace: None,
            parent: None,
            recent_deletes: None,
            now: now(),
            silence: None,
        },
    );
    assert!(decision.allowed);
    assert_eq!(decision.warnings.len(), 1);
    assert!(
        decision.warnings[0].contains("backport it to Git"),
        "{:?}",
        decision.warnings
    );
    assert!(
        decision.warnings[0].contains("2026-11-30 10:00 UTC"),
        "{:?}",
        decision.warnings
    );
    let verdict = &decision.record.verdicts[0];
    let window = verdict.window.as_ref().unwrap();
    assert_eq!(window.scope, WindowScope::Object);
    assert_eq!(window.reason.as_deref(), Some("INC-1: OOM"));
    assert_eq!(
        decision.record.changed_fields,
        ["spec.template.spec.containers[0].image"]
    );
    assert_eq!(decision.audit_annotations["decision"], "allowed");
    assert_eq!(decision.verdict_word(), "allowed");
    assert_eq!(decision.audit_annotations["rule"], "BreakGlassWindow");
    assert_eq!(decision.audit_annotations["policy"], "prod");

    let response = decision.to_response(&request);
    assert_eq!(response.uid, "705ab4f5-6393-11e8-b7cc-42010a800002");
    assert!(response.allowed);
    assert_eq!(response.warnings.as_ref().unwrap().len(), 1);
}

#[test]
fn a_close_records_the_window_it_closed() {
    let request = Req::update(
        "alice",
        with_window("20261130T1000Z", Some("INC-1: OOM")),
        plain(),
    )
    .build();
    let decision = decide(
        &policies(),
        &DecisionInput {
            request: &RequestFacts::new(&request),
            resource: None,
            namespace: None,
            parent: None,
            recent_deletes: None,
            now: now(),
            silence: None,
        },
    );
    assert_eq!(decision.record.rule, Rule::BreakGlassClosed);
    let verdict = &decision.record.verdicts[0];
    assert_eq!(
        verdict.window.as_ref().unwrap().label_value,
        "20261130T1000Z"
    );
    assert_eq!(
        verdict.window.as_ref().unwrap().reason.as_deref(),
        Some("INC-1: OOM")
    );
    assert!(verdict.new_window.is_none());
}

#[test]
fn denial_response_is_forbidden_with_the_message() {
    let request = Req::update("bob", plain(), edited()).build();
    let decision = decide(
        &policies(),
        &DecisionInput {
            request: &RequestFacts::new(&request),
            resource: None,
            namespace: None,
            parent: None,
            recent_deletes: None,
            now: now(),
            silence: None,
        },
    );
    let review = serde_json::to_value(decision.to_response(&request).into_review()).unwrap();
    assert_eq!(review["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(review["kind"], "AdmissionReview");
    let response = &review["response"];
    assert_eq!(response["allowed"], false);
    assert_eq!(response["status"]["code"], 403);
    assert!(
        response["status"]["message"]
            .as_str()
            .unwrap()
            .starts_with("bob may not update Deployment prod-payments/api")
    );
    assert_eq!(response["auditAnnotations"]["decision"], "denied");
}

const TWO_POLICIES: &str = r#"
apiVersion: driftgate.dev/v1alpha1
kind: GatePolicy
metadata: {name: flux-only}
spec:
  namespaces: {include: ["prod-*"]}
  controllers: [{name: flux, usernames: ["system:serviceaccount:flux-system:kustomize-controller"]}]
---
apiVersion: driftgate.dev/v1alpha1
kind: GatePolicy
metadata: {name: audit-everything}
spec:
  mode: Audit
  namespaces: {include: ["*"]}
  resources: {include: ["apps/Deployment"]}
  controllers: [{name: argo, usernames: ["system:serviceaccount:argocd:argocd-application-controller"]}]
"#;

#[test]
fn every_matching_policy_must_admit_and_audit_only_warns() {
    let policies = PolicySet::from_yaml("inline", TWO_POLICIES).unwrap();
    let decide_for = |user: &'static str, ns: &'static str| {
        let request = Req::update(user, plain(), edited()).fm(None).ns(ns).build();
        decide(
            &policies,
            &DecisionInput {
                request: &RequestFacts::new(&request),
                resource: None,
                namespace: None,
                parent: None,
                recent_deletes: None,
                now: now(),
                silence: None,
            },
        )
    };
    // Flux: admitted by flux-only, would be denied by the Audit policy: admitted with a warning.
    let d = decide_for(FLUX, "prod-payments");
    assert!(d.allowed);
    assert_eq!(d.warnings.len(), 1, "{:?}", d.warnings);
    assert!(d.warnings[0].contains("audit-everything"));
    assert_eq!(d.audit_annotations["decision"], "allowed-audit");
    // The metrics' and the log line's `decision` is the audit annotation's.
    assert_eq!(d.verdict_word(), "allowed-audit");
    assert_eq!(d.record.verdicts.len(), 2);
    // bob: denied by flux-only; the audit warning still rides along.
    let d = decide_for("bob", "prod-payments");
    assert!(!d.allowed);
    assert_eq!(d.audit_annotations["policy"], "flux-only");
    assert_eq!(d.verdict_word(), "denied");
    // The enforcing policy's refusal is a refusal, not an audit finding: no "would deny" of its
    // own, and the one warning is the Audit policy's.
    let enforcing = d.record.verdicts.iter().find(|v| v.policy == "flux-only");
    assert!(!enforcing.expect("flux-only judged").would_deny);
    assert_eq!(d.warnings.len(), 1, "{:?}", d.warnings);
    assert!(
        d.warnings[0].contains("audit-everything"),
        "{:?}",
        d.warnings
    );
    // Outside prod, only the Audit policy applies.
    let d = decide_for("bob", "dev");
    assert!(d.allowed);
    assert_eq!(d.record.rule, Rule::NotPermitted);
    assert!(d.record.verdicts[0].would_deny);
}

const SELECTED: &str = r#"
apiVersion: driftgate.dev/v1alpha1
kind: GatePolicy
metadata: {name: selected}
spec:
  namespaces: {selector: {matchLabels: {gitops: enforced}}}
  controllers: [{name: flux, groups: ["system:serviceaccounts:flux-system"]}]
"#;

#[test]
fn label_selected_namespaces_fail_closed_when_labels_are_unknown() {
    let policies = PolicySet::from_yaml("inline", SELECTED).unwrap();
    let request = Req::update("bob", plain(), edited()).ns("team-a").build();
    let run = |ns: Option<&ObjectMeta>| {
        decide(
            &policies,
            &DecisionInput {
                request: &RequestFacts::new(&request),
                resource: None,
                namespace: ns,
                parent: None,
                recent_deletes: None,
                now: now(),
                silence: None,
            },
        )
    };
    let enforced: ObjectMeta =
        serde_json::from_value(json!({"name": "team-a", "labels": {"gitops": "enforced"}}))
            .unwrap();
    let free: ObjectMeta =
        serde_json::from_value(json!({"name": "team-a", "labels": {"gitops": "off"}})).unwrap();
    assert!(!run(Some(&enforced)).allowed);
    assert!(run(Some(&free)).allowed);
    assert!(
        !run(None).allowed,
        "unknown labels must not open the namespace"
    );
}

#[test]
fn namespace_objects_are_scoped_by_their_own_name() {
    // Setting the namespace-wide window on the Namespace itself follows the break-glass rules.
    let ns = |labels: Value, annotations: Value| {
        json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "prod-payments", "labels": labels, "annotations": annotations}})
    };
    let mut req = Req::update(
        "bob",
        ns(json!({}), json!({})),
        ns(json!({LABEL: "20261130T1000Z"}), json!({REASON: "INC-9"})),
    );
    req.kind = ("", "Namespace");
    req.resource = ("", "namespaces");
    req.namespace = "";
    let mut request = req.build();
    request.name = "prod-payments".into();
    let run = |request: &kube::core::admission::AdmissionRequest<DynamicObject>| {
        decide(
            &policies(),
            &DecisionInput {
                request: &RequestFacts::new(request),
                resource: None,
                namespace: None,
                parent: None,
                recent_deletes: None,
                now: now(),
                silence: None,
            },
        )
    };
    assert_eq!(run(&request).record.rule, Rule::BreakGlassRefused);
    request.user_info.username = Some("alice".into());
    request.user_info.groups = Some(vec!["sre-oncall".into()]);
    let d = run(&request);
    assert!(d.allowed, "{}", d.message);
    assert_eq!(d.record.rule, Rule::BreakGlassOpened);
}

/// may_guard is conservative, not careless: what no policy judges is answered unread, so that
/// it waits for no read of the API server.
#[test]
fn may_guard_answers_unread_what_no_policy_judges() {
    let policies = policies();
    let event = json!({"apiVersion": "v1", "kind": "Event",
        "metadata": {"name": "api.1", "namespace": "prod-payments"}, "reason": "Scaled"});
    let mut write = Req::update("bob", event.clone(), event);
    write.kind = ("", "Event");
    write.resource = ("", "events");
    write.name = "api.1";
    // An Event in a guarded namespace: the policy's resources leave Events out.
    assert!(!may_guard(&policies, &write.build(), None));
    // A Deployment in a namespace the policy does not guard.
    let elsewhere = Req::update("bob", plain(), edited()).ns("dev");
    assert!(!may_guard(&policies, &elsewhere.build(), None));
    // The Deployment in the guarded namespace is read.
    let guarded = Req::update("bob", plain(), edited());
    assert!(may_guard(&policies, &guarded.build(), None));
    // Under a policy that guards only creation, its update is not; its delete is, for the
    // policy's deletions, which judge deletes whatever its operations say.
    let creates_only = PolicySet::from_yaml(
        "inline",
        &(POLICY.to_owned() + "  deletions: {}\n  operations: [CREATE]\n"),
    )
    .unwrap();
    assert!(!may_guard(&creates_only, &guarded.build(), None));
    assert!(may_guard(
        &creates_only,
        &Req::delete("bob", plain()).build(),
        None
    ));
}

/// `breakGlass.reasonPattern`: every reason must match it (e.g. a ticket id).
#[test]
fn a_policy_can_require_a_reason_pattern() {
    let yaml = POLICY.replace(
        "    maxDuration: 4h\n",
        "    maxDuration: 4h\n    reasonPattern: '^INC-[0-9]+: .+'\n",
    );
    let policies = PolicySet::from_yaml("inline", &yaml).unwrap();
    let open = |reason: &'static str| {
        let request = Req::update(
            "alice",
            plain(),
            with_window("20261130T1000Z", Some(reason)),
        )
        .build();
        decide(
            &policies,
            &DecisionInput {
                request: &RequestFacts::new(&request),
                resource: None,
                namespace: None,
                parent: None,
                recent_deletes: None,
                now: now(),
                silence: None,
            },
        )
    };
    let refused = open("fixing stuff");
    assert!(!refused.allowed);
    assert_eq!(refused.record.rule, Rule::BreakGlassRefused);
    assert!(
        refused
            .message
            .contains("does not match the policy's reasonPattern ^INC-[0-9]+: .+"),
        "{}",
        refused.message
    );
    let opened = open("INC-4711: api OOM, scaled to 8");
    assert!(opened.allowed, "{}", opened.message);
    assert_eq!(opened.record.rule, Rule::BreakGlassOpened);

    let bad = POLICY.replace(
        "    maxDuration: 4h\n",
        "    maxDuration: 4h\n    reasonPattern: '^INC-[0-9+'\n",
    );
    let error = PolicySet::from_yaml("inline", &bad)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("spec.breakGlass.reasonPattern")
            && error.contains("not a valid regular expression"),
        "{error}"
    );
}

/// A reason of any length leaves the warning's instruction whole, within the 256 characters
/// the API server keeps, with no control character.
#[test]
fn a_long_reason_gives_way_in_the_warning() {
    let reason = format!("INC-9: a\nb {}", "x".repeat(5000));
    let request = Req::update(
        "alice",
        with_window("20261130T1000Z", Some(&reason)),
        deployment(
            json!({"app": "api", LABEL: "20261130T1000Z"}),
            json!({REASON: reason}),
            "api:2",
            3,
        ),
    )
    .build();
    let decision = decide(
        &policies(),
        &DecisionInput {
            request: &RequestFacts::new(&request),
            resource: None,
            namespace: None,
            parent: None,
            recent_deletes: None,
            now: now(),
            silence: None,
        },
    );
    let warning = &decision.warnings[0];
    assert!(warning.chars().count() <= 256, "{warning}");
    assert!(!warning.chars().any(char::is_control), "{warning}");
    assert!(warning.contains("INC-9: a\\nb x"), "{warning}");
    assert!(
        warning.ends_with("backport it to Git before the window closes."),
        "{warning}"
    );
}

#[test]
fn kubernetes_controllers_never_need_the_parent_of_a_subresource() {
    // A controller that no window holds decides the same with or without the parent's labels,
    // so its subresource writes cost no GET; Flux's still do.
    let policies = kubernetes_policies();
    let for_user = |user: &'static str| {
        let request = Req::update(user, scale(3), scale(5)).scale().build();
        let decision = decide(
            &policies,
            &DecisionInput {
                request: &RequestFacts::new(&request),
                resource: None,
                namespace: None,
                parent: None,
                recent_deletes: None,
                now: now(),
                silence: None,
            },
        );
        assert_eq!(decision.record.rule, Rule::Controller, "{user}");
        driftgate::decision::needs_parent(&policies, &decision)
    };
    assert!(!for_user(GARBAGE_COLLECTOR));
    assert!(for_user(FLUX));
}

#[test]
fn a_refused_subresource_write_needs_the_parent_for_its_window() {
    // A Scale carries no labels: bob refused on `scale` may still be under a window on the
    // Deployment, which only the parent shows; without break-glass rules there is none to find.
    let request = Req::update("bob", scale(3), scale(5)).scale().build();
    let decide_under = |policies: &PolicySet| {
        let decision = decide(
            policies,
            &DecisionInput {
                request: &RequestFacts::new(&request),
                resource: None,
                namespace: None,
                parent: None,
                recent_deletes: None,
                now: now(),
                silence: None,
            },
        );
        assert_eq!(decision.record.rule, Rule::NotPermitted);
        driftgate::decision::needs_parent(policies, &decision)
    };
    assert!(decide_under(&policies()));
    let head = POLICY
        .split("  breakGlass:")
        .next()
        .expect("the policy has a head");
    let without_break_glass = PolicySet::from_yaml("inline", head).expect("the policy loads");
    assert!(!decide_under(&without_break_glass));
}

/// driftgate's own identity, and who may change the records' CRD, as `serve` is told them.
const DRIFTGATE: &str = "system:serviceaccount:driftgate:driftgate";

fn ledger_guard() -> LedgerGuard {
    LedgerGuard {
        writer: Some(DRIFTGATE.to_owned()),
        crd_admin_users: vec!["platform-admin".to_owned()],
        crd_admin_groups: vec!["system:masters".to_owned()],
    }
}

impl Req {
    /// A write of BackportRequirement team-a/deployment-api-0123456789 (a namespace no policy
    /// guards: records are guarded everywhere).
    fn record(
        operation: &'static str,
        user: &'static str,
        old: Option<Value>,
        new: Option<Value>,
    ) -> Self {
        Req {
            operation,
            user,
            groups: groups_of(user),
            field_manager: None,
            namespace: "team-a",
            kind: ("driftgate.dev", "BackportRequirement"),
            resource: ("driftgate.dev", "backportrequirements"),
            subresource: None,
            name: "deployment-api-0123456789",
            old,
            new,
        }
    }

    /// A write of the records' CRD (or of another, `name`).
    fn crd(
        operation: &'static str,
        user: &'static str,
        name: &'static str,
        old: Value,
        new: Option<Value>,
    ) -> Self {
        Req {
            operation,
            user,
            groups: match user {
                "admin" => vec!["system:masters", "system:authenticated"],
                _ => vec!["system:authenticated"],
            },
            field_manager: None,
            namespace: "",
            kind: ("apiextensions.k8s.io", "CustomResourceDefinition"),
            resource: ("apiextensions.k8s.io", "customresourcedefinitions"),
            subresource: None,
            name,
            old: Some(old),
            new,
        }
    }
}

/// A record of a window on Deployment api that ended at 08:30 (now is 09:00), with `status`.
fn record(status: Value) -> Value {
    record_open_until("2026-11-30T08:30:00Z", status)
}

fn record_open_until(expires_at: &str, status: Value) -> Value {
    json!({
        "apiVersion": "driftgate.dev/v1alpha1", "kind": "BackportRequirement",
        "metadata": {"name": "deployment-api-0123456789", "namespace": "team-a", "uid": "r-1",
            "resourceVersion": "7", "labels": {"driftgate.dev/object-uid": "d-1"}},
        "spec": {
            "object": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "api", "uid": "d-1"},
            "scope": "Object",
            "window": {"opener": "alice", "reason": "INC-1: OOM", "openedAt": "2026-11-30T08:00:00Z",
                "expiresAt": expires_at, "labelValue": "20261130T0830Z"},
            "policy": "prod",
            "changes": [{"time": "2026-11-30T08:10:00Z", "user": "alice", "operation": "UPDATE",
                "requestUid": "u-1", "fields": [{"path": "spec.replicas", "digest": "sha256:00"}]}]
        },
        "status": status
    })
}

fn open_status() -> Value {
    json!({"phase": "Open", "transitions": [
        {"phase": "Open", "time": "2026-11-30T08:00:00Z", "reason": "Opened"}]})
}

fn awaiting() -> Value {
    json!({"phase": "AwaitingBackport", "transitions": [
        {"phase": "Open", "time": "2026-11-30T08:00:00Z", "reason": "Opened"},
        {"phase": "AwaitingBackport", "time": "2026-11-30T08:30:00Z", "reason": "Expired"}]})
}

fn with_phase(mut status: Value, phase: &str) -> Value {
    status["phase"] = json!(phase);
    status
}

/// The controller reverted the change after the window expired.
fn reverted() -> Value {
    json!({"phase": "Reverted", "revertedFields": ["spec.replicas"], "transitions": [
        {"phase": "Open", "time": "2026-11-30T08:00:00Z", "reason": "Opened"},
        {"phase": "AwaitingBackport", "time": "2026-11-30T08:30:00Z", "reason": "Expired"},
        {"phase": "Reverted", "time": "2026-11-30T08:40:00Z", "reason": "ControllerRevertedChange"}]})
}

/// `awaiting()` resolved by `user` at `time` (on 2026-11-30) as `driftgate backlog resolve` writes it.
fn resolved_by(user: &str, time: &str) -> Value {
    resolved_from(awaiting(), user, time)
}

/// `status` resolved by `user` at `time` (on 2026-11-30) as `driftgate backlog resolve` writes it.
fn resolved_from(mut status: Value, user: &str, time: &str) -> Value {
    let at = format!("2026-11-30T{time}Z");
    let note = "backported in payments-gitops#412";
    status["phase"] = json!("Resolved");
    status["resolutionNote"] = json!(note);
    status["resolvedBy"] = json!(user);
    status["resolvedAt"] = json!(at);
    status["transitions"].as_array_mut().unwrap().push(
        json!({"phase": "Resolved", "time": at, "reason": "ResolvedByPerson", "message": note}),
    );
    status
}

fn without_note(mut status: Value) -> Value {
    status.as_object_mut().unwrap().remove("resolutionNote");
    status
}

fn without_resolver(mut status: Value) -> Value {
    status.as_object_mut().unwrap().remove("resolvedBy");
    status
}

fn dropping_history(mut status: Value) -> Value {
    status["transitions"].as_array_mut().unwrap().remove(0);
    status
}

fn edit(mut object: Value, change: impl FnOnce(&mut Value)) -> Value {
    change(&mut object);
    object
}

fn records_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "backportrequirements.driftgate.dev", "uid": "crd-1", "resourceVersion": "3"},
        "spec": {"group": "driftgate.dev", "scope": "Namespaced",
            "names": {"plural": "backportrequirements", "kind": "BackportRequirement"},
            "versions": [{"name": "v1alpha1", "served": true, "storage": true}]}
    })
}

#[test]
fn the_records_crd_changes_only_by_its_admins() {
    let policies = policies();
    let judge = |req: Req| {
        let request = req.build();
        decide_with_ledger(
            &policies,
            &DecisionInput {
                request: &RequestFacts::new(&request),
                resource: None,
                namespace: None,
                parent: None,
                recent_deletes: None,
                now: now(),
                silence: None,
            },
            &ledger_guard(),
        )
    };
    let carl = |op, new| {
        Req::crd(
            op,
            "carl",
            "backportrequirements.driftgate.dev",
            records_crd(),
            new,
        )
    };

    let deleted = judge(carl("DELETE", None));
    assert!(!deleted.allowed);
    assert_eq!(deleted.record.rule, Rule::LedgerCrdProtected);
    assert!(
        deleted.message.starts_with("carl may not delete CustomResourceDefinition backportrequirements.driftgate.dev: deleting it deletes every BackportRequirement"),
        "{}",
        deleted.message
    );
    assert!(
        deleted
            .message
            .contains("users platform-admin; groups system:masters"),
        "{}",
        deleted.message
    );

    let served_no_more = edit(records_crd(), |c| {
        c["spec"]["versions"][0]["served"] = json!(false)
    });
    let changed = judge(carl("UPDATE", Some(served_no_more.clone())));
    assert_eq!(
        (changed.allowed, changed.record.rule),
        (false, Rule::LedgerCrdProtected)
    );
    assert!(
        changed.message.contains("spec.versions[0].served"),
        "{}",
        changed.message
    );

    let labelled = edit(records_crd(), |c| {
        c["metadata"]["labels"] = json!({"team": "platform"})
    });
    let relabelled = judge(carl("UPDATE", Some(labelled)));
    assert_eq!(
        (relabelled.allowed, relabelled.record.rule),
        (true, Rule::LedgerMetadata)
    );

    let by_admin = judge(Req::crd(
        "DELETE",
        "admin",
        "backportrequirements.driftgate.dev",
        records_crd(),
        None,
    ));
    assert_eq!(
        (by_admin.allowed, by_admin.record.rule),
        (true, Rule::LedgerCrdAdmin)
    );
    let by_named_user = judge(Req::crd(
        "UPDATE",
        "platform-admin",
        "backportrequirements.driftgate.dev",
        records_crd(),
        Some(served_no_more),
    ));
    assert_eq!(
        (by_named_user.allowed, by_named_user.record.rule),
        (true, Rule::LedgerCrdAdmin)
    );

    // An update the API server sent without the new object cannot be judged, and is refused.
    let unreadable = judge(carl("UPDATE", None));
    assert_eq!(
        (unreadable.allowed, unreadable.record.rule),
        (false, Rule::LedgerCrdProtected)
    );
    assert!(
        unreadable.message.starts_with("carl may not update CustomResourceDefinition backportrequirements.driftgate.dev: the request does not carry both versions of it, so it cannot be judged"),
        "{}",
        unreadable.message
    );

    // Being deleted already (by an admin): the API server's removal of its finalizer passes.
    let deleting = edit(records_crd(), |c| {
        c["metadata"]["deletionTimestamp"] = json!("2026-11-30T08:59:00Z")
    });
    let finalized = judge(Req::crd(
        "UPDATE",
        "system:apiserver",
        "backportrequirements.driftgate.dev",
        deleting.clone(),
        Some(edit(deleting, |c| c["metadata"]["finalizers"] = json!([]))),
    ));
    assert_eq!(
        (finalized.allowed, finalized.record.rule),
        (true, Rule::LedgerCrdAdmin)
    );

    // Any other CRD is none of the ledger's business.
    let other = judge(Req::crd(
        "DELETE",
        "carl",
        "rollouts.argoproj.io",
        records_crd(),
        None,
    ));
    assert_eq!((other.allowed, other.record.rule), (true, Rule::OutOfScope));
}

#[test]
fn without_a_known_identity_nobody_writes_records() {
    // `driftgate eval` and a serve that could not tell who it is: `decide` trusts no writer.
    let request = Req::record("CREATE", DRIFTGATE, None, Some(record(awaiting()))).build();
    let decision = decide(
        &policies(),
        &DecisionInput {
            request: &RequestFacts::new(&request),
            resource: None,
            namespace: None,
            parent: None,
            recent_deletes: None,
            now: now(),
            silence: None,
        },
    );
    assert_eq!(
        (decision.allowed, decision.record.rule),
        (false, Rule::RecordForged)
    );
    assert!(
        decision.message.contains("set serve --service-account"),
        "{}",
        decision.message
    );
}

#[test]
fn a_record_whose_policy_is_gone_is_resolved_only_by_the_crds_admins() {
    let retired = |status| edit(record(status), |r| r["spec"]["policy"] = json!("retired"));
    let policies = policies();
    let judge = |user| {
        let request = Req::record(
            "UPDATE",
            user,
            Some(retired(awaiting())),
            Some(retired(resolved_by(user, "09:00:00"))),
        )
        .status()
        .build();
        decide_with_ledger(
            &policies,
            &DecisionInput {
                request: &RequestFacts::new(&request),
                resource: None,
                namespace: None,
                parent: None,
                recent_deletes: None,
                now: now(),
                silence: None,
            },
            &ledger_guard(),
        )
    };
    let alice = judge("alice");
    assert_eq!(
        (alice.allowed, alice.record.rule),
        (false, Rule::ResolveRefused)
    );
    assert!(
        alice.message.contains("policy \"retired\" is not loaded by driftgate, so its openers are unknown; only the CRD's admins (users platform-admin; groups system:masters) may resolve its records"),
        "{}",
        alice.message
    );
    let admin = judge("platform-admin");
    assert_eq!(
        (admin.allowed, admin.record.rule),
        (true, Rule::RecordResolved)
    );
}

/// [`POLICY`] with `deletions` (the default kinds, a limit of 3 per minute), PVCs left out of
/// `resources` as the example policy leaves them.
fn deletions_policies(mode: &str) -> PolicySet {
    PolicySet::from_yaml("inline", &deletions_text(mode)).unwrap()
}

fn deletions_text(mode: &str) -> String {
    POLICY
        .replace(
            r#"resources: {exclude: ["core/Event"]}"#,
            r#"resources: {exclude: ["core/Event", "core/PersistentVolumeClaim"]}"#,
        )
        .replace("  owner:", &format!("  mode: {mode}\n  owner:"))
        + "  deletions:\n    controllerLimit: {deletes: 3, per: 1m}\n"
}

/// PersistentVolumeClaim prod-payments/data with `labels` and `annotations`.
fn pvc(labels: Value, annotations: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data", "namespace": "prod-payments", "uid": "pvc-1",
            "labels": labels, "annotations": annotations},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}})
}

impl Req {
    /// A DELETE of `old` by `user` (no field manager: a DELETE carries none).
    fn delete(user: &'static str, old: Value) -> Self {
        let mut req = Req::update(user, old, Value::Null).fm(None).op("DELETE");
        req.new = None;
        req
    }

    fn pvc(mut self) -> Self {
        self.kind = ("", "PersistentVolumeClaim");
        self.resource = ("", "persistentvolumeclaims");
        self.name = "data";
        self
    }

    fn namespace_object(mut self, name: &'static str) -> Self {
        self.kind = ("", "Namespace");
        self.resource = ("", "namespaces");
        self.namespace = "";
        self.name = name;
        self
    }
}

/// Decides `case` under `policies` with `recent` as the controllers' recent deletes.
fn decided(
    policies: &PolicySet,
    case: &Case,
    recent: Option<&driftgate::deletions::RecentDeletes>,
) -> driftgate::decision::Decision {
    let request = case.req.build();
    let namespace: Option<ObjectMeta> = case
        .namespace
        .clone()
        .map(|v| serde_json::from_value(v).unwrap());
    decide(
        policies,
        &DecisionInput {
            request: &RequestFacts::new(&request),
            resource: case.discovered.as_ref(),
            namespace: namespace.as_ref(),
            parent: None,
            recent_deletes: recent,
            silence: None,
            now: case.now,
        },
    )
}

fn check(
    policies: &PolicySet,
    cases: Vec<Case>,
    recent: Option<&driftgate::deletions::RecentDeletes>,
) {
    let mut failures = Vec::new();
    for case in cases {
        let decision = decided(policies, &case, recent);
        // As in every_rule_in_order: a write judged by any rule must pass may_guard, which
        // the server asks first, from the envelope alone, to answer OutOfScope unread.
        let namespace: Option<ObjectMeta> = case
            .namespace
            .clone()
            .map(|v| serde_json::from_value(v).unwrap());
        if decision.record.rule != Rule::OutOfScope
            && !may_guard(policies, &case.req.build(), namespace.as_ref())
        {
            failures.push(format!(
                "{}: judged by rule {}, yet may_guard would have answered OutOfScope unread",
                case.name, decision.record.rule
            ));
        }
        // An Audit policy's refusal is a warning.
        let said = format!("{} {}", decision.message, decision.warnings.join(" "));
        if decision.allowed != case.allowed
            || decision.record.rule != case.rule
            || !said.contains(case.message)
        {
            failures.push(format!(
                "{}: expected allowed={} rule={} saying {:?}; got allowed={} rule={} message={:?}",
                case.name,
                case.allowed,
                case.rule,
                case.message,
                decision.allowed,
                decision.record.rule,
                said
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn protected_deletes_need_a_deliberate_act_whoever_asks() {
    let allow = json!({"driftgate.dev/allow-deletion": "true"});
    let window = json!({LABEL: "20261130T1000Z"});
    let cases = vec![
        case(
            "Flux prunes a PVC",
            Req::delete(FLUX, pvc(json!({}), json!({}))).pvc(),
            false,
            Rule::DeletionProtected,
        )
        .says("Controller flux"),
        case(
            "bob deletes a PVC",
            Req::delete("bob", pvc(json!({}), json!({}))).pvc(),
            false,
            Rule::DeletionProtected,
        )
        .says("bob may not delete PersistentVolumeClaim prod-payments/data: the policy protects every PersistentVolumeClaim from deletion by anyone, the GitOps controller included, unless deleting it is a deliberate act (policy \"prod\", rule DeletionProtected). If it is meant, mark it first, in Git or with kubectl annotate persistentvolumeclaim/data -n prod-payments driftgate.dev/allow-deletion=true, or delete it under a break-glass window (user carol; group sre-oncall may open one: driftgate break-glass open persistentvolumeclaim/data -n prod-payments --for 1h"),
        // Only deletes are protected, and only where the policy guards.
        case(
            "bob labels a PVC: an update, which deletion protection does not judge",
            Req::update(
                "bob",
                pvc(json!({}), json!({})),
                pvc(json!({"tier": "gold"}), json!({})),
            )
            .pvc(),
            true,
            Rule::OutOfScope,
        ),
        case(
            "Flux prunes a PVC marked for deletion (PVCs are otherwise out of scope)",
            Req::delete(FLUX, pvc(json!({}), allow.clone())).pvc(),
            true,
            Rule::OutOfScope,
        ),
        case(
            "a mark other than \"true\" is no mark",
            Req::delete(FLUX, pvc(json!({}), json!({"driftgate.dev/allow-deletion": "yes"}))).pvc(),
            false,
            Rule::DeletionProtected,
        ),
        case(
            "an opener deletes a PVC under a window on it",
            Req::delete("alice", pvc(window.clone(), json!({REASON: "INC-9: disk full"}))).pvc(),
            true,
            Rule::OutOfScope,
        ),
        case(
            "Flux under that window is refused still",
            Req::delete(FLUX, pvc(window.clone(), json!({REASON: "INC-9: disk full"}))).pvc(),
            false,
            Rule::DeletionProtected,
        ),
        case(
            "bob under that window is no opener",
            Req::delete("bob", pvc(window, json!({REASON: "INC-9: disk full"}))).pvc(),
            false,
            Rule::DeletionProtected,
        ),
        case(
            "an opener under a namespace-wide window",
            Req::delete("alice", pvc(json!({}), json!({}))).pvc(),
            true,
            Rule::OutOfScope,
        )
        .namespace(json!({LABEL: "20261130T1000Z"}), json!({REASON: "INC-2"})),
        case(
            "the namespace controller empties a namespace being deleted",
            Req::delete(NAMESPACE_CONTROLLER, pvc(json!({}), json!({}))).pvc(),
            true,
            Rule::OutOfScope,
        ),
        case(
            "the garbage collector deletes what a deleted owner held",
            Req::delete(GARBAGE_COLLECTOR, pvc(json!({}), json!({}))).pvc(),
            true,
            Rule::OutOfScope,
        ),
        case(
            "a PVC outside the policy's namespaces",
            Req::delete(FLUX, pvc(json!({}), json!({}))).pvc().ns("prod-sandbox"),
            true,
            Rule::OutOfScope,
        ),
        case(
            "Flux prunes a Deployment: not a protected kind",
            Req::delete(FLUX, plain()),
            true,
            Rule::Controller,
        ),
        case(
            "Flux deletes a Namespace",
            Req::delete(FLUX, json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "prod-payments"}}))
                .namespace_object("prod-payments"),
            false,
            Rule::DeletionProtected,
        )
        .says("kubectl annotate namespace/prod-payments driftgate.dev/allow-deletion=true"),
        case(
            "Flux deletes a Namespace that Git marked for deletion",
            Req::delete(FLUX, json!({"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": "prod-payments", "annotations": allow}}))
                .namespace_object("prod-payments"),
            true,
            Rule::Controller,
        ),
    ];
    check(&deletions_policies("Enforce"), cases, None);
    // Where a policy judges suspensions only (flux-system), its deletion protection does not
    // reach: the namespace is judged, but not guarded.
    let with_suspensions = PolicySet::from_yaml(
        "inline",
        &(deletions_text("Enforce") + "  suspensions: {}\n"),
    )
    .unwrap();
    let flux_system = vec![case(
        "Flux prunes a PVC where the policy judges suspensions only",
        Req::delete(FLUX, pvc(json!({}), json!({})))
            .pvc()
            .ns("flux-system"),
        true,
        Rule::OutOfScope,
    )];
    check(&with_suspensions, flux_system, None);

    // Audit only warns, with the same words.
    let audit = vec![
        case(
            "Flux prunes a PVC under Audit",
            Req::delete(FLUX, pvc(json!({}), json!({}))).pvc(),
            true,
            Rule::DeletionProtected,
        )
        .says("would deny in Enforce mode"),
    ];
    check(&deletions_policies("Audit"), audit, None);
    // Without a `deletions` section nothing is protected.
    check(
        &policies(),
        vec![case(
            "Flux prunes a PVC where deletions are not configured",
            Req::delete(FLUX, pvc(json!({}), json!({}))).pvc(),
            true,
            Rule::Controller,
        )],
        None,
    );
}

#[test]
fn the_controllers_deletes_stop_at_the_limit_in_the_namespace() {
    let policies = deletions_policies("Enforce");
    let configmap = || {
        Req::delete(
            FLUX,
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "settings", "namespace": "prod-payments"}}),
        )
        .configmap("settings")
    };
    let ago = |seconds: i64| now() - jiff::SignedDuration::from_secs(seconds);
    let recent = |times: Vec<Timestamp>| -> driftgate::deletions::RecentDeletes {
        [("prod".to_owned(), times)].into()
    };
    check(
        &policies,
        vec![case(
            "two deletes in the last minute",
            configmap(),
            true,
            Rule::Controller,
        )],
        Some(&recent(vec![ago(50), ago(10)])),
    );
    check(
        &policies,
        vec![case("three in the last minute", configmap(), false, Rule::DeletionLimit).says(
            "Controller flux (system:serviceaccount:flux-system:kustomize-controller) may not delete ConfigMap prod-payments/settings: \
             it deleted 3 objects in prod-payments within 1m, the policy's limit (spec.deletions.controllerLimit: 3 per 1m) (policy \"prod\", rule DeletionLimit). \
             A prune this large is stopped",
        )],
        Some(&recent(vec![ago(50), ago(30), ago(10)])),
    );
    check(
        &policies,
        vec![case(
            "three, one of them over a minute ago",
            configmap(),
            true,
            Rule::Controller,
        )],
        Some(&recent(vec![ago(61), ago(30), ago(10)])),
    );
    // The limit is the controllers': anybody else is judged by the other rules.
    let mut bobs = configmap();
    bobs.user = "bob";
    bobs.groups = groups_of("bob");
    check(
        &policies,
        vec![case(
            "bob, after three of Flux's",
            bobs,
            false,
            Rule::NotPermitted,
        )],
        Some(&recent(vec![ago(50), ago(30), ago(10)])),
    );
    // Kubernetes' own controllers (`heldByWindows: false`) are never limited: the namespace
    // controller empties a namespace being deleted, whatever it holds.
    let with_kubernetes = PolicySet::from_yaml(
        "inline",
        &deletions_text("Enforce").replacen(
            "  delegations:\n",
            &format!(
                "    - name: kubernetes\n      usernames: [\"{ROOT_CA_PUBLISHER}\"]\n      heldByWindows: false\n  delegations:\n"
            ),
            1,
        ),
    )
    .unwrap();
    let mut publishers = configmap();
    publishers.user = ROOT_CA_PUBLISHER;
    publishers.groups = groups_of(ROOT_CA_PUBLISHER);
    check(
        &with_kubernetes,
        vec![case(
            "Kubernetes' controller, after three deletes",
            publishers,
            true,
            Rule::Controller,
        )],
        Some(&recent(vec![ago(50), ago(30), ago(10)])),
    );
    // Another policy's tally does not count.
    check(
        &policies,
        vec![case(
            "another policy's deletes",
            configmap(),
            true,
            Rule::Controller,
        )],
        Some(&[("staging".to_owned(), vec![ago(50), ago(30), ago(10)])].into()),
    );
}

/// [`POLICY`] with a `suspensions` section of the documented defaults (flux-system, argocd).
fn suspensions_policies(mode: &str) -> PolicySet {
    let text =
        POLICY.replace("  owner:", &format!("  mode: {mode}\n  owner:")) + "  suspensions: {}\n";
    PolicySet::from_yaml("inline", &text).unwrap()
}

/// Kustomization flux-system/apps, `spec.suspend` as given (absent for None).
fn kustomization(suspend: Option<bool>, labels: Value, annotations: Value) -> Value {
    let mut spec = json!({"interval": "10m", "path": "./apps", "prune": true,
        "sourceRef": {"kind": "GitRepository", "name": "flux-system"}});
    if let Some(suspend) = suspend {
        spec["suspend"] = json!(suspend);
    }
    json!({"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
        "metadata": {"name": "apps", "namespace": "flux-system", "uid": "k-1",
            "labels": labels, "annotations": annotations},
        "spec": spec})
}

/// Application argocd/shop, its `syncPolicy` as given.
fn application(sync_policy: Value, labels: Value, annotations: Value) -> Value {
    json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": "shop", "namespace": "argocd", "uid": "a-1",
            "labels": labels, "annotations": annotations},
        "spec": {"project": "default", "syncPolicy": sync_policy,
            "source": {"repoURL": "https://git.example/shop", "path": "deploy"}}})
}

impl Req {
    fn kustomization(mut self) -> Self {
        self.kind = ("kustomize.toolkit.fluxcd.io", "Kustomization");
        self.resource = ("kustomize.toolkit.fluxcd.io", "kustomizations");
        self.namespace = "flux-system";
        self.name = "apps";
        self
    }

    fn application(mut self) -> Self {
        self.kind = ("argoproj.io", "Application");
        self.resource = ("argoproj.io", "applications");
        self.namespace = "argocd";
        self.name = "shop";
        self
    }
}

#[test]
fn a_suspension_is_a_break_glass_window_and_resuming_is_always_admitted() {
    let none = || json!({});
    let until = |at: &str| json!({LABEL: at});
    let why = || json!({REASON: "INC-7: flux keeps reverting the hotfix"});
    let running = || kustomization(None, none(), none());
    let suspended =
        |labels: Value, annotations: Value| kustomization(Some(true), labels, annotations);
    let window_open = || suspended(until("20261130T1000Z"), why());
    let reconcile_disabled = |labels: Value| {
        let mut d = deployment(
            labels,
            json!({"kustomize.toolkit.fluxcd.io/reconcile": "disabled"}),
            "api:1",
            3,
        );
        d["metadata"]["annotations"][REASON] = json!("INC-8: keep the hotfix");
        d
    };
    let healing = || json!({"automated": {"prune": true, "selfHeal": true}});
    let cases = vec![
        case(
            "alice suspends a Kustomization without an expiry (kubectl patch)",
            Req::update("alice", running(), suspended(none(), none())).kustomization(),
            false,
            Rule::SuspensionRefused,
        )
        .says("alice may not suspend Kustomization flux-system/apps: it has no expiry: a suspension is a break-glass window, and needs the label driftgate.dev/break-glass with its expiry (e.g. 20261130T0930Z, at most maxDuration 4h from now) and the reason annotation driftgate.dev/break-glass-reason (policy \"prod\", rule SuspensionRefused). Suspend it with driftgate suspend kustomization/apps -n flux-system --for 1h --reason \"INC-…: what and why\" (user carol; group sre-oncall may), and resume it with driftgate resume kustomization/apps -n flux-system"),
        case(
            "alice suspends it with an expiry and a reason (driftgate suspend)",
            Req::update("alice", running(), window_open()).kustomization(),
            true,
            Rule::Suspended,
        )
        .says("driftgate: Kustomization flux-system/apps suspended (spec.suspend) until 2026-11-30 10:00 UTC (20261130T1000Z); resume it with driftgate resume kustomization/apps -n flux-system"),
        case(
            "without a reason",
            Req::update("alice", running(), suspended(until("20261130T1000Z"), none())).kustomization(),
            false,
            Rule::SuspensionRefused,
        )
        .says("a reason is required: set the annotation driftgate.dev/break-glass-reason"),
        case(
            "with the hint's placeholder for a reason",
            Req::update("alice", running(), suspended(until("20261130T1000Z"), json!({REASON: "INC-…: what and why"}))).kustomization(),
            false,
            Rule::SuspensionRefused,
        )
        .says("is the placeholder from driftgate's hint"),
        case(
            "beyond maxDuration",
            Req::update("alice", running(), suspended(until("20261201T0900Z"), why())).kustomization(),
            false,
            Rule::SuspensionRefused,
        )
        .says("the expiry 20261201T0900Z (2026-12-01 09:00 UTC) is more than maxDuration 4h from now; the latest allowed is"),
        case(
            "with an expiry already past",
            Req::update("alice", running(), suspended(until("20261130T0800Z"), why())).kustomization(),
            false,
            Rule::SuspensionRefused,
        )
        .says("is not in the future"),
        case(
            "with a label that is no expiry",
            Req::update("alice", running(), suspended(until("tomorrow"), why())).kustomization(),
            false,
            Rule::SuspensionRefused,
        )
        .says("the label driftgate.dev/break-glass:"),
        case(
            "bob is no opener",
            Req::update("bob", running(), window_open()).kustomization(),
            false,
            Rule::SuspensionRefused,
        )
        .says("a suspension is a break-glass window, which only user carol; group sre-oncall may open"),
        case(
            "under a window already open on the Kustomization",
            Req::update("alice", kustomization(None, until("20261130T1000Z"), why()), window_open()).kustomization(),
            true,
            Rule::Suspended,
        ),
        case(
            "the suspension is extended",
            Req::update("alice", window_open(), suspended(until("20261130T1200Z"), why())).kustomization(),
            true,
            Rule::Suspended,
        ),
        case(
            "its expiry removed while it stays suspended",
            Req::update("alice", window_open(), suspended(none(), why())).kustomization(),
            false,
            Rule::SuspensionRefused,
        ),
        case(
            "bob resumes it, removing the expiry and the reason (driftgate resume)",
            Req::update("bob", window_open(), kustomization(Some(false), none(), none())).kustomization(),
            true,
            Rule::Resumed,
        ),
        case(
            "a suspension past its expiry is resumed too",
            Req::update("bob", suspended(until("20261130T0800Z"), why()), kustomization(None, until("20261130T0800Z"), why())).kustomization(),
            true,
            Rule::Resumed,
        ),
        case(
            "Flux applies a suspension from Git: the controller's own write",
            Req::update(FLUX, running(), suspended(none(), none())).kustomization().fm(Some("kustomize-controller")),
            true,
            Rule::OutOfScope,
        ),
        case(
            "another change to a suspended Kustomization is no suspension",
            Req::update("bob", window_open(), {
                let mut k = window_open();
                k["spec"]["interval"] = json!("1m");
                k
            })
            .kustomization(),
            true,
            Rule::OutOfScope,
        ),
        case(
            "creating a suspended Kustomization stops nothing that ran",
            {
                let mut req = Req::update("bob", Value::Null, suspended(none(), none())).kustomization().op("CREATE");
                req.old = None;
                req
            },
            true,
            Rule::OutOfScope,
        ),
        case(
            "a Kustomization outside the GitOps and guarded namespaces",
            Req::update("bob", running(), suspended(none(), none())).kustomization().ns("team-a"),
            true,
            Rule::OutOfScope,
        ),
        case(
            "Flux's reconcile annotation on a guarded Deployment without a window",
            Req::update("alice", plain(), reconcile_disabled(json!({"app": "api"}))),
            false,
            Rule::SuspensionRefused,
        )
        .says("alice may not suspend Deployment prod-payments/api: it has no expiry"),
        case(
            "the reconcile annotation with a window opened in the same write",
            Req::update("alice", plain(), reconcile_disabled(json!({"app": "api", LABEL: "20261130T1000Z"}))),
            true,
            Rule::Suspended,
        )
        .says("suspended (annotation kustomize.toolkit.fluxcd.io/reconcile)"),
        case(
            "the annotation and an image change: a suspension is judged on its own",
            Req::update("alice", plain(), {
                let mut d = reconcile_disabled(json!({"app": "api", LABEL: "20261130T1000Z"}));
                d["spec"]["template"]["spec"]["containers"][0]["image"] = json!("api:2");
                d
            }),
            false,
            Rule::SuspensionRefused,
        )
        .says("may change nothing else"),
        case(
            "Argo CD's automated sync removed without an expiry",
            Req::update("alice", application(healing(), none(), none()), application(json!({}), none(), none())).application(),
            false,
            Rule::SuspensionRefused,
        )
        .says("driftgate suspend application/shop -n argocd --for 1h"),
        case(
            "Argo CD's self-heal turned off with an expiry and a reason",
            Req::update("alice", application(healing(), none(), none()),
                application(json!({"automated": {"prune": true, "selfHeal": false}}), until("20261130T1000Z"), why())).application(),
            true,
            Rule::Suspended,
        )
        .says("suspended (spec.syncPolicy.automated.selfHeal)"),
        case(
            "Argo CD's skip-reconcile annotation without an expiry",
            Req::update("alice", application(healing(), none(), none()),
                application(healing(), none(), json!({"argocd.argoproj.io/skip-reconcile": "true"}))).application(),
            false,
            Rule::SuspensionRefused,
        ),
        case(
            "Argo CD's automated sync restored",
            Req::update("bob", application(json!({}), until("20261130T1000Z"), why()), application(healing(), none(), none())).application(),
            true,
            Rule::Resumed,
        ),
    ];
    check(&suspensions_policies("Enforce"), cases, None);

    let audit = vec![
        case(
            "a suspension without an expiry under Audit",
            Req::update("alice", running(), suspended(none(), none())).kustomization(),
            true,
            Rule::SuspensionRefused,
        )
        .says("would deny in Enforce mode"),
    ];
    check(&suspensions_policies("Audit"), audit, None);
    // Without a `suspensions` section, flux-system is not guarded.
    check(
        &policies(),
        vec![case(
            "a suspension where suspensions are not configured",
            Req::update("alice", running(), suspended(none(), none())).kustomization(),
            true,
            Rule::OutOfScope,
        )],
        None,
    );
}

const ARGOCD: &str = "system:serviceaccount:argocd:argocd-application-controller";

/// Application argocd/shop as an app-of-apps applies it client-side: `sync_policy` in the spec,
/// `git_sync_policy` in the last-applied configuration, which the managedFields entry of
/// `manager` owns.
fn applied_application(sync_policy: Value, git_sync_policy: Value, manager: &str) -> Value {
    let mut git = application(git_sync_policy, json!({}), json!({}));
    git["metadata"] = json!({"name": "shop", "namespace": "argocd"});
    let mut object = application(
        sync_policy,
        json!({}),
        json!({"kubectl.kubernetes.io/last-applied-configuration": git.to_string()}),
    );
    object["metadata"]["managedFields"] = json!([{
        "manager": manager, "operation": "Update", "apiVersion": "argoproj.io/v1alpha1",
        "time": "2026-11-30T08:00:00Z", "fieldsType": "FieldsV1",
        "fieldsV1": {"f:metadata": {"f:annotations": {".": {},
            "f:kubectl.kubernetes.io/last-applied-configuration": {}}},
            "f:spec": {"f:project": {}, "f:source": {}, "f:syncPolicy": {}}}}]);
    object
}

#[test]
fn the_controllers_suspension_against_what_it_applied_from_git_is_refused() {
    let text = POLICY.replace(
        "  controllers:\n",
        "  controllers:\n    - name: argocd\n      usernames: [\"system:serviceaccount:argocd:argocd-application-controller\"]\n      fieldManagers: [\"argocd-controller\"]\n    - name: argocd-applicationset\n      usernames: [\"system:serviceaccount:argocd:argocd-applicationset-controller\"]\n",
    ) + "  suspensions: {}\n";
    let policies = PolicySet::from_yaml("inline", &text).unwrap();
    let healing = || json!({"automated": {"prune": true, "selfHeal": true}});
    let turned_off = || json!({"automated": {"prune": true, "selfHeal": true, "enabled": false}});
    // Argo CD's normalization as Argo CD sends it: a merge patch without a field manager.
    let normalized = |old: Value, new: Value| Req::update(ARGOCD, old, new).application().fm(None);
    let cases = vec![
        case(
            "Argo CD's normalization from a copy older than the resume removes automated",
            normalized(
                applied_application(healing(), healing(), "argocd-controller"),
                applied_application(Value::Null, healing(), "argocd-controller"),
            ),
            false,
            Rule::SuspensionAgainstGit,
        )
        .says("Controller argocd (system:serviceaccount:argocd:argocd-application-controller) may not suspend Application argocd/shop: its write suspends it by spec.syncPolicy.automated, which the configuration it last applied from Git (kubectl.kubernetes.io/last-applied-configuration) does not: a write made from a stale copy of the object, such as Argo CD's normalization from its cache (policy \"prod\", rule SuspensionAgainstGit). Nothing to do: the controller writes again from the object as stored. To suspend it, commit the suspension to Git, or use driftgate suspend application/shop -n argocd --for 1h"),
        case(
            "the controller turns automated sync off that Git declares on",
            normalized(
                applied_application(healing(), healing(), "argocd-controller"),
                applied_application(turned_off(), healing(), "argocd-controller"),
            ),
            false,
            Rule::SuspensionAgainstGit,
        )
        .says("by spec.syncPolicy.automated.enabled, which"),
        case(
            "Git removes automated: the apply writes it with its configuration",
            Req::update(
                ARGOCD,
                applied_application(healing(), healing(), "argocd-controller"),
                applied_application(json!({}), json!({}), "argocd-controller"),
            )
            .application()
            .fm(Some("argocd-controller")),
            true,
            Rule::OutOfScope,
        ),
        case(
            "Git turns automated sync off",
            Req::update(
                ARGOCD,
                applied_application(healing(), healing(), "argocd-controller"),
                applied_application(turned_off(), turned_off(), "argocd-controller"),
            )
            .application()
            .fm(Some("argocd-controller")),
            true,
            Rule::OutOfScope,
        ),
        case(
            "applied by somebody else: nothing the controller applied to contradict",
            normalized(
                applied_application(healing(), healing(), "kubectl-client-side-apply"),
                applied_application(Value::Null, healing(), "kubectl-client-side-apply"),
            ),
            true,
            Rule::OutOfScope,
        ),
        case(
            "an ApplicationSet that adopted it removes automated: what argocd applied is not its word",
            Req::update(
                "system:serviceaccount:argocd:argocd-applicationset-controller",
                applied_application(healing(), healing(), "argocd-controller"),
                applied_application(Value::Null, healing(), "argocd-controller"),
            )
            .application()
            .fm(None),
            true,
            Rule::OutOfScope,
        ),
        case(
            "an empty syncPolicy normalized away suspends nothing new",
            normalized(
                applied_application(json!({}), healing(), "argocd-controller"),
                applied_application(Value::Null, healing(), "argocd-controller"),
            ),
            true,
            Rule::OutOfScope,
        ),
        case(
            "alice's suspension is judged as a window, whatever Git declares",
            Req::update(
                "alice",
                applied_application(healing(), healing(), "argocd-controller"),
                applied_application(Value::Null, healing(), "argocd-controller"),
            )
            .application(),
            false,
            Rule::SuspensionRefused,
        ),
    ];
    check(&policies, cases, None);
}

/// Deployment prod-payments/api with `labels` and `annotations` added to its own, and the window
/// (label and reason) open on it when `window` says so.
fn marked(labels: Value, annotations: Value, window: bool) -> Value {
    let mut d = plain();
    if window {
        d = with_window("20261130T1000Z", Some("INC-9: flux would undo the hotfix"));
    }
    for (place, marks) in [("labels", labels), ("annotations", annotations)] {
        for (key, value) in marks.as_object().unwrap() {
            d["metadata"][place][key] = value.clone();
        }
    }
    d
}

#[test]
fn every_spelling_the_controllers_honour_is_judged_as_a_suspension() {
    const RECONCILE: &str = "kustomize.toolkit.fluxcd.io/reconcile";
    const SSA: &str = "kustomize.toolkit.fluxcd.io/ssa";
    const SKIP: &str = "argocd.argoproj.io/skip-reconcile";
    let none = || json!({});
    let open = || with_window("20261130T1000Z", Some("INC-9: flux would undo the hotfix"));
    let bob_marks = |labels: Value, annotations: Value| {
        Req::update("bob", plain(), marked(labels, annotations, false))
    };
    let until = |at: &str| json!({LABEL: at});
    let why = || json!({REASON: "INC-7: argo keeps reverting the hotfix"});
    let healing = || json!({"automated": {"prune": true, "selfHeal": true}});
    let turned_off = || json!({"automated": {"prune": true, "selfHeal": true, "enabled": false}});
    let mut cases = Vec::new();
    // Flux reads both keys as labels and as annotations, values in any case (Go's
    // strings.EqualFold: a long s folds to s).
    for (what, labels, annotations) in [
        (
            "bob's annotation reconcile: Disabled on a guarded Deployment",
            none(),
            json!({RECONCILE: "Disabled"}),
        ),
        (
            "bob's annotation reconcile: DISABLED on a guarded Deployment",
            none(),
            json!({RECONCILE: "DISABLED"}),
        ),
        (
            "bob's annotation reconcile: diſabled (a long s) on a guarded Deployment",
            none(),
            json!({RECONCILE: "diſabled"}),
        ),
        (
            "bob's label reconcile: disabled on a guarded Deployment",
            json!({RECONCILE: "disabled"}),
            none(),
        ),
        (
            "bob's label reconcile: Disabled on a guarded Deployment",
            json!({RECONCILE: "Disabled"}),
            none(),
        ),
        (
            "bob's annotation ssa: Ignore on a guarded Deployment",
            none(),
            json!({SSA: "Ignore"}),
        ),
        (
            "bob's annotation ssa: ignore on a guarded Deployment",
            none(),
            json!({SSA: "ignore"}),
        ),
        (
            "bob's label ssa: IGNORE on a guarded Deployment",
            json!({SSA: "IGNORE"}),
            none(),
        ),
    ] {
        cases.push(
            case(
                what,
                bob_marks(labels, annotations),
                false,
                Rule::SuspensionRefused,
            )
            .says("bob may not suspend Deployment prod-payments/api: a suspension is a break-glass window, which only user carol; group sre-oncall may open"),
        );
    }
    cases.extend([
        case(
            "alice's ssa: Ignore under the window open on the Deployment",
            Req::update("alice", open(), marked(none(), json!({SSA: "Ignore"}), true)),
            true,
            Rule::Suspended,
        )
        .says("driftgate: Deployment prod-payments/api suspended (annotation kustomize.toolkit.fluxcd.io/ssa) until 2026-11-30 10:00 UTC (20261130T1000Z); resume it with driftgate resume deployment/api -n prod-payments"),
        case(
            "alice's label reconcile: Disabled with the window opened in the same write",
            Req::update("alice", plain(), marked(json!({RECONCILE: "Disabled"}), none(), true)),
            true,
            Rule::Suspended,
        )
        .says("suspended (label kustomize.toolkit.fluxcd.io/reconcile)"),
        case(
            "alice's ssa: Ignore without a window",
            Req::update("alice", plain(), marked(none(), json!({SSA: "Ignore"}), false)),
            false,
            Rule::SuspensionRefused,
        )
        .says("alice may not suspend Deployment prod-payments/api: it has no expiry"),
        case(
            "alice's ssa: Ignore under a namespace-wide window: a suspension's expiry is on the object",
            Req::update("alice", plain(), marked(none(), json!({SSA: "Ignore"}), false)),
            false,
            Rule::SuspensionRefused,
        )
        .namespace(json!({LABEL: "20261130T1000Z"}), json!({REASON: "INC-2"}))
        .says("it has no expiry"),
        case(
            "alice's ssa: Ignore and an image change under the window: not recorded as an ordinary change",
            Req::update("alice", open(), {
                let mut d = marked(none(), json!({SSA: "Ignore"}), true);
                d["spec"]["template"]["spec"]["containers"][0]["image"] = json!("api:2");
                d
            }),
            false,
            Rule::SuspensionRefused,
        )
        .says("alice may not suspend Deployment prod-payments/api: a write that suspends the GitOps controller may change nothing else, and this one also changes spec.template.spec.containers"),
        case(
            "alice's ssa: Ignore and three other changes: the three named, none more",
            Req::update("alice", open(), {
                let mut d = marked(json!({"team": "payments"}), json!({SSA: "Ignore"}), true);
                d["spec"]["template"]["spec"]["containers"][0]["image"] = json!("api:2");
                d["spec"]["replicas"] = json!(5);
                d
            }),
            false,
            Rule::SuspensionRefused,
        )
        .says("and this one also changes metadata.labels.team, spec.replicas, spec.template.spec.containers[0].image; suspend it on its own first"),
        case(
            "alice's ssa: Ignore and four other changes: three named, and one more",
            Req::update("alice", open(), {
                let mut d = marked(json!({"team": "payments"}), json!({SSA: "Ignore", "note": "x"}), true);
                d["spec"]["template"]["spec"]["containers"][0]["image"] = json!("api:2");
                d["spec"]["replicas"] = json!(5);
                d
            }),
            false,
            Rule::SuspensionRefused,
        )
        .says("and this one also changes metadata.labels.team, metadata.annotations.note, spec.replicas, 1 more; suspend it on its own first"),
        case(
            "bob's ssa: Ignore and an image change: not an opener, so told that first",
            Req::update("bob", plain(), {
                let mut d = marked(none(), json!({SSA: "Ignore"}), false);
                d["spec"]["template"]["spec"]["containers"][0]["image"] = json!("api:2");
                d
            }),
            false,
            Rule::SuspensionRefused,
        )
        .says("which only user carol; group sre-oncall may open"),
        // Not suspensions: Flux still applies.
        case(
            "alice's ssa: IfNotPresent under the window: Flux reads it on Git's object only",
            Req::update("alice", open(), marked(none(), json!({SSA: "IfNotPresent"}), true)),
            true,
            Rule::BreakGlassWindow,
        ),
        case(
            "alice's ssa: Merge under the window",
            Req::update("alice", open(), marked(none(), json!({SSA: "Merge"}), true)),
            true,
            Rule::BreakGlassWindow,
        ),
        case(
            "bob's reconcile: dısabled (a dotless i, which Go does not fold to i)",
            bob_marks(none(), json!({RECONCILE: "dısabled"})),
            false,
            Rule::NotPermitted,
        ),
        case(
            "bob's reconcile: enabled",
            bob_marks(none(), json!({RECONCILE: "enabled"})),
            false,
            Rule::NotPermitted,
        ),
        case(
            "bob's key in another case: Flux compares keys exactly",
            bob_marks(none(), json!({"kustomize.toolkit.fluxcd.io/Reconcile": "disabled"})),
            false,
            Rule::NotPermitted,
        ),
        // Resuming any of them is free; respelling one is no suspension, but a change.
        case(
            "bob removes ssa: Ignore with the window's label and reason",
            Req::update("bob", marked(none(), json!({SSA: "Ignore"}), true), plain()),
            true,
            Rule::Resumed,
        ),
        case(
            "bob removes the label form",
            Req::update("bob", marked(json!({RECONCILE: "DISABLED"}), none(), true), plain()),
            true,
            Rule::Resumed,
        ),
        case(
            "bob respells ssa: Ignore as IGNORE: still suspended, and a change of his",
            Req::update(
                "bob",
                marked(none(), json!({SSA: "Ignore"}), true),
                marked(none(), json!({SSA: "IGNORE"}), true),
            ),
            false,
            Rule::NotPermitted,
        ),
        case(
            "a delegation covering every annotation may not suspend Flux with one",
            {
                let mut req = Req::update(
                    "system:serviceaccount:kube-system:labeller",
                    plain(),
                    marked(none(), json!({SSA: "Ignore"}), false),
                );
                req.field_manager = Some("labeller");
                req
            },
            false,
            Rule::SuspensionRefused,
        ),
        case(
            "bob's ssa: Ignore through deployments/status, which keeps annotations",
            Req::update("bob", plain(), marked(none(), json!({SSA: "Ignore"}), false)).status(),
            false,
            Rule::SuspensionRefused,
        )
        .says("bob may not suspend Deployment prod-payments/api (through status): a suspension is a break-glass window"),
        case(
            "alice's ssa: Ignore through deployments/status under the window: a suspension, not an ordinary change",
            Req::update("alice", open(), marked(none(), json!({SSA: "Ignore"}), true)).status(),
            true,
            Rule::Suspended,
        )
        .says("suspended (annotation kustomize.toolkit.fluxcd.io/ssa)"),
        case(
            "Flux applies ssa: Ignore from Git: the controller's own write",
            Req::update(FLUX, plain(), marked(none(), json!({SSA: "Ignore"}), false))
                .fm(Some("kustomize-controller")),
            true,
            Rule::Controller,
        ),
        case(
            "bob's label reconcile: Disabled on a Kustomization in flux-system",
            Req::update(
                "bob",
                kustomization(None, none(), none()),
                kustomization(None, json!({RECONCILE: "Disabled"}), none()),
            )
            .kustomization(),
            false,
            Rule::SuspensionRefused,
        )
        .says("bob may not suspend Kustomization flux-system/apps"),
        // Argo CD 3: automated sync turned off by `enabled: false`.
        case(
            "alice turns Argo CD's automated sync off (enabled: false) without an expiry",
            Req::update(
                "alice",
                application(healing(), none(), none()),
                application(turned_off(), none(), none()),
            )
            .application(),
            false,
            Rule::SuspensionRefused,
        )
        .says("alice may not suspend Application argocd/shop: it has no expiry"),
        case(
            "alice turns it off with an expiry and a reason",
            Req::update(
                "alice",
                application(healing(), none(), none()),
                application(turned_off(), until("20261130T1000Z"), why()),
            )
            .application(),
            true,
            Rule::Suspended,
        )
        .says("suspended (spec.syncPolicy.automated.enabled) until"),
        case(
            "bob turns it back on: resuming is free",
            Req::update(
                "bob",
                application(turned_off(), until("20261130T1000Z"), why()),
                application(json!({"automated": {"prune": true, "selfHeal": true, "enabled": true}}), none(), none()),
            )
            .application(),
            true,
            Rule::Resumed,
        ),
        case(
            "bob's enabled: true where it was absent: no suspension either way",
            Req::update(
                "bob",
                application(healing(), none(), none()),
                application(json!({"automated": {"prune": true, "selfHeal": true, "enabled": true}}), none(), none()),
            )
            .application(),
            true,
            Rule::OutOfScope,
        ),
        case(
            "bob's skip-reconcile: \"1\" (Go's strconv.ParseBool)",
            Req::update(
                "bob",
                application(healing(), none(), none()),
                application(healing(), none(), json!({SKIP: "1"})),
            )
            .application(),
            false,
            Rule::SuspensionRefused,
        ),
        case(
            "bob's skip-reconcile: \"True\"",
            Req::update(
                "bob",
                application(healing(), none(), none()),
                application(healing(), none(), json!({SKIP: "True"})),
            )
            .application(),
            false,
            Rule::SuspensionRefused,
        ),
        case(
            "bob's skip-reconcile: \"yes\", which Argo CD does not read as true",
            Req::update(
                "bob",
                application(healing(), none(), none()),
                application(healing(), none(), json!({SKIP: "yes"})),
            )
            .application(),
            true,
            Rule::OutOfScope,
        ),
    ]);
    check(&suspensions_policies("Enforce"), cases, None);
}

#[test]
fn suspensions_need_break_glass_rules_and_valid_definitions() {
    let without_break_glass =
        POLICY.split("  breakGlass:").next().unwrap().to_owned() + "  suspensions: {}\n";
    let error = PolicySet::from_yaml("inline", &without_break_glass)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains(
            "spec.suspensions: needs spec.breakGlass: a suspension is a break-glass window"
        ),
        "{error}"
    );
    let bad = POLICY.to_owned()
        + "  suspensions:\n    fields:\n      - {kinds: [Kustomization], path: metadata.labels, suspendedWhen: isTrue}\n      - {kinds: [\"example.dev/Widget\"], path: status.suspended, suspendedWhen: isTrue}\n    annotations:\n      - {key: \"not a key\", value: \"x\"}\n";
    let error = PolicySet::from_yaml("inline", &bad)
        .unwrap_err()
        .to_string();
    for expected in [
        "spec.suspensions.fields[0].kinds[0]: \"Kustomization\" must be \"group/Kind\"",
        "spec.suspensions.fields[0].path: \"metadata.labels\" must name a field outside metadata",
        "spec.suspensions.fields[1].path: \"status.suspended\" is under status, which the controller reports",
        "spec.suspensions.annotations[0].key: \"not a key\" is not a valid annotation key",
    ] {
        assert!(error.contains(expected), "{expected}\n{error}");
    }
    let custom = POLICY.to_owned()
        + "  suspensions:\n    namespaces: [gitops]\n    fields:\n      - {kinds: [\"example.dev/*\"], path: spec.paused, suspendedWhen: isTrue}\n    annotations: []\n";
    PolicySet::from_yaml("inline", &custom).unwrap();
}

#[test]
fn suspension_labels_and_annotations_say_how_their_values_compare() {
    let with = |section: &str| POLICY.to_owned() + "  suspensions:\n" + section;
    // Existing policies keep loading: `value` alone compares exactly.
    let exact = with(
        "    annotations:\n      - {key: example.dev/paused, value: \"yes\"}\n    labels: []\n",
    );
    let policies = PolicySet::from_yaml("inline", &exact).unwrap();
    let rules = policies.policies()[0].suspensions.as_ref().unwrap();
    assert!(rules.annotations[0].matches("yes") && !rules.annotations[0].matches("YES"));
    assert!(rules.labels.is_empty());
    // ignoreCase and values.
    let folded = with(
        "    annotations:\n      - {key: example.dev/paused, values: [\"yes\", \"on\"], ignoreCase: true}\n    labels:\n      - {key: example.dev/paused, value: \"yes\", ignoreCase: true}\n",
    );
    let policies = PolicySet::from_yaml("inline", &folded).unwrap();
    let rules = policies.policies()[0].suspensions.as_ref().unwrap();
    assert!(
        ["yes", "YES", "On", "oN"]
            .iter()
            .all(|v| rules.annotations[0].matches(v))
    );
    assert!(!rules.annotations[0].matches("yes please"));
    assert!(rules.labels[0].matches("Yes"));
    // The defaults: Flux's two keys as labels and annotations in any case, Argo CD's as an
    // annotation read as a boolean.
    let defaults = suspensions_policies("Enforce");
    let rules = defaults.policies()[0].suspensions.as_ref().unwrap();
    let keys = |markers: &[driftgate::policy::suspensions::SuspensionMarker]| {
        markers.iter().map(|m| m.key.clone()).collect::<Vec<_>>()
    };
    assert_eq!(
        keys(&rules.annotations),
        [
            "kustomize.toolkit.fluxcd.io/reconcile",
            "kustomize.toolkit.fluxcd.io/ssa",
            "argocd.argoproj.io/skip-reconcile"
        ]
    );
    assert_eq!(
        keys(&rules.labels),
        [
            "kustomize.toolkit.fluxcd.io/reconcile",
            "kustomize.toolkit.fluxcd.io/ssa"
        ]
    );
    let about_suspensions = |policies: &PolicySet| -> Vec<String> {
        policies.policies()[0]
            .warnings()
            .into_iter()
            .filter(|w| w.starts_with("spec.suspensions"))
            .collect()
    };
    assert_eq!(about_suspensions(&defaults), Vec::<String>::new());

    // Mistakes, each at its field.
    let bad = with(
        "    annotations:\n      - {key: example.dev/a}\n      - {key: example.dev/b, value: x, values: [y]}\n      - {key: example.dev/c, values: []}\n    labels:\n      - {key: example.dev/d, value: \"not a label value\"}\n      - {key: \"not a key\", values: [\"ok\", \"-bad\"]}\n",
    );
    let error = PolicySet::from_yaml("inline", &bad)
        .unwrap_err()
        .to_string();
    for expected in [
        "spec.suspensions.annotations[0]: names no value: give value (the annotation value that suspends) or values",
        "spec.suspensions.annotations[1]: gives both value and values: give one",
        "spec.suspensions.annotations[2].values: lists no value",
        "spec.suspensions.labels[0].value: \"not a label value\" can never be a label's value",
        "spec.suspensions.labels[1].key: \"not a key\" is not a valid label key",
        "spec.suspensions.labels[1].values[1]: \"-bad\" can never be a label's value",
    ] {
        assert!(error.contains(expected), "{expected}\n{error}");
    }

    // A policy that reads a controller's own key more narrowly than the controller is warned.
    let narrow = with(
        "    annotations:\n      - {key: kustomize.toolkit.fluxcd.io/reconcile, value: disabled}\n      - {key: argocd.argoproj.io/skip-reconcile, value: \"true\"}\n    labels: []\n",
    );
    let policies = PolicySet::from_yaml("inline", &narrow).unwrap();
    let warnings = about_suspensions(&policies);
    for expected in [
        "spec.suspensions.annotations[0]: Flux stops on the annotation kustomize.toolkit.fluxcd.io/reconcile when it is disabled in any case (Go's strings.EqualFold: DISABLED, Disabled); list disabled with ignoreCase: true, or a suspension spelt so stops Flux unjudged",
        "spec.suspensions.labels: Flux reads kustomize.toolkit.fluxcd.io/reconcile as a label too; list it here as well (or leave labels out for the defaults), or a suspension by label stops Flux unjudged",
        "spec.suspensions.annotations[1]: Argo CD stops on the annotation argocd.argoproj.io/skip-reconcile when it is 1, t, T, TRUE, true, True (Go's strconv.ParseBool); add 1, t, T, TRUE, True, or a suspension spelt so stops Argo CD unjudged",
    ] {
        assert!(
            warnings.iter().any(|w| w == expected),
            "{expected}\n{warnings:#?}"
        );
    }
    // And of a key of Flux's it does not list while it lists the other.
    assert!(
        warnings.iter().any(|w| w == "spec.suspensions.annotations: Flux also stops on kustomize.toolkit.fluxcd.io/ssa: Ignore (as a label or an annotation), which this policy does not list, so a suspension by it stops Flux unjudged"),
        "{warnings:#?}"
    );
    assert_eq!(warnings.len(), 4, "{warnings:#?}");
}

#[test]
fn the_suspension_namespaces_are_read_from_the_envelope_but_not_their_leases() {
    let policies = suspensions_policies("Enforce");
    let running = kustomization(None, json!({}), json!({}));
    let update = Req::update("alice", running.clone(), running).kustomization();
    assert!(driftgate::decision::may_guard(
        &policies,
        &update.build(),
        None
    ));
    let mut lease = Req::update("alice", json!({}), json!({})).kustomization();
    lease.kind = ("coordination.k8s.io", "Lease");
    lease.resource = ("coordination.k8s.io", "leases");
    assert!(!driftgate::decision::may_guard(
        &policies,
        &lease.build(),
        None
    ));
    // A write through status reaches driftgate only when it changes more than status (the
    // chart's matchCondition), and is then judged as the object's own: an annotation written
    // through it may suspend or resume, so the envelope alone cannot skip it.
    let status = Req::update(FLUX, json!({}), json!({}))
        .kustomization()
        .status();
    assert!(driftgate::decision::may_guard(
        &policies,
        &status.build(),
        None
    ));
    // Without a suspensions section, flux-system is not read at all.
    let update = Req::update("alice", json!({}), json!({})).kustomization();
    assert!(!driftgate::decision::may_guard(
        &self::policies(),
        &update.build(),
        None
    ));
}

/// The test policy guarding ClusterRoles and CRDs too, with Kubernetes' ClusterRole
/// aggregation controller as a controller windows do not hold.
fn cluster_scoped_policies() -> PolicySet {
    PolicySet::from_yaml("inline", &cluster_scoped_text()).unwrap()
}

fn cluster_scoped_text() -> String {
    POLICY.replace(
        "  delegations:\n",
        "    - name: kubernetes\n      usernames: [\"system:serviceaccount:kube-system:clusterrole-aggregation-controller\"]\n      heldByWindows: false\n  delegations:\n",
    ) + "  deletions: {}\n  clusterScoped:\n    resources:\n      - {group: rbac.authorization.k8s.io, kind: ClusterRole}\n      - {group: apiextensions.k8s.io, kind: CustomResourceDefinition}\n"
}

/// ClusterRole `viewer` (no namespace) with `labels` and `annotations`, reading `verbs`.
fn cluster_role(labels: Value, annotations: Value, verbs: Value) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "viewer", "uid": "cr-1", "labels": labels, "annotations": annotations},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": verbs}]})
}

fn crd(annotations: Value) -> Value {
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com", "uid": "crd-1", "annotations": annotations},
        "spec": {"group": "example.com", "names": {"kind": "Widget", "plural": "widgets"}, "scope": "Namespaced"}})
}

impl Req {
    fn cluster_role(mut self) -> Self {
        self.kind = ("rbac.authorization.k8s.io", "ClusterRole");
        self.resource = ("rbac.authorization.k8s.io", "clusterroles");
        self.namespace = "";
        self.name = "viewer";
        self
    }

    fn widgets_crd(mut self) -> Self {
        self.kind = ("apiextensions.k8s.io", "CustomResourceDefinition");
        self.resource = ("apiextensions.k8s.io", "customresourcedefinitions");
        self.namespace = "";
        self.name = "widgets.example.com";
        self
    }
}

#[test]
fn cluster_scoped_objects_follow_the_namespaces_rules_with_windows_on_the_object() {
    let guarding = cluster_scoped_policies();
    let role = |verbs: Value| cluster_role(json!({}), json!({}), verbs);
    let open = |verbs: Value| {
        cluster_role(
            json!({LABEL: "20261130T1000Z"}),
            json!({REASON: "INC-7: pods unreadable"}),
            verbs,
        )
    };
    let get = json!(["get"]);
    let get_list = json!(["get", "list"]);
    let cases = vec![
        case(
            "bob edits a guarded ClusterRole",
            Req::update("bob", role(get.clone()), role(get_list.clone())).cluster_role(),
            false,
            Rule::NotPermitted,
        )
        .says("bob may not update ClusterRole viewer: only its controllers (flux, kubernetes) write here (policy \"prod\", rule NotPermitted). Change it in Git, or, in an emergency, open a break-glass window (user carol; group sre-oncall may): driftgate break-glass open clusterroles.rbac.authorization.k8s.io/viewer --for 1h --reason \"INC-…: what and why\" (policy owner: team-platform (#platform-oncall))."),
        case(
            "bob creates a guarded ClusterRole",
            Req::update("bob", Value::Null, role(get.clone()))
                .op("CREATE")
                .cluster_role(),
            false,
            Rule::NotPermitted,
        ),
        case(
            "Flux applies it",
            Req::update(FLUX, role(get.clone()), role(get_list.clone()))
                .fm(Some("kustomize-controller"))
                .cluster_role(),
            true,
            Rule::Controller,
        ),
        case(
            "the aggregation controller, which windows never hold, writes it",
            Req::update(
                "system:serviceaccount:kube-system:clusterrole-aggregation-controller",
                open(get.clone()),
                open(get_list.clone()),
            )
            .fm(Some("clusterrole-aggregation-controller"))
            .cluster_role(),
            true,
            Rule::Controller,
        ),
        case(
            "alice opens a window on it",
            Req::update("alice", role(get.clone()), open(get.clone())).cluster_role(),
            true,
            Rule::BreakGlassOpened,
        )
        // The aggregation controller is one windows never hold.
        .says("; controller flux is held off it until then; "),
        case(
            "alice edits it under the window",
            Req::update("alice", open(get.clone()), open(get_list.clone())).cluster_role(),
            true,
            Rule::BreakGlassWindow,
        ),
        case(
            "the window holds Flux off it",
            Req::update(FLUX, open(get.clone()), open(get_list.clone()))
                .fm(Some("kustomize-controller"))
                .cluster_role(),
            false,
            Rule::ControllerHeld,
        )
        .says("Controller flux (system:serviceaccount:flux-system:kustomize-controller) may not update ClusterRole viewer while the break-glass window on the object (until 2026-11-30 10:00 UTC, reason \"INC-7: pods unreadable\") holds it"),
        case(
            "bob may not use alice's window",
            Req::update("bob", open(get.clone()), open(get_list.clone())).cluster_role(),
            false,
            Rule::NotPermitted,
        ),
        case(
            "a ClusterRoleBinding is not listed, so not guarded",
            Req {
                kind: ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
                resource: ("rbac.authorization.k8s.io", "clusterrolebindings"),
                ..Req::update("bob", role(get.clone()), role(get_list.clone())).cluster_role()
            },
            true,
            Rule::OutOfScope,
        ),
        case(
            "bob deletes a CRD",
            Req::delete("bob", crd(json!({}))).widgets_crd(),
            false,
            Rule::DeletionProtected,
        )
        .says("bob may not delete CustomResourceDefinition widgets.example.com: the policy protects every CustomResourceDefinition from deletion by anyone, the GitOps controller included, unless deleting it is a deliberate act (policy \"prod\", rule DeletionProtected). If it is meant, mark it first, in Git or with kubectl annotate customresourcedefinitions.apiextensions.k8s.io/widgets.example.com driftgate.dev/allow-deletion=true, or delete it under a break-glass window (user carol; group sre-oncall may open one: driftgate break-glass open customresourcedefinitions.apiextensions.k8s.io/widgets.example.com --for 1h"),
        case(
            "Flux prunes a CRD",
            Req::delete(FLUX, crd(json!({}))).widgets_crd(),
            false,
            Rule::DeletionProtected,
        )
        .says("Controller flux"),
        case(
            "Flux prunes a CRD marked for deletion",
            Req::delete(FLUX, crd(json!({"driftgate.dev/allow-deletion": "true"}))).widgets_crd(),
            true,
            Rule::Controller,
        ),
    ];
    check(&guarding, cases, None);
    // may_guard (the server's read of the envelope alone) is conservative, not careless: a
    // cluster-scoped kind no policy lists is answered unread.
    let binding = Req {
        kind: ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
        resource: ("rbac.authorization.k8s.io", "clusterrolebindings"),
        ..Req::update("bob", role(get.clone()), role(get_list.clone())).cluster_role()
    };
    assert!(!may_guard(&guarding, &binding.build(), None));

    // A policy that guards only updates still protects the kinds it lists from deletion (its
    // deletions judge a delete whatever its operations say), and leaves their creation unread.
    let only_updates = PolicySet::from_yaml(
        "inline",
        &(cluster_scoped_text() + "  operations: [UPDATE]\n"),
    )
    .unwrap();
    let create = Req::update("bob", Value::Null, role(get.clone()))
        .op("CREATE")
        .cluster_role();
    assert!(!may_guard(&only_updates, &create.build(), None));
    let cases = vec![
        case(
            "bob deletes a CRD, where the policy guards only updates",
            Req::delete("bob", crd(json!({}))).widgets_crd(),
            false,
            Rule::DeletionProtected,
        ),
        case(
            "bob creates a ClusterRole, where the policy guards only updates",
            create,
            true,
            Rule::OutOfScope,
        ),
        case(
            "bob edits a ClusterRole, where the policy guards only updates",
            Req::update("bob", role(get.clone()), role(get_list.clone())).cluster_role(),
            false,
            Rule::NotPermitted,
        ),
    ];
    check(&only_updates, cases, None);

    // Without clusterScoped, the same writes are nobody's: ClusterRoles and CRDs are out of
    // scope, as before.
    let cases = vec![
        case(
            "bob edits a ClusterRole no policy lists",
            Req::update("bob", role(get.clone()), role(get_list)).cluster_role(),
            true,
            Rule::OutOfScope,
        ),
        case(
            "bob deletes a CRD no policy lists",
            Req::delete("bob", crd(json!({}))).widgets_crd(),
            true,
            Rule::OutOfScope,
        ),
    ];
    check(&policies(), cases, None);
}

/// The example policy, as `serve --dev`, the chart's default and the e2e suite serve it.
fn example_policies() -> PolicySet {
    PolicySet::load(std::path::Path::new("policies/example.yaml")).unwrap()
}

/// `object` with `spec.images` set to one new tag of `api`.
fn with_images(mut object: Value, tag: &str) -> Value {
    object["spec"]["images"] = json!([{"name": "api", "newTag": tag}]);
    object
}

/// Issue 24, section 3: the GitOps objects are guarded as objects by the example policy's
/// `gitops`: Flux applies them from Git, a person changes one only under a window on it, asking
/// Flux to reconcile is free, and suspending follows the suspension rules (resuming is free).
#[test]
fn the_example_policy_guards_the_gitops_objects_as_objects() {
    const SOURCE_CONTROLLER: &str = "system:serviceaccount:flux-system:source-controller";
    let none = || json!({});
    let open = || json!({LABEL: "20261130T1000Z"});
    let why = || json!({REASON: "INC-24: roll api back"});
    let running = || kustomization(None, none(), none());
    let windowed = || kustomization(None, open(), why());
    let requested =
        |at: &str| kustomization(None, none(), json!({"reconcile.fluxcd.io/requestedAt": at}));
    let finalized = || {
        let mut k = running();
        k["metadata"]["finalizers"] = json!(["finalizers.fluxcd.io"]);
        k
    };
    let git_repository = |url: &str, finalizers: Value| {
        json!({"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
            "metadata": {"name": "flux-system", "namespace": "flux-system", "uid": "g-1",
                "finalizers": finalizers},
            "spec": {"interval": "1m", "url": url, "ref": {"branch": "main"}}})
    };
    let source = |req: Req| Req {
        kind: ("source.toolkit.fluxcd.io", "GitRepository"),
        resource: ("source.toolkit.fluxcd.io", "gitrepositories"),
        name: "flux-system",
        ..req.kustomization()
    };
    let flux = |old: Value, new: Value| {
        Req::update(FLUX, old, new)
            .kustomization()
            .fm(Some("kustomize-controller"))
    };
    let cases = vec![
        case(
            "bob patches a Kustomization's images",
            Req::update("bob", running(), with_images(running(), "2")).kustomization(),
            false,
            Rule::NotPermitted,
        )
        .says("bob may not update Kustomization flux-system/apps: only its controllers (flux) write here (policy \"gitops\", rule NotPermitted). Change it in Git, or, in an emergency, open a break-glass window (group sre-oncall may): driftgate break-glass open kustomizations.kustomize.toolkit.fluxcd.io/apps -n flux-system --for 1h"),
        case(
            "alice may not either, without a window",
            Req::update("alice", running(), with_images(running(), "2")).kustomization(),
            false,
            Rule::NotPermitted,
        ),
        case(
            "alice under a window on the Kustomization",
            Req::update("alice", windowed(), with_images(windowed(), "2")).kustomization(),
            true,
            Rule::BreakGlassWindow,
        )
        .says("backport it to Git"),
        case(
            "alice once the window expired",
            Req::update("alice", windowed(), with_images(windowed(), "2")).kustomization(),
            false,
            Rule::WindowExpired,
        )
        .at("2026-11-30T10:30:00Z"),
        case(
            "Flux applies the Kustomization from Git",
            flux(running(), with_images(running(), "3")),
            true,
            Rule::Controller,
        ),
        case(
            "Flux is held off the Kustomization while a window is open on it",
            flux(windowed(), with_images(windowed(), "3")),
            false,
            Rule::ControllerHeld,
        ),
        case(
            "kustomize-controller adds its finalizer (manager gotk-kustomize-controller)",
            Req::update(FLUX, running(), finalized())
                .kustomization()
                .fm(Some("gotk-kustomize-controller")),
            true,
            Rule::Controller,
        ),
        case(
            "bob asks Flux to reconcile (flux reconcile)",
            Req::update("bob", running(), requested("2026-11-30T08:59:00Z"))
                .kustomization()
                .fm(Some("flux")),
            true,
            Rule::Delegation,
        ),
        case(
            "bob deletes a Kustomization (its prune would empty its namespaces)",
            Req::delete("bob", running()).kustomization(),
            false,
            Rule::NotPermitted,
        ),
        case(
            "bob points the GitRepository at another URL",
            source(Req::update(
                "bob",
                git_repository("https://git.example/fleet", json!(["finalizers.fluxcd.io"])),
                git_repository("https://git.example/fork", json!(["finalizers.fluxcd.io"])),
            )),
            false,
            Rule::NotPermitted,
        ),
        case(
            "source-controller adds its finalizer",
            source(Req::update(
                SOURCE_CONTROLLER,
                git_repository("https://git.example/fleet", json!([])),
                git_repository("https://git.example/fleet", json!(["finalizers.fluxcd.io"])),
            ))
            .fm(Some("gotk-source-controller")),
            true,
            Rule::Delegation,
        ),
        case(
            "source-controller may not change the URL",
            source(Req::update(
                SOURCE_CONTROLLER,
                git_repository("https://git.example/fleet", json!([])),
                git_repository("https://git.example/fork", json!([])),
            )),
            false,
            Rule::NotPermitted,
        ),
        // Suspending is judged by the suspension rules, once (by gitops alone).
        case(
            "alice suspends without an expiry (flux suspend)",
            Req::update("alice", running(), kustomization(Some(true), none(), none()))
                .kustomization(),
            false,
            Rule::SuspensionRefused,
        )
        .says("(policy \"gitops\", rule SuspensionRefused)"),
        case(
            "alice suspends with driftgate suspend",
            Req::update("alice", running(), kustomization(Some(true), open(), why()))
                .kustomization(),
            true,
            Rule::Suspended,
        ),
        case(
            // A write that suspends may change nothing else (issue 24, section 4).
            "alice suspends and patches images in one write, with no window open before",
            Req::update(
                "alice",
                running(),
                with_images(kustomization(Some(true), open(), why()), "2"),
            )
            .kustomization(),
            false,
            Rule::SuspensionRefused,
        ),
        case(
            "bob resumes with flux resume",
            Req::update(
                "bob",
                kustomization(Some(true), open(), why()),
                kustomization(Some(false), open(), why()),
            )
            .kustomization(),
            true,
            Rule::Resumed,
        ),
        case(
            "bob resumes with driftgate resume",
            Req::update(
                "bob",
                kustomization(Some(true), open(), why()),
                kustomization(Some(false), none(), none()),
            )
            .kustomization(),
            true,
            Rule::Resumed,
        ),
        case(
            "Git declares the suspension: Flux's own write",
            flux(running(), kustomization(Some(true), none(), none())),
            true,
            Rule::Controller,
        ),
        case(
            "an ExternalArtifact is not guarded (its artifact is status, the source's own)",
            Req {
                kind: ("source.toolkit.fluxcd.io", "ExternalArtifact"),
                resource: ("source.toolkit.fluxcd.io", "externalartifacts"),
                ..Req::update("bob", running(), with_images(running(), "2")).kustomization()
            },
            true,
            Rule::OutOfScope,
        ),
        case(
            "Flux's own Deployment in flux-system is not guarded",
            Req::update("bob", plain(), edited()).ns("flux-system"),
            true,
            Rule::OutOfScope,
        ),
    ];
    let policies = example_policies();
    for case in &cases {
        let decision = decided(&policies, case, None);
        assert!(
            decision.record.verdicts.len() <= 1,
            "{}: judged by {:?}",
            case.name,
            decision
                .record
                .verdicts
                .iter()
                .map(|v| &v.policy)
                .collect::<Vec<_>>()
        );
    }
    check(&policies, cases, None);
}

/// `object` with `spec.source.targetRevision` set.
fn at_revision(mut object: Value, revision: &str) -> Value {
    object["spec"]["source"]["targetRevision"] = json!(revision);
    object
}

impl Req {
    fn application_set(mut self) -> Self {
        self.kind = ("argoproj.io", "ApplicationSet");
        self.resource = ("argoproj.io", "applicationsets");
        self.namespace = "argocd";
        self.name = "shops";
        self
    }

    fn app_project(mut self) -> Self {
        self.kind = ("argoproj.io", "AppProject");
        self.resource = ("argoproj.io", "appprojects");
        self.namespace = "argocd";
        self.name = "default";
        self
    }
}

/// Issue 24, section 3, its Argo CD half: the example policy's `gitops-argocd` guards Argo CD's
/// Applications, ApplicationSets and AppProjects in argocd as objects. Argo CD applies them
/// from Git (an app-of-apps Application, field manager argocd-controller; an ApplicationSet),
/// a person changes one only under a window on it, and the application-controller's own
/// writes of an Application's status and `operation` (through the object: the CRD has no
/// status subresource, and they name no field manager) are never held by that window, or
/// Argo CD could not sync what the window changed.
#[test]
fn the_example_policy_guards_argo_cd_s_objects_as_objects() {
    const CONTROLLER: &str = "system:serviceaccount:argocd:argocd-application-controller";
    const APPLICATIONSET: &str = "system:serviceaccount:argocd:argocd-applicationset-controller";
    const SERVER: &str = "system:serviceaccount:argocd:argocd-server";
    const REFRESH: &str = "argocd.argoproj.io/refresh";
    let none = || json!({});
    let open = || json!({LABEL: "20261130T1000Z"});
    let why = || json!({REASON: "INC-24: roll the shop back"});
    let healing = || json!({"automated": {"prune": true, "selfHeal": true}});
    let running = || at_revision(application(healing(), none(), none()), "main");
    let windowed = || at_revision(application(healing(), open(), why()), "main");
    let rolled_back = |app: Value| at_revision(app, "v1.4.2");
    let with = |mut app: Value, path: &[&str], value: Value| {
        let mut at = &mut app;
        for key in &path[..path.len() - 1] {
            at = &mut at[*key];
        }
        at[path[path.len() - 1]] = value;
        app
    };
    let synced = |app: Value| {
        with(
            app,
            &["status"],
            json!({"sync": {"status": "Synced", "revision": "4f2a"}, "health": {"status": "Healthy"}}),
        )
    };
    let operation = |app: Value, revision: &str| {
        with(
            app,
            &["operation"],
            json!({"sync": {"revision": revision, "prune": true}, "initiatedBy": {"automated": true}}),
        )
    };
    let refresh = |app: Value| with(app, &["metadata", "annotations", REFRESH], json!("normal"));
    // Argo CD's Application and AppProject CRDs have no status subresource.
    let application_case = |name, req: Req, allowed, rule| {
        case(name, req.application(), allowed, rule).without_status_subresource()
    };
    let app_of_apps =
        |old: Value, new: Value| Req::update(CONTROLLER, old, new).fm(Some("argocd-controller"));
    let cases = vec![
        application_case(
            "bob patches the Application's targetRevision",
            Req::update("bob", running(), rolled_back(running())),
            false,
            Rule::NotPermitted,
        )
        .says("bob may not update Application argocd/shop: only its controllers (argocd, argocd-applicationset) write here (policy \"gitops-argocd\", rule NotPermitted). Change it in Git, or, in an emergency, open a break-glass window (group sre-oncall may): driftgate break-glass open applications.argoproj.io/shop -n argocd --for 1h"),
        application_case(
            "bob adds ignoreDifferences (Argo CD would then leave his drift in place)",
            Req::update(
                "bob",
                running(),
                with(running(), &["spec", "ignoreDifferences"],
                    json!([{"group": "apps", "kind": "Deployment", "jsonPointers": ["/spec/replicas"]}])),
            ),
            false,
            Rule::NotPermitted,
        ),
        application_case(
            "alice may not either, without a window",
            Req::update("alice", running(), rolled_back(running())),
            false,
            Rule::NotPermitted,
        ),
        application_case(
            "alice under a window on the Application",
            Req::update("alice", windowed(), rolled_back(windowed())),
            true,
            Rule::BreakGlassWindow,
        )
        .says("backport it to Git"),
        application_case(
            "alice once the window expired",
            Req::update("alice", windowed(), rolled_back(windowed())),
            false,
            Rule::WindowExpired,
        )
        .at("2026-11-30T10:30:00Z"),
        application_case(
            "bob deletes the Application (its prune would empty its namespace)",
            Req::delete("bob", running()),
            false,
            Rule::NotPermitted,
        ),
        application_case(
            "the app-of-apps applies the Application from Git",
            app_of_apps(running(), rolled_back(running())),
            true,
            Rule::Controller,
        ),
        application_case(
            "the app-of-apps creates an Application from Git",
            Req {
                old: None,
                ..app_of_apps(Value::Null, running()).op("CREATE")
            },
            true,
            Rule::Controller,
        ),
        application_case(
            "the app-of-apps is held off the Application while a window is open on it",
            app_of_apps(rolled_back(windowed()), windowed()),
            false,
            Rule::ControllerHeld,
        ),
        application_case(
            "the application-controller writes the status",
            Req::update(CONTROLLER, running(), synced(running())).fm(None),
            true,
            Rule::Controller,
        ),
        application_case(
            "... and under a window: a delegated field, not Git's",
            Req::update(CONTROLLER, rolled_back(windowed()), synced(rolled_back(windowed())))
                .fm(None),
            true,
            Rule::Delegation,
        ),
        application_case(
            "its automated sync starts an operation under the window",
            Req::update(
                CONTROLLER,
                rolled_back(windowed()),
                operation(rolled_back(windowed()), "v1.4.2"),
            )
            .fm(None),
            true,
            Rule::Delegation,
        ),
        application_case(
            "it removes the refresh annotation it acted on, under the window",
            Req::update(CONTROLLER, refresh(windowed()), windowed()).fm(None),
            true,
            Rule::Delegation,
        ),
        application_case(
            "its spec writes stay held (no field manager: normalizing the spec)",
            Req::update(
                CONTROLLER,
                rolled_back(windowed()),
                with(rolled_back(windowed()), &["spec", "project"], json!("platform")),
            )
            .fm(None),
            false,
            Rule::ControllerHeld,
        ),
        application_case(
            "bob writes as the app-of-apps' field manager",
            Req::update("bob", running(), rolled_back(running())).fm(Some("argocd-controller")),
            false,
            Rule::FieldManagerSpoofing,
        ),
        application_case(
            "argocd-server starts a sync (argocd app sync)",
            Req::update(
                SERVER,
                with(synced(running()), &["status", "operationState"], json!({"phase": "Succeeded"})),
                operation(synced(running()), "main"),
            )
            .fm(None),
            true,
            Rule::Delegation,
        ),
        application_case(
            "argocd-server may not change the targetRevision (argocd app set)",
            Req::update(SERVER, running(), rolled_back(running())).fm(None),
            false,
            Rule::NotPermitted,
        ),
        application_case(
            "bob may not start a sync of another revision himself",
            Req::update("bob", running(), operation(running(), "v1.4.2")),
            false,
            Rule::NotPermitted,
        ),
        application_case(
            "bob asks Argo CD to refresh (kubectl annotate)",
            Req::update("bob", running(), refresh(running())).fm(Some("kubectl-annotate")),
            true,
            Rule::Delegation,
        ),
        application_case(
            "the applicationset-controller updates a generated Application",
            Req::update(APPLICATIONSET, running(), rolled_back(running())).fm(None),
            true,
            Rule::Controller,
        ),
        application_case(
            "the applicationset-controller is held off it while a window is open on it",
            Req::update(APPLICATIONSET, rolled_back(windowed()), windowed()).fm(None),
            false,
            Rule::ControllerHeld,
        ),
        // Suspending is judged by the suspension rules, once (by gitops-argocd alone).
        application_case(
            "alice turns automated sync off without an expiry",
            Req::update(
                "alice",
                running(),
                at_revision(application(json!({"automated": {"enabled": false}}), none(), none()), "main"),
            ),
            false,
            Rule::SuspensionRefused,
        )
        .says("(policy \"gitops-argocd\", rule SuspensionRefused)"),
        application_case(
            "alice suspends with driftgate suspend",
            Req::update(
                "alice",
                running(),
                at_revision(
                    application(healing(), open(),
                        json!({REASON: "INC-24: hold", "argocd.argoproj.io/skip-reconcile": "true"})),
                    "main",
                ),
            ),
            true,
            Rule::Suspended,
        ),
        application_case(
            "bob resumes with driftgate resume",
            Req::update(
                "bob",
                at_revision(
                    application(healing(), open(),
                        json!({REASON: "INC-24: hold", "argocd.argoproj.io/skip-reconcile": "true"})),
                    "main",
                ),
                running(),
            ),
            true,
            Rule::Resumed,
        ),
        case(
            "bob changes an ApplicationSet's generators",
            Req::update(
                "bob",
                json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "ApplicationSet",
                    "metadata": {"name": "shops", "namespace": "argocd", "uid": "s-1"},
                    "spec": {"generators": [{"list": {"elements": [{"env": "prod"}]}}]}}),
                json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "ApplicationSet",
                    "metadata": {"name": "shops", "namespace": "argocd", "uid": "s-1"},
                    "spec": {"generators": [{"list": {"elements": [{"env": "prod-eu"}]}}]}}),
            )
            .application_set(),
            false,
            Rule::NotPermitted,
        ),
        case(
            "bob widens an AppProject's destinations",
            Req::update(
                "bob",
                json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject",
                    "metadata": {"name": "default", "namespace": "argocd", "uid": "p-1"},
                    "spec": {"destinations": [{"namespace": "shop", "server": "*"}]}}),
                json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject",
                    "metadata": {"name": "default", "namespace": "argocd", "uid": "p-1"},
                    "spec": {"destinations": [{"namespace": "*", "server": "*"}]}}),
            )
            .app_project(),
            false,
            Rule::NotPermitted,
        )
        .without_status_subresource(),
        case(
            "Argo CD's own settings in argocd are not guarded",
            Req::update("bob", plain(), edited()).ns("argocd"),
            true,
            Rule::OutOfScope,
        ),
    ];
    let policies = example_policies();
    for case in &cases {
        let decision = decided(&policies, case, None);
        assert!(
            decision.record.verdicts.len() <= 1,
            "{}: judged by {:?}",
            case.name,
            decision
                .record
                .verdicts
                .iter()
                .map(|v| &v.policy)
                .collect::<Vec<_>>()
        );
    }
    check(&policies, cases, None);
}

/// The ledger guard takes in exactly its own: updates and deletes of the records' CRD (never its
/// create: the chart installs it, and an absent CRD has no records to protect), and writes of
/// `backportrequirements` in group driftgate.dev, nothing else of that group or that name
/// (`guards` from the envelope, `judge` from the whole review agree).
#[test]
fn the_ledger_guard_takes_in_the_records_and_their_crd_and_nothing_else() {
    use driftgate::decision::ledger_guard::{guards, judge};
    let policies = policies();
    let takes_in = |req: Req| {
        let request = req.build();
        let facts = RequestFacts::new(&request);
        let by_envelope = guards((&request).into());
        let judged = judge(&policies, &ledger_guard(), &facts, now()).is_some();
        assert_eq!(by_envelope, judged, "guards and judge agree");
        judged
    };
    let crd = |operation| {
        Req::crd(
            operation,
            "carl",
            "backportrequirements.driftgate.dev",
            records_crd(),
            (operation == "UPDATE").then(records_crd),
        )
    };
    assert!(takes_in(crd("UPDATE")));
    assert!(takes_in(crd("DELETE")));
    let mut create = crd("CREATE");
    create.old = None;
    create.new = Some(records_crd());
    assert!(!takes_in(create));
    // Another CRD is not the guard's.
    let mut other = crd("UPDATE");
    other.name = "widgets.example.com";
    assert!(!takes_in(other));
    // A GatePolicy (group driftgate.dev, another resource), and a `backportrequirements` of
    // another group, are not records.
    let mut gatepolicy = crd("UPDATE");
    gatepolicy.kind = ("driftgate.dev", "GatePolicy");
    gatepolicy.resource = ("driftgate.dev", "gatepolicies");
    gatepolicy.name = "production";
    assert!(!takes_in(gatepolicy));
    let mut lookalike = crd("UPDATE");
    lookalike.kind = ("example.com", "BackportRequirement");
    lookalike.resource = ("example.com", "backportrequirements");
    lookalike.name = "r";
    assert!(!takes_in(lookalike));
    let mut record = crd("UPDATE");
    record.kind = ("driftgate.dev", "BackportRequirement");
    record.resource = ("driftgate.dev", "backportrequirements");
    record.name = "r";
    assert!(takes_in(record));
}
