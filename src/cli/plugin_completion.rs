//! Completion for `kubectl driftgate`, as kubectl (1.26 and later) asks a plugin for it: kubectl
//! runs `kubectl_complete-driftgate ARGS... WORD` from the `PATH` (the plugin's arguments so far,
//! then the word being completed) and reads one completion a line (`value<TAB>description`),
//! then `:DIRECTIVE`, cobra's number for what the shell does next. kubectl then does the shell's
//! part, in bash, zsh and fish alike. This binary answers when it runs under that name (a link
//! to `kubectl-driftgate`).
//!
//! The answers come from the command line's definition (subcommands, flags, the values a flag
//! takes), as the scripts `driftgate completion SHELL` prints: static, never a name read from a
//! cluster.

use std::io::Write;

use clap::Command;

/// The file name kubectl looks for on the `PATH` to complete `kubectl driftgate`.
pub const PLUGIN_COMPLETER: &str = "kubectl_complete-driftgate";

/// cobra's `ShellCompDirectiveDefault`: the shell may complete file names after the values.
const DEFAULT: u8 = 0;
/// cobra's `ShellCompDirectiveNoFileComp`: only the values given.
const NO_FILE_COMP: u8 = 4;

/// The completions of `word`, the last argument, after `args` (pure): the lines to print,
/// then cobra's directive.
pub fn complete(command: &Command, args: &[String], word: &str) -> (Vec<String>, u8) {
    let mut current = command;
    let mut taking_value: Option<&clap::Arg> = None;
    for arg in args {
        if taking_value.take().is_some() {
            continue;
        }
        if let Some(flag) = arg.strip_prefix("--") {
            if !flag.contains('=') {
                taking_value = find_long(current, command, flag).filter(|a| takes_value(a));
            }
        } else if let Some(short) = arg.strip_prefix('-').filter(|s| s.chars().count() == 1) {
            let short = short.chars().next();
            taking_value = current
                .get_arguments()
                .chain(command.get_arguments())
                .find(|a| a.get_short() == short)
                .filter(|a| takes_value(a));
        } else if let Some(sub) = current.find_subcommand(arg) {
            current = sub;
        }
    }
    if let Some(arg) = taking_value {
        return values(arg, word);
    }
    if let Some((flag, value)) = word.strip_prefix("--").and_then(|w| w.split_once('=')) {
        return match find_long(current, command, flag) {
            Some(arg) => {
                let (lines, directive) = values(arg, value);
                let lines = lines.iter().map(|v| format!("--{flag}={v}")).collect();
                (lines, directive)
            }
            None => (Vec::new(), NO_FILE_COMP),
        };
    }
    if word.starts_with('-') {
        let lines = current
            .get_arguments()
            .chain(command.get_arguments().filter(|a| a.is_global_set()))
            .filter(|a| !a.is_hide_set())
            .filter_map(|a| a.get_long().map(|long| (long, a)))
            .map(|(long, a)| line(&format!("--{long}"), a.get_help()))
            .chain(std::iter::once("--help\tPrint help".to_owned()))
            .filter(|l| l.starts_with(word))
            .collect();
        return (lines, NO_FILE_COMP);
    }
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
        return ([subcommands, positional_values].concat(), NO_FILE_COMP);
    }
    // A positional that is a file or a name (eval's REVIEW.json, KIND/NAME): the shell's own.
    (Vec::new(), DEFAULT)
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
fn values(arg: &clap::Arg, word: &str) -> (Vec<String>, u8) {
    let possible = arg.get_possible_values();
    if possible.is_empty() {
        return (Vec::new(), DEFAULT);
    }
    let lines = possible
        .iter()
        .filter(|v| !v.is_hide_set() && v.get_name().starts_with(word))
        .map(|v| line(v.get_name(), v.get_help()))
        .collect();
    (lines, NO_FILE_COMP)
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

/// Answers kubectl: the arguments after the program's name, the last the word being completed.
pub fn run(command: &Command, args: &[String], out: &mut impl Write) -> std::process::ExitCode {
    let (word, before) = match args.split_last() {
        Some((word, before)) => (word.as_str(), before),
        None => ("", args),
    };
    let (lines, directive) = complete(command, before, word);
    for line in lines {
        let _ = writeln!(out, "{line}");
    }
    let _ = writeln!(out, ":{directive}");
    std::process::ExitCode::SUCCESS
}
