//! The binary works as a kubectl plugin: installed as `kubectl-driftgate` on the PATH,
//! `kubectl driftgate ...` runs it with the person's kubeconfig.

use std::process::Command;

use serde_json::Value;

use crate::harness::control_plane::free_port;
use crate::harness::testenv::binaries;
use crate::harness::{ADMIN, ALICE, chart, control_plane};

/// A directory (`dir`, under the temp dir) holding the binary as `kubectl-driftgate`, as a
/// krew install leaves it, and a PATH that starts with it.
fn path_with_plugin(dir: &str) -> (std::path::PathBuf, String) {
    let bin = std::env::temp_dir().join(format!("{dir}-{}", std::process::id()));
    std::fs::create_dir_all(&bin).unwrap();
    let plugin = bin.join("kubectl-driftgate");
    let _ = std::fs::remove_file(&plugin);
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_driftgate"), &plugin).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    (bin, path)
}

#[test]
fn kubectl_driftgate_runs_the_binary_as_a_plugin() {
    let plane = control_plane();
    let (bin, path) = path_with_plugin("driftgate-plugin");
    let run = |args: &[&str]| {
        Command::new(binaries().kubectl())
            .args(args)
            .env("PATH", &path)
            .env("KUBECONFIG", plane.kubeconfig(ALICE))
            .env("KUBECACHEDIR", plane.dir().join("kube-cache-plugin"))
            .output()
            .expect("kubectl runs")
    };
    let listed = run(&["plugin", "list"]);
    let listed_text = String::from_utf8_lossy(&listed.stdout);
    assert!(listed_text.contains("kubectl-driftgate"), "{listed_text}");
    // A real command through kubectl: the backlog of a namespace with no records.
    let backlog = run(&["driftgate", "backlog", "-n", "plugin-empty"]);
    assert!(
        backlog.status.success(),
        "{}",
        String::from_utf8_lossy(&backlog.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&backlog.stdout),
        "Nothing to backport.\n"
    );
    std::fs::remove_dir_all(&bin).unwrap();
}

/// `kubectl driftgate version` reads the server's version from the chart's own Deployment, and
/// says so in one line, exiting 0, when there is none or the API server does not answer.
#[test]
fn kubectl_driftgate_version_reads_the_installed_deployment() {
    let plane = control_plane();
    let namespace = "plugin-version";
    let mut deployment = chart::render(&[])
        .into_iter()
        .find(|o| o["kind"] == "Deployment")
        .expect("the chart renders a Deployment");
    deployment["metadata"]["namespace"] = Value::from(namespace);
    plane
        .kubectl(ADMIN, &["create", "namespace", namespace])
        .ok();
    plane.apply(ADMIN, &deployment.to_string()).ok();
    let (bin, path) = path_with_plugin("driftgate-plugin-v");
    let run = |kubeconfig: &std::path::Path, args: &[&str]| {
        Command::new(binaries().kubectl())
            .args(["driftgate", "version"])
            .args(args)
            .env("PATH", &path)
            .env("KUBECONFIG", kubeconfig)
            .output()
            .expect("kubectl runs")
    };

    let out = run(&plane.kubeconfig(ALICE), &["-n", namespace, "-o", "json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["client"]["version"], env!("CARGO_PKG_VERSION"));
    let container = &deployment["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "driftgate")
        .unwrap()
        .clone();
    assert_eq!(
        report["server"],
        serde_json::json!([{
            "namespace": namespace,
            "deployment": deployment["metadata"]["name"],
            "version": deployment["metadata"]["labels"]["app.kubernetes.io/version"],
            "image": container["image"],
            "readyReplicas": 0,
            "replicas": deployment["spec"]["replicas"],
        }]),
        "{report}"
    );

    let out = run(&plane.kubeconfig(ALICE), &["-n", "plugin-version-none"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.ends_with(
            "Note: no driftgate Deployment in namespace plugin-version-none \
             (installed elsewhere? pass -n NAMESPACE)\n"
        ),
        "{text}"
    );

    // Nothing listens on the port: the client part and a one-line note, exit 0.
    let dead = bin.join("dead-kubeconfig");
    let kubeconfig = std::fs::read_to_string(plane.kubeconfig(ALICE)).unwrap();
    let dead_url = format!("https://127.0.0.1:{}", free_port());
    std::fs::write(&dead, kubeconfig.replace(plane.url(), &dead_url)).unwrap();
    let out = run(&dead, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(lines[0].starts_with("Client Version: "), "{text}");
    assert!(
        lines[1].starts_with(&format!(
            "Note: server version unavailable: cannot list Deployments in namespace \
             driftgate-system at {dead_url}"
        )),
        "{text}"
    );
    std::fs::remove_dir_all(&bin).unwrap();
}
