//! Blast radius: the gate webhook is sent writes only in namespaces that some policy judges (and
//! Namespace objects of those), so that with every replica of driftgate down the rest of the
//! cluster keeps working. "Judges" is the decision's own definition (`policy::scope`): the
//! namespaces a policy guards, and those where its suspension rules judge the GitOps objects.
//!
//! The selector fails closed: it names the namespaces to *leave out*, never the ones to send, so
//! a namespace created to match a policy is sent from its first object. Only a namespace that
//! no policy judges waits for driftgate (seconds) before its writes stop reaching the webhook.
//!
//! [`plan`] is pure; [`spawn_selector_keeper`] is the thin sink that server-side applies the
//! planned `namespaceSelector` with its own field manager, only while this replica leads.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use futures::StreamExt;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use kube::Api;
use kube::api::{Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::kube_state::NamespaceCache;
use crate::metrics::Metrics;
use crate::tasks::reload::PolicyStatus;
use crate::throttle::Throttle;
use driftgate_core::policy::{NamespaceLabels, PolicySet};

/// The label the API server sets on every Namespace to its name.
pub const NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// The field manager of the gate webhook's namespaceSelector: driftgate's only, so that server-side
/// apply never drops a field another manager (the caBundle writer, Helm) owns.
pub const FIELD_MANAGER: &str = "driftgate-namespace-selector";

/// Which webhook's namespaceSelector driftgate keeps, and the selector it starts from.
#[derive(Clone, Debug, PartialEq)]
pub struct GateWebhook {
    /// The ValidatingWebhookConfiguration's name.
    pub configuration: String,
    /// The webhook's name inside it (`gate.driftgate.dev`).
    pub webhook: String,
    /// The chart's selector (matchLabels, the static `NotIn`, the user's matchExpressions).
    pub base_selector: LabelSelector,
}

/// `serve`'s flags for the gate webhook's namespaceSelector. Without
/// `--gate-webhook-configuration` driftgate never writes it (development, `--no-kube`, tests).
#[derive(Clone, Debug, clap::Args)]
pub struct GateSelectorArgs {
    /// Keep this ValidatingWebhookConfiguration's gate webhook namespaceSelector at the base
    /// selector plus `kubernetes.io/metadata.name NotIn [every namespace no policy judges]`.
    #[arg(long, value_name = "NAME", requires = "gate_base_namespace_selector")]
    pub gate_webhook_configuration: Option<String>,
    /// The gate webhook's name inside that configuration.
    #[arg(long, value_name = "NAME", default_value = "gate.driftgate.dev")]
    pub gate_webhook_name: String,
    /// The selector the chart renders (a LabelSelector as JSON): kept as it is, with the
    /// exclusion added.
    #[arg(long, value_name = "JSON", value_parser = parse_label_selector, requires = "gate_webhook_configuration")]
    pub gate_base_namespace_selector: Option<LabelSelector>,
}

impl GateSelectorArgs {
    /// The webhook to keep, when the flags name one.
    pub fn gate_webhook(&self) -> Option<GateWebhook> {
        Some(GateWebhook {
            configuration: self.gate_webhook_configuration.clone()?,
            webhook: self.gate_webhook_name.clone(),
            base_selector: self.gate_base_namespace_selector.clone()?,
        })
    }
}

/// A LabelSelector as JSON, with no field besides matchLabels and matchExpressions (the
/// Kubernetes type would ignore a misspelt one, and the exclusion would then be all it kept).
pub fn parse_label_selector(text: &str) -> Result<LabelSelector, String> {
    let value: serde_json::Value = serde_json::from_str(text).map_err(|e| {
        format!(
            "is not JSON ({e}); pass a LabelSelector such as {{\"matchLabels\":{{\"team\":\"a\"}}}}"
        )
    })?;
    let Some(fields) = value.as_object() else {
        return Err(
            "is not a JSON object; pass a LabelSelector such as {\"matchLabels\":{\"team\":\"a\"}}"
                .to_owned(),
        );
    };
    if let Some(unknown) = fields
        .keys()
        .find(|k| *k != "matchLabels" && *k != "matchExpressions")
    {
        return Err(format!(
            "has field \"{unknown}\"; a LabelSelector has only matchLabels and matchExpressions"
        ));
    }
    serde_json::from_value(value).map_err(|e| format!("is not a LabelSelector: {e}"))
}

/// What one look at the inputs calls for.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// Apply this namespaceSelector; it excludes `excluded` namespaces.
    Write {
        selector: LabelSelector,
        excluded: usize,
    },
    /// The live selector is already the planned one.
    InStep { excluded: usize },
    /// Nothing may be written now (the last written selector stays).
    Hold(HoldReason),
}

/// Why the selector is left as it is.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HoldReason {
    #[error("this replica does not hold the leader Lease; the leader writes the selector")]
    NotLeading,
    #[error(
        "this replica is not serving reviews yet; the gate stays as the chart renders it (matching no namespace until driftgate first writes it), so an install that never runs blocks nothing"
    )]
    NotServing,
    #[error(
        "the policy source is refused ({0}); the selector written for the last valid policy stays until the policy is fixed"
    )]
    PolicyRefused(String),
    #[error(
        "the namespace cache is not synced; the selector stays until a complete list of namespaces arrives"
    )]
    NamespacesUnknown,
    #[error(
        "ValidatingWebhookConfiguration {0} is not in the cluster (or not seen yet); install the chart, or fix --gate-webhook-configuration"
    )]
    ConfigurationAbsent(String),
    #[error(
        "ValidatingWebhookConfiguration {configuration} has no webhook {webhook}; fix --gate-webhook-name"
    )]
    WebhookAbsent {
        configuration: String,
        webhook: String,
    },
}

/// The inputs of one [`plan`].
pub struct PlanInputs<'a> {
    pub leading: bool,
    /// This replica's webhook port is serving reviews: only then is the gate armed, so that a
    /// pod that never starts (an image that cannot be pulled) or crash-loops before it serves
    /// blocks nothing.
    pub serving: bool,
    /// The policy source's problems, when its current content is refused.
    pub policy_problems: Option<String>,
    pub policies: &'a PolicySet,
    /// Every namespace, when the cache is synced and trusted.
    pub namespaces: Option<&'a [Arc<Namespace>]>,
    pub live: Option<&'a ValidatingWebhookConfiguration>,
    pub gate: &'a GateWebhook,
}

/// Whether to write the gate webhook's namespaceSelector, and what.
pub fn plan(inputs: &PlanInputs<'_>) -> Step {
    if !inputs.leading {
        return Step::Hold(HoldReason::NotLeading);
    }
    if !inputs.serving {
        return Step::Hold(HoldReason::NotServing);
    }
    if let Some(problems) = &inputs.policy_problems {
        return Step::Hold(HoldReason::PolicyRefused(problems.replace('\n', "; ")));
    }
    let Some(namespaces) = inputs.namespaces else {
        return Step::Hold(HoldReason::NamespacesUnknown);
    };
    let gate = inputs.gate;
    let Some(live) = inputs.live else {
        return Step::Hold(HoldReason::ConfigurationAbsent(gate.configuration.clone()));
    };
    let Some(webhook) = live
        .webhooks
        .iter()
        .flatten()
        .find(|w| w.name == gate.webhook)
    else {
        return Step::Hold(HoldReason::WebhookAbsent {
            configuration: gate.configuration.clone(),
            webhook: gate.webhook.clone(),
        });
    };
    let labelled = namespaces.iter().map(|ns| {
        let name = ns.metadata.name.as_deref().unwrap_or_default();
        (name, ns.metadata.labels.as_ref())
    });
    let unjudged = unjudged_namespaces(inputs.policies, labelled);
    let excluded = unjudged.len();
    let selector = desired_selector(&gate.base_selector, unjudged);
    if same_selector(webhook.namespace_selector.as_ref(), &selector) {
        Step::InStep { excluded }
    } else {
        Step::Write { selector, excluded }
    }
}

/// The namespaces no policy judges, sorted and without duplicates: neither guarded by a
/// policy's `namespaces` nor holding the GitOps objects its `suspensions` judge. "Judges" is the
/// decision's own test ([`PolicySet::judges_namespace`]) with the namespace's labels.
pub fn unjudged_namespaces<'a>(
    policies: &PolicySet,
    namespaces: impl IntoIterator<Item = (&'a str, Option<&'a BTreeMap<String, String>>)>,
) -> Vec<String> {
    static NO_LABELS: BTreeMap<String, String> = BTreeMap::new();
    let mut unjudged: Vec<String> = namespaces
        .into_iter()
        .filter(|(name, labels)| {
            !policies.judges_namespace(name, NamespaceLabels::Known(labels.unwrap_or(&NO_LABELS)))
        })
        .map(|(name, _)| name.to_owned())
        .collect();
    unjudged.sort();
    unjudged.dedup();
    unjudged
}

/// `base` plus `kubernetes.io/metadata.name NotIn [unjudged]` (left out when there are none:
/// the API server refuses a `NotIn` without values).
pub fn desired_selector(base: &LabelSelector, unjudged: Vec<String>) -> LabelSelector {
    let mut selector = base.clone();
    if !unjudged.is_empty() {
        selector
            .match_expressions
            .get_or_insert_with(Vec::new)
            .push(LabelSelectorRequirement {
                key: NAME_LABEL.to_owned(),
                operator: "NotIn".to_owned(),
                values: Some(unjudged),
            });
    }
    selector
}

/// Equal as the API server means it: no matchLabels and empty matchLabels are the same.
fn same_selector(live: Option<&LabelSelector>, desired: &LabelSelector) -> bool {
    let normal = |s: &LabelSelector| {
        (
            s.match_labels.clone().filter(|m| !m.is_empty()),
            s.match_expressions.clone().filter(|e| !e.is_empty()),
        )
    };
    normal(live.unwrap_or(&LabelSelector::default())) == normal(desired)
}

/// The server-side apply body: only the gate webhook's namespaceSelector (the webhooks list is
/// keyed by name, so every other field and webhook stays with its own manager).
pub fn apply_body(gate: &GateWebhook, selector: &LabelSelector) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": gate.configuration},
        "webhooks": [{"name": gate.webhook, "namespaceSelector": selector}],
    })
}

/// How often the inputs are looked at besides their own notifications (policy reloads have none).
const RECHECK_INTERVAL: Duration = Duration::from_secs(1);

/// The sink's inputs, besides the client.
pub struct KeeperInputs {
    pub gate: GateWebhook,
    pub policies: Arc<ArcSwap<PolicySet>>,
    pub policy_status: Arc<PolicyStatus>,
    pub namespaces: NamespaceCache,
    pub leading: watch::Receiver<bool>,
    /// True once the webhook port serves reviews.
    pub serving: watch::Receiver<bool>,
    pub metrics: Arc<Metrics>,
}

/// Keeps the gate webhook's namespaceSelector at [`plan`]'s: on every namespace change, every
/// change of the live configuration (a `helm upgrade` or Argo CD self-heal resets it to the
/// base selector, which is fail-closed), on gaining the lease, and every second for policy
/// reloads.
pub fn spawn_selector_keeper(
    client: kube::Client,
    inputs: KeeperInputs,
    shutdown: CancellationToken,
) -> JoinHandle<()> {
    tokio::spawn(keep_selector(client, inputs, shutdown))
}

async fn keep_selector(client: kube::Client, inputs: KeeperInputs, shutdown: CancellationToken) {
    let KeeperInputs {
        gate,
        policies,
        policy_status,
        namespaces,
        mut leading,
        mut serving,
        metrics,
    } = inputs;
    let api = Api::<ValidatingWebhookConfiguration>::all(client);
    let by_name =
        watcher::Config::default().fields(&format!("metadata.name={}", gate.configuration));
    let mut live_events = watcher(api.clone(), by_name).default_backoff().boxed();
    let namespace_changes = namespaces.changes();
    let mut keeper = Keeper {
        api,
        gate,
        metrics,
        live: None,
        last_hold: None,
        write_failures: Throttle::default(),
        watch_failures: Throttle::default(),
    };
    // The election's channel closes only when its task ends (having published false first);
    // the last value stays readable.
    let mut leader_open = true;
    let mut serving_open = true;
    let mut ticker = tokio::time::interval(RECHECK_INTERVAL);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            biased;
            () = shutdown.cancelled() => return,
            event = live_events.next() => match event {
                Some(event) => keeper.observe(event),
                None => return,
            },
            changed = leading.changed(), if leader_open => leader_open = changed.is_ok(),
            changed = serving.changed(), if serving_open => serving_open = changed.is_ok(),
            () = notified(namespace_changes.as_deref()) => {}
            _ = ticker.tick() => {}
        }
        let snapshot = namespaces.snapshot();
        let policies = policies.load();
        let step = plan(&PlanInputs {
            leading: *leading.borrow(),
            serving: *serving.borrow(),
            policy_problems: policy_status.problems(),
            policies: &policies,
            namespaces: snapshot.as_deref(),
            live: keeper.live.as_ref(),
            gate: &keeper.gate,
        });
        keeper.act(step).await;
    }
}

/// The sink's state between looks: the live configuration as last seen, and what was logged.
struct Keeper {
    api: Api<ValidatingWebhookConfiguration>,
    gate: GateWebhook,
    metrics: Arc<Metrics>,
    live: Option<ValidatingWebhookConfiguration>,
    last_hold: Option<HoldReason>,
    write_failures: Throttle,
    watch_failures: Throttle,
}

impl Keeper {
    /// Follows the live configuration.
    fn observe(&mut self, event: watcher::Result<watcher::Event<ValidatingWebhookConfiguration>>) {
        match event {
            Ok(watcher::Event::Apply(live) | watcher::Event::InitApply(live)) => {
                self.watch_failures.success();
                self.live = Some(live);
            }
            Ok(watcher::Event::Delete(_)) => self.live = None,
            Ok(watcher::Event::Init | watcher::Event::InitDone) => {}
            Err(error) => {
                if let Some(suppressed) = self.watch_failures.failure() {
                    tracing::warn!(%error, suppressed, configuration = %self.gate.configuration, "watching the gate webhook configuration failed; retrying");
                }
            }
        }
    }

    async fn act(&mut self, step: Step) {
        match step {
            Step::Write { selector, excluded } => {
                self.last_hold = None;
                self.write(&selector, excluded).await;
            }
            Step::InStep { excluded } => {
                self.last_hold = None;
                self.metrics
                    .webhook_selector_excluded_namespaces
                    .set(excluded as i64);
            }
            Step::Hold(reason) => self.hold(reason),
        }
    }

    /// Server-side applies `selector`, forcing ownership of that one field back from whoever
    /// reset it.
    async fn write(&mut self, selector: &LabelSelector, excluded: usize) {
        let gate = &self.gate;
        let params = PatchParams::apply(FIELD_MANAGER).force();
        let body = Patch::Apply(apply_body(gate, selector));
        match self.api.patch(&gate.configuration, &params, &body).await {
            Ok(written) => {
                Metrics::count_result(&self.metrics.webhook_selector_writes, true);
                self.metrics
                    .webhook_selector_excluded_namespaces
                    .set(excluded as i64);
                self.write_failures.success();
                tracing::info!(configuration = %gate.configuration, webhook = %gate.webhook, excluded, "gate webhook namespaceSelector written: namespaces no policy judges are not sent");
                self.live = Some(written);
            }
            Err(error) => {
                Metrics::count_result(&self.metrics.webhook_selector_writes, false);
                if let Some(suppressed) = self.write_failures.failure() {
                    tracing::warn!(%error, suppressed, configuration = %gate.configuration, webhook = %gate.webhook, "writing the gate webhook namespaceSelector failed; retrying every second; until then the live selector is the one last written");
                }
            }
        }
    }

    /// Logs why nothing is written, once per reason.
    fn hold(&mut self, reason: HoldReason) {
        if self.last_hold.as_ref() == Some(&reason) {
            return;
        }
        if reason == HoldReason::NotLeading {
            tracing::debug!(%reason, "gate webhook namespaceSelector left as it is");
        } else {
            tracing::warn!(%reason, "gate webhook namespaceSelector left as it is");
        }
        self.last_hold = Some(reason);
    }
}

/// Waits for a namespace change; never, without a cluster.
async fn notified(changes: Option<&tokio::sync::Notify>) {
    match changes {
        Some(changes) => changes.notified().await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::admissionregistration::v1::ValidatingWebhook;
    use kube::api::ObjectMeta;

    const POLICY: &str = r#"
apiVersion: driftgate.dev/v1alpha1
kind: GatePolicy
metadata: {name: blast}
spec:
  namespaces:
    include: ["prod-*"]
    exclude: ["prod-sandbox"]
    selector: {matchLabels: {driftgate.dev/guarded: "true"}}
  controllers:
    - {name: flux, usernames: [flux]}
"#;

    fn policies() -> PolicySet {
        PolicySet::from_yaml("blast.yaml", POLICY).expect("the test policy loads")
    }

    fn namespace(name: &str, labels: &[(&str, &str)]) -> Arc<Namespace> {
        let mut all: BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        all.insert(NAME_LABEL.to_owned(), name.to_owned());
        Arc::new(Namespace {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                labels: Some(all),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        })
    }

    fn base() -> LabelSelector {
        LabelSelector {
            match_labels: Some(BTreeMap::from([("team".to_owned(), "a".to_owned())])),
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: NAME_LABEL.to_owned(),
                operator: "NotIn".to_owned(),
                values: Some(vec!["kube-system".to_owned(), "driftgate".to_owned()]),
            }]),
        }
    }

    fn gate() -> GateWebhook {
        GateWebhook {
            configuration: "driftgate".to_owned(),
            webhook: "gate.driftgate.dev".to_owned(),
            base_selector: base(),
        }
    }

    fn live(selector: Option<LabelSelector>) -> ValidatingWebhookConfiguration {
        ValidatingWebhookConfiguration {
            metadata: ObjectMeta {
                name: Some("driftgate".to_owned()),
                ..ObjectMeta::default()
            },
            webhooks: Some(vec![ValidatingWebhook {
                name: "gate.driftgate.dev".to_owned(),
                namespace_selector: selector,
                ..ValidatingWebhook::default()
            }]),
        }
    }

    fn cluster() -> Vec<Arc<Namespace>> {
        vec![
            namespace("prod-a", &[]),
            namespace("prod-sandbox", &[]),
            namespace("team-x", &[("driftgate.dev/guarded", "true")]),
            namespace("team-y", &[("driftgate.dev/guarded", "false")]),
            namespace("default", &[]),
        ]
    }

    fn plan_with(
        leading: bool,
        problems: Option<&str>,
        namespaces: Option<&[Arc<Namespace>]>,
        live: Option<&ValidatingWebhookConfiguration>,
    ) -> Step {
        plan(&PlanInputs {
            leading,
            serving: true,
            policy_problems: problems.map(str::to_owned),
            policies: &policies(),
            namespaces,
            live,
            gate: &gate(),
        })
    }

    #[test]
    fn unjudged_uses_the_decisions_include_exclude_and_selector() {
        let cluster = cluster();
        let labelled = cluster.iter().map(|ns| {
            (
                ns.metadata.name.as_deref().unwrap(),
                ns.metadata.labels.as_ref(),
            )
        });
        assert_eq!(
            unjudged_namespaces(&policies(), labelled),
            ["default", "prod-sandbox", "team-y"]
        );
    }

    /// Issue 24: the keeper once left out flux-system and argocd, where the suspension rules
    /// judge, so that a suspension there was admitted unseen.
    #[test]
    fn the_namespaces_of_the_gitops_objects_stay_in_with_the_example_policy() {
        let example = PolicySet::from_yaml(
            "example.yaml",
            include_str!("../../../policies/example.yaml"),
        )
        .expect("the example policy loads");
        let cluster = [
            namespace("flux-system", &[]),
            namespace("argocd", &[]),
            namespace("prod-payments", &[]),
            namespace("payments", &[]),
            namespace("staging-a", &[]),
            namespace("prod-sandbox", &[]),
            namespace("default", &[]),
            namespace("kube-public", &[]),
        ];
        let labelled = cluster.iter().map(|ns| {
            (
                ns.metadata.name.as_deref().unwrap(),
                ns.metadata.labels.as_ref(),
            )
        });
        assert_eq!(
            unjudged_namespaces(&example, labelled),
            ["default", "kube-public", "prod-sandbox"]
        );
        // A policy whose suspensions are its own namespaces' only leaves the others out.
        let own_only = PolicySet::from_yaml(
            "own.yaml",
            &format!("{POLICY}  breakGlass: {{maxDuration: 1h, openers: {{groups: [sre]}}}}\n  suspensions: {{namespaces: []}}\n"),
        )
        .expect("the policy loads");
        let labelled = cluster.iter().map(|ns| {
            (
                ns.metadata.name.as_deref().unwrap(),
                ns.metadata.labels.as_ref(),
            )
        });
        assert!(unjudged_namespaces(&own_only, labelled).contains(&"flux-system".to_owned()));
    }

    #[test]
    fn the_desired_selector_is_the_base_plus_one_sorted_exclusion() {
        let cluster = cluster();
        let live = live(Some(base()));
        let Step::Write { selector, excluded } = plan_with(true, None, Some(&cluster), Some(&live))
        else {
            panic!("a base selector calls for a write");
        };
        assert_eq!(excluded, 3);
        let expressions = selector.match_expressions.as_ref().unwrap();
        assert_eq!(expressions[0], base().match_expressions.unwrap()[0]);
        assert_eq!(
            expressions[1],
            LabelSelectorRequirement {
                key: NAME_LABEL.to_owned(),
                operator: "NotIn".to_owned(),
                values: Some(vec![
                    "default".to_owned(),
                    "prod-sandbox".to_owned(),
                    "team-y".to_owned()
                ]),
            }
        );
        assert_eq!(selector.match_labels, base().match_labels);
    }

    #[test]
    fn a_live_selector_already_planned_is_not_written_again() {
        let cluster = cluster();
        let planned = desired_selector(
            &base(),
            vec!["default".into(), "prod-sandbox".into(), "team-y".into()],
        );
        let live = live(Some(planned));
        assert_eq!(
            plan_with(true, None, Some(&cluster), Some(&live)),
            Step::InStep { excluded: 3 }
        );
    }

    #[test]
    fn with_every_namespace_guarded_the_base_selector_is_written_without_an_empty_not_in() {
        let cluster = vec![namespace("prod-a", &[])];
        let mut reset = base();
        reset
            .match_expressions
            .as_mut()
            .unwrap()
            .push(LabelSelectorRequirement {
                key: NAME_LABEL.to_owned(),
                operator: "NotIn".to_owned(),
                values: Some(vec!["prod-a".to_owned()]),
            });
        let live = live(Some(reset));
        assert_eq!(
            plan_with(true, None, Some(&cluster), Some(&live)),
            Step::Write {
                selector: base(),
                excluded: 0
            }
        );
    }

    /// Issue 25: the gate is armed only by a replica that serves. Before that the chart's
    /// selector (matching no namespace) stays, so an install whose pod never runs, or
    /// crash-loops before its port serves, blocks nothing.
    #[test]
    fn nothing_is_written_before_this_replica_serves() {
        let cluster = cluster();
        let live = live(Some(base()));
        let step = plan(&PlanInputs {
            leading: true,
            serving: false,
            policy_problems: None,
            policies: &policies(),
            namespaces: Some(&cluster),
            live: Some(&live),
            gate: &gate(),
        });
        assert_eq!(step, Step::Hold(HoldReason::NotServing));
    }

    #[test]
    fn nothing_is_written_while_not_leading_the_policy_is_refused_or_namespaces_are_unknown() {
        let cluster = cluster();
        let live = live(Some(base()));
        assert_eq!(
            plan_with(false, None, Some(&cluster), Some(&live)),
            Step::Hold(HoldReason::NotLeading)
        );
        assert_eq!(
            plan_with(
                true,
                Some("a.yaml:3: spec: bad\nb.yaml:1: x: y"),
                Some(&cluster),
                Some(&live)
            ),
            Step::Hold(HoldReason::PolicyRefused(
                "a.yaml:3: spec: bad; b.yaml:1: x: y".to_owned()
            ))
        );
        assert_eq!(
            plan_with(true, None, None, Some(&live)),
            Step::Hold(HoldReason::NamespacesUnknown)
        );
        assert_eq!(
            plan_with(true, None, Some(&cluster), None),
            Step::Hold(HoldReason::ConfigurationAbsent("driftgate".to_owned()))
        );
        let mut other = live.clone();
        other.webhooks.as_mut().unwrap()[0].name = "records.driftgate.dev".to_owned();
        let Step::Hold(reason) = plan_with(true, None, Some(&cluster), Some(&other)) else {
            panic!("a configuration without the gate webhook is not written");
        };
        assert_eq!(
            reason.to_string(),
            "ValidatingWebhookConfiguration driftgate has no webhook gate.driftgate.dev; fix --gate-webhook-name"
        );
    }

    #[test]
    fn the_base_selector_flag_takes_a_label_selector_and_nothing_else() {
        let parsed = parse_label_selector(
            r#"{"matchLabels":{"team":"a"},"matchExpressions":[{"key":"kubernetes.io/metadata.name","operator":"NotIn","values":["kube-system","driftgate"]}]}"#,
        );
        assert_eq!(parsed, Ok(base()));
        assert_eq!(parse_label_selector("{}"), Ok(LabelSelector::default()));
        let misspelt = parse_label_selector(r#"{"matchLabel":{"team":"a"}}"#).unwrap_err();
        assert!(misspelt.contains("\"matchLabel\""), "{misspelt}");
        assert!(
            parse_label_selector("[]")
                .unwrap_err()
                .contains("not a JSON object")
        );
        assert!(parse_label_selector("{").unwrap_err().contains("not JSON"));
    }

    #[test]
    fn the_apply_body_names_only_the_gate_webhooks_selector() {
        let body = apply_body(&gate(), &base());
        assert_eq!(
            body["webhooks"],
            serde_json::json!([{
                "name": "gate.driftgate.dev",
                "namespaceSelector": {
                    "matchLabels": {"team": "a"},
                    "matchExpressions": [{"key": NAME_LABEL, "operator": "NotIn", "values": ["kube-system", "driftgate"]}],
                },
            }])
        );
        assert_eq!(body["metadata"], serde_json::json!({"name": "driftgate"}));
    }
}
