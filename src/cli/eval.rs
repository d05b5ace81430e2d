//! `driftgate eval`: decide AdmissionReview files offline, exactly as the webhook would.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse};

use driftgate_core::decision::{Decision, DecisionInput, decide, may_guard};
use driftgate_core::error::{Error, Result};
use driftgate_core::files::{read_object, read_review_body};
use driftgate_core::policy::PolicySet;
use driftgate_core::reading::{read_lazily, read_whole};
use driftgate_core::request::{RequestFacts, scope_namespace};
use driftgate_core::review::lazy::parse_lazily;
use driftgate_core::review::{ReviewError, parse_envelope};

#[derive(Debug, Args)]
pub struct EvalArgs {
    /// Policy file, or directory of *.yaml/*.yml policy files.
    #[arg(long, value_name = "PATH")]
    pub policy: PathBuf,
    /// Evaluate as of this time (RFC 3339); default: now.
    #[arg(long, value_name = "RFC3339")]
    pub now: Option<String>,
    /// A Namespace object (YAML or JSON) supplying namespace labels; repeat for several.
    #[arg(long = "namespace", value_name = "FILE")]
    pub namespaces: Vec<PathBuf>,
    /// The parent object of a subresource request (e.g. the Deployment of a scale request).
    #[arg(long, value_name = "FILE")]
    pub parent: Option<PathBuf>,
    /// AdmissionReview JSON files; `-` reads one from standard input.
    #[arg(required = true, value_name = "REVIEW.json")]
    pub reviews: Vec<PathBuf>,
}

pub(crate) fn parse_now(now: Option<&str>) -> Result<Timestamp> {
    match now {
        None => Ok(Timestamp::now()),
        Some(value) => value.parse().map_err(|e: jiff::Error| Error::Time {
            value: value.to_owned(),
            reason: e.to_string(),
        }),
    }
}

/// Exit 0 when every review was decided (whatever the decisions), 2 when any input could not
/// be read; the readable ones are still decided and printed, in the order given.
/// `program` names the binary as it was run, in its error lines.
pub fn eval(args: &EvalArgs, program: &str, out: &mut impl Write) -> ExitCode {
    let setup = || -> Result<(PolicySet, Timestamp, Vec<DynamicObject>, Option<DynamicObject>)> {
        let policies = PolicySet::load_all(std::slice::from_ref(&args.policy))?;
        let now = parse_now(args.now.as_deref())?;
        let namespaces = args
            .namespaces
            .iter()
            .map(|p| read_object(p))
            .collect::<Result<Vec<_>>>()?;
        let parent = args.parent.as_deref().map(read_object).transpose()?;
        Ok((policies, now, namespaces, parent))
    };
    let (policies, now, namespaces, parent) = match setup() {
        Ok(setup) => setup,
        Err(error) => {
            eprintln!("{program} eval: {error}");
            return ExitCode::from(2);
        }
    };
    let context = OfflineContext {
        namespaces: &namespaces,
        parent: parent.as_ref(),
        now,
    };
    let evaluate = |path: &PathBuf| -> Result<String> {
        let (body, name) = read_review_body(path)?;
        let decided = decide_body(&policies, &body, &context)
            .map_err(|source| Error::Review { path: name, source })?;
        Ok(serde_json::to_string(&decided.response.into_review())
            .expect("an AdmissionReview always serializes"))
    };
    let outcomes: Vec<Result<String>> = on_every_core_in_order(&args.reviews, evaluate);
    let mut unreadable = 0;
    for outcome in outcomes {
        match outcome {
            Ok(line) => {
                if writeln!(out, "{line}").is_err() {
                    return ExitCode::from(2);
                }
            }
            Err(error) => {
                eprintln!("{program} eval: {error}");
                unreadable += 1;
            }
        }
    }
    if unreadable > 0 {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    }
}

/// `work` applied to every item, each core taking a contiguous share; the results in the
/// items' order. Reviews are independent, and CI runs `eval` and `policy test` over whole
/// repositories: one core each would leave the others idle.
pub(crate) fn on_every_core_in_order<T: Sync, R: Send>(
    items: &[T],
    work: impl Fn(&T) -> R + Sync,
) -> Vec<R> {
    let workers = std::thread::available_parallelism()
        .map_or(1, std::num::NonZero::get)
        .clamp(1, items.len().max(1));
    let share = items.len().div_ceil(workers).max(1);
    let work = &work;
    std::thread::scope(|scope| {
        let shares: Vec<_> = items
            .chunks(share)
            .map(|share| scope.spawn(move || share.iter().map(work).collect::<Vec<_>>()))
            .collect();
        shares
            .into_iter()
            .flat_map(|share| share.join().expect("a review worker never panics"))
            .collect()
    })
}

/// What the server would have read beside a review (its Namespace from the cache, the parent
/// of a subresource from the API server), given offline as files.
pub(crate) struct OfflineContext<'a> {
    pub namespaces: &'a [DynamicObject],
    pub parent: Option<&'a DynamicObject>,
    pub now: Timestamp,
}

/// A review decided offline, and the answer the webhook would give.
pub(crate) struct Decided {
    pub decision: Decision,
    pub response: AdmissionResponse,
}

/// Decides a review body as the webhook reads it ([`driftgate_core::reading`]): in one pass, its objects
/// left unread when no policy may guard the write, else their heads read and the rest only when
/// a rule asks; what that pass cannot read is read whole, as the webhook's fallback does. An
/// error says why the review or its object could not be read.
pub(crate) fn decide_body(
    policies: &PolicySet,
    body: &[u8],
    context: &OfflineContext<'_>,
) -> std::result::Result<Decided, ReviewError> {
    let scope = |request: &AdmissionRequest<DynamicObject>| {
        let namespace = namespace_for(context.namespaces, scope_namespace(request.into()));
        (may_guard(policies, request, namespace), namespace)
    };
    if let Some((read, namespace)) = parse_lazily(body).and_then(|e| read_lazily(e, scope)) {
        let facts = read.facts();
        let decision = decide_offline(policies, &facts, namespace, context);
        if !facts.fell_back() {
            let response = decision.to_response(facts.request());
            return Ok(Decided { decision, response });
        }
    }
    let read = read_whole(parse_envelope(body)?, scope);
    if let Some(error) = read.unreadable {
        return Err(error.into());
    }
    let facts = RequestFacts::new(&read.request);
    let decision = decide_offline(policies, &facts, read.namespace, context);
    let response = decision.to_response(facts.request());
    Ok(Decided { decision, response })
}

/// The metadata of the Namespace named `name` among `namespaces`.
fn namespace_for<'a>(
    namespaces: &'a [DynamicObject],
    name: Option<&str>,
) -> Option<&'a ObjectMeta> {
    let name = name?;
    namespaces
        .iter()
        .find(|ns| ns.metadata.name.as_deref() == Some(name))
        .map(|ns| &ns.metadata)
}

fn decide_offline(
    policies: &PolicySet,
    facts: &RequestFacts<'_>,
    namespace: Option<&ObjectMeta>,
    context: &OfflineContext<'_>,
) -> Decision {
    decide(
        policies,
        &DecisionInput {
            request: facts,
            resource: None,
            namespace,
            parent: context.parent,
            recent_deletes: None,
            now: context.now,
            silence: None,
        },
    )
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use driftgate_core::review::parse_review;

    fn example() -> PolicySet {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("policies/example.yaml");
        PolicySet::load(&path).unwrap_or_else(|errors| panic!("{errors}"))
    }

    /// Eval's context with no Namespace files, at the fixtures' time.
    fn at_fixture_time() -> OfflineContext<'static> {
        OfflineContext {
            namespaces: &[],
            parent: None,
            now: "2026-11-30T09:00:00Z".parse().unwrap(),
        }
    }

    /// Every fixture is decided offline as the two-step read decides it: the one-pass read
    /// changes how a review is read, never what is decided.
    #[test]
    fn the_one_pass_read_decides_every_fixture_as_the_whole_read_does() {
        let policies = example();
        let context = at_fixture_time();
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
        let fixtures: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .filter(|path| path.extension().is_some_and(|e| e == "json"))
            .map(|path| (path.display().to_string(), std::fs::read(&path).unwrap()))
            .collect();
        assert!(fixtures.len() >= 30);
        for (name, body) in fixtures {
            let request = parse_review(&body).unwrap();
            let whole = decide_offline(&policies, &RequestFacts::new(&request), None, &context);
            let one_pass = decide_body(&policies, &body, &context).unwrap().decision;
            assert_eq!(
                (one_pass.allowed, &one_pass.record.rule, &one_pass.message),
                (whole.allowed, &whole.record.rule, &whole.message),
                "{name}"
            );
            assert_eq!(one_pass.warnings, whole.warnings, "{name}");
        }
    }

    /// A write no policy may guard is decided from its envelope, as the webhook decides it:
    /// an object the whole read refuses (here a name that is not a string) is never read.
    #[test]
    fn an_unguarded_write_is_decided_without_reading_its_objects() {
        let policies = example();
        let context = at_fixture_time();
        let body = serde_json::json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "b1e5c0de-0000-4000-8000-000000000001",
                "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
                "resource": {"group": "", "version": "v1", "resource": "configmaps"},
                "name": "settings",
                "namespace": "team-sandbox",
                "operation": "UPDATE",
                "userInfo": {"username": "bob"},
                "object": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": 5}},
                "oldObject": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"}}
            }
        })
        .to_string();
        assert!(parse_review(body.as_bytes()).is_err());
        let decided = decide_body(&policies, body.as_bytes(), &context).unwrap();
        assert!(decided.decision.allowed, "{}", decided.decision.message);
        assert_eq!(decided.response.uid, "b1e5c0de-0000-4000-8000-000000000001");
    }

    /// A guarded write with an object far deeper than the one-pass read takes (alice's edit
    /// under her window, 9,000 levels added) is read whole and decided, from a thread with an
    /// eval worker's 2 MiB of stack (the decision does not recurse into it: measured).
    #[test]
    fn a_deep_object_is_read_whole_and_decided() {
        let policies = example();
        let path =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/break-glass-use-edit.json");
        let mut review: serde_json::Value =
            serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
        // Written as text: serializing a value this deep would itself need the stack.
        review["request"]["object"]["spec"]["deep"] = serde_json::json!("DEEP");
        let deep = format!("{}\"bottom\"{}", "{\"a\":".repeat(9_000), "}".repeat(9_000));
        let body = serde_json::to_string(&review)
            .unwrap()
            .replace("\"DEEP\"", &deep)
            .into_bytes();
        let decided = std::thread::Builder::new()
            .stack_size(2 * 1024 * 1024)
            .spawn(move || {
                decide_body(&policies, &body, &at_fixture_time()).map(|d| d.decision.allowed)
            })
            .unwrap()
            .join()
            .expect("decided without overflowing its stack");
        assert_eq!(decided.ok(), Some(true));
    }
}
