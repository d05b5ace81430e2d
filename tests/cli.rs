//! The offline tools, run as the real binary: `eval`, `policy check`, `policy test`.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

#[path = "common/binary.rs"]
mod binary;
use binary::driftgate;
#[path = "common/fake_apiserver.rs"]
mod fake_apiserver;
use fake_apiserver::{Answer, FakeApiServer, Reply, discovery};

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn eval_prints_one_admission_review_per_input() {
    let out = driftgate(&[
        "eval",
        "--policy",
        "policies/example.yaml",
        "--now",
        "2026-11-30T09:00:00Z",
        "tests/fixtures/flux-ssa-update.json",
        "tests/fixtures/kubectl-edit.json",
        "tests/fixtures/break-glass-use-edit.json",
    ]);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let lines: Vec<Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is JSON"))
        .collect();
    assert_eq!(lines.len(), 3);
    for (line, fixture) in lines.iter().zip([
        "flux-ssa-update.json",
        "kubectl-edit.json",
        "break-glass-use-edit.json",
    ]) {
        assert_eq!(line["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(line["kind"], "AdmissionReview");
        let input: Value = serde_json::from_slice(
            &std::fs::read(Path::new("tests/fixtures").join(fixture)).unwrap(),
        )
        .unwrap();
        assert_eq!(
            line["response"]["uid"], input["request"]["uid"],
            "{fixture}"
        );
    }
    assert_eq!(lines[0]["response"]["allowed"], true);
    assert_eq!(
        lines[0]["response"]["auditAnnotations"]["rule"],
        "Controller"
    );
    assert_eq!(lines[1]["response"]["allowed"], false);
    let message = lines[1]["response"]["status"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("bob may not update Deployment prod-payments/api"),
        "{message}"
    );
    assert!(
        message.contains("driftgate break-glass open deployment/api -n prod-payments"),
        "{message}"
    );
    assert_eq!(lines[2]["response"]["allowed"], true);
    let warnings = lines[2]["response"]["warnings"].as_array().unwrap();
    assert!(warnings[0].as_str().unwrap().contains("backport"));
}

#[test]
fn eval_dash_reads_the_review_from_standard_input() {
    let eval = |stdin: &[u8]| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_driftgate"))
            .args(["eval", "--policy", "policies/example.yaml", "-"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("the driftgate binary runs");
        std::io::Write::write_all(&mut child.stdin.take().unwrap(), stdin).unwrap();
        child.wait_with_output().unwrap()
    };
    let out = eval(&std::fs::read("tests/fixtures/kubectl-edit.json").unwrap());
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let review: Value = serde_json::from_slice(&out.stdout).expect("one AdmissionReview");
    assert_eq!(review["response"]["allowed"], false);
    assert_eq!(
        review["response"]["auditAnnotations"]["rule"],
        "NotPermitted"
    );

    // Bad input on stdin is named as such, and exits 2 like an unreadable file.
    let out = eval(b"{\"kind\": \"Deployment\"}");
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("standard input: "), "{stderr}");
    assert!(out.stdout.is_empty());
}

#[test]
fn eval_reads_parent_and_namespace_objects() {
    let base = [
        "eval",
        "--policy",
        "policies/example.yaml",
        "--now",
        "2026-11-30T09:00:00Z",
    ];
    let run = |extra: &[&str]| {
        let args: Vec<&str> = base.iter().chain(extra).copied().collect();
        let out = driftgate(&args);
        assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
        let line: Value = serde_json::from_str(text(&out.stdout).trim()).unwrap();
        line["response"]["allowed"].as_bool().unwrap()
    };
    assert!(!run(&["tests/fixtures/break-glass-use-scale.json"]));
    assert!(run(&[
        "--parent",
        "tests/fixtures/parents/api-with-window.yaml",
        "tests/fixtures/break-glass-use-scale.json"
    ]));
    assert!(!run(&[
        "tests/fixtures/namespace-window-configmap-edit.json"
    ]));
    assert!(run(&[
        "--namespace",
        "tests/fixtures/namespaces/prod-orders-window.yaml",
        "tests/fixtures/namespace-window-configmap-edit.json"
    ]));
}

#[test]
fn eval_exits_2_on_unreadable_input_but_decides_the_rest() {
    let dir = std::env::temp_dir().join(format!("driftgate-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let broken = dir.join("broken.json");
    std::fs::write(
        &broken,
        "{\"apiVersion\": \"admission.k8s.io/v1\", \"kind\": \"AdmissionReview\", \"request\": ",
    )
    .unwrap();
    let old = dir.join("v1beta1.json");
    std::fs::write(
        &old,
        r#"{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{}}"#,
    )
    .unwrap();
    let out = driftgate(&[
        "eval",
        "--policy",
        "policies/example.yaml",
        broken.to_str().unwrap(),
        "tests/fixtures/kubectl-edit.json",
        old.to_str().unwrap(),
        "tests/fixtures/does-not-exist.json",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stdout).lines().count(),
        1,
        "the readable review is still decided"
    );
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("broken.json: not a valid AdmissionReview"),
        "{stderr}"
    );
    assert!(stderr.contains("v1beta1\" is not supported"), "{stderr}");
    assert!(
        stderr.contains("does-not-exist.json: cannot be read"),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir).unwrap();

    let out = driftgate(&[
        "eval",
        "--policy",
        "tests/fixtures/policies/invalid.yaml",
        "tests/fixtures/kubectl-edit.json",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("spec.breakGlass.maxDuration"));
}

#[test]
fn policy_check_accepts_the_example_and_lists_every_problem() {
    let out = driftgate(&[
        "policy",
        "check",
        "policies/example.yaml",
        "policies/tests/argocd.yaml",
    ]);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    assert!(text(&out.stdout).starts_with("ok: 7 policies"));

    let out = driftgate(&["policy", "check", "tests/fixtures/policies/invalid.yaml"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    let expected = [
        "tests/fixtures/policies/invalid.yaml:8: spec.namespaces.include: is empty",
        "tests/fixtures/policies/invalid.yaml:10: spec.controllers[0]: names no identity",
        "tests/fixtures/policies/invalid.yaml:13: spec.breakGlass.maxDuration: \"4x\" is not a duration",
    ];
    for line in expected {
        assert!(stderr.contains(line), "missing {line:?} in:\n{stderr}");
    }
    assert!(stderr.contains("(document 1, policy broken)"), "{stderr}");
    assert!(stderr.contains("3 problems found"), "{stderr}");

    let out = driftgate(&[
        "policy",
        "check",
        "tests/fixtures/policies/unknown-field.yaml",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("unknown-field.yaml:8:"), "{stderr}");
    assert!(stderr.contains("controlers"), "{stderr}");
}

#[test]
fn policy_test_runs_the_shipped_suites() {
    let out = driftgate(&["policy", "test", "policies/tests"]);
    let stdout = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout:\n{stdout}\nstderr:\n{}",
        text(&out.stderr)
    );
    let summary = stdout.lines().last().unwrap();
    let passed: usize = summary.split(' ').next().unwrap().parse().unwrap();
    assert!(passed >= 38, "{summary}");
    assert!(summary.ends_with(" passed, 0 failed"), "{summary}");
}

#[test]
fn policy_test_reports_a_failing_case_and_exits_1() {
    let out = driftgate(&["policy", "test", "tests/fixtures/suites/failing.test.yaml"]);
    assert_eq!(out.status.code(), Some(1));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("FAIL  failing: bob's edit is (wrongly) expected to be admitted"),
        "{stdout}"
    );
    assert!(
        stdout.contains("expected allowed=true, got allowed=false (rule NotPermitted)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("expected rule Controller, got NotPermitted"),
        "{stdout}"
    );
    assert!(
        stdout.trim_end().ends_with("0 passed, 1 failed"),
        "{stdout}"
    );
}

#[test]
fn policy_check_warns_about_settings_that_do_not_do_what_they_seem() {
    let out = driftgate(&["policy", "check", "tests/fixtures/policies/warnings.yaml"]);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("warning: tests/fixtures/policies/warnings.yaml: policy surprising: spec.subresources: \"status\" guards nothing by itself"),
        "{stdout}"
    );
    assert!(
        stdout.contains("spec.delegations[0].fields: \"metadata.labels[*]\" covers the break-glass label metadata.labels[driftgate.dev/break-glass]; delegation labeller never changes it"),
        "{stdout}"
    );
    assert!(
        stdout.contains("spec.suspensions.annotations[0]: Flux stops on the annotation kustomize.toolkit.fluxcd.io/reconcile when it is disabled in any case (Go's strings.EqualFold: DISABLED, Disabled); list disabled with ignoreCase: true, or a suspension spelt so stops Flux unjudged"),
        "{stdout}"
    );
    assert!(stdout.contains("ok: 1 policy"), "{stdout}");
}

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("driftgate-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn version_without_a_cluster_prints_the_client_and_fails_as_kubectl_version() {
    let dir = temp_dir("version");
    let kubeconfig = dir.join("missing-kubeconfig");
    let kubeconfig = kubeconfig.to_str().unwrap();
    let out = driftgate(&["version", "--kubeconfig", kubeconfig]);
    let stderr = text(&out.stderr);
    // kubectl version prints the client's version and exits non-zero; the code is the table's.
    assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");
    assert_eq!(
        text(&out.stdout),
        format!("Client Version: {}\n", env!("CARGO_PKG_VERSION"))
    );
    assert!(
        stderr.starts_with(&format!(
            "driftgate version: --kubeconfig {kubeconfig}: cannot be read"
        )),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");

    let dead = dead_kubeconfig(&dir);
    for format in ["json", "yaml"] {
        let out = driftgate(&[
            "version",
            "--kubeconfig",
            dead.to_str().unwrap(),
            "-o",
            format,
        ]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "stderr: {stderr}");
        assert!(
            stderr.starts_with(
                "driftgate version: cannot reach the API server at https://127.0.0.1:1 ("
            ),
            "{stderr}"
        );
        let report: Value = if format == "json" {
            serde_json::from_slice(&out.stdout).unwrap()
        } else {
            serde_saphyr::from_str(&text(&out.stdout)).unwrap()
        };
        assert_eq!(report["client"]["version"], env!("CARGO_PKG_VERSION"));
        assert!(report.get("server").is_none(), "{report}");
        assert!(
            report["serverNote"]
                .as_str()
                .unwrap()
                .contains("cannot reach the API server"),
            "{report}"
        );
    }

    let out = driftgate(&["version", "--client", "-o", "json"]);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(report.get("serverNote").is_none(), "{report}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The shells whose completion script asks the binary: run for real when installed (`.ci/run`
/// installs them and sets `DRIFTGATE_REQUIRE_SHELLS`, which makes a missing one a failure).
fn shell_installed(shell: &str) -> bool {
    let found = Command::new(shell)
        .args(["-c", "exit 0"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            std::env::var_os("DRIFTGATE_REQUIRE_SHELLS").is_none(),
            "{shell} is not installed (apt-get install {shell}), and DRIFTGATE_REQUIRE_SHELLS is set"
        );
        eprintln!("{shell} is not installed: its completion script is not run");
    }
    found
}

/// A directory holding the script of `shell` and the binary as `driftgate` (the scripts run
/// the command being completed), and a PATH that starts with it.
fn completion_dir(shell: &str) -> (std::path::PathBuf, String) {
    let dir = temp_dir(&format!("completion-{shell}"));
    let out = driftgate(&["completion", shell]);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    std::fs::write(dir.join("script"), &out.stdout).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_driftgate"), dir.join("driftgate")).unwrap();
    let path = format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    (dir, path)
}

/// What bash's completion of `line` (the cursor at its end) offers.
fn bash_completes(dir: &std::path::Path, path: &str, line: &str) -> Vec<String> {
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "source {}/script && complete -p driftgate >/dev/null && COMP_LINE='{line}' && \
             COMP_POINT=${{#COMP_LINE}} && _driftgate && printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            dir.display()
        ))
        .env("PATH", path)
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .output()
        .unwrap();
    assert!(out.status.success(), "{line}: {}", text(&out.stderr));
    text(&out.stdout)
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_completion_scripts_ask_the_binary_in_bash_zsh_and_fish() {
    let (dir, path) = completion_dir("bash");
    assert_eq!(
        bash_completes(&dir, &path, "driftgate break-glass "),
        ["open", "close", "list"]
    );
    assert_eq!(
        bash_completes(&dir, &path, "driftgate ba"),
        ["backlog", "backport"]
    );
    // bash replaces what follows the `=`: the values drop the flag.
    assert_eq!(
        bash_completes(&dir, &path, "driftgate break-glass open --dry-run="),
        ["server", "client"]
    );
    assert_eq!(
        bash_completes(&dir, &path, "driftgate backlog -o "),
        ["table", "wide", "json", "yaml", "name"]
    );
    // A cluster that cannot be read (no kubeconfig here) offers nothing, and says nothing.
    assert!(bash_completes(&dir, &path, "driftgate backlog resolve ").is_empty());
    std::fs::remove_dir_all(&dir).unwrap();

    if shell_installed("fish") {
        let (dir, path) = completion_dir("fish");
        let fish = |line: &str| -> Vec<String> {
            let out = Command::new("fish")
                .arg("-c")
                .arg(format!(
                    "source {}/script; complete -C '{line}'",
                    dir.display()
                ))
                .env("PATH", &path)
                .env("KUBECONFIG", "/nonexistent/kubeconfig")
                .output()
                .unwrap();
            assert!(out.status.success(), "{line}: {}", text(&out.stderr));
            text(&out.stdout)
                .lines()
                .map(|l| l.split('\t').next().unwrap().to_owned())
                .collect()
        };
        assert_eq!(fish("driftgate break-glass "), ["close", "list", "open"]);
        assert_eq!(fish("driftgate backlog -o j"), ["json"]);
        // eval's review files: fish's own file names.
        std::fs::write(dir.join("review.json"), "{}").unwrap();
        assert_eq!(
            fish(&format!("driftgate eval {}/rev", dir.display())),
            [format!("{}/review.json", dir.display())]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    if shell_installed("zsh") {
        let (dir, path) = completion_dir("zsh");
        let checked = Command::new("zsh")
            .arg("-n")
            .arg(dir.join("script"))
            .output()
            .unwrap();
        assert!(checked.status.success(), "{}", text(&checked.stderr));
        // compsys's functions stand in for themselves: _describe prints the `value:description`
        // pairs it is given, _files says so, compdef records the registration.
        let zsh = |words: &str| -> String {
            let out = Command::new("zsh")
                .arg("-c")
                .arg(format!(
                    "compdef() {{ print \"compdef $*\" }}; \
                     _describe() {{ print -l -- \"${{(@)values}}\"; print \"args: $*\" }}; \
                     _files() {{ print files }}; \
                     source {}/script; words=({words}); CURRENT=${{#words}}; _driftgate",
                    dir.display()
                ))
                .env("PATH", &path)
                .env("KUBECONFIG", "/nonexistent/kubeconfig")
                .output()
                .unwrap();
            assert!(out.status.success(), "{words}: {}", text(&out.stderr));
            text(&out.stdout)
        };
        let listed = zsh("driftgate break-glass ''");
        assert!(
            listed.starts_with("compdef _driftgate driftgate\n"),
            "{listed}"
        );
        assert!(
            listed.contains("\nopen:Open (or extend) a window\n"),
            "{listed}"
        );
        assert!(
            listed.contains("\nargs: -t values driftgate values\n"),
            "{listed}"
        );
        assert!(zsh("driftgate eval ''").ends_with("files\n"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    let out = driftgate(&["completion", "tcsh"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("invalid value 'tcsh'"),
        "{}",
        text(&out.stderr)
    );
    // elvish and powershell: clap_complete's scripts, from the command line's definition.
    for shell in ["elvish", "powershell"] {
        let out = driftgate(&["completion", shell]);
        assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
        assert!(text(&out.stdout).contains("break-glass"), "{shell}");
    }
}

fn script(path: &str, args: &[&str]) -> Output {
    Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join(path))
        .args(args)
        .output()
        .expect("the script runs")
}

#[test]
fn krew_manifest_is_rendered_from_the_tarball_that_holds_kubectl_driftgate() {
    use sha2::Digest;
    let dir = temp_dir("krew");
    let out_dir = dir.join("dist");
    let packed = script(
        "plugins/krew/package.sh",
        &[env!("CARGO_BIN_EXE_driftgate"), out_dir.to_str().unwrap()],
    );
    assert!(packed.status.success(), "{}", text(&packed.stderr));
    let tarball = text(&packed.stdout).trim().to_owned();
    assert!(
        tarball.ends_with(&format!(
            "kubectl-driftgate_v{}_linux_amd64.tar.gz",
            env!("CARGO_PKG_VERSION")
        )),
        "{tarball}"
    );

    // The tarball holds kubectl-driftgate, and that file is the working binary.
    let unpacked = dir.join("unpacked");
    std::fs::create_dir_all(&unpacked).unwrap();
    let untar = Command::new("tar")
        .args(["-xzf", &tarball, "-C", unpacked.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(untar.status.success(), "{}", text(&untar.stderr));
    let plugin = unpacked.join("kubectl-driftgate");
    let ran = Command::new(&plugin)
        .args(["version", "--client"])
        .output()
        .unwrap();
    assert_eq!(
        text(&ran.stdout).lines().next().unwrap_or_default(),
        format!("Client Version: {}", env!("CARGO_PKG_VERSION")).as_str()
    );

    let uri = "https://example.invalid/releases/kubectl-driftgate.tar.gz";
    let rendered = script("plugins/krew/render.sh", &[&tarball, uri]);
    assert!(rendered.status.success(), "{}", text(&rendered.stderr));
    let manifest: Value = serde_saphyr::from_str(&text(&rendered.stdout)).unwrap();
    assert_eq!(
        manifest["apiVersion"],
        "krew.googlecontainertools.github.com/v1alpha2"
    );
    assert_eq!(manifest["kind"], "Plugin");
    assert_eq!(manifest["metadata"]["name"], "driftgate");
    assert_eq!(
        manifest["spec"]["version"],
        format!("v{}", env!("CARGO_PKG_VERSION"))
    );
    let platforms = manifest["spec"]["platforms"].as_array().unwrap();
    assert_eq!(platforms.len(), 1);
    let platform = &platforms[0];
    assert_eq!(
        platform["selector"]["matchLabels"],
        serde_json::json!({"os": "linux", "arch": "amd64"})
    );
    assert_eq!(platform["bin"], "kubectl-driftgate");
    assert_eq!(platform["uri"], uri);
    let digest = sha2::Sha256::digest(std::fs::read(&tarball).unwrap());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(platform["sha256"], hex);

    // A tarball without kubectl-driftgate is refused with a sentence saying what to do.
    let wrong = dir.join("wrong.tar.gz");
    let made = Command::new("tar")
        .args([
            "-czf",
            wrong.to_str().unwrap(),
            "-C",
            unpacked.to_str().unwrap(),
            ".",
        ])
        .output()
        .unwrap();
    assert!(made.status.success(), "{}", text(&made.stderr));
    let refused = script("plugins/krew/render.sh", &[wrong.to_str().unwrap(), uri]);
    assert_eq!(refused.status.code(), Some(2));
    let stderr = text(&refused.stderr);
    assert!(
        stderr.contains(
            "holds no kubectl-driftgate at its top level; make it with plugins/krew/package.sh"
        ),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A kubeconfig whose current context points at a port nothing listens on (1), with
/// namespace `ctx-ns`, and a second context `other`.
fn dead_kubeconfig(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("dead-kubeconfig");
    std::fs::write(
        &path,
        r#"apiVersion: v1
kind: Config
clusters:
  - name: dead
    cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}
users:
  - name: nobody
    user: {}
contexts:
  - name: dead
    context: {cluster: dead, user: nobody, namespace: ctx-ns}
  - name: other
    context: {cluster: dead, user: nobody}
current-context: dead
"#,
    )
    .unwrap();
    path
}

const OPEN: &[&str] = &[
    "break-glass",
    "open",
    "deployment/api",
    "-n",
    "prod",
    "--for",
    "1h",
    "--reason",
    "INC-1: api OOM",
];

#[test]
fn an_unreachable_cluster_is_one_sentence_with_the_server_and_exit_3() {
    let dir = temp_dir("dead");
    let kubeconfig = dead_kubeconfig(&dir);
    let kubeconfig = kubeconfig.to_str().unwrap();
    let commands: [&[&str]; 5] = [
        &["backlog"],
        &["backlog", "-A", "-o", "json"],
        &["break-glass", "list", "--context", "other"],
        OPEN,
        &["break-glass", "close", "namespace/prod"],
    ];
    for args in commands {
        let out = driftgate(&[args, &["--kubeconfig", kubeconfig]].concat());
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(
            stderr.contains("cannot reach the API server at https://127.0.0.1:1 ("),
            "{args:?}: {stderr}"
        );
        assert!(
            stderr
                .trim_end()
                .ends_with("; is this the right context? (kubectl config current-context)"),
            "{args:?}: {stderr}"
        );
        assert!(!stderr.contains("Status {"), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_input_is_refused_before_connecting_with_exit_2() {
    let dir = temp_dir("bad-input");
    let kubeconfig = dead_kubeconfig(&dir);
    let kubeconfig = kubeconfig.to_str().unwrap();
    let with = |args: &[&str], extra: &[&str]| driftgate(&[args, extra].concat());
    let cases: [(Vec<&str>, &str); 6] = [
        (
            [&OPEN[..2], &["api"], &OPEN[3..]].concat(),
            "driftgate break-glass: \"api\" is not KIND/NAME; write e.g. deployment/api",
        ),
        (
            vec!["break-glass", "close", "deployment/", "-n", "prod"],
            "driftgate break-glass: \"deployment/\" is not KIND/NAME",
        ),
        (
            [&OPEN[..6], &["soon"], &OPEN[7..]].concat(),
            "driftgate break-glass: --for: \"soon\" is not a duration",
        ),
        (
            [&OPEN[..8], &["INC-…: what and why"]].concat(),
            "driftgate break-glass: --reason must say why",
        ),
        (
            vec!["backlog", "--context", "nope"],
            "driftgate backlog: --context nope: no such context in ",
        ),
        (
            vec!["backlog", "--as-group", "sre-oncall"],
            "driftgate backlog: --as-group needs --as",
        ),
    ];
    for (args, expected) in cases {
        // The dead server proves nothing was sent: connecting would have been exit 3.
        let out = with(&args, &["--kubeconfig", kubeconfig]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.starts_with(expected), "{args:?}: {stderr}");
    }
    // KIND/NAME is checked before the kubeconfig is even read.
    let out = with(
        &[&OPEN[..2], &["api"], &OPEN[3..]].concat(),
        &["--kubeconfig", "/nonexistent/kubeconfig"],
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("is not KIND/NAME"));
    let out = with(&["backlog"], &["--kubeconfig", "/nonexistent/kubeconfig"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr)
            .starts_with("driftgate backlog: --kubeconfig /nonexistent/kubeconfig: cannot be read"),
        "{}",
        text(&out.stderr)
    );
    // Usage errors are clap's, exit 2 as well; -o takes kubectl's formats.
    let out = with(&["backlog", "-o", "csv"], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("table, wide, json, yaml, name"),
        "{}",
        text(&out.stderr)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

const SUSPEND: &[&str] = &[
    "suspend",
    "kustomization/apps",
    "-n",
    "flux-system",
    "--for",
    "1h",
    "--reason",
    "INC-1: flux reverts the hotfix",
];

#[test]
fn suspend_and_resume_refuse_bad_input_before_connecting_with_exit_2() {
    let dir = temp_dir("suspend-bad-input");
    let kubeconfig = dead_kubeconfig(&dir);
    let kubeconfig = kubeconfig.to_str().unwrap();
    let cases: [(Vec<&str>, &str); 5] = [
        (
            [&SUSPEND[..1], &["apps"], &SUSPEND[2..]].concat(),
            "driftgate suspend: \"apps\" is not KIND/NAME; write e.g. kustomization/apps",
        ),
        (
            vec!["resume", "kustomization/", "-n", "flux-system"],
            "driftgate resume: \"kustomization/\" is not KIND/NAME",
        ),
        (
            [&SUSPEND[..5], &["soon"], &SUSPEND[6..]].concat(),
            "driftgate suspend: --for: \"soon\" is not a duration",
        ),
        (
            [&SUSPEND[..7], &["INC-…: what and why"]].concat(),
            "driftgate suspend: --reason must say why",
        ),
        (
            [SUSPEND, &["--as-group", "sre-oncall"]].concat(),
            "driftgate suspend: --as-group needs --as",
        ),
    ];
    for (args, expected) in cases {
        let out = driftgate(&[&args[..], &["--kubeconfig", kubeconfig]].concat());
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.starts_with(expected), "{args:?}: {stderr}");
    }
    // Without --for or --reason it is a usage error, exit 2 as well.
    let out = driftgate(&SUSPEND[..4]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("--for <DURATION>"),
        "{}",
        text(&out.stderr)
    );
    // A well-formed suspend does try the cluster: the dead one, exit 3.
    for args in [
        SUSPEND,
        &["resume", "kustomization/apps", "-n", "flux-system"],
    ] {
        let out = driftgate(&[args, &["--kubeconfig", kubeconfig]].concat());
        assert_eq!(
            out.status.code(),
            Some(3),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_kubeconfig_variable_naming_no_file_is_named_in_the_error() {
    // Not "no $KUBECONFIG": it is set, and the person must see what it points at.
    let out = Command::new(env!("CARGO_BIN_EXE_driftgate"))
        .args(["backlog"])
        .env("KUBECONFIG", "/nonexistent/from-env")
        .env("HOME", "/nonexistent/home")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .expect("the driftgate binary runs");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.starts_with(
            "driftgate backlog: no cluster configuration found ($KUBECONFIG is /nonexistent/from-env, and no file it names can be read, not in a cluster)"
        ),
        "{stderr}"
    );
}

#[test]
fn help_lists_the_exit_codes() {
    let out = driftgate(&["--help"]);
    let help = text(&out.stdout);
    for line in [
        "Exit codes:",
        "  1  refused by driftgate's policy",
        "  2  bad input",
        "  3  the cluster is unreachable",
        "  4  not permitted by Kubernetes RBAC",
    ] {
        assert!(help.contains(line), "{line}: {help}");
    }
}

#[test]
fn run_as_kubectl_driftgate_it_names_itself_so() {
    let dir = temp_dir("plugin-name");
    let kubeconfig = dead_kubeconfig(&dir);
    let plugin = dir.join("kubectl-driftgate");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_driftgate"), &plugin).unwrap();
    let out = Command::new(&plugin)
        .args(["backlog", "--kubeconfig", kubeconfig.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).starts_with("kubectl driftgate backlog: cannot reach the API server"),
        "{}",
        text(&out.stderr)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn opening_a_window_warns_which_controllers_it_holds_off() {
    let open = |policy: &str| {
        let out = driftgate(&[
            "eval",
            "--policy",
            policy,
            "--now",
            "2026-11-30T09:00:00Z",
            "tests/fixtures/break-glass-open.json",
        ]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let review: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(review["response"]["allowed"], true, "{review}");
        review["response"]["warnings"][0]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let warning = open("policies/example.yaml");
    assert!(
        warning.contains("; controller flux is held off it until then; every change made in it must be backported to Git."),
        "{warning}"
    );
    let dir = temp_dir("no-hold");
    let example = std::fs::read_to_string("policies/example.yaml").unwrap();
    assert!(example.contains("holdController: true"));
    let policy = dir.join("no-hold.yaml");
    // heldByWindows has no effect without holdController, and policy check says so.
    let no_hold = example
        .replace("holdController: true", "holdController: false")
        .replace("      heldByWindows: false\n", "");
    std::fs::write(&policy, no_hold).unwrap();
    let warning = open(policy.to_str().unwrap());
    assert!(!warning.contains("held off"), "{warning}");
    assert!(
        warning.contains("every change made in it must be backported"),
        "{warning}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn scan_refuses_a_policy_that_does_not_load_before_connecting() {
    let dir = temp_dir("scan-bad-policy");
    let policy = dir.join("policy.yaml");
    std::fs::write(
        &policy,
        "apiVersion: driftgate.dev/v1alpha1\nkind: GatePolicy\nspec: {}\n",
    )
    .unwrap();
    let out = driftgate(&[
        "scan",
        "--policy",
        policy.to_str().unwrap(),
        "--kubeconfig",
        "/nonexistent/kubeconfig",
    ]);
    assert_eq!(out.status.code(), Some(2), "stderr: {}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(
        stderr.starts_with(&format!("driftgate scan: --policy {}: ", policy.display())),
        "{stderr}"
    );
    assert!(
        !stderr.contains("kubeconfig"),
        "the policy is read first: {stderr}"
    );
}

/// A fake API server that serves discovery and answers every other request with `rest`.
fn fake_with(rest: impl Fn(&str, &str) -> Reply + Send + Sync + 'static) -> FakeApiServer {
    FakeApiServer::start(move |method, path| match discovery(path) {
        Some(answer) => Reply::Answer(answer),
        None => rest(method, path),
    })
}

/// An empty metadata list, as the API server answers `list` with the metadata Accept header.
fn empty_list() -> Reply {
    Reply::Answer(Answer::json(
        200,
        serde_json::json!({
            "apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadataList",
            "metadata": {"resourceVersion": "1"}, "items": []
        }),
    ))
}

#[test]
fn break_glass_list_fails_when_the_api_server_fails_never_an_empty_listing() {
    let dir = temp_dir("list-500");
    let server = fake_with(|_, _| {
        Reply::Answer(Answer::status(
            500,
            "InternalError",
            "etcdserver: request timed out",
        ))
    });
    let kubeconfig = server.kubeconfig(&dir);
    let kubeconfig = kubeconfig.to_str().unwrap();
    // The connection flags before the command as after it, as kubectl's global flags.
    for args in [
        vec!["break-glass", "list", "--kubeconfig", kubeconfig],
        vec!["--kubeconfig", kubeconfig, "break-glass", "list"],
        vec![
            "--kubeconfig",
            kubeconfig,
            "break-glass",
            "list",
            "-A",
            "-o",
            "json",
        ],
    ] {
        let out = driftgate(&args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(5), "{args:?}: {stderr}");
        assert!(
            stderr.starts_with(
                "driftgate break-glass: listing break-glass windows failed: the API server answered 500 InternalError: etcdserver: request timed out"
            ),
            "{args:?}: {stderr}"
        );
        assert!(out.stdout.is_empty(), "{args:?}: {}", text(&out.stdout));
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn break_glass_list_names_the_kinds_rbac_kept_it_from_and_the_namespace_searched() {
    let dir = temp_dir("list-forbidden");
    let server = fake_with(|_, path| {
        if path.contains("/configmaps") {
            Reply::Answer(Answer::status(
                403,
                "Forbidden",
                "configmaps is forbidden: User \"carol\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"ctx-ns\"",
            ))
        } else {
            empty_list()
        }
    });
    let kubeconfig = server.kubeconfig(&dir);
    let kubeconfig = kubeconfig.to_str().unwrap();
    let out = driftgate(&["break-glass", "list", "--kubeconfig", kubeconfig]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(
        text(&out.stdout),
        "No break-glass windows in ctx-ns namespace.\n"
    );
    assert_eq!(
        stderr,
        "Not searched: carol may not list configmaps in ctx-ns namespace (Kubernetes RBAC), so windows on objects of that kind are not shown.\n"
    );
    // Deployments were listed in the context's namespace: the listing looked where it says.
    let requests = server.requests();
    assert!(
        requests
            .iter()
            .any(|r| r.starts_with("GET /apis/apps/v1/namespaces/ctx-ns/deployments?")),
        "{requests:?}"
    );

    // -o json|yaml: kubectl's List, empty items; -o name prints nothing.
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "metadata": {}, "items": []});
    for format in ["json", "yaml"] {
        let out = driftgate(&[
            "break-glass",
            "list",
            "-o",
            format,
            "--kubeconfig",
            kubeconfig,
        ]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let listed: Value = if format == "json" {
            serde_json::from_slice(&out.stdout).unwrap()
        } else {
            serde_saphyr::from_str(&text(&out.stdout)).unwrap()
        };
        assert_eq!(listed, list, "{format}");
    }
    let out = driftgate(&[
        "break-glass",
        "list",
        "-o",
        "name",
        "--kubeconfig",
        kubeconfig,
    ]);
    assert_eq!(text(&out.stdout), "");
    let out = driftgate(&["break-glass", "list", "-A", "--kubeconfig", kubeconfig]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "No break-glass windows in any namespace.\n"
    );
    let out = driftgate(&[
        "break-glass",
        "list",
        "-n",
        "prod",
        "--kubeconfig",
        kubeconfig,
    ]);
    assert_eq!(
        text(&out.stdout),
        "No break-glass windows in prod namespace.\n"
    );
    assert!(text(&out.stderr).contains(" in prod namespace (Kubernetes RBAC)"));
    // -n before the subcommand is its namespace too.
    let out = driftgate(&[
        "break-glass",
        "-n",
        "prod",
        "list",
        "--kubeconfig",
        kubeconfig,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "No break-glass windows in prod namespace.\n"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_empty_backlog_names_the_namespace_searched() {
    let dir = temp_dir("backlog-empty");
    let server = fake_with(|_, path| {
        Reply::Answer(if path.contains("/leases") {
            Answer::json(
                200,
                serde_json::json!({"apiVersion": "coordination.k8s.io/v1", "kind": "LeaseList", "metadata": {}, "items": []}),
            )
        } else {
            Answer::json(
                200,
                serde_json::json!({"apiVersion": "driftgate.dev/v1alpha1", "kind": "BackportRequirementList", "metadata": {}, "items": []}),
            )
        })
    });
    let kubeconfig = server.kubeconfig(&dir);
    let kubeconfig = kubeconfig.to_str().unwrap();
    for (args, expected) in [
        (
            vec!["backlog"],
            "Nothing to backport in ctx-ns namespace.\n",
        ),
        (
            vec!["backlog", "-n", "prod"],
            "Nothing to backport in prod namespace.\n",
        ),
        (
            vec!["backlog", "-A"],
            "Nothing to backport in any namespace.\n",
        ),
    ] {
        let out = driftgate(&[&args[..], &["--kubeconfig", kubeconfig]].concat());
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            text(&out.stderr)
        );
        assert_eq!(text(&out.stdout), expected, "{args:?}");
    }
    // -o json|yaml: kubectl's List, what backlog knows of the controllers beside its items.
    for format in ["json", "yaml"] {
        let out = driftgate(&["backlog", "-o", format, "--kubeconfig", kubeconfig]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let listed: Value = if format == "json" {
            serde_json::from_slice(&out.stdout).unwrap()
        } else {
            serde_saphyr::from_str(&text(&out.stdout)).unwrap()
        };
        assert_eq!(
            listed,
            serde_json::json!({"apiVersion": "v1", "kind": "List", "metadata": {}, "items": [], "silentControllers": []}),
            "{format}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn backlog_resolve_and_link_act_in_the_namespace_given_before_them() {
    let dir = temp_dir("backlog-n");
    let server = fake_with(|method, path| {
        Reply::Answer(if method == "POST" && path.contains("selfsubjectreviews") {
            Answer::json(
                201,
                serde_json::json!({
                    "apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview",
                    "metadata": {}, "status": {"userInfo": {"username": "alice"}}
                }),
            )
        } else {
            Answer::status(
                404,
                "NotFound",
                "backportrequirements.driftgate.dev \"deployment-api-1\" not found",
            )
        })
    });
    let kubeconfig = server.kubeconfig(&dir);
    let kubeconfig = kubeconfig.to_str().unwrap();
    let cases: [&[&str]; 3] = [
        &[
            "backlog",
            "-n",
            "other",
            "resolve",
            "deployment-api-1",
            "--note",
            "backported in gitops#412",
        ],
        &[
            "backlog",
            "-n",
            "other",
            "link",
            "deployment-api-1",
            "--url",
            "https://git.example/gitops/pull/412",
        ],
        &[
            "backlog",
            "resolve",
            "deployment-api-1",
            "-n",
            "other",
            "--note",
            "backported in gitops#412",
        ],
    ];
    for args in cases {
        let out = driftgate(&[args, &["--kubeconfig", kubeconfig]].concat());
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains("\"deployment-api-1\" in namespace other"),
            "{args:?}: {stderr}"
        );
    }
    let requests = server.requests();
    assert!(
        requests.iter().all(|r| !r.contains("/namespaces/ctx-ns/")),
        "the context's namespace was used: {requests:?}"
    );
    assert!(
        requests
            .iter()
            .any(|r| r.contains("/namespaces/other/backportrequirements/deployment-api-1")),
        "{requests:?}"
    );
    // -A names no record's namespace: refused before connecting.
    let out = driftgate(&[
        "backlog",
        "-A",
        "resolve",
        "x",
        "--note",
        "done in gitops#1",
        "--kubeconfig",
        kubeconfig,
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("-A does not apply; give its namespace with -n"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn request_timeout_gives_up_on_a_silent_server_with_a_sentence() {
    let dir = temp_dir("timeout");
    let server = FakeApiServer::start(|_, _| Reply::Silence);
    let kubeconfig = server.kubeconfig(&dir);
    let kubeconfig = kubeconfig.to_str().unwrap();
    for (args, waited) in [
        (
            vec![
                "backlog",
                "--request-timeout",
                "1s",
                "--kubeconfig",
                kubeconfig,
            ],
            "1s",
        ),
        // kubectl's forms: whole seconds, and the flag before the command.
        (
            vec![
                "--request-timeout",
                "1",
                "--kubeconfig",
                kubeconfig,
                "backlog",
            ],
            "1s",
        ),
        (
            vec![
                "--kubeconfig",
                kubeconfig,
                "version",
                "--request-timeout",
                "500ms",
            ],
            "500ms",
        ),
    ] {
        let started = std::time::Instant::now();
        let out = driftgate(&args);
        let stderr = text(&out.stderr);
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "{args:?}"
        );
        assert_eq!(out.status.code(), Some(3), "{args:?}: {stderr}");
        let doing = if args.contains(&"version") {
            "listing driftgate's Deployments"
        } else {
            "listing BackportRequirements"
        };
        assert!(
            stderr.contains(&format!(
                "{doing} failed: the API server at {} did not answer within --request-timeout {waited}; ",
                server.url
            )),
            "{args:?}: {stderr}"
        );
    }
    let out = driftgate(&[
        "backlog",
        "--request-timeout",
        "soon",
        "--kubeconfig",
        kubeconfig,
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("\"soon\" is not a duration"),
        "{}",
        text(&out.stderr)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn connection_flags_before_a_command_that_uses_no_cluster_are_refused() {
    let out = driftgate(&["--as", "alice", "policy", "check", "policies/example.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr)
            .starts_with("driftgate: --as was given before policy, which uses no cluster"),
        "{}",
        text(&out.stderr)
    );
    let out = driftgate(&["--request-timeout", "5s", "serve", "--dev"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).starts_with(
            "driftgate: --request-timeout was given before serve, which does not take it"
        ),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_clean_scan_names_the_namespace_it_scanned() {
    let dir = temp_dir("scan-empty");
    let server = fake_with(|_, path| {
        let name = path.split('?').next().unwrap_or(path);
        Reply::Answer(match name.strip_prefix("/api/v1/namespaces/") {
            Some(ns) if !ns.contains('/') => Answer::json(
                200,
                serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
            ),
            _ => Answer::json(
                200,
                serde_json::json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": "1"}, "items": []}),
            ),
        })
    });
    let kubeconfig = server.kubeconfig(&dir);
    let out = driftgate(&[
        "scan",
        "--policy",
        "policies/example.yaml",
        "-n",
        "prod-payments",
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
    ]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.starts_with("No drift in prod-payments namespace: "),
        "{stdout}"
    );
    let out = driftgate(&[
        "scan",
        "--policy",
        "policies/example.yaml",
        "-n",
        "prod-payments",
        "-o",
        "json",
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["apiVersion"], "v1", "{report}");
    assert_eq!(report["kind"], "List", "{report}");
    assert_eq!(report["items"], serde_json::json!([]), "{report}");
    assert_eq!(report["drift"], false, "{report}");
    assert_eq!(
        report["scanned"][0]["namespace"], "prod-payments",
        "{report}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_namespace_wide_window_must_be_named_and_a_bare_open_is_refused() {
    let dir = temp_dir("no-target");
    let kubeconfig = dead_kubeconfig(&dir);
    let kubeconfig = kubeconfig.to_str().unwrap();
    // The dead server proves nothing was sent: connecting would have been exit 3.
    let bare = [&OPEN[..2], &OPEN[3..], &["--kubeconfig", kubeconfig]].concat();
    let out = driftgate(&bare);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(
        stderr,
        "driftgate break-glass: open needs what the window is on: KIND/NAME for one object (`driftgate break-glass open deployment/api -n prod ...`), or namespace/NAME for every object in the namespace (`driftgate break-glass open namespace/prod ...`)\n"
    );
    let out = driftgate(&["break-glass", "close", "--kubeconfig", kubeconfig]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).starts_with("driftgate break-glass: close needs what the window is on: KIND/NAME for one object (`driftgate break-glass close deployment/api -n NS ...`)"),
        "{}",
        text(&out.stderr)
    );
    let out = driftgate(
        &[
            &OPEN[..2],
            &["namespace/prod", "-n", "dev"],
            &OPEN[5..],
            &["--kubeconfig", kubeconfig],
        ]
        .concat(),
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stderr),
        "driftgate break-glass: namespace/prod is the namespace-wide window of prod, but -n says dev: give one of them\n"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A fake cluster where deployment prod/api and namespace prod exist and take patches.
fn fake_objects() -> FakeApiServer {
    fake_with(|_, path| {
        let object = if path.starts_with("/apis/apps/v1/namespaces/prod/deployments/api") {
            serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "api", "namespace": "prod"}})
        } else if path.starts_with("/api/v1/namespaces/prod") {
            serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "prod"}})
        } else {
            return Reply::Answer(Answer::status(404, "NotFound", "not found"));
        };
        Reply::Answer(Answer::json(200, object))
    })
}

#[test]
fn break_glass_open_dry_run_shows_the_label_and_stores_nothing() {
    let dir = temp_dir("dry-run");
    let server = fake_objects();
    let kubeconfig = server.kubeconfig(&dir);
    let kubeconfig = kubeconfig.to_str().unwrap();
    let out = driftgate(&[OPEN, &["--dry-run", "--kubeconfig", kubeconfig]].concat());
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines[0],
        "break-glass window would open on deployment/api in namespace prod (server dry run: admitted, with every admission webhook asked; nothing was stored):",
        "{stdout}"
    );
    assert!(
        lines[1].starts_with("  label       driftgate.dev/break-glass=20"),
        "{stdout}"
    );
    assert!(lines[1].contains("(until 20"), "{stdout}");
    assert_eq!(
        lines[2], "  annotation  driftgate.dev/break-glass-reason=INC-1: api OOM",
        "{stdout}"
    );
    assert!(stdout.contains("without --dry-run"), "{stdout}");
    let patches: Vec<String> = server
        .requests()
        .into_iter()
        .filter(|r| r.starts_with("PATCH "))
        .collect();
    assert_eq!(patches.len(), 1, "{patches:?}");
    assert!(
        patches[0].starts_with("PATCH /apis/apps/v1/namespaces/prod/deployments/api?")
            && patches[0].contains("dryRun=All"),
        "{patches:?}"
    );

    // Client-side: the object is looked up, nothing is written.
    let server = fake_objects();
    let kubeconfig = server.kubeconfig(&dir);
    let kubeconfig = kubeconfig.to_str().unwrap();
    let out = driftgate(&[OPEN, &["--dry-run=client", "--kubeconfig", kubeconfig]].concat());
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("(client dry run: nothing was sent but a lookup"));
    let requests = server.requests();
    assert!(
        requests
            .iter()
            .any(|r| r.starts_with("GET /apis/apps/v1/namespaces/prod/deployments/api")),
        "{requests:?}"
    );
    assert!(
        !requests.iter().any(|r| r.starts_with("PATCH")),
        "{requests:?}"
    );
    let out = driftgate(&[OPEN, &["--dry-run=none", "--kubeconfig", kubeconfig]].concat());
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_namespace_wide_window_opens_on_the_namespace_it_names() {
    let dir = temp_dir("namespace-window");
    let server = fake_objects();
    let kubeconfig = server.kubeconfig(&dir);
    let kubeconfig = kubeconfig.to_str().unwrap();
    let out = driftgate(
        &[
            &OPEN[..2],
            &["namespace/prod"],
            &OPEN[5..],
            &["--kubeconfig", kubeconfig],
        ]
        .concat(),
    );
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        stdout.starts_with("break-glass window open on namespace prod until "),
        "{stdout}"
    );
    assert!(
        stdout.contains("`driftgate break-glass close namespace/prod` ends the window early"),
        "{stdout}"
    );
    let requests = server.requests();
    // The namespace it names, not the context's (ctx-ns).
    assert!(
        requests
            .iter()
            .any(|r| r.starts_with("PATCH /api/v1/namespaces/prod?")),
        "{requests:?}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn run_as_kubectl_driftgate_every_hint_says_kubectl_driftgate() {
    let dir = temp_dir("plugin-hints");
    let plugin = dir.join("kubectl-driftgate");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_driftgate"), &plugin).unwrap();
    let server = fake_objects();
    let kubeconfig = server.kubeconfig(&dir);
    let kubeconfig = kubeconfig.to_str().unwrap();
    let run = |args: &[&str]| {
        Command::new(&plugin)
            .args(args)
            .args(["--kubeconfig", kubeconfig])
            .output()
            .unwrap()
    };
    let out = run(OPEN);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        stdout.contains("Next: `kubectl driftgate backlog -n prod` lists what must be backported; `kubectl driftgate break-glass close deployment/api -n prod` ends the window early."),
        "{stdout}"
    );
    assert!(
        !stdout
            .replace("kubectl driftgate", "")
            .contains("`driftgate"),
        "{stdout}"
    );
    let out = run(&[OPEN, &["--dry-run"]].concat());
    assert!(
        text(&out.stdout).contains("(`kubectl driftgate break-glass open ... --for"),
        "{}",
        text(&out.stdout)
    );
    let out = run(&[&OPEN[..2], &OPEN[3..]].concat());
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(
        stderr.starts_with("kubectl driftgate break-glass: open needs what the window is on")
            && stderr.contains("(`kubectl driftgate break-glass open deployment/api -n prod ...`)")
            && stderr.contains("(`kubectl driftgate break-glass open namespace/prod ...`)"),
        "{stderr}"
    );
    // The offline commands' errors too.
    let offline = |args: &[&str]| {
        Command::new(&plugin)
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .unwrap()
    };
    let out = offline(&[
        "eval",
        "--policy",
        "policies/example.yaml",
        "nonexistent.json",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).starts_with("kubectl driftgate eval: "),
        "{}",
        text(&out.stderr)
    );
    let out = offline(&["policy", "test", "/nonexistent"]);
    assert!(
        text(&out.stderr).starts_with("kubectl driftgate policy test: "),
        "{}",
        text(&out.stderr)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// What `kubectl_complete-driftgate ARGS... WORD` prints, as kubectl runs it.
fn completions(args: &[&str]) -> (Vec<String>, String) {
    let dir = temp_dir(&format!("plugin-completion-{}", args.len()));
    let completer = dir.join("kubectl_complete-driftgate");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_driftgate"), &completer).unwrap();
    let out = Command::new(&completer).args(args).output().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{args:?}: {}",
        text(&out.stderr)
    );
    let stdout = text(&out.stdout);
    let mut lines: Vec<String> = stdout.lines().map(str::to_owned).collect();
    let directive = lines.pop().unwrap_or_default();
    let values = lines
        .into_iter()
        .map(|l| l.split('\t').next().unwrap().to_owned())
        .collect();
    (values, directive)
}

#[test]
fn kubectl_complete_driftgate_answers_kubectl_as_cobra_does() {
    let (values, directive) = completions(&[""]);
    assert_eq!(directive, ":4");
    for subcommand in ["break-glass", "backlog", "scan", "version", "completion"] {
        assert!(values.contains(&subcommand.to_owned()), "{values:?}");
    }
    assert!(!values.contains(&"help".to_owned()), "{values:?}");
    let (values, directive) = completions(&["break-glass", ""]);
    assert_eq!(
        (values, directive.as_str()),
        (vec!["open".into(), "close".into(), "list".into()], ":4")
    );
    let (values, _) = completions(&["--context", "prod", "back"]);
    assert_eq!(values, vec!["backlog", "backport"]);
    let (values, _) = completions(&["break-glass", "open", "--dr"]);
    assert_eq!(values, vec!["--dry-run"]);
    let (values, _) = completions(&["break-glass", "open", "--dry-run="]);
    assert_eq!(values, vec!["--dry-run=server", "--dry-run=client"]);
    let (values, directive) = completions(&["backlog", "-o", ""]);
    assert_eq!(
        (values, directive.as_str()),
        (
            vec!["table", "wide", "json", "yaml", "name"]
                .into_iter()
                .map(String::from)
                .collect(),
            ":4"
        )
    );
    // A flag taking a file, or eval's review files: the shell completes file names.
    let (values, directive) = completions(&["backlog", "--kubeconfig", ""]);
    assert_eq!((values.len(), directive.as_str()), (0, ":0"));
    let (values, directive) = completions(&["eval", ""]);
    assert_eq!((values.len(), directive.as_str()), (0, ":0"));
    let (values, _) = completions(&["backlog", "--all"]);
    assert_eq!(values, vec!["--all-namespaces", "--all"]);
}

/// Every subcommand's path as its man page names it (`driftgate-break-glass-open`), from the
/// same definition as --help, hidden commands left out.
fn subcommand_pages(command: &clap::Command, prefix: &str, pages: &mut Vec<String>) {
    let name = format!("{prefix}{}", command.get_name());
    pages.push(name.clone());
    for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
        if sub.get_name() != "help" {
            subcommand_pages(sub, &format!("{name}-"), pages);
        }
    }
}

#[test]
fn man_writes_a_page_for_every_subcommand() {
    use clap::CommandFactory;
    let dir = temp_dir("man");
    let out = driftgate(&["man", dir.join("pages").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let mut expected = Vec::new();
    subcommand_pages(&driftgate::cli::Cli::command(), "", &mut expected);
    assert!(expected.contains(&"driftgate-break-glass-open".to_owned()));
    assert!(expected.contains(&"driftgate-backlog-resolve".to_owned()));
    let mut written: Vec<String> = std::fs::read_dir(dir.join("pages"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    written.sort();
    let mut wanted: Vec<String> = expected.iter().map(|p| format!("{p}.1")).collect();
    wanted.sort();
    assert_eq!(written, wanted);
    // Each page is roff with its title, and documents its flags.
    let open = std::fs::read_to_string(dir.join("pages/driftgate-break-glass-open.1")).unwrap();
    assert!(open.contains(".TH driftgate-break-glass-open 1"), "{open}");
    assert!(open.contains("\\-\\-dry\\-run"), "{open}");
    // One path a line on stdout, as written.
    assert_eq!(text(&out.stdout).lines().count(), expected.len());
    // A directory that cannot be made is a sentence, not a panic.
    let blocked = dir.join("file");
    std::fs::write(&blocked, "").unwrap();
    let out = driftgate(&["man", blocked.join("pages").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(5), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).starts_with("driftgate man: cannot make the directory "),
        "{}",
        text(&out.stderr)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
