//! The ledger guards itself: who may write `BackportRequirement`s and their CRD. Pure: the
//! request, the policies, driftgate's own identity and the clock come in, a verdict goes out.
//!
//! A record is evidence of an emergency change that Git has not caught up with, so erasing or
//! settling it by hand would hide that change from the backlog, the metrics and the alerts.
//! Only driftgate writes records and moves their phase; a person may only resolve one, as an
//! opener of the policy that guards it, with a note and their own name and time; records are
//! deleted by driftgate's retention once settled, or by the namespace controller with their
//! namespace. The CRD (whose deletion deletes every record) changes only by named identities.

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::authentication::v1::UserInfo;
use kube_core::DynamicObject;
use kube_core::admission::Operation;

use super::verdict::{PolicyVerdict, Rule};
use crate::diff::changed_paths;
use crate::fieldpath::FieldPath;
use crate::policy::PolicySet;
use crate::records::record::{BackportRequirement, BackportStatus, Phase};
use crate::request::{RequestEnvelope, RequestFacts, ReviewObject};
use crate::timefmt::human_utc;

pub const GROUP: &str = "driftgate.dev";
pub const RECORDS: &str = "backportrequirements";
/// The name of the records' CustomResourceDefinition.
pub const RECORDS_CRD: &str = "backportrequirements.driftgate.dev";

/// Who empties a namespace being deleted: the namespace controller's own service account
/// (kube-controller-manager with `--use-service-account-credentials`), or the controller
/// manager's identity without it. Only kube-controller-manager holds either, and it deletes only
/// in a namespace being deleted, where the objects the records are about go too.
pub const NAMESPACE_DELETERS: &[&str] = &[
    "system:serviceaccount:kube-system:namespace-controller",
    "system:kube-controller-manager",
];

/// How far a resolution's `resolvedAt` may be from driftgate's clock (the client's clock wrote it).
pub const RESOLVED_AT_TOLERANCE: SignedDuration = SignedDuration::from_secs(120);

/// Label and annotation keys under this prefix are driftgate's (the object uid label finds an
/// object's records); nobody else changes them.
const OWN_KEY_PREFIX: &str = "driftgate.dev/";

/// Who the guard trusts, from `serve`'s flags.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LedgerGuard {
    /// driftgate's own username (`system:serviceaccount:NS:NAME`); None when unknown, and then
    /// nobody writes records.
    pub writer: Option<String>,
    /// Usernames that may change or delete the records' CRD.
    pub crd_admin_users: Vec<String>,
    /// Groups whose members may change or delete the records' CRD.
    pub crd_admin_groups: Vec<String>,
}

impl LedgerGuard {
    fn is_writer(&self, username: &str) -> bool {
        self.writer.as_deref() == Some(username) && !username.is_empty()
    }

    fn is_crd_admin(&self, user: &UserInfo) -> bool {
        let name = user.username.as_deref().unwrap_or("");
        self.crd_admin_users.iter().any(|u| u == name)
            || user
                .groups
                .iter()
                .flatten()
                .any(|g| self.crd_admin_groups.contains(g))
    }

    fn describe_writer(&self) -> String {
        match &self.writer {
            Some(writer) => format!("driftgate itself ({writer})"),
            None => "driftgate itself (whose identity this replica does not know: set serve --service-account)".to_owned(),
        }
    }

    fn describe_crd_admins(&self) -> String {
        let mut parts: Vec<String> = Vec::new();
        if !self.crd_admin_users.is_empty() {
            parts.push(format!("users {}", self.crd_admin_users.join(", ")));
        }
        if !self.crd_admin_groups.is_empty() {
            parts.push(format!("groups {}", self.crd_admin_groups.join(", ")));
        }
        if parts.is_empty() {
            "nobody (serve --ledger-crd-admin-user/--ledger-crd-admin-group name none)".to_owned()
        } else {
            parts.join("; ")
        }
    }
}

/// What the guard judges: a write of a record (in any namespace, through any subresource), or
/// an update or delete of the records' CRD.
pub fn guards(request: RequestEnvelope<'_>) -> bool {
    let resource = request.resource();
    let record = resource.group == GROUP && resource.resource == RECORDS;
    let crd = resource.group == "apiextensions.k8s.io"
        && resource.resource == "customresourcedefinitions"
        && request.name() == RECORDS_CRD
        && request.operation() != Operation::Create;
    request.operation() != Operation::Connect && (record || crd)
}

/// The guard's verdict for a write of a record or of the records' CRD; None for anything else.
pub fn judge(
    policies: &PolicySet,
    guard: &LedgerGuard,
    facts: &RequestFacts<'_>,
    now: Timestamp,
) -> Option<PolicyVerdict> {
    let request = facts.request();
    if request.operation() == Operation::Connect {
        return None;
    }
    let resource = request.resource();
    if resource.group == GROUP && resource.resource == RECORDS {
        return Some(judge_record(policies, guard, facts, now));
    }
    if resource.group == "apiextensions.k8s.io"
        && resource.resource == "customresourcedefinitions"
        && request.name() == RECORDS_CRD
        && request.operation() != Operation::Create
    {
        return Some(judge_crd(guard, facts));
    }
    None
}

/// A record as the request carries it, old or new.
fn parse(object: Option<&DynamicObject>) -> Option<BackportRequirement> {
    serde_json::to_value(object?)
        .ok()
        .and_then(|v| serde_json::from_value(v).ok())
}

/// What the messages say about the request.
struct Subject<'a> {
    who: &'a str,
    username: &'a str,
    user: &'a UserInfo,
    /// "BackportRequirement prod/deployment-api-1a2b3c4d5e"
    record: String,
    namespace: &'a str,
    name: &'a str,
    /// The record's policy, from the stored record (the new one for a CREATE).
    policy: String,
}

impl Subject<'_> {
    fn verdict(&self, rule: Rule, message: Option<String>) -> PolicyVerdict {
        PolicyVerdict::enforced(self.policy.clone(), rule, message)
    }

    fn deny(&self, rule: Rule, verb: &str, problem: &str, next: &str) -> PolicyVerdict {
        let message = format!(
            "{} may not {verb} {}: {problem} (policy \"{}\", rule {rule}). {next}",
            self.who, self.record, self.policy
        );
        self.verdict(rule, Some(message))
    }

    fn resolve_command(&self) -> String {
        format!(
            "driftgate backlog resolve {} -n {} --note \"what happened, e.g. the Git commit\"",
            self.name, self.namespace
        )
    }
}

fn judge_record(
    policies: &PolicySet,
    guard: &LedgerGuard,
    facts: &RequestFacts<'_>,
    now: Timestamp,
) -> PolicyVerdict {
    let request = facts.request();
    let old_object = facts.old_object().map(ReviewObject::whole);
    let new_object = facts.object().map(ReviewObject::whole);
    let old = parse(old_object);
    let new = parse(new_object);
    let username = facts.username();
    let namespace = facts.scope_namespace().unwrap_or("");
    // A DELETE of the collection is reviewed one record at a time, with no name: only the old
    // object names it.
    let name = match request.name() {
        "" => old_object
            .and_then(|o| o.metadata.name.as_deref())
            .unwrap_or(""),
        name => name,
    };
    let stored = match request.operation() {
        Operation::Create => new.as_ref(),
        _ => old.as_ref(),
    };
    let subject = Subject {
        who: facts.who(),
        username,
        user: request.user_info(),
        record: format!("BackportRequirement {namespace}/{name}"),
        namespace,
        name,
        policy: stored.map_or_else(|| "?".to_owned(), |r| r.spec.policy.clone()),
    };
    match request.operation() {
        Operation::Delete => judge_delete(guard, &subject, old.as_ref()),
        Operation::Create if guard.is_writer(username) => subject.verdict(Rule::LedgerWriter, None),
        Operation::Create => subject.deny(
            Rule::RecordForged,
            "create",
            &format!(
                "backport records are written only by {} when it admits a break-glass change",
                guard.describe_writer()
            ),
            "To make an emergency change, open a break-glass window with driftgate break-glass open; driftgate records it.",
        ),
        _ if guard.is_writer(username) => subject.verdict(Rule::LedgerWriter, None),
        _ => judge_update(
            policies,
            guard,
            &subject,
            (old_object, new_object),
            (old, new),
            now,
        ),
    }
}

fn is_settled(record: Option<&BackportRequirement>) -> bool {
    record
        .and_then(|r| r.status.as_ref())
        .is_some_and(|s| crate::records::phase::is_settled(s.phase))
}

fn judge_delete(
    guard: &LedgerGuard,
    subject: &Subject<'_>,
    old: Option<&BackportRequirement>,
) -> PolicyVerdict {
    if guard.is_writer(subject.username) && is_settled(old) {
        return subject.verdict(Rule::LedgerWriter, None);
    }
    if NAMESPACE_DELETERS.contains(&subject.username) {
        return subject.verdict(Rule::RecordDeletedWithNamespace, None);
    }
    let problem = if guard.is_writer(subject.username) {
        "driftgate's retention deletes only records that have settled (Backported or Resolved), and this one has not".to_owned()
    } else {
        format!(
            "a backport record is deleted only by {}'s retention once it has settled (Backported or Resolved), so that no emergency change leaves the backlog unseen",
            guard.describe_writer()
        )
    };
    subject.deny(
        Rule::RecordErased,
        "delete",
        &problem,
        &format!(
            "Backport the change to Git, or have an opener of the policy resolve it: {}.",
            subject.resolve_command()
        ),
    )
}

/// Whether a changed path is one anybody may change: a label or annotation that is not
/// driftgate's.
fn is_foreign_metadata(path: &FieldPath) -> bool {
    let s = path.segments();
    s.len() == 3
        && s[0] == "metadata"
        && (s[1] == "labels" || s[1] == "annotations")
        && !s[2].starts_with(OWN_KEY_PREFIX)
}

fn judge_update(
    policies: &PolicySet,
    guard: &LedgerGuard,
    subject: &Subject<'_>,
    objects: (Option<&DynamicObject>, Option<&DynamicObject>),
    (old, new): (Option<BackportRequirement>, Option<BackportRequirement>),
    now: Timestamp,
) -> PolicyVerdict {
    let next = format!(
        "Only {} changes a record's spec, phase and driftgate.dev labels; to close it, an opener of the policy runs {}.",
        guard.describe_writer(),
        subject.resolve_command()
    );
    let (Some(old_object), Some(new_object), Some(old), Some(new)) =
        (objects.0, objects.1, old, new)
    else {
        return subject.deny(
            Rule::RecordTampered,
            "update",
            "the request does not carry both versions of the record in a form driftgate can read, so it cannot be judged",
            &next,
        );
    };
    // `changed_paths` leaves out status and the API server's bookkeeping (managedFields among it).
    let paths = changed_paths(old_object, new_object);
    let forbidden: Vec<String> = paths
        .iter()
        .filter(|p| !is_foreign_metadata(p))
        .map(ToString::to_string)
        .collect();
    let old_status = old.status.clone().unwrap_or_default();
    let new_status = new.status.clone().unwrap_or_default();
    if !forbidden.is_empty() {
        return subject.deny(
            Rule::RecordTampered,
            "update",
            &format!("it changes {}", forbidden.join(", ")),
            &next,
        );
    }
    if old_status == new_status {
        let rule = if paths.is_empty() {
            Rule::NoEffectiveChange
        } else {
            Rule::LedgerMetadata
        };
        return subject.verdict(rule, None);
    }
    if new_status.phase != Phase::Resolved || old_status.phase == Phase::Resolved {
        return subject.deny(
            Rule::RecordTampered,
            "update",
            &format!(
                "it changes the record's status (phase {} to {})",
                old_status.phase_word(),
                new_status.phase_word()
            ),
            &next,
        );
    }
    match resolution_problem(policies, guard, subject, &old, &old_status, &new_status, now) {
        None => subject.verdict(Rule::RecordResolved, None),
        Some(problem) => subject.deny(
            Rule::ResolveRefused,
            "resolve",
            &problem,
            &format!(
                "An opener of the policy resolves a record with {} once its window has ended; the status keeps who (resolvedBy) and when (resolvedAt).",
                subject.resolve_command()
            ),
        ),
    }
}

/// Why a move to Resolved is not a person's resolution of this record, or None when it is.
/// Why `subject` may not resolve `record`: only an opener of its policy may, or one of the CRD's
/// admins (who could delete every record with the CRD anyway), so that a record whose policy was
/// removed or renamed can still be closed.
fn resolver_problem(
    policies: &PolicySet,
    guard: &LedgerGuard,
    subject: &Subject<'_>,
    record: &BackportRequirement,
) -> Option<String> {
    if guard.is_crd_admin(subject.user) {
        return None;
    }
    let openers = policies
        .policies()
        .iter()
        .find(|p| p.name == record.spec.policy)
        .map(|p| p.break_glass.as_ref().map(|rules| &rules.openers));
    let admins = guard.describe_crd_admins();
    match openers {
        Some(Some(openers)) if openers.matches(subject.user) => None,
        Some(Some(openers)) => Some(format!(
            "only an opener of the policy ({}) may resolve its records",
            openers.describe()
        )),
        Some(None) => Some(format!(
            "the policy has no break-glass rules, so it has no openers; only the CRD's admins ({admins}) may resolve its records"
        )),
        None => Some(format!(
            "policy \"{}\" is not loaded by driftgate, so its openers are unknown; only the CRD's admins ({admins}) may resolve its records",
            record.spec.policy
        )),
    }
}

fn resolution_problem(
    policies: &PolicySet,
    guard: &LedgerGuard,
    subject: &Subject<'_>,
    record: &BackportRequirement,
    old: &BackportStatus,
    new: &BackportStatus,
    now: Timestamp,
) -> Option<String> {
    let window_ends = record.spec.window.expires_at.0;
    match old.phase {
        Phase::AwaitingBackport | Phase::Reverted => {}
        Phase::Open if window_ends <= now => {}
        Phase::Open => {
            return Some(format!(
                "its break-glass window is open until {}: changes are still being recorded in it; close the window first",
                human_utc(window_ends)
            ));
        }
        settled => {
            return Some(format!("it has settled already ({settled:?})",));
        }
    }
    resolver_problem(policies, guard, subject, record)
        .or_else(|| written_problem(subject.username, old, new, now))
}

/// Why `new` is not `old` resolved by `username` at about `now`: the phase, the note, who, when,
/// and one transition added, as `driftgate backlog resolve` writes it.
fn written_problem(
    username: &str,
    old: &BackportStatus,
    new: &BackportStatus,
    now: Timestamp,
) -> Option<String> {
    let Some(note) = new
        .resolution_note
        .as_deref()
        .filter(|n| !n.trim().is_empty())
    else {
        return Some(
            "a resolution needs a note (status.resolutionNote) saying what happened".to_owned(),
        );
    };
    if new.resolved_by.as_deref() != Some(username) {
        return Some(format!(
            "status.resolvedBy must be the resolver's own username ({username}), not {:?}",
            new.resolved_by.as_deref().unwrap_or("absent")
        ));
    }
    let Some(at) = new.resolved_at.as_ref().map(|t| t.0) else {
        return Some("status.resolvedAt (when it was resolved) is missing".to_owned());
    };
    if at.duration_since(now).abs() > RESOLVED_AT_TOLERANCE {
        return Some(format!(
            "status.resolvedAt ({}) is more than {}s from driftgate's clock ({})",
            human_utc(at),
            RESOLVED_AT_TOLERANCE.as_secs(),
            human_utc(now)
        ));
    }
    let kept = new.transitions.len() == old.transitions.len() + 1
        && new.transitions[..old.transitions.len()] == old.transitions[..];
    let last_ok = new
        .transitions
        .last()
        .is_some_and(|t| t.phase == Phase::Resolved && t.time.0 == at && t.message == note);
    if !kept || !last_ok {
        return Some("the transitions so far must be kept, with one Resolved transition (at resolvedAt, the note as its message) added".to_owned());
    }
    if new.reverted_fields != old.reverted_fields || new.conditions != old.conditions {
        return Some(
            "a resolution changes only the phase, the note, who, when and the transitions"
                .to_owned(),
        );
    }
    None
}

/// The rule that admits an update of the records' CRD by anybody, or the paths that make it the
/// admins' business.
fn crd_update(old: &DynamicObject, new: &DynamicObject) -> Result<Rule, Vec<String>> {
    // Deleting was admitted already (the API server removes its finalizer): nothing left to keep.
    if old.metadata.deletion_timestamp.is_some() {
        return Ok(Rule::LedgerCrdAdmin);
    }
    let paths = changed_paths(old, new);
    let changed: Vec<String> = paths
        .iter()
        .filter(|p| !is_foreign_metadata(p))
        .map(ToString::to_string)
        .collect();
    match (changed.is_empty(), paths.is_empty()) {
        (true, true) => Ok(Rule::NoEffectiveChange),
        (true, false) => Ok(Rule::LedgerMetadata),
        (false, _) => Err(changed),
    }
}

fn judge_crd(guard: &LedgerGuard, facts: &RequestFacts<'_>) -> PolicyVerdict {
    let request = facts.request();
    let who = facts.who();
    // No policy guards the CRD: driftgate's own settings do.
    let verdict =
        |rule: Rule, message: Option<String>| PolicyVerdict::enforced(String::new(), rule, message);
    if guard.is_crd_admin(request.user_info()) {
        return verdict(Rule::LedgerCrdAdmin, None);
    }
    let (verb, problem) = match (&request.operation(), facts.old_object(), facts.object()) {
        (Operation::Update, Some(old), Some(new)) => {
            let changed = match crd_update(old.whole(), new.whole()) {
                Ok(rule) => return verdict(rule, None),
                Err(changed) => changed,
            };
            ("update", format!("it changes {}, and the records' schema and names decide what the API server keeps of every record", changed.join(", ")))
        }
        (Operation::Update, _, _) => (
            "update",
            "the request does not carry both versions of it, so it cannot be judged".to_owned(),
        ),
        _ => (
            "delete",
            "deleting it deletes every BackportRequirement in the cluster, and with them the backlog of emergency changes".to_owned(),
        ),
    };
    verdict(
        Rule::LedgerCrdProtected,
        Some(format!(
            "{who} may not {verb} CustomResourceDefinition {RECORDS_CRD}: {problem} (driftgate's ledger, rule LedgerCrdProtected). \
             Only {} may; ask one of them (the identities are serve's --ledger-crd-admin-user and --ledger-crd-admin-group, the chart's records.crdAdmins).",
            guard.describe_crd_admins()
        )),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube_core::admission::AdmissionRequest;
    use serde_json::{Value, json};

    /// `operation` by bob of `name` as resource `group/resource`, in namespace team-a (or
    /// cluster-wide for CRDs), with the same object old and new.
    fn request(
        operation: &str,
        (group, resource): (&str, &str),
        name: &str,
    ) -> AdmissionRequest<DynamicObject> {
        let namespace = if resource == "customresourcedefinitions" {
            ""
        } else {
            "team-a"
        };
        let object = json!({"apiVersion": "v1", "kind": "Object",
            "metadata": {"name": name, "namespace": namespace}});
        serde_json::from_value(json!({
            "uid": "u-1",
            "kind": {"group": group, "version": "v1", "kind": "Object"},
            "resource": {"group": group, "version": "v1", "resource": resource},
            "name": name, "namespace": namespace, "operation": operation,
            "userInfo": {"username": "bob"},
            "object": if operation == "DELETE" { Value::Null } else { object.clone() },
            "oldObject": if operation == "CREATE" { Value::Null } else { object },
        }))
        .unwrap()
    }

    /// What the guard judges is exactly what `guards` says, from the envelope alone, before the
    /// server reads the objects: every write of a record, and updates and deletes of the
    /// records' CRD; nothing else of driftgate.dev, no other CRD, no record-named resource of
    /// another group.
    #[test]
    fn guards_says_from_the_envelope_which_writes_the_guard_judges() {
        let records = (GROUP, RECORDS);
        let crds = ("apiextensions.k8s.io", "customresourcedefinitions");
        let cases = [
            ("CREATE", records, "deployment-api-1", true),
            ("UPDATE", records, "deployment-api-1", true),
            ("DELETE", records, "deployment-api-1", true),
            ("UPDATE", crds, RECORDS_CRD, true),
            ("DELETE", crds, RECORDS_CRD, true),
            // Creating the CRD is installing driftgate.
            ("CREATE", crds, RECORDS_CRD, false),
            ("DELETE", crds, "widgets.example.com", false),
            ("UPDATE", (GROUP, "gatepolicies"), "production", false),
            (
                "UPDATE",
                ("example.com", RECORDS),
                "deployment-api-1",
                false,
            ),
            (
                "UPDATE",
                ("example.com", "customresourcedefinitions"),
                RECORDS_CRD,
                false,
            ),
            (
                "UPDATE",
                ("apiextensions.k8s.io", RECORDS),
                RECORDS_CRD,
                false,
            ),
        ];
        let policies = PolicySet::default();
        let guard = LedgerGuard::default();
        let now: Timestamp = "2026-11-30T09:00:00Z".parse().unwrap();
        for (operation, resource, name, judged) in cases {
            let request = request(operation, resource, name);
            let facts = RequestFacts::new(&request);
            let what = format!("{operation} {}/{} {name}", resource.0, resource.1);
            assert_eq!(guards(facts.request()), judged, "guards: {what}");
            assert_eq!(
                judge(&policies, &guard, &facts, now).is_some(),
                judged,
                "judge: {what}"
            );
        }
    }
}
