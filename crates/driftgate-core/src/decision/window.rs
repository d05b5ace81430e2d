//! The windows that may cover one write (their state is `crate::window`'s).

use crate::policy::BreakGlassRules;

use crate::window::{BreakGlassWindow, WindowScope, WindowState, window_state};

use super::facts::*;

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
