//! Flux's real kustomize-controller, built by `tests/e2e/testenv/flux/build.sh`, one per test
//! binary, writing as its service account (the example policy's `flux` controller): a real
//! ServiceAccount `flux-system/kustomize-controller` and a token the API server issued for it,
//! so the userInfo it sends (username, uid, groups, `extra`'s credential id) is a real Flux's.
//! RBAC binds that username to cluster-admin (see `control_plane.rs`), which a token's user
//! matches as [`FLUX`]'s client certificate does.
//!
//! "Git" without a Git server: each [`Flux::publish`] writes the manifests into a gzip tarball
//! served from loopback by [`ArtifactServer`], and sets an `ExternalArtifact`'s status to point
//! at it (url, sha256 digest, revision), as a source controller would. The feature gate
//! `ExternalArtifact=true` lets a Kustomization take it as its source. Both objects live in
//! `flux-system`; the manifests name the namespaces they go to. The example policy's `gitops`
//! guards Kustomizations there as objects (ExternalArtifacts it leaves alone), so a
//! Kustomization is applied as Flux's flux-system Kustomization applies one from Git: by
//! [`FLUX`], field manager `kustomize-controller`.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use sha2::{Digest, Sha256};

use super::control_plane::{ADMIN, FLUX, control_plane, free_port};
use super::process::Guarded;
use super::testenv::run_build_script;

/// The namespace of the Kustomizations and their sources.
pub const FLUX_NAMESPACE: &str = "flux-system";

pub struct Flux {
    process: Mutex<Guarded>,
    artifacts: ArtifactServer,
    log: PathBuf,
    revisions: AtomicU32,
    /// The controller's built directory and kubeconfig, for [`Flux::start_own`].
    dir: PathBuf,
    kubeconfig: PathBuf,
}

/// The label that gives a Kustomization to a kustomize-controller of a test's own
/// ([`Flux::start_own`]); the shared controller leaves such Kustomizations alone, as Flux's
/// sharding does (`--watch-label-selector`).
pub const OWN_CONTROLLER_LABEL: &str = "e2e.driftgate.dev/controller";

/// A kustomize-controller of one test's own: the same binary and identity as the shared one,
/// reconciling only the Kustomizations labelled for it, so the test may kill it.
pub struct OwnController {
    pub process: Guarded,
    pub log: PathBuf,
}

/// The one kustomize-controller of this test binary, started on first use.
pub fn flux() -> &'static Flux {
    static FLUX_CONTROLLER: OnceLock<Flux> = OnceLock::new();
    FLUX_CONTROLLER.get_or_init(Flux::start)
}

impl Flux {
    fn start() -> Flux {
        let dir = build();
        let plane = control_plane();
        let crds = dir.join("crds");
        plane
            .kubectl(
                ADMIN,
                &[
                    "apply",
                    "--server-side",
                    "-f",
                    crds.to_str().expect("a UTF-8 path"),
                ],
            )
            .ok();
        plane
            .kubectl(
                ADMIN,
                &[
                    "wait",
                    "--for=condition=Established",
                    "--timeout=60s",
                    "crd/kustomizations.kustomize.toolkit.fluxcd.io",
                    "crd/externalartifacts.source.toolkit.fluxcd.io",
                ],
            )
            .ok();
        plane
            .apply(
                ADMIN,
                &format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {FLUX_NAMESPACE}\n"),
            )
            .ok();
        let log = plane.dir().join("kustomize-controller.log");
        let kubeconfig = service_account_kubeconfig();
        let command = controller_command(&dir, &kubeconfig, &format!("!{OWN_CONTROLLER_LABEL}"));
        let process = Guarded::spawn(
            "kustomize-controller",
            &command,
            &log,
            None,
            Duration::from_secs(5),
        );
        Flux {
            process: Mutex::new(process),
            artifacts: ArtifactServer::start(plane.dir().join("artifacts")),
            log,
            revisions: AtomicU32::new(0),
            dir,
            kubeconfig,
        }
    }

    /// Starts a second kustomize-controller, reconciling only the Kustomizations labelled
    /// [`OWN_CONTROLLER_LABEL`]`=name` (see [`Flux::kustomize_own`]).
    pub fn start_own(&self, name: &str) -> OwnController {
        let log = control_plane()
            .dir()
            .join(format!("kustomize-controller-{name}.log"));
        let command = controller_command(
            &self.dir,
            &self.kubeconfig,
            &format!("{OWN_CONTROLLER_LABEL}={name}"),
        );
        let process = Guarded::spawn(
            &format!("kustomize-controller ({name})"),
            &command,
            &log,
            None,
            Duration::from_secs(5),
        );
        OwnController { process, log }
    }

    /// The controller's log, for a failing test to show.
    pub fn log(&self) -> &Path {
        &self.log
    }

    /// Publishes `manifests` as the next revision of source `name` (an ExternalArtifact in
    /// `flux-system`, created on first use), and returns the revision.
    pub fn publish(&self, name: &str, manifests: &str) -> String {
        let n = self.revisions.fetch_add(1, Ordering::Relaxed) + 1;
        let revision = format!("main@sha1:{n:040x}");
        let file = format!("{name}-{n}.tar.gz");
        let digest = self.artifacts.tarball(&file, manifests);
        let plane = control_plane();
        plane
            .apply(
                ADMIN,
                &format!(
                    "apiVersion: source.toolkit.fluxcd.io/v1\nkind: ExternalArtifact\nmetadata:\n  name: {name}\n  namespace: {FLUX_NAMESPACE}\nspec: {{}}\n"
                ),
            )
            .ok();
        let now = jiff::Timestamp::now().round(jiff::Unit::Second).unwrap();
        let status = serde_json::json!({"status": {
            "artifact": {
                "path": format!("externalartifact/{FLUX_NAMESPACE}/{name}/{file}"),
                "url": format!("{}/{file}", self.artifacts.url),
                "revision": revision,
                "digest": digest,
                "lastUpdateTime": now.to_string(),
            },
            "conditions": [{
                "type": "Ready", "status": "True", "reason": "Succeeded",
                "message": format!("stored artifact for revision '{revision}'"),
                "lastTransitionTime": now.to_string(),
            }],
        }});
        plane
            .kubectl(
                ADMIN,
                &[
                    "patch",
                    "externalartifact",
                    name,
                    "-n",
                    FLUX_NAMESPACE,
                    "--subresource=status",
                    "--type=merge",
                    "-p",
                    &status.to_string(),
                ],
            )
            .ok();
        revision
    }

    /// A Kustomization applying source `name` every `interval` (`5s`), pruning what leaves it.
    pub fn kustomize(&self, name: &str, interval: &str) {
        assert!(
            !self.process_exited(),
            "kustomize-controller exited: see {}",
            self.log.display()
        );
        apply_kustomization(name, interval, "{}");
    }

    /// [`Flux::kustomize`] for the controller [`Flux::start_own`] started as `controller`.
    pub fn kustomize_own(&self, name: &str, interval: &str, controller: &str) {
        apply_kustomization(
            name,
            interval,
            &format!("{{{OWN_CONTROLLER_LABEL}: {controller}}}"),
        );
    }

    /// Kustomization `name` as the API server has it (JSON).
    pub fn kustomization(&self, name: &str) -> serde_json::Value {
        let out = control_plane()
            .kubectl(
                ADMIN,
                &[
                    "get",
                    "kustomization",
                    name,
                    "-n",
                    FLUX_NAMESPACE,
                    "-o",
                    "json",
                ],
            )
            .ok();
        serde_json::from_str(&out.stdout).expect("kubectl prints JSON")
    }

    fn process_exited(&self) -> bool {
        let mut process = self.process.lock().unwrap_or_else(|e| e.into_inner());
        process.exited().is_some()
    }
}

/// kustomize-controller as the harness runs it, watching the Kustomizations that
/// `label_selector` selects; free ports for its metrics and health endpoints.
fn controller_command(dir: &Path, kubeconfig: &Path, label_selector: &str) -> Command {
    let mut command = Command::new(dir.join("kustomize-controller"));
    command
        .env("KUBECONFIG", kubeconfig)
        .env("RUNTIME_NAMESPACE", FLUX_NAMESPACE)
        .args([
            "--watch-all-namespaces=true",
            "--enable-leader-election=false",
            "--feature-gates=ExternalArtifact=true",
            "--log-level=debug",
            "--log-encoding=console",
        ])
        .arg(format!("--watch-label-selector={label_selector}"))
        .arg(format!("--metrics-addr=127.0.0.1:{}", free_port()))
        .arg(format!("--health-addr=127.0.0.1:{}", free_port()));
    command
}

/// A Kustomization of source `name` every `interval`, pruning, with `labels` (a YAML map),
/// applied as Flux applies the GitOps objects from Git.
fn apply_kustomization(name: &str, interval: &str, labels: &str) {
    apply_as_flux(&format!(
        r#"apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata:
  name: {name}
  namespace: {FLUX_NAMESPACE}
  labels: {labels}
spec:
  interval: {interval}
  retryInterval: {interval}
  prune: true
  path: ./
  sourceRef:
    kind: ExternalArtifact
    name: {name}
"#
    ));
}

/// `kubectl apply --server-side` of `manifest` as the flux-system Kustomization applies the
/// GitOps objects from Git: as [`FLUX`], with kustomize-controller's field manager.
pub fn apply_as_flux(manifest: &str) {
    control_plane()
        .kubectl_with_stdin(
            FLUX,
            &[
                "apply",
                "--server-side",
                "--force-conflicts",
                "--field-manager=kustomize-controller",
                "-f",
                "-",
            ],
            Some(manifest),
        )
        .ok();
}

/// The ServiceAccount kustomize-controller runs as in a cluster Flux installs.
const SERVICE_ACCOUNT: &str = "kustomize-controller";

/// Creates [`SERVICE_ACCOUNT`] in [`FLUX_NAMESPACE`] and writes a kubeconfig holding a token
/// the API server issues for it (TokenRequest, through `kubectl create token`), whose user is
/// [`FLUX`]'s username; returns the kubeconfig's path.
fn service_account_kubeconfig() -> PathBuf {
    let plane = control_plane();
    plane
        .apply(
            ADMIN,
            &format!(
                "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: {SERVICE_ACCOUNT}\n  namespace: {FLUX_NAMESPACE}\n"
            ),
        )
        .ok();
    assert_eq!(
        FLUX.user,
        format!("system:serviceaccount:{FLUX_NAMESPACE}:{SERVICE_ACCOUNT}"),
        "the RBAC binding names FLUX's user"
    );
    // Longer than any test run; the controller does not refresh a token from a kubeconfig.
    let token = plane
        .kubectl(
            ADMIN,
            &[
                "create",
                "token",
                SERVICE_ACCOUNT,
                "-n",
                FLUX_NAMESPACE,
                "--duration=24h",
            ],
        )
        .ok()
        .stdout;
    let kubeconfig = format!(
        r#"apiVersion: v1
kind: Config
clusters:
  - name: e2e
    cluster:
      server: {url}
      certificate-authority: {ca}
users:
  - name: {SERVICE_ACCOUNT}
    user:
      token: {token}
contexts:
  - name: e2e
    context: {{cluster: e2e, user: {SERVICE_ACCOUNT}}}
current-context: e2e
"#,
        url = plane.url(),
        ca = plane.dir().join("ca.crt").display(),
        token = token.trim(),
    );
    let path = plane.dir().join("kustomize-controller.kubeconfig");
    std::fs::write(&path, kubeconfig).expect("the controller's kubeconfig is written");
    path
}

/// Runs `build.sh` for kustomize-controller and returns its directory.
fn build() -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/e2e/testenv/flux/build.sh");
    run_build_script(
        &script,
        "driftgate e2e: kustomize-controller needs Go >= 1.26 to build: install it from go.dev",
    )
}

/// Files from one directory over plain HTTP on loopback, as source-controller serves artifacts.
struct ArtifactServer {
    dir: PathBuf,
    url: String,
}

impl ArtifactServer {
    fn start(dir: PathBuf) -> ArtifactServer {
        std::fs::create_dir_all(&dir).expect("the artifacts directory is created");
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let url = format!("http://{}", listener.local_addr().unwrap());
        let served = dir.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let served = served.clone();
                std::thread::spawn(move || serve_one(stream, &served));
            }
        });
        ArtifactServer { dir, url }
    }

    /// Writes `manifests` as `file` (a gzip tarball holding `manifests.yaml`) and returns its
    /// `sha256:` digest.
    fn tarball(&self, file: &str, manifests: &str) -> String {
        let source = self.dir.join(format!("{file}.src"));
        std::fs::create_dir_all(&source).unwrap();
        std::fs::write(source.join("manifests.yaml"), manifests).unwrap();
        let status = Command::new("tar")
            .arg("-czf")
            .arg(self.dir.join(file))
            .arg("-C")
            .arg(&source)
            .arg("manifests.yaml")
            .status()
            .expect("tar runs");
        assert!(status.success(), "tar failed: {status}");
        let bytes = std::fs::read(self.dir.join(file)).unwrap();
        format!("sha256:{:x}", Sha256::digest(&bytes))
    }
}

fn serve_one(mut stream: TcpStream, dir: &Path) {
    let mut reader = BufReader::new(stream.try_clone().expect("the stream clones"));
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).is_err() {
        return;
    }
    // Headers are read and ignored; the file name is the path's last segment.
    let mut header = String::new();
    while reader.read_line(&mut header).is_ok_and(|n| n > 2) {
        header.clear();
    }
    let path = request_line.split_whitespace().nth(1).unwrap_or("/");
    let name = path.rsplit('/').next().unwrap_or("");
    let response = match std::fs::read(dir.join(name)) {
        Ok(body) if !name.is_empty() && !name.starts_with('.') => {
            let mut head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/gzip\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            )
            .into_bytes();
            head.extend(body);
            head
        }
        _ => b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_vec(),
    };
    let _ = stream.write_all(&response);
}
