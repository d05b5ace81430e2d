//! `driftgate backlog`: what must still be backported to Git, oldest first; and
//! `driftgate backlog resolve NAME --note` for a person to close a record, and
//! `driftgate backlog link NAME --url` to say which pull request backports it.

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
use crate::cli::output::{Listed, OutputArgs, OutputFormat, render};
use driftgate_core::ledger::phase::{is_settled, phase_of, resolved, status_patch};
use driftgate_core::ledger::record::{
    BackportRequirement, PULL_REQUEST_ANNOTATION, pull_request_of,
};
use driftgate_core::silence::record::{read_record, selector};
use driftgate_core::text::{MAX_REASON_CHARS, echo};
use driftgate_kube::ledger::identity::{WhoAmIError, who_am_i};
use k8s_openapi::api::coordination::v1::Lease;

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
    /// The namespace driftgate is installed in, where it records each GitOps controller's last
    /// write (Leases): backlog says when one looks stopped, past the threshold the records carry
    /// (`serve --controller-silence-after`).
    #[arg(long, value_name = "NS", default_value = "driftgate-system")]
    pub driftgate_namespace: String,
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
    /// Say which pull request backports a record (kept on it; `backlog` shows it, and the
    /// DriftgateBackportNotLinked alert stops counting it).
    Link {
        #[arg(value_name = "NAME")]
        name: String,
        /// The record's namespace (default: the kubeconfig context's).
        #[arg(short = 'n', long, value_name = "NS")]
        namespace: Option<String>,
        /// The pull (merge) request's address, http:// or https://.
        #[arg(long, value_name = "URL")]
        url: String,
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
    /// The pull request that backports it (`driftgate backlog link`), if one was linked.
    pub pull_request: Option<String>,
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
                pull_request: pull_request_of(r).map(str::to_owned),
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
        headers.push("PULL-REQUEST");
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
        cells.push(self.pull_request.clone().unwrap_or_else(|| "-".into()));
        cells.push(echo(&self.reason, MAX_REASON_CHARS).into_owned());
        cells
    }

    fn qualified_name(&self) -> String {
        format!("backportrequirement.driftgate.dev/{}", self.name)
    }
}

/// The backlog on `out`; on `err`, what does not belong in the listing (a controller's
/// records that could not be read; with `-o name`, the silent controllers).
pub async fn run(
    args: &BacklogArgs,
    out: &mut impl Write,
    err: &mut impl Write,
) -> Result<(), CliError> {
    // -n before the subcommand (`backlog -n prod resolve NAME`) is its namespace too, as kubectl
    // takes a flag anywhere; -A cannot name the one record it acts on.
    let given = match &args.command {
        Some(
            BacklogCommand::Resolve { namespace, .. } | BacklogCommand::Link { namespace, .. },
        ) => {
            if args.scope.all_namespaces {
                return Err(CliError::AllNamespacesForOne {
                    command: "backlog resolve and backlog link",
                });
            }
            namespace.as_ref().or(args.scope.namespace.as_ref())
        }
        None => None,
    };
    let cluster = connect(&args.connection).await?;
    match &args.command {
        Some(BacklogCommand::Resolve { name, note, .. }) => {
            let namespace = cluster.namespace_or(given);
            return resolve(&cluster, &namespace, name, note, out).await;
        }
        Some(BacklogCommand::Link { name, url, .. }) => {
            let namespace = cluster.namespace_or(given);
            return link(&cluster, &namespace, name, url, out).await;
        }
        None => {}
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
    let now = Timestamp::now();
    let entries = entries(&records, args.all, now);
    let silences = read_silences(&cluster, &args.driftgate_namespace, now).await;
    let searched = crate::cli::break_glass::searched(namespace.as_deref());
    let rendered = render_backlog(&entries, &silences, &args.output, &searched);
    let _ = write!(out, "{rendered}");
    let structured = matches!(args.output.output, OutputFormat::Json | OutputFormat::Yaml);
    if !structured {
        let notes: Vec<String> = match &silences {
            Ok(silent) if args.output.output == OutputFormat::Name => {
                silent.iter().map(|s| s.message.clone()).collect()
            }
            Ok(_) => Vec::new(),
            Err(unreadable) => vec![unreadable.clone()],
        };
        for note in notes {
            let _ = writeln!(err, "{note}");
        }
    }
    Ok(())
}

/// A GitOps controller that looks stopped, from driftgate's records.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SilentController {
    pub policy: String,
    pub controller: String,
    pub last_write: Timestamp,
    pub silent_for_seconds: i64,
    /// The threshold the record carries (the serving driftgate's --controller-silence-after).
    pub silent_after_seconds: i64,
    pub message: String,
}

/// The controllers the records show silent past their threshold at `now`, the longest first.
/// A Lease that is not a record is left out.
pub fn silent_controllers(leases: &[Lease], now: Timestamp) -> Vec<SilentController> {
    let mut silent: Vec<SilentController> = leases
        .iter()
        .filter_map(|lease| read_record(lease).ok())
        .filter_map(|record| {
            let silence = record.silence(now)?;
            Some(SilentController {
                message: format!("{}.", silence.sentence_start(&record.key.policy)),
                policy: record.key.policy,
                controller: record.key.controller,
                last_write: silence.last_write,
                silent_for_seconds: silence.silent_for.as_secs(),
                silent_after_seconds: record.silent_after.map_or(0, |d| d.as_secs()),
            })
        })
        .collect();
    silent.sort_by(|a, b| {
        b.silent_for_seconds
            .cmp(&a.silent_for_seconds)
            .then_with(|| (&a.policy, &a.controller).cmp(&(&b.policy, &b.controller)))
    });
    silent
}

/// The silent controllers, or the one sentence that says why they could not be read.
async fn read_silences(
    cluster: &Cluster,
    namespace: &str,
    now: Timestamp,
) -> Result<Vec<SilentController>, String> {
    let api: Api<Lease> = Api::namespaced(cluster.client.clone(), namespace);
    let attempt = Attempt {
        doing: "reading the controllers' last writes",
        verb: "list",
        resource: "leases.coordination.k8s.io",
        kind: "Lease",
        name: None,
        namespace: Some(namespace),
    };
    match api.list(&ListParams::default().labels(&selector())).await {
        Ok(leases) => Ok(silent_controllers(&leases.items, now)),
        Err(error) => Err(unreadable_sentence(&cluster.error(attempt, error))),
    }
}

/// One sentence: the backlog is listed, whether a controller is stopped is not known.
fn unreadable_sentence(error: &CliError) -> String {
    let why = match error {
        CliError::Forbidden {
            user,
            verb,
            resource,
            namespace,
        } => format!(
            "{user} may not {verb} {resource}{} (Kubernetes RBAC)",
            namespace
                .as_deref()
                .map(|ns| format!(" in namespace {ns}"))
                .unwrap_or_default()
        ),
        other => other.to_string(),
    };
    format!(
        "Cannot tell whether a GitOps controller looks stopped: {}.",
        why.trim_end_matches('.')
    )
}

/// `-o json|yaml`: beside the entries (a List's items), what is known of the controllers.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct BacklogListing<'a> {
    silent_controllers: &'a [SilentController],
    #[serde(skip_serializing_if = "Option::is_none")]
    silence_unreadable: Option<&'a str>,
}

/// The backlog in `args`' format: for a table, the silent controllers' sentences above it; in
/// JSON and YAML, as fields beside the items. `searched` says where an empty table looked
/// (`in prod namespace`).
pub fn render_backlog(
    entries: &[BacklogEntry],
    silences: &Result<Vec<SilentController>, String>,
    args: &OutputArgs,
    searched: &str,
) -> String {
    let (silent, unreadable) = match silences {
        Ok(silent) => (silent.as_slice(), None),
        Err(sentence) => (&[][..], Some(sentence.as_str())),
    };
    let listing = BacklogListing {
        silent_controllers: silent,
        silence_unreadable: unreadable,
    };
    match args.output {
        OutputFormat::Json | OutputFormat::Yaml => {
            crate::cli::output::KubeList::new(entries, listing)
                .to_text(args.output == OutputFormat::Yaml)
        }
        OutputFormat::Name => render(entries, args, ""),
        OutputFormat::Table | OutputFormat::Wide => {
            let lines: String = silent.iter().map(|s| format!("{}\n", s.message)).collect();
            let empty = format!("Nothing to backport {searched}.");
            format!("{lines}{}", render(entries, args, &empty))
        }
    }
}

async fn link(
    cluster: &Cluster,
    namespace: &str,
    name: &str,
    url: &str,
    out: &mut impl Write,
) -> Result<(), CliError> {
    driftgate_core::ledger::record::pull_request_problem(url).map_or(Ok(()), |problem| {
        Err(CliError::PullRequestUrl {
            url: url.to_owned(),
            problem,
        })
    })?;
    let api: Api<BackportRequirement> = Api::namespaced(cluster.client.clone(), namespace);
    let patch = serde_json::json!({"metadata": {"annotations": {PULL_REQUEST_ANNOTATION: url}}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| {
            cluster.error(
                Attempt {
                    doing: "linking the record",
                    verb: "patch",
                    resource: RECORDS,
                    kind: "BackportRequirement",
                    name: Some(name),
                    namespace: Some(namespace),
                },
                e,
            )
        })?;
    let _ = writeln!(
        out,
        "BackportRequirement {namespace}/{name} is backported by {url}; the controller's reconcile of the merged change settles it."
    );
    Ok(())
}

/// How many times `backlog resolve` reads and patches a record that keeps changing under it.
const RESOLVE_ATTEMPTS: u32 = 5;

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
    // driftgate updates records in the background (a change confirmed once the API server has
    // stored it, an expiry), and the patch carries the resourceVersion it was computed from: on
    // a conflict the record is read again and the resolution recomputed, as client-go's
    // RetryOnConflict does, instead of telling the on-call engineer to try again.
    for round in 1..=RESOLVE_ATTEMPTS {
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
        match api
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => break,
            Err(kube::Error::Api(status)) if status.code == 409 && round < RESOLVE_ATTEMPTS => {}
            Err(e) => {
                return Err(cluster.error(
                    Attempt {
                        resource: "backportrequirements.driftgate.dev/status",
                        ..attempt("resolving the record", "patch")
                    },
                    e,
                ));
            }
        }
    }
    let _ = writeln!(
        out,
        "BackportRequirement {namespace}/{name} resolved by {resolver}: {note}"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use driftgate_core::ledger::evidence::digest;
    use driftgate_core::ledger::record::*;
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
                    landed: None,
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

    fn flux_record(policy: &str, last_write: &str, silent_after: u64) -> Lease {
        driftgate_core::silence::record::new_record(
            &driftgate_core::silence::ControllerKey {
                policy: policy.into(),
                controller: "flux".into(),
            },
            last_write.parse().unwrap(),
            std::time::Duration::from_secs(silent_after),
            "driftgate-0",
        )
    }

    #[test]
    fn a_controller_silent_past_its_records_threshold_is_said_above_the_table() {
        let now: Timestamp = "2026-12-01T06:12:30Z".parse().unwrap();
        let leases = [
            flux_record("production", "2026-12-01T03:00:00Z", 1800),
            // Silent for 10 minutes, its threshold 30: running.
            flux_record("staging", "2026-12-01T06:02:30Z", 1800),
            flux_record("payments", "2026-12-01T06:00:00Z", 60),
        ];
        let silent = silent_controllers(&leases, now);
        let policies: Vec<&str> = silent.iter().map(|s| s.policy.as_str()).collect();
        assert_eq!(policies, ["production", "payments"]);
        assert_eq!(
            silent[0].message,
            "flux has not written in policy \"production\"'s namespaces for 3h 12m (since 2026-12-01 03:00 UTC); it may be down."
        );
        assert_eq!(silent[0].silent_for_seconds, 3 * 3600 + 12 * 60 + 30);
        assert_eq!(silent[0].silent_after_seconds, 1800);

        let records = [record(
            "old",
            Phase::AwaitingBackport,
            "2026-11-30T11:00:00Z",
        )];
        let listed = entries(&records, false, now);
        let table_args = OutputArgs {
            output: OutputFormat::Table,
            no_headers: false,
        };
        let table = render_backlog(
            &listed,
            &Ok(silent.clone()),
            &table_args,
            "in prod namespace",
        );
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines[0], silent[0].message);
        assert_eq!(lines[1], silent[1].message);
        assert!(lines[2].starts_with("NAMESPACE   NAME"), "{table}");
        assert_eq!(lines.len(), 4, "{table}");
        let nothing = render_backlog(&[], &Ok(silent.clone()), &table_args, "in prod namespace");
        assert!(
            nothing.ends_with("it may be down.\nNothing to backport in prod namespace.\n"),
            "{nothing}"
        );

        let json_args = OutputArgs {
            output: OutputFormat::Json,
            no_headers: false,
        };
        let json: serde_json::Value =
            serde_json::from_str(&render_backlog(&listed, &Ok(silent), &json_args, "")).unwrap();
        assert_eq!(json["items"][0]["name"], "old");
        assert_eq!(json["silentControllers"][0]["policy"], "production");
        assert_eq!(
            json["silentControllers"][0]["lastWrite"],
            "2026-12-01T03:00:00Z"
        );
        assert!(json.get("silenceUnreadable").is_none());
        let yaml_args = OutputArgs {
            output: OutputFormat::Yaml,
            no_headers: false,
        };
        let unreadable =
            Err("Cannot tell whether a GitOps controller looks stopped: x.".to_owned());
        let yaml: serde_json::Value =
            serde_saphyr::from_str(&render_backlog(&listed, &unreadable, &yaml_args, "")).unwrap();
        assert_eq!(yaml["silentControllers"], json!([]));
        assert_eq!(
            yaml["silenceUnreadable"],
            "Cannot tell whether a GitOps controller looks stopped: x."
        );
        assert_eq!(
            render_backlog(&listed, &unreadable, &table_args, "")
                .lines()
                .count(),
            2
        );
    }

    #[test]
    fn records_that_cannot_be_read_are_one_sentence() {
        let forbidden = CliError::Forbidden {
            user: "bob".into(),
            verb: "list".into(),
            resource: "leases.coordination.k8s.io".into(),
            namespace: Some("driftgate-system".into()),
        };
        assert_eq!(
            unreadable_sentence(&forbidden),
            "Cannot tell whether a GitOps controller looks stopped: bob may not list leases.coordination.k8s.io in namespace driftgate-system (Kubernetes RBAC)."
        );
    }
}
