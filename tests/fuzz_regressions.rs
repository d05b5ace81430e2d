//! Replays every input that once crashed a fuzz target (`tests/fuzz/regressions/TARGET/`) and
//! the committed, minimized corpus (`tests/fuzz/corpus/TARGET/`) through the targets' own entry
//! points, on stable and without libFuzzer: what the fuzzer found stays fixed, and a change that
//! breaks on an input the fuzzer already reached fails here first. See tests/fuzz/README.md.

#[path = "fuzz/src/lib.rs"]
mod entry;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

fn inputs(kind: &str, target: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fuzz")
        .join(kind)
        .join(target);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .map(|entry| entry.expect("a directory entry reads").path())
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    files
}

/// Runs `entry` on every file, and fails naming each file that panicked (with its message),
/// rather than stopping at the first.
fn replay(files: &[PathBuf], entry: fn(&[u8])) {
    let mut failures = Vec::new();
    for file in files {
        let data = std::fs::read(file).expect("an input file reads");
        if let Err(panic) = catch_unwind(AssertUnwindSafe(|| entry(&data))) {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_default();
            failures.push(format!("{}: {message}", file.display()));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} inputs failed:\n{}",
        failures.len(),
        files.len(),
        failures.join("\n")
    );
}

fn corpus(target: &str) -> Vec<PathBuf> {
    let files = inputs("corpus", target);
    // An empty or misplaced corpus would make the replay pass without running anything.
    assert!(
        files.len() >= 5,
        "the committed corpus of {target} holds {} files; expected it under tests/fuzz/corpus/{target}",
        files.len()
    );
    files
}

#[test]
fn admission_review_regressions() {
    replay(
        &inputs("regressions", "admission_review"),
        entry::admission_review,
    );
}

#[test]
fn admission_review_corpus() {
    replay(&corpus("admission_review"), entry::admission_review);
}

#[test]
fn admission_review_structured_regressions() {
    replay(
        &inputs("regressions", "admission_review_structured"),
        entry::admission_review_structured,
    );
}

#[test]
fn admission_review_structured_corpus() {
    replay(
        &corpus("admission_review_structured"),
        entry::admission_review_structured,
    );
}

#[test]
fn policy_load_regressions() {
    replay(&inputs("regressions", "policy_load"), entry::policy_load);
}

#[test]
fn policy_load_corpus() {
    replay(&corpus("policy_load"), entry::policy_load);
}

/// The entry points take the real paths without a panic: a body that is not a review is
/// refused, the fixtures are decided, a broken policy is reported, and the structure-aware
/// target changes the fixture it starts from.
#[test]
fn entry_points_run_the_real_paths() {
    entry::admission_review(b"not json");
    for (_, fixture) in entry::FIXTURES {
        entry::admission_review(fixture.as_bytes());
    }
    entry::policy_load(b"apiVersion: driftgate.dev/v1alpha1\nkind: GatePolicy\n");
    let body = entry::structured_body(&[0, 3, 1, 5, 2, 2, 0, 1]);
    assert_ne!(body, entry::FIXTURES[0].1.as_bytes());
}

/// The harness's check of an answer is not vacuous: a denial without a reason fails it.
#[test]
#[should_panic(expected = "a denial without a reason")]
fn a_wrong_answer_fails_the_check() {
    let request = driftgate::review::parse_review(entry::FIXTURES[0].1.as_bytes()).unwrap();
    let answer = serde_json::json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": request.uid, "allowed": false, "status": {"code": 403}},
    });
    entry::check_answer(&request, &answer);
}
