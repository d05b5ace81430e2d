//! `BackportRequirement`: the durable record of a break-glass window and every change made in
//! it, kept until Git has caught up (or a person resolves it).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The annotation on a record naming the pull request that backports it (`driftgate backlog
/// link`). An annotation, not status: it is a person's pointer, not evidence (the controller's
/// writes are), so the guard leaves it free as it leaves every non-driftgate.dev/ key.
pub const PULL_REQUEST_ANNOTATION: &str = "backport.driftgate.dev/pull-request";

/// The pull request linked to `record`, if any.
pub fn pull_request_of(record: &BackportRequirement) -> Option<&str> {
    record
        .metadata
        .annotations
        .as_ref()?
        .get(PULL_REQUEST_ANNOTATION)
        .map(String::as_str)
        .filter(|url| !url.trim().is_empty())
}

/// Why `url` is not a pull request's address, if it is not.
pub fn pull_request_problem(url: &str) -> Option<&'static str> {
    if !(url.starts_with("https://") || url.starts_with("http://")) {
        Some("it must start with https:// (or http://)")
    } else if url.len() > 2048 {
        Some("it is longer than 2048 characters")
    } else if url.contains(char::is_whitespace) || url.contains(char::is_control) {
        Some("it contains spaces or control characters")
    } else {
        None
    }
}

/// The object a record is about, as Events and reports name it (the Namespace, for a
/// namespace-wide window).
pub fn regarding(record: &BackportRequirement) -> k8s_openapi::api::core::v1::ObjectReference {
    let object = &record.spec.object;
    k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some(object.api_version.clone()),
        kind: Some(object.kind.clone()),
        name: Some(object.name.clone()),
        namespace: (record.spec.scope != RecordScope::Namespace)
            .then(|| record.metadata.namespace.clone())
            .flatten(),
        uid: Some(object.uid.clone()).filter(|u| !u.is_empty()),
        ..Default::default()
    }
}

/// One break-glass window on one object (or on a namespace), and what was changed under it.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    // The core has no `kube` (its client): the derive reaches kube-core directly.
    crates(kube_core = "::kube_core"),
    group = "driftgate.dev",
    version = "v1alpha1",
    kind = "BackportRequirement",
    plural = "backportrequirements",
    shortname = "bpr",
    namespaced,
    status = "BackportStatus",
    // So that the ledger's plans, which name the records they write, can be compared in tests.
    derive = "PartialEq",
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Kind","type":"string","jsonPath":".spec.object.kind"}"#,
    printcolumn = r#"{"name":"Object","type":"string","jsonPath":".spec.object.name"}"#,
    printcolumn = r#"{"name":"Opener","type":"string","jsonPath":".spec.window.opener"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".spec.window.reason"}"#,
    // A string, not a date: kubectl prints a date as the time since it, `<invalid>` for one
    // still to come, which an open window's expiry always is.
    printcolumn = r#"{"name":"Expires","type":"string","jsonPath":".spec.window.expiresAt"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct BackportRequirementSpec {
    /// The object the window is on (the Namespace, for a namespace-wide window).
    pub object: RecordedObject,
    pub scope: RecordScope,
    pub window: RecordedWindow,
    /// The policy whose break-glass rules admitted the window.
    pub policy: String,
    /// Every change admitted under the window, oldest first.
    #[serde(default)]
    pub changes: Vec<RecordedChange>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RecordedObject {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum RecordScope {
    Object,
    Namespace,
    /// A suspension of the GitOps controller (the object is the Kustomization, HelmRelease or
    /// Application suspended): who suspended it, why, until when, and who resumed it. Nothing
    /// in it awaits backport; the changes made while it lasted have records of their own.
    Suspension,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RecordedWindow {
    /// Who opened it; absent when the label was set where driftgate could not see it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub opener: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub opened_at: Option<Time>,
    pub expires_at: Time,
    /// The label value as last seen (the expiry in basic ISO 8601).
    pub label_value: String,
}

impl RecordedWindow {
    /// Who opened the window, as messages quote it: escaped and bounded (client text).
    pub fn opener_words(&self) -> std::borrow::Cow<'_, str> {
        let opener = self
            .opener
            .as_deref()
            .unwrap_or("someone driftgate did not see");
        crate::text::echo(opener, crate::text::MAX_NAME_CHARS)
    }

    /// Why, as messages quote it: escaped and bounded (client text).
    pub fn reason_words(&self) -> std::borrow::Cow<'_, str> {
        let reason = self.reason.as_deref().unwrap_or("");
        crate::text::echo(reason, crate::text::MAX_REASON_CHARS)
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RecordedChange {
    pub time: Time,
    pub user: String,
    pub operation: String,
    /// The object changed, for a namespace-wide window (where `spec.object` is the Namespace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object: Option<RecordedObject>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub subresource: String,
    /// The admission request's uid, so a change is recorded once even if retried.
    pub request_uid: String,
    /// The object's resourceVersion before the change (none for a CREATE). Every webhook the
    /// API server calls for one write gets its own request uid; with the object this names the
    /// write, so that replicas that each review it record it once.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub resource_version: String,
    #[serde(default)]
    pub fields: Vec<RecordedField>,
    /// When driftgate read the object back from the API server carrying this change. Absent,
    /// the change is only what a review claimed (recorded before the answer, as every
    /// break-glass change is): `driftgate backport` writes no recorded value of it, and a
    /// change the API server never stored is withdrawn from the record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub landed: Option<Time>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RecordedField {
    /// The field path, as driftgate writes paths (`spec.template.spec.containers[0].image`).
    pub path: String,
    /// `sha256:<hex>` of the canonical JSON of the new value, or `absent` when removed.
    pub digest: String,
    /// The new value itself, only where the policy allows it (never for Secrets).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_json")]
    pub value: Option<serde_json::Value>,
}

/// A schema that accepts any JSON value, as Kubernetes structural schemas spell it.
fn any_json(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"x-kubernetes-preserve-unknown-fields": true, "nullable": true})
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum Phase {
    /// The window is open; changes are being recorded.
    #[default]
    Open,
    /// The window closed or expired; Git has not caught up yet.
    AwaitingBackport,
    /// The controller's next write carried the recorded values: Git has them.
    Backported,
    /// The controller's next write undid the recorded values.
    Reverted,
    /// A person closed the record with a note.
    Resolved,
    /// A suspension outlived its expiry and nobody has resumed it yet.
    Expired,
    /// A suspension was resumed (by whom and when: `status.resumedBy`, `status.resumedAt`).
    Resumed,
    /// The write the record was created for was never stored by the API server: only a review
    /// claimed it (refused after driftgate admitted it, or forged). Nothing awaits backport.
    Withdrawn,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackportStatus {
    #[serde(default)]
    pub phase: Phase,
    /// Every phase change, oldest first.
    #[serde(default)]
    pub transitions: Vec<Transition>,
    /// Fields whose recorded values the controller did not carry (for `Reverted`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reverted_fields: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolution_note: Option<String>,
    /// Who resolved it (their username as the API server authenticated them; driftgate's
    /// webhook admits a resolution only with the resolver's own name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_by: Option<String>,
    /// When it was resolved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_at: Option<Time>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>,
    /// Who resumed a suspension (their username as the API server authenticated them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumed_by: Option<String>,
    /// When a suspension was resumed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumed_at: Option<Time>,
    /// The controller's last dry run that carried every recorded value, while the record
    /// awaited backport: half of the proof that Git has the change (a later dry run carrying
    /// them too, with nothing applied between, is the other half).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dry_run_match: Option<DryRunMatch>,
}

/// A controller's dry run that carried every recorded value of one object.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DryRunMatch {
    pub time: Time,
    /// The controller's username.
    pub user: String,
    /// The object dry-run (for a namespace-wide window, one of its objects).
    pub object_uid: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Transition {
    pub phase: Phase,
    pub time: Time,
    pub reason: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube_core::CustomResourceExt;

    /// The CRD must be structural (the API server refuses it otherwise): every property typed,
    /// and `value` open only through x-kubernetes-preserve-unknown-fields.
    #[test]
    fn the_crd_is_namespaced_with_printer_columns() {
        let crd = BackportRequirement::crd();
        assert_eq!(crd.spec.scope, "Namespaced");
        assert_eq!(crd.spec.names.plural, "backportrequirements");
        let version = &crd.spec.versions[0];
        let columns: Vec<_> = version
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(
            columns,
            [
                "Phase", "Kind", "Object", "Opener", "Reason", "Expires", "Age"
            ]
        );
        let expires = version
            .additional_printer_columns
            .iter()
            .flatten()
            .find(|c| c.name == "Expires")
            .unwrap();
        assert_eq!(
            expires.type_, "string",
            "a date column shows <invalid> for the future"
        );
        assert!(version.subresources.as_ref().unwrap().status.is_some());
        let schema = serde_json::to_string(&version.schema).unwrap();
        assert!(
            schema.contains("x-kubernetes-preserve-unknown-fields"),
            "{schema}"
        );
    }
}
