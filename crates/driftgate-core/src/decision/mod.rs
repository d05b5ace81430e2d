//! The decision: `request + policies + namespace + parent + now -> Decision`, with no I/O.
//!
//! A write is guarded by every policy whose scope matches it and admitted only if every one of
//! them admits it. For one policy the rules run in a fixed order (see [`Rule`]); the first that
//! applies decides. Everything the service later needs for side effects (Events, the backport
//! record) is in [`DecisionRecord`], so this module never talks to anything.
//!
//! Here: the request's facts, the rules' order (`evaluate`), the controller and delegation
//! rules, the mode and the assembly of verdicts. Beside it: `verdict` (the rules, what follows
//! from each, verdicts and the decision), `scope` (which writes a policy judges), `window` (a
//! window's state from its label), the rule families `break_glass`, `deletion` and
//! `suspension`, and `words` (the sentences refusals and warnings are made of).

use std::collections::BTreeMap;

use crate::cascade::DeletionCascade;
use crate::decision::ledger_guard::LedgerGuard;
use crate::policy::{BreakGlassRules, Controller, GatePolicy, PolicyIndex, PolicyMode, PolicySet};
use crate::text::{MAX_NAME_CHARS, MAX_REASON_CHARS, MAX_WARNING_CHARS, echo, warning};
use crate::timefmt::human_utc;

mod break_glass;
mod deletion;
mod facts;
/// The ledger guards its own records and their CRD.
pub mod ledger_guard;
/// GatePolicy objects are compiled when written.
pub mod policy_objects;
mod scope;
mod suspension;
mod verdict;
mod window;
mod words;

pub use self::break_glass::is_placeholder_reason;
use self::break_glass::*;
use self::deletion::*;
pub use self::deletion::{CascadeQuery, cascade_query, within};
pub use self::facts::RecentDeletes;
use self::facts::*;
pub use self::facts::{DecisionInput, StoppedControllers};
pub use self::scope::may_guard;
use self::scope::*;
use self::suspension::*;
pub use self::verdict::*;
use self::window::*;
pub use self::words::only_writers;
use self::words::*;
pub use crate::window::{BreakGlassWindow, EXPIRY_CLOCK_TOLERANCE, WindowScope};
use crate::window::{WindowState, window_state};

/// Whether a subresource request's decision could change with its parent's break-glass window:
/// a person refused for want of a window, or a controller that a window would hold. Only then
/// is the parent worth a GET.
pub fn needs_parent(policies: &PolicySet, decision: &Decision) -> bool {
    if decision.record.object.subresource.is_empty() {
        return false;
    }
    decision.record.verdicts.iter().any(|verdict| {
        let rules = verdict
            .policy_in(policies)
            .and_then(|p| p.break_glass.as_ref());
        match (verdict.rule, rules) {
            (Rule::NotPermitted, Some(_)) => true,
            (Rule::Controller, Some(rules)) => rules.hold_controller && held(policies, verdict),
            _ => false,
        }
    })
}

/// The delegation that admits an UPDATE: one of the writer's whose `fields` cover every
/// change (there is at least one), through one of its subresources. Never a change to the
/// break-glass label or reason, which only the break-glass rules judge (rule 6).
fn delegated(policy: &GatePolicy, facts: &Facts<'_>) -> Option<RuleOutcome> {
    if !facts.is_update() {
        return None;
    }
    let changes = facts.changes();
    if changes.is_empty() {
        return None;
    }
    if let Some(rules) = policy.break_glass.as_ref()
        && changes.iter().any(|path| is_break_glass_path(path, rules))
    {
        return None;
    }
    let delegation = policy.delegations.iter().find(|delegation| {
        delegation.identity.matches(facts.user)
            && delegation
                .subresources
                .iter()
                .any(|s| s == facts.subresource)
            && changes
                .iter()
                .all(|path| delegation.fields.iter().any(|f| f.covers(path)))
    })?;
    let mut outcome = RuleOutcome::admit(Rule::Delegation);
    outcome.matched = Some(delegation.name.clone());
    Some(outcome)
}

/// Decides the whole request against every policy, with no identity trusted to write backport
/// records (`driftgate eval`); `serve` uses [`decide_with_ledger`].
pub fn decide(policies: &PolicySet, input: &DecisionInput<'_>) -> Decision {
    decide_with_ledger(policies, input, &LedgerGuard::default())
}

/// [`decide`], with `ledger` saying who writes backport records and their CRD: writes of those
/// are judged by `decision::ledger_guard` alone, in every namespace.
pub fn decide_with_ledger(
    policies: &PolicySet,
    input: &DecisionInput<'_>,
    ledger: &LedgerGuard,
) -> Decision {
    decide_with_cascade(policies, input, ledger, None)
}

/// [`decide_with_ledger`], with `cascade` the protected objects a DELETE would take with it, as
/// the server read them for the [`cascade_query`]: each is judged as if it were deleted itself.
pub fn decide_with_cascade<'a>(
    policies: &PolicySet,
    input: &'a DecisionInput<'a>,
    ledger: &LedgerGuard,
    cascade: Option<&'a DeletionCascade>,
) -> Decision {
    let mut facts = Facts::new(input);
    facts.cascade = cascade;
    if let Some(verdict) = crate::decision::policy_objects::judge(input.request) {
        return assemble(&facts, vec![verdict]);
    }
    if let Some(verdict) =
        crate::decision::ledger_guard::judge(policies, ledger, input.request, input.now)
    {
        return assemble(&facts, vec![verdict]);
    }
    let mut verdicts = Vec::new();
    for (index, policy) in policies.indexed() {
        if let Some(outcome) = evaluate(policy, &facts) {
            let verdict = apply_mode(index, policy, outcome);
            verdicts.push(with_silence(verdict, policy, input));
        }
    }
    assemble(&facts, verdicts)
}

/// A person told to change the object in Git is also told when the policy's GitOps controller
/// looks stopped, because then Git does not reach the cluster (see `silence`). The message only:
/// the Event's words stay the same for every repeat of the write.
fn with_silence(
    mut verdict: PolicyVerdict,
    policy: &GatePolicy,
    input: &DecisionInput<'_>,
) -> PolicyVerdict {
    let Some(silence) = input.silence.filter(|_| !verdict.allowed) else {
        return verdict;
    };
    if let (true, Some(message), Some(sentence)) = (
        verdict.rule.properties().refusal_points_to_git,
        verdict.message.as_mut(),
        silence.sentence(policy, input.now),
    ) {
        message.push(' ');
        message.push_str(&sentence);
    }
    verdict
}

/// The rules for one policy, in order. `None`: the policy does not guard this write.
fn evaluate(policy: &GatePolicy, facts: &Facts<'_>) -> Option<RuleOutcome> {
    // Nothing outside where the policy judges at all: the blast-radius keeper leaves those
    // namespaces out of the webhook, so no rule may depend on them.
    if !namespace_scope(policy, facts).judged() && !guards_cluster_object(policy, facts) {
        return None;
    }
    // 1. Destructive deletes, whatever `resources` and `operations` guard.
    if let Some(refusal) = refuse_deletion(policy, facts) {
        return Some(refusal);
    }
    // Then suspensions of the GitOps controller, in the policy's namespaces and in those that
    // hold the GitOps objects.
    if let Some(outcome) = judge_suspension(policy, facts) {
        return Some(outcome);
    }
    if !in_scope(policy, facts) {
        return None;
    }
    if let Some(refusal) = unreadable_update(policy, facts) {
        return Some(refusal);
    }
    if let Some(refusal) = spoofed_field_manager(policy, facts) {
        return Some(refusal);
    }
    let rules = policy.break_glass.as_ref();
    if let Some(outcome) = judge_controller(policy, facts, rules) {
        return Some(outcome);
    }

    // 4. Delegations: named identities limited to named fields.
    if facts.is_update() {
        if let Some(outcome) = delegated(policy, facts) {
            return Some(outcome);
        }
        // 5. Nothing that matters changed.
        if facts.changes().is_empty() {
            return Some(RuleOutcome::admit(Rule::NoEffectiveChange));
        }
    }

    let Some(rules) = rules else {
        return Some(not_permitted(policy, facts, None));
    };
    let new_window = match judge_label_change(policy, facts, rules) {
        Ok(new_window) => new_window,
        Err(outcome) => return Some(*outcome),
    };
    Some(judge_windows(policy, facts, rules, new_window))
}

/// An UPDATE must show both sides, or no rule can tell what it changes: fail closed.
fn unreadable_update(policy: &GatePolicy, facts: &Facts<'_>) -> Option<RuleOutcome> {
    if !facts.is_update() {
        return None;
    }
    let missing = missing_object(facts.about)?;
    let words = RefusalWords {
        subject: facts.may_not(),
        why: format!(
            "the review carries no {missing}, so driftgate cannot tell what the write changes"
        ),
        next: "The API server always sends both; if this keeps happening, check what sits between it and driftgate".to_owned(),
        owner: owner_suffix(policy),
    };
    Some(RuleOutcome::refuse(Rule::Unreadable, policy, words, ""))
}

/// 2. A field manager is chosen by the client: one that names a controller is only believed
///    from that controller's identity.
fn spoofed_field_manager(policy: &GatePolicy, facts: &Facts<'_>) -> Option<RuleOutcome> {
    let raw_fm = facts.about.field_manager()?;
    let fm = echo(raw_fm, MAX_NAME_CHARS);
    let claimed: Vec<_> = policy
        .controllers
        .iter()
        .filter(|c| c.field_managers.is_match(raw_fm))
        .collect();
    if claimed.is_empty() || claimed.iter().any(|c| c.identity.matches(facts.user)) {
        return None;
    }
    let words = RefusalWords {
        subject: format!("{} with field manager \"{fm}\"", facts.may_not()),
        why: format!("it belongs to controller {}", claimed[0].name),
        next: "Writing as the controller would hand it ownership of your change and hide the drift from it; \
               use your own field manager, and change the object in Git"
            .to_owned(),
        owner: owner_suffix(policy),
    };
    Some(RuleOutcome::refuse(
        Rule::FieldManagerSpoofing,
        policy,
        words,
        "",
    ))
}

/// 3. The controller's writes are the desired state, unless a window holds the object (and
///    the controller is one that windows hold: GitOps, not Kubernetes' own).
fn judge_controller(
    policy: &GatePolicy,
    facts: &Facts<'_>,
    rules: Option<&BreakGlassRules>,
) -> Option<RuleOutcome> {
    let controller = policy.controllers.iter().find(|c| {
        c.identity.matches(facts.user)
            && match facts.about.field_manager() {
                None => true,
                Some(fm) => c.field_manager_patterns.is_empty() || c.field_managers.is_match(fm),
            }
    })?;
    let held = rules.filter(|r| r.hold_controller && controller.held_by_windows);
    if let Some(rules) = held {
        let states = windows(facts, rules);
        if let Some(window) = open_window(&states) {
            return Some(held_controller(policy, facts, rules, controller, window));
        }
    }
    let mut outcome = RuleOutcome::admit(Rule::Controller);
    outcome.matched = Some(controller.name.clone());
    Some(outcome)
}

/// A controller's write while a window holds the object: refused, but for the write that only
/// closes the window and for the fields the policy delegates to the same identity.
fn held_controller(
    policy: &GatePolicy,
    facts: &Facts<'_>,
    rules: &BreakGlassRules,
    controller: &Controller,
    window: &BreakGlassWindow,
) -> RuleOutcome {
    if closes_window_only(facts, rules) {
        let mut outcome = RuleOutcome::admit(Rule::BreakGlassClosed);
        outcome.matched = Some(controller.name.clone());
        outcome.window = Some(window.clone());
        return outcome;
    }
    // A window holds the controller off what Git declares, not off the fields the policy
    // delegates to the same identity: Argo CD's application-controller writes an
    // Application's status and `operation` through the object itself, and held off them it
    // would never sync the emergency change.
    if let Some(outcome) = delegated(policy, facts) {
        return outcome;
    }
    let words = RefusalWords {
        subject: format!(
            "Controller {} ({}) may not {} {} while {} holds it",
            controller.name,
            facts.about.who(),
            facts.about.operation_word(),
            facts.object_words(),
            describe_window(window),
        ),
        why: String::new(),
        next: format!(
            "Backport the emergency change to Git, then close the window (remove the label {}) so the controller can reconcile again",
            rules.label
        ),
        owner: String::new(),
    };
    let mut outcome = RuleOutcome::refuse(Rule::ControllerHeld, policy, words, "");
    outcome.matched = Some(controller.name.clone());
    outcome.window = Some(window.clone());
    outcome
}

/// 6. Changes to the break-glass label or reason must follow the break-glass rules, whether
///    or not other fields change in the same write. `Err`: the write's outcome, decided here (a
///    refusal, or the label change admitted when it is the whole write; boxed: labels change
///    rarely, and the common `Ok` stays small); `Ok`: the window this write opens or extends,
///    if any, for the rules that judge the rest of it.
fn judge_label_change(
    policy: &GatePolicy,
    facts: &Facts<'_>,
    rules: &BreakGlassRules,
) -> Result<Option<BreakGlassWindow>, Box<RuleOutcome>> {
    if !facts.is_update() || !facts.subresource.is_empty() {
        return Ok(None);
    }
    let changes = facts.changes();
    let touched = changes
        .iter()
        .filter(|p| is_break_glass_path(p, rules))
        .count();
    if touched == 0 {
        return Ok(None);
    }
    let change = break_glass_change(facts, rules)
        .map_err(|problem| Box::new(refuse_window_change(facts, policy, problem)))?;
    let (rule, window) = match change {
        BreakGlassChange::Opened(w) => (Rule::BreakGlassOpened, Some(w)),
        BreakGlassChange::Extended(w) => (Rule::BreakGlassExtended, Some(w)),
        BreakGlassChange::Amended(w) => (Rule::BreakGlassAmended, w),
        BreakGlassChange::Closed => (Rule::BreakGlassClosed, None),
    };
    if touched != changes.len() {
        return Ok(window);
    }
    let mut outcome = RuleOutcome::admit(rule);
    if let Some(w) = &window {
        outcome.warning = Some(warning(format!(
            "driftgate: break-glass window open on {} until {} ({}); {}every change made in it must be backported to Git.",
            facts.object_words(),
            human_utc(w.expires_at),
            w.label_value,
            held_controllers(policy, rules),
        )));
    }
    outcome.new_window = window;
    // The window as it was, so that a close can say what it closed.
    outcome.window = facts.stored_meta().and_then(|meta| {
        window_state(meta, rules, facts.input.now, WindowScope::Object)
            .window()
            .cloned()
    });
    Err(Box::new(outcome))
}

/// 7. An open window admits its openers; a window too long, expired or malformed is named in
///    the refusal.
fn judge_windows(
    policy: &GatePolicy,
    facts: &Facts<'_>,
    rules: &BreakGlassRules,
    new_window: Option<BreakGlassWindow>,
) -> RuleOutcome {
    let states = windows(facts, rules);
    if let Some(window) = open_window(&states) {
        if rules.openers.matches(facts.user) {
            let who = facts.about.who();
            let mut outcome = RuleOutcome::admit(Rule::BreakGlassWindow);
            // The API server keeps 256 characters of a warning: the sentence is short, and the
            // reason gives way, so that the instruction at its end survives.
            let object = facts.object_words();
            let text = |reason_chars| {
                format!(
                    "driftgate: {who} changed {object} under {}; backport it to Git before the window closes.",
                    describe_window_within(window, reason_chars),
                )
            };
            let without_reason = text(0).chars().count();
            let reason_chars =
                MAX_REASON_CHARS.min(MAX_WARNING_CHARS.saturating_sub(without_reason + 1));
            outcome.warning = Some(warning(text(reason_chars)));
            outcome.window = Some(window.clone());
            outcome.new_window = new_window;
            return outcome;
        }
        let mut outcome = not_permitted(policy, facts, Some(window));
        outcome.window = Some(window.clone());
        return outcome;
    }
    for state in &states {
        if let WindowState::TooLong(window) = state {
            let words = RefusalWords {
                subject: facts.may_not(),
                why: format!(
                    "its break-glass label {} expires at {}, more than the policy's maxDuration of {} from now, so it cannot have been opened through driftgate",
                    window.label_value,
                    human_utc(window.expires_at),
                    rules.max_duration,
                ),
                next: format!(
                    "Close it and open a new window with {}",
                    facts.open_command()
                ),
                owner: owner_suffix(policy),
            };
            let mut outcome = RuleOutcome::refuse(Rule::WindowTooLong, policy, words, "");
            outcome.window = Some(window.clone());
            return outcome;
        }
    }
    for state in &states {
        if let WindowState::Expired(window) = state {
            let words = RefusalWords {
                subject: facts.may_not(),
                why: format!("{} expired", describe_window(window)),
                next: format!(
                    "Change it in Git, or open a new window: {}",
                    facts.open_command()
                ),
                owner: owner_suffix(policy),
            };
            let mut outcome = RuleOutcome::refuse(Rule::WindowExpired, policy, words, "");
            outcome.window = Some(window.clone());
            return outcome;
        }
    }
    let malformed = states.iter().find_map(|s| match s {
        WindowState::Malformed { value, problem } => Some((value, problem)),
        _ => None,
    });
    let mut outcome = not_permitted(policy, facts, None);
    if let (Some((_, problem)), Some(message)) = (malformed, outcome.message.as_mut()) {
        message.push_str(&format!(
            " The break-glass label present is ignored: {problem}."
        ));
    }
    outcome
}

/// 8. The default: only the policy's controllers write here.
fn not_permitted(
    policy: &GatePolicy,
    facts: &Facts<'_>,
    window: Option<&BreakGlassWindow>,
) -> RuleOutcome {
    let controllers: Vec<_> = policy.controllers.iter().map(|c| c.name.as_str()).collect();
    let writers = only_writers(&controllers);
    let how = match (&policy.break_glass, window) {
        (Some(rules), Some(window)) => format!(
            "{} is open, but only {} may use it. Change it in Git, or ask an opener",
            capitalized(&describe_window(window)),
            rules.openers.describe()
        ),
        (Some(rules), None) => format!(
            "Change it in Git, or, in an emergency, open a break-glass window ({} may): {}",
            rules.openers.describe(),
            facts.open_command()
        ),
        (None, _) => "Change it in Git".to_owned(),
    };
    let words = RefusalWords {
        subject: facts.may_not(),
        why: writers,
        next: how,
        owner: owner_suffix(policy),
    };
    let mut outcome = RuleOutcome::refuse(Rule::NotPermitted, policy, words, "");
    let message = outcome.message.as_mut().expect("a refusal has a message");
    if let Some(forged) = &facts.all_changes().forged_ownership {
        message.push_str(&format!(
            " The write changes field ownership ({forged}): who owns a field decides what the controller's next apply resets or prunes."
        ));
    }
    if !facts.kind_known {
        message.push_str(&format!(
            " driftgate could not resolve the kind behind resource \"{}\" from API discovery, so it judged the write as guarded (fail closed).",
            facts.target_type()
        ));
    }
    outcome
}

fn apply_mode(index: PolicyIndex, policy: &GatePolicy, outcome: RuleOutcome) -> PolicyVerdict {
    let audit = policy.mode == PolicyMode::Audit;
    let would_deny = !outcome.admit && audit;
    let warning = if would_deny {
        outcome.message.as_ref().map(|m| {
            warning(format!(
                "driftgate audit (policy \"{}\" would deny in Enforce mode): {m}",
                policy.name
            ))
        })
    } else {
        outcome.warning
    };
    PolicyVerdict {
        policy: policy.name.clone(),
        policy_index: Some(index),
        mode: policy.mode,
        rule: outcome.rule,
        allowed: outcome.admit || audit,
        would_deny,
        message: outcome.message,
        warning,
        matched: outcome.matched,
        window: outcome.window,
        new_window: outcome.new_window,
        refusal: outcome.refusal,
    }
}

fn assemble(facts: &Facts<'_>, verdicts: Vec<PolicyVerdict>) -> Decision {
    let request = facts.request();
    let allowed = verdicts.iter().all(|v| v.allowed);
    let deciding: Vec<&PolicyVerdict> = if !allowed {
        verdicts.iter().filter(|v| !v.allowed).collect()
    } else if verdicts.iter().any(|v| v.would_deny) {
        verdicts.iter().filter(|v| v.would_deny).collect()
    } else {
        verdicts.iter().collect()
    };
    let rule = deciding.first().map_or(Rule::OutOfScope, |v| v.rule);
    let message = if allowed {
        String::new()
    } else {
        deciding
            .iter()
            .filter_map(|v| v.message.as_deref())
            .collect::<Vec<_>>()
            .join(" ")
    };
    let warnings: Vec<String> = verdicts.iter().filter_map(|v| v.warning.clone()).collect();
    let mut audit_annotations = BTreeMap::new();
    let decision_word = match (allowed, verdicts.iter().any(|v| v.would_deny)) {
        (false, _) => "denied",
        (true, true) => "allowed-audit",
        (true, false) => "allowed",
    };
    audit_annotations.insert(AUDIT_DECISION.to_owned(), decision_word.to_owned());
    audit_annotations.insert(AUDIT_RULE.to_owned(), rule.as_str().to_owned());
    if !deciding.is_empty() {
        let names: Vec<&str> = deciding.iter().map(|v| v.policy.as_str()).collect();
        audit_annotations.insert(AUDIT_POLICY.to_owned(), names.join(","));
    }
    let changed_fields = facts
        .changes
        .get()
        .map(|changes| changes.paths.iter().map(ToString::to_string).collect())
        .unwrap_or_default();
    let record = DecisionRecord {
        uid: request.uid().to_owned(),
        operation: facts.about.operation_name().to_owned(),
        user: facts.about.username().to_owned(),
        groups: facts.user.groups.clone().unwrap_or_default(),
        field_manager: facts.about.field_manager().map(str::to_owned),
        dry_run: request.dry_run(),
        object: ObjectRef {
            group: request.resource().group.clone(),
            version: request.resource().version.clone(),
            kind: facts.kind.to_owned(),
            resource: request.resource().resource.clone(),
            subresource: facts.subresource.to_owned(),
            namespace: facts.namespace.unwrap_or("").to_owned(),
            name: request.name().to_owned(),
        },
        rule,
        verdicts,
        changed_fields,
    };
    Decision {
        allowed,
        message,
        warnings,
        audit_annotations,
        record,
    }
}

/// The decision for a write that [`may_guard`] but whose object could not be read (`problem`
/// says why): every policy that may guard it refuses (an Audit policy only warns), since
/// nothing can be said about what the write changes.
pub fn unreadable(policies: &PolicySet, input: &DecisionInput<'_>, problem: &str) -> Decision {
    let facts = Facts::new(input);
    let verdicts = policies
        .indexed()
        .filter(|(_, policy)| may_guard_with(policy, input.request.request(), input.namespace))
        .map(|(index, policy)| {
            let words = RefusalWords {
                subject: facts.may_not(),
                why: format!(
                    "driftgate could not read the object in the request ({problem}), so it cannot tell what the change does"
                ),
                next: "Send the object as valid Kubernetes JSON; if the API server sent this request, report it to driftgate's maintainers".to_owned(),
                owner: owner_suffix(policy),
            };
            apply_mode(
                index,
                policy,
                RuleOutcome::refuse(Rule::Unreadable, policy, words, ""),
            )
        })
        .collect();
    assemble(&facts, verdicts)
}
