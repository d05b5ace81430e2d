//! A break-glass window's state, read from its label and reason annotation: computed here once,
//! for the webhook's decision, `break-glass list`, the lingering-label tracker and the
//! suspension counts and resumes, so that none of them calls a window open that another calls
//! expired or too long. Pure: the clock is passed in.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Serialize;

use crate::policy::BreakGlassRules;
use crate::timefmt::{WindowDuration, parse_expiry};

/// Where a break-glass window was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum WindowScope {
    Object,
    Namespace,
}

/// A break-glass window as read from a label (and its reason annotation).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BreakGlassWindow {
    pub scope: WindowScope,
    pub label_value: String,
    pub expires_at: Timestamp,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// What reading a window takes from a policy's break-glass rules: where the expiry and the
/// reason are, and how far ahead an expiry may lie (`None`: the reader does not know the
/// policy, so no window is too long).
#[derive(Clone, Copy, Debug)]
pub struct WindowKeys<'a> {
    pub label: &'a str,
    pub reason_annotation: &'a str,
    pub max_duration: Option<WindowDuration>,
}

impl<'a> From<&'a BreakGlassRules> for WindowKeys<'a> {
    fn from(rules: &'a BreakGlassRules) -> Self {
        WindowKeys {
            label: &rules.label,
            reason_annotation: &rules.reason_annotation,
            max_duration: Some(rules.max_duration),
        }
    }
}

/// The state of the break-glass label on one object.
#[derive(Clone, Debug)]
pub enum WindowState {
    Absent,
    Open(BreakGlassWindow),
    Expired(BreakGlassWindow),
    /// Ends later than `maxDuration` (and the clock tolerance) from now: no write is admitted
    /// under it, and the controller is not held.
    TooLong(BreakGlassWindow),
    Malformed {
        value: String,
        problem: String,
    },
}

impl WindowState {
    /// The window, whatever its state; None when there is no readable label.
    pub fn window(&self) -> Option<&BreakGlassWindow> {
        match self {
            WindowState::Open(w) | WindowState::Expired(w) | WindowState::TooLong(w) => Some(w),
            WindowState::Absent | WindowState::Malformed { .. } => None,
        }
    }
}

/// The state of the window `keys` name on `meta`, at `now`.
pub fn window_state<'k>(
    meta: &ObjectMeta,
    keys: impl Into<WindowKeys<'k>>,
    now: Timestamp,
    scope: WindowScope,
) -> WindowState {
    let keys = keys.into();
    let Some(value) = meta.labels.as_ref().and_then(|l| l.get(keys.label)) else {
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
        reason: reason_of(meta, keys.reason_annotation),
    };
    if expires_at <= now {
        WindowState::Expired(window)
    } else if keys
        .max_duration
        .is_some_and(|max| expires_at > latest_expiry(now, max))
    {
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
pub fn latest_expiry(now: Timestamp, max: WindowDuration) -> Timestamp {
    now.checked_add(max.as_signed())
        .and_then(|t| t.checked_add(EXPIRY_CLOCK_TOLERANCE))
        .unwrap_or(Timestamp::MAX)
}

/// The window's reason: the annotation's text, trimmed; `None` when absent or blank.
pub fn reason_of(meta: &ObjectMeta, reason_annotation: &str) -> Option<String> {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(reason_annotation))
        .map(|r| r.trim())
        .filter(|r| !r.is_empty())
        .map(str::to_owned)
}
