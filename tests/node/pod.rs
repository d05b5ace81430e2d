//! driftgate's image as a Pod on the node: Ready, and reached by the API server through a
//! Service (a webhook registered by Service reference, which the API server calls at the
//! ClusterIP); the pod reaches the API server through the `kubernetes` Service; and the pod's
//! network has no way off the machine.

use std::net::IpAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use base64::prelude::BASE64_STANDARD;
use serde_json::Value;

use crate::harness::control_plane::{
    ADMIN, BOB, ControlPlane, FLUX, KUBERNETES_SERVICE_IP, bare_control_plane,
};
use crate::harness::node::{NODE_IP, POD_CIDR, driftgate_image, node};
use crate::harness::pki::Ca;

const NS: &str = "node-e2e";
const SERVICE: &str = "driftgate-pod";
const WEBHOOK: &str = "pod.node-e2e.driftgate.dev";

/// The pod's policy: in `node-e2e` only Flux writes.
const POLICY: &str = r#"apiVersion: driftgate.dev/v1alpha1
kind: GatePolicy
metadata: {name: node-e2e}
spec:
  mode: Enforce
  namespaces: {include: [node-e2e]}
  controllers:
    - name: flux
      usernames: ["system:serviceaccount:flux-system:kustomize-controller"]
"#;

fn json(plane: &ControlPlane, args: &[&str]) -> Value {
    let out = plane.kubectl(ADMIN, &[args, &["-o", "json"]].concat()).ok();
    serde_json::from_str(&out.stdout).expect("kubectl prints JSON")
}

/// Runs `program args` in the network namespace of the process `pid` (the pod's), with the
/// host's file system (its `ip`, `curl` and `bash`).
fn in_pod_network(pid: u32, program: &str, args: &[&str]) -> std::process::Output {
    Command::new("nsenter")
        .arg(format!("--net=/proc/{pid}/ns/net"))
        .arg("--")
        .arg(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("nsenter runs")
}

#[test]
fn driftgate_image_runs_on_the_node_and_the_api_server_reaches_it_through_a_service() {
    let node = node();
    let plane = bare_control_plane();

    // The serving certificate names the Service as the API server calls it.
    let ca = Ca::named("node-e2e webhook CA");
    let serving = ca.serving_for(SERVICE, &[&format!("{SERVICE}.{NS}.svc")], &[] as &[IpAddr]);
    plane.kubectl(ADMIN, &["create", "namespace", NS]).ok();
    let secret = serde_json::json!({
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {"name": "driftgate-pod-tls", "namespace": NS},
        "stringData": {"tls.crt": serving.cert, "tls.key": serving.key},
    });
    plane.apply(ADMIN, &secret.to_string());
    let policy = serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "driftgate-pod-policy", "namespace": NS},
        "data": {"policy.yaml": POLICY},
    });
    plane.apply(ADMIN, &policy.to_string());
    // As the chart runs it (non-root, read-only root, no capabilities, RuntimeDefault seccomp),
    // without a cluster (--no-kube: this pod has no RBAC); imagePullPolicy Never, so that a
    // missing image fails here rather than trying a pull.
    let pod = format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: driftgate
  namespace: {NS}
  labels: {{app: driftgate-pod}}
spec:
  automountServiceAccountToken: false
  securityContext:
    runAsNonRoot: true
    runAsUser: 65532
    runAsGroup: 65532
    fsGroup: 65532
    seccompProfile: {{type: RuntimeDefault}}
  containers:
    - name: driftgate
      image: {image}
      imagePullPolicy: Never
      args: [serve, --policy, /etc/driftgate/policies, --tls-cert, /etc/driftgate/tls/tls.crt,
             --tls-key, /etc/driftgate/tls/tls.key, --no-kube]
      ports:
        - {{name: webhook, containerPort: 8443}}
        - {{name: admin, containerPort: 8080}}
      # One log line per review, as the e2e suite's driftgates log.
      env: [{{name: RUST_LOG, value: "info,driftgate::server=debug"}}]
      readinessProbe:
        httpGet: {{path: /readyz, port: admin}}
        periodSeconds: 2
      securityContext:
        readOnlyRootFilesystem: true
        allowPrivilegeEscalation: false
        capabilities: {{drop: [ALL]}}
      volumeMounts:
        - {{name: policies, mountPath: /etc/driftgate/policies, readOnly: true}}
        - {{name: tls, mountPath: /etc/driftgate/tls, readOnly: true}}
  volumes:
    - name: policies
      configMap: {{name: driftgate-pod-policy}}
    - name: tls
      secret: {{secretName: driftgate-pod-tls, defaultMode: 288}}
---
apiVersion: v1
kind: Service
metadata:
  name: {SERVICE}
  namespace: {NS}
spec:
  selector: {{app: driftgate-pod}}
  ports:
    - {{name: https, port: 443, targetPort: webhook}}
"#,
        image = driftgate_image(),
    );
    plane.apply(ADMIN, &pod);
    let ready = plane.kubectl(
        ADMIN,
        &[
            "wait",
            "-n",
            NS,
            "--for=condition=Ready",
            "pod/driftgate",
            "--timeout=180s",
        ],
    );
    assert!(
        ready.success(),
        "driftgate's pod is not Ready: {}\n{}\n{}",
        ready.stderr,
        plane
            .kubectl(ADMIN, &["describe", "pod", "-n", NS, "driftgate"])
            .stdout,
        node.logs()
    );
    let pod = json(plane, &["get", "pod", "-n", NS, "driftgate"]);
    assert_eq!(pod["spec"]["nodeName"], crate::harness::node::NODE_NAME);
    let pod_ip = pod["status"]["podIP"].as_str().expect("the pod has an IP");
    let prefix = POD_CIDR.trim_end_matches(".0/24");
    assert!(
        pod_ip.starts_with(&format!("{prefix}.")),
        "the pod's address {pod_ip} is not in {POD_CIDR}"
    );
    let cluster_ip = json(plane, &["get", "service", "-n", NS, SERVICE])["spec"]["clusterIP"]
        .as_str()
        .expect("the Service has a ClusterIP")
        .to_owned();

    // The API server calls the webhook by Service reference: at the ClusterIP, which kube-proxy
    // rewrites to the pod.
    let configuration = serde_json::json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "node-e2e-pod"},
        "webhooks": [{
            "name": WEBHOOK,
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": "Fail",
            "timeoutSeconds": 5,
            "clientConfig": {
                "service": {"name": SERVICE, "namespace": NS, "path": "/validate", "port": 443},
                "caBundle": BASE64_STANDARD.encode(ca.cert_pem()),
            },
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                       "resources": ["configmaps"], "scope": "Namespaced"}],
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NS}},
            "objectSelector": {"matchLabels": {"node-e2e": "written"}},
        }],
    });
    plane.apply(ADMIN, &configuration.to_string());
    // kube-proxy has the ClusterIP among its Services: the rules the API server's call goes
    // through.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let table = Command::new("nft")
            .args(["list", "table", "ip", "kube-proxy"])
            .output()
            .expect("nft runs");
        let table = String::from_utf8_lossy(&table.stdout);
        if table.contains(&format!("{cluster_ip} . tcp . 443")) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "kube-proxy has no rule for {cluster_ip}:443 after 30 s:\n{table}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let write = |who, name: &str| {
        plane.kubectl_with_stdin(
            who,
            &["create", "-f", "-"],
            Some(
                &serde_json::json!({
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": name, "namespace": NS, "labels": {"node-e2e": "written"}},
                })
                .to_string(),
            ),
        )
    };
    // The configuration reaches the API server's webhook informer, and the pod's endpoint
    // kube-proxy's rules (until then the ClusterIP refuses connections), within moments.
    let deadline = Instant::now() + Duration::from_secs(30);
    let bob = loop {
        let bob = write(BOB, "bobs");
        if bob.success() {
            plane.kubectl(ADMIN, &["delete", "configmap", "-n", NS, "bobs"]);
        } else if !bob.stderr.contains("failed calling webhook") {
            break bob;
        }
        if Instant::now() > deadline {
            break bob;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    assert!(
        bob.stderr.contains(&format!(
            "admission webhook \"{WEBHOOK}\" denied the request: bob may not create ConfigMap {NS}/bobs"
        )),
        "bob's write was not refused by the pod's driftgate:\n{}\n{}",
        bob.stderr,
        node.logs()
    );
    write(FLUX, "fluxs").ok();
    // driftgate writes its log in batches (every 50 ms), and the runtime passes it on to the
    // kubelet's files after that: the line comes a moment after the answer.
    let deadline = Instant::now() + Duration::from_secs(30);
    let log = loop {
        let log = plane
            .kubectl(ADMIN, &["logs", "-n", NS, "driftgate"])
            .ok()
            .stdout;
        if (log.contains("bobs") && log.contains("fluxs")) || Instant::now() > deadline {
            break log;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        log.contains("bobs") && log.contains("fluxs"),
        "driftgate's log (kubectl logs, through the kubelet) shows no review of the two writes:\n{log}"
    );
    plane
        .kubectl(
            ADMIN,
            &["delete", "validatingwebhookconfiguration", "node-e2e-pod"],
        )
        .ok();

    // The pod's network: its own subnet, the Service range through the node, nothing else.
    let pid = node.sandbox_pid(plane, NS, "driftgate");
    let routes = in_pod_network(pid, "ip", &["-j", "-4", "route", "show"]);
    assert!(
        routes.status.success(),
        "{}",
        String::from_utf8_lossy(&routes.stderr)
    );
    let routes: Vec<Value> = serde_json::from_slice(&routes.stdout).expect("ip -j prints JSON");
    let summary: Vec<(String, String)> = routes
        .iter()
        .map(|r| {
            (
                r["dst"].as_str().unwrap_or_default().to_owned(),
                r["gateway"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("10.0.0.0/24".to_owned(), NODE_IP.to_string()),
            (POD_CIDR.to_owned(), String::new()),
        ],
        "the pod's routes: {routes:?}"
    );
    // An address off the machine (TEST-NET-3): no route, so the kernel refuses at once and no
    // packet is sent. Checked only once the table above shows no default route.
    let lookup = in_pod_network(pid, "ip", &["route", "get", "203.0.113.1"]);
    assert!(
        !lookup.status.success() && String::from_utf8_lossy(&lookup.stderr).contains("unreachable"),
        "203.0.113.1 is routable from the pod: {}",
        String::from_utf8_lossy(&lookup.stdout)
    );
    let started = Instant::now();
    let connect = in_pod_network(pid, "bash", &["-c", "exec 3<>/dev/tcp/203.0.113.1/443"]);
    let took = started.elapsed();
    assert!(
        !connect.status.success()
            && String::from_utf8_lossy(&connect.stderr).contains("Network is unreachable")
            && took < Duration::from_secs(2),
        "a connection from the pod to 203.0.113.1 did not fail at once with ENETUNREACH \
         ({took:?}): {}",
        String::from_utf8_lossy(&connect.stderr)
    );

    // From the pod's network the API server answers at the `kubernetes` Service, with a
    // certificate for the ClusterIP, as in-cluster clients (driftgate's kube-rs) reach it.
    let ca_file = node.dir().join("ca.crt");
    let readyz = in_pod_network(
        pid,
        "curl",
        &[
            "-sS",
            "--max-time",
            "5",
            "--cacert",
            ca_file.to_str().expect("a UTF-8 path"),
            &format!("https://{KUBERNETES_SERVICE_IP}:443/readyz"),
        ],
    );
    assert_eq!(
        String::from_utf8_lossy(&readyz.stdout),
        "ok",
        "the API server through the kubernetes Service, from the pod: {}",
        String::from_utf8_lossy(&readyz.stderr)
    );
}
