//! driftgate validates writes of GatePolicy objects with its own compiler, so that a bad
//! policy is refused at `kubectl apply` (and Flux reports it) instead of being stored and
//! then refused by every driftgate that reads it. Pure: the request in, a verdict out.

use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, Operation};

use crate::decision::{PolicyVerdict, Rule};
use crate::policy::PolicyMode;
use crate::policy::gatepolicy::{GROUP, PLURAL, compile_object, problem_lines};

/// A create or update of a GatePolicy itself (its status is driftgate's own bookkeeping).
pub fn guards(request: &AdmissionRequest<DynamicObject>) -> bool {
    request.resource.group == GROUP
        && request.resource.resource == PLURAL
        && request.sub_resource.as_deref().unwrap_or("").is_empty()
        && matches!(request.operation, Operation::Create | Operation::Update)
}

/// The verdict on a GatePolicy write; None for any other request. Always Enforce: a policy
/// that does not compile cannot be audited.
pub fn judge(request: &AdmissionRequest<DynamicObject>) -> Option<PolicyVerdict> {
    if !guards(request) {
        return None;
    }
    let name = request.name.as_str();
    let (rule, message) = match request.object.as_ref().map(compile_object) {
        Some(Ok(_)) => (Rule::PolicyCompiled, None),
        Some(Err(errors)) => (
            Rule::PolicyRefused,
            Some(refusal(request, &problem_lines(&errors))),
        ),
        None => (
            Rule::PolicyRefused,
            Some(format!(
                "GatePolicy {name} could not be judged: the review carries no object (policy \"{name}\", rule {}). Retry the write.",
                Rule::PolicyRefused
            )),
        ),
    };
    Some(PolicyVerdict {
        policy: name.to_owned(),
        mode: PolicyMode::Enforce,
        rule,
        allowed: message.is_none(),
        would_deny: false,
        message,
        warning: None,
        matched: None,
        window: None,
        new_window: None,
    })
}

/// Names the user, the object, the policy and the rule, says what to do, then lists every
/// problem one a line, as `driftgate policy check` prints them.
fn refusal(request: &AdmissionRequest<DynamicObject>, lines: &[String]) -> String {
    let name = request.name.as_str();
    let who = match request.user_info.username.as_deref() {
        Some(who) if !who.is_empty() => who,
        _ => "an anonymous client",
    };
    let (count, them) = match lines.len() {
        1 => ("1 problem".to_owned(), "it"),
        n => (format!("{n} problems"), "them"),
    };
    format!(
        "{who} may not write GatePolicy {name}: it has {count} (policy \"{name}\", rule {}). Fix {them} and apply again; `driftgate policy check` prints the same for the policy as a file:\n{}",
        Rule::PolicyRefused,
        lines.join("\n")
    )
}
