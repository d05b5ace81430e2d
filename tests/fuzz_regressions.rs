//! Replays every input that once crashed a fuzz target (`tests/fuzz/regressions/TARGET/`) and
//! the committed, minimized corpus (`tests/fuzz/corpus/TARGET/`) through the targets' own entry
//! points, on stable and without libFuzzer: what the fuzzer found stays fixed, and a change that
//! breaks on an input the fuzzer already reached fails here first. See tests/fuzz/README.md.
//!
//! A replay of nothing passes, so every folder this reads must exist and hold inputs: a corpus
//! folder missing, empty or misnamed fails, and so does a regressions folder that names no
//! target or holds no file. Only targets that ever crashed have a regressions folder.

#[path = "fuzz/src/lib.rs"]
mod entry;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

/// A fuzz target: the name of its folders under `corpus/` and `regressions/`, and its entry.
type Target = (&'static str, fn(&[u8]));

/// The fuzz targets.
const TARGETS: &[Target] = &[
    ("admission_review", entry::admission_review),
    (
        "admission_review_structured",
        entry::admission_review_structured,
    ),
    ("policy_load", entry::policy_load),
];

fn fuzz_dir(kind: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fuzz")
        .join(kind)
}

/// The files in `dir`, sorted; fails with a sentence when the folder cannot be read or holds
/// no file, since replaying it would then pass having run nothing.
fn inputs(dir: &Path) -> Vec<PathBuf> {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|error| {
        panic!(
            "{}: the folder of fuzz inputs cannot be read ({error}); a replay of it would run nothing",
            dir.display()
        )
    });
    let mut files: Vec<PathBuf> = entries
        .map(|entry| entry.expect("a directory entry reads").path())
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    assert!(
        !files.is_empty(),
        "{} holds no input file; a replay of it would run nothing",
        dir.display()
    );
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

/// The entry point of the target `name`; fails on a name that is none of them, since inputs
/// kept under it would never be replayed.
fn target(name: &str) -> fn(&[u8]) {
    TARGETS
        .iter()
        .find(|(target, _)| *target == name)
        .map(|(_, entry)| *entry)
        .unwrap_or_else(|| {
            let names: Vec<&str> = TARGETS.iter().map(|(target, _)| *target).collect();
            panic!(
                "no fuzz target is called {name}, so inputs kept under that name are never replayed; the targets are {}",
                names.join(", ")
            )
        })
}

fn corpus(target: &str) -> Vec<PathBuf> {
    let files = inputs(&fuzz_dir("corpus").join(target));
    // A handful of files is a corpus put in the wrong place or cut short, not a minimized run.
    assert!(
        files.len() >= 5,
        "the committed corpus of {target} holds {} files; expected the minimized corpus (300 files) under tests/fuzz/corpus/{target}",
        files.len()
    );
    files
}

#[test]
fn admission_review_corpus() {
    replay(&corpus("admission_review"), target("admission_review"));
}

#[test]
fn admission_review_structured_corpus() {
    replay(
        &corpus("admission_review_structured"),
        target("admission_review_structured"),
    );
}

#[test]
fn policy_load_corpus() {
    replay(&corpus("policy_load"), target("policy_load"));
}

/// Every corpus folder is a target's: a corpus kept under another name would never be replayed.
#[test]
fn every_corpus_folder_is_a_targets() {
    for folder in folders(&fuzz_dir("corpus")) {
        target(&folder);
    }
}

/// The names of the folders in `dir`, sorted; fails with a sentence when there are none.
fn folders(dir: &Path) -> Vec<String> {
    let entries = std::fs::read_dir(dir)
        .unwrap_or_else(|error| panic!("{}: cannot be read ({error})", dir.display()));
    let mut names: Vec<String> = entries
        .map(|entry| entry.expect("a directory entry reads").path())
        .filter(|path| path.is_dir())
        .map(|path| path.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert!(!names.is_empty(), "{} holds no folder", dir.display());
    names
}

/// Every input that once crashed a target, under the target's folder; a folder that names no
/// target, or holds nothing, fails rather than being skipped. Targets that never crashed have
/// no folder (see the README, "What was found").
#[test]
fn every_regression_replays() {
    let dir = fuzz_dir("regressions");
    for folder in folders(&dir) {
        replay(&inputs(&dir.join(&folder)), target(&folder));
    }
}

/// The replay fails on a folder that is missing, empty or holds only folders.
#[test]
fn a_missing_or_empty_folder_of_inputs_fails() {
    let scratch = tempfile::tempdir().unwrap();
    let missing = scratch.path().join("policy_load");
    let empty = scratch.path().join("empty");
    std::fs::create_dir_all(empty.join("nested")).unwrap();
    for dir in [&missing, &empty] {
        let failure = catch_unwind(|| inputs(dir)).expect_err("a replay of nothing fails");
        let message = failure.downcast_ref::<String>().unwrap();
        assert!(message.contains("would run nothing"), "{message}");
    }
}

/// Inputs under a folder whose name is no target's (a typo, a renamed target) fail the replay.
#[test]
#[should_panic(expected = "no fuzz target is called policy-load")]
fn a_folder_named_for_no_target_fails() {
    target("policy-load");
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
