//! The offline tools, run as the real binary: `eval`, `policy check`, `policy test`.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

fn driftgate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_driftgate"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("the driftgate binary runs")
}

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
    assert!(text(&out.stdout).starts_with("ok: 3 policies"));

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
    assert!(stdout.contains("ok: 1 policy"), "{stdout}");
}
