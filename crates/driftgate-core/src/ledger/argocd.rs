//! Argo CD's word on a record awaiting backport when it writes nothing. Once Git has the
//! emergency values, Argo CD compares, finds the object in sync and skips the sync: no write (and
//! no server-side dry run, unless server-side diff is on) ever carries them to driftgate. What
//! it says instead is kept in the API server, and that is what is judged here, never a review:
//!
//! - the object's `kubectl.kubernetes.io/last-applied-configuration`, owned by the
//!   controller's own managedFields entry: what Git declared at Argo CD's last apply (client-side
//!   apply, its default);
//! - the Application's status, which only the application-controller may write where a policy
//!   guards Applications: `Synced` at a revision other than the one it last deployed, compared
//!   after the last recorded change, with the object listed `Synced`.
//!
//! Argo CD's three-way diff of Git against the live object, with the last-applied configuration
//! as the base, shows a field that configuration declares as changed if Git now holds another
//! value, and as removed if Git no longer declares it. So a field it declares that the live
//! object carries with the recorded value, in an Application reported Synced, is Git's. What
//! would hide a difference from that diff proves nothing and settles nothing: an
//! `ignoreDifferences` for the kind (the Application's, or argocd-cm's), server-side apply
//! (its structured-merge diff keeps a field Git dropped while another manager owns it) and
//! server-side diff (whose dry runs reach driftgate and are judged as Flux's are).
//!
//! Pure: the record, the objects as read and the policy come in; out comes the proof or why
//! there is none. `service` reads the objects and settles.

use k8s_openapi::api::core::v1::ObjectReference;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;

use crate::applied::declared_by_controller;
use crate::events::{EventReason, PlannedEvent};
use crate::fieldpath::FieldPath;
use crate::ledger::controller::Settlement;
use crate::ledger::evidence::{digest, latest_changes, value_at};
use crate::policy::document::{GuardedOperation, PolicyMode};
use crate::policy::{GatePolicy, NamespaceLabels};
use crate::records::phase::PhaseChange;
use crate::records::record::{BackportRequirement, RecordedObject};

/// Argo CD's annotation tracking (its default in v3): `APP:GROUP/KIND:NAMESPACE/NAME`.
pub const TRACKING_ANNOTATION: &str = "argocd.argoproj.io/tracking-id";
/// Per-object and per-Application sync options (`ServerSideApply=true`).
const SYNC_OPTIONS_ANNOTATION: &str = "argocd.argoproj.io/sync-options";
/// Per-Application compare options (`ServerSideDiff=true`).
const COMPARE_OPTIONS_ANNOTATION: &str = "argocd.argoproj.io/compare-options";
/// argocd-cmd-params-cm's key that turns server-side diff on for every Application.
const SERVER_SIDE_DIFF_PARAM: &str = "controller.diff.server.side";

/// The Application an object belongs to, by its tracking annotation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tracking {
    /// The Application's name.
    pub application: String,
    /// Its namespace when the tracking id names one (`NS_APP`, Applications in any namespace);
    /// None: Argo CD's own namespace.
    pub application_namespace: Option<String>,
    pub group: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

/// The tracking annotation of `object`, parsed as Argo CD parses it; None without one.
pub fn tracking_of(object: &Value) -> Option<Tracking> {
    let value = object["metadata"]["annotations"][TRACKING_ANNOTATION].as_str()?;
    let mut parts = value.splitn(3, ':');
    let (app, group_kind, namespace_name) = (parts.next()?, parts.next()?, parts.next()?);
    let (group, kind) = group_kind.split_once('/')?;
    let (namespace, name) = namespace_name.split_once('/')?;
    if app.is_empty() || kind.is_empty() || name.is_empty() || name.contains('/') {
        return None;
    }
    let (application_namespace, application) = match app.split_once('_') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() => (Some(ns.to_owned()), name),
        _ => (None, app),
    };
    Some(Tracking {
        application: application.to_owned(),
        application_namespace,
        group: group.to_owned(),
        kind: kind.to_owned(),
        namespace: namespace.to_owned(),
        name: name.to_owned(),
    })
}

/// Argo CD's settings that change how it compares: argocd-cm's and argocd-cmd-params-cm's data
/// (empty when the ConfigMap does not exist).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ArgoSettings {
    pub argocd_cm: BTreeMap<String, String>,
    pub cmd_params: BTreeMap<String, String>,
}

/// What was read for one object of a record: the object, its Application, Argo CD's settings,
/// and whether a policy in Enforce mode guards that Application's writes (so that only the
/// application-controller writes its status).
pub struct SyncedInputs<'a> {
    pub object: &'a Value,
    pub application: &'a Value,
    pub settings: &'a ArgoSettings,
    pub application_guarded: bool,
}

/// Argo CD reported Git in sync with the object's emergency values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SyncedProof {
    /// `argocd/api`
    pub application: String,
    /// The revision compared, and the one Argo CD last deployed.
    pub revision: String,
    pub deployed: String,
}

/// Why Argo CD's status proves nothing of a record's values this time: logged, and the record
/// waits for the next check.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NotSynced {
    #[error(
        "no policy in Enforce mode guards the Application, so anyone allowed by RBAC could write its status"
    )]
    ApplicationUnguarded,
    #[error("the object is gone or replaced")]
    ObjectReplaced,
    #[error("nothing recorded to compare")]
    NothingRecorded,
    #[error(
        "no last-applied configuration of the controller's own (Argo CD applies server-side, or someone else wrote it)"
    )]
    NoLastApplied,
    #[error("{0} is not a field path")]
    NotAFieldPath(String),
    #[error("{0} no longer has the recorded value")]
    ValueChanged(String),
    #[error(
        "{0} is not in the controller's last-applied configuration: Git never declared it, so Argo CD's comparison says nothing of it"
    )]
    NotDeclared(String),
    #[error("the object is applied server-side (sync option ServerSideApply=true)")]
    ObjectAppliedServerSide,
    #[error("the object has no tracking annotation")]
    NoTracking,
    #[error("the tracking annotation names another object")]
    TracksAnotherObject,
    #[error("Application {0} has several sources (or none): only a single source is compared")]
    NotOneSource(String),
    #[error("Application {0} applies server-side (ServerSideApply=true)")]
    ApplicationAppliesServerSide(String),
    #[error("Application {0} is compared by server-side diff: its dry runs are the evidence")]
    ServerSideDiff(String),
    #[error(
        "differences of {kind} objects are ignored (ignoreDifferences of Application {application} or argocd-cm)"
    )]
    DifferencesIgnored { application: String, kind: String },
    #[error("Application {0} is not Synced")]
    OutOfSync(String),
    #[error("Application {0} was last compared with another source than its own")]
    ComparedWithAnotherSource(String),
    #[error("Application {0} has no revision compared or none deployed")]
    NoRevision(String),
    #[error(
        "Application {application} is Synced at {revision}, the revision it last deployed: Git has not moved"
    )]
    GitNotMoved {
        application: String,
        revision: String,
    },
    #[error("Application {0} has no reconciledAt")]
    NoReconciledAt(String),
    #[error("Application {0} has not compared since the last recorded change")]
    NotComparedSince(String),
    #[error("Application {0} does not list the object as Synced")]
    ObjectNotListed(String),
}

/// Whether Argo CD's status proves Git has the values recorded for `object` (one of `record`'s
/// objects); `Err` says why not, for the log.
pub fn judge_synced(
    record: &BackportRequirement,
    recorded: &RecordedObject,
    policy: &GatePolicy,
    inputs: &SyncedInputs<'_>,
) -> Result<SyncedProof, NotSynced> {
    let SyncedInputs {
        object,
        application,
        settings,
        application_guarded,
    } = inputs;
    if !application_guarded {
        return Err(NotSynced::ApplicationUnguarded);
    }
    if object["metadata"]["uid"].as_str() != Some(recorded.uid.as_str()) {
        return Err(NotSynced::ObjectReplaced);
    }
    let latest = latest_changes(&record.spec, &recorded.uid);
    let Some(last_change) = latest.values().map(|(_, change)| change.time.0).max() else {
        return Err(NotSynced::NothingRecorded);
    };
    let declared = declared_by_controller(object, policy).ok_or(NotSynced::NoLastApplied)?;
    for (path, (field, _)) in &latest {
        let parsed =
            FieldPath::parse(path).map_err(|_| NotSynced::NotAFieldPath(path.to_string()))?;
        if digest(value_at(object, &parsed)) != field.digest {
            return Err(NotSynced::ValueChanged(path.to_string()));
        }
        if value_at(&declared, &parsed).is_none() {
            return Err(NotSynced::NotDeclared(path.to_string()));
        }
    }
    if has_option(object, SYNC_OPTIONS_ANNOTATION, "ServerSideApply=true") {
        return Err(NotSynced::ObjectAppliedServerSide);
    }
    let tracking = tracking_of(object).ok_or(NotSynced::NoTracking)?;
    let group = group_of(&recorded.api_version);
    if (
        tracking.group.as_str(),
        tracking.kind.as_str(),
        tracking.name.as_str(),
    ) != (group, recorded.kind.as_str(), recorded.name.as_str())
    {
        return Err(NotSynced::TracksAnotherObject);
    }
    application_in_sync(
        application,
        settings,
        &tracking,
        group,
        &recorded.kind,
        last_change,
    )
}

/// Whether `policy`, in Enforce mode, guards updates of Applications in `namespace` (with these
/// labels): then only its controllers and delegations write an Application's status there.
pub fn guards_applications(
    policy: &GatePolicy,
    namespace: &str,
    labels: &BTreeMap<String, String>,
) -> bool {
    policy.mode == PolicyMode::Enforce
        && policy.guards_namespace(namespace, NamespaceLabels::Known(labels))
        && policy.guards_resource("argoproj.io", "Application", "applications")
        && policy.guards_operation(GuardedOperation::Update)
        && policy.guards_subresource("")
}

/// The Application's side of the proof.
fn application_in_sync(
    application: &Value,
    settings: &ArgoSettings,
    tracking: &Tracking,
    group: &str,
    kind: &str,
    last_change: jiff::Timestamp,
) -> Result<SyncedProof, NotSynced> {
    let spec = &application["spec"];
    let status = &application["status"];
    let name = format!(
        "{}/{}",
        application["metadata"]["namespace"].as_str().unwrap_or(""),
        application["metadata"]["name"].as_str().unwrap_or("")
    );
    check_comparison(application, settings, group, kind, &name)?;
    let (revision, deployed) = synced_revisions(spec, status, &name)?;
    check_compared_since(status, last_change, &name)?;
    if !lists_object_synced(status, tracking, group, kind) {
        return Err(NotSynced::ObjectNotListed(name));
    }
    Ok(SyncedProof {
        application: name,
        revision: revision.to_owned(),
        deployed: deployed.to_owned(),
    })
}

/// That the Application's comparison hides no difference of `group/kind`: a single source,
/// compared client-side after a client-side apply, with no ignoreDifferences for the kind.
fn check_comparison(
    application: &Value,
    settings: &ArgoSettings,
    group: &str,
    kind: &str,
    name: &str,
) -> Result<(), NotSynced> {
    let spec = &application["spec"];
    if spec["source"].is_null() || !spec["sources"].is_null() {
        return Err(NotSynced::NotOneSource(name.to_owned()));
    }
    let options = spec["syncPolicy"]["syncOptions"].as_array();
    if options.is_some_and(|o| o.iter().any(|o| o == "ServerSideApply=true")) {
        return Err(NotSynced::ApplicationAppliesServerSide(name.to_owned()));
    }
    if uses_server_side_diff(application, settings) {
        return Err(NotSynced::ServerSideDiff(name.to_owned()));
    }
    if ignores_differences(spec, settings, group, kind) {
        return Err(NotSynced::DifferencesIgnored {
            application: name.to_owned(),
            kind: kind.to_owned(),
        });
    }
    Ok(())
}

/// Whether the Application is compared by server-side diff: its own compare option, or
/// argocd-cmd-params-cm's for every Application that does not turn it off.
fn uses_server_side_diff(application: &Value, settings: &ArgoSettings) -> bool {
    has_option(
        application,
        COMPARE_OPTIONS_ANNOTATION,
        "ServerSideDiff=true",
    ) || (settings
        .cmd_params
        .get(SERVER_SIDE_DIFF_PARAM)
        .map(String::as_str)
        == Some("true")
        && !has_option(
            application,
            COMPARE_OPTIONS_ANNOTATION,
            "ServerSideDiff=false",
        ))
}

/// The revision the Application is Synced at (with its own source) and the one it last
/// deployed, when they differ: Git moved since the deploy.
fn synced_revisions<'a>(
    spec: &Value,
    status: &'a Value,
    name: &str,
) -> Result<(&'a str, &'a str), NotSynced> {
    if status["sync"]["status"] != "Synced" {
        return Err(NotSynced::OutOfSync(name.to_owned()));
    }
    if status["sync"]["comparedTo"]["source"] != spec["source"] {
        return Err(NotSynced::ComparedWithAnotherSource(name.to_owned()));
    }
    let revision = status["sync"]["revision"].as_str().unwrap_or("");
    let deployed = status["history"]
        .as_array()
        .and_then(|history| history.last())
        .and_then(|entry| entry["revision"].as_str())
        .unwrap_or("");
    if revision.is_empty() || deployed.is_empty() {
        return Err(NotSynced::NoRevision(name.to_owned()));
    }
    if revision == deployed {
        return Err(NotSynced::GitNotMoved {
            application: name.to_owned(),
            revision: revision.to_owned(),
        });
    }
    Ok((revision, deployed))
}

/// That the Application compared after `last_change`, so its status speaks of the values
/// recorded.
fn check_compared_since(
    status: &Value,
    last_change: jiff::Timestamp,
    name: &str,
) -> Result<(), NotSynced> {
    let reconciled = status["reconciledAt"]
        .as_str()
        .and_then(|t| t.parse::<jiff::Timestamp>().ok())
        .ok_or_else(|| NotSynced::NoReconciledAt(name.to_owned()))?;
    // Seconds only: a comparison in the same second as the change may have preceded it.
    if reconciled.as_second() <= last_change.as_second() {
        return Err(NotSynced::NotComparedSince(name.to_owned()));
    }
    Ok(())
}

/// Whether the Application's resources list the tracked object, of `group/kind`, as Synced.
fn lists_object_synced(status: &Value, tracking: &Tracking, group: &str, kind: &str) -> bool {
    status["resources"].as_array().is_some_and(|resources| {
        resources.iter().any(|r| {
            r["group"].as_str().unwrap_or("") == group
                && r["kind"] == kind
                && r["namespace"].as_str().unwrap_or("") == tracking.namespace
                && r["name"] == tracking.name.as_str()
                && r["status"] == "Synced"
        })
    })
}

/// Whether an `ignoreDifferences` of the Application or of argocd-cm may apply to `group/kind`
/// (any path: driftgate does not evaluate JSON pointers or jq). argocd-cm's older single
/// `resource.customizations` key is read as ignoring whenever it mentions ignoreDifferences.
fn ignores_differences(spec: &Value, settings: &ArgoSettings, group: &str, kind: &str) -> bool {
    let glob = |pattern: &str, text: &str| pattern.contains('*') || pattern == text;
    let by_application = spec["ignoreDifferences"].as_array().is_some_and(|entries| {
        entries.iter().any(|entry| {
            glob(entry["group"].as_str().unwrap_or(""), group)
                && glob(entry["kind"].as_str().unwrap_or(""), kind)
        })
    });
    let prefix = "resource.customizations.ignoreDifferences.";
    let keys = [
        "all".to_owned(),
        format!("{group}_{kind}"),
        if group.is_empty() {
            kind.to_owned()
        } else {
            format!("{group}_{kind}")
        },
    ];
    let by_settings = settings.argocd_cm.iter().any(|(key, value)| {
        key.strip_prefix(prefix).is_some_and(|group_kind| {
            keys.iter().any(|k| k == group_kind) && !value.trim().is_empty()
        }) || (key == "resource.customizations" && value.contains("ignoreDifferences"))
    });
    by_application || by_settings
}

/// Whether `object`'s comma-separated option annotation `key` holds `option`.
fn has_option(object: &Value, key: &str, option: &str) -> bool {
    object["metadata"]["annotations"][key]
        .as_str()
        .is_some_and(|value| value.split(',').any(|o| o.trim() == option))
}

/// The API group of an apiVersion ("" for the core group).
fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(group, _)| group)
}

/// The settlement of `record` on Argo CD's proofs for every object it recorded changes of,
/// with its Event about `regarding`.
pub fn synced_settlement(
    record: &Arc<BackportRequirement>,
    proof: &SyncedProof,
    regarding: ObjectReference,
) -> Settlement {
    let opener = record.spec.window.opener_words();
    let reason = record.spec.window.reason_words();
    let name = kube_core::ResourceExt::name_any(record.as_ref());
    let note = format!(
        "Argo CD's Application {} reports Synced at revision {}, not the revision it last deployed ({}), compared with the object carrying the values of the emergency change made under {opener}'s break-glass window (reason \"{reason}\") and found nothing to sync: Git has caught up. Record {name}.",
        proof.application,
        short(&proof.revision),
        short(&proof.deployed),
    );
    let event = PlannedEvent::new(EventReason::BackportConfirmed, note, regarding);
    Settlement {
        record: record.clone(),
        change: PhaseChange::backported_by_sync_status(event.note.clone()),
        event,
    }
}

/// A Git sha as people quote it: its first 12 characters.
fn short(revision: &str) -> &str {
    revision.get(..12).unwrap_or(revision)
}

/// The objects `record` recorded changes of: its object, or each object of a namespace-wide
/// window's changes, once each.
pub fn recorded_objects(record: &BackportRequirement) -> Vec<RecordedObject> {
    let mut objects: Vec<RecordedObject> = record
        .spec
        .changes
        .iter()
        .map(|change| {
            change
                .object
                .clone()
                .unwrap_or_else(|| record.spec.object.clone())
        })
        .filter(|o| !o.uid.is_empty())
        .collect();
    objects.sort();
    objects.dedup();
    objects
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::evidence::LAST_APPLIED_ANNOTATION;
    use crate::ledger::plan::tests::{at, open_record};
    use crate::policy::PolicySet;
    use crate::records::record::{RecordedChange, RecordedField};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use serde_json::json;

    const POLICY: &str = r#"
apiVersion: driftgate.dev/v1alpha1
kind: GatePolicy
metadata: {name: production}
spec:
  namespaces: {include: ["prod-*"]}
  controllers:
    - {name: argocd, usernames: ["system:serviceaccount:argocd:argocd-application-controller"], fieldManagers: [argocd-controller]}
  breakGlass: {maxDuration: 4h, openers: {groups: [sre]}}
---
apiVersion: driftgate.dev/v1alpha1
kind: GatePolicy
metadata: {name: gitops-argocd}
spec:
  namespaces: {include: ["argocd"]}
  resources: {include: ["argoproj.io/Application"]}
  controllers:
    - {name: argocd, usernames: ["system:serviceaccount:argocd:argocd-application-controller"], fieldManagers: [argocd-controller]}
"#;

    const R1: &str = "1111111111111111111111111111111111111111";
    const R2: &str = "2222222222222222222222222222222222222222";

    fn policies() -> PolicySet {
        PolicySet::from_yaml("inline", POLICY).unwrap()
    }

    /// alice's change of Deployment api to 5 replicas at 09:10, awaiting backport.
    fn record() -> BackportRequirement {
        let mut record = open_record("deployment-api-1", "2026-11-30T10:00:00Z");
        record.spec.changes.push(RecordedChange {
            time: Time(at("2026-11-30T09:10:00Z")),
            user: "alice".into(),
            operation: "UPDATE".into(),
            object: None,
            subresource: "scale".into(),
            request_uid: "r".into(),
            resource_version: "41".into(),
            fields: vec![RecordedField {
                path: "spec.replicas".into(),
                digest: digest(Some(&json!(5))),
                value: None,
            }],
            landed: None,
        });
        record
    }

    /// Deployment api as Argo CD applied it client-side with `declared` replicas, now at 5
    /// (kubectl's, through `scale`).
    fn object(declared: u32) -> Value {
        let applied = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "api", "namespace": "prod-payments",
                "annotations": {TRACKING_ANNOTATION: "api:apps/Deployment:prod-payments/api"}},
            "spec": {"replicas": declared}});
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {
                "name": "api", "namespace": "prod-payments", "uid": "dep-uid",
                "annotations": {
                    TRACKING_ANNOTATION: "api:apps/Deployment:prod-payments/api",
                    LAST_APPLIED_ANNOTATION: applied.to_string(),
                },
                "managedFields": [
                    {"manager": "argocd-controller", "operation": "Update", "fieldsV1": {
                        "f:metadata": {"f:annotations": {
                            format!("f:{TRACKING_ANNOTATION}"): {},
                            format!("f:{LAST_APPLIED_ANNOTATION}"): {}}},
                        "f:spec": {"f:template": {}}}},
                    {"manager": "kubectl", "operation": "Update", "subresource": "scale",
                     "fieldsV1": {"f:spec": {"f:replicas": {}}}},
                ],
            },
            "spec": {"replicas": 5},
        })
    }

    /// Application argocd/api: Synced at `revision`, `deployed` last, compared at 09:20.
    fn application(revision: &str, deployed: &str) -> Value {
        let source =
            json!({"repoURL": "file:///git/api.git", "path": "app", "targetRevision": "main"});
        json!({
            "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
            "metadata": {"name": "api", "namespace": "argocd"},
            "spec": {"source": source, "destination": {"namespace": "prod-payments"},
                     "syncPolicy": {"automated": {"prune": true, "selfHeal": true}}},
            "status": {
                "sync": {"status": "Synced", "revision": revision, "comparedTo": {"source": source}},
                "history": [{"revision": deployed, "id": 0}],
                "reconciledAt": "2026-11-30T09:20:00Z",
                "resources": [{"group": "apps", "kind": "Deployment", "namespace": "prod-payments",
                               "name": "api", "status": "Synced"}],
            },
        })
    }

    fn judged(
        object: &Value,
        application: &Value,
        settings: &ArgoSettings,
    ) -> Result<SyncedProof, NotSynced> {
        let policies = policies();
        let record = record();
        let recorded = &recorded_objects(&record)[0];
        let production = policies
            .policies()
            .iter()
            .find(|p| p.name == "production")
            .unwrap();
        judge_synced(
            &record,
            recorded,
            production,
            &SyncedInputs {
                object,
                application,
                settings,
                application_guarded: true,
            },
        )
    }

    #[test]
    fn the_tracking_annotation_is_read_as_argo_cd_writes_it() {
        let tracking = tracking_of(&object(2)).unwrap();
        assert_eq!(
            tracking,
            Tracking {
                application: "api".into(),
                application_namespace: None,
                group: "apps".into(),
                kind: "Deployment".into(),
                namespace: "prod-payments".into(),
                name: "api".into(),
            }
        );
        let in_any_namespace = json!({"metadata": {"annotations": {TRACKING_ANNOTATION: "team-a_api:/ConfigMap:prod-payments/settings"}}});
        let tracking = tracking_of(&in_any_namespace).unwrap();
        assert_eq!(
            (
                tracking.application_namespace.as_deref(),
                tracking.application.as_str(),
                tracking.group.as_str()
            ),
            (Some("team-a"), "api", "")
        );
        for broken in [
            "api",
            "api:apps/Deployment",
            "api:Deployment:prod/api",
            ":apps/Deployment:prod/api",
        ] {
            let object = json!({"metadata": {"annotations": {TRACKING_ANNOTATION: broken}}});
            assert_eq!(tracking_of(&object), None, "{broken}");
        }
    }

    /// Git at R2 has the 5 replicas alice set; Argo CD compared it with the object and found
    /// nothing to sync: the last-applied configuration (R1's, 2 replicas) declares the field,
    /// so had Git kept 2 or dropped it, its three-way diff would show it.
    #[test]
    fn synced_at_a_revision_it_did_not_deploy_with_the_values_in_place_is_a_backport() {
        let settings = ArgoSettings::default();
        let proof = judged(&object(2), &application(R2, R1), &settings).unwrap();
        assert_eq!(
            proof,
            SyncedProof {
                application: "argocd/api".into(),
                revision: R2.into(),
                deployed: R1.into(),
            }
        );
        let record = Arc::new(record());
        let settlement = synced_settlement(&record, &proof, Default::default());
        assert_eq!(
            (settlement.change.phase, settlement.change.reason),
            (
                crate::records::record::Phase::Backported,
                "ControllerFoundNothingToSync"
            )
        );
        assert_eq!(settlement.event.reason, EventReason::BackportConfirmed);
        assert_eq!(
            settlement.event.note,
            "Argo CD's Application argocd/api reports Synced at revision 222222222222, not the revision it last deployed (111111111111), \
             compared with the object carrying the values of the emergency change made under alice's break-glass window (reason \"INC-7\") \
             and found nothing to sync: Git has caught up. Record deployment-api-1."
        );
    }

    #[test]
    fn each_thing_that_could_hide_a_difference_from_argo_cds_diff_proves_nothing() {
        let settings = ArgoSettings::default();
        let fails = |object: &Value, application: &Value, settings: &ArgoSettings, why: &str| {
            let error = judged(object, application, settings).unwrap_err();
            assert!(error.to_string().contains(why), "{error}");
        };
        // Git has not moved since Argo CD deployed (the self-heal it could not make is all).
        fails(
            &object(2),
            &application(R1, R1),
            &settings,
            "Git has not moved",
        );
        // OutOfSync, or compared with another source.
        let mut out = application(R2, R1);
        out["status"]["sync"]["status"] = json!("OutOfSync");
        fails(&object(2), &out, &settings, "is not Synced");
        let mut elsewhere = application(R2, R1);
        elsewhere["spec"]["source"]["path"] = json!("other");
        fails(&object(2), &elsewhere, &settings, "another source");
        // Compared before alice's change (same second counts as before).
        let mut early = application(R2, R1);
        early["status"]["reconciledAt"] = json!("2026-11-30T09:10:00Z");
        fails(&object(2), &early, &settings, "has not compared since");
        // The object not listed Synced.
        let mut unlisted = application(R2, R1);
        unlisted["status"]["resources"][0]["status"] = json!("OutOfSync");
        fails(&object(2), &unlisted, &settings, "does not list the object");
        // The live value moved on.
        let mut moved = object(2);
        moved["spec"]["replicas"] = json!(7);
        fails(
            &moved,
            &application(R2, R1),
            &settings,
            "no longer has the recorded value",
        );
        // A field Git never declared: the diff says nothing of it.
        let mut undeclared = object(2);
        let mut applied: Value = serde_json::from_str(
            undeclared["metadata"]["annotations"][LAST_APPLIED_ANNOTATION]
                .as_str()
                .unwrap(),
        )
        .unwrap();
        applied["spec"].as_object_mut().unwrap().remove("replicas");
        undeclared["metadata"]["annotations"][LAST_APPLIED_ANNOTATION] = json!(applied.to_string());
        fails(
            &undeclared,
            &application(R2, R1),
            &settings,
            "Git never declared it",
        );
        // A last-applied configuration someone else wrote (alice's kubectl apply) is not Argo CD's.
        let mut foreign = object(2);
        foreign["metadata"]["managedFields"][0]["manager"] = json!("kubectl-client-side-apply");
        fails(
            &foreign,
            &application(R2, R1),
            &settings,
            "no last-applied configuration",
        );
        // Server-side apply, on the Application or the object; server-side diff.
        let mut ssa = application(R2, R1);
        ssa["spec"]["syncPolicy"]["syncOptions"] = json!(["ServerSideApply=true"]);
        fails(&object(2), &ssa, &settings, "applies server-side");
        let mut ssa_object = object(2);
        ssa_object["metadata"]["annotations"][SYNC_OPTIONS_ANNOTATION] =
            json!("Validate=false,ServerSideApply=true");
        fails(
            &ssa_object,
            &application(R2, R1),
            &settings,
            "applied server-side",
        );
        let mut ssd = application(R2, R1);
        ssd["metadata"]["annotations"] = json!({COMPARE_OPTIONS_ANNOTATION: "ServerSideDiff=true"});
        fails(&object(2), &ssd, &settings, "server-side diff");
        let globally = ArgoSettings {
            cmd_params: [(SERVER_SIDE_DIFF_PARAM.to_owned(), "true".to_owned())].into(),
            ..ArgoSettings::default()
        };
        fails(
            &object(2),
            &application(R2, R1),
            &globally,
            "server-side diff",
        );
        let mut opted_out = application(R2, R1);
        opted_out["metadata"]["annotations"] =
            json!({COMPARE_OPTIONS_ANNOTATION: "ServerSideDiff=false"});
        assert!(judged(&object(2), &opted_out, &globally).is_ok());
        // ignoreDifferences: the Application's, or argocd-cm's for the kind or for all.
        let mut ignoring = application(R2, R1);
        ignoring["spec"]["ignoreDifferences"] =
            json!([{"group": "apps", "kind": "Deployment", "jsonPointers": ["/spec/replicas"]}]);
        fails(&object(2), &ignoring, &settings, "ignored");
        for key in [
            "resource.customizations.ignoreDifferences.apps_Deployment",
            "resource.customizations.ignoreDifferences.all",
        ] {
            let cm = ArgoSettings {
                argocd_cm: [(key.to_owned(), "jsonPointers: [/spec/replicas]".to_owned())].into(),
                ..ArgoSettings::default()
            };
            fails(&object(2), &application(R2, R1), &cm, "ignored");
        }
        let other_kind = ArgoSettings {
            argocd_cm: [(
                "resource.customizations.ignoreDifferences.apps_StatefulSet".to_owned(),
                "jsonPointers: [/spec/replicas]".to_owned(),
            )]
            .into(),
            ..ArgoSettings::default()
        };
        assert!(judged(&object(2), &application(R2, R1), &other_kind).is_ok());
        // Several sources: not compared here.
        let mut sources = application(R2, R1);
        sources["spec"]["sources"] = json!([sources["spec"]["source"].clone()]);
        fails(&object(2), &sources, &settings, "several sources");
    }

    /// Where no policy in Enforce mode guards Applications, anyone RBAC lets write one could
    /// write "Synced": such a status is nobody's word.
    #[test]
    fn an_unguarded_application_status_proves_nothing() {
        let policies = policies();
        let record = record();
        let recorded = &recorded_objects(&record)[0];
        let production = policies
            .policies()
            .iter()
            .find(|p| p.name == "production")
            .unwrap();
        let error = judge_synced(
            &record,
            recorded,
            production,
            &SyncedInputs {
                object: &object(2),
                application: &application(R2, R1),
                settings: &ArgoSettings::default(),
                application_guarded: false,
            },
        )
        .unwrap_err();
        assert_eq!(error, NotSynced::ApplicationUnguarded);
        let none = BTreeMap::new();
        let named = |set: &PolicySet, name: &str| {
            set.policies()
                .iter()
                .find(|p| p.name == name)
                .unwrap()
                .clone()
        };
        let gitops = named(&policies, "gitops-argocd");
        assert!(guards_applications(&gitops, "argocd", &none));
        assert!(!guards_applications(&gitops, "elsewhere", &none));
        assert!(!guards_applications(
            &named(&policies, "production"),
            "argocd",
            &none
        ));
        let audit = PolicySet::from_yaml("inline", POLICY).unwrap().audit_only();
        assert!(!guards_applications(
            &named(&audit, "gitops-argocd"),
            "argocd",
            &none
        ));
    }
}
