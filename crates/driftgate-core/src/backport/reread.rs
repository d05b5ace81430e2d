//! The edited file read again, as each kind of reader reads it, and compared whole with what was
//! meant: the file as it is in Git with the recorded fields set, and nothing else changed. What
//! `backport` writes is committed, reviewed as a one-line diff, and then read by tools that do
//! not agree on YAML; so no edit is written that any of them reads differently.
//!
//! Pure: the file before and after, and the changes, in; the first difference out.

use std::fmt;

use serde_json::Value;

use super::yaml::{Node, documents, escaped};

/// A step into a YAML document: a mapping's key or a sequence's position.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    Key(String),
    Index(usize),
}

/// One value written: in which document of the file (as [`documents`] counts them), where in
/// it, and what.
#[derive(Clone, Debug, PartialEq)]
pub struct Change {
    pub doc: usize,
    pub steps: Vec<Step>,
    pub value: Value,
}

/// Who reads a manifest, each in its own way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reader {
    /// YAML 1.2's core schema on driftgate's own parser (the API server reads JSON or YAML 1.2).
    Core,
    /// serde-saphyr, which also reads YAML 1.1's `yes`, `on`, `y` as booleans and `0755` as
    /// octal, as go-yaml and PyYAML do.
    Saphyr,
    /// A YAML 1.1 reader: kustomize's kyaml and sigs.k8s.io/yaml (go-yaml), PyYAML. Besides CR
    /// and LF they end a line at NEL U+0085, LS U+2028 and PS U+2029, so a value holding one
    /// written plain reads as two lines, the second maybe a key of its own.
    Yaml11,
}

/// serde-saphyr first: it names what the others cannot say (a duplicate key, an alias).
const READERS: [Reader; 3] = [Reader::Saphyr, Reader::Yaml11, Reader::Core];

impl fmt::Display for Reader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Reader::Core => "YAML 1.2 (the API server's)",
            Reader::Saphyr => {
                "serde-saphyr (anchors, merge keys, YAML 1.1's booleans and octals)"
            }
            Reader::Yaml11 => {
                "YAML 1.1 (kustomize's kyaml, sigs.k8s.io/yaml, PyYAML: lines also end at U+0085, U+2028, U+2029)"
            }
        })
    }
}

/// Why an edited file is not written.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RereadProblem {
    #[error("to {reader}, it cannot be read as it is in Git ({error})")]
    OriginalUnreadable { reader: Reader, error: String },
    #[error("to {reader}, it could not be read once written ({error})")]
    EditedUnreadable { reader: Reader, error: String },
    #[error("to {reader}, it holds no {at} to write")]
    NotFound { reader: Reader, at: String },
    #[error("to {reader}, {at} would be {found} instead of {intended}")]
    Differs {
        reader: Reader,
        at: String,
        found: String,
        intended: String,
    },
}

/// Whether every reader reads `edited` as `original` with `changes` set, and nothing else
/// changed; the first difference if not.
pub fn check(original: &str, edited: &str, changes: &[Change]) -> Result<(), RereadProblem> {
    let core_index = core_document_indices(original)?;
    for reader in READERS {
        let read = |text: &str| read_as(reader, text);
        let mut intended =
            read(original).map_err(|error| RereadProblem::OriginalUnreadable { reader, error })?;
        for change in changes {
            let at = || describe(change.doc, &change.steps);
            let doc = core_index
                .get(change.doc)
                .copied()
                .flatten()
                .ok_or_else(|| RereadProblem::NotFound { reader, at: at() })?;
            let slot = intended
                .get_mut(doc)
                .and_then(|root| slot_at(root, &change.steps))
                .ok_or_else(|| RereadProblem::NotFound { reader, at: at() })?;
            *slot = change.value.clone();
        }
        let found =
            read(edited).map_err(|error| RereadProblem::EditedUnreadable { reader, error })?;
        if let Some((at, found, intended)) = first_difference(&found, &intended) {
            return Err(RereadProblem::Differs {
                reader,
                at,
                found,
                intended,
            });
        }
    }
    Ok(())
}

/// The documents of `text` as `reader` reads them, empty ones left out (serde-saphyr skips
/// them, and they declare nothing).
fn read_as(reader: Reader, text: &str) -> Result<Vec<Value>, String> {
    match reader {
        Reader::Core => Ok(documents(text)
            .map_err(|e| e.to_string())?
            .iter()
            .map(Node::to_json)
            .filter(|doc| !doc.is_null())
            .collect()),
        Reader::Saphyr => saphyr(text),
        Reader::Yaml11 => saphyr(&text.replace(['\u{85}', '\u{2028}', '\u{2029}'], "\n")),
    }
}

fn saphyr(text: &str) -> Result<Vec<Value>, String> {
    let options = serde_saphyr::options! {
        legacy_octal_numbers: true,
        // One line: the error ends up in a sentence.
        with_snippet: false,
    };
    serde_saphyr::from_multiple_with_options::<Value>(text, options)
        .map(|docs| docs.into_iter().filter(|doc| !doc.is_null()).collect())
        .map_err(|e| e.to_string())
}

/// For each document [`documents`] counts, its position among the non-empty ones.
fn core_document_indices(original: &str) -> Result<Vec<Option<usize>>, RereadProblem> {
    let docs = documents(original).map_err(|e| RereadProblem::OriginalUnreadable {
        reader: Reader::Core,
        error: e.to_string(),
    })?;
    let mut next = 0;
    Ok(docs
        .iter()
        .map(|doc| {
            (!doc.to_json().is_null()).then(|| {
                next += 1;
                next - 1
            })
        })
        .collect())
}

fn slot_at<'v>(root: &'v mut Value, steps: &[Step]) -> Option<&'v mut Value> {
    steps
        .iter()
        .try_fold(root, |node, step| match (node, step) {
            (Value::Object(map), Step::Key(key)) => map.get_mut(key),
            (Value::Array(list), Step::Index(index)) => list.get_mut(*index),
            _ => None,
        })
}

/// Where two readings first differ, and what each holds there.
fn first_difference(found: &[Value], intended: &[Value]) -> Option<(String, String, String)> {
    if found.len() != intended.len() {
        return Some((
            "the file".into(),
            format!("{} documents", found.len()),
            format!("{}", intended.len()),
        ));
    }
    found
        .iter()
        .zip(intended)
        .enumerate()
        .find_map(|(doc, (found, intended))| {
            let mut steps = Vec::new();
            differs(found, intended, &mut steps).then(|| {
                let at = |v: Option<&Value>| v.map_or("nothing".into(), shown);
                (
                    describe(doc, &steps),
                    at(value_at(found, &steps)),
                    at(value_at(intended, &steps)),
                )
            })
        })
}

/// Whether `a` and `b` differ; if so `steps` leads to the first place they do.
fn differs(a: &Value, b: &Value, steps: &mut Vec<Step>) -> bool {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys = x.keys().chain(y.keys().filter(|k| !x.contains_key(*k)));
            for key in keys {
                steps.push(Step::Key(key.clone()));
                match (x.get(key), y.get(key)) {
                    (Some(p), Some(q)) if !differs(p, q, steps) => {}
                    _ => return true,
                }
                steps.pop();
            }
            false
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (index, (p, q)) in x.iter().zip(y).enumerate() {
                steps.push(Step::Index(index));
                if differs(p, q, steps) {
                    return true;
                }
                steps.pop();
            }
            false
        }
        _ => a != b,
    }
}

fn value_at<'v>(root: &'v Value, steps: &[Step]) -> Option<&'v Value> {
    steps
        .iter()
        .try_fold(root, |node, step| match (node, step) {
            (Value::Object(map), Step::Key(key)) => map.get(key),
            (Value::Array(list), Step::Index(index)) => list.get(*index),
            _ => None,
        })
}

/// `document 2, spec.data[a.b]` (the first document is 1).
fn describe(doc: usize, steps: &[Step]) -> String {
    let path = crate::fieldpath::FieldPath::new(steps.iter().map(|step| match step {
        Step::Key(key) => key.clone(),
        Step::Index(index) => index.to_string(),
    }));
    if steps.is_empty() {
        format!("document {}", doc + 1)
    } else {
        format!("document {}, {path}", doc + 1)
    }
}

/// A value as messages quote it: JSON, bounded, with the characters YAML escapes escaped
/// (JSON leaves U+2028 and the like as they are, and a terminal shows nothing for them).
fn shown(value: &Value) -> String {
    let json: String = value
        .to_string()
        .chars()
        .map(|c| match c {
            c if escaped(c) => format!("\\u{:04X}", u32::from(c)),
            c => c.to_string(),
        })
        .collect();
    crate::text::echo(&json, 120).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn change(steps: &[&str], value: Value) -> Change {
        Change {
            doc: 0,
            steps: steps.iter().map(|s| Step::Key((*s).into())).collect(),
            value,
        }
    }

    #[test]
    fn an_edit_of_only_the_recorded_field_passes() {
        let original = "# settings\ndata:\n  GREETING: hello # the usual\n  LEVEL: info\n";
        let edited = original.replace("hello #", "\"hi\\u2028there\" #");
        check(
            original,
            &edited,
            &[change(&["data", "GREETING"], json!("hi\u{2028}there"))],
        )
        .unwrap();
    }

    /// Written plain, a value holding U+2028 is one line to Git and to YAML 1.2, and two to
    /// YAML 1.1 readers, which fold them into one value with a space.
    #[test]
    fn a_line_break_only_yaml_11_sees_is_named() {
        let original = "data:\n  GREETING: hello\n";
        let edited = "data:\n  GREETING: hi\u{2028}    there\n";
        let value = json!("hi\u{2028}    there");
        let problem = check(original, edited, &[change(&["data", "GREETING"], value)]).unwrap_err();
        assert_eq!(
            problem.to_string(),
            "to YAML 1.1 (kustomize's kyaml, sigs.k8s.io/yaml, PyYAML: lines also end at U+0085, U+2028, U+2029), document 1, data.GREETING would be \"hi there\" instead of \"hi\\u2028    there\""
        );
    }

    #[test]
    fn anything_else_that_changed_is_named() {
        let original = "a: 1\nb: x\n";
        let problem = check(original, "a: 2\nb: y\n", &[change(&["a"], json!(2))]).unwrap_err();
        assert_eq!(
            problem.to_string(),
            "to serde-saphyr (anchors, merge keys, YAML 1.1's booleans and octals), document 1, b would be true instead of \"x\""
        );
        // A string written plain that YAML 1.1 takes for a boolean.
        let problem = check("a: x\n", "a: on\n", &[change(&["a"], json!("on"))]).unwrap_err();
        assert_eq!(
            problem.to_string(),
            "to serde-saphyr (anchors, merge keys, YAML 1.1's booleans and octals), document 1, a would be true instead of \"on\""
        );
    }

    #[test]
    fn an_anchored_value_changes_its_aliases_too_and_is_refused() {
        let original = "a: &x 1\nb: *x\n";
        let problem = check(original, "a: &x 2\nb: *x\n", &[change(&["a"], json!(2))]).unwrap_err();
        assert!(
            problem
                .to_string()
                .contains("document 1, b would be 2 instead of 1"),
            "{problem}"
        );
    }
}
