//! The rules of break-glass windows: opening, extending, amending and closing one, and an
//! opener's change under one.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::fieldpath::FieldPath;
use crate::policy::{BreakGlassRules, GatePolicy};
use crate::text::{MAX_REASON_CHARS, echo};
use crate::timefmt::human_utc;
use crate::window::{
    BreakGlassWindow, WindowScope, WindowState, latest_expiry, reason_of, window_state,
};

use super::facts::*;
use super::verdict::*;
use super::words::*;

/// What an UPDATE does to the break-glass label and reason.
pub(super) enum BreakGlassChange {
    Opened(BreakGlassWindow),
    Extended(BreakGlassWindow),
    Amended(Option<BreakGlassWindow>),
    Closed,
}

pub(super) fn is_break_glass_path(path: &FieldPath, rules: &BreakGlassRules) -> bool {
    let s = path.segments();
    s.len() == 3
        && s[0] == "metadata"
        && ((s[1] == "labels" && s[2] == rules.label)
            || (s[1] == "annotations" && s[2] == rules.reason_annotation))
}

/// What a reason should look like, in messages.
pub(super) const REASON_EXAMPLE: &str = "INC-4711: api scaled to 8, checkout p99 over 2 s";

/// Whether `reason` is the hint's placeholder, copied rather than replaced.
pub fn is_placeholder_reason(reason: &str) -> bool {
    let placeholder = REASON_PLACEHOLDER
        .split_once(": ")
        .map_or(REASON_PLACEHOLDER, |(_, rest)| rest);
    reason.contains('…') || reason.to_lowercase().contains(placeholder)
}

/// Why a window's reason is not acceptable: the hint's placeholder copied verbatim, or not the
/// policy's `reasonPattern`.
pub(super) fn reason_problem(reason: Option<&str>, rules: &BreakGlassRules) -> Option<String> {
    let reason = reason?;
    if is_placeholder_reason(reason) {
        return Some(format!(
            "the reason \"{}\" is the placeholder from driftgate's hint; say what the emergency is and why (e.g. \"{REASON_EXAMPLE}\")",
            echo(reason, MAX_REASON_CHARS)
        ));
    }
    let pattern = rules.reason_pattern.as_ref()?;
    (!pattern.is_match(reason)).then(|| {
        format!(
            "the reason \"{}\" does not match the policy's reasonPattern {} (e.g. a ticket id)",
            echo(reason, MAX_REASON_CHARS),
            pattern.as_str()
        )
    })
}

/// Whether an UPDATE only removes the break-glass label (and perhaps the reason).
pub(super) fn closes_window_only(facts: &Facts<'_>, rules: &BreakGlassRules) -> bool {
    if !facts.is_update() || !facts.subresource.is_empty() {
        return false;
    }
    let changes = facts.changes();
    let only_metadata =
        !changes.is_empty() && changes.iter().all(|p| is_break_glass_path(p, rules));
    let label_removed = facts.new_meta().is_some_and(|m| {
        m.labels
            .as_ref()
            .is_none_or(|labels| !labels.contains_key(&rules.label))
    });
    only_metadata && label_removed
}

/// Why the break-glass rules do not allow a change to a window.
pub(super) struct WindowProblem {
    pub(super) problem: String,
    /// What changes with the time of the request: the message says it, the Event not.
    pub(super) detail: String,
}

/// The refusal of a change to a window (rule 6).
pub(super) fn refuse_window_change(
    facts: &Facts<'_>,
    policy: &GatePolicy,
    why: WindowProblem,
) -> RuleOutcome {
    let words = RefusalWords {
        subject: format!(
            "{} may not change the break-glass window on {}",
            facts.about.who(),
            facts.object_words()
        ),
        why: why.problem,
        next: String::new(),
        owner: owner_suffix(policy),
    };
    RuleOutcome::refuse(Rule::BreakGlassRefused, policy, words, &why.detail)
}

/// What a window holds off, for its opening warning: `controller flux is held off it until
/// then; `, or nothing when the policy holds no controller (`holdController: false`, or
/// every controller `heldByWindows: false`).
pub(super) fn held_controllers(policy: &GatePolicy, rules: &BreakGlassRules) -> String {
    let held: Vec<&str> = policy
        .controllers
        .iter()
        .filter(|c| rules.hold_controller && c.held_by_windows)
        .map(|c| c.name.as_str())
        .collect();
    match held.as_slice() {
        [] => String::new(),
        [one] => format!("controller {one} is held off it until then; "),
        many => format!(
            "controllers {} are held off it until then; ",
            many.join(", ")
        ),
    }
}

/// Rule 6: opening, extending, amending or closing a window.
pub(super) fn break_glass_change(
    facts: &Facts<'_>,
    rules: &BreakGlassRules,
) -> Result<BreakGlassChange, WindowProblem> {
    let (Some(old), Some(new)) = (facts.stored_meta(), facts.new_meta()) else {
        return Err(without_detail("the request carries no object".to_owned()));
    };
    let label = |m: &'_ ObjectMeta| m.labels.as_ref().and_then(|l| l.get(&rules.label)).cloned();
    let (old_label, new_label) = (label(old), label(new));
    let is_opener = rules.openers.matches(facts.user);
    let now = facts.input.now;
    match (&old_label, &new_label) {
        (Some(_), None) => close_window(old, rules, now, is_opener),
        (old_value, Some(value)) if old_value.as_ref() == Some(value) => {
            if !is_opener {
                return Err(not_opener(rules));
            }
            amend_window(new, rules, now)
        }
        (_, Some(value)) => {
            if !is_opener {
                return Err(not_opener(rules));
            }
            open_window(old, new, value, rules, now)
        }
        (None, None) => {
            // Only the reason annotation changed, with no window: harmless for openers.
            if is_opener {
                Ok(BreakGlassChange::Amended(None))
            } else {
                Err(not_opener(rules))
            }
        }
    }
}

/// A problem that does not change with the time of the request.
fn without_detail(problem: String) -> WindowProblem {
    WindowProblem {
        problem,
        detail: String::new(),
    }
}

fn not_opener(rules: &BreakGlassRules) -> WindowProblem {
    without_detail(format!(
        "only {} may open, extend or amend a window",
        rules.openers.describe()
    ))
}

/// The label removed: the window on `old` closed, or a label that holds none tidied up.
fn close_window(
    old: &ObjectMeta,
    rules: &BreakGlassRules,
    now: Timestamp,
    is_opener: bool,
) -> Result<BreakGlassChange, WindowProblem> {
    // Closing hands the object back to the controller: openers may, the controller may
    // (handled before this rule), others may not. A label that holds no window any
    // more (past its expiry, or not an expiry) hands nothing back: removing it is
    // tidying up, which anyone who may write the object may do.
    // A window longer than maxDuration admits no write but has not ended: removing its
    // label is closing it.
    let holds_window = matches!(
        window_state(old, rules, now, WindowScope::Object),
        WindowState::Open(_) | WindowState::TooLong(_)
    );
    if is_opener || !holds_window {
        Ok(BreakGlassChange::Closed)
    } else {
        Err(without_detail(format!(
            "only {} or the controller may close a window",
            rules.openers.describe()
        )))
    }
}

/// The reason annotation on `new`, as the rules want it; `missing` says what a required reason
/// that is absent means for this change (opening, or amending an open window).
fn checked_reason(
    new: &ObjectMeta,
    rules: &BreakGlassRules,
    missing: impl FnOnce() -> String,
) -> Result<(), WindowProblem> {
    let reason = reason_of(new, &rules.reason_annotation);
    if rules.require_reason && reason.is_none() {
        return Err(without_detail(missing()));
    }
    match reason_problem(reason.as_deref(), rules) {
        Some(problem) => Err(without_detail(problem)),
        None => Ok(()),
    }
}

/// An opener's change with the label kept as it was: the reason may change, not go.
fn amend_window(
    new: &ObjectMeta,
    rules: &BreakGlassRules,
    now: Timestamp,
) -> Result<BreakGlassChange, WindowProblem> {
    checked_reason(new, rules, || {
        format!(
            "the reason annotation {} cannot be removed while the window is open",
            rules.reason_annotation
        )
    })?;
    let window = match window_state(new, rules, now, WindowScope::Object) {
        WindowState::Open(w) => Some(w),
        _ => None,
    };
    Ok(BreakGlassChange::Amended(window))
}

/// An opener's change that sets the label to `value`: a window opened, or an open one extended.
fn open_window(
    old: &ObjectMeta,
    new: &ObjectMeta,
    value: &str,
    rules: &BreakGlassRules,
    now: Timestamp,
) -> Result<BreakGlassChange, WindowProblem> {
    let window = requested_window(new, value, rules, now)?;
    checked_reason(new, rules, || {
        format!(
            "a reason is required: set the annotation {} in the same request (e.g. \"{REASON_EXAMPLE}\")",
            rules.reason_annotation
        )
    })?;
    let was_open = matches!(
        window_state(old, rules, now, WindowScope::Object),
        WindowState::Open(_)
    );
    Ok(if was_open {
        BreakGlassChange::Extended(window)
    } else {
        BreakGlassChange::Opened(window)
    })
}

/// The window the label `value` on `new` asks for, if the rules allow it.
fn requested_window(
    new: &ObjectMeta,
    value: &str,
    rules: &BreakGlassRules,
    now: Timestamp,
) -> Result<BreakGlassWindow, WindowProblem> {
    match window_state(new, rules, now, WindowScope::Object) {
        WindowState::Open(window) => Ok(window),
        WindowState::Malformed { problem, .. } => Err(without_detail(format!(
            "the label {}: {problem}",
            rules.label
        ))),
        WindowState::Expired(window) => Err(without_detail(format!(
            "the expiry {value} ({}) is not in the future",
            human_utc(window.expires_at)
        ))),
        WindowState::TooLong(window) => Err(WindowProblem {
            problem: format!(
                "the expiry {value} ({}) is more than maxDuration {} from now",
                human_utc(window.expires_at),
                rules.max_duration,
            ),
            detail: format!(
                "; the latest allowed is {}",
                human_utc(latest_expiry(now, rules.max_duration))
            ),
        }),
        // Not reached: `new` carries the label (break_glass_change matched it).
        WindowState::Absent => Err(without_detail(format!(
            "the label {} is missing",
            rules.label
        ))),
    }
}
