//! `driftgate policy check` through the real binary: every problem of every file in one run,
//! the near field name, other engines' documents named; and `serve`'s duration flags.

mod common;

use std::path::Path;

use common::binary::driftgate;
use common::scratch::scratch_dir;

fn check(paths: &[&Path]) -> (Option<i32>, String) {
    let mut args = vec!["policy", "check"];
    args.extend(paths.iter().map(|p| p.to_str().unwrap()));
    let out = driftgate(&args);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// Two unknown fields (one a typo of a known field), a bad glob, and, in later documents,
/// broken YAML and a problem only the semantic checks see; then, in another file, a misspelt
/// value and a misspelt required field (so it is missing too).
const FIRST: &str = r#"apiVersion: driftgate.dev/v1alpha1
kind: GatePolicy
metadata: {name: first}
spec:
  namespaces: {include: ["team-["]}
  colour: blue
  controllers:
    - {name: flux, usernames: [flux]}
  breakGlass:
    maxDuration: 1h
    lable: example.com/bg
    openers: {groups: [sre]}
---
apiVersion: driftgate.dev/v1alpha1
kind: GatePolicy
metadata: {name: second
---
apiVersion: driftgate.dev/v1alpha1
kind: GatePolicy
metadata: {name: third}
spec:
  namespaces: {include: [team-c]}
  operations: []
"#;

const SECOND: &str = r#"apiVersion: driftgate.dev/v1alpha1
kind: GatePolicy
metadata: {name: fourth}
spec:
  mode: Audti
  namespaces: {include: [team-d]}
  breakGlass:
    max_duration: 1h
    openers: {groups: [sre]}
"#;

#[test]
fn one_run_reports_every_problem_of_every_file_and_document() {
    let dir = scratch_dir("policy-check-every");
    let first = write(dir.path(), "first.yaml", FIRST);
    let second = write(dir.path(), "second.yaml", SECOND);
    let (code, stderr) = check(&[&first, &second]);
    assert_eq!(code, Some(1), "{stderr}");
    let (first, second) = (first.display(), second.display());
    let expected = [
        format!(
            "{first}:6: spec.colour: unknown field `colour`; the fields here are mode, owner, namespaces"
        ),
        format!(
            "{first}:11: spec.breakGlass.lable: unknown field `lable`; did you mean `label`? (document 1, policy first)"
        ),
        format!("{first}:5: spec.namespaces.include[0]: \"team-[\" is not a valid glob"),
        format!("{first}:16: (yaml): "),
        format!("{first}:23: spec.operations: is empty"),
        format!(
            "{second}:8: spec.breakGlass.max_duration: unknown field `max_duration`; did you mean `maxDuration`?"
        ),
    ];
    let lines: Vec<&str> = stderr.lines().collect();
    for line in &expected {
        assert!(
            lines.iter().any(|l| l.starts_with(line.as_str())),
            "missing {line:?} in:\n{stderr}"
        );
    }
    assert!(stderr.contains("(document 2)"), "{stderr}");
    assert!(
        stderr
            .contains(": spec.breakGlass: missing field `maxDuration` (document 1, policy fourth)"),
        "{stderr}"
    );
    assert!(stderr.contains("(document 3, policy third)"), "{stderr}");
    assert_eq!(lines.last(), Some(&"8 problems found"), "{stderr}");
}

#[test]
fn other_engines_documents_and_exported_objects_are_named() {
    let dir = scratch_dir("policy-check-foreign");
    let documents = [
        (
            "kyverno.yaml",
            "apiVersion: kyverno.io/v1\nkind: ClusterPolicy\nmetadata: {name: k}\nspec: {rules: []}\n",
            "this is a Kyverno ClusterPolicy (kyverno.io/v1), which Kyverno enforces, not a driftgate policy",
        ),
        (
            "kyverno-ns.yaml",
            "apiVersion: kyverno.io/v1\nkind: Policy\nmetadata: {name: k, namespace: a}\nspec: {rules: []}\n",
            "this is a Kyverno Policy (kyverno.io/v1)",
        ),
        (
            "template.yaml",
            "apiVersion: templates.gatekeeper.sh/v1\nkind: ConstraintTemplate\nmetadata: {name: k8srequiredlabels}\nspec: {}\n",
            "this is an OPA Gatekeeper ConstraintTemplate (templates.gatekeeper.sh/v1)",
        ),
        (
            "constraint.yaml",
            "apiVersion: constraints.gatekeeper.sh/v1beta1\nkind: K8sRequiredLabels\nmetadata: {name: owner}\nspec: {}\n",
            "this is an OPA Gatekeeper constraint (K8sRequiredLabels, constraints.gatekeeper.sh/v1beta1)",
        ),
        (
            "vap.yaml",
            "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicy\nmetadata: {name: v}\nspec: {validations: []}\n",
            "this is a Kubernetes ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1), which the API server applies itself",
        ),
        (
            "exported.yaml",
            "apiVersion: driftgate.dev/v1alpha1\nkind: GatePolicy\nmetadata:\n  name: e\n  uid: 3f1c\n  generation: 2\nspec:\n  namespaces: {include: [team-e]}\n  operations: []\nstatus: {conditions: []}\n",
            "this is a GatePolicy object as the API server returns it (it has metadata.uid, metadata.generation, status), not a policy file",
        ),
    ];
    for (name, text, sentence) in documents {
        let path = write(dir.path(), name, text);
        let (code, stderr) = check(&[&path]);
        assert_eq!(code, Some(1), "{name}: {stderr}");
        let first = stderr.lines().next().unwrap_or_default();
        assert!(first.contains(sentence), "{name}: {stderr}");
        assert!(
            first.contains("README.md, \"The policy\""),
            "{name}: {stderr}"
        );
        if name != "exported.yaml" {
            assert!(first.contains("driftgate.dev/v1alpha1"), "{name}: {stderr}");
        }
    }
    // The exported object's spec is checked as a file's would be.
    let (_, stderr) = check(&[&dir.path().join("exported.yaml")]);
    assert!(stderr.contains(":9: spec.operations: is empty"), "{stderr}");
    assert!(stderr.ends_with("2 problems found\n"), "{stderr}");
}

#[test]
fn serve_refuses_a_zero_timeout_and_a_lease_in_fractions_with_a_sentence() {
    let base = [
        "serve",
        "--no-kube",
        "--policy",
        "policies/example.yaml",
        "--tls-cert",
        "c.pem",
        "--tls-key",
        "k.pem",
    ];
    for (flag, value, sentence) in [
        (
            "--request-timeout",
            "0",
            "\"0\" is zero, which means nothing for this flag; write a duration such as 10s",
        ),
        ("--reload-interval", "soon", "\"soon\" is not a duration ("),
        (
            "--leader-lease-duration",
            "1500ms",
            "\"1500ms\" is not whole seconds of at least 2s",
        ),
    ] {
        let out = driftgate(&[&base[..], &[flag, value]].concat());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag}: {stderr}");
        assert!(
            stderr.contains(&format!("invalid value '{value}' for '{flag} <DURATION>'")),
            "{flag}: {stderr}"
        );
        assert!(stderr.contains(sentence), "{flag}: {stderr}");
    }
}

const SMALL: &str = "apiVersion: driftgate.dev/v1alpha1
kind: GatePolicy
metadata:
  name: NAME
spec:
  namespaces: {include: [\"prod-*\"]}
  controllers:
    - name: flux
      usernames: [\"system:serviceaccount:flux-system:kustomize-controller\"]
  breakGlass:
    maxDuration: 2h
    openers: {groups: [\"sre-oncall\"]}
";

#[test]
fn a_reused_name_is_reported_at_its_line_beside_the_files_other_problems() {
    let dir = scratch_dir("duplicate-names");
    let first = write(dir.path(), "a.yaml", &SMALL.replace("NAME", "shop"));
    // The second file reuses the name in its second document, and its first document has
    // another problem: both are reported.
    let second = write(
        dir.path(),
        "b.yaml",
        &format!(
            "{}---\n{}",
            SMALL.replace("NAME", "other").replace("2h", "4x"),
            SMALL.replace("NAME", "shop")
        ),
    );
    let (code, stderr) = check(&[&first, &second]);
    assert_eq!(code, Some(1), "{stderr}");
    let second_name = second.display();
    assert!(
        stderr.contains(&format!(
            "{second_name}:11: spec.breakGlass.maxDuration: \"4x\" is not a duration"
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!(
            "{second_name}:17: metadata.name: policy name \"shop\" is already used at {}:4 (document 1); names must be unique (document 2, policy shop)",
            first.display()
        )),
        "{stderr}"
    );
    assert!(stderr.contains("2 problems found"), "{stderr}");
    assert!(!stderr.contains(":0:"), "{stderr}");

    // Within one file too.
    let twice = write(
        dir.path(),
        "twice.yaml",
        &format!(
            "{}---\n{}",
            SMALL.replace("NAME", "shop"),
            SMALL.replace("NAME", "shop")
        ),
    );
    let (code, stderr) = check(&[&twice]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.starts_with(&format!(
            "{}:17: metadata.name: policy name \"shop\" is already used at {}:4 (document 1)",
            twice.display(),
            twice.display()
        )),
        "{stderr}"
    );
}

#[test]
fn dash_checks_the_policies_on_standard_input() {
    let run = |args: &[&str], stdin: &str| {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_driftgate"))
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::io::Write::write_all(&mut child.stdin.take().unwrap(), stdin.as_bytes()).unwrap();
        child.wait_with_output().unwrap()
    };
    let example = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("policies/example.yaml"),
    )
    .unwrap();
    let out = run(&["policy", "check", "-"], &example);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.starts_with("ok: 6 policies from 1 file: "),
        "{stdout}"
    );

    // Problems on standard input are named so, with their lines; files beside it still count.
    let out = run(
        &["policy", "check", "policies/example.yaml", "-"],
        &SMALL.replace("NAME", "production").replace("2h", "4x"),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("standard input:11: spec.breakGlass.maxDuration: \"4x\" is not a duration"),
        "{stderr}"
    );
    assert!(
        stderr.contains("standard input:4: metadata.name: policy name \"production\" is already used at policies/example.yaml:"),
        "{stderr}"
    );
}

#[test]
fn a_quoted_string_where_a_boolean_belongs_is_refused_not_read_as_yaml_1_1() {
    let dir = scratch_dir("quoted-bool");
    let example = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("policies/example.yaml"),
    )
    .unwrap();
    assert!(example.contains("    holdController: true\n"));
    assert!(example.contains("      heldByWindows: false\n"));
    // Each quoted spelling, in a plain bool field and in a Spanned one, is refused at its line.
    for (from, to, field) in [
        (
            "    holdController: true\n",
            "    holdController: \"no\"\n",
            "spec.breakGlass.holdController: \"no\"",
        ),
        (
            "    holdController: true\n",
            "    holdController: 'true'\n",
            "spec.breakGlass.holdController: \"true\"",
        ),
        (
            "      heldByWindows: false\n",
            "      heldByWindows: \"false\"\n",
            "spec.controllers[1].heldByWindows: \"false\"",
        ),
    ] {
        let text = example.replacen(from, to, 1);
        let line = text[..text.find(to).unwrap()].lines().count() + 1;
        let file = write(dir.path(), "quoted.yaml", &text);
        let (code, stderr) = check(&[&file]);
        assert_eq!(code, Some(1), "{to}: {stderr}");
        assert!(
            stderr.contains(&format!(
                "{}:{line}: {field} is a string, not a boolean; write true or false, unquoted",
                file.display()
            )),
            "{to}: {stderr}"
        );
    }
    // Unquoted, both spellings still read (YAML 1.1's `no` too, as Kubernetes reads it).
    let unquoted = write(
        dir.path(),
        "unquoted.yaml",
        &example.replacen("    holdController: true\n", "    holdController: yes\n", 1),
    );
    let (code, stderr) = check(&[&unquoted]);
    assert_eq!(code, Some(0), "{stderr}");
}
