//! The suspensions that exist, counted for the gauges: every object of a kind with a
//! suspension field that a policy's `suspensions` find suspended, by whether its window (the
//! break-glass label on it) is open, past its expiry, or absent; and, when driftgate resumes
//! expired suspensions itself (`serve --resume-expired-suspensions`), the patches that do it.
//! Pure: the objects and the clock are passed in; `server::suspensions` lists them, sets the
//! gauges and applies the patches.

use std::collections::{BTreeMap, BTreeSet};

use jiff::Timestamp;
use kube_core::DynamicObject;
use serde_json::{Value, json};

use crate::applied::declared_by_controller;
use crate::ledger::evidence::value_at;
use crate::policy::document::SuspendedWhen;
use crate::policy::suspensions::{Suspension, SuspensionRules};
use crate::policy::{BreakGlassRules, GatePolicy, NamespaceLabels, PolicySet};
use crate::timefmt::human_utc;
use crate::window::{WindowScope, WindowState, window_state};

/// Where a suspension stands against its expiry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SuspensionState {
    /// Suspended, its expiry ahead.
    Open,
    /// Suspended past its expiry: nobody resumed it (what the alert is for).
    Expired,
    /// Suspended with no expiry driftgate can read (declared in Git, or set before driftgate).
    Unbounded,
}

impl SuspensionState {
    pub const ALL: [SuspensionState; 3] = [
        SuspensionState::Open,
        SuspensionState::Expired,
        SuspensionState::Unbounded,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SuspensionState::Open => "open",
            SuspensionState::Expired => "expired",
            SuspensionState::Unbounded => "unbounded",
        }
    }
}

/// One listed object: its API group and kind, and the object.
pub struct Listed<'a> {
    pub group: &'a str,
    pub kind: &'a str,
    pub object: &'a DynamicObject,
}

/// How many suspensions each policy with a `suspensions` section counts, in each state (every
/// state present, zero or not, so that the series an alert reads always exist).
pub fn count_suspensions(
    policies: &PolicySet,
    listed: &[Listed<'_>],
    now: Timestamp,
) -> BTreeMap<(String, SuspensionState), i64> {
    let mut counts = BTreeMap::new();
    for policy in policies.policies() {
        let (Some(rules), Some(break_glass)) = (&policy.suspensions, &policy.break_glass) else {
            continue;
        };
        for state in SuspensionState::ALL {
            counts.entry((policy.name.clone(), state)).or_insert(0);
        }
        for item in listed {
            if let Some(state) = state_under(policy, rules, break_glass, item, now) {
                *counts.entry((policy.name.clone(), state)).or_insert(0) += 1;
            }
        }
    }
    counts
}

/// Where `item`'s suspension stands under one policy; `None` when the policy does not count it
/// (not suspended, or where the policy does not look).
fn state_under(
    policy: &GatePolicy,
    rules: &SuspensionRules,
    break_glass: &BreakGlassRules,
    item: &Listed<'_>,
    now: Timestamp,
) -> Option<SuspensionState> {
    let namespace = item.object.metadata.namespace.as_deref().unwrap_or("");
    if !counted_in(policy, rules.holds_namespace(namespace), namespace)
        || rules
            .suspensions(item.group, item.kind, item.object)
            .is_empty()
    {
        return None;
    }
    // The window as the webhook reads it. One longer than maxDuration has not ended: the
    // suspension is not resumed before its expiry, as it would not be had the policy allowed it.
    Some(
        match window_state(&item.object.metadata, break_glass, now, WindowScope::Object) {
            WindowState::Open(_) | WindowState::TooLong(_) => SuspensionState::Open,
            WindowState::Expired(_) => SuspensionState::Expired,
            WindowState::Absent | WindowState::Malformed { .. } => SuspensionState::Unbounded,
        },
    )
}

/// What driftgate does about one suspension past its expiry when it resumes them itself.
#[derive(Clone, Debug, PartialEq)]
pub struct ResumePlan {
    /// The object's position in the listed objects.
    pub at: usize,
    /// The policy under which it is expired (the metric's label).
    pub policy: String,
    /// Its window's label: the expiry it outlived.
    pub label: String,
    pub label_value: String,
    pub expired_at: Timestamp,
    pub action: ResumeAction,
}

#[derive(Clone, Debug, PartialEq)]
pub enum ResumeAction {
    /// One merge patch that undoes every suspension found and removes the window's label and
    /// reason. It carries the resourceVersion read, so a change made since (an extension, a
    /// resume) makes it a conflict instead of being overwritten.
    Patch(Value),
    /// Suspensions driftgate cannot undo faithfully, in words: the object is left alone (still
    /// counted expired) and driftgate says so once.
    CannotUndo(Vec<String>),
}

/// The resumes of the listed suspensions past their expiry. An object counted open under some
/// policy is left alone (that policy's window still holds), and an unbounded one is never
/// resumed (it has no expiry to outlive); an object expired under several policies is resumed
/// once, undoing what each finds and removing each one's label and reason (the first names it).
pub fn plan_resumes(
    policies: &PolicySet,
    listed: &[Listed<'_>],
    now: Timestamp,
) -> Vec<ResumePlan> {
    let mut plans = Vec::new();
    for (at, item) in listed.iter().enumerate() {
        let mut expired_under = Vec::new();
        let mut open = false;
        for policy in policies.policies() {
            let (Some(rules), Some(break_glass)) = (&policy.suspensions, &policy.break_glass)
            else {
                continue;
            };
            match state_under(policy, rules, break_glass, item, now) {
                Some(SuspensionState::Open) => open = true,
                Some(SuspensionState::Expired) => expired_under.push((policy, rules, break_glass)),
                _ => {}
            }
        }
        let (Some(&(policy, _, break_glass)), false) = (expired_under.first(), open) else {
            continue;
        };
        let WindowState::Expired(window) =
            window_state(&item.object.metadata, break_glass, now, WindowScope::Object)
        else {
            continue;
        };
        let windows: Vec<_> = expired_under.iter().map(|(_, r, b)| (*r, *b)).collect();
        // What the controller last applied from Git, where its own entry wrote it: the value
        // of a field suspended by removing it.
        let applied = serde_json::to_value(item.object).ok().and_then(|object| {
            expired_under
                .iter()
                .find_map(|(policy, _, _)| declared_by_controller(&object, policy))
        });
        let action = match undo_patch(&windows, item, applied.as_ref()) {
            Ok(patch) => ResumeAction::Patch(patch),
            Err(cannot) => ResumeAction::CannotUndo(cannot),
        };
        plans.push(ResumePlan {
            at,
            policy: policy.name.clone(),
            label: break_glass.label.clone(),
            label_value: window.label_value,
            expired_at: window.expires_at,
            action,
        });
    }
    plans
}

/// The merge patch that undoes every suspension the `windows`' rules find on `item` and removes
/// their labels and reasons, or what cannot be undone.
/// A field that is `true` when suspended goes back to `false` (as `flux resume` leaves
/// `spec.suspend`), one that is `false` or anything but `true` goes to `true` (Argo CD's
/// `enabled` and `selfHeal`), a suspension label or annotation is removed. A field suspended by
/// being absent goes back to what `applied` (the configuration the controller last applied,
/// from Git) holds; without it, what it held is unknown and it cannot be undone, nor can a field
/// below a list or a missing parent (a merge patch would write more than the field).
fn undo_patch(
    windows: &[(&SuspensionRules, &BreakGlassRules)],
    item: &Listed<'_>,
    applied: Option<&Value>,
) -> Result<Value, Vec<String>> {
    let mut patch = json!({"metadata": {"labels": {}, "annotations": {}}});
    if let Some(version) = &item.object.metadata.resource_version {
        patch["metadata"]["resourceVersion"] = json!(version);
    }
    let mut cannot = Vec::new();
    for (rules, break_glass) in windows {
        patch["metadata"]["labels"][break_glass.label.as_str()] = Value::Null;
        patch["metadata"]["annotations"][break_glass.reason_annotation.as_str()] = Value::Null;
        undo_fields(rules, item, applied, &mut patch, &mut cannot);
    }
    // Two policies may define the same field: say it once.
    let mut said = BTreeSet::new();
    cannot.retain(|what| said.insert(what.clone()));
    if cannot.is_empty() {
        Ok(patch)
    } else {
        Err(cannot)
    }
}

/// Adds to `patch` the undoing of each suspension `rules` find on `item`; what cannot be undone
/// goes to `cannot`.
fn undo_fields(
    rules: &SuspensionRules,
    item: &Listed<'_>,
    applied: Option<&Value>,
    patch: &mut Value,
    cannot: &mut Vec<String>,
) {
    // A removed field comes back whole, as Git declares it: what it holds below (Argo CD's
    // `selfHeal` under `automated`) is Git's then, not undone one by one.
    let mut holding = rules.holding_fields(item.group, item.kind, item.object);
    holding.sort_by_key(|field| field.suspended_when != SuspendedWhen::Absent);
    let mut restored: Vec<&[String]> = Vec::new();
    for field in holding {
        let segments = field.path.segments();
        if restored.iter().any(|above| segments.starts_with(above)) {
            continue;
        }
        let undone = match field.suspended_when {
            SuspendedWhen::IsTrue => json!(false),
            SuspendedWhen::IsFalse | SuspendedWhen::NotTrue => json!(true),
            SuspendedWhen::Absent => {
                match applied.and_then(|applied| value_at(applied, &field.path)) {
                    Some(declared) => declared.clone(),
                    None => {
                        cannot.push(format!("{} (removed: what it held is unknown)", field.path));
                        continue;
                    }
                }
            }
        };
        // A field restored whole from Git may bring back the objects above it: Argo CD drops
        // a `syncPolicy` left empty once `automated` is removed (its normalization), and Git
        // declares them. A toggle under a missing object would create what Git may not hold.
        let restoring = field.suspended_when == SuspendedWhen::Absent;
        if !parents_allow(&item.object.data, segments, restoring) {
            cannot.push(format!(
                "{} (below a list or a missing field: a patch would write more than it)",
                field.path
            ));
            continue;
        }
        if field.suspended_when == SuspendedWhen::Absent {
            restored.push(segments);
        }
        set_at(patch, segments, undone);
    }
    // A label or annotation is removed: what Git declares for it (if anything) comes back with
    // the controller's next apply.
    for suspension in rules.suspensions(item.group, item.kind, item.object) {
        match suspension {
            Suspension::Annotation(key) => {
                patch["metadata"]["annotations"][key.as_str()] = Value::Null;
            }
            Suspension::Label(key) => patch["metadata"]["labels"][key.as_str()] = Value::Null,
            Suspension::Field(_) => {}
        }
    }
}

/// The merge patch that undoes every suspension `rules` find on `item`, or what cannot be
/// undone: what `driftgate resume` sends, with the window's label and reason it removes.
pub fn undo_suspensions(rules: &SuspensionRules, item: &Listed<'_>) -> Result<Value, Vec<String>> {
    let mut patch = json!({"metadata": {"labels": {}, "annotations": {}}});
    let mut cannot = Vec::new();
    undo_fields(rules, item, None, &mut patch, &mut cannot);
    if cannot.is_empty() {
        Ok(patch)
    } else {
        Err(cannot)
    }
}

/// Whether a merge patch can set the field at `segments` in `data` and write nothing else:
/// every object above it is there, or, when `missing_ok`, the first one missing and all below
/// it are created empty around the field. Never through a list or a scalar, which a merge patch
/// would replace whole.
fn parents_allow(data: &Value, segments: &[String], missing_ok: bool) -> bool {
    let Some((_, parents)) = segments.split_last() else {
        return false;
    };
    let mut value = data;
    for segment in parents {
        match value.get(segment) {
            Some(child @ Value::Object(_)) => value = child,
            None | Some(Value::Null) => return missing_ok,
            Some(_) => return false,
        }
    }
    value.is_object()
}

/// Sets `value` at `segments` in `patch`, creating the objects above it.
fn set_at(patch: &mut Value, segments: &[String], value: Value) {
    let mut at = patch;
    for segment in segments {
        if !at.get(segment).is_some_and(Value::is_object) {
            at[segment.as_str()] = json!({});
        }
        at = &mut at[segment.as_str()];
    }
    *at = value;
}

/// "Kustomization flux-system/apps"
pub fn object_words(item: &Listed<'_>) -> String {
    let meta = &item.object.metadata;
    let name = meta.name.as_deref().unwrap_or("");
    match meta.namespace.as_deref() {
        Some(namespace) => format!("{} {namespace}/{name}", item.kind),
        None => format!("{} {name}", item.kind),
    }
}

/// What driftgate says, once, about a suspension past its expiry it cannot undo.
pub fn cannot_resume_note(item: &Listed<'_>, plan: &ResumePlan, cannot: &[String]) -> String {
    format!(
        "driftgate did not resume the GitOps controller's reconciliation of {}, suspended until {} (label {}) and past it: it cannot undo {}. Restore it as Git declares it and remove the label {}; until then it is counted as an expired suspension.",
        object_words(item),
        human_utc(plan.expired_at),
        plan.label_value,
        cannot.join(", "),
        plan.label,
    )
}

/// The suspensions driftgate could not resume that it has already said so about: each is said
/// once, until it is no longer expired (resumed, extended, gone), and then again if it expires
/// anew.
#[derive(Debug, Default)]
pub struct Reported {
    said: BTreeSet<String>,
}

impl Reported {
    /// The plans of `plans` that cannot undo and were not reported in an earlier round.
    pub fn first_time<'p>(
        &mut self,
        listed: &[Listed<'_>],
        plans: &'p [ResumePlan],
    ) -> Vec<&'p ResumePlan> {
        let current: Vec<(String, &ResumePlan)> = plans
            .iter()
            .filter(|plan| matches!(plan.action, ResumeAction::CannotUndo(_)))
            .map(|plan| (report_key(&listed[plan.at], plan), plan))
            .collect();
        let fresh = current
            .iter()
            .filter(|(key, _)| !self.said.contains(key))
            .map(|(_, plan)| *plan)
            .collect();
        self.said = current.into_iter().map(|(key, _)| key).collect();
        fresh
    }
}

/// One object's one expiry: its kind, name, uid and the label value it outlived.
fn report_key(item: &Listed<'_>, plan: &ResumePlan) -> String {
    let meta = &item.object.metadata;
    format!(
        "{}/{} {} {} {}",
        item.group,
        object_words(item),
        meta.uid.as_deref().unwrap_or(""),
        plan.label,
        plan.label_value
    )
}

/// Suspensions are counted where the GitOps objects are, and in the namespaces the policy
/// includes by name (a label selector's are not known here).
fn counted_in(policy: &GatePolicy, gitops_namespace: bool, namespace: &str) -> bool {
    static NO_LABELS: BTreeMap<String, String> = BTreeMap::new();
    gitops_namespace || policy.guards_namespace(namespace, NamespaceLabels::Known(&NO_LABELS))
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: &str = r#"
apiVersion: driftgate.dev/v1alpha1
kind: GatePolicy
metadata: {name: production}
spec:
  namespaces: {include: ["prod-*"]}
  breakGlass: {maxDuration: 4h, openers: {groups: [sre-oncall]}}
  suspensions: {}
"#;

    fn object(namespace: &str, suspend: bool, label: Option<&str>) -> DynamicObject {
        let mut labels = serde_json::Map::new();
        if let Some(label) = label {
            labels.insert("driftgate.dev/break-glass".into(), label.into());
        }
        serde_json::from_value(serde_json::json!({
            "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
            "metadata": {"name": "apps", "namespace": namespace, "labels": labels},
            "spec": {"suspend": suspend}
        }))
        .unwrap()
    }

    #[test]
    fn suspensions_are_counted_by_their_expiry() {
        let policies = PolicySet::from_yaml("inline", POLICY).unwrap();
        let now: Timestamp = "2026-11-30T09:00:00Z".parse().unwrap();
        let objects = [
            object("flux-system", true, Some("20261130T1000Z")),
            object("flux-system", true, Some("20261130T0800Z")),
            object("prod-apps", true, Some("20261130T0800Z")),
            object("flux-system", true, None),
            object("flux-system", true, Some("tomorrow")),
            // Not suspended, or where this policy does not look.
            object("flux-system", false, Some("20261130T0800Z")),
            object("team-a", true, Some("20261130T0800Z")),
        ];
        let listed: Vec<Listed<'_>> = objects
            .iter()
            .map(|object| Listed {
                group: "kustomize.toolkit.fluxcd.io",
                kind: "Kustomization",
                object,
            })
            .collect();
        let counts = count_suspensions(&policies, &listed, now);
        let count = |state| counts[&("production".to_owned(), state)];
        assert_eq!(count(SuspensionState::Open), 1);
        assert_eq!(count(SuspensionState::Expired), 2);
        assert_eq!(count(SuspensionState::Unbounded), 2);
        // Zero series exist from the start.
        let none = count_suspensions(&policies, &[], now);
        assert_eq!(none.len(), 3);
        assert!(none.values().all(|n| *n == 0));
    }

    fn application(spec: Value, label: &str, annotations: &[(&str, &str)]) -> DynamicObject {
        let mut annotations: serde_json::Map<String, Value> = annotations
            .iter()
            .map(|(k, v)| ((*k).to_owned(), json!(v)))
            .collect();
        annotations.insert(
            "driftgate.dev/break-glass-reason".into(),
            json!("INC-1: why"),
        );
        serde_json::from_value(json!({
            "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
            "metadata": {"name": "shop", "namespace": "argocd", "uid": "u-1", "resourceVersion": "42",
                "labels": {"driftgate.dev/break-glass": label}, "annotations": annotations},
            "spec": spec
        }))
        .unwrap()
    }

    fn listed<'a>(group: &'a str, kind: &'a str, objects: &'a [DynamicObject]) -> Vec<Listed<'a>> {
        objects
            .iter()
            .map(|object| Listed {
                group,
                kind,
                object,
            })
            .collect()
    }

    #[test]
    fn an_expired_flux_suspension_is_resumed_by_one_patch_and_open_or_unbounded_ones_are_not() {
        let policies = PolicySet::from_yaml("inline", POLICY).unwrap();
        let now: Timestamp = "2026-11-30T09:00:00Z".parse().unwrap();
        let mut expired = object("flux-system", true, Some("20261130T0800Z"));
        expired.metadata.resource_version = Some("7".into());
        expired.metadata.annotations.get_or_insert_default().insert(
            "kustomize.toolkit.fluxcd.io/reconcile".into(),
            "disabled".into(),
        );
        let objects = [
            object("flux-system", true, Some("20261130T1000Z")),
            expired,
            // No expiry: nothing says when it should end, so driftgate never resumes it.
            object("flux-system", true, None),
            object("flux-system", false, Some("20261130T0800Z")),
            object("team-a", true, Some("20261130T0800Z")),
        ];
        let listed = listed("kustomize.toolkit.fluxcd.io", "Kustomization", &objects);
        let plans = plan_resumes(&policies, &listed, now);
        assert_eq!(
            plans,
            [ResumePlan {
                at: 1,
                policy: "production".into(),
                label: "driftgate.dev/break-glass".into(),
                label_value: "20261130T0800Z".into(),
                expired_at: "2026-11-30T08:00:00Z".parse().unwrap(),
                action: ResumeAction::Patch(json!({
                    "spec": {"suspend": false},
                    "metadata": {
                        "resourceVersion": "7",
                        "labels": {"driftgate.dev/break-glass": null},
                        "annotations": {
                            "driftgate.dev/break-glass-reason": null,
                            "kustomize.toolkit.fluxcd.io/reconcile": null,
                        },
                    },
                })),
            }]
        );
        // The same objects an hour earlier: nothing has expired.
        let earlier: Timestamp = "2026-11-30T07:00:00Z".parse().unwrap();
        assert!(plan_resumes(&policies, &listed, earlier).is_empty());
    }

    #[test]
    fn a_suspension_another_policy_still_holds_open_is_not_resumed() {
        let other = r#"
---
apiVersion: driftgate.dev/v1alpha1
kind: GatePolicy
metadata: {name: platform}
spec:
  namespaces: {include: ["platform-*"]}
  breakGlass: {label: platform.example/hold, maxDuration: 4h, openers: {groups: [sre-oncall]}}
  suspensions: {}
"#;
        let policies = PolicySet::from_yaml("inline", &format!("{POLICY}{other}")).unwrap();
        let now: Timestamp = "2026-11-30T09:00:00Z".parse().unwrap();
        let mut held = object("flux-system", true, Some("20261130T0800Z"));
        held.metadata
            .labels
            .get_or_insert_default()
            .insert("platform.example/hold".into(), "20261130T1000Z".into());
        let objects = [held];
        let listed = listed("kustomize.toolkit.fluxcd.io", "Kustomization", &objects);
        assert!(plan_resumes(&policies, &listed, now).is_empty());
        // Once both expired: one patch removes both windows' labels.
        let later: Timestamp = "2026-11-30T11:00:00Z".parse().unwrap();
        let plans = plan_resumes(&policies, &listed, later);
        let ResumeAction::Patch(patch) = &plans[0].action else {
            panic!("{plans:?}");
        };
        assert_eq!(
            patch["metadata"]["labels"],
            json!({"driftgate.dev/break-glass": null, "platform.example/hold": null})
        );
        assert_eq!(plans.len(), 1);
    }

    #[test]
    fn argo_cd_self_heal_is_turned_back_on_but_a_removed_automated_sync_is_left_alone_and_said_once()
     {
        let policies = PolicySet::from_yaml("inline", POLICY).unwrap();
        let now: Timestamp = "2026-11-30T09:00:00Z".parse().unwrap();
        let objects = [
            application(
                json!({"syncPolicy": {"automated": {"prune": true, "selfHeal": false}}}),
                "20261130T0800Z",
                &[("argocd.argoproj.io/skip-reconcile", "true")],
            ),
            application(json!({"syncPolicy": {}}), "20261130T0830Z", &[]),
        ];
        let listed = listed("argoproj.io", "Application", &objects);
        let plans = plan_resumes(&policies, &listed, now);
        assert_eq!(plans.len(), 2);
        assert_eq!(
            plans[0].action,
            ResumeAction::Patch(json!({
                "spec": {"syncPolicy": {"automated": {"selfHeal": true}}},
                "metadata": {
                    "resourceVersion": "42",
                    "labels": {"driftgate.dev/break-glass": null},
                    "annotations": {
                        "driftgate.dev/break-glass-reason": null,
                        "argocd.argoproj.io/skip-reconcile": null,
                    },
                },
            }))
        );
        let ResumeAction::CannotUndo(cannot) = &plans[1].action else {
            panic!("a removed automated sync cannot be undone: {:?}", plans[1]);
        };
        assert_eq!(
            cannot[0],
            "spec.syncPolicy.automated (removed: what it held is unknown)"
        );
        let note = cannot_resume_note(&listed[1], &plans[1], cannot);
        assert!(
            note.starts_with("driftgate did not resume the GitOps controller's reconciliation of Application argocd/shop, suspended until 2026-11-30 08:30 UTC (label 20261130T0830Z) and past it: it cannot undo spec.syncPolicy.automated"),
            "{note}"
        );

        // Said once while it stays expired; again once it expires anew.
        let mut reported = Reported::default();
        assert_eq!(reported.first_time(&listed, &plans).len(), 1);
        assert!(reported.first_time(&listed, &plans).is_empty());
        assert!(reported.first_time(&listed, &[]).is_empty());
        assert_eq!(reported.first_time(&listed, &plans).len(), 1);
        let mut extended = plans[1].clone();
        extended.label_value = "20261130T0845Z".into();
        assert_eq!(reported.first_time(&listed, &[extended]).len(), 1);
    }

    /// An Application an app-of-apps applies from Git client-side (Argo CD's default) carries
    /// the configuration it applied, written by the controller's own entry: a removed automated
    /// sync goes back to what Git declares there, also once Argo CD has dropped the `syncPolicy`
    /// it left empty (found in e2e under load: the resume never came). The same annotation
    /// written by anyone else (alice's `kubectl apply`) is not Git's word, and the removal
    /// stays unresumable, as does one whose `syncPolicy` is no object.
    #[test]
    fn a_removed_automated_sync_is_restored_as_the_controller_last_applied_it_from_git() {
        let policy = format!(
            "{POLICY}  controllers:\n    - {{name: argocd, usernames: [\"system:serviceaccount:argocd:argocd-application-controller\"], fieldManagers: [argocd-controller]}}\n"
        );
        let policies = PolicySet::from_yaml("inline", &policy).unwrap();
        let now: Timestamp = "2026-11-30T09:00:00Z".parse().unwrap();
        let git = json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
            "metadata": {"name": "shop", "namespace": "argocd"},
            "spec": {"syncPolicy": {"automated": {"prune": true, "selfHeal": true}, "syncOptions": []}}});
        let last_applied = "kubectl.kubernetes.io/last-applied-configuration";
        let applied_by = |manager: &str, spec: Value| {
            let mut object =
                application(spec, "20261130T0830Z", &[(last_applied, &git.to_string())]);
            object.metadata.managed_fields = Some(vec![
                serde_json::from_value(json!({
                    "manager": manager, "operation": "Update", "apiVersion": "argoproj.io/v1alpha1",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:metadata": {"f:annotations": {format!("f:{last_applied}"): {}}}},
                }))
                .unwrap(),
            ]);
            object
        };
        let suspended = json!({"syncPolicy": {"syncOptions": []}});
        let objects = [
            applied_by("argocd-controller", suspended.clone()),
            // What Argo CD's normalization leaves of it: `{"spec":{"syncPolicy":null}}`.
            applied_by("argocd-controller", json!({"project": "default"})),
            applied_by("kubectl-client-side-apply", suspended),
            applied_by("argocd-controller", json!({"syncPolicy": []})),
        ];
        let listed = listed("argoproj.io", "Application", &objects);
        let plans = plan_resumes(&policies, &listed, now);
        let restored = ResumeAction::Patch(json!({
            "spec": {"syncPolicy": {"automated": {"prune": true, "selfHeal": true}}},
            "metadata": {
                "resourceVersion": "42",
                "labels": {"driftgate.dev/break-glass": null},
                "annotations": {"driftgate.dev/break-glass-reason": null},
            },
        }));
        assert_eq!(plans[0].action, restored);
        assert_eq!(plans[1].action, restored);
        assert!(
            matches!(&plans[2].action, ResumeAction::CannotUndo(cannot) if cannot[0].starts_with("spec.syncPolicy.automated (removed")),
            "{:?}",
            plans[2]
        );
        assert!(
            matches!(&plans[3].action, ResumeAction::CannotUndo(cannot) if cannot[0].starts_with("spec.syncPolicy.automated (below a list")),
            "{:?}",
            plans[3]
        );
    }

    #[test]
    fn each_form_of_flux_s_and_argo_cd_3_s_suspensions_is_undone_by_the_resume() {
        let policies = PolicySet::from_yaml("inline", POLICY).unwrap();
        let now: Timestamp = "2026-11-30T09:00:00Z".parse().unwrap();
        // Suspended by its parent's labels and annotations, in Flux's other spellings, and not
        // by `ssa: Merge`, which stays.
        let mut by_labels = object("flux-system", false, Some("20261130T0800Z"));
        by_labels.metadata.resource_version = Some("9".into());
        let labels = by_labels.metadata.labels.get_or_insert_default();
        labels.insert(
            "kustomize.toolkit.fluxcd.io/reconcile".into(),
            "Disabled".into(),
        );
        labels.insert("kustomize.toolkit.fluxcd.io/ssa".into(), "Merge".into());
        by_labels
            .metadata
            .annotations
            .get_or_insert_default()
            .insert("kustomize.toolkit.fluxcd.io/ssa".into(), "IGNORE".into());
        let objects = [by_labels];
        let flux = listed("kustomize.toolkit.fluxcd.io", "Kustomization", &objects);
        let plans = plan_resumes(&policies, &flux, now);
        assert_eq!(
            plans[0].action,
            ResumeAction::Patch(json!({"metadata": {
                "resourceVersion": "9",
                "labels": {"driftgate.dev/break-glass": null,
                    "kustomize.toolkit.fluxcd.io/reconcile": null},
                "annotations": {"driftgate.dev/break-glass-reason": null,
                    "kustomize.toolkit.fluxcd.io/ssa": null},
            }}))
        );
        // Argo CD 3's `enabled: false` goes back to true (what absent means).
        let objects = [application(
            json!({"syncPolicy": {"automated": {"enabled": false, "selfHeal": true}}}),
            "20261130T0800Z",
            &[],
        )];
        let argo = listed("argoproj.io", "Application", &objects);
        let plans = plan_resumes(&policies, &argo, now);
        assert_eq!(
            plans[0].action,
            ResumeAction::Patch(json!({
                "spec": {"syncPolicy": {"automated": {"enabled": true}}},
                "metadata": {
                    "resourceVersion": "42",
                    "labels": {"driftgate.dev/break-glass": null},
                    "annotations": {"driftgate.dev/break-glass-reason": null},
                },
            }))
        );
    }
}
