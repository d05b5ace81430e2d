//! Completion, answered by the binary as kubectl answers its own (cobra's protocol): it is asked
//! with the arguments typed so far, then the word being completed, and prints one completion a
//! line (`value<TAB>description`), then `:DIRECTIVE`, cobra's number for what the shell does
//! next. Two callers ask:
//! - kubectl (1.26 and later), for `kubectl driftgate`: it runs `kubectl_complete-driftgate ARGS...
//!   WORD` from the `PATH` (a link to `kubectl-driftgate`) and does the shell's part itself;
//! - the scripts `driftgate completion bash|zsh|fish` prints, which run `driftgate __complete
//!   ARGS... WORD`.
//!
//! Subcommands, flags and the values a flag takes come from the command line's definition
//! ([`complete`], pure). Names only the cluster knows (namespaces, the records after `backlog
//! resolve`, objects after `break-glass open deployment/`) are looked up with the connection
//! flags typed on the line (`names`), briefly: a completion that cannot reach the cluster in
//! time offers nothing, never an error on the terminal.

use std::io::Write;
use std::time::Duration;

use clap::Command;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DynamicObject, ListParams};

use crate::cli::cluster::{ConnectionArgs, cluster_for, config};
use driftgate_core::ledger::record::BackportRequirement;

/// The hidden first argument that makes `driftgate` answer a completion request (as `kubectl
/// __complete`): what the scripts of `driftgate completion SHELL` run.
pub const COMPLETE_REQUEST: &str = "__complete";

/// The file name kubectl looks for on the `PATH` to complete `kubectl driftgate`.
pub const PLUGIN_COMPLETER: &str = "kubectl_complete-driftgate";

/// cobra's `ShellCompDirectiveDefault`: the shell may complete file names after the values.
const DEFAULT: u8 = 0;
/// cobra's `ShellCompDirectiveNoSpace`: no space after the value (`deployment/`, then a name).
const NO_SPACE: u8 = 2;
/// cobra's `ShellCompDirectiveNoFileComp`: only the values given.
const NO_FILE_COMP: u8 = 4;

/// The script `driftgate completion SHELL` prints for the shells whose script asks the binary;
/// none for the others (clap_complete's, from the definition alone).
pub fn script(shell: clap_complete::Shell) -> Option<&'static str> {
    match shell {
        clap_complete::Shell::Bash => Some(include_str!("completion_scripts/driftgate.bash")),
        clap_complete::Shell::Zsh => Some(include_str!("completion_scripts/driftgate.zsh")),
        clap_complete::Shell::Fish => Some(include_str!("completion_scripts/driftgate.fish")),
        _ => None,
    }
}

/// How long a completion waits for the cluster, in all: a person is waiting at the prompt.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(3);

/// What completes the word: values the command line's definition gives, or names to look up.
#[derive(Debug, PartialEq, Eq)]
pub enum Answer {
    /// The lines to print, then cobra's directive.
    Known(Vec<String>, u8),
    /// Names read from the kubeconfig or the cluster.
    Lookup(Lookup),
}

/// Names that only the kubeconfig or the cluster knows, and where to look for them.
#[derive(Debug, PartialEq, Eq)]
pub enum Lookup {
    /// `--context`: the kubeconfig's contexts.
    Contexts { connection: ConnectionArgs },
    /// `-n`: the cluster's namespaces.
    Namespaces { connection: ConnectionArgs },
    /// The RECORD of `backlog resolve|link` and `backport`: the records in the namespace.
    Records {
        connection: ConnectionArgs,
        namespace: Option<String>,
    },
    /// The KIND of a KIND/NAME (`break-glass open`, `close`, `suspend`, `resume`): the
    /// cluster's kinds, each followed by `/`.
    Kinds { connection: ConnectionArgs },
    /// The NAME after `KIND/`: the objects of that kind in the namespace (or the cluster, for a
    /// cluster-scoped kind).
    Objects {
        connection: ConnectionArgs,
        namespace: Option<String>,
        kind: String,
    },
}

/// The commands whose first positional is a record's name.
const TAKES_A_RECORD: &[&[&str]] = &[&["backlog", "resolve"], &["backlog", "link"], &["backport"]];
/// The commands whose first positional is KIND/NAME.
const TAKES_AN_OBJECT: &[&[&str]] = &[
    &["break-glass", "open"],
    &["break-glass", "close"],
    &["suspend"],
    &["resume"],
];

/// The completions of `word`, the last argument, after `args` (pure).
pub fn complete(command: &Command, args: &[String], word: &str) -> Answer {
    let TypedArgs {
        current,
        path,
        positionals,
        connection,
        namespace,
        taking_value,
    } = TypedArgs::read(command, args);
    if let Some(arg) = taking_value {
        return match arg.get_long() {
            Some("context") => Answer::Lookup(Lookup::Contexts { connection }),
            Some("namespace") => Answer::Lookup(Lookup::Namespaces { connection }),
            _ => values(arg, word),
        };
    }
    if positionals == 0
        && !word.starts_with('-')
        && let Some(lookup) = first_positional(&path, word, connection, namespace)
    {
        return Answer::Lookup(lookup);
    }
    if let Some((flag, value)) = word.strip_prefix("--").and_then(|w| w.split_once('=')) {
        return flag_value(current, command, flag, value);
    }
    if word.starts_with('-') {
        return flags(current, command, word);
    }
    subcommands_or_values(current, word)
}

/// What the arguments before the word say: the subcommand reached, the positionals after it,
/// where to look names up, and the flag that takes the word as its value, if one does.
struct TypedArgs<'a> {
    current: &'a Command,
    /// The subcommands' names, from the first.
    path: Vec<&'a str>,
    positionals: usize,
    connection: ConnectionArgs,
    namespace: Option<String>,
    taking_value: Option<&'a clap::Arg>,
}

impl<'a> TypedArgs<'a> {
    fn read(command: &'a Command, args: &[String]) -> Self {
        let mut so_far = TypedArgs {
            current: command,
            path: Vec::new(),
            positionals: 0,
            connection: ConnectionArgs::default(),
            namespace: None,
            taking_value: None,
        };
        for arg in args {
            so_far.read_arg(command, arg);
        }
        so_far
    }

    fn read_arg(&mut self, command: &'a Command, arg: &str) {
        if let Some(flag) = self.taking_value.take() {
            typed(flag, arg, &mut self.connection, &mut self.namespace);
            return;
        }
        if let Some(flag) = arg.strip_prefix("--") {
            match flag.split_once('=') {
                Some((flag, value)) => {
                    if let Some(flag) = find_long(self.current, command, flag) {
                        typed(flag, value, &mut self.connection, &mut self.namespace);
                    }
                }
                None => {
                    self.taking_value =
                        find_long(self.current, command, flag).filter(|a| takes_value(a));
                }
            }
        } else if let Some(short) = arg.strip_prefix('-').filter(|s| s.chars().count() == 1) {
            let short = short.chars().next();
            self.taking_value = self
                .current
                .get_arguments()
                .chain(command.get_arguments())
                .find(|a| a.get_short() == short)
                .filter(|a| takes_value(a));
        } else if let Some(sub) = self.current.find_subcommand(arg) {
            self.current = sub;
            self.path.push(sub.get_name());
        } else {
            self.positionals += 1;
        }
    }
}

/// The names the first positional of the command at `path` takes, when only the cluster knows
/// them: a record, or a KIND/NAME.
fn first_positional(
    path: &[&str],
    word: &str,
    connection: ConnectionArgs,
    namespace: Option<String>,
) -> Option<Lookup> {
    if TAKES_A_RECORD.contains(&path) {
        return Some(Lookup::Records {
            connection,
            namespace,
        });
    }
    if TAKES_AN_OBJECT.contains(&path) {
        return Some(match word.split_once('/') {
            Some((kind, _)) => Lookup::Objects {
                connection,
                namespace,
                kind: kind.to_owned(),
            },
            None => Lookup::Kinds { connection },
        });
    }
    None
}

/// The values of `--flag=`, each written whole (`--flag=value`).
fn flag_value(current: &Command, command: &Command, flag: &str, value: &str) -> Answer {
    match find_long(current, command, flag).map(|arg| values(arg, value)) {
        Some(Answer::Known(lines, directive)) => {
            let lines = lines.iter().map(|v| format!("--{flag}={v}")).collect();
            Answer::Known(lines, directive)
        }
        _ => Answer::Known(Vec::new(), NO_FILE_COMP),
    }
}

/// The long flags of the current command and the global ones that start with `word`.
fn flags(current: &Command, command: &Command, word: &str) -> Answer {
    let lines = current
        .get_arguments()
        .chain(command.get_arguments().filter(|a| a.is_global_set()))
        .filter(|a| !a.is_hide_set())
        .filter_map(|a| a.get_long().map(|long| (long, a)))
        .map(|(long, a)| line(&format!("--{long}"), a.get_help()))
        .chain(std::iter::once("--help\tPrint help".to_owned()))
        .filter(|l| l.starts_with(word))
        .collect();
    Answer::Known(lines, NO_FILE_COMP)
}

/// The subcommands and the positionals' possible values that start with `word`.
fn subcommands_or_values(current: &Command, word: &str) -> Answer {
    let subcommands: Vec<String> = current
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
        .map(|s| line(s.get_name(), s.get_about()))
        .filter(|l| l.starts_with(word))
        .collect();
    let positional_values: Vec<String> = current
        .get_positionals()
        .flat_map(|a| a.get_possible_values())
        .filter(|v| !v.is_hide_set())
        .map(|v| line(v.get_name(), v.get_help()))
        .filter(|l| l.starts_with(word))
        .collect();
    if current.has_subcommands() || !positional_values.is_empty() {
        return Answer::Known([subcommands, positional_values].concat(), NO_FILE_COMP);
    }
    // A positional that is a file (eval's REVIEW.json): the shell's own.
    Answer::Known(Vec::new(), DEFAULT)
}

/// Keeps what a flag typed on the line says about where to look: the connection flags and `-n`.
fn typed(
    flag: &clap::Arg,
    value: &str,
    connection: &mut ConnectionArgs,
    namespace: &mut Option<String>,
) {
    let value = value.to_owned();
    match flag.get_long() {
        Some("kubeconfig") => connection.kubeconfig = Some(value.into()),
        Some("context") => connection.context = Some(value),
        Some("as") => connection.as_user = Some(value),
        Some("as-group") => connection.as_groups.push(value),
        Some("namespace") => *namespace = Some(value),
        _ => {}
    }
}

fn find_long<'a>(current: &'a Command, root: &'a Command, flag: &str) -> Option<&'a clap::Arg> {
    current
        .get_arguments()
        .chain(root.get_arguments())
        .find(|a| a.get_long() == Some(flag))
}

/// Whether the flag takes the next word as its value (`--dry-run` takes one only after `=`).
fn takes_value(arg: &clap::Arg) -> bool {
    arg.get_action().takes_values() && !arg.is_require_equals_set()
}

/// The values a flag takes, or the shell's file names for a flag without a fixed set.
fn values(arg: &clap::Arg, word: &str) -> Answer {
    let possible = arg.get_possible_values();
    if possible.is_empty() {
        return Answer::Known(Vec::new(), DEFAULT);
    }
    let lines = possible
        .iter()
        .filter(|v| !v.is_hide_set() && v.get_name().starts_with(word))
        .map(|v| line(v.get_name(), v.get_help()))
        .collect();
    Answer::Known(lines, NO_FILE_COMP)
}

/// `value<TAB>description`, the description's first sentence only: the shell shows it beside
/// the value, on one line.
fn line(value: &str, help: Option<&clap::builder::StyledStr>) -> String {
    match help.map(|h| h.to_string()) {
        Some(help) if !help.is_empty() => {
            let first = help.lines().next().unwrap_or_default();
            let first = first.split(". ").next().unwrap_or(first);
            let first = first.split(": `").next().unwrap_or(first);
            format!("{value}\t{}", first.trim_end_matches('.'))
        }
        _ => value.to_owned(),
    }
}

/// Answers a completion request: the arguments after the program's name (or after
/// [`COMPLETE_REQUEST`]), the last the word being completed.
pub fn run(command: &Command, args: &[String], out: &mut impl Write) -> std::process::ExitCode {
    let (word, before) = match args.split_last() {
        Some((word, before)) => (word.as_str(), before),
        None => ("", args),
    };
    let (lines, directive) = match complete(command, before, word) {
        Answer::Known(lines, directive) => (lines, directive),
        Answer::Lookup(lookup) => {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build();
            let names = match runtime {
                Ok(runtime) => runtime
                    .block_on(async { tokio::time::timeout(LOOKUP_TIMEOUT, names(&lookup)).await })
                    .unwrap_or_default(),
                Err(_) => Vec::new(),
            };
            answer_from_names(&lookup, names, word)
        }
    };
    for line in lines {
        let _ = writeln!(out, "{line}");
    }
    let _ = writeln!(out, ":{directive}");
    std::process::ExitCode::SUCCESS
}

/// The lines and directive for the names a lookup found (pure): those that start with `word`;
/// a kind is followed by `/` and no space, a name after `KIND/` keeps its `KIND/`.
pub fn answer_from_names(lookup: &Lookup, names: Vec<String>, word: &str) -> (Vec<String>, u8) {
    let (lines, directive) = match lookup {
        Lookup::Kinds { .. } => (
            names.into_iter().map(|kind| format!("{kind}/")).collect(),
            NO_SPACE | NO_FILE_COMP,
        ),
        Lookup::Objects { kind, .. } => (
            names
                .into_iter()
                .map(|name| format!("{kind}/{name}"))
                .collect(),
            NO_FILE_COMP,
        ),
        _ => (names, NO_FILE_COMP),
    };
    let mut lines: Vec<String> = lines.into_iter().filter(|l| l.starts_with(word)).collect();
    lines.sort();
    lines.dedup();
    (lines, directive)
}

/// The names a lookup asks for; nothing when the kubeconfig or the cluster does not answer (a
/// completion never prints an error).
async fn names(lookup: &Lookup) -> Vec<String> {
    let connection = match lookup {
        Lookup::Contexts { connection } => return contexts(connection),
        Lookup::Namespaces { connection }
        | Lookup::Records { connection, .. }
        | Lookup::Kinds { connection }
        | Lookup::Objects { connection, .. } => connection,
    };
    let Ok(config) = config(connection).await else {
        return Vec::new();
    };
    let Ok(cluster) = cluster_for(config, connection) else {
        return Vec::new();
    };
    let client = cluster.client.clone();
    match lookup {
        Lookup::Contexts { .. } => Vec::new(),
        Lookup::Namespaces { .. } => Api::<Namespace>::all(client)
            .list_metadata(&ListParams::default())
            .await
            .map(|l| {
                l.items
                    .into_iter()
                    .filter_map(|o| o.metadata.name)
                    .collect()
            })
            .unwrap_or_default(),
        Lookup::Records { namespace, .. } => {
            let namespace = cluster.namespace_or(namespace.as_ref());
            Api::<BackportRequirement>::namespaced(client, &namespace)
                .list_metadata(&ListParams::default())
                .await
                .map(|l| {
                    l.items
                        .into_iter()
                        .filter_map(|o| o.metadata.name)
                        .collect()
                })
                .unwrap_or_default()
        }
        Lookup::Kinds { .. } => {
            let Ok(discovery) = kube::discovery::Discovery::new(client)
                .run_aggregated()
                .await
            else {
                return Vec::new();
            };
            discovery
                .groups()
                .flat_map(|group| group.recommended_resources())
                .filter(|(_, capabilities)| {
                    capabilities.supports_operation(kube::discovery::verbs::PATCH)
                })
                .map(|(resource, _)| resource.kind.to_lowercase())
                .collect()
        }
        Lookup::Objects {
            namespace, kind, ..
        } => {
            let Ok(discovery) = kube::discovery::Discovery::new(client.clone())
                .run_aggregated()
                .await
            else {
                return Vec::new();
            };
            let Some((resource, capabilities)) =
                crate::cli::break_glass::resolve_kind_and_scope(&discovery, kind)
            else {
                return Vec::new();
            };
            let api: Api<DynamicObject> = match capabilities.scope {
                kube::discovery::Scope::Cluster => Api::all_with(client, &resource),
                kube::discovery::Scope::Namespaced => Api::namespaced_with(
                    client,
                    &cluster.namespace_or(namespace.as_ref()),
                    &resource,
                ),
            };
            api.list_metadata(&ListParams::default())
                .await
                .map(|l| {
                    l.items
                        .into_iter()
                        .filter_map(|o| o.metadata.name)
                        .collect()
                })
                .unwrap_or_default()
        }
    }
}

/// The kubeconfig's contexts (`--kubeconfig`, else `$KUBECONFIG`, else `~/.kube/config`).
fn contexts(connection: &ConnectionArgs) -> Vec<String> {
    let kubeconfig = match &connection.kubeconfig {
        Some(path) => kube::config::Kubeconfig::read_from(path),
        None => kube::config::Kubeconfig::read(),
    };
    kubeconfig
        .map(|k| k.contexts.into_iter().map(|c| c.name).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;
    use crate::cli::Cli;

    fn answer(line: &[&str]) -> Answer {
        let (word, before) = line.split_last().unwrap();
        let before: Vec<String> = before.iter().map(|s| (*s).to_owned()).collect();
        complete(&Cli::command(), &before, word)
    }

    #[test]
    fn names_the_cluster_holds_are_looked_up_with_the_flags_typed_on_the_line() {
        let typed = ConnectionArgs {
            kubeconfig: Some("/k".into()),
            context: Some("prod".into()),
            as_user: Some("alice".into()),
            ..ConnectionArgs::default()
        };
        assert_eq!(
            answer(&[
                "--context",
                "prod",
                "backlog",
                "--kubeconfig=/k",
                "resolve",
                "-n",
                "pay",
                "--as",
                "alice",
                "dep"
            ]),
            Answer::Lookup(Lookup::Records {
                connection: typed.clone(),
                namespace: Some("pay".into())
            })
        );
        assert_eq!(
            answer(&["backport", "-n", ""]),
            Answer::Lookup(Lookup::Namespaces {
                connection: ConnectionArgs::default()
            })
        );
        assert_eq!(
            answer(&["suspend", "kustomization/a"]),
            Answer::Lookup(Lookup::Objects {
                connection: ConnectionArgs::default(),
                namespace: None,
                kind: "kustomization".into()
            })
        );
        assert!(matches!(
            answer(&["break-glass", "close", "deploy"]),
            Answer::Lookup(Lookup::Kinds { .. })
        ));
        assert!(matches!(
            answer(&["version", "--context", ""]),
            Answer::Lookup(Lookup::Contexts { .. })
        ));
        // Only the first positional is a record or an object; flags stay the definition's.
        assert!(matches!(
            answer(&["backlog", "link", "rec-1", ""]),
            Answer::Known(_, _)
        ));
        assert!(matches!(
            answer(&["break-glass", "open", "--fo"]),
            Answer::Known(lines, NO_FILE_COMP)
                if !lines.is_empty() && lines.iter().all(|l| l.starts_with("--fo"))
        ));
    }

    #[test]
    fn kinds_end_in_a_slash_with_no_space_and_names_keep_their_kind() {
        let connection = ConnectionArgs::default();
        assert_eq!(
            answer_from_names(
                &Lookup::Kinds {
                    connection: connection.clone()
                },
                vec![
                    "deployment".into(),
                    "daemonset".into(),
                    "configmap".into(),
                    "deployment".into()
                ],
                "d"
            ),
            (
                vec!["daemonset/".to_owned(), "deployment/".to_owned()],
                NO_SPACE | NO_FILE_COMP
            )
        );
        assert_eq!(
            answer_from_names(
                &Lookup::Objects {
                    connection: connection.clone(),
                    namespace: None,
                    kind: "deploy".into()
                },
                vec!["web".into(), "api".into()],
                "deploy/a"
            ),
            (vec!["deploy/api".to_owned()], NO_FILE_COMP)
        );
        assert_eq!(
            answer_from_names(&Lookup::Namespaces { connection }, Vec::new(), ""),
            (Vec::new(), NO_FILE_COMP)
        );
    }
}
