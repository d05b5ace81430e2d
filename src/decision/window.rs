//! A break-glass window's state, read from its label and reason annotation.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::policy::BreakGlassRules;
use crate::timefmt::{WindowDuration, parse_expiry};

use super::*;

/// The state of the break-glass label on one object.
#[derive(Clone, Debug)]
pub(super) enum WindowState {
    Absent,
    Open(BreakGlassWindow),
    Expired(BreakGlassWindow),
    TooLong(BreakGlassWindow),
    Malformed { value: String, problem: String },
}

impl WindowState {
    /// The window, whatever its state; None when there is no readable label.
    pub(super) fn window(&self) -> Option<&BreakGlassWindow> {
        match self {
            WindowState::Open(w) | WindowState::Expired(w) | WindowState::TooLong(w) => Some(w),
            WindowState::Absent | WindowState::Malformed { .. } => None,
        }
    }
}

pub(super) fn window_state(
    meta: &ObjectMeta,
    rules: &BreakGlassRules,
    now: Timestamp,
    scope: WindowScope,
) -> WindowState {
    let Some(value) = meta.labels.as_ref().and_then(|l| l.get(&rules.label)) else {
        return WindowState::Absent;
    };
    let expires_at = match parse_expiry(value) {
        Ok(at) => at,
        Err(error) => {
            return WindowState::Malformed {
                value: value.clone(),
                problem: error.to_string(),
            };
        }
    };
    let window = BreakGlassWindow {
        scope,
        label_value: value.clone(),
        expires_at,
        reason: reason_of(meta, rules),
    };
    if expires_at <= now {
        WindowState::Expired(window)
    } else if expires_at > latest_expiry(now, rules.max_duration) {
        WindowState::TooLong(window)
    } else {
        WindowState::Open(window)
    }
}

/// How far a window's expiry may lie beyond `maxDuration` from this replica's clock. The CLI
/// computes the expiry from the opener's clock, and every replica checks it against its own; a
/// window opened at exactly `maxDuration` must not be refused by a replica whose clock is a few
/// seconds behind, nor leave the controller unheld there (WindowTooLong).
pub const EXPIRY_CLOCK_TOLERANCE: jiff::SignedDuration = jiff::SignedDuration::from_secs(60);

/// The latest expiry a window may have now: `maxDuration` from now, plus the clock tolerance.
pub(super) fn latest_expiry(now: Timestamp, max: WindowDuration) -> Timestamp {
    now.checked_add(max.as_signed())
        .and_then(|t| t.checked_add(EXPIRY_CLOCK_TOLERANCE))
        .unwrap_or(Timestamp::MAX)
}

pub(super) fn reason_of(meta: &ObjectMeta, rules: &BreakGlassRules) -> Option<String> {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(&rules.reason_annotation))
        .map(|r| r.trim())
        .filter(|r| !r.is_empty())
        .map(str::to_owned)
}

/// The windows that may cover this write: on the stored object, and on its namespace.
pub(super) fn windows(facts: &Facts<'_>, rules: &BreakGlassRules) -> Vec<WindowState> {
    let now = facts.input.now;
    let mut states = Vec::with_capacity(2);
    if let Some(meta) = facts.stored_meta() {
        states.push(window_state(meta, rules, now, WindowScope::Object));
    }
    if rules.namespace_wide
        && let Some(ns) = facts.input.namespace
    {
        states.push(window_state(ns, rules, now, WindowScope::Namespace));
    }
    states
}

pub(super) fn open_window(states: &[WindowState]) -> Option<&BreakGlassWindow> {
    states.iter().find_map(|s| match s {
        WindowState::Open(w) => Some(w),
        _ => None,
    })
}
