//! The Helm chart `charts/driftgate`, rendered by a real helm (built from source by
//! `charts/driftgate/ci/install-helm.sh`): `helm lint` and `helm template` with every values file
//! in `charts/driftgate/ci/`, and the properties of the rendered objects that keep the webhook
//! safe to run: what the API server sends it, that it can never lock out its own namespace, a
//! restricted pod, least-privilege RBAC, a policy driftgate accepts, and certificates that verify.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use driftgate::metrics::{
    Metrics, PolicyLabels, ReasonLabels, ResumeLabels, ReviewLabels, SuspensionLabels,
};
use driftgate::silence::ControllerKey;
use k8s_openapi::ByteString;
use serde_json::{Value, json};
use tempfile::TempDir;

#[path = "common/scratch.rs"]
mod scratch;
use scratch::scratch_dir;

const RELEASE: &str = "driftgate";
const NAMESPACE: &str = "driftgate-system";

/// The values files every test renders with; the chart's `ci/` folder must hold exactly these.
const VALUES_FILES: &[&str] = &[
    "cert-manager-issuer-values.yaml",
    "cert-manager-values.yaml",
    "client-auth-values.yaml",
    "default-values.yaml",
    "existing-configmap-values.yaml",
    "failure-ignore-values.yaml",
    "monitoring-values.yaml",
];

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn chart() -> PathBuf {
    repo().join("charts/driftgate")
}

/// A values file of the chart's `ci/` folder, or any file given by an absolute path.
fn values_file(name: &str) -> PathBuf {
    chart().join("ci").join(name)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The helm binary: the install script builds it once (minutes) and prints its path after that.
fn helm() -> &'static Path {
    static HELM: OnceLock<PathBuf> = OnceLock::new();
    HELM.get_or_init(|| {
        let script = chart().join("ci/install-helm.sh");
        let out = Command::new("bash")
            .arg(&script)
            .output()
            .unwrap_or_else(|e| panic!("cannot run bash {}: {e}", script.display()));
        assert!(
            out.status.success(),
            "the chart tests need helm, and {} could not provide it (it builds helm with Go 1.21+, \
             or uses HELM=/path/to/helm):\n{}",
            script.display(),
            text(&out.stderr)
        );
        let path = PathBuf::from(text(&out.stdout).trim());
        assert!(
            path.is_file(),
            "install-helm.sh printed {path:?}, which is not a file"
        );
        path
    })
}

/// Runs helm with its configuration, cache and data kept under the target directory.
fn run_helm(args: &[&str]) -> Output {
    let home = Path::new(env!("CARGO_TARGET_TMPDIR")).join("helm-home");
    Command::new(helm())
        .args(args)
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_DATA_HOME", home.join("data"))
        .env("KUBECONFIG", "/dev/null")
        .current_dir(repo())
        .output()
        .expect("helm runs")
}

/// The objects `helm template` renders, parsed from its multi-document YAML.
struct Manifests(Vec<Value>);

impl Manifests {
    fn all(&self, kind: &str) -> Vec<&Value> {
        self.0.iter().filter(|o| o["kind"] == kind).collect()
    }

    fn one(&self, kind: &str) -> &Value {
        let found = self.all(kind);
        assert_eq!(
            found.len(),
            1,
            "expected exactly one {kind}, found {found:?}"
        );
        found[0]
    }

    fn named(&self, kind: &str, name: &str) -> &Value {
        self.0
            .iter()
            .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no {kind} named {name} among {:?}", self.kinds()))
    }

    fn kinds(&self) -> Vec<String> {
        self.0
            .iter()
            .map(|o| format!("{}/{}", str(&o["kind"]), str(&o["metadata"]["name"])))
            .collect()
    }

    /// The gate: the first webhook (the second guards driftgate's own records, the third
    /// GatePolicy objects).
    fn webhook(&self) -> &Value {
        let vwc = self.one("ValidatingWebhookConfiguration");
        let webhooks = vwc["webhooks"].as_array().expect("webhooks is a list");
        assert!(matches!(webhooks.len(), 2 | 3), "{webhooks:?}");
        &webhooks[0]
    }

    /// The webhook that guards driftgate's backport records and their CRD.
    fn records_webhook(&self) -> &Value {
        let vwc = self.one("ValidatingWebhookConfiguration");
        &vwc["webhooks"].as_array().expect("webhooks is a list")[1]
    }

    fn container(&self) -> &Value {
        let containers = self.one("Deployment")["spec"]["template"]["spec"]["containers"]
            .as_array()
            .expect("containers is a list");
        assert_eq!(containers.len(), 1);
        &containers[0]
    }

    /// The container port a probe or Service names (by name or number).
    fn container_port(&self, port: &Value) -> u64 {
        if let Some(number) = port.as_u64() {
            return number;
        }
        self.container()["ports"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == *port)
            .unwrap_or_else(|| panic!("the container has no port named {port}"))["containerPort"]
            .as_u64()
            .unwrap()
    }

    fn volume(&self, name: &str) -> &Value {
        self.one("Deployment")["spec"]["template"]["spec"]["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("no volume {name}"))
    }
}

fn str(value: &Value) -> &str {
    value.as_str().unwrap_or_default()
}

fn strings(value: &Value) -> Vec<&str> {
    value
        .as_array()
        .unwrap_or_else(|| panic!("{value} is not a list"))
        .iter()
        .map(|v| v.as_str().unwrap_or_else(|| panic!("{v} is not a string")))
        .collect()
}

/// `helm template` of the chart as release `driftgate` in `namespace`, with values files from
/// `ci/` and `--set` arguments: the objects a release installs (`helm test`'s are left out; see
/// [`render_tests`]).
fn render_in(namespace: &str, files: &[&str], sets: &[&str]) -> Manifests {
    render_with(namespace, files, sets, &["--skip-tests"])
}

/// Only the objects `helm test` creates (annotated `helm.sh/hook: test`).
fn render_tests(sets: &[&str]) -> Manifests {
    let all = render_with(NAMESPACE, &[], sets, &[]);
    Manifests(
        all.0
            .into_iter()
            .filter(|o| o["metadata"]["annotations"]["helm.sh/hook"] == "test")
            .collect(),
    )
}

fn render_with(namespace: &str, files: &[&str], sets: &[&str], extra: &[&str]) -> Manifests {
    let chart = chart();
    let mut args = vec![
        "template".to_owned(),
        RELEASE.to_owned(),
        chart.display().to_string(),
        "--namespace".to_owned(),
        namespace.to_owned(),
    ];
    args.extend(extra.iter().map(|a| (*a).to_owned()));
    for file in files {
        args.push("--values".to_owned());
        args.push(values_file(file).display().to_string());
    }
    for set in sets {
        args.push("--set".to_owned());
        args.push((*set).to_owned());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = run_helm(&args);
    assert!(
        out.status.success(),
        "helm {args:?} failed:\n{}",
        text(&out.stderr)
    );
    let yaml = text(&out.stdout);
    let docs: Vec<Value> = serde_saphyr::from_multiple(&yaml)
        .unwrap_or_else(|e| panic!("helm {args:?} rendered invalid YAML: {e}\n{yaml}"));
    Manifests(docs.into_iter().filter(|d| !d.is_null()).collect())
}

fn render(files: &[&str], sets: &[&str]) -> Manifests {
    render_in(NAMESPACE, files, sets)
}

fn decode(base64: &Value) -> Vec<u8> {
    let bytes: ByteString = serde_json::from_value(base64.clone())
        .unwrap_or_else(|e| panic!("{base64} is not base64: {e}"));
    bytes.0
}

fn encode(bytes: &[u8]) -> String {
    serde_json::to_value(ByteString(bytes.to_vec()))
        .unwrap()
        .as_str()
        .unwrap()
        .to_owned()
}

#[test]
fn the_ci_folder_holds_the_values_files_the_tests_use() {
    let mut found: Vec<String> = std::fs::read_dir(chart().join("ci"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with("-values.yaml"))
        .collect();
    found.sort();
    assert_eq!(found, VALUES_FILES);
}

#[test]
fn helm_lint_passes_with_every_values_file() {
    let chart = chart().display().to_string();
    for file in VALUES_FILES {
        let values = values_file(file).display().to_string();
        let out = run_helm(&[
            "lint",
            "--strict",
            &chart,
            "--namespace",
            NAMESPACE,
            "--values",
            &values,
        ]);
        assert!(
            out.status.success(),
            "helm lint --strict with {file}:\n{}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
    }
}

#[test]
fn every_values_file_renders_namespaced_objects_into_the_release_namespace() {
    let cluster_scoped = [
        "CustomResourceDefinition",
        "ClusterRole",
        "ClusterRoleBinding",
        "ValidatingWebhookConfiguration",
    ];
    for file in VALUES_FILES {
        let manifests = render(&[file], &[]);
        let mut seen = BTreeSet::new();
        for object in &manifests.0 {
            let kind = str(&object["kind"]);
            let name = str(&object["metadata"]["name"]);
            assert!(!kind.is_empty() && !name.is_empty(), "{file}: {object}");
            assert!(object["apiVersion"].is_string(), "{file}: {kind}/{name}");
            assert!(seen.insert((kind, name)), "{file}: {kind}/{name} twice");
            if cluster_scoped.contains(&kind) {
                assert!(object["metadata"]["namespace"].is_null(), "{file}: {kind}");
            } else {
                assert_eq!(
                    object["metadata"]["namespace"], NAMESPACE,
                    "{file}: {kind}/{name} must name the release namespace, so that the \
                     rendered manifests apply anywhere"
                );
            }
        }
        for kind in [
            "Deployment",
            "Service",
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "ValidatingWebhookConfiguration",
            "PodDisruptionBudget",
        ] {
            manifests.one(kind);
        }
        let crds: BTreeSet<&str> = manifests
            .all("CustomResourceDefinition")
            .iter()
            .map(|crd| str(&crd["metadata"]["name"]))
            .collect();
        assert_eq!(
            crds,
            BTreeSet::from([RECORDS_CRD, GATEPOLICIES_CRD]),
            "{file}"
        );
    }
}

#[test]
fn the_webhook_defaults_are_safe() {
    let manifests = render(&["default-values.yaml"], &[]);
    let vwc = manifests.one("ValidatingWebhookConfiguration");
    assert!(vwc["metadata"]["annotations"].is_null(), "{vwc}");
    let webhook = manifests.webhook();
    let name = str(&webhook["name"]);
    assert!(name.split('.').count() >= 3, "{name}");
    assert_eq!(webhook["admissionReviewVersions"], json!(["v1"]));
    assert_eq!(webhook["sideEffects"], "NoneOnDryRun");
    assert_eq!(webhook["timeoutSeconds"], 5);
    assert_eq!(webhook["failurePolicy"], "Fail");
    assert_eq!(webhook["matchPolicy"], "Equivalent");

    // driftgate answers (408) before the API server gives up.
    let args = strings(&manifests.container()["args"]);
    let at = args.iter().position(|a| *a == "--request-timeout").unwrap();
    assert_eq!(args[at + 1], "4s");
    // Idle connections cannot grow the pod past its memory limit.
    let at = args.iter().position(|a| *a == "--max-connections").unwrap();
    assert_eq!(args[at + 1], "2048");
    // The log's queue is the binary's default, and a value passes through.
    let at = args.iter().position(|a| *a == "--log-queue-lines").unwrap();
    assert_eq!(args[at + 1], "8192");
    let raised = render(&["default-values.yaml"], &["logQueueLines=65536"]);
    let raised = strings(&raised.container()["args"]);
    let at = raised
        .iter()
        .position(|a| *a == "--log-queue-lines")
        .unwrap();
    assert_eq!(raised[at + 1], "65536");

    // The Service the API server calls, and the container port behind it.
    let service = manifests.one("Service");
    let client = &webhook["clientConfig"];
    assert!(client["url"].is_null());
    assert_eq!(client["service"]["name"], service["metadata"]["name"]);
    assert_eq!(client["service"]["namespace"], NAMESPACE);
    assert_eq!(client["service"]["path"], "/validate");
    assert_eq!(client["service"]["port"], 443);
    let port = service["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["port"] == 443)
        .expect("the Service has port 443");
    assert_eq!(manifests.container_port(&port["targetPort"]), 8443);
    assert_eq!(
        service["spec"]["selector"],
        manifests.one("Deployment")["spec"]["selector"]["matchLabels"]
    );

    // `*` does not reach subresources; those that can change more than status must be listed
    // (tests/e2e/scenarios/subresources.rs probes each), `*/*` never.
    let rules = webhook["rules"].as_array().unwrap();
    let resources: Vec<&str> = rules
        .iter()
        .flat_map(|r| strings(&r["resources"]))
        .collect();
    assert!(resources.contains(&"*"), "{resources:?}");
    assert!(resources.contains(&"*/scale"), "{resources:?}");
    assert!(!resources.contains(&"*/*"), "{resources:?}");
    let broad = &rules[0];
    assert_eq!(broad["apiGroups"], json!(["*"]));
    assert_eq!(broad["apiVersions"], json!(["*"]));
    assert_eq!(broad["operations"], json!(["CREATE", "UPDATE", "DELETE"]));
    assert_eq!(broad["resources"], json!(["*", "*/scale", "*/status"]));
    // pods/resize and pods/ephemeralcontainers change a Pod's spec.
    assert!(
        rules.iter().any(|r| r["apiGroups"] == json!([""])
            && strings(&r["resources"]) == ["pods/resize", "pods/ephemeralcontainers"]
            && r["operations"] == json!(["UPDATE"])),
        "{rules:?}"
    );
    // Namespace objects carry namespace-wide break-glass windows: their writes are sent too,
    // and through `finalize` and `status` the API server keeps label changes.
    assert!(
        rules.iter().any(|r| r["apiGroups"] == json!([""])
            && strings(&r["resources"])
                == ["namespaces", "namespaces/status", "namespaces/finalize"]
            && r["scope"] != "Namespaced"),
        "{rules:?}"
    );

    assert_release_namespace_excluded(webhook, NAMESPACE);
    assert!(webhook["objectSelector"].is_null());
    // Leader election (Leases) never waits on the webhook.
    let conditions = serde_json::to_string(&webhook["matchConditions"]).unwrap();
    assert!(conditions.contains("leases"), "{conditions}");
    // A subresource write other than `scale` reaches driftgate only when it changes more than
    // status (tests/e2e/scenarios/subresources.rs proves it on the API server).
    let condition = webhook["matchConditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "subresource-changes-more-than-status")
        .unwrap_or_else(|| panic!("no subresource condition: {conditions}"));
    let expression = str(&condition["expression"]);
    for part in [
        "!has(request.subResource) || request.subResource == 'scale' ||",
        "object == null || oldObject == null ||",
        "!(k in ['status', 'metadata'])",
        "!(k in ['resourceVersion', 'managedFields'])",
    ] {
        assert!(expression.contains(part), "{part} is not in {expression}");
    }
}

/// The namespaceSelector keeps kube-system and the webhook's own namespace out, whatever else
/// it holds: a webhook that guards its own namespace cannot recreate its pods when it is down.
fn assert_release_namespace_excluded(webhook: &Value, namespace: &str) {
    let expressions = webhook["namespaceSelector"]["matchExpressions"]
        .as_array()
        .expect("namespaceSelector.matchExpressions");
    let exclusion = expressions
        .iter()
        .find(|e| e["key"] == "kubernetes.io/metadata.name" && e["operator"] == "NotIn")
        .unwrap_or_else(|| panic!("no NotIn on kubernetes.io/metadata.name: {expressions:?}"));
    let excluded = strings(&exclusion["values"]);
    assert!(excluded.contains(&"kube-system"), "{excluded:?}");
    assert!(excluded.contains(&namespace), "{excluded:?}");
}

#[test]
fn the_release_namespace_is_excluded_wherever_the_chart_is_installed() {
    for namespace in ["gitops-guard", "kube-system"] {
        let manifests = render_in(namespace, &["failure-ignore-values.yaml"], &[]);
        let webhook = manifests.webhook();
        assert_release_namespace_excluded(webhook, namespace);
        assert_eq!(webhook["clientConfig"]["service"]["namespace"], namespace);
        let excluded = &webhook["namespaceSelector"]["matchExpressions"][0]["values"];
        let unique: BTreeSet<&str> = strings(excluded).into_iter().collect();
        assert_eq!(unique.len(), strings(excluded).len(), "{excluded}");
    }
}

#[test]
fn failure_policy_ignore_and_narrowed_selectors() {
    let manifests = render(&["failure-ignore-values.yaml"], &[]);
    let webhook = manifests.webhook();
    assert_eq!(webhook["failurePolicy"], "Ignore");
    assert_eq!(webhook["sideEffects"], "NoneOnDryRun");
    assert_eq!(webhook["timeoutSeconds"], 5);
    assert_eq!(webhook["matchPolicy"], "Equivalent");
    assert_release_namespace_excluded(webhook, NAMESPACE);

    // The values' extra conditions come after the exclusion, which they cannot replace.
    let selector = &webhook["namespaceSelector"];
    assert_eq!(
        selector["matchLabels"],
        json!({"driftgate.dev/enforce": "true"})
    );
    let expressions = selector["matchExpressions"].as_array().unwrap();
    assert_eq!(
        strings(&expressions[0]["values"]),
        ["kube-system", NAMESPACE, "flux-system"]
    );
    assert_eq!(
        expressions[1],
        json!({"key": "environment", "operator": "In", "values": ["production", "staging"]})
    );
    assert_eq!(
        webhook["objectSelector"],
        json!({"matchExpressions": [{"key": "driftgate.dev/ignore", "operator": "DoesNotExist"}]})
    );

    let resources: Vec<&str> = webhook["rules"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| strings(&r["resources"]))
        .collect();
    assert!(resources.contains(&"deployments/scale"), "{resources:?}");
    assert!(
        !resources.iter().any(|r| r.ends_with("/*")),
        "{resources:?}"
    );
}

#[test]
fn the_values_schema_refuses_unsafe_values() {
    let chart = chart().display().to_string();
    for (set, complaint) in [
        ("webhook.failurePolicy=Maybe", "failurePolicy"),
        ("webhook.rules[0].resources={*/*}", "rules"),
        ("webhook.name=gate.dev", "name"),
        ("webhook.timeoutSeconds=60", "timeoutSeconds"),
        ("records.failurePolicy=Maybe", "failurePolicy"),
        ("records.retention=forever", "retention"),
        ("logQueueLines=0", "logQueueLines"),
        (
            "records.webhookName=gate.driftgate.dev",
            "must differ from webhook.name",
        ),
        (
            "webhook.clusterScoped[0].apiGroups={admissionregistration.k8s.io},webhook.clusterScoped[0].resources={validatingwebhookconfigurations}",
            "the API server never sends webhook configurations",
        ),
    ] {
        let out = run_helm(&["template", RELEASE, &chart, "--set", set]);
        assert!(!out.status.success(), "--set {set} rendered");
        let stderr = text(&out.stderr);
        assert!(stderr.contains(complaint), "--set {set}: {stderr}");
    }
}

#[test]
fn the_deployment_runs_restricted_with_probes_on_the_admin_port() {
    let manifests = render(&["default-values.yaml"], &[]);
    let deployment = manifests.one("Deployment");
    assert_eq!(deployment["spec"]["replicas"], 2);
    let pod = &deployment["spec"]["template"]["spec"];
    let labels = &deployment["spec"]["selector"]["matchLabels"];
    for (key, value) in labels.as_object().unwrap() {
        assert_eq!(
            &deployment["spec"]["template"]["metadata"]["labels"][key], value,
            "the pods carry the selector's labels"
        );
    }

    let pdb = manifests.one("PodDisruptionBudget");
    assert_eq!(pdb["spec"]["minAvailable"], 1);
    assert_eq!(pdb["spec"]["selector"]["matchLabels"], *labels);

    let preferred =
        pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
            .as_array()
            .expect("a preferred pod anti-affinity");
    let term = &preferred[0]["podAffinityTerm"];
    assert_eq!(term["topologyKey"], "kubernetes.io/hostname");
    assert_eq!(term["labelSelector"]["matchLabels"], *labels);
    assert!(
        pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            .is_null()
    );

    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(pod["securityContext"]["runAsUser"], 65532);
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    let container = manifests.container();
    let security = &container["securityContext"];
    assert_eq!(security["runAsNonRoot"], true);
    assert_eq!(security["runAsUser"], 65532);
    assert_eq!(security["readOnlyRootFilesystem"], true);
    assert_eq!(security["allowPrivilegeEscalation"], false);
    assert_eq!(security["capabilities"]["drop"], json!(["ALL"]));
    assert!(security["capabilities"]["add"].is_null());
    assert_eq!(security["seccompProfile"]["type"], "RuntimeDefault");

    for key in ["requests", "limits"] {
        assert!(
            container["resources"][key]["memory"].is_string(),
            "resources.{key}.memory: {container}"
        );
    }
    assert!(container["resources"]["requests"]["cpu"].is_string());

    for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
        let get = &container[probe]["httpGet"];
        assert_eq!(get["path"], path, "{probe}");
        assert_eq!(manifests.container_port(&get["port"]), 8080, "{probe}");
        assert!(
            get["scheme"].is_null() || get["scheme"] == "HTTP",
            "{probe}"
        );
    }
    let ports: BTreeSet<u64> = container["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["containerPort"].as_u64().unwrap())
        .collect();
    assert_eq!(ports, BTreeSet::from([8080, 8443]));

    let args = strings(&container["args"]);
    assert_eq!(
        args[..6],
        [
            "serve",
            "--policy",
            "/etc/driftgate/policies",
            "--audit-only",
            "--tls-secret",
            "driftgate-system/driftgate-certs",
        ]
    );
    assert!(!args.contains(&"--tls-cert"), "{args:?}");
    assert!(
        !args.contains(&"--dev") && !args.contains(&"--no-kube"),
        "{args:?}"
    );
    let pod_name = container["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "POD_NAME")
        .expect("POD_NAME");
    assert_eq!(
        pod_name["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.name"
    );

    let mounts: BTreeMap<&str, &Value> = container["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (str(&m["name"]), m))
        .collect();
    // The policies are mounted whole and read-only (a subPath mount never sees updates);
    // runtime certificates are read through the API: no Secret is mounted.
    assert!(!mounts.contains_key("tls"), "{mounts:?}");
    let mount = mounts["policies"];
    assert_eq!(mount["mountPath"], "/etc/driftgate/policies");
    assert_eq!(mount["readOnly"], true);
    assert!(mount["subPath"].is_null(), "{mount}");
    let configmap = manifests.one("ConfigMap");
    assert_eq!(
        manifests.volume("policies")["configMap"]["name"],
        configmap["metadata"]["name"]
    );
    assert!(manifests.volume("policies")["configMap"]["items"].is_null());

    assert_eq!(
        pod["serviceAccountName"],
        manifests.one("ServiceAccount")["metadata"]["name"]
    );
    assert_eq!(
        container["image"],
        format!("ghcr.io/driftgate/driftgate:{}", env!("CARGO_PKG_VERSION"))
    );
}

fn container_image(manifests: &Manifests) -> &Value {
    &manifests.one("Deployment")["spec"]["template"]["spec"]["containers"][0]["image"]
}

/// image/build.sh prints the manifest digest to pin; a loaded image (kind) goes by its tag.
#[test]
fn an_image_digest_pins_the_image_and_wins_over_the_tag() {
    let digest = format!("sha256:{}", "0123456789abcdef".repeat(4));
    let repository = "image.repository=registry.example.com/driftgate";
    let pinned = render(
        &[],
        &[
            repository,
            "image.tag=9.9.9",
            &format!("image.digest={digest}"),
        ],
    );
    assert_eq!(
        container_image(&pinned),
        &format!("registry.example.com/driftgate@{digest}")
    );
    let tagged = render(&[], &[repository, "image.tag=9.9.9"]);
    assert_eq!(
        container_image(&tagged),
        "registry.example.com/driftgate:9.9.9"
    );

    let chart = chart().display().to_string();
    for digest in ["latest", "sha256:0123", "sha512:abc"] {
        let set = format!("image.digest={digest}");
        let out = run_helm(&["template", RELEASE, &chart, "--set", &set]);
        assert!(!out.status.success(), "--set {set} rendered");
        assert!(
            text(&out.stderr).contains("digest"),
            "--set {set}: {}",
            text(&out.stderr)
        );
    }
}

#[test]
fn the_pod_is_cluster_critical_and_its_security_contexts_can_be_overridden() {
    let manifests = render(&["default-values.yaml"], &[]);
    let pod = &manifests.one("Deployment")["spec"]["template"]["spec"];
    assert_eq!(pod["priorityClassName"], "system-cluster-critical");
    let none = render(&[], &["priorityClassName="]);
    assert!(
        none.one("Deployment")["spec"]["template"]["spec"]["priorityClassName"].is_null(),
        "an empty priorityClassName renders none"
    );

    // OpenShift assigns the UID and GID: the fixed ones can be removed, the rest stays.
    let openshift = render(
        &[],
        &[
            "podSecurityContext.runAsUser=null",
            "podSecurityContext.runAsGroup=null",
            "podSecurityContext.fsGroup=null",
            "securityContext.runAsUser=null",
            "securityContext.runAsGroup=null",
        ],
    );
    let pod = &openshift.one("Deployment")["spec"]["template"]["spec"];
    assert_eq!(
        pod["securityContext"],
        json!({"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}})
    );
    let security = &openshift.container()["securityContext"];
    for key in ["runAsUser", "runAsGroup"] {
        assert!(security[key].is_null(), "{key}: {security}");
    }
    assert_eq!(security["readOnlyRootFilesystem"], true);
    assert_eq!(security["allowPrivilegeEscalation"], false);
    assert_eq!(security["capabilities"]["drop"], json!(["ALL"]));

    // A key of one's own is added to the defaults.
    let own = render(&[], &["podSecurityContext.runAsUser=1000720000"]);
    let pod = &own.one("Deployment")["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsUser"], 1000720000);
    assert_eq!(pod["securityContext"]["fsGroup"], 65532);
}

#[test]
fn the_network_policy_lets_only_the_listed_peers_reach_the_ports() {
    for file in VALUES_FILES {
        assert!(
            render(&[file], &[]).all("NetworkPolicy").is_empty(),
            "{file}"
        );
    }
    let manifests = render(
        &[],
        &[
            "networkPolicy.enabled=true",
            "networkPolicy.webhookFrom[0].ipBlock.cidr=10.0.0.0/24",
            "networkPolicy.metricsFrom[0].namespaceSelector.matchLabels.name=monitoring",
        ],
    );
    let policy = manifests.one("NetworkPolicy");
    assert_eq!(policy["metadata"]["namespace"], NAMESPACE);
    assert_eq!(
        policy["spec"]["podSelector"]["matchLabels"],
        manifests.one("Deployment")["spec"]["selector"]["matchLabels"]
    );
    assert_eq!(policy["spec"]["policyTypes"], json!(["Ingress"]));
    let ingress = policy["spec"]["ingress"].as_array().unwrap();
    assert_eq!(ingress.len(), 2, "{ingress:?}");
    let port_of = |rule: &Value| {
        let ports = rule["ports"].as_array().unwrap();
        assert_eq!(ports.len(), 1, "{rule}");
        assert_eq!(ports[0]["protocol"], "TCP");
        manifests.container_port(&ports[0]["port"])
    };
    assert_eq!(port_of(&ingress[0]), 8443);
    assert_eq!(
        ingress[0]["from"],
        json!([{"ipBlock": {"cidr": "10.0.0.0/24"}}])
    );
    assert_eq!(port_of(&ingress[1]), 8080);
    assert_eq!(
        ingress[1]["from"],
        json!([{"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}])
    );

    // Without metricsFrom no pod reaches the admin port; without webhookFrom no policy at all,
    // since one that misses the API server refuses every guarded write.
    let webhook_only = render(
        &[],
        &[
            "networkPolicy.enabled=true",
            "networkPolicy.webhookFrom[0].ipBlock.cidr=10.0.0.0/24",
        ],
    );
    let ingress = &webhook_only.one("NetworkPolicy")["spec"]["ingress"];
    assert_eq!(ingress.as_array().unwrap().len(), 1, "{ingress}");
    let chart = chart().display().to_string();
    let out = run_helm(&[
        "template",
        RELEASE,
        &chart,
        "--set",
        "networkPolicy.enabled=true",
    ]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("networkPolicy.webhookFrom is empty"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn helm_test_expects_a_dry_run_write_in_a_guarded_namespace_to_be_denied() {
    // No namespace is guarded on every cluster: no test unless one is named.
    assert!(render_tests(&[]).0.is_empty());

    let tests = render_tests(&["helmTest.namespace=payments"]);
    let pod = tests.one("Pod");
    assert_eq!(pod["metadata"]["namespace"], NAMESPACE);
    assert_eq!(pod["spec"]["restartPolicy"], "Never");
    let container = &pod["spec"]["containers"][0];
    assert_eq!(container["image"], "docker.io/alpine/k8s:1.34.1");
    let env: BTreeMap<&str, &str> = container["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (str(&e["name"]), str(&e["value"])))
        .collect();
    assert_eq!(env["NAMESPACE"], "payments");
    assert_eq!(
        env["DENIAL"],
        "admission webhook \"gate.driftgate.dev\" denied the request"
    );
    assert_eq!(container["command"], json!(["sh", "-c"]));
    let script = strings(&container["args"])[0];
    for part in [
        "kubectl create configmap",
        "--namespace \"$NAMESPACE\"",
        "--dry-run=server",
        "*\"$DENIAL\"*) echo \"PASS",
    ] {
        assert!(script.contains(part), "{part} is not in {script}");
    }
    // Admitted, or refused by something else than driftgate: the test fails; in Audit (the
    // default), no audit warning fails it.
    assert_eq!(script.matches("exit 1").count(), 3, "{script}");
    assert_eq!(env["AUDIT"], "driftgate audit (policy");
    assert!(script.contains("0:*\"$AUDIT\"*) echo \"PASS"), "{script}");
    // As restricted as driftgate's own pod.
    let deployment = render(&[], &[]);
    assert_eq!(
        pod["spec"]["securityContext"],
        deployment.one("Deployment")["spec"]["template"]["spec"]["securityContext"]
    );
    assert_eq!(
        container["securityContext"],
        deployment.container()["securityContext"]
    );

    // Its identity may create ConfigMaps (only the dry run uses it), and exists only during
    // the test, whatever its result.
    let account = tests.one("ServiceAccount");
    assert_eq!(
        pod["spec"]["serviceAccountName"],
        account["metadata"]["name"]
    );
    let role = tests.one("ClusterRole");
    assert_eq!(
        role["rules"],
        json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]}])
    );
    let binding = tests.one("ClusterRoleBinding");
    assert_eq!(binding["roleRef"]["name"], role["metadata"]["name"]);
    assert_eq!(
        binding["subjects"],
        json!([{"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": NAMESPACE}])
    );
    for object in [account, role, binding] {
        let annotations = &object["metadata"]["annotations"];
        assert_eq!(annotations["helm.sh/hook-weight"], "-1", "{object}");
        assert_eq!(
            annotations["helm.sh/hook-delete-policy"],
            "before-hook-creation,hook-succeeded,hook-failed",
            "{object}"
        );
    }
    assert_eq!(tests.0.len(), 4, "{:?}", tests.kinds());
    // The Pod itself stays until the next test, so that `helm test --logs` can read its log
    // after a success too (helm fetches logs once the hooks have run and been cleaned up).
    assert_eq!(
        pod["metadata"]["annotations"]["helm.sh/hook-delete-policy"],
        "before-hook-creation"
    );

    // Another webhook name is the denial looked for; a release install never has these objects.
    let renamed = render_tests(&["helmTest.namespace=prod-a", "webhook.name=gate.example.com"]);
    let env = &renamed.one("Pod")["spec"]["containers"][0]["env"];
    assert!(env.to_string().contains("gate.example.com"), "{env}");
    let install = render(&[], &["helmTest.namespace=payments"]);
    assert!(install.all("Pod").is_empty(), "{:?}", install.kinds());
}

#[test]
fn one_replica_gets_no_disruption_budget() {
    let manifests = render(&[], &["replicaCount=1"]);
    assert!(manifests.all("PodDisruptionBudget").is_empty());
}

#[test]
fn rbac_grants_exactly_what_driftgate_calls() {
    for file in VALUES_FILES {
        let manifests = render(&[file], &[]);
        let role = manifests.one("ClusterRole");
        let granted = granted_by(role);
        let expected: BTreeSet<String> = [
            "/namespaces:list",
            "/namespaces:watch",
            "events.k8s.io/events:create",
            "events.k8s.io/events:patch",
            "apps/deployments:get",
            "apps/statefulsets:get",
            "apps/replicasets:get",
            // What a delete would take with it (rbac.deletionCascade): claims and their owners.
            "/persistentvolumeclaims:list",
            "apps/statefulsets:list",
            "driftgate.dev/backportrequirements:get",
            "driftgate.dev/backportrequirements:list",
            "driftgate.dev/backportrequirements:watch",
            "driftgate.dev/backportrequirements:create",
            "driftgate.dev/backportrequirements:patch",
            // Retention: settled records are deleted by driftgate, and by nobody else.
            "driftgate.dev/backportrequirements:delete",
            "driftgate.dev/backportrequirements/status:patch",
            // The gate's namespaceSelector: the chart's own configuration only.
            "admissionregistration.k8s.io/validatingwebhookconfigurations[driftgate]:get",
            "admissionregistration.k8s.io/validatingwebhookconfigurations[driftgate]:list",
            "admissionregistration.k8s.io/validatingwebhookconfigurations[driftgate]:watch",
            "admissionregistration.k8s.io/validatingwebhookconfigurations[driftgate]:patch",
            // GatePolicy objects (gatePolicies.enabled, the default): read, and their status.
            "driftgate.dev/gatepolicies:get",
            "driftgate.dev/gatepolicies:list",
            "driftgate.dev/gatepolicies:watch",
            "driftgate.dev/gatepolicies/status:patch",
            // Suspensions counted (rbac.suspensionKinds): Flux's and Argo CD's kinds, list only.
            "kustomize.toolkit.fluxcd.io/kustomizations:list",
            "helm.toolkit.fluxcd.io/helmreleases:list",
            "source.toolkit.fluxcd.io/gitrepositories:list",
            "source.toolkit.fluxcd.io/ocirepositories:list",
            "source.toolkit.fluxcd.io/helmrepositories:list",
            "source.toolkit.fluxcd.io/buckets:list",
            "source.toolkit.fluxcd.io/helmcharts:list",
            "argoproj.io/applications:list",
            // Admitted writes read back (rbac.readBack): records and settlements rest on what
            // the API server stored. Secrets are not among them.
            "/configmaps:get",
            "/services:get",
            "/serviceaccounts:get",
            "/persistentvolumeclaims:get",
            "/namespaces:get",
            "apps/daemonsets:get",
            "batch/jobs:get",
            "batch/cronjobs:get",
            "autoscaling/horizontalpodautoscalers:get",
            "networking.k8s.io/ingresses:get",
            "networking.k8s.io/networkpolicies:get",
            "policy/poddisruptionbudgets:get",
            "rbac.authorization.k8s.io/roles:get",
            "rbac.authorization.k8s.io/rolebindings:get",
            "rbac.authorization.k8s.io/clusterroles:get",
            "rbac.authorization.k8s.io/clusterrolebindings:get",
            "apiextensions.k8s.io/customresourcedefinitions:get",
            "kustomize.toolkit.fluxcd.io/kustomizations:get",
            "helm.toolkit.fluxcd.io/helmreleases:get",
            "source.toolkit.fluxcd.io/gitrepositories:get",
            "source.toolkit.fluxcd.io/ocirepositories:get",
            "source.toolkit.fluxcd.io/helmrepositories:get",
            "source.toolkit.fluxcd.io/buckets:get",
            "source.toolkit.fluxcd.io/helmcharts:get",
            "argoproj.io/applications:get",
            "argoproj.io/applicationsets:get",
            "argoproj.io/appprojects:get",
            "argoproj.io/rollouts:get",
        ]
        .into_iter()
        .map(str::to_owned)
        .collect();
        assert_eq!(granted, expected, "{file}");
        assert!(!granted.iter().any(|g| g.contains('*')), "{file}");

        // The leader Lease: in the release namespace, and by name once created; so is the
        // runtime certificates' one Secret (not with cert-manager, whose Secret is mounted).
        let lease_role = manifests.one("Role");
        assert_eq!(lease_role["metadata"]["namespace"], NAMESPACE);
        let mut expected: BTreeSet<String> = [
            "coordination.k8s.io/leases:create",
            "coordination.k8s.io/leases[driftgate-leader]:get",
            "coordination.k8s.io/leases[driftgate-leader]:list",
            "coordination.k8s.io/leases[driftgate-leader]:patch",
            "coordination.k8s.io/leases[driftgate-leader]:watch",
            // The controllers' last-write records, beside it.
            "coordination.k8s.io/leases:get",
            "coordination.k8s.io/leases:list",
            "coordination.k8s.io/leases:update",
            "coordination.k8s.io/leases:delete",
        ]
        .into_iter()
        .map(str::to_owned)
        .collect();
        if !file.starts_with("cert-manager") {
            expected.extend(
                [
                    "/secrets:create",
                    "/secrets[driftgate-certs]:get",
                    "/secrets[driftgate-certs]:list",
                    "/secrets[driftgate-certs]:watch",
                    "/secrets[driftgate-certs]:update",
                ]
                .map(str::to_owned),
            );
        }
        assert_eq!(granted_by(lease_role), expected, "{file}");

        let binding = manifests.one("ClusterRoleBinding");
        assert_eq!(binding["roleRef"]["kind"], "ClusterRole");
        assert_eq!(binding["roleRef"]["name"], role["metadata"]["name"]);
        let subjects = json!([{
            "kind": "ServiceAccount",
            "name": manifests.one("ServiceAccount")["metadata"]["name"],
            "namespace": NAMESPACE,
        }]);
        assert_eq!(binding["subjects"], subjects);
        let lease_binding = manifests.one("RoleBinding");
        assert_eq!(lease_binding["roleRef"]["kind"], "Role");
        assert_eq!(
            lease_binding["roleRef"]["name"],
            lease_role["metadata"]["name"]
        );
        assert_eq!(lease_binding["subjects"], subjects);
    }
    // Without the selector's upkeep, runtime certificates still read and write the caBundle
    // (get, patch; no list or watch); with neither, no right on webhook configurations.
    let off = render(&[], &["webhook.excludeUnguardedNamespaces=false"]);
    let on_configurations: BTreeSet<String> = granted_by(off.one("ClusterRole"))
        .into_iter()
        .filter(|g| g.contains("validatingwebhookconfigurations"))
        .collect();
    assert_eq!(
        on_configurations,
        BTreeSet::from([
            "admissionregistration.k8s.io/validatingwebhookconfigurations[driftgate]:get"
                .to_owned(),
            "admissionregistration.k8s.io/validatingwebhookconfigurations[driftgate]:patch"
                .to_owned(),
        ])
    );
    let neither = render(
        &["cert-manager-values.yaml"],
        &["webhook.excludeUnguardedNamespaces=false"],
    );
    assert!(
        !granted_by(neither.one("ClusterRole"))
            .iter()
            .any(|g| g.contains("validatingwebhookconfigurations"))
    );
    // suspensions.autoResume adds patch on the suspendable kinds, and on nothing else.
    let default = render(&[], &[]);
    let resuming = render(&[], &["suspensions.autoResume=true"]);
    let added: BTreeSet<String> = granted_by(resuming.one("ClusterRole"))
        .difference(&granted_by(default.one("ClusterRole")))
        .cloned()
        .collect();
    let expected: BTreeSet<String> = granted_by(default.one("ClusterRole"))
        .iter()
        .filter_map(|g| g.strip_suffix(":list"))
        .filter(|g| {
            [
                "kustomize.toolkit",
                "helm.toolkit",
                "source.toolkit",
                "argoproj.io",
            ]
            .iter()
            .any(|group| g.starts_with(group))
        })
        .map(|g| format!("{g}:patch"))
        .collect();
    assert_eq!(expected.len(), 8, "{expected:?}");
    assert_eq!(added, expected);
}

/// Issue 25: a first install observes before it enforces. By default every policy is served
/// in Audit (`--audit-only`), the helm test expects driftgate's audit warning, and the notes say
/// where to look and how to switch; `enforcement: Enforce` serves the policies as written.
#[test]
fn a_first_install_audits_until_enforcement_is_enforce() {
    let flag = "--audit-only";
    let default = render(&[], &[]);
    assert!(strings(&default.container()["args"]).contains(&flag));
    let enforce = render(&[], &["enforcement=Enforce"]);
    assert!(!strings(&enforce.container()["args"]).contains(&flag));
    let test_env = |sets: &[&str]| {
        render_tests(&[&["helmTest.namespace=payments"], sets].concat())
            .one("Pod")["spec"]["containers"][0]["env"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == "AUDIT")
            .map(|e| e["value"].clone())
    };
    assert_eq!(test_env(&[]), Some(json!("driftgate audit (policy")));
    assert_eq!(test_env(&["enforcement=Enforce"]), Some(json!("")));
    let bad = Command::new(helm())
        .args(["template", "t"])
        .arg(chart())
        .args(["--set", "enforcement=enforce"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(
        text(&bad.stderr).contains("enforcement"),
        "{}",
        text(&bad.stderr)
    );
    let notes = std::fs::read_to_string(chart().join("templates/NOTES.txt")).unwrap();
    for words in [
        "It is installed in Audit",
        "reason=WouldDeny",
        "kubectl get policyreports -A",
        "--set enforcement=Enforce",
    ] {
        assert!(notes.contains(words), "NOTES.txt says {words:?}");
    }
}

#[test]
fn auto_resume_is_off_by_default_and_passes_its_flag_when_on() {
    let flag = "--resume-expired-suspensions";
    let off = render(&[], &[]);
    assert!(!strings(&off.container()["args"]).contains(&flag));
    let on = render(&[], &["suspensions.autoResume=true"]);
    assert!(strings(&on.container()["args"]).contains(&flag));
}

/// `group/resource[names]:verb` for every right a role grants (no `[names]` when unrestricted).
fn granted_by(role: &Value) -> BTreeSet<String> {
    let mut granted = BTreeSet::new();
    for rule in role["rules"].as_array().unwrap() {
        assert!(rule["nonResourceURLs"].is_null());
        let names = match &rule["resourceNames"] {
            Value::Null => String::new(),
            names => format!("[{}]", strings(names).join(",")),
        };
        for group in strings(&rule["apiGroups"]) {
            for resource in strings(&rule["resources"]) {
                for verb in strings(&rule["verbs"]) {
                    granted.insert(format!("{group}/{resource}{names}:{verb}"));
                }
            }
        }
    }
    granted
}

#[test]
fn driftgate_adds_its_exclusion_to_exactly_the_selector_the_chart_renders() {
    let sets = [
        "webhook.namespaceSelector.matchLabels.team=a",
        "webhook.namespaceSelector.matchExpressions[0].key=gitops",
        "webhook.namespaceSelector.matchExpressions[0].operator=Exists",
        "webhook.excludeNamespaces[0]=sandbox",
    ];
    for (files, sets) in [(&[][..], &[][..]), (&[][..], &sets[..])]
        .into_iter()
        .chain(
            VALUES_FILES
                .iter()
                .map(|f| (std::slice::from_ref(f), &[][..])),
        )
    {
        let manifests = render(files, sets);
        let configuration = manifests.one("ValidatingWebhookConfiguration");
        let gate = &configuration["webhooks"][0];
        let args = strings(
            &manifests.one("Deployment")["spec"]["template"]["spec"]["containers"][0]["args"],
        );
        let flag = |name: &str| {
            let at = args.iter().position(|a| *a == name);
            at.map(|at| args[at + 1].to_owned())
        };
        assert_eq!(
            flag("--gate-webhook-configuration").as_deref(),
            configuration["metadata"]["name"].as_str()
        );
        assert_eq!(
            flag("--gate-webhook-name").as_deref(),
            gate["name"].as_str()
        );
        let base: Value = serde_json::from_str(&flag("--gate-base-namespace-selector").unwrap())
            .expect("the base selector is JSON");
        // The chart renders the gate unarmed: the base plus an expression no namespace matches
        // (issue 25: an install whose pods never serve blocks nothing); driftgate's leader
        // writes the base plus its exclusion once it serves.
        let mut unarmed = base.clone();
        unarmed["matchExpressions"]
            .as_array_mut()
            .expect("the base has the static exclusion")
            .push(json!({"key": "kubernetes.io/metadata.name", "operator": "DoesNotExist"}));
        assert_eq!(unarmed, gate["namespaceSelector"], "{files:?} {sets:?}");
        assert_eq!(flag("--leader-lease").as_deref(), Some("driftgate-leader"));
        assert_eq!(flag("--leader-lease-namespace").as_deref(), Some(NAMESPACE));
    }
    let off = render(&[], &["webhook.excludeUnguardedNamespaces=false"]);
    let args = strings(&off.one("Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]);
    assert!(!args.contains(&"--gate-webhook-configuration"), "{args:?}");
    // Without the keeper nobody would arm it: the gate is rendered armed, the base alone.
    let selector = &off.one("ValidatingWebhookConfiguration")["webhooks"][0]["namespaceSelector"];
    assert!(!selector.to_string().contains("DoesNotExist"), "{selector}");
}

/// `driftgate policy check` on every file of the rendered policy ConfigMap.
fn policy_check(configmap: &Value, name: &str) -> Output {
    let dir = scratch_dir(&format!("chart-{name}"));
    let data = configmap["data"]
        .as_object()
        .expect("the ConfigMap has data");
    assert!(!data.is_empty());
    for (key, value) in data {
        std::fs::write(dir.path().join(key), str(value)).unwrap();
    }
    Command::new(env!("CARGO_BIN_EXE_driftgate"))
        .args(["policy", "check"])
        .arg(dir.path())
        .output()
        .expect("the driftgate binary runs")
}

#[test]
fn the_policy_configmap_holds_a_policy_driftgate_accepts() {
    let mut checked = 0;
    for file in VALUES_FILES {
        let manifests = render(&[file], &[]);
        for configmap in manifests.all("ConfigMap") {
            let out = policy_check(configmap, file);
            assert_eq!(
                out.status.code(),
                Some(0),
                "{file}: driftgate policy check refused the rendered policy:\n{}{}",
                text(&out.stdout),
                text(&out.stderr)
            );
            checked += 1;
        }
    }
    assert_eq!(
        checked,
        VALUES_FILES.len() - 1,
        "all but existing-configmap"
    );

    // The default is the example policy, byte for byte (values.yaml must not drift from it).
    let manifests = render(&[], &[]);
    let example = std::fs::read_to_string(repo().join("policies/example.yaml")).unwrap();
    assert_eq!(
        manifests.one("ConfigMap")["data"],
        json!({"policy.yaml": example})
    );

    // Structured values: one document per list element.
    let manifests = render(&["failure-ignore-values.yaml"], &[]);
    let policy = str(&manifests.one("ConfigMap")["data"]["policy.yaml"]);
    assert_eq!(policy.matches("kind: GatePolicy").count(), 2, "{policy}");

    // And the check is a real one: a broken policy renders, and is refused.
    let dir = scratch_dir("chart-broken-policy-values");
    let broken = dir.path().join("values.yaml");
    std::fs::write(
        &broken,
        "policy: |\n  apiVersion: driftgate.dev/v1alpha1\n  kind: GatePolicy\n  \
         metadata: {name: x}\n  spec: {namespaces: {include: [a]}, colour: blue}\n",
    )
    .unwrap();
    let manifests = render(&[broken.to_str().unwrap()], &[]);
    let out = policy_check(manifests.one("ConfigMap"), "broken");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
}

#[test]
fn an_existing_policy_configmap_is_mounted_and_none_is_created() {
    let manifests = render(&["existing-configmap-values.yaml"], &[]);
    assert!(manifests.all("ConfigMap").is_empty());
    assert_eq!(
        manifests.volume("policies")["configMap"]["name"],
        "gitops-gate-policies"
    );
}

/// The values each of `flag` is given in `args`, in order.
fn flag_values<'a>(args: &[&'a str], flag: &str) -> Vec<&'a str> {
    args.windows(2)
        .filter(|pair| pair[0] == flag)
        .map(|pair| pair[1])
        .collect()
}

#[test]
fn client_auth_is_off_by_default_and_mounts_the_ca_and_passes_its_flags_when_on() {
    let off = render(&[], &[]);
    let args = strings(&off.container()["args"]);
    assert!(
        flag_values(&args, "--client-ca-file").is_empty(),
        "{args:?}"
    );
    assert!(flag_values(&args, "--client-name").is_empty(), "{args:?}");
    let volumes = &off.one("Deployment")["spec"]["template"]["spec"]["volumes"];
    assert!(
        !volumes
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["name"] == "client-ca"),
        "{volumes}"
    );

    // From a ConfigMap, with the names given.
    let on = render(&["client-auth-values.yaml"], &[]);
    let args = strings(&on.container()["args"]);
    assert_eq!(
        flag_values(&args, "--client-ca-file"),
        ["/etc/driftgate/client-ca/ca.crt"]
    );
    assert_eq!(
        flag_values(&args, "--client-name"),
        ["kube-apiserver", "apiserver-webhook-client"]
    );
    assert_eq!(
        on.volume("client-ca"),
        &json!({"name": "client-ca", "configMap": {"name": "apiserver-webhook-client-ca"}})
    );
    // The whole object as a directory, never subPath: the kubelet's symlink swap carries a new
    // CA into the pod, where driftgate reloads it.
    let mounts = on.container()["volumeMounts"].as_array().unwrap();
    let mount = mounts.iter().find(|m| m["name"] == "client-ca").unwrap();
    assert_eq!(
        mount,
        &json!({"name": "client-ca", "mountPath": "/etc/driftgate/client-ca", "readOnly": true})
    );
    // The probes present no client certificate: they stay on the plain-HTTP admin port.
    for probe in ["livenessProbe", "readinessProbe"] {
        let port = &on.container()[probe]["httpGet"]["port"];
        assert_eq!(on.container_port(port), 8080, "{probe}");
    }

    // From a Secret, with another key and the default name.
    let secret = render(
        &[],
        &[
            "webhook.clientAuth.enabled=true",
            "webhook.clientAuth.caSecret=apiserver-client-ca",
            "webhook.clientAuth.caKey=bundle.pem",
        ],
    );
    let args = strings(&secret.container()["args"]);
    assert_eq!(
        flag_values(&args, "--client-ca-file"),
        ["/etc/driftgate/client-ca/bundle.pem"]
    );
    assert_eq!(flag_values(&args, "--client-name"), ["kube-apiserver"]);
    assert_eq!(
        secret.volume("client-ca"),
        &json!({"name": "client-ca", "secret": {"secretName": "apiserver-client-ca"}})
    );

    // Exactly one source of the CA; at least one name.
    let chart = chart().display().to_string();
    for sets in [
        vec!["webhook.clientAuth.enabled=true"],
        vec![
            "webhook.clientAuth.enabled=true",
            "webhook.clientAuth.caSecret=a",
            "webhook.clientAuth.caConfigMap=b",
        ],
    ] {
        let mut args = vec!["template", RELEASE, &chart];
        for set in &sets {
            args.extend(["--set", set]);
        }
        let out = run_helm(&args);
        assert!(!out.status.success(), "{sets:?}");
        assert!(
            text(&out.stderr).contains("webhook.clientAuth.enabled needs exactly one of"),
            "{}",
            text(&out.stderr)
        );
    }
    let out = run_helm(&[
        "template",
        RELEASE,
        &chart,
        "--values",
        &values_file("client-auth-values.yaml").display().to_string(),
        "--set-json",
        "webhook.clientAuth.names=[]",
    ]);
    assert!(!out.status.success(), "an empty list of names renders");
}

#[test]
fn runtime_certificates_render_no_secret_and_no_ca_bundle_so_helm_template_is_stable() {
    let manifests = render(&["default-values.yaml"], &[]);
    assert!(
        manifests.all("Secret").is_empty(),
        "{:?}",
        manifests.kinds()
    );
    let vwc = manifests.one("ValidatingWebhookConfiguration");
    for webhook in vwc["webhooks"].as_array().unwrap() {
        assert!(webhook["clientConfig"]["caBundle"].is_null(), "{webhook}");
    }
    assert!(vwc["metadata"]["annotations"]["cert-manager.io/inject-ca-from"].is_null());

    // driftgate is told its Secret, the Service's names for the certificate, and the webhooks
    // whose caBundle it writes: exactly this configuration's two.
    let container = &manifests.one("Deployment")["spec"]["template"]["spec"]["containers"][0];
    let args = strings(&container["args"]);
    let values_of = |flag: &str| -> Vec<&str> {
        args.windows(2)
            .filter(|pair| pair[0] == flag)
            .map(|pair| pair[1])
            .collect()
    };
    let service = str(&manifests.one("Service")["metadata"]["name"]).to_owned();
    assert_eq!(
        values_of("--tls-secret"),
        [format!("{NAMESPACE}/{service}-certs")]
    );
    assert!(
        values_of("--tls-secret-host").contains(&format!("{service}.{NAMESPACE}.svc").as_str()),
        "{args:?}"
    );
    assert_eq!(
        values_of("--webhook-configuration"),
        [str(&vwc["metadata"]["name"])]
    );
    let webhook_names: Vec<&str> = vwc["webhooks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| str(&w["name"]))
        .collect();
    assert_eq!(values_of("--ca-bundle-webhook"), webhook_names);
    assert_eq!(values_of("--cert-validity"), ["90d"]);

    // Nothing is generated at render time: two renders are byte for byte the same (Argo CD
    // sees no drift), which the chart's genCA mode never was.
    for file in VALUES_FILES {
        let render_text = || {
            let out = run_helm(&[
                "template",
                RELEASE,
                chart().to_str().unwrap(),
                "--namespace",
                NAMESPACE,
                "-f",
                values_file(file).to_str().unwrap(),
            ]);
            assert!(out.status.success(), "{}", text(&out.stderr));
            text(&out.stdout)
        };
        assert_eq!(
            render_text(),
            render_text(),
            "{file}: helm template differs between runs"
        );
    }
}

#[test]
fn cert_manager_mode_injects_the_ca_and_generates_no_secret() {
    let manifests = render(&["cert-manager-values.yaml"], &[]);
    assert!(
        manifests.all("Secret").is_empty(),
        "{:?}",
        manifests.kinds()
    );
    let vwc = manifests.one("ValidatingWebhookConfiguration");
    let inject = str(&vwc["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]);
    let (namespace, certificate) = inject.split_once('/').expect("namespace/name");
    assert_eq!(namespace, NAMESPACE);
    assert!(
        manifests.webhook()["clientConfig"]["caBundle"].is_null(),
        "the injector fills caBundle"
    );

    let serving = manifests.named("Certificate", certificate);
    assert_eq!(serving["metadata"]["namespace"], NAMESPACE);
    let service = str(&manifests.one("Service")["metadata"]["name"]).to_owned();
    let dns_names = strings(&serving["spec"]["dnsNames"]);
    assert!(
        dns_names.contains(&format!("{service}.{NAMESPACE}.svc").as_str()),
        "{dns_names:?}"
    );
    assert_eq!(
        manifests.volume("tls")["secret"]["secretName"],
        serving["spec"]["secretName"]
    );
    assert!(serving["spec"]["isCA"].is_null() || serving["spec"]["isCA"] == false);

    // The bootstrap: selfSigned Issuer -> CA Certificate -> CA Issuer -> serving Certificate.
    let ca_issuer = manifests.named("Issuer", str(&serving["spec"]["issuerRef"]["name"]));
    assert_eq!(serving["spec"]["issuerRef"]["kind"], "Issuer");
    let ca_secret = str(&ca_issuer["spec"]["ca"]["secretName"]);
    let ca = manifests
        .all("Certificate")
        .into_iter()
        .find(|c| c["spec"]["secretName"] == ca_secret)
        .expect("a Certificate makes the CA's Secret");
    assert_eq!(ca["spec"]["isCA"], true);
    let self_signed = manifests.named("Issuer", str(&ca["spec"]["issuerRef"]["name"]));
    assert_eq!(self_signed["spec"]["selfSigned"], json!({}));

    // With an issuer of one's own, nothing is bootstrapped.
    let manifests = render(&["cert-manager-issuer-values.yaml"], &[]);
    assert!(manifests.all("Secret").is_empty());
    assert!(manifests.all("Issuer").is_empty());
    let serving = manifests.one("Certificate");
    assert_eq!(
        serving["spec"]["issuerRef"],
        json!({"group": "cert-manager.io", "kind": "ClusterIssuer", "name": "internal-ca"})
    );
    let vwc = manifests.one("ValidatingWebhookConfiguration");
    assert_eq!(
        vwc["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
        format!("{NAMESPACE}/{}", str(&serving["metadata"]["name"]))
    );
}

#[test]
fn an_out_of_cluster_url_replaces_the_service() {
    // As the chart's README tells a kube-apiserver test harness to render it.
    let dir = scratch_dir("chart-url-mode");
    let out = Command::new(env!("CARGO_BIN_EXE_driftgate"))
        .args(["certs", "dev", "--out"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let ca = std::fs::read(dir.path().join("ca.crt")).unwrap();
    let ca_bundle = encode(&ca);
    let set_bundle = format!("webhook.caBundle={ca_bundle}");
    for file in ["default-values.yaml", "cert-manager-values.yaml"] {
        let manifests = render(
            &[file],
            &["webhook.url=https://127.0.0.1:8443/validate", &set_bundle],
        );
        let vwc = manifests.one("ValidatingWebhookConfiguration");
        let client = &manifests.webhook()["clientConfig"];
        assert_eq!(client["url"], "https://127.0.0.1:8443/validate", "{file}");
        assert!(client["service"].is_null(), "{file}");
        assert_eq!(decode(&client["caBundle"]), ca, "{file}");
        assert!(
            vwc["metadata"]["annotations"]["cert-manager.io/inject-ca-from"].is_null(),
            "{file}: the injector would overwrite the explicit caBundle"
        );
    }
}

/// The metric names driftgate exports (counters with their `_total` suffix).
fn exported_metrics() -> BTreeSet<String> {
    let metrics = Metrics::new();
    // A labelled family is exposed from its first sample on.
    metrics
        .reviews
        .get_or_create(&ReviewLabels {
            decision: "denied".into(),
            rule: "NotPermitted".into(),
            policy: "production".into(),
            operation: "UPDATE".into(),
        })
        .inc();
    metrics
        .events_published
        .get_or_create(&ReasonLabels {
            reason: "WriteDenied".into(),
        })
        .inc();
    metrics.set_controller_last_write(
        &ControllerKey {
            policy: "production".into(),
            controller: "flux".into(),
        },
        jiff::Timestamp::UNIX_EPOCH,
    );
    metrics
        .suspensions
        .get_or_create(&SuspensionLabels {
            policy: "production".into(),
            state: "expired".into(),
        })
        .set(1);
    metrics
        .suspension_resumes
        .get_or_create(&ResumeLabels {
            policy: "production".into(),
            result: "success".into(),
        })
        .inc();
    metrics
        .break_glass_labels_expired
        .get_or_create(&PolicyLabels {
            policy: "production".into(),
        })
        .set(1);
    let mut names = BTreeSet::new();
    for line in metrics.encode().lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut words = rest.split_whitespace();
            let (Some(name), Some(kind)) = (words.next(), words.next()) else {
                continue;
            };
            names.insert(name.to_owned());
            if kind == "counter" {
                names.insert(format!("{name}_total"));
            }
            if kind == "histogram" {
                for series in ["bucket", "sum", "count"] {
                    names.insert(format!("{name}_{series}"));
                }
            }
        }
    }
    names
}

fn expr_of(alerts: &BTreeMap<&str, &Value>, name: &str) -> String {
    str(&alerts[name]["expr"]).to_owned()
}

#[test]
fn monitoring_scrapes_the_admin_port_and_alerts_on_metrics_driftgate_exports() {
    let manifests = render(&["monitoring-values.yaml"], &[]);
    let service = manifests.one("Service");
    let monitor = manifests.one("ServiceMonitor");
    assert_eq!(
        monitor["metadata"]["labels"]["release"],
        "kube-prometheus-stack"
    );
    for (key, value) in monitor["spec"]["selector"]["matchLabels"]
        .as_object()
        .unwrap()
    {
        assert_eq!(&service["metadata"]["labels"][key], value);
    }
    let endpoint = &monitor["spec"]["endpoints"][0];
    assert_eq!(endpoint["path"], "/metrics");
    let port = service["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == endpoint["port"])
        .expect("the ServiceMonitor's port is the Service's");
    assert_eq!(manifests.container_port(&port["targetPort"]), 8080);

    let exported = exported_metrics();
    assert!(
        exported.contains("driftgate_admission_reviews_total"),
        "{exported:?}"
    );
    let rule = manifests.one("PrometheusRule");
    let alerts: BTreeMap<&str, &Value> = rule["spec"]["groups"][0]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (str(&r["alert"]), r))
        .collect();
    assert_eq!(
        alerts.keys().copied().collect::<Vec<_>>(),
        [
            "DriftgateBackportNotLinked",
            "DriftgateBackportPendingTooLong",
            "DriftgateBreakGlassWindowOpenTooLong",
            "DriftgateCertificateNearExpiry",
            "DriftgateControllerSilent",
            "DriftgateDenialsSpiking",
            "DriftgateEmergencyChangeReverted",
            "DriftgateLogLinesDropped",
            "DriftgatePolicyReloadFailed",
            "DriftgateSuspensionExpired",
            "DriftgateTLSReloadFailed",
            "DriftgateUnavailable",
            "DriftgateWindowBeyondMaxDuration",
        ]
    );
    assert!(
        expr_of(&alerts, "DriftgateSuspensionExpired").contains("state=\"expired\"}) > 0"),
        "{}",
        expr_of(&alerts, "DriftgateSuspensionExpired")
    );
    assert_eq!(alerts["DriftgateSuspensionExpired"]["for"], "5m");
    // A day to link the backport's pull request (the seed's deadline), two for Git to have it.
    let not_linked = expr_of(&alerts, "DriftgateBackportNotLinked");
    assert!(
        not_linked.contains("driftgate_backport_oldest_unlinked_seconds")
            && not_linked.contains("> 86400"),
        "{not_linked}"
    );
    let pending = expr_of(&alerts, "DriftgateBackportPendingTooLong");
    assert!(
        pending.contains("driftgate_backport_oldest_linked_seconds")
            && pending.contains("> 172800"),
        "{pending}"
    );
    assert!(
        expr_of(&alerts, "DriftgateEmergencyChangeReverted")
            .contains("driftgate_emergency_changes_reverted_total")
    );
    assert!(
        expr_of(&alerts, "DriftgateWindowBeyondMaxDuration").contains("rule=\"WindowTooLong\"")
    );
    let silent = expr_of(&alerts, "DriftgateControllerSilent");
    assert!(
        silent.contains("time() - max by (policy, controller) (driftgate_controller_last_write_timestamp_seconds{"),
        "{silent}"
    );
    assert!(silent.trim_end().ends_with("> 1800"), "{silent}");
    for (name, alert) in &alerts {
        let expr = str(&alert["expr"]);
        for word in expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            if word.starts_with("driftgate_") {
                assert!(exported.contains(word), "{name}: {word} is not exported");
            }
        }
        assert!(alert["labels"]["severity"].is_string(), "{name}");
        assert_eq!(alert["labels"]["team"], "platform", "{name}");
        assert!(alert["annotations"]["summary"].is_string(), "{name}");
    }
    let expr = |name: &str| str(&alerts[name]["expr"]).to_owned();
    let unavailable = expr("DriftgateUnavailable");
    assert!(unavailable.contains("up{"), "{unavailable}");
    assert!(unavailable.contains("absent(up{"), "{unavailable}");
    assert!(
        unavailable.contains("kube_deployment_status_replicas_available"),
        "{unavailable}"
    );
    assert!(unavailable.contains(&format!("job=\"{}\"", str(&service["metadata"]["name"]))));
    assert!(
        expr("DriftgateBreakGlassWindowOpenTooLong").contains("driftgate_break_glass_windows_open")
    );
    assert_eq!(alerts["DriftgateBreakGlassWindowOpenTooLong"]["for"], "6h");
    assert!(expr("DriftgateDenialsSpiking").contains("decision=\"denied\""));
    assert!(
        expr("DriftgateDenialsSpiking")
            .trim_end()
            .ends_with("> 0.5")
    );
    assert!(expr("DriftgatePolicyReloadFailed").contains("driftgate_policy_reloads_total"));
    assert!(expr("DriftgatePolicyReloadFailed").contains("result=\"failure\""));
    assert!(expr("DriftgateTLSReloadFailed").contains("driftgate_tls_reloads_total"));
    assert!(expr("DriftgateLogLinesDropped").contains("driftgate_log_lines_dropped_total"));

    // The default threshold, and nothing of this without the values.
    let manifests = render(&[], &["metrics.prometheusRule.enabled=true"]);
    let rules = &manifests.one("PrometheusRule")["spec"]["groups"][0]["rules"];
    let open_too_long = rules
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["alert"] == "DriftgateBreakGlassWindowOpenTooLong")
        .unwrap();
    assert_eq!(open_too_long["for"], "4h");
    let manifests = render(&["default-values.yaml"], &[]);
    assert!(manifests.all("ServiceMonitor").is_empty());
    assert!(manifests.all("PrometheusRule").is_empty());
}

/// Every `expr` of the dashboard's panels, rows' panels included.
fn dashboard_exprs(dashboard: &Value) -> Vec<String> {
    let mut exprs = Vec::new();
    let mut panels: Vec<&Value> = dashboard["panels"].as_array().unwrap().iter().collect();
    while let Some(panel) = panels.pop() {
        panels.extend(panel["panels"].as_array().into_iter().flatten());
        for target in panel["targets"].as_array().into_iter().flatten() {
            exprs.push(str(&target["expr"]).to_owned());
        }
    }
    exprs
}

#[test]
fn the_grafana_dashboard_renders_only_when_enabled_and_queries_only_exported_metrics() {
    let name = format!("{RELEASE}-dashboard");
    let off = render(&[], &[]);
    assert!(
        !off.kinds().contains(&format!("ConfigMap/{name}")),
        "{:?}",
        off.kinds()
    );
    let on = render(&[], &["metrics.dashboard.enabled=true"]);
    let configmap = on.named("ConfigMap", &name);
    assert_eq!(configmap["metadata"]["namespace"], NAMESPACE);
    assert_eq!(configmap["metadata"]["labels"]["grafana_dashboard"], "1");
    let elsewhere = render(
        &[],
        &[
            "metrics.dashboard.enabled=true",
            "metrics.dashboard.namespace=monitoring",
            "metrics.dashboard.labels.grafana_dashboard=null",
            "metrics.dashboard.labels.dashboards=driftgate",
        ],
    );
    let moved = elsewhere.named("ConfigMap", &name);
    assert_eq!(moved["metadata"]["namespace"], "monitoring");
    assert_eq!(moved["metadata"]["labels"]["dashboards"], "driftgate");
    assert!(moved["metadata"]["labels"]["grafana_dashboard"].is_null());

    let dashboard: Value = serde_json::from_str(str(&configmap["data"]["driftgate.json"]))
        .expect("the dashboard is JSON");
    assert_eq!(dashboard["uid"], "driftgate");
    let exprs = dashboard_exprs(&dashboard);
    let exported = exported_metrics();
    for expr in &exprs {
        for word in expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            if word.starts_with("driftgate_") {
                assert!(exported.contains(word), "{word} in {expr} is not exported");
            }
        }
    }
    // What the issue asks the dashboard to show, each by the metric that says it.
    for shown in [
        "driftgate_break_glass_windows_open",
        "driftgate_backport_pending",
        "driftgate_emergency_changes_reverted_total",
        "sum by (rule) (rate(driftgate_admission_reviews_total{job=~\"$job\", decision=\"denied\"}",
        "time() - max by (policy, controller) (driftgate_controller_last_write_timestamp_seconds",
        "histogram_quantile(0.99, sum by (le) (rate(driftgate_admission_duration_seconds_bucket",
    ] {
        assert!(
            exprs.iter().any(|e| e.contains(shown)),
            "no panel queries {shown}: {exprs:#?}"
        );
    }
}

#[test]
fn policy_reports_are_off_by_default_and_add_their_flags_and_rights_when_on() {
    let off = render(&[], &[]);
    assert!(!strings(&off.container()["args"]).contains(&"--policy-reports"));
    let on = render(
        &[],
        &["policyReports.enabled=true", "policyReports.interval=1m"],
    );
    let args = strings(&on.container()["args"]);
    let at = args
        .iter()
        .position(|a| *a == "--policy-reports")
        .expect("the flag is passed");
    assert_eq!(args[at + 1..at + 3], ["--policy-report-interval", "1m"]);
    let added: BTreeSet<String> = granted_by(on.one("ClusterRole"))
        .difference(&granted_by(off.one("ClusterRole")))
        .cloned()
        .collect();
    assert_eq!(
        added,
        BTreeSet::from([
            "wgpolicyk8s.io/policyreports:create".to_owned(),
            "wgpolicyk8s.io/policyreports:patch".to_owned(),
        ])
    );
}

#[test]
fn the_controller_silence_threshold_reaches_both_the_flag_and_the_alert() {
    let manifests = render(
        &[],
        &[
            "metrics.prometheusRule.enabled=true",
            "controllerSilence.afterSeconds=600",
        ],
    );
    let args = strings(&manifests.container()["args"]);
    let at = args
        .iter()
        .position(|a| *a == "--controller-silence-after")
        .expect("the flag is passed");
    assert_eq!(args[at + 1], "600s");
    let silent = manifests.one("PrometheusRule")["spec"]["groups"][0]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["alert"] == "DriftgateControllerSilent")
        .expect("the alert is shipped");
    assert!(
        str(&silent["expr"]).trim_end().ends_with("> 600"),
        "{silent}"
    );
}

/// `driftgate crd`'s output.
fn driftgate_crd() -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_driftgate"))
        .arg("crd")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout)
}

const CRD_FILE: &str = "files/crds/backportrequirements.driftgate.dev.yaml";
const RECORDS_CRD: &str = "backportrequirements.driftgate.dev";
const GATEPOLICIES_CRD: &str = "gatepolicies.driftgate.dev";
const GATEPOLICIES_CRD_FILE: &str = "files/crds/gatepolicies.driftgate.dev.yaml";

/// The structs of crates/driftgate-core/src/policy/document.rs, each with its fields as YAML names and their Rust
/// types, read from the source text: the document types read through serde-saphyr's
/// `Spanned`, which has no JSON schema to generate the CRD from, so the test reads both sides.
fn document_structs() -> BTreeMap<String, Vec<(String, String)>> {
    let source =
        std::fs::read_to_string(repo().join("crates/driftgate-core/src/policy/document.rs"))
            .unwrap();
    let mut structs = BTreeMap::new();
    let mut current: Option<(String, Vec<(String, String)>)> = None;
    for line in source.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("pub struct ") {
            let name = rest.trim_end_matches(" {").to_owned();
            current = Some((name, Vec::new()));
        } else if line == "}" {
            if let Some((name, fields)) = current.take() {
                structs.insert(name, fields);
            }
        } else if let (Some((_, fields)), Some(rest)) = (&mut current, line.strip_prefix("pub ")) {
            let (field, ty) = rest
                .split_once(": ")
                .expect("a field line is `pub name: Type,`");
            fields.push((camel_case(field), ty.trim_end_matches(',').to_owned()));
        }
    }
    structs
}

fn camel_case(snake: &str) -> String {
    let mut out = String::new();
    let mut upper = false;
    for c in snake.chars() {
        match c {
            '_' => upper = true,
            c if upper => {
                out.extend(c.to_uppercase());
                upper = false;
            }
            c => out.push(c),
        }
    }
    out
}

/// Every difference between the document struct `name` and the CRD schema `node` at `path`:
/// a field on one side only, a type that differs, an object that would prune unknown fields.
fn schema_differences(
    structs: &BTreeMap<String, Vec<(String, String)>>,
    name: &str,
    node: &Value,
    path: &str,
    found: &mut Vec<String>,
) {
    let fields = &structs[name];
    if node["x-kubernetes-preserve-unknown-fields"] != true {
        found.push(format!(
            "{path}: keeps no unknown fields, so driftgate never sees a misspelt one"
        ));
    }
    let properties = node["properties"].as_object().cloned().unwrap_or_default();
    let in_schema: BTreeSet<&str> = properties.keys().map(String::as_str).collect();
    let in_document: BTreeSet<&str> = fields.iter().map(|(f, _)| f.as_str()).collect();
    for missing in in_document.difference(&in_schema) {
        found.push(format!(
            "{path}.{missing}: in document.rs ({name}), not in the CRD schema"
        ));
    }
    for extra in in_schema.difference(&in_document) {
        found.push(format!(
            "{path}.{extra}: in the CRD schema, not in document.rs ({name})"
        ));
    }
    for (field, ty) in fields {
        let Some(schema) = properties.get(field) else {
            continue;
        };
        let at = format!("{path}.{field}");
        let is_list = ty.contains("Vec<");
        let expected = if is_list {
            "array"
        } else if ty.contains("BTreeMap<") || structs.keys().any(|s| ty.contains(s.as_str())) {
            "object"
        } else if ty.contains("bool") || ty.contains("<Flag>") {
            // `Flag`: a boolean that refuses a quoted "no" (crates/driftgate-core/src/policy/document.rs).
            "boolean"
        } else if ty.contains("u32") {
            "integer"
        } else {
            "string"
        };
        if schema["type"] != expected {
            found.push(format!(
                "{at}: {ty} is a {expected}, the schema says {}",
                schema["type"]
            ));
            continue;
        }
        let element = if is_list { &schema["items"] } else { schema };
        let nested = ty
            .split(|c: char| !c.is_alphanumeric())
            .find(|word| structs.contains_key(*word));
        if let Some(nested) = nested {
            schema_differences(structs, nested, element, &at, found);
        } else if is_list && element["type"] != "string" {
            found.push(format!(
                "{at}: a list of strings, the schema's items are {}",
                element["type"]
            ));
        }
    }
}

fn gatepolicy_spec_schema(crd: &Value) -> &Value {
    &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
}

#[test]
fn the_gatepolicy_crd_schema_matches_the_policy_document_field_for_field() {
    let crd: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(chart().join(GATEPOLICIES_CRD_FILE)).unwrap(),
    )
    .unwrap();
    let structs = document_structs();
    assert!(structs.len() >= 10, "{structs:?}");
    let mut found = Vec::new();
    schema_differences(
        &structs,
        "GatePolicySpec",
        gatepolicy_spec_schema(&crd),
        "spec",
        &mut found,
    );
    assert!(
        found.is_empty(),
        "{GATEPOLICIES_CRD_FILE} and crates/driftgate-core/src/policy/document.rs differ:\n{}",
        found.join("\n")
    );

    // The check is a real one: a field added to the document, and one dropped from the
    // schema, deep or not, are found.
    let mut grown = structs.clone();
    grown
        .get_mut("BreakGlassSpec")
        .unwrap()
        .push(("approvers".into(), "Vec<Spanned<String>>".into()));
    let mut shrunk = crd.clone();
    let spec = shrunk["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
        .as_object_mut()
        .unwrap();
    spec["properties"]["controllers"]["items"]["properties"]
        .as_object_mut()
        .unwrap()
        .remove("fieldManagers");
    let mut found = Vec::new();
    schema_differences(
        &grown,
        "GatePolicySpec",
        gatepolicy_spec_schema(&shrunk),
        "spec",
        &mut found,
    );
    assert_eq!(
        found,
        [
            "spec.controllers.fieldManagers: in document.rs (ControllerSpec), not in the CRD schema",
            "spec.breakGlass.approvers: in document.rs (BreakGlassSpec), not in the CRD schema",
        ]
    );

    let version = &crd["spec"]["versions"][0];
    assert_eq!(crd["spec"]["scope"], "Cluster");
    assert_eq!(version["name"], "v1alpha1");
    assert_eq!(
        (&version["served"], &version["storage"]),
        (&json!(true), &json!(true))
    );
    assert_eq!(version["subresources"], json!({"status": {}}));
    assert_eq!(
        printer_columns(&crd),
        ["Mode", "Namespaces", "Ready", "Age"]
    );
}

#[test]
fn gatepolicies_enabled_adds_the_flag_the_webhook_and_the_rbac() {
    let off = render(&[], &["gatePolicies.enabled=false"]);
    assert!(!strings(&off.container()["args"]).contains(&"--gatepolicies"));
    let names = |manifests: &Manifests| -> Vec<String> {
        manifests.one("ValidatingWebhookConfiguration")["webhooks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| str(&w["name"]).to_owned())
            .collect()
    };
    assert_eq!(names(&off), ["gate.driftgate.dev", "records.driftgate.dev"]);

    // On by default.
    let on = render(&[], &[]);
    assert!(strings(&on.container()["args"]).contains(&"--gatepolicies"));
    assert_eq!(
        names(&on),
        [
            "gate.driftgate.dev",
            "records.driftgate.dev",
            "policies.driftgate.dev"
        ]
    );
    let vwc = on.one("ValidatingWebhookConfiguration");
    let policies = &vwc["webhooks"][2];
    assert_eq!(policies["failurePolicy"], "Fail");
    assert_eq!(policies["clientConfig"]["service"]["path"], "/validate");
    assert_eq!(
        policies["rules"],
        json!([{"apiGroups": ["driftgate.dev"], "apiVersions": ["*"], "operations": ["CREATE", "UPDATE"],
                "resources": ["gatepolicies"], "scope": "Cluster"}])
    );
    // The gate never sends driftgate.dev objects: the policies webhook is their only judge.
    let gate_conditions = vwc["webhooks"][0]["matchConditions"].to_string();
    assert!(gate_conditions.contains("request.resource.group != 'driftgate.dev'"));

    let rules = |manifests: &Manifests| -> BTreeSet<String> {
        let mut granted = BTreeSet::new();
        for rule in manifests.one("ClusterRole")["rules"].as_array().unwrap() {
            for resource in strings(&rule["resources"]) {
                for verb in strings(&rule["verbs"]) {
                    granted.insert(format!("{resource}:{verb}"));
                }
            }
        }
        granted
    };
    let added: Vec<String> = rules(&on).difference(&rules(&off)).cloned().collect();
    assert_eq!(
        added,
        [
            "gatepolicies/status:patch",
            "gatepolicies:get",
            "gatepolicies:list",
            "gatepolicies:watch",
        ]
    );
}

#[test]
fn the_chart_ships_the_crd_driftgate_prints() {
    let shipped = std::fs::read_to_string(chart().join(CRD_FILE))
        .expect("the chart ships the BackportRequirement CRD");
    let printed = driftgate_crd();
    assert_eq!(
        shipped, printed,
        "charts/driftgate/{CRD_FILE} is stale: regenerate it with `driftgate crd > charts/driftgate/{CRD_FILE}`"
    );
    // helm never upgrades what a chart's crds/ folder holds: the CRD is a template.
    assert!(
        !chart().join("crds").exists(),
        "charts/driftgate/crds is installed once and never upgraded by helm"
    );

    // The rendered CRD is the printed one, with the chart's labels and resource-policy keep.
    let expected: Value = serde_saphyr::from_str(&printed).unwrap();
    for file in VALUES_FILES {
        let manifests = render(&[file], &[]);
        let mut rendered = manifests
            .named("CustomResourceDefinition", RECORDS_CRD)
            .clone();
        let metadata = rendered["metadata"].as_object_mut().unwrap();
        let annotations = metadata.remove("annotations").unwrap();
        assert_eq!(
            annotations,
            json!({"helm.sh/resource-policy": "keep"}),
            "{file}: `helm uninstall` must not delete the records"
        );
        let labels = metadata.remove("labels").unwrap();
        assert_eq!(labels["app.kubernetes.io/managed-by"], "Helm", "{file}");
        assert_eq!(rendered, expected, "{file}");
    }
}

#[test]
fn the_records_webhook_guards_every_namespace_but_never_driftgates_own_writes() {
    for file in VALUES_FILES {
        let manifests = render(&[file], &[]);
        let gate = manifests.webhook();
        let records = manifests.records_webhook();
        assert_eq!(records["name"], "records.driftgate.dev", "{file}");
        assert_eq!(records["failurePolicy"], "Fail", "{file}");
        assert_eq!(records["sideEffects"], "NoneOnDryRun", "{file}");
        assert_eq!(records["timeoutSeconds"], gate["timeoutSeconds"], "{file}");
        // The same driftgate, trusted the same way (cert-manager's injector fills both).
        assert_eq!(records["clientConfig"], gate["clientConfig"], "{file}");
        // Records live in the namespace of their object, guarded or not, and in driftgate's own.
        assert_eq!(records["namespaceSelector"], json!({}), "{file}");
        assert!(records["objectSelector"].is_null(), "{file}");
        assert_eq!(
            records["rules"],
            json!([
                {"apiGroups": ["driftgate.dev"], "apiVersions": ["*"],
                 "operations": ["CREATE", "UPDATE", "DELETE"],
                 "resources": ["backportrequirements", "backportrequirements/status"],
                 "scope": "Namespaced"},
                {"apiGroups": ["apiextensions.k8s.io"], "apiVersions": ["*"],
                 "operations": ["UPDATE", "DELETE"],
                 "resources": ["customresourcedefinitions"], "scope": "Cluster"},
            ]),
            "{file}"
        );
        let conditions: BTreeMap<&str, &str> = records["matchConditions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| (str(&c["name"]), str(&c["expression"])))
            .collect();
        assert_eq!(
            conditions["only-the-records-crd"],
            "request.resource.group != 'apiextensions.k8s.io' || request.name == 'backportrequirements.driftgate.dev'"
        );
        // driftgate writes records while it answers a review: never sent back to itself.
        let own = format!(
            "system:serviceaccount:{NAMESPACE}:{}",
            str(&manifests.one("ServiceAccount")["metadata"]["name"])
        );
        assert_eq!(
            conditions["not-driftgate"],
            format!("request.userInfo.username != '{own}'")
        );
        assert!(
            conditions["not-namespace-deletion"]
                .contains("system:serviceaccount:kube-system:namespace-controller")
        );
        // The gate never gets records: each write is reviewed once, and driftgate's own are
        // never sent back to it through the gate's `*` rule.
        let not_records = gate["matchConditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "not-records")
            .unwrap_or_else(|| panic!("{file}: the gate has no not-records condition"));
        assert_eq!(
            not_records["expression"],
            "request.resource.group != 'driftgate.dev'"
        );

        // The decision is told the same identity, the retention and the CRD's admins.
        let args = strings(&manifests.container()["args"]);
        let after = |flag: &str| {
            let at = args
                .iter()
                .position(|a| *a == flag)
                .unwrap_or_else(|| panic!("no {flag}: {args:?}"));
            args[at + 1]
        };
        assert_eq!(after("--service-account"), own, "{file}");
        assert_eq!(after("--record-retention"), "30d", "{file}");
        assert_eq!(
            after("--ledger-crd-admin-group"),
            "system:masters",
            "{file}"
        );
        assert!(!args.contains(&"--ledger-crd-admin-user"), "{file}");
    }

    let named = render(
        &["default-values.yaml"],
        &[
            "records.crdAdmins.usernames={platform-admin}",
            "records.crdAdmins.groups=null",
            "records.retention=0s",
            "records.failurePolicy=Ignore",
        ],
    );
    let args = strings(&named.container()["args"]);
    let at = args
        .iter()
        .position(|a| *a == "--ledger-crd-admin-user")
        .unwrap();
    assert_eq!(args[at + 1], "platform-admin");
    assert!(!args.contains(&"--ledger-crd-admin-group"), "{args:?}");
    let at = args
        .iter()
        .position(|a| *a == "--record-retention")
        .unwrap();
    assert_eq!(args[at + 1], "0s");
    assert_eq!(named.records_webhook()["failurePolicy"], "Ignore");
}

// The e2e harness's real etcd, kube-apiserver and kube-controller-manager, for what only a real
// `helm install`/`helm upgrade` shows.
#[path = "e2e/harness/mod.rs"]
#[allow(unused_imports)]
mod harness;

/// helm against the harness's API server as `kubeconfig`'s identity.
fn run_helm_on(kubeconfig: &Path, args: &[&str]) -> Output {
    let mut all = args.to_vec();
    let kubeconfig = kubeconfig.display().to_string();
    all.extend(["--kubeconfig", &kubeconfig]);
    run_helm(&all)
}

/// The CRD as the API server stores it.
fn stored_crd(control_plane: &harness::ControlPlane) -> Value {
    let out = control_plane
        .kubectl(
            harness::ADMIN,
            &[
                "get",
                "crd",
                "backportrequirements.driftgate.dev",
                "-o",
                "json",
            ],
        )
        .ok();
    serde_json::from_str(&out.stdout).unwrap()
}

fn printer_columns(crd: &Value) -> Vec<&str> {
    crd["spec"]["versions"][0]["additionalPrinterColumns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| str(&c["name"]))
        .collect()
}

/// The tests that install the chart take turns: each release's gate refuses writes in the
/// other's namespace while its own driftgate is stopped.
fn one_release_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static CLUSTER: std::sync::Mutex<()> = std::sync::Mutex::new(());
    CLUSTER.lock().unwrap_or_else(|e| e.into_inner())
}

/// A copy of the chart at `dir/driftgate`.
fn chart_copy(dir: &TempDir) -> PathBuf {
    let copy = dir.path().join("driftgate");
    let out = Command::new("cp")
        .arg("-a")
        .arg(chart())
        .arg(&copy)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    copy
}

/// The arguments the chart gives `driftgate serve` from `--service-account` on (who writes
/// records, their retention, who may change their CRD) for a release in `namespace`.
fn ledger_flags(namespace: &str, sets: &[&str]) -> Vec<String> {
    let rendered = render_in(namespace, &[], sets);
    let args = strings(&rendered.container()["args"]);
    let ledger = [
        "--service-account",
        "--ledger-crd-admin-user",
        "--ledger-crd-admin-group",
    ];
    let flags: Vec<String> = args
        .windows(2)
        .filter(|pair| ledger.contains(&pair[0]))
        .flat_map(|pair| pair.iter().map(|a| (*a).to_owned()))
        .collect();
    assert!(flags.contains(&"--service-account".to_owned()), "{args:?}");
    flags
}

#[test]
fn helm_upgrade_changes_the_crd_and_helm_uninstall_keeps_it() {
    const UPGRADE_RELEASE: &str = "upgrade";
    const UPGRADE_NAMESPACE: &str = "driftgate-upgrade";
    let _turn = one_release_at_a_time();
    harness::install_crypto_provider();
    let control_plane = harness::control_plane();
    let admin = control_plane.kubeconfig(harness::ADMIN);
    // The ledger flags the chart gives driftgate in this release (who writes records, who may
    // change their CRD: records.crdAdmins, system:masters by default), so that the records
    // webhook judges helm's CRD writes as the installed driftgate would.
    let flags = ledger_flags(UPGRADE_NAMESPACE, &[]);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let driftgate = harness::Driftgate::start(
        "chart-upgrade",
        &repo().join("policies/example.yaml"),
        &flags,
    );
    let sets = [
        format!("webhook.url={}", driftgate.webhook_url()),
        format!("webhook.caBundle={}", encode(driftgate.ca_pem())),
    ];
    let helm_as = |kubeconfig: &Path, verb: &str, chart: &Path| {
        let chart = chart.display().to_string();
        let mut args = vec![
            verb,
            UPGRADE_RELEASE,
            &chart,
            "--namespace",
            UPGRADE_NAMESPACE,
        ];
        for set in &sets {
            args.extend(["--set", set]);
        }
        run_helm_on(kubeconfig, &args)
    };
    let helm = |verb: &str, chart: &Path| helm_as(&admin, verb, chart);
    control_plane
        .kubectl(harness::ADMIN, &["create", "namespace", UPGRADE_NAMESPACE])
        .ok();

    // The chart's previous release, whose CRD had no Expires column.
    let dir = scratch_dir("chart-previous-chart");
    let previous = chart_copy(&dir);
    let crd_file = previous.join(CRD_FILE);
    let crd = std::fs::read_to_string(&crd_file).unwrap();
    let expires =
        "    - jsonPath: .spec.window.expiresAt\n      name: Expires\n      type: string\n";
    assert!(crd.contains(expires));
    std::fs::write(&crd_file, crd.replace(expires, "")).unwrap();

    // The harness applied the CRD as a chart with crds/ did: helm refuses to take it over
    // until it carries the release's ownership (the README's upgrade note), which anyone may
    // add (the records webhook lets label and annotation changes through).
    let out = helm("install", &previous);
    assert!(
        !out.status.success(),
        "helm install took over an unowned CRD"
    );
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("backportrequirements.driftgate.dev")
            && stderr.contains("invalid ownership metadata"),
        "{stderr}"
    );
    let crd_name = "crd/backportrequirements.driftgate.dev";
    control_plane
        .kubectl(
            harness::ADMIN,
            &["label", crd_name, "app.kubernetes.io/managed-by=Helm"],
        )
        .ok();
    let release_name = format!("meta.helm.sh/release-name={UPGRADE_RELEASE}");
    let release_namespace = format!("meta.helm.sh/release-namespace={UPGRADE_NAMESPACE}");
    control_plane
        .kubectl(
            harness::ADMIN,
            &["annotate", crd_name, &release_name, &release_namespace],
        )
        .ok();

    let out = helm("install", &previous);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stored = stored_crd(control_plane);
    assert!(
        !printer_columns(&stored).contains(&"Expires"),
        "{:?}",
        printer_columns(&stored)
    );
    assert_eq!(
        stored["metadata"]["annotations"]["helm.sh/resource-policy"],
        "keep"
    );

    // An identity RBAC lets change CRDs but that is no CRD admin (as Flux's helm-controller is
    // unless records.crdAdmins names it) cannot upgrade a release whose CRD changed.
    let flux = control_plane.kubeconfig(harness::FLUX);
    let out = helm_as(&flux, "upgrade", &chart());
    assert!(
        !out.status.success(),
        "a CRD change by a non-admin was admitted"
    );
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("admission webhook \"records.driftgate.dev\" denied the request"),
        "{stderr}"
    );
    assert!(!printer_columns(&stored_crd(control_plane)).contains(&"Expires"));

    // The upgrade brings the CRD to the chart's, through driftgate's records webhook (helm runs
    // as a system:masters identity, a CRD admin).
    let out = helm("upgrade", &chart());
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stored = stored_crd(control_plane);
    let printed: Value = serde_saphyr::from_str(&driftgate_crd()).unwrap();
    assert_eq!(printer_columns(&stored), printer_columns(&printed));
    assert_eq!(
        stored["spec"]["versions"][0]["schema"],
        printed["spec"]["versions"][0]["schema"]
    );
    assert!(
        driftgate.reviews() > 0.0,
        "driftgate judged none of helm's writes: {}",
        driftgate.log_tail(20)
    );

    // Uninstalling removes the webhook and driftgate's objects, never the CRD (and the records).
    let out = run_helm_on(
        &admin,
        &[
            "uninstall",
            UPGRADE_RELEASE,
            "--namespace",
            UPGRADE_NAMESPACE,
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("backportrequirements.driftgate.dev"));
    assert_eq!(
        printer_columns(&stored_crd(control_plane)),
        printer_columns(&printed)
    );
    let out = control_plane.kubectl(
        harness::ADMIN,
        &["get", "validatingwebhookconfiguration", "upgrade-driftgate"],
    );
    assert!(!out.success(), "the webhook outlived helm uninstall");
}

fn resolve<'a>(schema: &'a Value, node: &'a Value) -> &'a Value {
    match node["$ref"].as_str() {
        Some(reference) => {
            let name = reference
                .strip_prefix("#/definitions/")
                .unwrap_or_else(|| panic!("unexpected $ref {reference}"));
            &schema["definitions"][name]
        }
        None => node,
    }
}

/// Walks values.yaml and the schema together: every key must be a property of the schema, and
/// every object the schema describes by its properties must refuse unknown keys. Returns the
/// paths a reader looks values up by: a structured object's keys, down to free-form values
/// (lists, maps of labels, resources, securityContexts).
fn value_paths(
    schema: &Value,
    node: &Value,
    values: &Value,
    path: &str,
    problems: &mut Vec<String>,
    paths: &mut Vec<String>,
) {
    let node = resolve(schema, node);
    for (key, value) in values.as_object().unwrap() {
        let here = if path.is_empty() {
            key.clone()
        } else {
            format!("{path}.{key}")
        };
        let property = &node["properties"][key];
        if property.is_null() {
            problems.push(format!("{here} is not in values.schema.json"));
            continue;
        }
        let property = resolve(schema, property);
        let structured = property["properties"].is_object();
        if structured && property["additionalProperties"] != false {
            problems.push(format!(
                "{here}: the schema lists its keys but accepts others (additionalProperties)"
            ));
        }
        match value.as_object() {
            Some(map) if structured && !map.is_empty() => {
                value_paths(schema, property, value, &here, problems, paths)
            }
            _ => paths.push(here),
        }
    }
}

fn values_and_schema() -> (Value, Value) {
    let values: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(chart().join("values.yaml")).unwrap())
            .unwrap();
    let schema: Value =
        serde_json::from_str(&std::fs::read_to_string(chart().join("values.schema.json")).unwrap())
            .unwrap();
    (values, schema)
}

#[test]
fn the_values_schema_covers_every_value() {
    let (values, schema) = values_and_schema();
    assert_eq!(schema["additionalProperties"], false);
    let mut problems = Vec::new();
    let mut paths = Vec::new();
    value_paths(&schema, &schema, &values, "", &mut problems, &mut paths);
    assert!(problems.is_empty(), "{problems:#?}");
    assert!(paths.len() > 50, "{paths:?}");

    // And the check is a real one: a key the schema lacks, nested or not, is found.
    let mut extended = values.clone();
    extended["webhook"]["colour"] = json!("blue");
    extended["shade"] = json!(1);
    let mut problems = Vec::new();
    value_paths(
        &schema,
        &schema,
        &extended,
        "",
        &mut problems,
        &mut Vec::new(),
    );
    assert_eq!(
        problems,
        [
            "shade is not in values.schema.json",
            "webhook.colour is not in values.schema.json",
        ]
    );
}

fn chart_readme() -> String {
    std::fs::read_to_string(chart().join("README.md")).unwrap()
}

fn main_readme() -> String {
    std::fs::read_to_string(repo().join("README.md")).unwrap()
}

/// A value is documented when the chart's README names its path in backticks, or a line
/// names its parent (`` `parent.first` ``) and its key (`` `.key` ``), as the values table does
/// for siblings (`` `certManager.duration`, `.renewBefore` ``).
fn documented(readme: &str, path: &str) -> bool {
    if readme.contains(&format!("`{path}`")) {
        return true;
    }
    let Some((parent, key)) = path.rsplit_once('.') else {
        return false;
    };
    readme
        .lines()
        .any(|line| line.contains(&format!("`{parent}.")) && line.contains(&format!("`.{key}`")))
}

/// The `driftgate_*` names registered in crates/driftgate-kube/src/metrics.rs: the metrics' and the collectors' (read
/// at scrape time, which name theirs in `encode_descriptor`).
fn registered_metrics() -> Vec<String> {
    let source =
        std::fs::read_to_string(repo().join("crates/driftgate-kube/src/metrics.rs")).unwrap();
    ["register(", "encode_descriptor("]
        .iter()
        .flat_map(|call| source.split(call).skip(1))
        .filter_map(|rest| {
            let rest = rest.trim_start().strip_prefix('"')?;
            Some(format!("driftgate_{}", &rest[..rest.find('"')?]))
        })
        .collect()
}

/// The rows of the Markdown table under `heading` (to the next heading), as the backticked
/// words of each cell.
fn table_rows(readme: &str, heading: &str) -> Vec<Vec<Vec<String>>> {
    let start = readme
        .find(&format!("\n{heading}\n"))
        .unwrap_or_else(|| panic!("no {heading} in the README"));
    let section = &readme[start + heading.len() + 2..];
    let section = &section[..section.find("\n#").unwrap_or(section.len())];
    section
        .lines()
        .filter(|l| l.starts_with('|') && !l.starts_with("| ---"))
        .skip(1)
        .map(|row| {
            row.trim_matches('|')
                .split(" | ")
                .map(|cell| {
                    cell.split('`')
                        .skip(1)
                        .step_by(2)
                        .map(str::to_owned)
                        .collect()
                })
                .collect()
        })
        .collect()
}

#[test]
fn the_readmes_document_every_value_metric_alert_and_rbac_rule() {
    let readme = chart_readme();
    let docs = format!("{readme}\n{}", main_readme());

    let (values, schema) = values_and_schema();
    let mut paths = Vec::new();
    value_paths(&schema, &schema, &values, "", &mut Vec::new(), &mut paths);
    let undocumented: Vec<&String> = paths.iter().filter(|p| !documented(&readme, p)).collect();
    assert!(
        undocumented.is_empty(),
        "values missing from the chart README's table: {undocumented:?}"
    );

    let registered = registered_metrics();
    let exported = exported_metrics();
    assert!(registered.len() >= 19, "{registered:?}");
    for name in &registered {
        assert!(
            exported.contains(name) || exported.contains(&format!("{name}_total")),
            "{name} is registered but not exported: {exported:?}"
        );
    }
    let undocumented: Vec<&String> = registered
        .iter()
        .filter(|name| {
            !["`", "_total`", "_total{", "{"]
                .iter()
                .any(|end| docs.contains(&format!("`{name}{end}")))
        })
        .collect();
    assert!(
        undocumented.is_empty(),
        "metrics in neither README: {undocumented:?}"
    );

    let manifests = render(&["monitoring-values.yaml"], &[]);
    let alerts: BTreeSet<String> = manifests.one("PrometheusRule")["spec"]["groups"][0]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| str(&r["alert"]).to_owned())
        .collect();
    let table: BTreeSet<String> = table_rows(&readme, "## Monitoring")
        .into_iter()
        .filter_map(|row| row.first()?.first().cloned())
        .filter(|name| name.starts_with("Driftgate"))
        .collect();
    assert_eq!(table, alerts, "the chart README's alert table");

    // The ClusterRole's rules and the leader Lease Role's, by group, resource and verb.
    let mut granted = BTreeSet::new();
    // Every rule the chart can grant: GatePolicies, auto-resume and PolicyReports add theirs.
    let manifests = render(
        &[],
        &[
            "gatePolicies.enabled=true",
            "suspensions.autoResume=true",
            "policyReports.enabled=true",
        ],
    );
    for role in [manifests.one("ClusterRole"), manifests.one("Role")] {
        for rule in role["rules"].as_array().unwrap() {
            for group in strings(&rule["apiGroups"]) {
                for resource in strings(&rule["resources"]) {
                    for verb in strings(&rule["verbs"]) {
                        granted.insert(format!("{group}/{resource}:{verb}"));
                    }
                }
            }
        }
    }
    let mut listed = BTreeSet::new();
    for row in table_rows(&readme, "## RBAC") {
        let [groups, resources, verbs, ..] = &row[..] else {
            panic!("an RBAC row has fewer than three cells: {row:?}");
        };
        for group in groups {
            let group = if group == "\"\"" { "" } else { group.as_str() };
            for resource in resources {
                for verb in verbs {
                    listed.insert(format!("{group}/{resource}:{verb}"));
                }
            }
        }
    }
    assert_eq!(listed, granted, "the chart README's RBAC table");
}

/// The recovery runbook's commands: the `kubectl ...` cells of its table, split as `sh` would
/// (they quote with single quotes only).
fn runbook_commands(readme: &str) -> Vec<Vec<String>> {
    let start = readme
        .find("## Recovery: driftgate down or wedged")
        .expect("the README has the recovery runbook");
    let section = &readme[start..];
    let section = &section[..section[3..].find("\n## ").unwrap() + 3];
    section
        .lines()
        .filter(|l| l.starts_with("| "))
        .filter_map(|row| {
            let cell = row.split(" | ").nth(1)?;
            let command = cell.strip_prefix("`kubectl ")?.strip_suffix('`')?;
            let mut words = Vec::new();
            let mut word = String::new();
            let mut quoted = false;
            for c in command.chars() {
                match c {
                    '\'' => quoted = !quoted,
                    ' ' if !quoted => words.push(std::mem::take(&mut word)),
                    c => word.push(c),
                }
            }
            assert!(!quoted, "unbalanced quotes in {command}");
            words.push(word);
            Some(words)
        })
        .collect()
}

#[test]
fn the_recovery_runbook_unblocks_a_guarded_namespace_and_helm_upgrade_renders_the_gate_unarmed() {
    // The README's own names: release driftgate in driftgate-system, the example policy's
    // `payments`. The harness already applied driftgate's RBAC (rbac.create=false) and the CRD
    // (left out of this copy of the chart: the upgrade test's release owns it).
    let _turn = one_release_at_a_time();
    harness::install_crypto_provider();
    let control_plane = harness::control_plane();
    let admin = control_plane.kubeconfig(harness::ADMIN);
    let commands = runbook_commands(&chart_readme());
    assert_eq!(commands.len(), 4, "{commands:?}");
    let [narrow, fail_open, remove_gate, remove_both] = &commands[..] else {
        unreachable!()
    };
    control_plane.apply(
        harness::ADMIN,
        "{\"apiVersion\": \"v1\", \"kind\": \"Namespace\", \"metadata\": {\"name\": \"payments\"}}",
    );
    control_plane.apply(
        harness::ADMIN,
        &format!(
            "{{\"apiVersion\": \"v1\", \"kind\": \"Namespace\", \"metadata\": {{\"name\": \"{NAMESPACE}\"}}}}"
        ),
    );
    let dir = scratch_dir("chart-runbook-chart");
    let copy = chart_copy(&dir);
    std::fs::remove_dir_all(copy.join("files/crds")).unwrap();
    let mut flags = ledger_flags(NAMESPACE, &[]);
    // The chart's keeper flags: the gate is rendered unarmed and this driftgate, serving and
    // leading, arms it (its Lease where the harness's RBAC lets driftgate keep one).
    let rendered = strings(&render_in(NAMESPACE, &[], &[]).container()["args"])
        .iter()
        .map(|a| (*a).to_owned())
        .collect::<Vec<_>>();
    let base = rendered
        .windows(2)
        .find(|pair| pair[0] == "--gate-base-namespace-selector")
        .map(|pair| pair[1].clone())
        .expect("the chart passes the base selector");
    flags.extend(
        [
            "--gate-webhook-configuration",
            RELEASE,
            "--gate-base-namespace-selector",
            &base,
            "--leader-lease",
            "driftgate-leader",
            "--leader-lease-namespace",
            harness::chart::NAMESPACE,
            "--leader-lease-duration",
            "4s",
        ]
        .map(str::to_owned),
    );
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let driftgate =
        harness::Driftgate::start("runbook", &repo().join("policies/example.yaml"), &flags);
    let sets = [
        format!("webhook.url={}", driftgate.webhook_url()),
        format!("webhook.caBundle={}", encode(driftgate.ca_pem())),
        "rbac.create=false".to_owned(),
    ];
    let helm = |verb: &str| {
        let chart = copy.display().to_string();
        let mut args = vec![verb, RELEASE, &chart, "--namespace", NAMESPACE];
        for set in &sets {
            args.extend(["--set", set]);
        }
        let out = run_helm_on(&admin, &args);
        assert!(out.status.success(), "helm {verb}: {}", text(&out.stderr));
    };
    // bob is neither Flux nor an opener: driftgate denies his writes in `payments`. A dry run
    // goes through the webhook and changes nothing.
    let write = || {
        control_plane.kubectl(
            harness::BOB,
            &[
                "create",
                "configmap",
                "runbook-probe",
                "--namespace",
                "payments",
                "--dry-run=server",
            ],
        )
    };
    let kubectl = |args: &[String]| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        control_plane.kubectl(harness::ADMIN, &args).ok();
    };
    let webhooks = || {
        let out = control_plane
            .kubectl(
                harness::ADMIN,
                &[
                    "get",
                    "validatingwebhookconfiguration",
                    RELEASE,
                    "-o",
                    "jsonpath={.webhooks[*].name} {.webhooks[*].failurePolicy}",
                ],
            )
            .ok();
        out.stdout
    };
    let gate_refuses_while_down = || {
        let out = write();
        assert!(!out.success(), "{out:?}");
        assert!(
            out.stderr
                .contains("failed calling webhook \"gate.driftgate.dev\""),
            "{}",
            out.stderr
        );
    };

    helm("install");
    // Installed unarmed; the serving leader arms it within a second or so.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let out = loop {
        let out = write();
        if !out.success() || std::time::Instant::now() > deadline {
            break out;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert!(
        !out.success()
            && out
                .stderr
                .contains("admission webhook \"gate.driftgate.dev\" denied the request"),
        "{out:?}\ndriftgate's log:\n{}",
        driftgate.log_tail(30)
    );
    // driftgate down: the gate fails closed.
    drop(driftgate);
    gate_refuses_while_down();

    // Each step of the runbook unblocks the namespace; helm upgrade puts the webhooks back
    // whole, with the gate as the chart renders it: unarmed (matching no namespace) until a
    // replica serves again and arms it, so that with driftgate still down it blocks nothing.
    let unarmed = || {
        let out = control_plane
            .kubectl(
                harness::ADMIN,
                &[
                    "get",
                    "validatingwebhookconfiguration",
                    RELEASE,
                    "-o",
                    "jsonpath={.webhooks[0].namespaceSelector.matchExpressions[*].operator}",
                ],
            )
            .ok();
        out.stdout.split_whitespace().any(|op| op == "DoesNotExist")
    };
    assert!(!unarmed(), "the gate was armed by the leader");
    for step in [narrow, fail_open, remove_gate] {
        kubectl(step);
        let out = write();
        assert!(out.success(), "after kubectl {}: {out:?}", step.join(" "));
        helm("upgrade");
        assert_eq!(
            webhooks(),
            "gate.driftgate.dev records.driftgate.dev policies.driftgate.dev Fail Fail Fail",
            "after kubectl {}",
            step.join(" ")
        );
        assert!(unarmed(), "after kubectl {}", step.join(" "));
        let out = write();
        assert!(out.success(), "after kubectl {}: {out:?}", step.join(" "));
    }
    // Removing the gate left the records and GatePolicy webhooks alone.
    kubectl(remove_gate);
    assert_eq!(
        webhooks(),
        "records.driftgate.dev policies.driftgate.dev Fail Fail"
    );
    helm("upgrade");
    kubectl(remove_both);
    assert!(write().success());
    let out = control_plane.kubectl(
        harness::ADMIN,
        &["get", "validatingwebhookconfiguration", RELEASE],
    );
    assert!(!out.success(), "{out:?}");

    let out = run_helm_on(&admin, &["uninstall", RELEASE, "--namespace", NAMESPACE]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[test]
fn cluster_scoped_kinds_are_sent_only_as_webhook_cluster_scoped_lists_them() {
    let cluster_rules = |manifests: &Manifests| -> Vec<Value> {
        manifests.one("ValidatingWebhookConfiguration")["webhooks"][0]["rules"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["scope"] == "Cluster")
            .cloned()
            .collect()
    };
    let namespaces = json!({"apiGroups": [""], "apiVersions": ["v1"],
        "operations": ["CREATE", "UPDATE", "DELETE"],
        "resources": ["namespaces", "namespaces/status", "namespaces/finalize"], "scope": "Cluster"});
    assert_eq!(
        cluster_rules(&render(&[], &[])),
        std::slice::from_ref(&namespaces)
    );
    let listed = render(
        &[],
        &[
            "webhook.clusterScoped[0].apiGroups={rbac.authorization.k8s.io}",
            "webhook.clusterScoped[0].resources={clusterroles,clusterrolebindings}",
        ],
    );
    assert_eq!(
        cluster_rules(&listed),
        [
            namespaces,
            json!({"apiGroups": ["rbac.authorization.k8s.io"], "apiVersions": ["*"],
                "operations": ["CREATE", "UPDATE", "DELETE"],
                "resources": ["clusterroles", "clusterrolebindings"], "scope": "Cluster"}),
        ]
    );
}

/// The comment lines of `helm show values`, as one text.
fn shown_value_comments() -> String {
    let out = run_helm(&["show", "values", chart().to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout)
        .lines()
        .filter_map(|line| line.trim_start().strip_prefix('#'))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn helm_show_values_names_only_files_and_folders_that_exist() {
    let comments = shown_value_comments();
    let mut named = Vec::new();
    for word in comments.split(|c: char| c.is_whitespace() || "`()\"',;".contains(c)) {
        let word = word.trim_end_matches(['.', ':']);
        let is_file = !word.contains("://")
            && word.contains('/')
            && [".yaml", ".json", ".sh", ".md", "Dockerfile"]
                .iter()
                .any(|end| word.ends_with(end));
        if is_file {
            named.push(word.to_owned());
            assert!(
                repo().join(word).is_file() || chart().join(word).is_file(),
                "helm show values names {word}, which is neither in the repository nor in the chart"
            );
        }
        // A folder (the chart's crds/, the repository's policies/) neither of them has.
        if let Some(folder) = word.strip_suffix('/').filter(|f| !f.contains('/')) {
            assert!(
                chart().join(folder).is_dir() || repo().join(folder).is_dir(),
                "helm show values names a {folder}/ folder, which neither the chart nor the repository has"
            );
        }
    }
    assert!(
        named.iter().any(|n| n == "image/Dockerfile"),
        "the image's Dockerfile is named: {named:?}"
    );
}

#[test]
fn the_harness_section_promises_only_what_its_render_holds() {
    let readme = std::fs::read_to_string(chart().join("README.md")).unwrap();
    let start = readme
        .find("### Rendering for a kube-apiserver test harness")
        .expect("the harness section");
    let section = &readme[start..];
    let section = &section[..section[4..]
        .find("\n## ")
        .map_or(section.len(), |end| end + 4)];
    // Its command, as it shows it (the CA bundle's value is any base64).
    let manifests = render_with(
        NAMESPACE,
        &[],
        &[
            "webhook.url=https://127.0.0.1:8443/validate",
            "webhook.caBundle=Zm9v",
        ],
        &[],
    );
    let secrets = manifests.all("Secret");
    assert!(secrets.is_empty(), "{secrets:?}");
    assert!(
        section.contains("renders no Secret") && !section.contains("that Secret"),
        "the section must say the render holds no Secret: {section}"
    );
}
