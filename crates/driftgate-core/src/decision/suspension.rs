//! The rules of suspensions of the GitOps controller: a suspension is a window on the object.

use crate::applied::declared_by;
use crate::fieldpath::FieldPath;
use crate::ledger::evidence::LAST_APPLIED_ANNOTATION;
use crate::policy::scope::may_carry_suspension;
use crate::policy::suspensions::SuspensionField;
use crate::policy::{BreakGlassRules, Controller, GatePolicy};
use crate::request::ReviewObject;
use crate::text::{MAX_NAME_CHARS, echo, warning};
use crate::timefmt::human_utc;

use crate::window::{BreakGlassWindow, WindowScope, WindowState, latest_expiry, window_state};

use super::facts::*;
use super::verdict::*;
use super::{break_glass::*, scope::*, words::*};

/// What an UPDATE does to the suspensions its object carries.
pub(super) enum SuspensionChange {
    /// A suspension starts, or the window of one that holds changes: judged as opening one.
    Suspends,
    /// A suspension ends, and none starts.
    Resumes,
}

/// The verdict on a write that suspends or resumes the GitOps controller's reconciliation (by
/// the policy's `suspensions`), judged like opening a window on the object itself: by an
/// opener, with an expiry within `maxDuration` and a reason. Resuming is always admitted, and
/// the controller's own writes go to the other rules, unless its suspension is against Git
/// ([`suspension_against_git`]). A suspension that also changes other
/// fields in the policy's own scope is refused: judged by the other rules, it would be recorded
/// as an ordinary change. `None`: not a suspension, or a resume that also changes other fields
/// in the policy's own scope (the other rules judge those).
pub(super) fn judge_suspension<'a>(policy: &GatePolicy, facts: &Facts<'a>) -> Option<RuleOutcome> {
    let (rules, break_glass) = (policy.suspensions.as_ref()?, policy.break_glass.as_ref()?);
    // A write through a subresource that changes more than it (`facts.through`: an annotation
    // through `deployments/status`) is the object's own write, and may suspend as one.
    if !facts.is_update() || !facts.subresource.is_empty() {
        return None;
    }
    let (Some(old), Some(new)) = (facts.about.old_object(), facts.about.object()) else {
        return None;
    };
    // In the policy's own scope, or where the GitOps objects are.
    let guarded = in_scope(policy, facts);
    let gitops_objects = namespace_scope(policy, facts).suspensions
        && may_carry_suspension(facts.group(), facts.kind);
    if !guarded && !gitops_objects {
        return None;
    }
    let (group, kind) = (facts.group(), facts.kind);
    // Suspension annotations are in the head; only a suspension field needs the whole object.
    let has_field = rules.has_field(group, kind);
    let read = |object: ReviewObject<'a>| match has_field {
        true => object.whole(),
        false => object.head(),
    };
    let before = rules.suspensions(group, kind, read(old));
    let after = rules.suspensions(group, kind, read(new));
    if before.is_empty() && after.is_empty() {
        return None;
    }
    let window_changed = facts
        .changes()
        .iter()
        .any(|p| is_break_glass_path(p, break_glass));
    let change =
        if after.iter().any(|s| !before.contains(s)) || (!after.is_empty() && window_changed) {
            SuspensionChange::Suspends
        } else if before.iter().any(|s| !after.contains(s)) {
            SuspensionChange::Resumes
        } else {
            return None;
        };
    let others: Vec<&FieldPath> = facts
        .changes()
        .iter()
        .filter(|p| !is_break_glass_path(p, break_glass) && !rules.covers(group, kind, p))
        .collect();
    // Outside the policy's own scope only the suspension is guarded: the rest is not judged.
    let judged_alone = others.is_empty() || !guarded;
    match change {
        SuspensionChange::Resumes => judged_alone.then(|| resumed(facts, break_glass)),
        SuspensionChange::Suspends => {
            if let Some(controller) = controller_of(policy, facts) {
                return suspension_against_git(policy, facts, controller);
            }
            // In its own scope, a suspension that came with other changes would be judged
            // (and recorded) as an ordinary change, and the controller would stop unrecorded.
            // Whoever may not open a window hears that instead (below).
            if !judged_alone && break_glass.openers.matches(facts.user) {
                return Some(refuse_suspension(policy, facts, mixed_suspension(&others)));
            }
            match suspension_window(facts, break_glass) {
                Err(problem) => Some(refuse_suspension(policy, facts, problem)),
                Ok(window) => Some(suspended(facts, break_glass, &after, window)),
            }
        }
    }
}

/// The GitOps controller's own write that suspends by a field the configuration it last applied
/// from Git declares unsuspended. Git's own suspension comes with that configuration (the apply
/// writes both), so this is a write made from a stale copy of the object: Argo CD normalizes an
/// Application from its cache and sends the difference as a merge patch without a
/// resourceVersion, and from a copy older than a resume (`syncPolicy: {}`) its
/// `{"spec":{"syncPolicy":null}}` removes the `automated` just restored. Refused, the controller
/// writes again from the object as stored. `None`: the other rules judge it (no configuration
/// applied client-side, or it agrees).
fn suspension_against_git(
    policy: &GatePolicy,
    facts: &Facts<'_>,
    controller: &Controller,
) -> Option<RuleOutcome> {
    let rules = policy.suspensions.as_ref()?;
    let (old, new) = (
        facts.about.old_object()?.whole(),
        facts.about.object()?.whole(),
    );
    let started: Vec<&SuspensionField> = rules
        .holding_fields(facts.group(), facts.kind, new)
        .into_iter()
        .filter(|field| !field.holds(&old.data))
        .collect();
    if started.is_empty() {
        return None;
    }
    // Its own configuration: another controller's (an Application an app-of-apps applied and
    // an ApplicationSet adopted) says nothing of what this one was told.
    let applied = declared_by(&serde_json::to_value(new).ok()?, controller)?;
    let against: Vec<&SuspensionField> = started
        .into_iter()
        .filter(|field| !field.holds(&applied))
        .collect();
    if against.is_empty() {
        return None;
    }
    // A field below another one named (`automated.selfHeal` under a removed `automated`) is
    // said by it.
    let named: Vec<String> = against
        .iter()
        .filter(|field| {
            !against.iter().any(|above| {
                above.path.segments().len() < field.path.segments().len()
                    && field.path.segments().starts_with(above.path.segments())
            })
        })
        .map(|field| echo(&field.path.to_string(), MAX_NAME_CHARS).into_owned())
        .collect();
    let (suspend, _) = suspend_commands(facts);
    let words = RefusalWords {
        subject: format!(
            "Controller {} ({}) may not suspend {}",
            controller.name,
            facts.about.who(),
            facts.object_words()
        ),
        why: format!(
            "its write suspends it by {}, which the configuration it last applied from Git ({LAST_APPLIED_ANNOTATION}) does not: a write made from a stale copy of the object, such as Argo CD's normalization from its cache",
            named.join(", ")
        ),
        next: format!(
            "Nothing to do: the controller writes again from the object as stored. To suspend it, commit the suspension to Git, or use {suspend}"
        ),
        owner: owner_suffix(policy),
    };
    let mut outcome = RuleOutcome::refuse(Rule::SuspensionAgainstGit, policy, words, "");
    outcome.matched = Some(controller.name.clone());
    Some(outcome)
}

/// Why a write that suspends and changes `others` too is refused.
pub(super) fn mixed_suspension(others: &[&FieldPath]) -> WindowProblem {
    const SHOWN: usize = 3;
    let mut fields: Vec<String> = others
        .iter()
        .take(SHOWN)
        .map(|p| echo(&p.to_string(), MAX_NAME_CHARS).into_owned())
        .collect();
    if others.len() > SHOWN {
        fields.push(format!("{} more", others.len() - SHOWN));
    }
    WindowProblem {
        problem: format!(
            "a write that suspends the GitOps controller may change nothing else, and this one also changes {}; suspend it on its own first, then make the change under its window",
            fields.join(", ")
        ),
        detail: String::new(),
    }
}

/// The window a suspension opens: the break-glass label and reason on the object as written,
/// set by an opener, as opening a window needs them.
pub(super) fn suspension_window(
    facts: &Facts<'_>,
    rules: &BreakGlassRules,
) -> Result<BreakGlassWindow, WindowProblem> {
    let refuse = |problem: String| WindowProblem {
        problem,
        detail: String::new(),
    };
    if !rules.openers.matches(facts.user) {
        return Err(refuse(format!(
            "a suspension is a break-glass window, which only {} may open",
            rules.openers.describe()
        )));
    }
    let new = facts
        .new_meta()
        .ok_or_else(|| refuse("the request carries no object".to_owned()))?;
    let now = facts.input.now;
    let window = match window_state(new, rules, now, WindowScope::Object) {
        WindowState::Open(window) => window,
        WindowState::Absent => {
            return Err(refuse(format!(
                "it has no expiry: a suspension is a break-glass window, and needs the label {} with its expiry (e.g. 20261130T0930Z, at most maxDuration {} from now) and the reason annotation {}",
                rules.label, rules.max_duration, rules.reason_annotation
            )));
        }
        WindowState::Malformed { problem, .. } => {
            return Err(refuse(format!("the label {}: {problem}", rules.label)));
        }
        WindowState::Expired(window) => {
            return Err(refuse(format!(
                "the expiry {} ({}) is not in the future",
                window.label_value,
                human_utc(window.expires_at)
            )));
        }
        WindowState::TooLong(window) => {
            return Err(WindowProblem {
                problem: format!(
                    "the expiry {} ({}) is more than maxDuration {} from now",
                    window.label_value,
                    human_utc(window.expires_at),
                    rules.max_duration
                ),
                detail: format!(
                    "; the latest allowed is {}",
                    human_utc(latest_expiry(now, rules.max_duration))
                ),
            });
        }
    };
    if rules.require_reason && window.reason.is_none() {
        return Err(refuse(format!(
            "a reason is required: set the annotation {} in the same request (e.g. \"{REASON_EXAMPLE}\")",
            rules.reason_annotation
        )));
    }
    if let Some(problem) = reason_problem(window.reason.as_deref(), rules) {
        return Err(refuse(problem));
    }
    Ok(window)
}

/// `driftgate suspend kustomization/NAME -n NS …` and its resume, for messages.
pub(super) fn suspend_commands(facts: &Facts<'_>) -> (String, String) {
    let target = format!(
        "{}/{}",
        facts.kind.to_lowercase(),
        echo(facts.request().name(), MAX_NAME_CHARS)
    );
    let ns = facts.namespace.unwrap_or("default");
    (
        format!("driftgate suspend {target} -n {ns} --for 1h --reason \"{REASON_PLACEHOLDER}\""),
        format!("driftgate resume {target} -n {ns}"),
    )
}

pub(super) fn refuse_suspension(
    policy: &GatePolicy,
    facts: &Facts<'_>,
    why: WindowProblem,
) -> RuleOutcome {
    let (suspend, resume) = suspend_commands(facts);
    let words = RefusalWords {
        subject: format!(
            "{} may not suspend {}",
            facts.about.who(),
            facts.object_words()
        ),
        why: why.problem,
        next: format!(
            "Suspend it with {suspend} ({} may), and resume it with {resume}",
            policy
                .break_glass
                .as_ref()
                .map_or_else(String::new, |rules| rules.openers.describe())
        ),
        owner: owner_suffix(policy),
    };
    RuleOutcome::refuse(Rule::SuspensionRefused, policy, words, &why.detail)
}

pub(super) fn suspended(
    facts: &Facts<'_>,
    rules: &BreakGlassRules,
    by: &[crate::policy::suspensions::Suspension],
    window: BreakGlassWindow,
) -> RuleOutcome {
    let (_, resume) = suspend_commands(facts);
    let how: Vec<String> = by.iter().map(ToString::to_string).collect();
    let mut outcome = RuleOutcome::admit(Rule::Suspended);
    outcome.warning = Some(warning(format!(
        "driftgate: {} suspended ({}) until {} ({}); resume it with {resume} before then, or it is reported as a forgotten suspension.",
        facts.object_words(),
        how.join(", "),
        human_utc(window.expires_at),
        window.label_value,
    )));
    outcome.window = facts.stored_meta().and_then(|meta| {
        window_state(meta, rules, facts.input.now, WindowScope::Object)
            .window()
            .cloned()
    });
    outcome.new_window = Some(window);
    outcome
}

pub(super) fn resumed(facts: &Facts<'_>, rules: &BreakGlassRules) -> RuleOutcome {
    let mut outcome = RuleOutcome::admit(Rule::Resumed);
    outcome.window = facts.stored_meta().and_then(|meta| {
        window_state(meta, rules, facts.input.now, WindowScope::Object)
            .window()
            .cloned()
    });
    outcome
}
