//! driftgate validates writes of GatePolicy objects with its own compiler, so that a bad
//! policy is refused at `kubectl apply` (and Flux reports it) instead of being stored and
//! then refused by every driftgate that reads it. Pure: the request in, a verdict out.

use kube_core::admission::Operation;

use super::verdict::{PolicyVerdict, Rule};
use crate::policy::gatepolicy::{GROUP, PLURAL, compile_object, problem_lines};
use crate::request::{RequestEnvelope, RequestFacts};

/// A create or update of a GatePolicy itself (its status is driftgate's own bookkeeping).
pub fn guards(request: RequestEnvelope<'_>) -> bool {
    request.resource().group == GROUP
        && request.resource().resource == PLURAL
        && request.sub_resource().unwrap_or("").is_empty()
        && matches!(request.operation(), Operation::Create | Operation::Update)
}

/// The verdict on a GatePolicy write; None for any other request. Always Enforce: a policy
/// that does not compile cannot be audited.
pub fn judge(facts: &RequestFacts<'_>) -> Option<PolicyVerdict> {
    let request = facts.request();
    if !guards(request) {
        return None;
    }
    let name = request.name();
    let (rule, message) = match facts.object().map(|o| compile_object(o.whole())) {
        Some(Ok(_)) => (Rule::PolicyCompiled, None),
        Some(Err(errors)) => (
            Rule::PolicyRefused,
            Some(refusal(facts, &problem_lines(&errors))),
        ),
        None => (
            Rule::PolicyRefused,
            Some(format!(
                "GatePolicy {name} could not be judged: the review carries no object (policy \"{name}\", rule {}). Retry the write.",
                Rule::PolicyRefused
            )),
        ),
    };
    Some(PolicyVerdict::enforced(name.to_owned(), rule, message))
}

/// Names the user, the object, the policy and the rule, says what to do, then lists every
/// problem one a line, as `driftgate policy check` prints them.
fn refusal(facts: &RequestFacts<'_>, lines: &[String]) -> String {
    let name = facts.request().name();
    let who = facts.who();
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

#[cfg(test)]
mod tests {
    use kube_core::DynamicObject;
    use kube_core::admission::AdmissionRequest;
    use serde_json::{Value, json};

    use super::*;
    use crate::decision::ledger_guard::LedgerGuard;
    use crate::decision::{AUDIT_DECISION, AUDIT_RULE, DecisionInput, decide_with_ledger};
    use crate::policy::PolicySet;

    fn request(
        operation: &str,
        subresource: Option<&str>,
        spec: Value,
    ) -> AdmissionRequest<DynamicObject> {
        let mut request = json!({
            "uid": "7d3c1a2b-0000-0000-0000-000000000000",
            "kind": {"group": GROUP, "version": "v1alpha1", "kind": "GatePolicy"},
            "resource": {"group": GROUP, "version": "v1alpha1", "resource": PLURAL},
            "name": "team-a",
            "operation": operation,
            "userInfo": {"username": "alice"},
            "object": {
                "apiVersion": "driftgate.dev/v1alpha1",
                "kind": "GatePolicy",
                "metadata": {"name": "team-a", "uid": "x", "generation": 2},
                "spec": spec,
            },
            "dryRun": false,
        });
        if let Some(subresource) = subresource {
            request["subResource"] = json!(subresource);
        }
        serde_json::from_value(request).unwrap()
    }

    fn decide(request: &AdmissionRequest<DynamicObject>) -> crate::decision::Decision {
        let facts = crate::request::RequestFacts::new(request);
        let input = DecisionInput {
            request: &facts,
            resource: None,
            namespace: None,
            parent: None,
            recent_deletes: None,
            now: "2026-12-01T11:00:00Z".parse().unwrap(),
            silence: None,
        };
        decide_with_ledger(&PolicySet::default(), &input, &LedgerGuard::default())
    }

    #[test]
    fn a_policy_that_compiles_is_admitted_under_its_own_rule() {
        let request = request(
            "CREATE",
            None,
            json!({"namespaces": {"include": ["team-a"]}}),
        );
        assert!(crate::decision::may_guard(
            &PolicySet::default(),
            &request,
            None
        ));
        let decision = decide(&request);
        assert!(decision.allowed);
        assert_eq!(decision.audit_annotations[AUDIT_RULE], "PolicyCompiled");
    }

    #[test]
    fn a_bad_policy_is_refused_with_every_problem_as_policy_check_prints_it() {
        let spec = json!({"namespaces": {"include": []}, "operations": ["CONNECT"]});
        let request = request("UPDATE", None, spec);
        let decision = decide(&request);
        assert!(!decision.allowed);
        assert_eq!(decision.audit_annotations[AUDIT_DECISION], "denied");
        assert_eq!(decision.audit_annotations[AUDIT_RULE], "PolicyRefused");
        let message = &decision.message;
        assert!(
            message.starts_with("alice may not write GatePolicy team-a: it has "),
            "{message}"
        );
        assert!(
            message.contains("(policy \"team-a\", rule PolicyRefused)"),
            "{message}"
        );
        let expected =
            problem_lines(&compile_object(request.object.as_ref().unwrap()).unwrap_err());
        for line in &expected {
            assert!(
                message.contains(&format!("\n{line}")),
                "{line} in {message}"
            );
        }
    }

    #[test]
    fn status_writes_and_deletes_are_not_judged() {
        let spec = json!({"namespaces": {"include": []}});
        let status = request("UPDATE", Some("status"), spec.clone());
        assert!(judge(&RequestFacts::new(&status)).is_none());
        let delete = request("DELETE", None, spec);
        assert!(judge(&RequestFacts::new(&delete)).is_none());
    }
}
