//! etcd, kube-apiserver and kube-controller-manager on loopback, shared by every test in the
//! binary, with a client certificate and kubeconfig per test identity and the RBAC the scenarios
//! need.
//!
//! kube-controller-manager runs Kubernetes' usual controllers as a cluster does
//! (`--use-service-account-credentials`: each writes as its own service account), so Deployments
//! get ReplicaSets and Pods, a deleted Namespace is emptied and goes, the garbage collector
//! deletes dependents, and every namespace gets its `default` ServiceAccount (the ServiceAccount
//! admission plugin is on) and `kube-root-ca.crt`. No scheduler runs: Pods stay Pending, unless a
//! test binary joins a node (`harness::node`, which brings kube-scheduler).

use std::collections::HashMap;
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::node::NODE_IP;
use super::pki::{self, Ca};
use super::process::Guarded;
use super::testenv::binaries;

/// The Services' ClusterIP range (`--service-cluster-ip-range`).
pub const SERVICE_CIDR: &str = "10.0.0.0/24";
/// The `kubernetes` Service's ClusterIP, the first of [`SERVICE_CIDR`]: what pods reach the API
/// server at (`KUBERNETES_SERVICE_HOST`), so its serving certificate names it.
pub const KUBERNETES_SERVICE_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);

/// Who a request comes from: a client certificate with CN `user` and one O per group (at most
/// two, see [`Ca::client`]). The API server adds `system:authenticated`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Identity {
    pub user: &'static str,
    pub groups: &'static [&'static str],
}

/// Bypasses RBAC (`system:masters`); sets the cluster up.
pub const ADMIN: Identity = Identity {
    user: "admin",
    groups: &["system:masters"],
};
/// Flux's kustomize-controller, the example policy's controller; bound to cluster-admin.
pub const FLUX: Identity = Identity {
    user: "system:serviceaccount:flux-system:kustomize-controller",
    groups: &[
        "system:serviceaccounts",
        "system:serviceaccounts:flux-system",
    ],
};
/// The HPA controller, the example policy's `hpa` delegation: may scale workloads.
pub const HPA: Identity = Identity {
    user: "system:serviceaccount:kube-system:horizontal-pod-autoscaler",
    groups: &[
        "system:serviceaccounts",
        "system:serviceaccounts:kube-system",
    ],
};
/// An on-call engineer: a break-glass opener under the example policy; may edit workloads.
pub const ALICE: Identity = Identity {
    user: "alice",
    groups: &["sre-oncall"],
};
/// An engineer in no special group; RBAC lets him edit workloads, driftgate should not.
pub const BOB: Identity = Identity {
    user: "bob",
    groups: &[],
};
/// kube-controller-manager's own credentials (bound to `system:kube-controller-manager` by the
/// API server's bootstrap RBAC). With `--use-service-account-credentials` only its tokens
/// controller writes as this identity; the others write as `system:serviceaccount:kube-system:*`.
pub const KUBE_CONTROLLER_MANAGER: Identity = Identity {
    user: "system:kube-controller-manager",
    groups: &[],
};
/// The controllers [`ControlPlane`] runs, by their 1.35 names: the usual set of a cluster
/// without a cloud provider. `service-lb-controller` is asked for too: kube-controller-manager 1.35
/// skips it as a cloud-provider controller (it lives in cloud-controller-manager), and says so in
/// its log.
pub const CONTROLLERS: &[&str] = &[
    "serviceaccount-token-controller",
    "serviceaccount-controller",
    "root-ca-certificate-publisher-controller",
    "namespace-controller",
    "garbage-collector-controller",
    "deployment-controller",
    "replicaset-controller",
    "statefulset-controller",
    "daemonset-controller",
    "job-controller",
    "cronjob-controller",
    "ttl-after-finished-controller",
    "endpoints-controller",
    "endpointslice-controller",
    "endpointslice-mirroring-controller",
    "disruption-controller",
    "resourcequota-controller",
    "pod-garbage-collector-controller",
    // Takes the not-ready taint kubelet registers a node with off once it is Ready (the e2e
    // node's, harness::node); with no node it has nothing to do.
    "node-lifecycle-controller",
    "persistentvolumeclaim-protection-controller",
    "service-lb-controller",
];
/// `driftgate serve`'s own identity: namespaces, parent objects, Events.
pub const DRIFTGATE: Identity = Identity {
    user: "system:serviceaccount:driftgate:driftgate",
    groups: &["system:serviceaccounts", "system:serviceaccounts:driftgate"],
};

/// What the identities above may do. The example policy, not RBAC, is what the tests exercise,
/// so alice and bob get the same generous role.
const RBAC: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: driftgate-e2e-editor}
rules:
  - apiGroups: ["", apps, batch, autoscaling, policy, networking.k8s.io, events.k8s.io]
    resources: ["*"]
    verbs: ["*"]
  # `driftgate suspend` and `resume` read and patch Flux's and Argo CD's objects.
  - apiGroups: [kustomize.toolkit.fluxcd.io, helm.toolkit.fluxcd.io, source.toolkit.fluxcd.io, argoproj.io]
    resources: ["*"]
    verbs: [get, list, watch, patch]
  # What on-call engineers need for `driftgate backlog`, `backlog resolve` and `backlog link`
  # (the chart README gives the same role).
  - apiGroups: [driftgate.dev]
    resources: [backportrequirements]
    verbs: [get, list, watch, patch]
  - apiGroups: [driftgate.dev]
    resources: [backportrequirements/status]
    verbs: [patch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: driftgate-e2e-editor}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: driftgate-e2e-editor}
subjects:
  - {apiGroup: rbac.authorization.k8s.io, kind: User, name: bob}
  - {apiGroup: rbac.authorization.k8s.io, kind: Group, name: sre-oncall}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: driftgate-e2e-flux}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}
subjects:
  - {apiGroup: rbac.authorization.k8s.io, kind: User, name: "system:serviceaccount:flux-system:kustomize-controller"}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: driftgate-e2e-hpa}
rules:
  - apiGroups: [apps]
    resources: [deployments, statefulsets, replicasets]
    verbs: [get, list, watch]
  - apiGroups: [apps]
    resources: [deployments/scale, statefulsets/scale, replicasets/scale]
    verbs: [get, update, patch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: driftgate-e2e-hpa}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: driftgate-e2e-hpa}
subjects:
  - {apiGroup: rbac.authorization.k8s.io, kind: User, name: "system:serviceaccount:kube-system:horizontal-pod-autoscaler"}
"#;

/// What the control plane is set up with besides the test identities' RBAC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Setup {
    /// driftgate's ServiceAccount RBAC (the chart's) and its backport records' CRD, as the tests
    /// that run driftgate outside the cluster need: [`control_plane`].
    Driftgate,
    /// Neither, as a user's cluster is before `helm install` (which would refuse to take over
    /// objects it did not create): [`bare_control_plane`].
    Bare,
}

pub struct ControlPlane {
    setup: Setup,
    /// Scratch directory: certificates, kubeconfigs, etcd's data, logs. Removed when etcd exits.
    dir: PathBuf,
    url: String,
    ca: Ca,
    ca_pem: String,
    /// Signs the client certificate the API server presents to webhooks, and nothing else.
    webhook_client_ca: Ca,
    kubeconfigs: Mutex<HashMap<Identity, PathBuf>>,
    processes: Mutex<Vec<Guarded>>,
}

static CONTROL_PLANE: OnceLock<ControlPlane> = OnceLock::new();

/// The control plane, started by the first test that asks for it, with driftgate's RBAC and CRD
/// ([`Setup::Driftgate`]) unless [`bare_control_plane`] started it first. It lives as long as the
/// test binary: etcd, kube-apiserver and kube-controller-manager run under [`Guarded`], so they
/// exit with it.
pub fn control_plane() -> &'static ControlPlane {
    CONTROL_PLANE.get_or_init(|| ControlPlane::start(Setup::Driftgate))
}

/// The control plane without driftgate's RBAC and CRD ([`Setup::Bare`]), for a binary that
/// installs the chart with helm. Panics if [`control_plane`] has started it with them already.
pub fn bare_control_plane() -> &'static ControlPlane {
    let plane = CONTROL_PLANE.get_or_init(|| ControlPlane::start(Setup::Bare));
    assert_eq!(
        plane.setup,
        Setup::Bare,
        "the control plane was started with driftgate's RBAC and CRD; start the bare one first"
    );
    plane
}

/// A TCP port that was free a moment ago.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a loopback port binds")
        .port()
}

fn write(path: &Path, contents: &str) {
    std::fs::write(path, contents)
        .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
}

/// The result of one kubectl run (or of another command line run as a test identity, such as
/// `driftgate break-glass`).
#[derive(Debug)]
pub struct KubectlOutput {
    /// "kubectl", or the other program's name.
    pub program: &'static str,
    pub args: Vec<String>,
    /// The exit code; None when killed by a signal.
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl KubectlOutput {
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }

    /// Panics, showing the command and its stderr, unless it succeeded.
    #[track_caller]
    pub fn ok(self) -> KubectlOutput {
        assert!(
            self.success(),
            "{} {} failed ({:?}):\n{}",
            self.program,
            self.args.join(" "),
            self.code,
            self.stderr
        );
        self
    }

    /// Panics, showing the command and its output, unless it failed.
    #[track_caller]
    pub fn failed(self) -> KubectlOutput {
        assert!(
            !self.success(),
            "{} {} succeeded but should not have:\n{}",
            self.program,
            self.args.join(" "),
            self.stdout
        );
        self
    }
}

impl ControlPlane {
    fn start(setup: Setup) -> ControlPlane {
        let started = Instant::now();
        let bins = binaries();
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or_default();
        let dir =
            std::env::temp_dir().join(format!("driftgate-e2e-{}-{nanos:08x}", std::process::id()));
        std::fs::create_dir_all(dir.join("etcd")).expect("the scratch directory is created");

        let ca = Ca::new();
        let ca_pem = ca.cert_pem();
        write(&dir.join("ca.crt"), &ca_pem);
        // Pods reach the API server through the `kubernetes` Service (harness::node), by its
        // ClusterIP (client-go and kube-rs in a pod) or its DNS names.
        let serving = ca.serving_for(
            "kube-apiserver",
            &[
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ],
            &[IpAddr::V4(KUBERNETES_SERVICE_IP)],
        );
        write(&dir.join("apiserver.crt"), &serving.cert);
        write(&dir.join("apiserver.key"), &serving.key);
        let service_account = pki::service_account_key();
        write(&dir.join("sa.pub"), &service_account.cert);
        write(&dir.join("sa.key"), &service_account.key);
        let webhook_client_ca = Ca::named("driftgate e2e webhook client CA");
        let admission_config = write_webhook_client_config(&dir, &webhook_client_ca);
        // What the API server presents to a kubelet (logs, exec): the node's kubelet trusts the
        // cluster CA's client certificates (harness::node).
        let kubelet_client = ca.client("kube-apiserver-kubelet-client", &["system:masters"]);
        write(
            &dir.join("apiserver-kubelet-client.crt"),
            &kubelet_client.cert,
        );
        write(
            &dir.join("apiserver-kubelet-client.key"),
            &kubelet_client.key,
        );

        let etcd_port = free_port();
        let peer_port = free_port();
        let etcd_url = format!("http://127.0.0.1:{etcd_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        let mut etcd = Command::new(bins.etcd());
        etcd.arg(format!("--data-dir={}", dir.join("etcd").display()))
            .arg(format!("--listen-client-urls={etcd_url}"))
            .arg(format!("--advertise-client-urls={etcd_url}"))
            .arg(format!("--listen-peer-urls={peer_url}"))
            .arg(format!("--initial-advertise-peer-urls={peer_url}"))
            .arg(format!("--initial-cluster=default={peer_url}"))
            // A test cluster's data is thrown away: fsync only costs time.
            .arg("--unsafe-no-fsync=true")
            .arg("--log-level=warn");
        // etcd's guard removes the whole scratch directory once etcd (the only process
        // writing into it) has exited.
        let etcd = Guarded::spawn(
            "etcd",
            &etcd,
            &dir.join("etcd.log"),
            Some(&dir),
            Duration::from_secs(10),
        );
        let mut processes = vec![etcd];
        wait_for(
            &mut processes,
            "etcd to listen",
            Duration::from_secs(30),
            || TcpStream::connect(("127.0.0.1", etcd_port)).is_ok(),
        );

        let port = free_port();
        let url = format!("https://127.0.0.1:{port}");
        let path = |name: &str| dir.join(name).display().to_string();
        let mut apiserver = Command::new(bins.kube_apiserver());
        apiserver
            .arg(format!("--etcd-servers={etcd_url}"))
            .arg(format!("--cert-dir={}", path("apiserver-certs")))
            .arg(format!("--tls-cert-file={}", path("apiserver.crt")))
            .arg(format!("--tls-private-key-file={}", path("apiserver.key")))
            .arg(format!("--client-ca-file={}", path("ca.crt")))
            .arg(format!("--secure-port={port}"))
            .arg("--bind-address=127.0.0.1")
            // The `kubernetes` Service's endpoint, for pods: the node's bridge address, where
            // harness::node forwards to this loopback port. Without a node nothing is there, and
            // nothing in the host uses the Service. (127.0.0.1 cannot be an endpoint at all.)
            .arg(format!("--advertise-address={NODE_IP}"))
            .arg(format!(
                "--kubelet-client-certificate={}",
                path("apiserver-kubelet-client.crt")
            ))
            .arg(format!(
                "--kubelet-client-key={}",
                path("apiserver-kubelet-client.key")
            ))
            // The node's InternalIP (its bridge address): never a host name to look up.
            .arg("--kubelet-preferred-address-types=InternalIP")
            .arg("--service-account-issuer=https://kubernetes.default.svc.cluster.local")
            .arg(format!("--service-account-key-file={}", path("sa.pub")))
            .arg(format!(
                "--service-account-signing-key-file={}",
                path("sa.key")
            ))
            .arg("--authorization-mode=RBAC")
            .arg(format!("--service-cluster-ip-range={SERVICE_CIDR}"))
            .arg("--enable-admission-plugins=ValidatingAdmissionWebhook")
            // The API server presents a client certificate to every webhook it calls, as a
            // cluster whose webhooks authenticate it is configured.
            .arg(format!(
                "--admission-control-config-file={}",
                admission_config.display()
            ))
            .arg("--allow-privileged=true");
        processes.push(Guarded::spawn(
            "kube-apiserver",
            &apiserver,
            &dir.join("kube-apiserver.log"),
            None,
            // Both stop together when the test binary exits; with etcd gone, kube-apiserver's
            // graceful shutdown (removing its endpoint from the `kubernetes` Service) retries
            // for minutes. Its state is thrown away anyway.
            Duration::from_secs(2),
        ));

        let control_plane = ControlPlane {
            setup,
            dir,
            url,
            ca,
            ca_pem,
            webhook_client_ca,
            kubeconfigs: Mutex::default(),
            processes: Mutex::new(Vec::new()),
        };
        wait_for(
            &mut processes,
            "kube-apiserver's /readyz",
            Duration::from_secs(120),
            || {
                control_plane
                    .kubectl(ADMIN, &["get", "--raw=/readyz"])
                    .success()
            },
        );
        let controller_manager = control_plane.start_controller_manager();
        processes.push(controller_manager);
        wait_for(
            &mut processes,
            "kube-controller-manager's service-account and root CA controllers",
            Duration::from_secs(120),
            || control_plane.namespace_equipped("default"),
        );
        *control_plane.lock_processes() = processes;
        control_plane.apply(ADMIN, RBAC);
        if setup == Setup::Driftgate {
            control_plane.install_driftgate_rbac_and_crd();
        }
        eprintln!(
            "driftgate e2e: control plane at {} ready in {:.1}s (scratch {})",
            control_plane.url,
            started.elapsed().as_secs_f64(),
            control_plane.dir.display()
        );
        control_plane
    }

    fn install_driftgate_rbac_and_crd(&self) {
        let control_plane = self;
        // driftgate's own permissions are the chart's, so the tests prove the chart grants
        // enough (the chart tests prove it grants no more).
        control_plane.apply(ADMIN, &super::chart::rbac_manifest());
        // The backport ledger's CRD, exactly as `driftgate crd` prints it (the chart ships the same).
        let crd = std::process::Command::new(env!("CARGO_BIN_EXE_driftgate"))
            .arg("crd")
            .output()
            .expect("driftgate crd runs");
        assert!(crd.status.success(), "driftgate crd failed");
        control_plane.apply(
            ADMIN,
            &String::from_utf8(crd.stdout).expect("the CRD is UTF-8"),
        );
        control_plane
            .kubectl(
                ADMIN,
                &[
                    "wait",
                    "--for=condition=Established",
                    "--timeout=30s",
                    "crd/backportrequirements.driftgate.dev",
                ],
            )
            .ok();
    }

    /// kube-controller-manager as a cluster runs it: its own kubeconfig, each controller with
    /// its own service account, the harness's signing key and CA for the token Secrets it fills
    /// in, no leader election, loopback only.
    fn start_controller_manager(&self) -> Guarded {
        let path = |name: &str| self.dir.join(name).display().to_string();
        let mut command = Command::new(binaries().kube_controller_manager());
        command
            .arg(format!(
                "--kubeconfig={}",
                self.kubeconfig(KUBE_CONTROLLER_MANAGER).display()
            ))
            .arg("--use-service-account-credentials=true")
            .arg(format!(
                "--service-account-private-key-file={}",
                path("sa.key")
            ))
            .arg(format!("--root-ca-file={}", path("ca.crt")))
            .arg(format!("--controllers={}", CONTROLLERS.join(",")))
            .arg("--leader-elect=false")
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--secure-port={}", free_port()))
            .arg(format!("--cert-dir={}", path("controller-manager-certs")))
            .arg("-v=2");
        Guarded::spawn(
            "kube-controller-manager",
            &command,
            &self.controller_manager_log(),
            None,
            Duration::from_secs(2),
        )
    }

    /// kube-controller-manager's log (klog, `-v=2`): tests read it for refusals.
    pub fn controller_manager_log(&self) -> PathBuf {
        self.dir.join("kube-controller-manager.log")
    }

    /// Whether kube-controller-manager has given `namespace` its `default` ServiceAccount and
    /// `kube-root-ca.crt`, as it does for every namespace.
    pub fn namespace_equipped(&self, namespace: &str) -> bool {
        self.kubectl(ADMIN, &["get", "serviceaccount/default", "-n", namespace])
            .success()
            && self
                .kubectl(
                    ADMIN,
                    &["get", "configmap/kube-root-ca.crt", "-n", namespace],
                )
                .success()
    }

    fn lock_processes(&self) -> std::sync::MutexGuard<'_, Vec<Guarded>> {
        self.processes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Panics with the log tail of etcd, kube-apiserver or kube-controller-manager if one has
    /// exited.
    pub fn assert_running(&self) {
        for process in self.lock_processes().iter_mut() {
            process.assert_running();
        }
    }

    /// `https://127.0.0.1:PORT`
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The CA that signed the API server's serving certificate and every client certificate.
    pub fn ca_pem(&self) -> &[u8] {
        self.ca_pem.as_bytes()
    }

    /// The CA that signs every identity's client certificate (and the API server's serving one).
    pub fn ca(&self) -> &Ca {
        &self.ca
    }

    /// The CA that signs the client certificate (CN `kube-apiserver`) the API server presents to
    /// webhooks: what `driftgate serve --client-ca-file` is given.
    pub fn webhook_client_ca(&self) -> &Ca {
        &self.webhook_client_ca
    }

    /// [`ControlPlane::webhook_client_ca`]'s certificate as a file.
    pub fn webhook_client_ca_file(&self) -> PathBuf {
        self.dir.join(WEBHOOK_CLIENT_CA_FILE)
    }

    /// The scratch directory; gone when the test binary has exited.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A kubeconfig file for `who`, made (certificate and all) on first use. Identities other
    /// than the constants above get no RBAC unless a test grants it.
    pub fn kubeconfig(&self, who: Identity) -> PathBuf {
        let mut kubeconfigs = self.kubeconfigs.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(path) = kubeconfigs.get(&who) {
            return path.clone();
        }
        let file_name: String = who
            .user
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        let base = self.dir.join("users").join(&file_name);
        std::fs::create_dir_all(&base).expect("the users directory is created");
        let pair = self.ca.client(who.user, who.groups);
        write(&base.join("client.crt"), &pair.cert);
        write(&base.join("client.key"), &pair.key);
        let kubeconfig = format!(
            r#"apiVersion: v1
kind: Config
clusters:
  - name: e2e
    cluster:
      server: {url}
      certificate-authority: {ca}
users:
  - name: {user:?}
    user:
      client-certificate: {cert}
      client-key: {key}
contexts:
  - name: e2e
    context: {{cluster: e2e, user: {user:?}}}
current-context: e2e
"#,
            url = self.url,
            ca = self.dir.join("ca.crt").display(),
            user = who.user,
            cert = base.join("client.crt").display(),
            key = base.join("client.key").display(),
        );
        let path = base.join("kubeconfig");
        write(&path, &kubeconfig);
        kubeconfigs.insert(who, path.clone());
        path
    }

    /// A kube-rs client for `who`, from its kubeconfig file.
    pub async fn client(&self, who: Identity) -> kube::Client {
        let path = self.kubeconfig(who);
        let kubeconfig = kube::config::Kubeconfig::read_from(&path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        kube::Client::try_from(config).expect("a kube client builds")
    }

    /// Runs kubectl as `who`.
    pub fn kubectl(&self, who: Identity, args: &[&str]) -> KubectlOutput {
        self.kubectl_with_stdin(who, args, None)
    }

    /// Runs kubectl as `who` with `stdin` (for `-f -`).
    pub fn kubectl_with_stdin(
        &self,
        who: Identity,
        args: &[&str],
        stdin: Option<&str>,
    ) -> KubectlOutput {
        self.kubectl_with_env(who, args, stdin, &[])
    }

    /// Runs kubectl as `who` with `stdin` and extra environment variables (e.g. `KUBE_EDITOR`
    /// for a non-interactive `kubectl edit`).
    pub fn kubectl_with_env(
        &self,
        who: Identity,
        args: &[&str],
        stdin: Option<&str>,
        env: &[(&str, &str)],
    ) -> KubectlOutput {
        let mut command = Command::new(binaries().kubectl());
        command
            .arg("--kubeconfig")
            .arg(self.kubeconfig(who))
            .args(args)
            .env_remove("KUBECONFIG")
            .env_remove("KUBE_EDITOR")
            .env_remove("EDITOR")
            .envs(env.iter().copied())
            // Discovery cache in the scratch directory, not the developer's ~/.kube.
            .env("KUBECACHEDIR", self.dir.join("kube-cache"))
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn().expect("kubectl starts");
        if let Some(input) = stdin {
            let mut pipe = child.stdin.take().expect("kubectl's stdin is piped");
            pipe.write_all(input.as_bytes())
                .expect("kubectl reads its stdin");
        }
        let out = child.wait_with_output().expect("kubectl runs");
        KubectlOutput {
            program: "kubectl",
            args: args.iter().map(|s| (*s).to_owned()).collect(),
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// `kubectl apply --server-side -f -` as `who`, which must succeed.
    #[track_caller]
    pub fn apply(&self, who: Identity, manifest: &str) -> KubectlOutput {
        self.kubectl_with_stdin(
            who,
            &["apply", "--server-side", "--force-conflicts", "-f", "-"],
            Some(manifest),
        )
        .ok()
    }
}

/// Where [`write_webhook_client_config`] puts the webhook client CA, in the scratch directory.
const WEBHOOK_CLIENT_CA_FILE: &str = "webhook-client-ca.crt";

/// The admission configuration that makes the API server present a client certificate (CN
/// `kube-apiserver`, signed by `webhook_client_ca`) to webhooks, as the chart README's
/// "Authenticating the API server" describes: a WebhookAdmissionConfiguration naming a kubeconfig
/// whose user entry is matched by the webhook's host and port (`127.0.0.1:PORT`, or
/// `SERVICE.NAMESPACE.svc:443`), here `*`, every webhook: the harness's webhooks listen on many
/// ports, and one that asks for no client certificate is sent none. Files rather than data, so
/// the API server reads a renewed certificate (client-go re-reads them at most once a second).
/// Returns the configuration's path.
fn write_webhook_client_config(dir: &Path, webhook_client_ca: &Ca) -> PathBuf {
    write(
        &dir.join(WEBHOOK_CLIENT_CA_FILE),
        &webhook_client_ca.cert_pem(),
    );
    let client = webhook_client_ca.client("kube-apiserver", &[]);
    let (cert, key) = (
        dir.join("apiserver-webhook-client.crt"),
        dir.join("apiserver-webhook-client.key"),
    );
    write(&cert, &client.cert);
    write(&key, &client.key);
    let kubeconfig = dir.join("admission-webhook-kubeconfig.yaml");
    write(
        &kubeconfig,
        &format!(
            r#"apiVersion: v1
kind: Config
users:
  - name: "*"
    user:
      client-certificate: {cert}
      client-key: {key}
"#,
            cert = cert.display(),
            key = key.display(),
        ),
    );
    let config = dir.join("admission-config.yaml");
    write(
        &config,
        &format!(
            r#"apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
  - name: ValidatingAdmissionWebhook
    configuration:
      apiVersion: apiserver.config.k8s.io/v1
      kind: WebhookAdmissionConfiguration
      kubeConfigFile: {kubeconfig}
"#,
            kubeconfig = kubeconfig.display(),
        ),
    );
    config
}

/// Polls `ready` every 100 ms until it holds, failing early (with the log) when a process exits.
pub fn wait_for(
    processes: &mut [Guarded],
    what: &str,
    timeout: Duration,
    mut ready: impl FnMut() -> bool,
) {
    let deadline = Instant::now() + timeout;
    loop {
        for process in processes.iter_mut() {
            process.assert_running();
        }
        if ready() {
            return;
        }
        if Instant::now() > deadline {
            let logs: Vec<String> = processes
                .iter()
                .map(|p| {
                    format!(
                        "== {} ({}):\n{}",
                        p.name(),
                        p.log_path().display(),
                        p.log_tail(30)
                    )
                })
                .collect();
            panic!(
                "timed out after {timeout:?} waiting for {what}\n{}",
                logs.join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
