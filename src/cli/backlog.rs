//! `driftgate backlog`: what must still be backported to Git, oldest first; and
//! `driftgate backlog resolve NAME --note` for a person to close a record.

use std::collections::BTreeSet;
use std::io::Write;

use clap::{Args, Subcommand};
use jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde::Serialize;

use crate::cli::break_glass::NamespaceScope;
use crate::cli::cluster::{Attempt, Cluster, ConnectionArgs, connect};
use crate::cli::error::CliError;
use crate::cli::output::{Listed, OutputArgs, render};
use crate::ledger::identity::{WhoAmIError, who_am_i};
use crate::ledger::phase::{is_settled, phase_of, resolved, status_patch};
use crate::ledger::record::BackportRequirement;
use crate::text::{MAX_REASON_CHARS, echo};

/// RBAC's and kubectl's name for the records.
const RECORDS: &str = "backportrequirements.driftgate.dev";

#[derive(Debug, Args)]
pub struct BacklogArgs {
    #[command(subcommand)]
    pub command: Option<BacklogCommand>,
    #[command(flatten)]
    pub scope: NamespaceScope,
    /// Also show records that are done (Backported, Resolved).
    #[arg(long)]
    pub all: bool,
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub connection: ConnectionArgs,
}

#[derive(Debug, Subcommand)]
pub enum BacklogCommand {
    /// Close a record by hand, with a note saying what happened (e.g. the Git commit).
    Resolve {
        #[arg(value_name = "NAME")]
        name: String,
        /// The record's namespace (default: the kubeconfig context's).
        #[arg(short = 'n', long, value_name = "NS")]
        namespace: Option<String>,
        #[arg(long, value_name = "TEXT")]
        note: String,
    },
}

/// One line of the backlog.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BacklogEntry {
    pub namespace: String,
    pub name: String,
    pub phase: String,
    pub object: String,
    pub fields: Vec<String>,
    pub opener: String,
    pub changed_by: Vec<String>,
    pub reason: String,
    /// Seconds since the record was created (its metadata.creationTimestamp).
    pub age_seconds: i64,
}

/// The backlog from records: what still needs a person, oldest first.
pub fn entries(records: &[BackportRequirement], all: bool, now: Timestamp) -> Vec<BacklogEntry> {
    let mut entries: Vec<BacklogEntry> = records
        .iter()
        .filter(|r| all || !is_settled(phase_of(r)))
        .map(|r| {
            let mut fields = BTreeSet::new();
            let mut users = BTreeSet::new();
            for change in &r.spec.changes {
                users.insert(change.user.clone());
                if change.fields.is_empty() {
                    fields.insert(format!("({})", change.operation.to_lowercase()));
                }
                for field in &change.fields {
                    match &change.object {
                        Some(o) => fields.insert(format!(
                            "{}/{}: {}",
                            o.kind.to_lowercase(),
                            o.name,
                            field.path
                        )),
                        None => fields.insert(field.path.clone()),
                    };
                }
            }
            BacklogEntry {
                namespace: r.namespace().unwrap_or_default(),
                name: r.name_any(),
                phase: phase_of(r).word().to_owned(),
                object: format!(
                    "{}/{}",
                    r.spec.object.kind.to_lowercase(),
                    r.spec.object.name
                ),
                fields: fields.into_iter().collect(),
                opener: r.spec.window.opener.clone().unwrap_or_else(|| "?".into()),
                changed_by: users.into_iter().collect(),
                reason: r.spec.window.reason.clone().unwrap_or_default(),
                age_seconds: r
                    .metadata
                    .creation_timestamp
                    .as_ref()
                    .map_or(0, |created| (now - created.0).get_seconds()),
            }
        })
        .collect();
    entries.sort_by(|a, b| b.age_seconds.cmp(&a.age_seconds).then(a.name.cmp(&b.name)));
    entries
}

fn age(seconds: i64) -> String {
    match seconds {
        s if s >= 86_400 => format!("{}d{}h", s / 86_400, (s % 86_400) / 3_600),
        s if s >= 3_600 => format!("{}h{}m", s / 3_600, (s % 3_600) / 60),
        s if s >= 60 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

impl Listed for BacklogEntry {
    fn headers(wide: bool) -> Vec<&'static str> {
        let mut headers = vec![
            "NAMESPACE",
            "NAME",
            "PHASE",
            "OBJECT",
            "AGE",
            "OPENER",
            "FIELDS",
        ];
        if wide {
            headers.push("CHANGED-BY");
        }
        headers.push("REASON");
        headers
    }

    fn cells(&self, wide: bool) -> Vec<String> {
        let mut cells = vec![
            self.namespace.clone(),
            self.name.clone(),
            self.phase.clone(),
            self.object.clone(),
            age(self.age_seconds),
            self.opener.clone(),
            self.fields.join(","),
        ];
        if wide {
            cells.push(self.changed_by.join(","));
        }
        cells.push(echo(&self.reason, MAX_REASON_CHARS).into_owned());
        cells
    }

    fn qualified_name(&self) -> String {
        format!("backportrequirement.driftgate.dev/{}", self.name)
    }
}

pub async fn run(args: &BacklogArgs, out: &mut impl Write) -> Result<(), CliError> {
    let cluster = connect(&args.connection).await?;
    if let Some(BacklogCommand::Resolve {
        name,
        namespace,
        note,
    }) = &args.command
    {
        let namespace = namespace
            .clone()
            .unwrap_or_else(|| cluster.namespace.clone());
        return resolve(&cluster, &namespace, name, note, out).await;
    }
    let namespace = args.scope.namespace(&cluster);
    let api: Api<BackportRequirement> = match &namespace {
        Some(ns) => Api::namespaced(cluster.client.clone(), ns),
        None => Api::all(cluster.client.clone()),
    };
    let attempt = Attempt {
        doing: "listing BackportRequirements",
        verb: "list",
        resource: RECORDS,
        kind: "BackportRequirement",
        name: None,
        namespace: namespace.as_deref(),
    };
    let records = api
        .list(&ListParams::default())
        .await
        .map_err(|e| cluster.error(attempt, e))?
        .items;
    let entries = entries(&records, args.all, Timestamp::now());
    let _ = write!(
        out,
        "{}",
        render(&entries, &args.output, "Nothing to backport.")
    );
    Ok(())
}

async fn resolve(
    cluster: &Cluster,
    namespace: &str,
    name: &str,
    note: &str,
    out: &mut impl Write,
) -> Result<(), CliError> {
    if note.trim().is_empty() {
        return Err(CliError::Note);
    }
    // driftgate's webhook admits a resolution only under the resolver's own name.
    let resolver = who_am_i(cluster.client.clone())
        .await
        .map_err(|e| match e {
            WhoAmIError::Refused(error) => cluster.error(
                Attempt {
                    doing: "asking the API server who you are",
                    verb: "create",
                    resource: "selfsubjectreviews.authentication.k8s.io",
                    kind: "SelfSubjectReview",
                    name: None,
                    namespace: None,
                },
                error,
            ),
            WhoAmIError::NoUser => CliError::NoUser,
        })?;
    let api: Api<BackportRequirement> = Api::namespaced(cluster.client.clone(), namespace);
    let attempt = |doing, verb| Attempt {
        doing,
        verb,
        resource: RECORDS,
        kind: "BackportRequirement",
        name: Some(name),
        namespace: Some(namespace),
    };
    let record = api
        .get(name)
        .await
        .map_err(|e| cluster.error(attempt("reading the record", "get"), e))?;
    let status = resolved(
        record.status.clone().unwrap_or_default(),
        note,
        &resolver,
        Timestamp::now(),
    );
    let patch = status_patch(record.metadata.resource_version.as_deref(), &status);
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| {
            cluster.error(
                Attempt {
                    resource: "backportrequirements.driftgate.dev/status",
                    ..attempt("resolving the record", "patch")
                },
                e,
            )
        })?;
    let _ = writeln!(
        out,
        "BackportRequirement {namespace}/{name} resolved by {resolver}: {note}"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::evidence::digest;
    use crate::ledger::record::*;
    use serde_json::json;

    fn record(name: &str, phase: Phase, since: &str) -> BackportRequirement {
        let t = |s: &str| k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(s.parse().unwrap());
        let mut r = BackportRequirement::new(
            name,
            BackportRequirementSpec {
                object: RecordedObject {
                    api_version: "apps/v1".into(),
                    kind: "Deployment".into(),
                    name: "api".into(),
                    uid: "u".into(),
                },
                scope: RecordScope::Object,
                window: RecordedWindow {
                    opener: Some("alice".into()),
                    reason: Some("INC-1".into()),
                    opened_at: None,
                    expires_at: t("2026-11-30T10:00:00Z"),
                    label_value: "20261130T1000Z".into(),
                },
                policy: "production".into(),
                changes: vec![RecordedChange {
                    time: t("2026-11-30T09:10:00Z"),
                    user: "alice".into(),
                    operation: "UPDATE".into(),
                    object: None,
                    subresource: "scale".into(),
                    request_uid: "r".into(),
                    resource_version: String::new(),
                    fields: vec![RecordedField {
                        path: "spec.replicas".into(),
                        digest: digest(Some(&json!(5))),
                        value: None,
                    }],
                }],
            },
        );
        r.metadata.namespace = Some("prod".into());
        // Created an hour before it entered its phase: AGE is the record's, not the phase's.
        let created = since.parse::<Timestamp>().unwrap() - jiff::SignedDuration::from_hours(1);
        r.metadata.creation_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            created,
        ));
        r.status = Some(BackportStatus {
            phase,
            transitions: vec![Transition {
                phase,
                time: t(since),
                reason: "x".into(),
                message: String::new(),
            }],
            ..BackportStatus::default()
        });
        r
    }

    #[test]
    fn a_resolution_keeps_who_when_and_the_history() {
        let before = record("r", Phase::AwaitingBackport, "2026-11-30T11:00:00Z");
        let at: Timestamp = "2026-12-01T12:00:00Z".parse().unwrap();
        let status = resolved(
            before.status.clone().unwrap(),
            "backported in gitops#1",
            "alice",
            at,
        );
        assert_eq!(status.phase, Phase::Resolved);
        assert_eq!(status.resolved_by.as_deref(), Some("alice"));
        assert_eq!(status.resolved_at.as_ref().map(|t| t.0), Some(at));
        assert_eq!(status.transitions.len(), 2);
        assert_eq!(status.transitions[0], before.status.unwrap().transitions[0]);
        let last = status.transitions.last().unwrap();
        assert_eq!((last.phase, last.time.0), (Phase::Resolved, at));
        assert_eq!(last.message, "backported in gitops#1");
    }

    #[test]
    fn the_backlog_is_what_still_needs_a_person_oldest_first() {
        let now: Timestamp = "2026-12-01T12:00:00Z".parse().unwrap();
        let records = [
            record("young", Phase::AwaitingBackport, "2026-12-01T11:00:00Z"),
            record("done", Phase::Backported, "2026-11-30T11:00:00Z"),
            record("old", Phase::AwaitingBackport, "2026-11-30T11:00:00Z"),
            record("lost", Phase::Reverted, "2026-12-01T10:00:00Z"),
        ];
        let names: Vec<_> = entries(&records, false, now)
            .into_iter()
            .map(|e| e.name)
            .collect();
        assert_eq!(names, ["old", "lost", "young"]);
        let all = entries(&records, true, now);
        assert_eq!(all.len(), 4);
        let old = &all[0];
        assert_eq!(old.fields, ["spec.replicas"]);
        assert_eq!(old.age_seconds, 26 * 3_600);
        let table_args = OutputArgs {
            output: crate::cli::output::OutputFormat::Table,
            no_headers: false,
        };
        let table = render(
            &entries(&records, false, now),
            &table_args,
            "Nothing to backport.",
        );
        let lines: Vec<&str> = table.lines().collect();
        assert!(lines[0].starts_with("NAMESPACE   NAME    PHASE"), "{table}");
        assert!(
            lines[1].starts_with("prod        old     AwaitingBackport   deployment/api   1d2h"),
            "{table}"
        );
        assert_eq!(
            render::<BacklogEntry>(&[], &table_args, "Nothing to backport."),
            "Nothing to backport.\n"
        );
        let first = &entries(&records, false, now)[0];
        assert_eq!(
            first.qualified_name(),
            "backportrequirement.driftgate.dev/old"
        );
        assert_eq!(first.cells(true).len(), BacklogEntry::headers(true).len());
        assert_eq!(first.cells(true)[7], "alice");
    }
}
