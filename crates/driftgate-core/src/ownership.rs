//! Whether an UPDATE changed field ownership (`metadata.managedFields`) beyond what the API
//! server itself records for that request.
//!
//! Clients may write `managedFields` directly, and the API server keeps what they write. That
//! is ownership forged: handing `f:spec.f:replicas` to the controller's Apply entry makes the
//! controller's next, unchanged apply reset the field; renaming the controller's entry keeps a
//! field alive after Git removes it. Yet every write changes `managedFields` by itself, as
//! bookkeeping of the request's own manager, and that must not count:
//!
//! - the request's own entry (its `fieldManager`; without one, the single `Update` entry that
//!   changed, since the API server names it after the User-Agent) may change as the API server
//!   computes it: an Apply entry is exactly the applied configuration, an Update entry gains the
//!   fields whose values the request changed (and `status`, which is not drift);
//! - every other entry may only lose fields, and only fields the request changed (a takeover),
//!   with its timestamp untouched ("the timestamp does not update when a field is removed from
//!   the entry because another manager took it over");
//! - past ten Update entries, the API server merges the oldest into `ancient-changes` (it
//!   renames the oldest and adds the next to it): an Update entry may vanish when its fields
//!   are there, and `ancient-changes` may grow by the fields of the Update entries that vanished.
//!
//! Anything else is a change somebody made to ownership. The walk over `fieldsV1` uses an
//! explicit stack, so an object of any depth is safe.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, Time};
use serde_json::Value;

use crate::fieldpath::FieldPath;

/// The manager the API server merges the oldest Update entries into.
const ANCIENT_CHANGES: &str = "ancient-changes";

/// Identifies an entry: the API server keeps one per manager, operation and subresource.
type EntryKey<'a> = (&'a str, &'a str, &'a str);

/// How `managedFields` changed beyond the API server's bookkeeping of this request's manager:
/// a sentence fragment naming the entry (`the managedFields entry of "kustomize-controller"
/// (Apply) gained spec.replicas`), or None when the change is bookkeeping.
pub fn forged_ownership(
    old: Option<&[ManagedFieldsEntry]>,
    new: Option<&[ManagedFieldsEntry]>,
    request_manager: Option<&str>,
    changed: &[FieldPath],
) -> Option<String> {
    let old = entries(old.unwrap_or_default());
    let new = entries(new.unwrap_or_default());
    let keys: Vec<&EntryKey<'_>> = old
        .keys()
        .chain(new.keys().filter(|k| !old.contains_key(*k)))
        .collect();
    // An entry that neither gained nor lost a field, nor moved in time or version, has no
    // problem to find below: only the changed ones are walked (most writes change one).
    let changed_keys: Vec<&EntryKey<'_>> = keys
        .iter()
        .copied()
        .filter(|k| entry_changed(old.get(*k), new.get(*k)))
        .collect();
    if changed_keys.is_empty() {
        return None;
    }
    let own = match own_entry(&keys, &old, &new, request_manager) {
        Ok(own) => own,
        Err(problem) => return Some(problem),
    };
    let ancient = keys.iter().copied().find(|k| k.0 == ANCIENT_CHANGES);
    let ancient_after = ancient.and_then(|k| fields(new.get(k)));
    // The Update entries the API server merged into ancient-changes (past ten Update entries,
    // it renames the oldest to ancient-changes and adds the next oldest to it): they vanish,
    // and their fields live on there.
    let mut merged: Vec<&Value> = Vec::new();
    for key in changed_keys.iter().copied() {
        let (before, after) = (old.get(key), new.get(key));
        if Some(key) == own {
            if let Some(problem) = own_entry_problem(key, before, after, changed) {
                return Some(problem);
            }
        } else if key.0 != ANCIENT_CHANGES {
            let vanished_update = after.is_none() && key.1 == "Update";
            let moved_to = ancient_after.filter(|_| vanished_update);
            if let Some(problem) = other_entry_problem(key, before, after, moved_to, changed) {
                return Some(problem);
            }
            if vanished_update {
                merged.extend(fields(before));
            }
        }
    }
    let (before, after) = (old.get(ancient?), new.get(ancient?));
    // ancient-changes grows only by what the Update entries merged into it held.
    first_extra(fields(before), fields(after), &Check::Any)?;
    let held = union(fields(before).into_iter().chain(merged.iter().copied()));
    let gained = first_extra(Some(&held), fields(after), &Check::Any)?;
    Some(if merged.is_empty() {
        format!(
            "the managedFields entry of \"{ANCIENT_CHANGES}\" gained {gained}, though no Update entry was merged into it"
        )
    } else {
        format!(
            "the managedFields entry of \"{ANCIENT_CHANGES}\" gained {gained}, which none of the Update entries merged into it held"
        )
    })
}

/// An entry, with its `fieldsV1` borrowed.
struct Entry<'a> {
    api_version: Option<&'a str>,
    time: Option<&'a Time>,
    fields: Option<&'a Value>,
}

fn entries(list: &[ManagedFieldsEntry]) -> BTreeMap<EntryKey<'_>, Entry<'_>> {
    list.iter()
        .map(|e| {
            let key = (
                e.manager.as_deref().unwrap_or_default(),
                e.operation.as_deref().unwrap_or_default(),
                e.subresource.as_deref().unwrap_or_default(),
            );
            let entry = Entry {
                api_version: e.api_version.as_deref(),
                time: e.time.as_ref(),
                fields: e.fields_v1.as_ref().map(|f| &f.0),
            };
            (key, entry)
        })
        .collect()
}

fn fields<'a>(entry: Option<&Entry<'a>>) -> Option<&'a Value> {
    entry.and_then(|e| e.fields)
}

fn gains(before: Option<&Entry<'_>>, after: Option<&Entry<'_>>) -> bool {
    after.is_some() && first_extra(fields(before), fields(after), &Check::Any).is_some()
}

fn entry_changed(before: Option<&Entry<'_>>, after: Option<&Entry<'_>>) -> bool {
    match (before, after) {
        (None, None) => false,
        (Some(_), None) | (None, Some(_)) => true,
        (Some(b), Some(a)) => {
            b.time != a.time
                || b.api_version != a.api_version
                // Most entries are untouched: equal trees hold no extra field either way, and
                // comparing them is cheaper than two walks.
                || (b.fields != a.fields
                    && (first_extra(b.fields, a.fields, &Check::Any).is_some()
                        || first_extra(a.fields, b.fields, &Check::Any).is_some()))
        }
    }
}

/// Which entry is the request's own: its field manager's (the Apply entry for server-side
/// apply, else the Update one), or, without a field manager, the one Update entry that gained
/// fields or moved in time. `Ok(None)`: no entry of the request's changed. `Err`: several
/// Update entries changed and none can be told apart as the request's: not bookkeeping.
fn own_entry<'k, 'e>(
    keys: &[&'k EntryKey<'e>],
    old: &BTreeMap<EntryKey<'e>, Entry<'_>>,
    new: &BTreeMap<EntryKey<'e>, Entry<'_>>,
    request_manager: Option<&str>,
) -> Result<Option<&'k EntryKey<'e>>, String> {
    if let Some(manager) = request_manager {
        let changed = |operation: &str| {
            keys.iter()
                .copied()
                .filter(|k| k.0 == manager && k.1 == operation)
                .find(|k| entry_changed(old.get(*k), new.get(*k)))
        };
        return Ok(changed("Apply").or_else(|| changed("Update")));
    }
    let mut changed = keys.iter().copied().filter(|k| {
        let (before, after) = (old.get(*k), new.get(*k));
        k.1 == "Update"
            && k.0 != ANCIENT_CHANGES
            && after.is_some()
            && (gains(before, after) || before.map(|e| &e.time) != after.map(|e| &e.time))
    });
    let own = changed.next();
    if let (Some(first), Some(second)) = (own, changed.next()) {
        return Err(format!(
            "{} and {} both changed, and the request names no field manager",
            entry_words(first),
            entry_words(second)
        ));
    }
    Ok(own)
}

/// The request's own entry: an Apply entry is the applied configuration, computed by the API
/// server (an apply request cannot carry managedFields); an Update entry gains only fields the
/// request changed, or status.
fn own_entry_problem(
    key: &EntryKey<'_>,
    before: Option<&Entry<'_>>,
    after: Option<&Entry<'_>>,
    changed: &[FieldPath],
) -> Option<String> {
    if key.1 == "Apply" {
        return None;
    }
    let unexplained = first_extra(fields(before), fields(after), &Check::Explained(changed))?;
    Some(format!(
        "{} gained {unexplained}, which this request did not change",
        entry_words(key)
    ))
}

/// Any other entry: never gains, never moves in time or version, and loses only fields this
/// request changed, or, when it vanished into ancient-changes, fields that entry holds now
/// (`moved_to`).
fn other_entry_problem(
    key: &EntryKey<'_>,
    before: Option<&Entry<'_>>,
    after: Option<&Entry<'_>>,
    moved_to: Option<&Value>,
    changed: &[FieldPath],
) -> Option<String> {
    let Some(before) = before else {
        return Some(format!("{} was added", entry_words(key)));
    };
    if let Some(gained) = first_extra(before.fields, fields(after), &Check::Any)
        && after.is_some()
    {
        return Some(format!("{} gained {gained}", entry_words(key)));
    }
    if let Some(after) = after
        && (after.time != before.time || after.api_version != before.api_version)
    {
        return Some(format!("{} was rewritten", entry_words(key)));
    }
    let kept = fields(after).or(moved_to);
    let lost = first_extra(kept, before.fields, &Check::Explained(changed))?;
    let how = if after.is_none() {
        "was removed, and with it"
    } else {
        "lost"
    };
    Some(format!(
        "{} {how} {lost}, which this request did not change",
        entry_words(key)
    ))
}

fn entry_words((manager, operation, subresource): &EntryKey<'_>) -> String {
    if subresource.is_empty() {
        format!("the managedFields entry of \"{manager}\" ({operation})")
    } else {
        format!("the managedFields entry of \"{manager}\" ({operation}, {subresource})")
    }
}

/// What may explain a field that one side holds and the other does not.
enum Check<'c> {
    /// Nothing: any such field is reported.
    Any,
    /// A change of the request at, above or below the field; anything under `status`.
    Explained(&'c [FieldPath]),
}

/// How far a node's object path (its `f:` keys, up to the first list key, set value, index or
/// `.`, which a field path cannot name exactly) agrees with the request's changed paths.
#[derive(Clone)]
enum Prefix {
    /// Still `f:` keys, `depth` of them; `alive` are the changed paths that agree with them and
    /// are longer.
    Open { depth: usize, alive: Vec<usize> },
    /// Decided for the whole subtree.
    Settled { explained: bool },
}

impl Prefix {
    fn root(check: &Check<'_>) -> Prefix {
        match check {
            Check::Any => Prefix::Settled { explained: false },
            Check::Explained(changed) => Prefix::Open {
                depth: 0,
                alive: (0..changed.len()).collect(),
            },
        }
    }

    fn child(&self, key: &str, check: &Check<'_>) -> Prefix {
        let (Prefix::Open { depth, alive }, Check::Explained(changed)) = (self, check) else {
            return self.clone();
        };
        let Some(name) = key.strip_prefix("f:") else {
            // A list key or set value below: the change was somewhere in this list or map.
            return Prefix::Settled {
                explained: !alive.is_empty(),
            };
        };
        if *depth == 0 && name == "status" {
            return Prefix::Settled { explained: true };
        }
        let alive: Vec<usize> = alive
            .iter()
            .copied()
            .filter(|&i| changed[i].segments().get(*depth).map(String::as_str) == Some(name))
            .collect();
        if alive
            .iter()
            .any(|&i| changed[i].segments().len() == depth + 1)
        {
            return Prefix::Settled { explained: true };
        }
        Prefix::Open {
            depth: depth + 1,
            alive,
        }
    }

    /// Whether a node that only `extra` holds is accounted for: `Some` when settled, or when no
    /// change lies below it; `None` while changes below it may explain its children (a leaf,
    /// owned as a whole above a change, has none left to report).
    fn explains(&self) -> Option<bool> {
        match self {
            Prefix::Settled { explained } => Some(*explained),
            Prefix::Open { alive, .. } if alive.is_empty() => Some(false),
            Prefix::Open { .. } => None,
        }
    }
}

/// The first field that `extra` holds and `base` does not, and that `check` does not explain,
/// as the object path it lies under (`spec.replicas`). Walks both `fieldsV1` trees together
/// with an explicit stack, so any depth is safe, and work grows with the trees' size only.
fn first_extra(base: Option<&Value>, extra: Option<&Value>, check: &Check<'_>) -> Option<String> {
    let Some(Value::Object(root)) = extra else {
        return None;
    };
    let base_root = base.and_then(Value::as_object);
    let mut path: Vec<&str> = Vec::new();
    let root_prefix = Prefix::root(check);
    let mut stack: Vec<(usize, &str, Option<&Value>, &Value, Prefix)> = root
        .iter()
        .map(|(k, v)| {
            (
                0,
                k.as_str(),
                base_root.and_then(|b| b.get(k)),
                v,
                root_prefix.child(k, check),
            )
        })
        .collect();
    while let Some((depth, key, base, extra, prefix)) = stack.pop() {
        path.truncate(depth);
        path.push(key);
        let children = extra.as_object().filter(|m| !m.is_empty());
        if base.is_none() {
            match prefix.explains() {
                Some(true) => continue,
                Some(false) => {
                    // Name a field, not the map holding it: follow the first keys to a leaf.
                    let mut node = extra;
                    while let Some((k, v)) = node.as_object().and_then(|m| m.iter().next()) {
                        path.push(k);
                        node = v;
                    }
                    return Some(describe(&path));
                }
                None => {}
            }
        }
        for (k, v) in children.into_iter().flatten() {
            let base_child = base.and_then(|b| b.get(k));
            stack.push((depth + 1, k.as_str(), base_child, v, prefix.child(k, check)));
        }
    }
    None
}

/// The union of field sets (`fieldsV1` trees), built with an explicit stack like the walks
/// here, so any depth is safe.
fn union<'v>(sets: impl IntoIterator<Item = &'v Value>) -> Value {
    let mut merged = Value::Object(serde_json::Map::new());
    for set in sets {
        let mut stack: Vec<(&mut Value, &Value)> = vec![(&mut merged, set)];
        while let Some((target, source)) = stack.pop() {
            let (Some(target), Some(source)) = (target.as_object_mut(), source.as_object()) else {
                continue;
            };
            for key in source.keys() {
                target
                    .entry(key.as_str())
                    .or_insert_with(|| Value::Object(serde_json::Map::new()));
            }
            for (key, child) in target.iter_mut() {
                if let Some(source_child) = source.get(key) {
                    stack.push((child, source_child));
                }
            }
        }
    }
    merged
}

/// The object path of a `fieldsV1` node: its leading `f:` keys.
fn describe(path: &[&str]) -> String {
    let prefix: Vec<&str> = path
        .iter()
        .map_while(|segment| segment.strip_prefix("f:"))
        .collect();
    if prefix.is_empty() {
        "the object itself".to_owned()
    } else {
        FieldPath::new(prefix).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entry(manager: &str, operation: &str, time: &str, fields: Value) -> ManagedFieldsEntry {
        serde_json::from_value(json!({
            "manager": manager, "operation": operation, "apiVersion": "apps/v1",
            "time": time, "fieldsType": "FieldsV1", "fieldsV1": fields,
        }))
        .unwrap()
    }

    fn flux(fields: Value) -> ManagedFieldsEntry {
        entry(
            "kustomize-controller",
            "Apply",
            "2026-11-30T08:00:00Z",
            fields,
        )
    }

    fn paths(list: &[&str]) -> Vec<FieldPath> {
        list.iter().map(|p| FieldPath::parse(p).unwrap()).collect()
    }

    fn judge(
        old: &[ManagedFieldsEntry],
        new: &[ManagedFieldsEntry],
        manager: Option<&str>,
        changed: &[&str],
    ) -> Option<String> {
        forged_ownership(Some(old), Some(new), manager, &paths(changed))
    }

    #[test]
    fn handing_a_field_to_the_controller_is_forged() {
        let old = [flux(json!({"f:spec": {"f:template": {}}}))];
        let new = [flux(
            json!({"f:spec": {"f:template": {}, "f:replicas": {}}}),
        )];
        let problem = judge(&old, &new, Some("kubectl-patch"), &[]).unwrap();
        assert!(
            problem.contains("\"kustomize-controller\" (Apply) gained spec.replicas"),
            "{problem}"
        );
        // Without a field manager the controller's Apply entry cannot be the request's own.
        assert!(judge(&old, &new, None, &[]).is_some());
    }

    #[test]
    fn renaming_the_controllers_entry_is_forged() {
        let fields = json!({"f:spec": {"f:replicas": {}}});
        let old = [flux(fields.clone())];
        let new = [entry(
            "kustomize-controller-old",
            "Apply",
            "2026-11-30T08:00:00Z",
            fields,
        )];
        let problem = judge(&old, &new, Some("kubectl-patch"), &[]).unwrap();
        assert!(problem.contains("removed"), "{problem}");
        assert!(judge(&old, &new, None, &[]).is_some());
    }

    #[test]
    fn a_takeover_by_an_edit_is_bookkeeping() {
        // kubectl edit changes spec.replicas: it gains the field, Flux loses it.
        let old = [flux(
            json!({"f:spec": {"f:replicas": {}, "f:template": {}}}),
        )];
        let new = [
            flux(json!({"f:spec": {"f:template": {}}})),
            entry(
                "kubectl-edit",
                "Update",
                "2026-11-30T09:00:00Z",
                json!({"f:spec": {"f:replicas": {}}}),
            ),
        ];
        assert_eq!(
            judge(&old, &new, Some("kubectl-edit"), &["spec.replicas"]),
            None
        );
        assert_eq!(judge(&old, &new, None, &["spec.replicas"]), None);
        // The same managedFields with no value changed: the loss is not a takeover.
        assert!(judge(&old, &new, Some("kubectl-edit"), &[]).is_some());
    }

    #[test]
    fn an_update_entry_gains_only_what_the_request_changed() {
        let old = [flux(json!({"f:spec": {"f:template": {}}}))];
        let new = [
            flux(json!({"f:spec": {"f:template": {}}})),
            entry(
                "bob",
                "Update",
                "2026-11-30T09:00:00Z",
                json!({"f:metadata": {"f:labels": {"f:team": {}}}, "f:spec": {"f:paused": {}}}),
            ),
        ];
        assert_eq!(
            judge(
                &old,
                &new,
                Some("bob"),
                &["metadata.labels.team", "spec.paused"]
            ),
            None
        );
        let problem = judge(&old, &new, Some("bob"), &["metadata.labels.team"]).unwrap();
        assert!(problem.contains("gained spec.paused"), "{problem}");
    }

    #[test]
    fn an_apply_entry_is_the_applied_configuration() {
        // Server-side apply of values already there: co-ownership, computed by the API server.
        let old = [flux(json!({"f:spec": {"f:replicas": {}}}))];
        let new = [
            flux(json!({"f:spec": {"f:replicas": {}}})),
            entry(
                "bob-apply",
                "Apply",
                "2026-11-30T09:00:00Z",
                json!({"f:spec": {"f:replicas": {}}}),
            ),
        ];
        assert_eq!(judge(&old, &new, Some("bob-apply"), &[]), None);
    }

    #[test]
    fn status_writers_and_unchanged_fields_are_bookkeeping() {
        let old = [flux(json!({"f:spec": {}}))];
        let mut status = entry(
            "kubelet",
            "Update",
            "2026-11-30T09:00:00Z",
            json!({"f:status": {"f:phase": {}}}),
        );
        status.subresource = Some("status".into());
        let new = [flux(json!({"f:spec": {}})), status];
        assert_eq!(judge(&old, &new, None, &[]), None);
        assert_eq!(judge(&old, &old, Some("x"), &[]), None);
        assert_eq!(forged_ownership(None, None, None, &[]), None);
    }

    #[test]
    fn an_entry_gaining_within_the_second_it_was_written_is_the_requests_own() {
        // Times have whole seconds: bob's second edit in the same second keeps his entry's time.
        let bob = |fields: Value| entry("bob", "Update", "2026-11-30T09:00:00Z", fields);
        let old = [
            flux(json!({"f:spec": {}})),
            bob(json!({"f:spec": {"f:replicas": {}}})),
        ];
        let new = [
            flux(json!({"f:spec": {}})),
            bob(json!({"f:spec": {"f:replicas": {}, "f:paused": {}}})),
        ];
        assert_eq!(judge(&old, &new, None, &["spec.paused"]), None);
        let problem = judge(&old, &new, None, &[]).unwrap();
        assert_eq!(
            problem,
            "the managedFields entry of \"bob\" (Update) gained spec.paused, which this request did not change"
        );
    }

    #[test]
    fn a_manager_with_an_apply_and_an_update_entry_owns_the_one_that_changed() {
        let bob_apply = |time: &str, fields: Value| entry("bob", "Apply", time, fields);
        let bob_edit = |time: &str, fields: Value| entry("bob", "Update", time, fields);
        // bob's edit (kubectl edit --field-manager=bob) changes spec.paused; his Apply entry
        // stays as it was.
        let old = [
            bob_apply(
                "2026-11-30T08:00:00Z",
                json!({"f:spec": {"f:template": {}}}),
            ),
            bob_edit(
                "2026-11-30T08:30:00Z",
                json!({"f:spec": {"f:replicas": {}}}),
            ),
        ];
        let new = [
            old[0].clone(),
            bob_edit(
                "2026-11-30T09:00:00Z",
                json!({"f:spec": {"f:replicas": {}, "f:paused": {}}}),
            ),
        ];
        assert_eq!(judge(&old, &new, Some("bob"), &["spec.paused"]), None);
        // bob's server-side apply changes spec.replicas, taking it over from his own Update
        // entry; it co-owns spec.template unchanged, as an Apply entry may.
        let new = [
            bob_apply(
                "2026-11-30T09:00:00Z",
                json!({"f:spec": {"f:template": {}, "f:replicas": {}, "f:strategy": {}}}),
            ),
            bob_edit("2026-11-30T08:30:00Z", json!({"f:spec": {}})),
        ];
        assert_eq!(judge(&old, &new, Some("bob"), &["spec.replicas"]), None);
    }

    #[test]
    fn a_change_explains_the_fields_at_and_below_it_and_not_beside_it() {
        let old = [flux(json!({"f:spec": {}}))];
        let edit = |fields: Value| {
            [
                flux(json!({"f:spec": {}})),
                entry("bob", "Update", "2026-11-30T09:00:00Z", fields),
            ]
        };
        // spec.template appeared whole: every field the entry gained below it is that change.
        let new = edit(json!({"f:spec": {"f:template": {"f:spec": {"f:containers": {}}}}}));
        assert_eq!(judge(&old, &new, Some("bob"), &["spec.template"]), None);
        // A change deep under spec explains nothing else under spec.
        let new = edit(json!({"f:spec": {
            "f:strategy": {"f:rollingUpdate": {"f:maxSurge": {}}},
            "f:replicas": {},
        }}));
        let problem = judge(
            &old,
            &new,
            Some("bob"),
            &["spec.strategy.rollingUpdate.maxSurge"],
        )
        .unwrap();
        assert!(
            problem.ends_with("gained spec.replicas, which this request did not change"),
            "{problem}"
        );
    }

    #[test]
    fn moving_another_entrys_time_is_forged() {
        let old = [flux(json!({"f:spec": {}}))];
        let new = [entry(
            "kustomize-controller",
            "Apply",
            "2030-01-01T00:00:00Z",
            json!({"f:spec": {}}),
        )];
        assert!(judge(&old, &new, Some("bob"), &[]).is_some());
    }

    #[test]
    fn two_unnamed_update_entries_cannot_both_be_the_requests() {
        let old = [flux(json!({"f:spec": {}}))];
        let new = [
            flux(json!({"f:spec": {}})),
            entry(
                "a",
                "Update",
                "2026-11-30T09:00:00Z",
                json!({"f:spec": {"f:paused": {}}}),
            ),
            entry(
                "b",
                "Update",
                "2026-11-30T09:00:00Z",
                json!({"f:spec": {"f:paused": {}}}),
            ),
        ];
        assert!(judge(&old, &new, None, &["spec.paused"]).is_some());
    }

    /// Update entry `manager` at 08:0`minute`, owning label `label`.
    fn labeller(manager: &str, minute: u32, label: &str) -> ManagedFieldsEntry {
        entry(
            manager,
            "Update",
            &format!("2026-11-30T08:0{minute}:00Z"),
            json!({"f:metadata": {"f:labels": {format!("f:{label}"): {}}}}),
        )
    }

    /// The managedFields of an object ten Update managers have written (the API server's cap),
    /// and what the API server makes of them when an eleventh, kubectl-edit, changes
    /// `spec.paused`: the two oldest merged into `ancient-changes` (the first renamed, the second
    /// added to it, at the second's time; k8s.io/apimachinery's capmanagers.go).
    fn capped() -> (Vec<ManagedFieldsEntry>, Vec<ManagedFieldsEntry>) {
        let updaters: Vec<ManagedFieldsEntry> = (0..10)
            .map(|i| labeller(&format!("tool-{i}"), i, &format!("l{i}")))
            .collect();
        let mut old = vec![flux(json!({"f:spec": {"f:template": {}}}))];
        old.extend(updaters.iter().cloned());
        let mut new = vec![
            flux(json!({"f:spec": {"f:template": {}}})),
            entry(
                ANCIENT_CHANGES,
                "Update",
                "2026-11-30T08:01:00Z",
                json!({"f:metadata": {"f:labels": {"f:l0": {}, "f:l1": {}}}}),
            ),
        ];
        new.extend(updaters[2..].iter().cloned());
        new.push(entry(
            "kubectl-edit",
            "Update",
            "2026-11-30T09:00:00Z",
            json!({"f:spec": {"f:paused": {}}}),
        ));
        (old, new)
    }

    #[test]
    fn the_api_servers_merge_into_ancient_changes_is_bookkeeping() {
        let (old, new) = capped();
        assert_eq!(
            judge(&old, &new, Some("kubectl-edit"), &["spec.paused"]),
            None
        );
        assert_eq!(judge(&old, &new, None, &["spec.paused"]), None);
        // Once the bucket exists, later merges add to it.
        let mut later = new.clone();
        later.retain(|e| e.manager.as_deref() != Some("tool-2"));
        later[1] = entry(
            ANCIENT_CHANGES,
            "Update",
            "2026-11-30T08:02:00Z",
            json!({"f:metadata": {"f:labels": {"f:l0": {}, "f:l1": {}, "f:l2": {}}}}),
        );
        later.push(entry(
            "kubectl-label",
            "Update",
            "2026-11-30T09:05:00Z",
            json!({"f:metadata": {"f:labels": {"f:team": {}}}}),
        ));
        assert_eq!(
            judge(
                &new,
                &later,
                Some("kubectl-label"),
                &["metadata.labels.team"]
            ),
            None
        );
    }

    #[test]
    fn ancient_changes_grows_only_by_what_vanished_update_entries_held() {
        let (old, mut new) = capped();
        // Nothing merged into it: ancient-changes gaining a field is ownership handed over.
        let mut unmerged = old.clone();
        unmerged.push(entry(
            ANCIENT_CHANGES,
            "Update",
            "2026-11-30T07:00:00Z",
            json!({"f:metadata": {"f:labels": {"f:l0": {}}}}),
        ));
        let mut grown = unmerged.clone();
        *grown.last_mut().unwrap() = entry(
            ANCIENT_CHANGES,
            "Update",
            "2026-11-30T07:00:00Z",
            json!({"f:metadata": {"f:labels": {"f:l0": {}}}, "f:spec": {"f:replicas": {}}}),
        );
        let problem = judge(&unmerged, &grown, Some("bob"), &[]).unwrap();
        assert_eq!(
            problem,
            "the managedFields entry of \"ancient-changes\" gained spec.replicas, though no Update entry was merged into it"
        );
        // A merge that smuggles in a field none of the merged entries held.
        new[1] = entry(
            ANCIENT_CHANGES,
            "Update",
            "2026-11-30T08:01:00Z",
            json!({"f:metadata": {"f:labels": {"f:l0": {}, "f:l1": {}}}, "f:spec": {"f:replicas": {}}}),
        );
        let problem = judge(&old, &new, Some("kubectl-edit"), &["spec.paused"]).unwrap();
        assert!(
            problem.contains("\"ancient-changes\" gained spec.replicas"),
            "{problem}"
        );
        // Nor one that an Update entry still there holds.
        let (old, mut new) = capped();
        new[1] = entry(
            ANCIENT_CHANGES,
            "Update",
            "2026-11-30T08:01:00Z",
            json!({"f:metadata": {"f:labels": {"f:l0": {}, "f:l1": {}, "f:l5": {}}}}),
        );
        let problem = judge(&old, &new, Some("kubectl-edit"), &["spec.paused"]).unwrap();
        assert!(
            problem.contains("\"ancient-changes\" gained metadata.labels.l5"),
            "{problem}"
        );
        // Only Update entries are merged: the controller's Apply entry vanishing into
        // ancient-changes is its ownership taken away.
        let (old, mut new) = capped();
        new.remove(0);
        new[0] = entry(
            ANCIENT_CHANGES,
            "Update",
            "2026-11-30T08:01:00Z",
            json!({"f:metadata": {"f:labels": {"f:l0": {}, "f:l1": {}}}, "f:spec": {"f:template": {}}}),
        );
        let problem = judge(&old, &new, Some("kubectl-edit"), &["spec.paused"]).unwrap();
        assert_eq!(
            problem,
            "the managedFields entry of \"kustomize-controller\" (Apply) was removed, and with it spec.template, which this request did not change"
        );
        // An Update entry removed without its fields reaching ancient-changes loses them.
        let (old, mut new) = capped();
        new[1] = entry(
            ANCIENT_CHANGES,
            "Update",
            "2026-11-30T08:01:00Z",
            json!({"f:metadata": {"f:labels": {"f:l0": {}}}}),
        );
        let problem = judge(&old, &new, Some("kubectl-edit"), &["spec.paused"]).unwrap();
        assert_eq!(
            problem,
            "the managedFields entry of \"tool-1\" (Update) was removed, and with it metadata.labels.l1, which this request did not change"
        );
    }

    #[test]
    fn list_items_are_explained_by_the_list() {
        let old = [flux(
            json!({"f:spec": {"f:containers": {"k:{\"name\":\"api\"}": {"f:image": {}}}}}),
        )];
        let new = [
            flux(json!({"f:spec": {"f:containers": {"k:{\"name\":\"api\"}": {}}}})),
            entry(
                "kubectl-set",
                "Update",
                "2026-11-30T09:00:00Z",
                json!({"f:spec": {"f:containers": {"k:{\"name\":\"api\"}": {"f:image": {}}}}}),
            ),
        ];
        assert_eq!(
            judge(
                &old,
                &new,
                Some("kubectl-set"),
                &["spec.containers[0].image"]
            ),
            None
        );
    }

    #[test]
    fn deep_field_sets_do_not_overflow_the_stack() {
        // Built by hand: json!'s interpolation would serialize recursively.
        let mut fields = Value::Object(Default::default());
        for _ in 0..20_000 {
            let mut map = serde_json::Map::new();
            map.insert("f:a".to_owned(), fields);
            fields = Value::Object(map);
        }
        let deep = FieldPath::new(std::iter::repeat_n("a", 20_000));
        assert!(first_extra(None, Some(&fields), &Check::Any).is_some());
        assert_eq!(
            first_extra(None, Some(&fields), &Check::Explained(&[deep])),
            None
        );
        let shallow = FieldPath::new(["b"]);
        assert!(first_extra(None, Some(&fields), &Check::Explained(&[shallow])).is_some());
        let merged = union([&fields]);
        assert_eq!(first_extra(Some(&merged), Some(&fields), &Check::Any), None);
        // serde_json's drop recurses; hand the deep values to a thread with a big stack.
        std::thread::Builder::new()
            .stack_size(256 << 20)
            .spawn(move || drop((fields, merged)))
            .unwrap()
            .join()
            .unwrap();
    }
}
