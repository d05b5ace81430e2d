//! The binary works as a kubectl plugin: installed as `kubectl-driftgate` on the PATH,
//! `kubectl driftgate ...` runs it with the person's kubeconfig.

use std::process::Command;

use serde_json::Value;

use crate::harness::control_plane::free_port;
use crate::harness::testenv::binaries;
use crate::harness::{ADMIN, ALICE, Identity, chart, control_plane};

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
        "Nothing to backport in plugin-empty namespace.\n"
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

    // Nothing listens on the port: the client part on stdout, then it fails as `kubectl
    // version` does, with the sentence on stderr and the unreachable exit code (3).
    let dead = bin.join("dead-kubeconfig");
    let kubeconfig = std::fs::read_to_string(plane.kubeconfig(ALICE)).unwrap();
    let dead_url = format!("https://127.0.0.1:{}", free_port());
    std::fs::write(&dead, kubeconfig.replace(plane.url(), &dead_url)).unwrap();
    let out = run(&dead, &[]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(3), "{stdout}{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1, "{stdout}");
    assert!(lines[0].starts_with("Client Version: "), "{stdout}");
    assert!(
        stderr.starts_with(&format!(
            "kubectl driftgate version: cannot reach the API server at {dead_url} ("
        )) && stderr
            .trim_end()
            .ends_with("; is this the right context? (kubectl config current-context)"),
        "{stderr}"
    );
    std::fs::remove_dir_all(&bin).unwrap();
}

/// A kubeconfig whose current context is a dead API server and whose context `live` is the
/// test cluster as the admin, in namespace `namespace`: every command below needs --context.
fn two_context_kubeconfig(dir: &std::path::Path, namespace: &str) -> std::path::PathBuf {
    let plane = control_plane();
    let admin = std::fs::read_to_string(plane.kubeconfig(ADMIN)).unwrap();
    let mut config: Value = serde_saphyr::from_str(&admin).unwrap();
    let user = config["contexts"][0]["context"]["user"].clone();
    let dead = format!("https://127.0.0.1:{}", free_port());
    config["clusters"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({"name": "dead", "cluster": {"server": dead}}));
    config["contexts"] = serde_json::json!([
        {"name": "dead", "context": {"cluster": "dead", "user": user}},
        {"name": "live", "context": {"cluster": "e2e", "user": user, "namespace": namespace}},
    ]);
    config["current-context"] = Value::from("dead");
    let path = dir.join("kubeconfig");
    // JSON is YAML: kubectl and kube-rs read either.
    std::fs::write(&path, config.to_string()).unwrap();
    path
}

/// `kubectl driftgate` takes kubectl's --context, --as and --as-group, and the namespace of the
/// context; lists in every -o format; and says what failed in a sentence with a distinct exit
/// code: RBAC (4), no such object (2), an unreachable server (3).
#[test]
fn kubectl_driftgate_speaks_kubectls_flags_formats_and_errors() {
    let plane = control_plane();
    let (ns_a, ns_b) = ("plugin-ctx-a", "plugin-ctx-b");
    for ns in [ns_a, ns_b] {
        plane.kubectl(ADMIN, &["create", "namespace", ns]).ok();
        plane
            .kubectl(ADMIN, &["create", "configmap", "plugin-settings", "-n", ns])
            .ok();
    }
    let (bin, path) = path_with_plugin("driftgate-plugin-ctx");
    let kubeconfig = two_context_kubeconfig(&bin, ns_a);
    let run = |args: &[&str]| {
        let out = Command::new(binaries().kubectl())
            .arg("driftgate")
            .args(args)
            .env("PATH", &path)
            .env("KUBECONFIG", &kubeconfig)
            .output()
            .expect("kubectl runs");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        (out.status.code(), stdout, stderr)
    };
    let reason = "INC-77: settings hotfix";
    let open = |target: &str, extra: &[&str]| {
        run(&[
            &[
                "break-glass",
                "open",
                target,
                "--for",
                "1h",
                "--reason",
                reason,
            ],
            extra,
        ]
        .concat())
    };

    // The current context is dead: exit 3 and the sentence, through kubectl.
    let (code, _, stderr) = run(&["backlog"]);
    assert_eq!(code, Some(3), "{stderr}");
    assert!(
        stderr.starts_with(
            "kubectl driftgate backlog: cannot reach the API server at https://127.0.0.1:"
        ) && stderr.contains("is this the right context? (kubectl config current-context)"),
        "{stderr}"
    );

    // --context live, no -n: the context's namespace, and hints that say kubectl driftgate.
    let (code, stdout, stderr) = open("configmap/plugin-settings", &["--context", "live"]);
    assert_eq!(code, Some(0), "{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{stdout}");
    assert!(
        lines[0].starts_with(&format!(
            "break-glass window open on configmap/plugin-settings in namespace {ns_a} until "
        )),
        "{stdout}"
    );
    assert!(lines[0].ends_with(" UTC)."), "{stdout}");
    // No policy guards this namespace: nothing is held off, and the CLI says so.
    assert!(
        lines[1].starts_with(&format!(
            "driftgate sent no warning: check that its webhook guards namespace {ns_a}"
        )),
        "{stdout}"
    );
    assert!(
        lines[2].contains("run this command again to extend"),
        "{stdout}"
    );
    assert!(
        lines[3].contains(&format!("`kubectl driftgate backlog -n {ns_a}`"))
            && lines[3].contains(&format!(
                "`kubectl driftgate break-glass close configmap/plugin-settings -n {ns_a}`"
            )),
        "{stdout}"
    );
    let labels = plane
        .kubectl(
            ADMIN,
            &[
                "get",
                "configmap/plugin-settings",
                "-n",
                ns_a,
                "-o",
                "jsonpath={.metadata.labels}",
            ],
        )
        .ok()
        .stdout;
    assert!(labels.contains("driftgate.dev/break-glass"), "{labels}");
    let (code, _, stderr) = open(
        "configmap/plugin-settings",
        &["--context", "live", "-n", ns_b],
    );
    assert_eq!(code, Some(0), "{stderr}");

    // Listings: the context's namespace by default, -A for all, every -o format.
    let (code, stdout, stderr) = run(&["break-glass", "list", "--context", "live"]);
    assert_eq!(code, Some(0), "{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    assert!(lines[0].starts_with("NAMESPACE      OBJECT"), "{stdout}");
    assert!(
        lines[1].starts_with(&format!("{ns_a}   configmap/plugin-settings   open    ")),
        "{stdout}"
    );
    assert!(lines[1].ends_with(reason), "{stdout}");
    let (code, stdout, stderr) = run(&[
        "break-glass",
        "list",
        "--context",
        "live",
        "-A",
        "-o",
        "name",
    ]);
    assert_eq!(code, Some(0), "{stderr}");
    let ours = stdout
        .lines()
        .filter(|l| *l == "configmap/plugin-settings")
        .count();
    assert_eq!(ours, 2, "{stdout}");
    let (code, stdout, stderr) = run(&[
        "break-glass",
        "list",
        "--context",
        "live",
        "-n",
        ns_b,
        "-o",
        "json",
    ]);
    assert_eq!(code, Some(0), "{stderr}");
    let json: Value = serde_json::from_str(&stdout).unwrap();
    // kubectl's List, as `kubectl get -o json` prints.
    assert_eq!(json["apiVersion"], "v1", "{json}");
    assert_eq!(json["kind"], "List", "{json}");
    let items = &json["items"];
    assert_eq!(items.as_array().map(Vec::len), Some(1), "{json}");
    assert_eq!(items[0]["namespace"], ns_b);
    assert_eq!(items[0]["kind"], "ConfigMap");
    assert_eq!(items[0]["state"], "open");
    assert_eq!(items[0]["reason"], reason);
    let (code, stdout, stderr) = run(&[
        "break-glass",
        "list",
        "--context",
        "live",
        "-n",
        ns_b,
        "-o",
        "yaml",
    ]);
    assert_eq!(code, Some(0), "{stderr}");
    let yaml: Value = serde_saphyr::from_str(&stdout).unwrap();
    assert_eq!(yaml, json);
    let (code, stdout, stderr) = run(&[
        "break-glass",
        "list",
        "--context",
        "live",
        "-o",
        "wide",
        "--no-headers",
    ]);
    assert_eq!(code, Some(0), "{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1, "{stdout}");
    // One row, no header: every column exactly as wide as its cell.
    let cells: Vec<&str> = lines[0].split("   ").collect();
    assert_eq!(cells.len(), 7, "{stdout}");
    assert_eq!(
        [cells[0], cells[1], cells[2]],
        [ns_a, "configmap/plugin-settings", "open"]
    );
    let expires_at: jiff::Timestamp = cells[4].parse().expect("EXPIRES-UTC is RFC 3339");
    assert_eq!(
        cells[5],
        driftgate::timefmt::format_expiry(expires_at),
        "{stdout}"
    );
    assert_eq!(cells[6], reason);

    // 404: no such object, exit 2, before anything is written.
    let (code, _, stderr) = open("configmap/nope", &["--context", "live"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert_eq!(
        stderr,
        format!("kubectl driftgate break-glass: no such configmap \"nope\" in namespace {ns_a}\n")
    );

    // Impersonation (the admin may impersonate): a user with no RBAC gets a sentence, exit 4;
    // with a group that has it (sre-oncall), the same user may list.
    let (code, _, stderr) = run(&["backlog", "--context", "live", "--as", "carol"]);
    assert_eq!(code, Some(4), "{stderr}");
    assert_eq!(
        stderr,
        format!(
            "kubectl driftgate backlog: carol may not list backportrequirements.driftgate.dev in \
             namespace {ns_a}: Kubernetes RBAC does not permit it. Ask a cluster admin for a Role \
             that grants it, or check --context and --as\n"
        )
    );
    let (code, stdout, stderr) = run(&[
        "backlog",
        "--context",
        "live",
        "--as",
        "carol",
        "--as-group",
        "sre-oncall",
    ]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        stdout,
        format!("Nothing to backport in {ns_a} namespace.\n")
    );
    let (code, _, stderr) = open(
        "configmap/plugin-settings",
        &["--context", "live", "--as", "carol"],
    );
    assert_eq!(code, Some(4), "{stderr}");
    assert!(
        stderr.starts_with(&format!(
            "kubectl driftgate break-glass: carol may not patch configmaps in namespace {ns_a}: "
        )),
        "{stderr}"
    );
    // dave (no RBAC at all) may not impersonate: the sentence says so, not the command's verb.
    let dave = Identity {
        user: "plugin-dave",
        groups: &[],
    };
    let out = Command::new(binaries().kubectl())
        .args(["driftgate", "backlog", "-n", ns_a, "--as", "bob"])
        .env("PATH", &path)
        .env("KUBECONFIG", plane.kubeconfig(dave))
        .output()
        .expect("kubectl runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    assert!(
        stderr.starts_with("kubectl driftgate backlog: plugin-dave may not impersonate users: "),
        "{stderr}"
    );

    // A listing the user may not make anywhere is the RBAC sentence, not "No break-glass windows."
    let (code, stdout, stderr) =
        run(&["break-glass", "list", "--context", "live", "--as", "carol"]);
    assert_eq!(code, Some(4), "{stdout}{stderr}");
    assert!(
        stderr.starts_with("kubectl driftgate break-glass: carol may not list ")
            && stderr.contains(": Kubernetes RBAC does not permit it."),
        "{stderr}"
    );

    // version prints the client's version and fails as kubectl version does when the server's
    // cannot be read: RBAC's sentence, exit 4.
    let (code, stdout, stderr) = run(&["version", "--context", "live", "--as", "carol"]);
    assert_eq!(code, Some(4), "{stdout}{stderr}");
    assert!(stdout.starts_with("Client Version: "), "{stdout}");
    assert!(
        stderr.starts_with(
            "kubectl driftgate version: carol may not list deployments.apps in namespace \
             driftgate-system: Kubernetes RBAC does not permit it."
        ),
        "{stderr}"
    );

    let (code, stdout, stderr) = run(&[
        "break-glass",
        "close",
        "configmap/plugin-settings",
        "--context",
        "live",
    ]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stdout.starts_with(&format!(
            "break-glass window closed on configmap/plugin-settings in namespace {ns_a}"
        )),
        "{stdout}"
    );
    std::fs::remove_dir_all(&bin).unwrap();
}

/// Issue 28: the real kubectl (1.35) completes `kubectl driftgate …` through the plugin's
/// completion executable, `kubectl_complete-driftgate` on PATH (a link to the binary, as the
/// README says to make): subcommands, a subcommand's own, and a flag's values.
#[test]
fn the_real_kubectl_completes_the_plugin_through_kubectl_complete_driftgate() {
    let (bin, path) = path_with_plugin("driftgate-plugin-complete");
    let completer = bin.join("kubectl_complete-driftgate");
    let _ = std::fs::remove_file(&completer);
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_driftgate"), &completer).unwrap();
    let complete = |args: &[&str]| {
        let out = Command::new(binaries().kubectl())
            .args(["__complete", "driftgate"])
            .args(args)
            .env("PATH", &path)
            .output()
            .expect("kubectl runs");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let words = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| !l.starts_with(':'))
            .filter_map(|l| l.split('\t').next().map(str::to_owned))
            .collect()
    };
    let top = words(&complete(&[""]));
    for command in [
        "break-glass",
        "backlog",
        "backport",
        "scan",
        "suspend",
        "resume",
    ] {
        assert!(top.contains(&command.to_owned()), "{top:?}");
    }
    assert_eq!(
        words(&complete(&["break-glass", ""])),
        ["open", "close", "list"]
    );
    assert_eq!(
        words(&complete(&["backlog", "-o", ""])),
        ["table", "wide", "json", "yaml", "name"]
    );
    std::fs::remove_dir_all(&bin).unwrap();
}

/// Completion reads what only the cluster knows, with the person's kubeconfig: namespaces after
/// `-n`, the records after `backlog resolve`, kinds and then object names after `break-glass
/// open`, and the kubeconfig's contexts; through the real kubectl (`kubectl driftgate`) and
/// through the bash script `driftgate completion bash` prints (`driftgate __complete`).
#[tokio::test]
async fn completion_offers_the_names_the_cluster_holds() {
    crate::harness::install_crypto_provider();
    crate::harness::shared();
    let ns = "prod-complete";
    crate::scenarios::flux_apply(&crate::scenarios::namespace_with_api(ns)).ok();
    crate::harness::driftgate_cli(
        ALICE,
        &[
            "break-glass",
            "open",
            "deployment/api",
            "-n",
            ns,
            "--for",
            "1h",
            "--reason",
            "INC-2801: completion test",
        ],
    )
    .ok();
    crate::scenarios::kubectl(
        ALICE,
        &["scale", "deployment/api", "-n", ns, "--replicas=3"],
    )
    .ok();
    let records = crate::scenarios::records(ns).await;
    assert_eq!(records.len(), 1, "one record of alice's change");
    let record = records[0].metadata.name.clone().unwrap();

    let plane = control_plane();
    let (bin, path) = path_with_plugin("driftgate-plugin-complete-names");
    let completer = bin.join("kubectl_complete-driftgate");
    let _ = std::fs::remove_file(&completer);
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_driftgate"), &completer).unwrap();
    let through_kubectl = |args: &[&str]| -> (Vec<String>, String) {
        let out = Command::new(binaries().kubectl())
            .args(["__complete", "driftgate"])
            .args(args)
            .env("PATH", &path)
            .env("KUBECONFIG", plane.kubeconfig(ALICE))
            .output()
            .expect("kubectl runs");
        assert!(out.status.success(), "{out:?}");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let directive = text
            .lines()
            .find(|l| l.starts_with(':'))
            .unwrap_or_default()
            .to_owned();
        let values = text
            .lines()
            .filter(|l| !l.starts_with(':'))
            .filter_map(|l| l.split('\t').next().map(str::to_owned))
            .collect();
        (values, directive)
    };
    let (values, directive) = through_kubectl(&["backlog", "resolve", "-n", ns, ""]);
    assert_eq!((values, directive.as_str()), (vec![record.clone()], ":4"));
    let (values, _) = through_kubectl(&["break-glass", "list", "-n", "prod-compl"]);
    assert_eq!(values, [ns]);
    let (values, directive) = through_kubectl(&["break-glass", "open", "deploym"]);
    assert_eq!(
        (values, directive.as_str()),
        (vec!["deployment/".to_owned()], ":6")
    );
    let (values, directive) = through_kubectl(&["break-glass", "close", "-n", ns, "deployment/"]);
    assert_eq!(
        (values, directive.as_str()),
        (vec!["deployment/api".to_owned()], ":4")
    );
    // Forbidden or unreachable: nothing offered, no error on the terminal.
    let (values, _) = through_kubectl(&["--kubeconfig", "/nonexistent", "backlog", "resolve", ""]);
    assert!(values.is_empty(), "{values:?}");

    // The bash script asks the binary the same, with the line as bash hands it over.
    let script = bin.join("driftgate.bash");
    let printed = Command::new(env!("CARGO_BIN_EXE_driftgate"))
        .args(["completion", "bash"])
        .output()
        .unwrap();
    std::fs::write(&script, &printed.stdout).unwrap();
    let _ = std::fs::remove_file(bin.join("driftgate"));
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_driftgate"), bin.join("driftgate")).unwrap();
    let line = format!("driftgate backlog resolve -n {ns} --context e2e ");
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "source {}; COMP_LINE='{line}'; COMP_POINT=${{#COMP_LINE}}; _driftgate; \
             printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            script.display()
        ))
        .env("PATH", &path)
        .env("KUBECONFIG", plane.kubeconfig(ALICE))
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        record,
        "{out:?}"
    );
    std::fs::remove_dir_all(&bin).unwrap();
}
