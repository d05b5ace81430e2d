//! The sentences of refusals and warnings, built from what the rules found.

use crate::cascade::Dependent;
use crate::policy::{DeletionRules, GatePolicy};
use crate::request::RequestFacts;
use crate::text::{MAX_NAME_CHARS, MAX_REASON_CHARS, echo};
use crate::timefmt::human_utc;

use crate::window::{BreakGlassWindow, WindowScope};

use super::facts::*;
use super::verdict::*;

/// At most this many characters of an API error in a refusal.
pub(super) const MAX_PROBLEM_CHARS: usize = 300;

/// At most this many protected objects are named in one refusal.
pub(super) const MAX_NAMED_DEPENDENTS: usize = 5;

pub(super) fn describe_window(window: &BreakGlassWindow) -> String {
    describe_window_within(window, MAX_REASON_CHARS)
}

/// [`describe_window`] with at most `reason_chars` of the reason.
pub(super) fn describe_window_within(window: &BreakGlassWindow, reason_chars: usize) -> String {
    let place = match window.scope {
        WindowScope::Object => "on the object",
        WindowScope::Namespace => "on the namespace",
    };
    match &window.reason {
        Some(reason) => format!(
            "the break-glass window {place} (until {}, reason \"{}\")",
            human_utc(window.expires_at),
            echo(reason, reason_chars)
        ),
        None => format!(
            "the break-glass window {place} (until {}, no reason given)",
            human_utc(window.expires_at)
        ),
    }
}

/// "Controller flux (system:serviceaccount:…) may not delete …" for a controller of the policy,
/// "bob may not delete …" for anyone else.
pub(super) fn deleter_may_not(
    controller: Option<&crate::policy::Controller>,
    facts: &Facts<'_>,
) -> String {
    match controller {
        Some(controller) => format!(
            "Controller {} ({}) may not delete {}",
            controller.name,
            facts.about.who(),
            facts.object_words()
        ),
        None => facts.may_not(),
    }
}

/// The refusal's words for protected objects the cascade would (or may) delete: those it
/// surely deletes are named; without any, those it may delete, with why driftgate cannot tell.
pub(super) fn cascade_words(
    policy: &GatePolicy,
    facts: &Facts<'_>,
    rules: &DeletionRules,
    controller: Option<&crate::policy::Controller>,
    reached: &[&Dependent],
    orphan: &str,
) -> RefusalWords {
    let surely: Vec<&Dependent> = reached
        .iter()
        .copied()
        .filter(|d| d.undetermined.is_none())
        .collect();
    let named = if surely.is_empty() {
        reached
    } else {
        &surely[..]
    };
    let namespace = facts.namespace.unwrap_or_default();
    let (it, each) = if named.len() == 1 {
        ("it", "it")
    } else {
        ("them", "each")
    };
    let annotate = format!(
        "kubectl annotate {} -n {namespace} {}=true",
        named
            .iter()
            .take(MAX_NAMED_DEPENDENTS)
            .map(|d| format!(
                "{}/{}",
                kubectl_type(&d.kind.group, &d.kind.kind, &d.resource),
                echo(d.name(), MAX_NAME_CHARS)
            ))
            .collect::<Vec<_>>()
            .join(" "),
        rules.allow_annotation
    );
    let window = match &policy.break_glass {
        Some(window) if window.namespace_wide => format!(
            ", or delete it under a break-glass window on the namespace ({} may open one: driftgate break-glass open namespace/{namespace} --for 1h --reason \"{REASON_PLACEHOLDER}\")",
            window.openers.describe()
        ),
        _ => String::new(),
    };
    let mark = format!("mark {each} first, in Git or with {annotate}{window}");
    let (why, next) = if surely.is_empty() {
        let problems: std::collections::BTreeSet<&str> = named
            .iter()
            .filter_map(|d| d.undetermined.as_deref())
            .collect();
        (
            format!(
                "driftgate could not tell whether the garbage collector would then delete {}, which the policy protects from deletion by anyone, the GitOps controller included ({})",
                dependent_words(named),
                echo(
                    &problems.into_iter().collect::<Vec<_>>().join("; "),
                    MAX_PROBLEM_CHARS
                )
            ),
            format!(
                "Retry once driftgate can read what owns {it}; if the delete is meant, {mark}; to delete it alone and keep what it owns: {orphan}"
            ),
        )
    } else {
        (
            format!(
                "the garbage collector would then delete {}, which it owns, and the policy protects {it} from deletion by anyone, the GitOps controller included, unless deleting {it} is a deliberate act",
                dependent_words(named)
            ),
            format!(
                "If that is meant, {mark}; to delete it alone and keep what it owns: {orphan}; if the controller is pruning it, check the last change in Git"
            ),
        )
    };
    RefusalWords {
        subject: deleter_may_not(controller, facts),
        why,
        next,
        owner: owner_suffix(policy),
    }
}

/// "PersistentVolumeClaim data-web-0", "PersistentVolumeClaims data-web-0 and data-web-1",
/// "PersistentVolumeClaim data-db-0 (through StatefulSet db)": grouped by kind, at most
/// [`MAX_NAMED_DEPENDENTS`] named.
pub(super) fn dependent_words(dependents: &[&Dependent]) -> String {
    let mut by_kind: Vec<(&str, Vec<String>)> = Vec::new();
    for dependent in dependents.iter().take(MAX_NAMED_DEPENDENTS) {
        let mut name = echo(dependent.name(), MAX_NAME_CHARS).into_owned();
        if !dependent.through.is_empty() {
            name.push_str(&format!(" (through {})", dependent.through.join(", ")));
        }
        match by_kind
            .iter_mut()
            .find(|(kind, _)| *kind == dependent.kind.kind)
        {
            Some((_, names)) => names.push(name),
            None => by_kind.push((&dependent.kind.kind, vec![name])),
        }
    }
    let groups: Vec<String> = by_kind
        .into_iter()
        .map(|(kind, names)| {
            let noun = if names.len() == 1 {
                kind.to_owned()
            } else {
                plural(kind)
            };
            format!("{noun} {}", and_list(&names))
        })
        .collect();
    let mut words = and_list(&groups);
    if dependents.len() > MAX_NAMED_DEPENDENTS {
        words.push_str(&format!(
            ", and {} more",
            dependents.len() - MAX_NAMED_DEPENDENTS
        ));
    }
    words
}

/// "a", "a and b", "a, b and c".
pub(super) fn and_list(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

/// The plural of a kind's name, as English makes it: Claims, Policies, Classes.
pub(super) fn plural(kind: &str) -> String {
    if kind.ends_with('s') || kind.ends_with('x') || kind.ends_with("ch") || kind.ends_with("sh") {
        format!("{kind}es")
    } else if let Some(stem) = kind.strip_suffix('y')
        && !stem.ends_with(['a', 'e', 'i', 'o', 'u'])
    {
        format!("{stem}ies")
    } else {
        format!("{kind}s")
    }
}

/// How kubectl names a type: the lowercase kind for the core and apps groups, else the fully
/// qualified resource (as [`Facts::target_type`]).
pub(super) fn kubectl_type(group: &str, kind: &str, resource: &str) -> String {
    if group.is_empty() || group == "apps" {
        kind.to_lowercase()
    } else {
        format!("{resource}.{group}")
    }
}

/// Which side of an UPDATE the review lacks, if any.
pub(super) fn missing_object(request: &RequestFacts<'_>) -> Option<&'static str> {
    match (request.old_object(), request.object()) {
        (None, None) => Some("object and no oldObject"),
        (None, Some(_)) => Some("oldObject"),
        (Some(_), None) => Some("object"),
        (Some(_), Some(_)) => None,
    }
}

pub(super) fn owner_suffix(policy: &GatePolicy) -> String {
    match &policy.owner {
        Some(owner) => format!(" (policy owner: {owner})"),
        None => String::new(),
    }
}

/// Who writes in a policy's namespaces, as every refusal and its Event say it: one wording for
/// one controller or several (a policy's controllers include Kubernetes' own, which are no
/// GitOps controller).
pub fn only_writers(controllers: &[&str]) -> String {
    match controllers {
        [] => "no one writes here directly".to_owned(),
        names => format!("only its controllers ({}) write here", names.join(", ")),
    }
}

/// `text` with its first letter upper-cased, to start a sentence.
pub(super) fn capitalized(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plurals_are_english() {
        for (kind, plural_of) in [
            ("PersistentVolumeClaim", "PersistentVolumeClaims"),
            ("Ingress", "Ingresses"),
            ("Mailbox", "Mailboxes"),
            ("Batch", "Batches"),
            ("Mesh", "Meshes"),
            ("NetworkPolicy", "NetworkPolicies"),
            ("Gateway", "Gateways"),
        ] {
            assert_eq!(plural(kind), plural_of, "{kind}");
        }
    }

    #[test]
    fn kubectl_names_core_and_apps_kinds_by_kind_and_others_by_resource() {
        assert_eq!(
            kubectl_type("", "PersistentVolumeClaim", "persistentvolumeclaims"),
            "persistentvolumeclaim"
        );
        assert_eq!(
            kubectl_type("apps", "StatefulSet", "statefulsets"),
            "statefulset"
        );
        assert_eq!(
            kubectl_type("postgresql.cnpg.io", "Cluster", "clusters"),
            "clusters.postgresql.cnpg.io"
        );
    }
}
