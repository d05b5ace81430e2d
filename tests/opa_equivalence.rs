//! The load benchmark's peer, OPA with the Rego of `tests/benches/opa/policy`, decides every
//! fixture (`tests/fixtures/*.json`) as driftgate does, or differs exactly as
//! `tests/benches/opa/differences.json` lists with its reason. `load.sh` checks this before it
//! measures; here it runs in `cargo test`, so that the Rego cannot drift from driftgate between
//! benchmark runs. OPA itself evaluates the Rego (pinned, built from the Go module proxy by
//! `tests/benches/opa/build.sh`, cached under `~/.cache/driftgate/tools`); driftgate decides
//! with `driftgate eval`, the webhook's own reading, with no Namespace objects and no parents,
//! as `serve --no-kube` in the benchmark does.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use driftgate::timefmt::{format_expiry, parse_expiry};
use jiff::Timestamp;
use serde_json::{Value, json};

/// The time the fixtures were written for: their break-glass expiries are moved by the time
/// since, as `loadlib.py shift-fixtures` does, since OPA's `time.now_ns()` is the real time.
const FIXTURE_NOW: &str = "2026-11-30T09:00:00Z";
const LABEL: &str = "driftgate.dev/break-glass";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// How a decision reads in `differences.json` (and in the benchmark's `equivalence.md`).
fn outcome(review: &Value) -> String {
    let response = &review["response"];
    let allowed = response["allowed"].as_bool();
    let rule = response["auditAnnotations"]["rule"].as_str().unwrap_or("");
    match allowed {
        Some(true) => format!("allowed ({rule})"),
        Some(false) => format!("denied ({rule})"),
        None => format!("no answer: {review}"),
    }
}

/// The fixtures, by file name, with every well-formed break-glass expiry moved by `shift`.
fn shifted_fixtures(shift: jiff::SignedDuration) -> BTreeMap<String, Value> {
    let mut fixtures = BTreeMap::new();
    for entry in std::fs::read_dir(root().join("tests/fixtures")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let mut review: Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for side in ["object", "oldObject"] {
            // `pointer_mut`, not indexing, which would add the keys it does not find.
            let pointer = format!(
                "/request/{side}/metadata/labels/{}",
                LABEL.replace('/', "~1")
            );
            let Some(label) = review.pointer_mut(&pointer) else {
                continue;
            };
            // A malformed expiry ("tomorrow") stays as it is: both must refuse it so.
            if let Some(expiry) = label.as_str().and_then(|v| parse_expiry(v).ok()) {
                *label = json!(format_expiry(expiry.checked_add(shift).unwrap()));
            }
        }
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        fixtures.insert(name, review);
    }
    fixtures
}

fn run(command: &mut Command) -> String {
    let output = command.output().unwrap();
    assert!(
        output.status.success(),
        "{command:?} failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// driftgate's decisions, in the order of `names`.
fn driftgate_outcomes(dir: &Path, names: &[&String], now: Timestamp) -> Vec<String> {
    let files: Vec<PathBuf> = names.iter().map(|n| dir.join(n)).collect();
    let stdout = run(Command::new(env!("CARGO_BIN_EXE_driftgate"))
        .arg("eval")
        .arg("--policy")
        .arg(root().join("policies/example.yaml"))
        .arg("--now")
        .arg(now.to_string())
        .args(&files));
    let outcomes: Vec<String> = stdout
        .lines()
        .map(|line| outcome(&serde_json::from_str(line).unwrap()))
        .collect();
    assert_eq!(
        outcomes.len(),
        names.len(),
        "one answer per fixture: {stdout}"
    );
    outcomes
}

/// OPA's decisions, by fixture: one evaluation of the policy's `main` with each fixture as input.
fn opa_outcomes(dir: &Path, fixtures: &BTreeMap<String, Value>) -> BTreeMap<String, String> {
    let opa = run(Command::new("bash").arg(root().join("tests/benches/opa/build.sh")));
    let data = dir.join("equivalence-data.json");
    std::fs::write(&data, json!({"equivalence_fixtures": fixtures}).to_string()).unwrap();
    let stdout = run(Command::new(opa.trim())
        .args(["eval", "--format", "json", "--data"])
        .arg(root().join("tests/benches/opa/policy"))
        .arg("--data")
        .arg(&data)
        .arg(
            "answers := {name: answer | some name, review in data.equivalence_fixtures; \
             answer := data.driftgate.main with input as review}",
        ));
    let result: Value = serde_json::from_str(&stdout).unwrap();
    let answers = result["result"][0]["bindings"]["answers"]
        .as_object()
        .unwrap_or_else(|| panic!("OPA gave no answers: {stdout}"));
    answers
        .iter()
        .map(|(name, answer)| (name.clone(), outcome(answer)))
        .collect()
}

#[test]
fn the_opa_peer_decides_every_fixture_as_driftgate_or_as_its_listed_differences_say() {
    let now = Timestamp::from_second(Timestamp::now().as_second()).unwrap();
    let shift = now.duration_since(FIXTURE_NOW.parse::<Timestamp>().unwrap());
    let fixtures = shifted_fixtures(shift);
    assert!(
        fixtures.len() >= 50,
        "only {} fixtures in tests/fixtures",
        fixtures.len()
    );
    let dir = tempfile::tempdir().unwrap();
    for (name, review) in &fixtures {
        std::fs::write(dir.path().join(name), review.to_string()).unwrap();
    }
    let names: Vec<&String> = fixtures.keys().collect();
    let driftgate = driftgate_outcomes(dir.path(), &names, now);
    let opa = opa_outcomes(dir.path(), &fixtures);

    let listed: Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("tests/benches/opa/differences.json")).unwrap(),
    )
    .unwrap();
    let listed: BTreeMap<&str, &Value> = listed["differences"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| (d["fixture"].as_str().unwrap(), d))
        .collect();
    let mut failures = Vec::new();
    let mut agree = 0;
    for (name, ours) in names.iter().zip(&driftgate) {
        let theirs = opa.get(name.as_str()).map_or("no answer", String::as_str);
        match listed.get(name.as_str()) {
            None if theirs == ours => agree += 1,
            None => failures.push(format!(
                "{name}: driftgate {ours}, OPA {theirs}, and differences.json does not list it"
            )),
            Some(_) if theirs == ours => failures.push(format!(
                "{name}: listed in differences.json, but both decide {ours} now (remove it)"
            )),
            Some(d) if d["driftgate"] != ours.as_str() || d["opa"] != theirs => {
                failures.push(format!(
                    "{name}: listed as driftgate {} and OPA {}, but driftgate {ours} and OPA {theirs}",
                    d["driftgate"], d["opa"]
                ))
            }
            Some(_) => {}
        }
    }
    for fixture in listed.keys() {
        if !fixtures.contains_key(*fixture) {
            failures.push(format!(
                "{fixture}: listed in differences.json, but no such fixture"
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "the Rego peer and driftgate disagree ({agree} of {} fixtures alike):\n{}",
        fixtures.len(),
        failures.join("\n")
    );
    println!(
        "{agree} of {} fixtures decided alike, {} differ as listed",
        fixtures.len(),
        listed.len()
    );
}
