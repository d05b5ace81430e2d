//! `driftgate backlog`: what must still be backported to Git, oldest first; and
//! `driftgate backlog resolve NAME --note` for a person to close a record.

use std::collections::BTreeSet;

use clap::{Args, Subcommand, ValueEnum};
use jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde::Serialize;

use crate::cli::break_glass::{Connection, NamespaceScope, client};
use crate::error::{Error, Result};
use crate::ledger::identity::who_am_i;
use crate::ledger::phase::{phase_of, phase_since, resolved, status_patch};
use crate::ledger::record::{BackportRequirement, Phase};

#[derive(Debug, Args)]
pub struct BacklogArgs {
    #[command(subcommand)]
    pub command: Option<BacklogCommand>,
    #[command(flatten)]
    pub scope: NamespaceScope,
    /// Also show records that are done (Backported, Resolved).
    #[arg(long)]
    pub all: bool,
    #[arg(short = 'o', long, value_enum, default_value = "table")]
    pub output: OutputFormat,
    #[command(flatten)]
    pub connection: Connection,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    Table,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum BacklogCommand {
    /// Close a record by hand, with a note saying what happened (e.g. the Git commit).
    Resolve {
        #[arg(value_name = "NAME")]
        name: String,
        #[arg(short = 'n', long, value_name = "NS")]
        namespace: String,
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
    /// Seconds since the record entered its phase.
    pub age_seconds: i64,
}

/// The backlog from records: what still needs a person, oldest first.
pub fn entries(records: &[BackportRequirement], all: bool, now: Timestamp) -> Vec<BacklogEntry> {
    let mut entries: Vec<BacklogEntry> = records
        .iter()
        .filter(|r| all || !matches!(phase_of(r), Phase::Backported | Phase::Resolved))
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
                age_seconds: phase_since(r).map_or(0, |since| (now - since).get_seconds()),
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

pub fn render_table(entries: &[BacklogEntry]) -> String {
    if entries.is_empty() {
        return "Nothing to backport.\n".to_owned();
    }
    let mut out = format!(
        "{:<16} {:<34} {:<17} {:<28} {:<7} {:<10} {:<30} REASON\n",
        "NAMESPACE", "NAME", "PHASE", "OBJECT", "AGE", "OPENER", "FIELDS"
    );
    for e in entries {
        out.push_str(&format!(
            "{:<16} {:<34} {:<17} {:<28} {:<7} {:<10} {:<30} {}\n",
            e.namespace,
            e.name,
            e.phase,
            e.object,
            age(e.age_seconds),
            e.opener,
            e.fields.join(","),
            e.reason
        ));
    }
    out
}

pub async fn run(args: &BacklogArgs, out: &mut impl std::io::Write) -> Result<()> {
    let client = client(&args.connection).await?;
    if let Some(BacklogCommand::Resolve {
        name,
        namespace,
        note,
    }) = &args.command
    {
        return resolve(client, namespace, name, note, out).await;
    }
    let api: Api<BackportRequirement> = match &args.scope.namespace {
        Some(ns) => Api::namespaced(client, ns),
        None => Api::all(client),
    };
    let records = api
        .list(&ListParams::default())
        .await
        .map_err(|e| Error::Config(format!("cannot list BackportRequirements: {e}")))?
        .items;
    let entries = entries(&records, args.all, Timestamp::now());
    match args.output {
        OutputFormat::Table => {
            let _ = write!(out, "{}", render_table(&entries));
        }
        OutputFormat::Json => {
            let _ = writeln!(
                out,
                "{}",
                serde_json::to_string_pretty(&entries).expect("entries serialize")
            );
        }
    }
    Ok(())
}

async fn resolve(
    client: kube::Client,
    namespace: &str,
    name: &str,
    note: &str,
    out: &mut impl std::io::Write,
) -> Result<()> {
    if note.trim().is_empty() {
        return Err(Error::Config(
            "--note must say what happened (e.g. \"backported in payments-gitops#412\")".into(),
        ));
    }
    // driftgate's webhook admits a resolution only under the resolver's own name.
    let resolver = who_am_i(client.clone())
        .await
        .map_err(|e| Error::Config(format!("cannot tell who you are: {e}")))?;
    let api: Api<BackportRequirement> = Api::namespaced(client, namespace);
    let record = api.get(name).await.map_err(|e| {
        Error::Config(format!(
            "cannot read BackportRequirement {namespace}/{name}: {e}"
        ))
    })?;
    let status = resolved(
        record.status.clone().unwrap_or_default(),
        note,
        &resolver,
        Timestamp::now(),
    );
    let patch = status_patch(record.metadata.resource_version.as_deref(), &status);
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| Error::Config(format!("cannot resolve {namespace}/{name}: {e}")))?;
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
        assert_eq!(old.age_seconds, 25 * 3_600);
        let table = render_table(&entries(&records, false, now));
        assert!(table.contains("AwaitingBackport"), "{table}");
        assert!(table.contains("1d1h"), "{table}");
        assert_eq!(render_table(&[]), "Nothing to backport.\n");
    }
}
