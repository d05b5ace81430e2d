//! `driftgate eval`: decide AdmissionReview files offline, exactly as the webhook would.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use jiff::Timestamp;
use kube::core::DynamicObject;

use crate::cli::testsuite::namespace_for;
use crate::decision::{DecisionInput, decide};
use crate::error::{Error, Result};
use crate::policy::PolicySet;
use crate::request::RequestFacts;
use crate::review::{read_object, read_review};

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
/// be read; the readable ones are still decided and printed.
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
    let mut unreadable = 0;
    for path in &args.reviews {
        let request = match read_review(path) {
            Ok(request) => request,
            Err(error) => {
                eprintln!("{program} eval: {error}");
                unreadable += 1;
                continue;
            }
        };
        let decision = decide(
            &policies,
            &DecisionInput {
                request: &RequestFacts::new(&request),
                resource: None,
                namespace: namespace_for(&namespaces, request.namespace.as_deref()),
                parent: parent.as_ref(),
                recent_deletes: None,
                now,
                silence: None,
            },
        );
        let review = decision.to_response(&request).into_review();
        let line = serde_json::to_string(&review).expect("an AdmissionReview always serializes");
        if writeln!(out, "{line}").is_err() {
            return ExitCode::from(2);
        }
    }
    if unreadable > 0 {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    }
}
