//! A real Kubernetes node joined to the test binary's control plane: containerd (with runc and
//! the CNI plugins), kubelet, kube-proxy, and kube-scheduler to place pods on it, all built from
//! Go modules by `tests/e2e/testenv/node/build.sh`, with the pause image and driftgate's image
//! (`image/build.sh`) imported into containerd: no registry, and no pull ever leaves the machine.
//! Started by the first test that asks for it ([`node`]); it needs root (network namespaces,
//! mounts, cgroups, nftables) and `nft` (Debian's nftables).
//!
//! The network. Pods get addresses of [`POD_CIDR`] on a bridge in the host's network namespace
//! that carries [`NODE_IP`]; each pod's namespace (made by containerd for the test) has a route
//! to the pod CIDR and one to the Service range through [`NODE_IP`], and no default route. The
//! host's `net.ipv4.ip_forward` is left as it is (0 here): no packet from a pod is forwarded, so
//! a pod reaches only the other pods and the node's own address, where this harness forwards to
//! the API server's loopback port (the `kubernetes` Service's endpoint is [`NODE_IP`], see
//! `control_plane.rs`).
//!
//! How the API server reaches a Service backed by a pod: as on a real node, through kube-proxy's
//! rules (nftables mode, its own `kube-proxy` tables) in the host's namespace, where the API
//! server runs. Its connection to a ClusterIP is rewritten in the output hook to the pod's
//! address on the bridge. The host routes the Service range onto the bridge, from [`NODE_IP`]:
//! a ClusterIP nothing serves then goes nowhere rather than to the default route, and pods
//! answer the API server on their own subnet. The alternative, `--enable-aggregator-routing`
//! (the API server picks an endpoint itself), would skip the ClusterIP and kube-proxy, which are
//! what a real cluster's webhook calls go through.
//!
//! Everything is undone when the test binary exits (`node.sh`'s teardown): processes, mounts,
//! network namespaces, the bridge and its route, nftables tables, cgroups, and the kernel
//! settings kubelet changes at start.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use super::control_plane::{
    ADMIN, ControlPlane, Identity, SERVICE_CIDR, bare_control_plane, free_port,
};
use super::process::Guarded;
use super::repo_path;
use super::testenv::run_build_script;

/// The node's name, and its kubelet's user.
pub const NODE_NAME: &str = "driftgate-e2e-node";
const KUBELET: Identity = Identity {
    user: "system:node:driftgate-e2e-node",
    groups: &["system:nodes"],
};
/// kube-proxy's user, which the API server's bootstrap RBAC binds (`system:node-proxier`).
const KUBE_PROXY: Identity = Identity {
    user: "system:kube-proxy",
    groups: &[],
};
/// kube-scheduler's user, which the API server's bootstrap RBAC binds.
const KUBE_SCHEDULER: Identity = Identity {
    user: "system:kube-scheduler",
    groups: &[],
};

/// The pods' addresses.
pub const POD_CIDR: &str = "10.244.0.0/24";
/// The bridge's address: the pods' gateway, the node's InternalIP, and the `kubernetes`
/// Service's endpoint.
pub const NODE_IP: Ipv4Addr = Ipv4Addr::new(10, 244, 0, 1);
/// The pods' bridge in the host's network namespace. A fixed name, so that one left by a run
/// that was not torn down is found (node.sh refuses to start over it).
pub const BRIDGE: &str = "dge2e0";
/// What the pause image is called; containerd's sandbox image.
pub const PAUSE_IMAGE: &str = "registry.k8s.io/pause:3.10.1";
/// An image with `sh` and `kubectl`, for the chart's `helm test` Pod (`helmTest.image`).
pub const HELM_TEST_IMAGE: &str = "driftgate.local/e2e-kubectl:e2e";

/// driftgate's image as containerd knows it: what `--set image.repository=driftgate --set
/// image.tag=VERSION` names (the kind quickstart's values), which the CRI reads as
/// `docker.io/library/driftgate:VERSION`.
pub fn driftgate_image() -> String {
    format!("docker.io/library/driftgate:{}", env!("CARGO_PKG_VERSION"))
}

pub struct Node {
    dir: PathBuf,
    bin: PathBuf,
    supervisor: Mutex<Guarded>,
}

/// The node, started on first use with the control plane it joins ([`bare_control_plane`]: the
/// tests that need a node install driftgate with helm, as users do).
pub fn node() -> &'static Node {
    static NODE: OnceLock<Node> = OnceLock::new();
    NODE.get_or_init(Node::start)
}

fn write(path: &Path, contents: &str) {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", parent.display()));
    }
    std::fs::write(path, contents)
        .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
}

fn display(path: &Path) -> String {
    path.display().to_string()
}

impl Node {
    fn start() -> Node {
        let started = Instant::now();
        let built = run_build_script(
            &repo_path("tests/e2e/testenv/node/build.sh"),
            "driftgate e2e: the node's binaries need Go >= 1.26 (from go.dev)",
        );
        let plane = bare_control_plane();
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or_default();
        let dir = std::env::temp_dir().join(format!(
            "driftgate-e2e-node-{}-{nanos:08x}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).expect("the node's directory is created");
        let images = [
            built.join("images/pause.tar"),
            built.join("images/kubectl.tar"),
            build_driftgate_image(&dir),
        ];
        let bin = built.join("bin");
        let scheduler_port = free_port();
        let kube_proxy_health = free_port();
        let kubelet_healthz = free_port();
        write_configuration(plane, &dir, &built, kube_proxy_health, kubelet_healthz);
        // kubelet's RBAC: the API server runs RBAC alone (no Node authorizer), and the bootstrap
        // role `system:node` is bound to nobody.
        plane.apply(
            ADMIN,
            &format!(
                "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\n\
                 metadata: {{name: driftgate-e2e-node}}\n\
                 roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: system:node}}\n\
                 subjects: [{{apiGroup: rbac.authorization.k8s.io, kind: User, name: \"{}\"}}]\n",
                KUBELET.user
            ),
        );

        let mut command = Command::new("bash");
        command
            .arg(repo_path("tests/e2e/harness/node.sh"))
            .env("NODE_DIR", &dir)
            .env("BIN", &bin)
            .env("BRIDGE", BRIDGE)
            .env("NODE_IP", NODE_IP.to_string())
            .env("POD_PREFIX", POD_CIDR.rsplit('/').next().expect("a CIDR"))
            .env("SERVICE_CIDR", SERVICE_CIDR)
            .env(
                "CGROUP_ROOT",
                format!("driftgate-e2e-node-{}", std::process::id()),
            )
            .env("NODE_NAME", NODE_NAME)
            .env("SCHEDULER_PORT", scheduler_port.to_string())
            .env(
                "IMAGES",
                images
                    .iter()
                    .map(|p| display(p))
                    .collect::<Vec<_>>()
                    .join(" "),
            );
        // The teardown (node.sh) removes the directory's mounts before the guard removes it.
        let supervisor = Guarded::spawn(
            "node",
            &command,
            &dir.join("node.log"),
            Some(&dir),
            Duration::from_secs(60),
        );
        let node = Node {
            dir,
            bin,
            supervisor: Mutex::new(supervisor),
        };
        node.wait("the node's network", Duration::from_secs(30), || {
            node.dir.join("network-ready").exists()
        });
        forward_to_api_server(plane);
        node.wait("the images in containerd", Duration::from_secs(120), || {
            node.dir.join("images-imported").exists()
        });
        node.wait("the node to be Ready", Duration::from_secs(120), || {
            plane
                .kubectl(
                    ADMIN,
                    &[
                        "get",
                        "node",
                        NODE_NAME,
                        "-o",
                        "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
                    ],
                )
                .stdout
                == "True"
        });
        node.wait("kube-proxy's health", Duration::from_secs(60), || {
            healthy(&format!("http://127.0.0.1:{kube_proxy_health}/healthz"))
        });
        node.wait("kube-scheduler's health", Duration::from_secs(60), || {
            healthy(&format!("https://127.0.0.1:{scheduler_port}/healthz"))
        });
        eprintln!(
            "driftgate e2e: node {NODE_NAME} ready in {:.1}s (scratch {})",
            started.elapsed().as_secs_f64(),
            node.dir.display()
        );
        node
    }

    /// Polls `ready` every 200 ms until it holds, failing early (with the node's logs) when the
    /// node's supervisor has exited.
    fn wait(&self, what: &str, timeout: Duration, mut ready: impl FnMut() -> bool) {
        let deadline = Instant::now() + timeout;
        loop {
            self.assert_running();
            if ready() {
                return;
            }
            if Instant::now() > deadline {
                panic!(
                    "timed out after {timeout:?} waiting for {what}\n{}",
                    self.logs()
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Panics with the node's logs if its supervisor has exited (it does when containerd,
    /// kubelet, kube-proxy or kube-scheduler exits).
    pub fn assert_running(&self) {
        let mut supervisor = self.supervisor.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(status) = supervisor.exited() {
            panic!(
                "the node stopped ({status}):\n{}\n{}",
                supervisor.log_tail(40),
                self.logs()
            );
        }
    }

    /// The last lines of each component's log, for a failing test to show.
    pub fn logs(&self) -> String {
        [
            "node",
            "containerd",
            "kubelet",
            "kube-proxy",
            "kube-scheduler",
            "images",
        ]
        .iter()
        .map(|name| {
            let path = self.dir.join(format!("{name}.log"));
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            format!(
                "== {} (last 15 lines):\n{}",
                path.display(),
                lines[lines.len().saturating_sub(15)..].join("\n")
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
    }

    /// The scratch directory: configuration and logs; gone when the test binary has exited.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `ctr` against the node's containerd, in the CRI's namespace.
    pub fn ctr(&self, args: &[&str]) -> Output {
        Command::new(self.bin.join("ctr"))
            .arg("--address")
            .arg(self.dir.join("containerd/containerd.sock"))
            .args(["--namespace", "k8s.io"])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("ctr runs")
    }

    /// The pid of the sandbox (pause) process of pod `namespace/name`, whose network namespace
    /// is the pod's.
    pub fn sandbox_pid(&self, plane: &ControlPlane, namespace: &str, name: &str) -> u32 {
        let uid = plane
            .kubectl(
                ADMIN,
                &[
                    "get",
                    "pod",
                    name,
                    "-n",
                    namespace,
                    "-o",
                    "jsonpath={.metadata.uid}",
                ],
            )
            .ok()
            .stdout;
        let filter = format!(
            "labels.\"io.kubernetes.pod.uid\"=={uid},labels.\"io.cri-containerd.kind\"==sandbox"
        );
        let listed = self.ctr(&["containers", "ls", "-q", &filter]);
        let listed = String::from_utf8_lossy(&listed.stdout);
        let ids: Vec<&str> = listed.split_whitespace().collect();
        let [sandbox] = ids[..] else {
            panic!("pod {namespace}/{name} ({uid}) has sandboxes {ids:?} in containerd");
        };
        let tasks = self.ctr(&["tasks", "ls"]);
        String::from_utf8_lossy(&tasks.stdout)
            .lines()
            .find_map(|line| {
                let mut words = line.split_whitespace();
                (words.next() == Some(sandbox))
                    .then(|| words.next().and_then(|pid| pid.parse().ok()))
                    .flatten()
            })
            .unwrap_or_else(|| panic!("no task for the sandbox {sandbox} of {namespace}/{name}"))
    }
}

/// Whether `url` answers 200 (curl; `-k`: kube-scheduler serves a self-signed certificate).
fn healthy(url: &str) -> bool {
    Command::new("curl")
        .args(["-skf", "--max-time", "2", "-o", "/dev/null", url])
        .stdin(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Writes containerd's, the CNI's, kubelet's and kube-proxy's configuration and the components'
/// kubeconfigs into `dir`.
fn write_configuration(
    plane: &ControlPlane,
    dir: &Path,
    built: &Path,
    kube_proxy_health: u16,
    kubelet_healthz: u16,
) {
    let d = |name: &str| display(&dir.join(name));
    let bin = built.join("bin");
    let ca = d("ca.crt");
    write(
        &dir.join("ca.crt"),
        &String::from_utf8_lossy(plane.ca_pem()),
    );
    for (who, file) in [
        (KUBELET, "kubelet.kubeconfig"),
        (KUBE_PROXY, "kube-proxy.kubeconfig"),
        (KUBE_SCHEDULER, "kube-scheduler.kubeconfig"),
    ] {
        std::fs::copy(plane.kubeconfig(who), dir.join(file))
            .unwrap_or_else(|e| panic!("cannot copy {}'s kubeconfig: {e}", who.user));
    }

    write(
        &dir.join("containerd.toml"),
        &format!(
            r#"version = 3
root = "{root}"
state = "{state}"
# Nothing of the machine's own containerd configuration, if it has one.
imports = []
# NRI and tracing would open sockets and files outside the node's directory; the other
# snapshotters are unused (the CRI uses overlayfs).
disabled_plugins = [
  "io.containerd.nri.v1.nri",
  "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing",
  "io.containerd.snapshotter.v1.blockfile",
  "io.containerd.snapshotter.v1.erofs",
]

[grpc]
  address = "{sock}"

[plugins]
  [plugins.'io.containerd.internal.v1.opt']
    path = "{opt}"
  [plugins.'io.containerd.image-verifier.v1.bindir']
    bin_dir = "{verifier}"
  [plugins.'io.containerd.transfer.v1.local']
    config_path = "{hosts}"
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = "overlayfs"
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = "{PAUSE_IMAGE}"
    [plugins.'io.containerd.cri.v1.images'.registry]
      config_path = "{hosts}"
  [plugins.'io.containerd.cri.v1.runtime']
    # The pods' network namespaces under the state directory, not the machine's /run/netns.
    netns_mounts_under_state_dir = true
    # Root here lacks CAP_SYS_RESOURCE, which lowering an oom_score_adj takes (kubelet asks
    # -998 for a sandbox): none goes below containerd's own.
    restrict_oom_score_adj = true
    enable_cdi = false
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = "runc"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = "{runc}"
          Root = "{runc_root}"
          SystemdCgroup = false
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ["{cni_bin}"]
      conf_dir = "{cni_conf}"
  [plugins.'io.containerd.grpc.v1.cri']
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
"#,
            root = d("containerd/root"),
            state = d("containerd/state"),
            sock = d("containerd/containerd.sock"),
            opt = d("containerd/opt"),
            verifier = d("containerd/image-verifier"),
            hosts = d("containerd/hosts"),
            runc = display(&bin.join("runc")),
            runc_root = d("runc"),
            cni_bin = display(&built.join("cni")),
            cni_conf = d("cni"),
        ),
    );
    // Every registry (`_default`) is a loopback port nothing serves: the images the tests use
    // are imported, and a pull of any other (an image a test names but never runs) fails at
    // once instead of leaving the machine.
    write(
        &dir.join("containerd/hosts/_default/hosts.toml"),
        "server = \"https://127.0.0.1:1\"\n",
    );

    // The bridge plugin without isGateway, which would turn on the host's ip_forward: the bridge
    // already carries NODE_IP (node.sh). host-local hands out the pod CIDR and the two routes;
    // no default route, no masquerading. portmap (hostPort) in nftables, as this node has no
    // iptables.
    write(
        &dir.join("cni/10-driftgate-e2e.conflist"),
        &serde_json::json!({
            "cniVersion": "1.0.0",
            "name": "driftgate-e2e",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": BRIDGE,
                    "isGateway": false,
                    "isDefaultGateway": false,
                    "ipMasq": false,
                    "hairpinMode": true,
                    "ipam": {
                        "type": "host-local",
                        "dataDir": d("cni-ipam"),
                        "ranges": [[{"subnet": POD_CIDR, "gateway": NODE_IP.to_string()}]],
                        "routes": [{"dst": SERVICE_CIDR}],
                    },
                },
                {"type": "portmap", "backend": "nftables", "capabilities": {"portMappings": true}},
            ],
        })
        .to_string(),
    );

    // Pods resolve nothing: there is no cluster DNS, and the machine's resolver is off the node.
    write(&dir.join("resolv.conf"), "");
    write(
        &dir.join("kubelet.yaml"),
        &format!(
            r#"apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This machine has cgroup v1, which kubelet 1.35 refuses unless told.
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /driftgate-e2e-node-{pid}
containerRuntimeEndpoint: unix://{sock}
# Serves on the bridge only (the API server's logs and exec), to the cluster CA's certificates.
address: {NODE_IP}
port: {kubelet_port}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: {kubelet_healthz}
authentication:
  anonymous: {{enabled: false}}
  webhook: {{enabled: false}}
  x509: {{clientCAFile: {ca}}}
authorization:
  mode: AlwaysAllow
resolvConf: {resolv}
podLogsDir: {pod_logs}
volumePluginDir: {volume_plugins}
failSwapOn: false
# The imported images cannot be pulled again: never collect them, and never evict for disk.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 1Mi
  nodefs.available: 1%
  imagefs.available: 1%
  nodefs.inodesFree: 1%
maxPods: 40
"#,
            pid = std::process::id(),
            sock = d("containerd/containerd.sock"),
            kubelet_port = free_port(),
            resolv = d("resolv.conf"),
            pod_logs = d("pod-logs"),
            volume_plugins = d("volume-plugins"),
        ),
    );
    write(
        &dir.join("kube-proxy.yaml"),
        &format!(
            r#"apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: nftables
clientConnection:
  kubeconfig: {kubeconfig}
hostnameOverride: {NODE_NAME}
clusterCIDR: {POD_CIDR}
# NodePorts on the bridge's address only, never on the machine's own interfaces.
nodePortAddresses: ["{NODE_IP}/32"]
healthzBindAddress: 127.0.0.1:{kube_proxy_health}
metricsBindAddress: 127.0.0.1:{metrics}
# 0: leave the machine's conntrack settings as they are.
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
  udpTimeout: 0s
  udpStreamTimeout: 0s
"#,
            kubeconfig = d("kube-proxy.kubeconfig"),
            metrics = free_port(),
        ),
    );
}

/// Forwards `NODE_IP:PORT` (the `kubernetes` Service's endpoint, PORT the API server's) to the
/// API server on loopback, for the pods, on a thread of its own for as long as the test binary
/// runs.
fn forward_to_api_server(plane: &ControlPlane) {
    let upstream: SocketAddr = plane
        .url()
        .trim_start_matches("https://")
        .parse()
        .expect("the API server's URL is https://IP:PORT");
    let listen = SocketAddr::from((NODE_IP, upstream.port()));
    let (bound_tx, bound_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a Tokio runtime builds");
        runtime.block_on(async move {
            let listener = match tokio::net::TcpListener::bind(listen).await {
                Ok(listener) => {
                    let _ = bound_tx.send(Ok(()));
                    listener
                }
                Err(e) => {
                    let _ = bound_tx.send(Err(e));
                    return;
                }
            };
            while let Ok((mut client, _)) = listener.accept().await {
                tokio::spawn(async move {
                    if let Ok(mut server) = tokio::net::TcpStream::connect(upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
            }
        });
    });
    bound_rx
        .recv()
        .expect("the forwarder reports")
        .unwrap_or_else(|e| panic!("cannot listen on {listen} for the pods: {e}"));
}

/// driftgate's image: `image/build.sh` (the static musl release binary on the distroless-like
/// base), its OCI layout turned into an archive that names it [`driftgate_image`]. The release
/// build has a target directory of its own beside the tests' (a cargo running the tests must
/// not wait for it, nor it for them). The archive is written into `scratch`.
fn build_driftgate_image(scratch: &Path) -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    // <target>/debug/deps/<binary>
    let target = exe
        .ancestors()
        .nth(3)
        .expect("the test binary is in <target>/debug/deps")
        .join("e2e-image");
    let out = target.join("out");
    eprintln!(
        "driftgate e2e: building driftgate's image (image/build.sh, release, musl) into {}",
        out.display()
    );
    let status = Command::new("bash")
        .arg(repo_path("image/build.sh"))
        .env("OUT", &out)
        .env("CARGO_TARGET_DIR", &target)
        .stdin(Stdio::null())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .status()
        .expect("bash runs image/build.sh");
    assert!(
        status.success(),
        "image/build.sh failed ({status}); it needs the x86_64-unknown-linux-musl target \
         (rustup target add x86_64-unknown-linux-musl), musl-tools and jq"
    );
    // The layout's index, with the name containerd gives an imported image.
    let layout = out.join("oci");
    let index_path = layout.join("index.json");
    let mut index: Value = serde_json::from_str(
        &std::fs::read_to_string(&index_path).expect("image/build.sh wrote index.json"),
    )
    .expect("index.json is JSON");
    let manifests = index["manifests"]
        .as_array_mut()
        .expect("index.json lists manifests");
    assert_eq!(manifests.len(), 1, "image/build.sh writes one manifest");
    manifests[0]["annotations"]["io.containerd.image.name"] = Value::from(driftgate_image());
    let named = scratch.join("driftgate-image");
    let copied = Command::new("cp")
        .arg("-a")
        .arg(&layout)
        .arg(&named)
        .status()
        .expect("cp runs");
    assert!(copied.success(), "cannot copy {}", layout.display());
    std::fs::write(named.join("index.json"), index.to_string()).expect("index.json is written");
    let archive = named.with_extension("tar");
    let tarred = Command::new("tar")
        .arg("-C")
        .arg(&named)
        .arg("-cf")
        .arg(&archive)
        .arg(".")
        .status()
        .expect("tar runs");
    assert!(tarred.success(), "cannot tar {}", named.display());
    let _ = std::fs::remove_dir_all(&named);
    archive
}
