//! What a GitOps controller last applied from Git, as the object itself shows it: the
//! configuration Argo CD's client-side apply keeps in the last-applied annotation, when the
//! managedFields entry of one of the policy's controllers owns it. The ledger reads it (does Git
//! have the emergency change?), auto-resume (what a removed suspension field held), and the
//! decision (does the controller's own write suspend against it?).

use serde_json::Value;

use crate::ledger::evidence::applied_by_controller;
use crate::policy::{Controller, GatePolicy};

/// The controller's last-applied configuration of `object`, when its managedFields entry (a
/// field manager of one of `policy`'s controllers held by windows, on the object itself) owns
/// the annotation: Argo CD's client-side apply writes it with Git's manifest.
pub fn declared_by_controller(object: &Value, policy: &GatePolicy) -> Option<Value> {
    policy
        .controllers
        .iter()
        .find_map(|controller| declared_by(object, controller))
}

/// [`declared_by_controller`] for one controller: the configuration `controller` itself last
/// applied client-side, when it is one that windows hold and names its field managers (a
/// controller that names none matches no manager: its field manager is not known).
pub fn declared_by(object: &Value, controller: &Controller) -> Option<Value> {
    if !controller.held_by_windows || controller.field_manager_patterns.is_empty() {
        return None;
    }
    object["metadata"]["managedFields"]
        .as_array()?
        .iter()
        .filter(|entry| entry["subresource"].as_str().unwrap_or("").is_empty())
        .filter(|entry| {
            entry["manager"]
                .as_str()
                .is_some_and(|manager| controller.field_managers.is_match(manager))
        })
        .find_map(|entry| applied_by_controller(&entry["fieldsV1"], object))
}
