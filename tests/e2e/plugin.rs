//! The binary works as a kubectl plugin: installed as `kubectl-driftgate` on the PATH,
//! `kubectl driftgate ...` runs it with the person's kubeconfig.

use std::process::Command;

use crate::harness::testenv::binaries;
use crate::harness::{ALICE, control_plane};

#[test]
fn kubectl_driftgate_runs_the_binary_as_a_plugin() {
    let plane = control_plane();
    let bin = std::env::temp_dir().join(format!("driftgate-plugin-{}", std::process::id()));
    std::fs::create_dir_all(&bin).unwrap();
    let plugin = bin.join("kubectl-driftgate");
    let _ = std::fs::remove_file(&plugin);
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_driftgate"), &plugin).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
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
