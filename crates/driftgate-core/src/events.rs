//! Kubernetes Events for decisions, the pure part: which Events a decision calls for
//! ([`planned_events`]), with their reasons, types and notes. `driftgate_kube::event_sink`
//! publishes them from a bounded queue, so a slow or failing API server never delays or changes
//! a decision.

use k8s_openapi::api::core::v1::ObjectReference;

use crate::decision::{
    BreakGlassWindow, Decision, PolicyVerdict, RefusalEvent, RefusalWords, Rule, WindowScope,
};
use crate::request::RequestFacts;
use crate::text::echo;
use crate::timefmt::human_utc;

/// The reporting controller in every Event.
pub const REPORTING_CONTROLLER: &str = "driftgate.dev/webhook";

/// The API server refuses an Event whose note is longer than 1 kB.
pub const MAX_NOTE_BYTES: usize = 1024;

/// A break-glass reason is free text from an annotation; it is shortened in notes so that the
/// part that says what to do is never the part cut off.
const MAX_REASON_BYTES: usize = 200;

/// Changed fields are listed until about this many bytes, then counted ("and 12 more").
const MAX_FIELDS_BYTES: usize = 400;

/// An Event's type, as the API server knows it (`Normal` or `Warning`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventType {
    Normal,
    Warning,
}

/// Why an Event is published; the Event's `reason`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventReason {
    BreakGlassOpened,
    BreakGlassExtended,
    BreakGlassClosed,
    /// A change made under a break-glass window, which must be backported to Git.
    BreakGlassChange,
    /// The controller was refused because a window holds the object.
    ControllerHeld,
    /// Any other denial by an Enforce policy.
    WriteDenied,
    /// An Audit policy admitted what Enforce would deny.
    WouldDeny,
    /// A window expired with its changes not yet seen in Git.
    BreakGlassExpired,
    /// The controller's write carried the emergency change: Git has it.
    BackportConfirmed,
    /// The controller's write undid the emergency change.
    EmergencyChangeReverted,
    /// The controller was refused: its write would undo an emergency change awaiting backport.
    RevertRefused,
    /// A break-glass change was refused because it could not be recorded in the ledger.
    LedgerUnavailable,
    /// The GitOps controller's reconciliation of the object was suspended, until an expiry.
    Suspended,
    /// A suspension was lifted: the controller reconciles the object again.
    Resumed,
    /// A suspension outlived its expiry and nobody resumed it: Git is still not in charge.
    SuspensionExpired,
    /// A suspension past its expiry that driftgate, resuming expired ones itself, cannot undo.
    SuspensionNotResumed,
}

impl EventReason {
    pub fn as_str(self) -> &'static str {
        match self {
            EventReason::BreakGlassOpened => "BreakGlassOpened",
            EventReason::BreakGlassExtended => "BreakGlassExtended",
            EventReason::BreakGlassClosed => "BreakGlassClosed",
            EventReason::BreakGlassChange => "BreakGlassChange",
            EventReason::ControllerHeld => "ControllerHeld",
            EventReason::WriteDenied => "WriteDenied",
            EventReason::WouldDeny => "WouldDeny",
            EventReason::BreakGlassExpired => "BreakGlassExpired",
            EventReason::BackportConfirmed => "BackportConfirmed",
            EventReason::EmergencyChangeReverted => "EmergencyChangeReverted",
            EventReason::RevertRefused => "RevertRefused",
            EventReason::LedgerUnavailable => "LedgerUnavailable",
            EventReason::Suspended => "Suspended",
            EventReason::Resumed => "Resumed",
            EventReason::SuspensionExpired => "SuspensionExpired",
            EventReason::SuspensionNotResumed => "SuspensionNotResumed",
        }
    }

    /// The Event's `action`: a short verb for what was done to the object.
    pub fn action(self) -> &'static str {
        match self {
            EventReason::BreakGlassOpened => "Open",
            EventReason::BreakGlassExtended => "Extend",
            EventReason::BreakGlassClosed => "Close",
            EventReason::BreakGlassChange => "Change",
            EventReason::ControllerHeld => "Hold",
            EventReason::WriteDenied => "Deny",
            EventReason::WouldDeny => "Audit",
            EventReason::BreakGlassExpired => "Expire",
            EventReason::BackportConfirmed => "Confirm",
            EventReason::EmergencyChangeReverted => "Revert",
            EventReason::RevertRefused | EventReason::LedgerUnavailable => "Deny",
            EventReason::Suspended => "Suspend",
            EventReason::Resumed | EventReason::SuspensionNotResumed => "Resume",
            EventReason::SuspensionExpired => "Expire",
        }
    }

    pub fn event_type(self) -> EventType {
        match self {
            EventReason::BreakGlassOpened
            | EventReason::BreakGlassExtended
            | EventReason::BreakGlassClosed
            | EventReason::BreakGlassExpired
            | EventReason::BackportConfirmed
            | EventReason::Resumed => EventType::Normal,
            EventReason::EmergencyChangeReverted
            | EventReason::BreakGlassChange
            | EventReason::ControllerHeld
            | EventReason::WriteDenied
            | EventReason::WouldDeny
            | EventReason::RevertRefused
            | EventReason::LedgerUnavailable
            // Nothing reconciles the object until it is resumed: worth a look.
            | EventReason::Suspended
            | EventReason::SuspensionExpired
            // Still suspended past its expiry: somebody has to restore it.
            | EventReason::SuspensionNotResumed => EventType::Warning,
        }
    }
}

impl std::fmt::Display for EventReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An Event a decision calls for, before it is published.
#[derive(Clone, Debug, PartialEq)]
pub struct PlannedEvent {
    pub reason: EventReason,
    pub type_: EventType,
    pub action: &'static str,
    /// At most [`MAX_NOTE_BYTES`]. Holds no request uid and no time of the request, so that
    /// repeats of the same write are identical and aggregate into one Event series.
    pub note: String,
    /// The object written (for a subresource such as `scale`, its parent). No resourceVersion:
    /// it changes with every write and would split a series.
    pub regarding: ObjectReference,
}

impl PlannedEvent {
    /// An Event of `reason` with its type and action, the note cut to [`MAX_NOTE_BYTES`].
    pub fn new(reason: EventReason, note: String, regarding: ObjectReference) -> Self {
        PlannedEvent {
            reason,
            type_: reason.event_type(),
            action: reason.action(),
            note: truncate(note, MAX_NOTE_BYTES),
            regarding,
        }
    }
}

/// The Events a decision calls for: one per policy verdict that calls for one, identical ones
/// (two policies using the same window) once. Nothing for a dry run, which must have no side
/// effects (the webhook declares `sideEffects: NoneOnDryRun`).
///
/// When the write is denied, only the denials are reported: the admitting verdicts of other
/// policies describe a write that did not happen.
pub fn planned_events(request: &RequestFacts<'_>, decision: &Decision) -> Vec<PlannedEvent> {
    if request.request().dry_run() || decision.record.dry_run {
        return Vec::new();
    }
    // Most reviews call for no Event (a controller's apply, an unguarded write): nothing is
    // built for them.
    let reported = |verdict: &&PolicyVerdict| {
        (decision.allowed || !verdict.allowed) && calls_for_event(verdict)
    };
    let mut verdicts = decision.record.verdicts.iter().filter(reported).peekable();
    if verdicts.peek().is_none() {
        return Vec::new();
    }
    let Some(regarding) = request.regarding(&decision.record.object.kind) else {
        tracing::debug!(
            uid = %request.request().uid(),
            "no Event for a request without an object name"
        );
        return Vec::new();
    };
    let words = Words::new(request, decision);
    let mut planned: Vec<PlannedEvent> = Vec::new();
    for verdict in verdicts {
        let Some((reason, note)) = plan_one(verdict, &words) else {
            continue;
        };
        let event = PlannedEvent::new(reason, note, regarding.clone());
        if !planned.contains(&event) {
            planned.push(event);
        }
    }
    planned
}

/// Whether a verdict calls for an Event: an audit denial, a refusal (but of a GatePolicy,
/// whose author sees it at apply time), and the admitted changes of windows and suspensions.
fn calls_for_event(verdict: &PolicyVerdict) -> bool {
    if verdict.would_deny {
        return true;
    }
    let properties = verdict.rule.properties();
    if !verdict.allowed {
        return properties.refusal_event != RefusalEvent::None;
    }
    properties.announced_when_admitted
}

/// The reason and note for one verdict that [`calls_for_event`], or None when it calls for
/// none after all.
fn plan_one(verdict: &PolicyVerdict, words: &Words) -> Option<(EventReason, String)> {
    if verdict.would_deny {
        let note = refusal_note(verdict, |refusal| match refusal {
            Refusal::Words(words) => audit_note(words, &verdict.policy, verdict.rule),
            Refusal::Message(message) => format!(
                "{message} Admitted because policy \"{}\" is in Audit mode.",
                verdict.policy
            ),
        });
        return Some((EventReason::WouldDeny, note));
    }
    if verdict.allowed {
        return admitted(verdict, words);
    }
    let reason = match verdict.rule.properties().refusal_event {
        RefusalEvent::WriteDenied => EventReason::WriteDenied,
        RefusalEvent::ControllerHeld => EventReason::ControllerHeld,
        RefusalEvent::RevertRefused => EventReason::RevertRefused,
        RefusalEvent::LedgerUnavailable => EventReason::LedgerUnavailable,
        // calls_for_event left it out.
        RefusalEvent::None => return None,
    };
    Some((
        reason,
        refusal_note(verdict, |refusal| refusal.sentence(verdict)),
    ))
}

/// The Event of an admitting verdict, if it calls for one.
fn admitted(verdict: &PolicyVerdict, words: &Words) -> Option<(EventReason, String)> {
    match verdict.rule {
        Rule::BreakGlassOpened => Some((
            EventReason::BreakGlassOpened,
            format!(
                "{} opened a break-glass window on {}: {}. Every change made in it must be backported to Git.",
                words.who,
                words.object,
                window_terms(verdict.new_window.as_ref()),
            ),
        )),
        Rule::BreakGlassExtended => Some((
            EventReason::BreakGlassExtended,
            format!(
                "{} extended the break-glass window on {}: {}. Every change made in it must be backported to Git.",
                words.who,
                words.object,
                window_terms(verdict.new_window.as_ref()),
            ),
        )),
        Rule::BreakGlassClosed => Some((
            EventReason::BreakGlassClosed,
            match verdict.window.as_ref().or(verdict.new_window.as_ref()) {
                Some(window) => format!(
                    "{} closed the break-glass window on {} ({}); the GitOps controller reconciles it again.",
                    words.who,
                    words.object,
                    window_terms(Some(window)),
                ),
                None => format!(
                    "{} closed the break-glass window on {}; the GitOps controller reconciles it again.",
                    words.who, words.object,
                ),
            },
        )),
        Rule::BreakGlassWindow => {
            let mut note = format!(
                "{} {} {} under {}",
                words.who,
                words.past,
                words.object,
                window_words(verdict.window.as_ref()),
            );
            if let Some(fields) = &words.fields {
                note.push_str(&format!(": {fields}"));
            }
            if let Some(new) = verdict
                .new_window
                .as_ref()
                .filter(|new| Some(*new) != verdict.window.as_ref())
            {
                note.push_str(&format!(
                    "; the window now runs until {} (label {})",
                    human_utc(new.expires_at),
                    new.label_value
                ));
            }
            note.push_str(
                ". This is an emergency change: backport it to Git before the window closes, or the controller will revert it.",
            );
            Some((EventReason::BreakGlassChange, note))
        }
        Rule::Suspended => Some((
            EventReason::Suspended,
            format!(
                "{} suspended the GitOps controller's reconciliation of {}: {}. Nothing resumes it at expiry (unless driftgate runs with --resume-expired-suspensions); past it, it is reported as a forgotten suspension.",
                words.who,
                words.object,
                window_terms(verdict.new_window.as_ref()),
            ),
        )),
        Rule::Resumed => Some((
            EventReason::Resumed,
            match verdict.window.as_ref() {
                Some(window) => format!(
                    "{} resumed the GitOps controller's reconciliation of {} (suspended {}).",
                    words.who,
                    words.object,
                    window_terms(Some(window)),
                ),
                None => format!(
                    "{} resumed the GitOps controller's reconciliation of {}.",
                    words.who, words.object,
                ),
            },
        )),
        _ => None,
    }
}

/// "bob may not update Deployment staging-web/web once policy "staging" is enforced: only its
/// controllers (flux) write here (rule NotPermitted). Change it in Git. Admitted because the
/// policy is in Audit mode." The words are the refusal's ([`RefusalWords`], made by the rule in
/// `decision`): an Event never words a refusal on its own.
fn audit_note(words: &RefusalWords, policy: &str, rule: Rule) -> String {
    let mut note = format!("{} once policy \"{policy}\" is enforced", words.subject);
    if !words.why.is_empty() {
        note.push_str(&format!(": {}", words.why));
    }
    note.push_str(&format!(" (rule {rule})"));
    if !words.next.is_empty() {
        note.push_str(&format!(". {}", words.next));
    }
    note.push_str(&words.owner);
    note.push_str(". Admitted because the policy is in Audit mode.");
    note
}

/// What a refusing verdict says, for its Event.
enum Refusal<'v> {
    /// In parts, from the rule that refused.
    Words(&'v RefusalWords),
    /// Only as its message (a refusal given as a message alone): the Event repeats it.
    Message(&'v str),
}

impl Refusal<'_> {
    fn sentence(&self, verdict: &PolicyVerdict) -> String {
        match self {
            Refusal::Words(words) => words.sentence(&verdict.policy, verdict.rule),
            Refusal::Message(message) => (*message).to_owned(),
        }
    }
}

/// A refusal's note: what `frame` makes of its words, within [`MAX_NOTE_BYTES`]. A note that
/// would be longer gives way in `why` (a long window reason, a long field manager), so that
/// who may not do what and what to do next stay whole.
fn refusal_note(verdict: &PolicyVerdict, frame: impl Fn(Refusal<'_>) -> String) -> String {
    let Some(words) = &verdict.refusal else {
        let message = verdict.message.as_deref().unwrap_or("");
        return frame(Refusal::Message(message));
    };
    let note = frame(Refusal::Words(words));
    let over = note.len().saturating_sub(MAX_NOTE_BYTES);
    if over == 0 {
        return note;
    }
    let shorter = RefusalWords {
        why: truncate(words.why.clone(), words.why.len().saturating_sub(over)),
        ..words.clone()
    };
    frame(Refusal::Words(&shorter))
}

/// "the break-glass window on the object (until 2026-11-30 10:00 UTC, label 20261130T1000Z, reason …)"
fn window_words(window: Option<&BreakGlassWindow>) -> String {
    match window {
        Some(window) => {
            let place = match window.scope {
                WindowScope::Object => "on the object",
                WindowScope::Namespace => "on the namespace",
            };
            format!(
                "the break-glass window {place} ({})",
                window_terms(Some(window))
            )
        }
        None => "a break-glass window".to_owned(),
    }
}

/// "until 2026-11-30 10:00 UTC, label 20261130T1000Z, reason \"INC-4711: …\""
fn window_terms(window: Option<&BreakGlassWindow>) -> String {
    let Some(window) = window else {
        return "expiry unknown".to_owned();
    };
    let reason = match &window.reason {
        Some(reason) => format!(
            "reason \"{}\"",
            truncate(
                echo(reason, MAX_REASON_BYTES).into_owned(),
                MAX_REASON_BYTES
            )
        ),
        None => "no reason given".to_owned(),
    };
    format!(
        "until {}, label {}, {reason}",
        human_utc(window.expires_at),
        window.label_value
    )
}

/// The parts of a note that describe the request.
struct Words {
    who: String,
    /// "changed", "deleted", "created"
    past: &'static str,
    /// "Deployment prod-payments/api", "Deployment prod-payments/api (scale)", "Namespace prod-orders"
    object: String,
    /// The fields an UPDATE changed, listed (shortened when many).
    fields: Option<String>,
}

impl Words {
    fn new(request: &RequestFacts<'_>, decision: &Decision) -> Self {
        let record = &decision.record;
        Words {
            who: request.who().to_owned(),
            past: request.past_word(),
            object: request.object_words(&record.object.kind, &record.object.subresource, None),
            fields: (!record.changed_fields.is_empty())
                .then(|| list_fields(&record.changed_fields)),
        }
    }
}

/// "spec.replicas, spec.template.spec.containers[0].image", shortened to "…, and 12 more".
fn list_fields(fields: &[String]) -> String {
    let mut out = String::new();
    for (i, field) in fields.iter().enumerate() {
        let separator = if i == 0 { "" } else { ", " };
        if !out.is_empty() && out.len() + separator.len() + field.len() > MAX_FIELDS_BYTES {
            out.push_str(&format!(", and {} more", fields.len() - i));
            return out;
        }
        out.push_str(separator);
        out.push_str(field);
    }
    truncate(out, MAX_FIELDS_BYTES)
}

/// Cuts `text` to at most `max` bytes on a char boundary, marking the cut with "…".
fn truncate(mut text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    const MARK: &str = "…";
    let mut cut = max.saturating_sub(MARK.len());
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    text.truncate(cut);
    text.push_str(MARK);
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncate_cuts_on_a_char_boundary_within_the_limit() {
        let text = "é".repeat(600); // 1200 bytes
        let cut = truncate(text, MAX_NOTE_BYTES);
        assert!(cut.len() <= MAX_NOTE_BYTES, "{}", cut.len());
        assert!(cut.ends_with('…'));
        assert_eq!(truncate("short".to_owned(), 10), "short");
        assert_eq!(truncate("abcdef".to_owned(), 4), "a…");
    }

    #[test]
    fn long_field_lists_are_counted_not_cut() {
        let fields: Vec<String> = (0..100)
            .map(|i| format!("spec.template.spec.containers[{i}].image"))
            .collect();
        let listed = list_fields(&fields);
        assert!(listed.len() <= MAX_FIELDS_BYTES + 20, "{listed}");
        assert!(listed.starts_with("spec.template.spec.containers[0].image, "));
        assert!(listed.ends_with(" more"), "{listed}");
        assert_eq!(list_fields(&["spec.replicas".to_owned()]), "spec.replicas");
    }
}
