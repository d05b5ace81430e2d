//! Policy test suites (`driftgate policy test`): reviews with the decision a team expects,
//! runnable in the team's own CI the way `kyverno test` and `gator verify` are.
//!
//! A suite is a YAML file whose name ends in `.test.yaml` (or `.test.yml`):
//!
//! ```yaml
//! apiVersion: driftgate.dev/v1alpha1
//! kind: PolicyTest
//! metadata: {name: example}
//! spec:
//!   policy: ../example.yaml            # file or directory, relative to this file
//!   now: "2026-11-30T09:00:00Z"        # default for every case
//!   namespaces: [ns/prod.yaml]         # Namespace objects (labels for windows and selectors)
//!   cases:
//!     - name: Flux server-side apply is admitted
//!       review: fixtures/flux-ssa-update.json
//!       expect: {allowed: true, rule: Controller}
//! ```
//!
//! A case may override `now` and `namespaces`, name a `parent` object for a subresource, and
//! expect a `message` or `warning` fragment.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use jiff::Timestamp;
use kube::core::DynamicObject;
use serde::Deserialize;

use crate::cli::eval::{OfflineContext, decide_body, on_every_core_in_order};
use driftgate_core::decision::Decision;
use driftgate_core::error::{Error, Result};
use driftgate_core::files::{read_object, read_review_body};
use driftgate_core::policy::PolicySet;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PolicyTestDocument {
    api_version: String,
    kind: String,
    metadata: PolicyTestMetadata,
    spec: PolicyTestSpec,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PolicyTestMetadata {
    name: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PolicyTestSpec {
    policy: PathBuf,
    #[serde(default)]
    now: Option<String>,
    #[serde(default)]
    namespaces: Vec<PathBuf>,
    cases: Vec<TestCase>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct TestCase {
    name: String,
    review: PathBuf,
    #[serde(default)]
    now: Option<String>,
    #[serde(default)]
    namespaces: Option<Vec<PathBuf>>,
    #[serde(default)]
    parent: Option<PathBuf>,
    expect: Expectation,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Expectation {
    allowed: bool,
    #[serde(default)]
    rule: Option<String>,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    warning: Option<String>,
}

/// The result of one case.
#[derive(Debug, Clone)]
pub struct CaseResult {
    pub suite: String,
    pub name: String,
    /// Empty when the case passed; otherwise each way it did not.
    pub failures: Vec<String>,
}

/// The results of every suite found.
#[derive(Debug, Default)]
pub struct TestReport {
    pub cases: Vec<CaseResult>,
}

impl TestReport {
    pub fn passed(&self) -> usize {
        self.cases.iter().filter(|c| c.failures.is_empty()).count()
    }

    pub fn failed(&self) -> usize {
        self.cases.len() - self.passed()
    }
}

/// The suite files under `path` (recursively), or `path` itself when it is a file.
pub fn find_suites(path: &Path) -> Result<Vec<PathBuf>> {
    let meta = std::fs::metadata(path).map_err(|source| Error::Read {
        path: path.to_owned(),
        source,
    })?;
    if meta.is_file() {
        return Ok(vec![path.to_owned()]);
    }
    let mut found = Vec::new();
    let mut pending = vec![path.to_owned()];
    while let Some(dir) = pending.pop() {
        let entries = std::fs::read_dir(&dir).map_err(|source| Error::Read {
            path: dir.clone(),
            source,
        })?;
        for entry in entries {
            let entry = entry.map_err(|source| Error::Read {
                path: dir.clone(),
                source,
            })?;
            let entry_path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') {
                continue;
            }
            if entry_path.is_dir() {
                pending.push(entry_path);
            } else if name.ends_with(".test.yaml") || name.ends_with(".test.yml") {
                found.push(entry_path);
            }
        }
    }
    found.sort();
    Ok(found)
}

fn parse_time(value: &str) -> Result<Timestamp> {
    value.parse::<Timestamp>().map_err(|e| Error::Time {
        value: value.to_owned(),
        reason: e.to_string(),
    })
}

/// Objects read once per suite, since many cases share them.
#[derive(Default)]
struct ObjectCache(HashMap<PathBuf, DynamicObject>);

impl ObjectCache {
    fn get(&mut self, path: &Path) -> Result<&DynamicObject> {
        if !self.0.contains_key(path) {
            let object = read_object(path)?;
            self.0.insert(path.to_owned(), object);
        }
        Ok(&self.0[path])
    }
}

/// Runs one suite file. An unreadable suite, policy or fixture is an error, not a failed case:
/// a broken test setup should not read like a policy regression.
pub fn run_suite(path: &Path) -> Result<Vec<CaseResult>> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
        path: path.to_owned(),
        source,
    })?;
    let suite_error = |reason: String| Error::TestSuite {
        path: path.to_owned(),
        reason,
    };
    let document: PolicyTestDocument =
        serde_saphyr::from_str(&text).map_err(|e| suite_error(e.to_string()))?;
    if document.api_version != driftgate_core::policy::document::API_VERSION
        || document.kind != "PolicyTest"
    {
        return Err(suite_error(format!(
            "expected apiVersion {} and kind PolicyTest, found {} {}",
            driftgate_core::policy::document::API_VERSION,
            document.api_version,
            document.kind
        )));
    }
    let base = path.parent().unwrap_or(Path::new("."));
    let policies = PolicySet::load(&base.join(&document.spec.policy))?;
    let default_now = document.spec.now.as_deref().map(parse_time).transpose()?;
    // Each case's time and objects are found in order, and the cases before the first that
    // cannot be made ready are decided on every core, as `eval` decides; a case whose review
    // cannot be decided is reported before a later one that could not be made ready, as when
    // the cases ran one by one.
    let mut objects = ObjectCache::default();
    let mut prepared = Vec::with_capacity(document.spec.cases.len());
    let mut setup_error = None;
    for case in &document.spec.cases {
        match prepare_case(
            case,
            &document.spec,
            default_now,
            base,
            &suite_error,
            &mut objects,
        ) {
            Ok(case) => prepared.push(case),
            Err(error) => {
                setup_error = Some(error);
                break;
            }
        }
    }
    let decide_case = |prepared: &PreparedCase<'_>| -> Result<CaseResult> {
        let (body, review_file) = read_review_body(&base.join(&prepared.case.review))?;
        let context = OfflineContext {
            namespaces: &prepared.namespaces,
            parent: prepared.parent.as_ref(),
            now: prepared.now,
        };
        let decision = decide_body(&policies, &body, &context)
            .map_err(|source| Error::Review {
                path: review_file,
                source,
            })?
            .decision;
        Ok(CaseResult {
            suite: document.metadata.name.clone(),
            name: prepared.case.name.clone(),
            failures: check(&prepared.case.expect, &decision),
        })
    };
    let results = on_every_core_in_order(&prepared, decide_case)
        .into_iter()
        .collect::<Result<Vec<_>>>()?;
    match setup_error {
        Some(error) => Err(error),
        None => Ok(results),
    }
}

/// A case with its time and the objects read beside its review, ready to decide.
struct PreparedCase<'a> {
    case: &'a TestCase,
    now: Timestamp,
    namespaces: Vec<DynamicObject>,
    parent: Option<DynamicObject>,
}

/// Finds a case's time (its own, else the suite's) and reads the Namespace and parent objects
/// it names, relative to the suite's directory `base`.
fn prepare_case<'a>(
    case: &'a TestCase,
    spec: &PolicyTestSpec,
    default_now: Option<Timestamp>,
    base: &Path,
    suite_error: &impl Fn(String) -> Error,
    objects: &mut ObjectCache,
) -> Result<PreparedCase<'a>> {
    let now = match (&case.now, default_now) {
        (Some(now), _) => parse_time(now)?,
        (None, Some(now)) => now,
        (None, None) => {
            return Err(suite_error(format!(
                "case \"{}\" has no `now`, and the suite sets none",
                case.name
            )));
        }
    };
    let namespace_files = case.namespaces.as_ref().unwrap_or(&spec.namespaces);
    let mut namespaces = Vec::new();
    for file in namespace_files {
        namespaces.push(objects.get(&base.join(file))?.clone());
    }
    let parent = match &case.parent {
        Some(file) => Some(objects.get(&base.join(file))?.clone()),
        None => None,
    };
    Ok(PreparedCase {
        case,
        now,
        namespaces,
        parent,
    })
}

fn check(expect: &Expectation, decision: &Decision) -> Vec<String> {
    let mut failures = Vec::new();
    let rule = decision.record.rule.as_str();
    if decision.allowed != expect.allowed {
        failures.push(format!(
            "expected allowed={}, got allowed={} (rule {rule}){}",
            expect.allowed,
            decision.allowed,
            if decision.message.is_empty() {
                String::new()
            } else {
                format!(": {}", decision.message)
            }
        ));
    }
    if let Some(expected) = &expect.rule
        && expected != rule
    {
        failures.push(format!("expected rule {expected}, got {rule}"));
    }
    if let Some(fragment) = &expect.message
        && !decision.message.contains(fragment.as_str())
    {
        failures.push(format!(
            "expected the message to contain \"{fragment}\", got \"{}\"",
            decision.message
        ));
    }
    if let Some(fragment) = &expect.warning
        && !decision
            .warnings
            .iter()
            .any(|w| w.contains(fragment.as_str()))
    {
        failures.push(format!(
            "expected a warning containing \"{fragment}\", got {:?}",
            decision.warnings
        ));
    }
    failures
}

/// Runs every suite under `path`. Suites that cannot run are returned as errors beside the
/// report, so that one broken suite does not hide the results of the others.
pub fn run(path: &Path) -> Result<(TestReport, Vec<Error>)> {
    let suites = find_suites(path)?;
    let mut report = TestReport::default();
    let mut errors = Vec::new();
    for suite in suites {
        match run_suite(&suite) {
            Ok(cases) => report.cases.extend(cases),
            Err(error) => errors.push(error),
        }
    }
    Ok((report, errors))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A suite of `cases` (YAML list items) over the example policy, in a scratch directory.
    fn suite(cases: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let policy = Path::new(env!("CARGO_MANIFEST_DIR")).join("policies/example.yaml");
        let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
        let text = format!(
            "apiVersion: driftgate.dev/v1alpha1\nkind: PolicyTest\nmetadata: {{name: order}}\n\
             spec:\n  policy: {}\n  cases:\n{}",
            policy.display(),
            cases.replace("FIXTURES", &fixtures.display().to_string())
        );
        let path = dir.path().join("order.test.yaml");
        std::fs::write(&path, text).unwrap();
        (dir, path)
    }

    /// Cases are decided on every core, but a suite reports what it reported when they ran one
    /// by one: every case's result in the suite's order, and of two broken cases the first.
    #[test]
    fn cases_decided_on_every_core_keep_the_suites_order_and_its_first_error() {
        let cases: String = (0..40)
            .map(|i| {
                format!(
                    "    - {{name: case-{i}, now: \"2026-11-30T09:00:00Z\", \
                     review: FIXTURES/flux-ssa-update.json, expect: {{allowed: true}}}}\n"
                )
            })
            .collect();
        let (_dir, path) = suite(&cases);
        let names: Vec<String> = run_suite(&path)
            .unwrap()
            .into_iter()
            .map(|c| c.name)
            .collect();
        let expected: Vec<String> = (0..40).map(|i| format!("case-{i}")).collect();
        assert_eq!(names, expected);

        let broken = "    - {name: unreadable, now: \"2026-11-30T09:00:00Z\", \
                      review: FIXTURES/no-such-review.json, expect: {allowed: true}}\n    \
                      - {name: timeless, review: FIXTURES/flux-ssa-update.json, expect: {allowed: true}}\n";
        let (_dir, path) = suite(broken);
        let error = run_suite(&path).unwrap_err().to_string();
        assert!(error.contains("no-such-review.json"), "{error}");

        let (_dir, path) = suite(&broken.replace("no-such-review", "flux-ssa-update"));
        let error = run_suite(&path).unwrap_err().to_string();
        assert!(error.contains("case \"timeless\" has no `now`"), "{error}");
    }
}
