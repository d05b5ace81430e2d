//! Argo CD's real application-controller and repo-server, built by
//! `tests/e2e/testenv/argocd/build.sh`, one of each per test binary, with the Redis both need
//! for their caches (`redis-server` from the machine, on loopback). The controller writes as
//! its service account, `argocd/argocd-application-controller` ([`ARGOCD`]), with a token the
//! API server issued for it, as it does in a cluster Argo CD's manifests install; RBAC binds
//! that account to cluster-admin, as Argo CD's own ClusterRole (`*` on `*`) does.
//!
//! The controller runs outside a Pod: `ARGOCD_FAKE_IN_CLUSTER=true` makes its in-cluster
//! destination (`https://kubernetes.default.svc`) use `KUBECONFIG`, Argo CD's own way of
//! running it locally. "Git" is a bare repository made with the git CLI in the scratch
//! directory, which the repo-server clones over `file://`: each [`ArgoCd::publish`] commits the
//! manifests to it, and the Application is asked to refresh, as Git's webhook would.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use super::control_plane::{ADMIN, Identity, control_plane, free_port};
use super::process::Guarded;
use super::testenv::run_build_script;

/// The namespace of Argo CD's components, settings and Applications.
pub const ARGOCD_NAMESPACE: &str = "argocd";

/// Another namespace Applications may live in (Argo CD's "applications in any namespace": the
/// controller's `--application-namespaces` and the `default` AppProject's `sourceNamespaces`
/// name it), so that a test can have its Applications judged by a driftgate of its own.
pub const APPS_NAMESPACE: &str = "resume-e2e-argocd";

/// The ServiceAccount the application-controller runs as in a cluster Argo CD installs.
const SERVICE_ACCOUNT: &str = "argocd-application-controller";

/// The application-controller, as the API server sees its token.
pub const ARGOCD: Identity = Identity {
    user: "system:serviceaccount:argocd:argocd-application-controller",
    groups: &["system:serviceaccounts", "system:serviceaccounts:argocd"],
};

/// How an Application's sync writes objects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgoApply {
    /// `kubectl apply` as Argo CD runs it by default: a create, then strategic-merge patches
    /// (managedFields operation `Update`).
    ClientSide,
    /// Server-side apply (managedFields operation `Apply`).
    ServerSide,
}

/// How a test's Application is made.
#[derive(Clone, Copy, Debug)]
pub struct AppOptions {
    pub apply: ArgoApply,
    /// `syncPolicy.retry.limit` (backoff 5 s, doubling): how often a failed sync is tried
    /// again. None: Argo CD's default for automated sync, 5.
    pub retry_limit: Option<u32>,
    /// The compare option `ServerSideDiff=true`: Argo CD compares by server-side dry runs.
    pub server_side_diff: bool,
    /// The Application's own namespace: [`ARGOCD_NAMESPACE`] or [`APPS_NAMESPACE`].
    pub app_namespace: &'static str,
    /// How the app-of-apps applies the Application itself: server-side, or client-side (Argo
    /// CD's default: the Application then carries the configuration applied, in
    /// `kubectl.kubernetes.io/last-applied-configuration`).
    pub applied: ArgoApply,
}

impl AppOptions {
    pub const DEFAULT: AppOptions = AppOptions {
        apply: ArgoApply::ClientSide,
        retry_limit: None,
        server_side_diff: false,
        app_namespace: ARGOCD_NAMESPACE,
        applied: ArgoApply::ServerSide,
    };
}

pub struct ArgoCd {
    /// Redis, the repo-server and the controller, in the order they start.
    processes: Mutex<Vec<Guarded>>,
    /// Each Application's namespace, by name (also its repository's), for refreshes.
    namespaces: Mutex<std::collections::HashMap<String, &'static str>>,
    git: PathBuf,
    log: PathBuf,
}

/// The one Argo CD of this test binary, started on first use.
pub fn argocd() -> &'static ArgoCd {
    static ARGOCD_CONTROLLER: OnceLock<ArgoCd> = OnceLock::new();
    ARGOCD_CONTROLLER.get_or_init(ArgoCd::start)
}

impl ArgoCd {
    fn start() -> ArgoCd {
        let dir = build();
        let plane = control_plane();
        install(&dir.join("crds"));
        let redis = format!("127.0.0.1:{}", free_port());
        let repo_server = format!("127.0.0.1:{}", free_port());
        let scratch = plane.dir().join("argocd");
        std::fs::create_dir_all(&scratch).expect("Argo CD's scratch directory is created");
        let processes = vec![
            start_redis(&redis, &scratch),
            start_repo_server(&dir, &redis, &repo_server, &scratch),
            start_controller(&dir, &redis, &repo_server, &scratch),
        ];
        let git = scratch.join("git");
        std::fs::create_dir_all(&git).expect("the Git directory is created");
        ArgoCd {
            processes: Mutex::new(processes),
            namespaces: Mutex::default(),
            git,
            log: scratch.join("argocd-application-controller.log"),
        }
    }

    /// The application-controller's log, for a failing test to show.
    pub fn log(&self) -> &Path {
        &self.log
    }

    /// Commits `manifests` (as `app/manifests.yaml`, replacing what was there) to the `main`
    /// branch of "Git" repository `name`, created on first use, and returns the commit's sha.
    pub fn publish(&self, name: &str, manifests: &str) -> String {
        self.publish_files(name, &[("app/manifests.yaml", manifests)])
    }

    /// Commits `files` (paths from the repository's root) as the whole of `app/` to the `main`
    /// branch of "Git" repository `name`, created on first use, and returns the commit's sha.
    pub fn publish_files(&self, name: &str, files: &[(&str, &str)]) -> String {
        let bare = self.repository(name);
        let work = self.git.join(format!("{name}.work"));
        if !work.exists() {
            git(
                &self.git,
                &["clone", "--quiet", &url(&bare), &path_str(&work)],
            );
            git(&work, &["checkout", "--quiet", "-B", "main"]);
        }
        // Whatever the last commit held (a backport's branch merged, say) is replaced.
        try_git(&work, &["pull", "--quiet", "--ff-only", "origin", "main"]);
        let _ = std::fs::remove_dir_all(work.join("app"));
        for (path, text) in files {
            let path = work.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).expect("the manifests are written");
        }
        git(&work, &["add", "--all"]);
        git(
            &work,
            &[
                "-c",
                "user.name=driftgate e2e",
                "-c",
                "user.email=e2e@driftgate.dev",
                "commit",
                "--quiet",
                "--allow-empty",
                "-m",
                "publish",
            ],
        );
        git(&work, &["push", "--quiet", "origin", "main"]);
        let sha = git(&work, &["rev-parse", "HEAD"]);
        self.refresh(name);
        sha
    }

    /// Application `name` syncing repository `name`'s `app/` into `namespace` of the cluster
    /// Argo CD runs in, automatically, pruning what leaves Git and undoing drift (selfHeal).
    /// `apply` says how: client-side apply, Argo CD's default, or server-side apply (the
    /// `ServerSideApply=true` sync option). Applied as an app-of-apps Application applies it
    /// from Git ([`apply_as_argocd`]): the example policy's `gitops-argocd` refuses anyone else.
    pub fn application(&self, name: &str, namespace: &str, apply: ArgoApply) {
        self.application_with(
            name,
            namespace,
            AppOptions {
                apply,
                ..AppOptions::DEFAULT
            },
        );
    }

    /// [`ArgoCd::application`] with `options`.
    pub fn application_with(&self, name: &str, namespace: &str, options: AppOptions) {
        self.assert_running();
        let repo = url(&self.repository(name));
        let sync_options = match options.apply {
            ArgoApply::ClientSide => "[]",
            ArgoApply::ServerSide => "[ServerSideApply=true]",
        };
        let annotations = if options.server_side_diff {
            "\n  annotations: {argocd.argoproj.io/compare-options: ServerSideDiff=true}"
        } else {
            ""
        };
        let retry = match options.retry_limit {
            Some(limit) => format!(
                "\n    retry:\n      limit: {limit}\n      backoff: {{duration: 5s, factor: 2, maxDuration: 1m}}"
            ),
            None => String::new(),
        };
        let app_namespace = options.app_namespace;
        self.namespaces
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name.to_owned(), app_namespace);
        let apply = match options.applied {
            ArgoApply::ServerSide => apply_as_argocd,
            ArgoApply::ClientSide => apply_as_argocd_client_side,
        };
        apply(&format!(
            r#"apiVersion: argoproj.io/v1alpha1
kind: Application
metadata:
  name: {name}
  namespace: {app_namespace}{annotations}
spec:
  project: default
  source:
    repoURL: {repo}
    targetRevision: main
    path: app
  destination:
    server: https://kubernetes.default.svc
    namespace: {namespace}
  syncPolicy:
    automated:
      prune: true
      selfHeal: true
    syncOptions: {sync_options}{retry}
"#
        ));
    }

    /// A checkout of repository `name` of the on-call's own (a fresh clone, with her Git
    /// identity), as `driftgate backport --repo` takes it.
    pub fn checkout(&self, name: &str, dir: &Path) -> PathBuf {
        let bare = self.repository(name);
        let _ = std::fs::remove_dir_all(dir);
        git(
            &self.git,
            &["clone", "--quiet", &url(&bare), &path_str(dir)],
        );
        git(dir, &["config", "user.name", "Alice Oncall"]);
        git(dir, &["config", "user.email", "alice@example.test"]);
        dir.to_owned()
    }

    /// Merges a checkout's current branch into `main` of its repository (the pull request
    /// merged) and asks Application `name` to refresh; the commit's sha.
    pub fn merge(&self, name: &str, checkout: &Path) -> String {
        git(checkout, &["push", "--quiet", "origin", "HEAD:main"]);
        let sha = git(checkout, &["rev-parse", "HEAD"]);
        self.refresh(name);
        sha
    }

    /// Application `name` as the admin reads it, as JSON.
    pub fn application_json(&self, name: &str) -> serde_json::Value {
        let out = control_plane()
            .kubectl(
                ADMIN,
                &[
                    "get",
                    "application",
                    name,
                    "-n",
                    self.namespace_of(name),
                    "-o",
                    "json",
                ],
            )
            .ok();
        serde_json::from_str(&out.stdout).expect("kubectl prints JSON")
    }

    /// Asks the controller to look at Git now rather than at its next resync, as the
    /// notification of a Git webhook does (Argo CD's `refresh` annotation).
    fn refresh(&self, name: &str) {
        control_plane().kubectl(
            ADMIN,
            &[
                "annotate",
                "--overwrite",
                "application",
                name,
                "-n",
                self.namespace_of(name),
                "argocd.argoproj.io/refresh=normal",
            ],
        );
    }

    /// The namespace Application `name` was made in ([`ARGOCD_NAMESPACE`] unless made
    /// elsewhere).
    pub fn namespace_of(&self, name: &str) -> &'static str {
        self.namespaces
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .copied()
            .unwrap_or(ARGOCD_NAMESPACE)
    }

    /// The bare repository `name`, made on first use.
    fn repository(&self, name: &str) -> PathBuf {
        let bare = self.git.join(format!("{name}.git"));
        if !bare.exists() {
            git(
                &self.git,
                &["init", "--quiet", "--bare", "-b", "main", &path_str(&bare)],
            );
        }
        bare
    }

    fn assert_running(&self) {
        let mut processes = self.processes.lock().unwrap_or_else(|e| e.into_inner());
        for process in processes.iter_mut() {
            process.assert_running();
        }
    }
}

/// Argo CD's CRDs, its namespace, the settings its components read at start (argocd-cm,
/// argocd-rbac-cm and argocd-secret, which they find by the `part-of: argocd` label), the
/// controller's account, and the `default` AppProject (which argocd-server would create).
fn install(crds: &Path) {
    let plane = control_plane();
    plane
        .kubectl(ADMIN, &["apply", "--server-side", "-f", &path_str(crds)])
        .ok();
    // `kubectl wait` fails at once on a CRD that has no conditions yet.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let wait = plane.kubectl(
            ADMIN,
            &[
                "wait",
                "--for=condition=Established",
                "--timeout=60s",
                "crd/applications.argoproj.io",
                "crd/appprojects.argoproj.io",
            ],
        );
        if wait.success() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "Argo CD's CRDs are not established after 60 s: {}",
            wait.stderr
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    plane.apply(ADMIN, &settings());
    // The `default` AppProject, which argocd-server creates at its first start (before
    // driftgate, in a cluster): applied from Git here, as the shared driftgate may serve already.
    apply_as_argocd(&format!(
        r#"apiVersion: argoproj.io/v1alpha1
kind: AppProject
metadata:
  name: default
  namespace: {ARGOCD_NAMESPACE}
spec:
  sourceRepos: ["*"]
  sourceNamespaces: ["{APPS_NAMESPACE}"]
  destinations: [{{namespace: "*", server: "*"}}]
  clusterResourceWhitelist: [{{group: "*", kind: "*"}}]
"#
    ));
}

/// `kubectl apply --server-side` of `manifest` as an app-of-apps Application applies Argo CD's
/// objects from Git: as the application-controller ([`ARGOCD`], through a client certificate
/// of its username, which its ServiceAccount's RBAC binding matches), with its field manager
/// `argocd-controller`. The RBAC binding may take a moment to reach the authorizer after
/// [`install`] made it, so a refusal by RBAC is retried for a few seconds.
pub fn apply_as_argocd(manifest: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let out = control_plane().kubectl_with_stdin(
            ARGOCD,
            &[
                "apply",
                "--server-side",
                "--force-conflicts",
                "--field-manager=argocd-controller",
                "-f",
                "-",
            ],
            Some(manifest),
        );
        if out.success() {
            return;
        }
        let by_rbac = out.stderr.contains("forbidden") && !out.stderr.contains("driftgate");
        if !by_rbac || std::time::Instant::now() > deadline {
            out.ok();
            return;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// [`apply_as_argocd`] as an app-of-apps with Argo CD's default sync applies: `kubectl apply`
/// client-side, field manager `argocd-controller`, which keeps the configuration applied in the
/// object's `kubectl.kubernetes.io/last-applied-configuration`.
pub fn apply_as_argocd_client_side(manifest: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let out = control_plane().kubectl_with_stdin(
            ARGOCD,
            &["apply", "--field-manager=argocd-controller", "-f", "-"],
            Some(manifest),
        );
        if out.success() {
            return;
        }
        let by_rbac = out.stderr.contains("forbidden") && !out.stderr.contains("driftgate");
        if !by_rbac || std::time::Instant::now() > deadline {
            out.ok();
            return;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn settings() -> String {
    let secret_key = random_hex(32);
    format!(
        r#"apiVersion: v1
kind: Namespace
metadata: {{name: {ARGOCD_NAMESPACE}}}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: argocd-cm
  namespace: {ARGOCD_NAMESPACE}
  labels: {{app.kubernetes.io/name: argocd-cm, app.kubernetes.io/part-of: argocd}}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: argocd-rbac-cm
  namespace: {ARGOCD_NAMESPACE}
  labels: {{app.kubernetes.io/name: argocd-rbac-cm, app.kubernetes.io/part-of: argocd}}
---
apiVersion: v1
kind: Secret
metadata:
  name: argocd-secret
  namespace: {ARGOCD_NAMESPACE}
  labels: {{app.kubernetes.io/name: argocd-secret, app.kubernetes.io/part-of: argocd}}
stringData:
  server.secretkey: "{secret_key}"
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: {SERVICE_ACCOUNT}
  namespace: {ARGOCD_NAMESPACE}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: driftgate-e2e-argocd-application-controller}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}}
subjects:
  - {{kind: ServiceAccount, name: {SERVICE_ACCOUNT}, namespace: {ARGOCD_NAMESPACE}}}
"#
    )
}

/// `bytes` random bytes from the kernel, in hex: argocd-secret's key signs nothing the tests
/// look at, but a fixed one would be a key everyone knows.
fn random_hex(bytes: usize) -> String {
    use std::io::Read;
    let mut buffer = vec![0u8; bytes];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buffer))
        .expect("/dev/urandom is readable");
    buffer.iter().map(|b| format!("{b:02x}")).collect()
}

fn start_redis(address: &str, scratch: &Path) -> Guarded {
    let port = address.rsplit(':').next().unwrap();
    let program = which("redis-server").unwrap_or_else(|| {
        panic!("driftgate e2e: Argo CD needs redis-server (apt-get install redis-server)")
    });
    let mut command = Command::new(program);
    command
        .args(["--bind", "127.0.0.1", "--port", port])
        .args(["--save", "", "--appendonly", "no", "--dir"])
        .arg(scratch);
    let process = Guarded::spawn(
        "redis-server",
        &command,
        &scratch.join("redis.log"),
        None,
        Duration::from_secs(2),
    );
    wait_listening(address, "redis-server", process)
}

/// The repo-server on loopback, without TLS (the controller is its only client). Its clones,
/// GnuPG and known-hosts directories and its askpass socket go to the scratch directory, not
/// to `/tmp` and `/app/config` as in its image.
fn start_repo_server(dir: &Path, redis: &str, address: &str, scratch: &Path) -> Guarded {
    let (host, port) = address.rsplit_once(':').unwrap();
    let tmp = scratch.join("repo-server-tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let socket_dir = short_socket_dir();
    let mut command = Command::new(dir.join("argocd-repo-server"));
    let path = match std::env::var_os("PATH") {
        Some(path) => {
            let mut dirs = vec![kustomize_bin(scratch)];
            dirs.extend(std::env::split_paths(&path));
            std::env::join_paths(dirs).expect("a PATH joins")
        }
        None => kustomize_bin(scratch).into_os_string(),
    };
    command
        .env("PATH", path)
        .env("TMPDIR", &tmp)
        .env("ARGOCD_ASK_PASS_SOCK", socket_dir.join("askpass.sock"))
        .env("ARGOCD_GPG_ENABLED", "false")
        .env("ARGOCD_GNUPGHOME", tmp.join("gpg"))
        .env("ARGOCD_SSH_DATA_PATH", tmp.join("ssh"))
        .env("ARGOCD_TLS_DATA_PATH", tmp.join("tls"))
        .args(["--address", host, "--port", port, "--disable-tls"])
        .args(["--redis", redis, "--logformat", "text"])
        .args(["--metrics-address", "127.0.0.1"])
        .arg(format!("--metrics-port={}", free_port()));
    let process = Guarded::spawn(
        "argocd-repo-server",
        &command,
        &scratch.join("argocd-repo-server.log"),
        Some(&socket_dir),
        Duration::from_secs(5),
    );
    wait_listening(address, "argocd-repo-server", process)
}

/// A directory holding `kustomize` for the repo-server, which runs `kustomize build DIR` for a
/// Kustomize source (its image ships the binary): kubectl's `kustomize` subcommand, the same
/// sigs.k8s.io/kustomize library kubectl embeds, so that Kustomize sources render
/// for real without another build.
fn kustomize_bin(scratch: &Path) -> PathBuf {
    let bin = scratch.join("bin");
    let script = bin.join("kustomize");
    if !script.exists() {
        std::fs::create_dir_all(&bin).expect("the repo-server's bin directory is created");
        let kubectl = super::testenv::binaries().kubectl();
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\n# kustomize for Argo CD's repo-server: kubectl's embedded kustomize.\ncase \"$1\" in\n  build) shift; exec '{}' kustomize \"$@\" ;;\n  version) echo v5.7.1 ;;\n  *) echo \"kustomize $1: not provided to the e2e repo-server\" >&2; exit 1 ;;\nesac\n",
                kubectl.display()
            ),
        )
        .expect("the kustomize script is written");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))
            .expect("the kustomize script is made executable");
    }
    bin
}

/// A directory for the askpass socket, one per test binary, whose path stays under the 108
/// bytes a socket address holds (the scratch directory's may not); removed with the
/// repo-server.
fn short_socket_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("driftgate-e2e-argocd-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("the askpass socket's directory is created");
    dir
}

/// The application-controller, reconciling Applications every 5 s (its default is 3 min)
/// and able to self-heal at once.
fn start_controller(dir: &Path, redis: &str, repo_server: &str, scratch: &Path) -> Guarded {
    let mut command = Command::new(dir.join("argocd-application-controller"));
    command
        .env("KUBECONFIG", service_account_kubeconfig(scratch))
        .env("ARGOCD_FAKE_IN_CLUSTER", "true")
        .args(["--repo-server", repo_server, "--repo-server-plaintext"])
        .args(["--redis", redis, "--logformat", "text"])
        .args(["--app-resync", "5", "--app-resync-jitter", "0"])
        .args(["--application-namespaces", APPS_NAMESPACE])
        .args(["--self-heal-timeout-seconds", "0"])
        .arg(format!("--metrics-port={}", free_port()));
    Guarded::spawn(
        "argocd-application-controller",
        &command,
        &scratch.join("argocd-application-controller.log"),
        None,
        Duration::from_secs(5),
    )
}

/// Writes a kubeconfig holding a token the API server issues for [`SERVICE_ACCOUNT`]
/// (TokenRequest, through `kubectl create token`), in context namespace [`ARGOCD_NAMESPACE`]
/// (where the controller looks for its settings and Applications); returns its path.
fn service_account_kubeconfig(scratch: &Path) -> PathBuf {
    let plane = control_plane();
    assert_eq!(
        ARGOCD.user,
        format!("system:serviceaccount:{ARGOCD_NAMESPACE}:{SERVICE_ACCOUNT}"),
        "ARGOCD names the controller's account"
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
                ARGOCD_NAMESPACE,
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
    context: {{cluster: e2e, user: {SERVICE_ACCOUNT}, namespace: {ARGOCD_NAMESPACE}}}
current-context: e2e
"#,
        url = plane.url(),
        ca = plane.dir().join("ca.crt").display(),
        token = token.trim(),
    );
    let path = scratch.join("argocd-application-controller.kubeconfig");
    std::fs::write(&path, kubeconfig).expect("the controller's kubeconfig is written");
    path
}

/// Waits until `process` accepts TCP connections on `address` (at most 30 s), failing early
/// with its log if it exits.
fn wait_listening(address: &str, what: &str, mut process: Guarded) -> Guarded {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(address).is_err() {
        process.assert_running();
        assert!(
            std::time::Instant::now() < deadline,
            "{what} is not listening on {address} after 30 s; log:\n{}",
            process.log_tail(30)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    process
}

/// Runs git in `dir` when it may fail (a pull from a repository with no commit yet).
fn try_git(dir: &Path, args: &[&str]) -> bool {
    Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .stdin(Stdio::null())
        .output()
        .is_ok_and(|out| out.status.success())
}

/// Runs git in `dir`, which must succeed; returns its trimmed stdout. The developer's git
/// configuration (signing, hooks, default branch) is left out.
fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("git cannot run (is it installed?): {e}"));
    assert!(
        out.status.success(),
        "git {args:?} in {} failed: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn url(bare: &Path) -> String {
    format!("file://{}", bare.display())
}

fn path_str(path: &Path) -> String {
    path.to_str().expect("a UTF-8 path").to_owned()
}

fn which(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}

/// Runs `build.sh` for Argo CD and returns its directory.
fn build() -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/e2e/testenv/argocd/build.sh");
    run_build_script(
        &script,
        "driftgate e2e: Argo CD needs Go >= 1.26 to build: install it from go.dev",
    )
}
