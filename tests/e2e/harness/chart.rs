//! The Helm chart, rendered by a real helm, as the source of what the tests install: the
//! ValidatingWebhookConfiguration (pointed at a loopback driftgate through `webhook.url`, as
//! controller-runtime's envtest does) and driftgate's RBAC.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use base64::Engine;
use base64::prelude::BASE64_STANDARD;
use serde_json::Value;

use super::repo_path;

/// The release the harness renders: driftgate's identity in the harness is
/// `system:serviceaccount:driftgate:driftgate`, which is this release's ServiceAccount.
pub const RELEASE: &str = "driftgate";
pub const NAMESPACE: &str = "driftgate";

pub fn helm() -> &'static PathBuf {
    static HELM: OnceLock<PathBuf> = OnceLock::new();
    HELM.get_or_init(|| {
        let script = repo_path("charts/driftgate/ci/install-helm.sh");
        let out = Command::new("bash")
            .arg(&script)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
        assert!(
            out.status.success(),
            "the e2e tests render the Helm chart and need helm; {} could not provide it \
             (it builds helm with Go, or set HELM=/path/to/helm):\n{}",
            script.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
    })
}

/// Every object of `helm template` with these `--set` values.
pub fn render(sets: &[String]) -> Vec<Value> {
    let mut command = Command::new(helm());
    command
        .args(["template", RELEASE])
        .arg(repo_path("charts/driftgate"))
        .args(["--namespace", NAMESPACE]);
    for set in sets {
        command.args(["--set", set]);
    }
    let scratch = std::env::temp_dir().join(format!("driftgate-e2e-helm-{}", std::process::id()));
    command
        .env("HELM_CONFIG_HOME", scratch.join("config"))
        .env("HELM_CACHE_HOME", scratch.join("cache"))
        .env("HELM_DATA_HOME", scratch.join("data"));
    let out = command.output().expect("helm runs");
    assert!(
        out.status.success(),
        "helm template failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_saphyr::from_multiple::<Value>(&String::from_utf8_lossy(&out.stdout))
        .expect("helm renders YAML")
        .into_iter()
        .filter(|v| !v.is_null())
        .collect()
}

fn one(objects: &[Value], kind: &str) -> Value {
    let mut found = objects.iter().filter(|o| o["kind"] == kind);
    let object = found
        .next()
        .unwrap_or_else(|| panic!("the chart renders no {kind}"));
    assert!(found.next().is_none(), "the chart renders several {kind}");
    object.clone()
}

/// The chart's ValidatingWebhookConfiguration, named `name`, calling `url` and trusting
/// `ca_pem`, with only its gate webhook (`gate.driftgate.dev`): the records webhook sees every
/// namespace, so a test registers it only with [`records_webhook_configuration`], narrowed.
pub fn webhook_configuration(name: &str, url: &str, ca_pem: &[u8]) -> Value {
    configuration_with(name, url, ca_pem, "gate.driftgate.dev")
}

/// [`webhook_configuration`] as the chart installs it with the selector keeper on
/// (`webhook.excludeUnguardedNamespaces`, the default): unarmed, matching no namespace until a
/// driftgate that serves writes its selector. The other functions render it with the keeper
/// off, as the tests that register driftgates without a keeper need.
pub fn installed_webhook_configuration(name: &str, url: &str, ca_pem: &[u8]) -> Value {
    configuration_with_sets(
        name,
        url,
        ca_pem,
        "gate.driftgate.dev",
        &["webhook.excludeUnguardedNamespaces=true".to_owned()],
    )
}

/// The chart's ValidatingWebhookConfiguration with only its records webhook
/// (`records.driftgate.dev`: backport records in every namespace, and their CRD).
pub fn records_webhook_configuration(name: &str, url: &str, ca_pem: &[u8]) -> Value {
    configuration_with(name, url, ca_pem, "records.driftgate.dev")
}

/// The chart's ValidatingWebhookConfiguration with only its policies webhook
/// (`policies.driftgate.dev`: GatePolicy creates and updates, cluster-wide), as
/// `gatePolicies.enabled` renders it.
pub fn policies_webhook_configuration(name: &str, url: &str, ca_pem: &[u8]) -> Value {
    configuration_with(name, url, ca_pem, "policies.driftgate.dev")
}

/// The chart's gate webhook alone with `webhook.clusterScoped[i]` set to each of `cluster_scoped`
/// (`(apiGroup, [resources])`), as a policy's `clusterScoped` section needs.
pub fn cluster_scoped_webhook_configuration(
    name: &str,
    url: &str,
    ca_pem: &[u8],
    cluster_scoped: &[(&str, &[&str])],
) -> Value {
    let mut sets = Vec::new();
    for (i, (group, resources)) in cluster_scoped.iter().enumerate() {
        sets.push(format!("webhook.clusterScoped[{i}].apiGroups={{{group}}}"));
        sets.push(format!(
            "webhook.clusterScoped[{i}].resources={{{}}}",
            resources.join(",")
        ));
    }
    configuration_with_sets(name, url, ca_pem, "gate.driftgate.dev", &sets)
}

fn configuration_with(name: &str, url: &str, ca_pem: &[u8], webhook: &str) -> Value {
    configuration_with_sets(name, url, ca_pem, webhook, &[])
}

fn configuration_with_sets(
    name: &str,
    url: &str,
    ca_pem: &[u8],
    webhook: &str,
    sets: &[String],
) -> Value {
    let mut all = vec![
        format!("webhook.url={url}"),
        format!("webhook.caBundle={}", BASE64_STANDARD.encode(ca_pem)),
        // Renders every webhook; the one asked for is kept.
        "gatePolicies.enabled=true".to_owned(),
        // No keeper writes these tests' selectors: the gate armed as the chart's base.
        "webhook.excludeUnguardedNamespaces=false".to_owned(),
    ];
    all.extend_from_slice(sets);
    let objects = render(&all);
    let mut configuration = one(&objects, "ValidatingWebhookConfiguration");
    configuration["metadata"] = serde_json::json!({"name": name});
    let webhooks = configuration["webhooks"]
        .as_array_mut()
        .expect("the configuration has webhooks");
    webhooks.retain(|w| w["name"] == webhook);
    assert_eq!(webhooks.len(), 1, "the chart renders webhook {webhook}");
    configuration
}

/// The chart's RBAC for driftgate (ClusterRole and ClusterRoleBinding; the Role and RoleBinding
/// of its leader Lease and runtime-certificate Secret, with the release namespace they live in),
/// as one JSON list manifest.
pub fn rbac_manifest() -> String {
    // With every rule the chart can grant: the GatePolicy test's driftgate reads them, and the
    // auto-resume test's driftgate patches suspendable kinds (suspensions.autoResume), the
    // PolicyReport test's writes reports (policyReports.enabled).
    let objects = render(&[
        "gatePolicies.enabled=true".to_owned(),
        "suspensions.autoResume=true".to_owned(),
        // The PolicyReport test's driftgate writes them.
        "policyReports.enabled=true".to_owned(),
    ]);
    let namespace = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": NAMESPACE},
    });
    let rbac = ["ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"]
        .iter()
        .map(|kind| {
            let mut object = one(&objects, kind);
            // Helm's bookkeeping labels are not needed to apply it.
            let namespace = object["metadata"]["namespace"].clone();
            object["metadata"] = serde_json::json!({"name": object["metadata"]["name"]});
            if !namespace.is_null() {
                object["metadata"]["namespace"] = namespace;
            }
            object
        });
    let items: Vec<Value> = std::iter::once(namespace).chain(rbac).collect();
    serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string()
}
