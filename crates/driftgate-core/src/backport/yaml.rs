//! YAML documents as trees of nodes that remember where they are in the source, so that one
//! scalar can be rewritten and every other byte of the file (comments, key order, quoting,
//! indentation) stays as it was. Pure: text in, text out.

use std::ops::Range;

use granit_parser::{Event, Parser, ScalarStyle, StructureStyle};
use serde_json::Value;

/// One YAML node and the bytes it covers.
#[derive(Clone, Debug, PartialEq)]
pub enum Node {
    Scalar {
        text: String,
        style: ScalarStyle,
        span: Range<usize>,
    },
    Sequence {
        items: Vec<Node>,
        style: StructureStyle,
    },
    Mapping {
        entries: Vec<(String, Node)>,
        style: StructureStyle,
    },
    /// An alias (`*name`): what it stands for is elsewhere, so it is never rewritten here.
    Alias,
}

/// Why a file could not be read as YAML.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct YamlError(String);

/// The documents of a YAML stream (a multi-document file has several; empty ones are skipped).
pub fn documents(text: &str) -> Result<Vec<Node>, YamlError> {
    let mut builder = Builder::default();
    for item in Parser::new_from_str(text) {
        let (event, span) = item.map_err(|e| YamlError(e.to_string()))?;
        let range = span.start.byte_offset().unwrap_or(0)..span.end.byte_offset().unwrap_or(0);
        builder.push(event, range)?;
    }
    Ok(builder.documents)
}

#[derive(Default)]
struct Builder {
    documents: Vec<Node>,
    /// Open collections, innermost last; a mapping's pending key waits beside it.
    open: Vec<(Node, Option<String>)>,
}

impl Builder {
    fn push(&mut self, event: Event<'_>, span: Range<usize>) -> Result<(), YamlError> {
        let node = match event {
            Event::Scalar(text, style, _, _) => Node::Scalar {
                text: text.into_owned(),
                style,
                span,
            },
            Event::Alias(_) | Event::UnresolvedAlias(_) => Node::Alias,
            Event::SequenceStart(style, _, _) => {
                let sequence = Node::Sequence {
                    items: Vec::new(),
                    style,
                };
                self.open.push((sequence, None));
                return Ok(());
            }
            Event::MappingStart(style, _, _) => {
                let mapping = Node::Mapping {
                    entries: Vec::new(),
                    style,
                };
                self.open.push((mapping, None));
                return Ok(());
            }
            Event::SequenceEnd | Event::MappingEnd => match self.open.pop() {
                Some((node, _)) => node,
                None => return Err(YamlError("a collection ends that never began".into())),
            },
            _ => return Ok(()),
        };
        self.add(node)
    }

    fn add(&mut self, node: Node) -> Result<(), YamlError> {
        let Some((parent, pending_key)) = self.open.last_mut() else {
            self.documents.push(node);
            return Ok(());
        };
        match parent {
            Node::Sequence { items, .. } => items.push(node),
            Node::Mapping { entries, .. } => match pending_key.take() {
                Some(key) => entries.push((key, node)),
                None => match node {
                    Node::Scalar { text, .. } => *pending_key = Some(text),
                    // A collection or alias as a key: no Kubernetes manifest has one.
                    _ => return Err(YamlError("a mapping key that is not a scalar".into())),
                },
            },
            _ => unreachable!("only collections are open"),
        }
        Ok(())
    }
}

impl Node {
    /// The value at `key` of a mapping.
    pub fn get(&self, key: &str) -> Option<&Node> {
        match self {
            Node::Mapping { entries, .. } => entries.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// A scalar's text as a plain string (quoted or not), for names and kinds.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Node::Scalar { text, .. } => Some(text),
            _ => None,
        }
    }

    /// The node as JSON, plain scalars resolved by YAML 1.2's core schema (what the API server
    /// would read).
    pub fn to_json(&self) -> Value {
        match self {
            Node::Scalar { text, style, .. } => match style {
                ScalarStyle::Plain => plain_value(text),
                _ => Value::String(text.clone()),
            },
            Node::Sequence { items, .. } => Value::Array(items.iter().map(Node::to_json).collect()),
            Node::Mapping { entries, .. } => Value::Object(
                entries
                    .iter()
                    .map(|(k, v)| (k.clone(), v.to_json()))
                    .collect(),
            ),
            Node::Alias => Value::Null,
        }
    }
}

/// A plain scalar's value under the core schema.
fn plain_value(text: &str) -> Value {
    match text {
        "" | "~" | "null" | "Null" | "NULL" => Value::Null,
        "true" | "True" | "TRUE" => Value::Bool(true),
        "false" | "False" | "FALSE" => Value::Bool(false),
        _ => {
            if let Ok(n) = text.parse::<i64>() {
                Value::from(n)
            } else if let Ok(n) = text.parse::<u64>() {
                Value::from(n)
            } else if looks_numeric(text)
                && let Some(n) = text
                    .parse::<f64>()
                    .ok()
                    .and_then(serde_json::Number::from_f64)
            {
                Value::Number(n)
            } else {
                Value::String(text.to_owned())
            }
        }
    }
}

fn looks_numeric(text: &str) -> bool {
    let body = text.trim_start_matches(['-', '+']);
    body.starts_with(|c: char| c.is_ascii_digit() || c == '.')
        && body
            .chars()
            .all(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '-' | '+'))
}

/// Why a value cannot be written in place of a node.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RewriteProblem {
    #[error("it is a {0} in the manifest; driftgate writes single values, so edit it by hand")]
    NotAScalar(&'static str),
    #[error("its new value is a {0}; driftgate writes single values, so edit it by hand")]
    ValueNotAScalar(&'static str),
    #[error("it is a block scalar (| or >) in the manifest; edit it by hand")]
    BlockScalar,
    #[error("it is an alias (*name) in the manifest; edit what it refers to by hand")]
    Alias,
}

/// The source text that writes `value` where `node` is, in the node's own quoting where every
/// reader reads the value back as it is: YAML 1.2 readers (the API server's, driftgate's own)
/// and YAML 1.1 readers (go-yaml, so kustomize's kyaml and sigs.k8s.io/yaml, and PyYAML), which
/// take more characters for line breaks and more plain words for booleans. Anything else is
/// written double-quoted, with escapes.
pub fn scalar_text(node: &Node, value: &Value) -> Result<String, RewriteProblem> {
    let style = match node {
        Node::Scalar { style, .. } => *style,
        Node::Sequence { .. } => return Err(RewriteProblem::NotAScalar("list")),
        Node::Mapping { .. } => return Err(RewriteProblem::NotAScalar("mapping")),
        Node::Alias => return Err(RewriteProblem::Alias),
    };
    if matches!(style, ScalarStyle::Literal | ScalarStyle::Folded) {
        return Err(RewriteProblem::BlockScalar);
    }
    match value {
        Value::String(text) => Ok(match style {
            ScalarStyle::SingleQuoted if !text.contains(escaped) => {
                format!("'{}'", text.replace('\'', "''"))
            }
            ScalarStyle::Plain if plain_safe(text) => text.clone(),
            _ => double_quoted(text),
        }),
        Value::Number(number) => Ok(number_text(number)),
        Value::Bool(_) | Value::Null => Ok(value.to_string()),
        Value::Array(_) => Err(RewriteProblem::ValueNotAScalar("list")),
        Value::Object(_) => Err(RewriteProblem::ValueNotAScalar("mapping")),
    }
}

/// Characters a double-quoted scalar holds only as escapes, and plain and single-quoted ones
/// never: line breaks for any reader (YAML 1.1 also breaks lines at NEL U+0085, LS U+2028 and
/// PS U+2029, so a value holding one would read as two lines, the second maybe a key of its
/// own), characters outside YAML's printable set (C0 and C1 controls, DEL, U+FFFE, U+FFFF),
/// tabs, and the byte-order mark U+FEFF, which some readers drop or refuse.
pub fn escaped(c: char) -> bool {
    matches!(
        c,
        '\u{0}'..='\u{1f}'
            | '\u{7f}'..='\u{9f}'
            | '\u{2028}'
            | '\u{2029}'
            | '\u{feff}'
            | '\u{fffe}'
            | '\u{ffff}'
    )
}

/// `text` as a double-quoted scalar: `"` and `\` escaped, and every [`escaped`] character, in
/// the escapes YAML 1.1 and 1.2 share.
pub fn double_quoted(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if escaped(c) => out.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A number as both YAML 1.1 and 1.2 read it: YAML 1.1 reads `1e300` as a string, its floats
/// need a `.` and a signed exponent (`1.0e+300`).
fn number_text(number: &serde_json::Number) -> String {
    let text = number.to_string();
    match text.split_once(['e', 'E']) {
        Some((mantissa, exponent)) if number.is_f64() => {
            let dot = if mantissa.contains('.') { "" } else { ".0" };
            let sign = if exponent.starts_with(['-', '+']) {
                ""
            } else {
                "+"
            };
            format!("{mantissa}{dot}e{sign}{exponent}")
        }
        _ => text,
    }
}

/// Whether `text` reads back as this same string when written plain, to every reader, in
/// block or flow context.
fn plain_safe(text: &str) -> bool {
    const INDICATORS: &[char] = &[
        '-', '?', ':', ',', '[', ']', '{', '}', '#', '&', '*', '!', '|', '>', '\'', '"', '%', '@',
        '`', '<', '=', '.', '+', '~',
    ];
    // Inside a flow collection (`{image: x}`) these end a plain scalar.
    const FLOW: &[char] = &[',', '[', ']', '{', '}'];
    !text.is_empty()
        && text.trim() == text
        && !text.starts_with(INDICATORS)
        && !text.starts_with(|c: char| c.is_ascii_digit())
        && !text.contains(": ")
        && !text.contains(" #")
        && !text.ends_with(':')
        && !text.contains(FLOW)
        && !text.contains(escaped)
        && !yaml11_word(text)
        && plain_value(text) == Value::String(text.to_owned())
}

/// The plain words a YAML 1.1 reader takes for booleans or null, in any case (go-yaml reads
/// `y` and `n` too; serde-saphyr any case).
fn yaml11_word(text: &str) -> bool {
    ["y", "n", "yes", "no", "on", "off", "true", "false", "null"]
        .iter()
        .any(|word| text.eq_ignore_ascii_case(word))
}

/// `source` with the bytes of `node` (a scalar) replaced by `replacement`.
pub fn replaced(source: &str, node: &Node, replacement: &str) -> Option<String> {
    let Node::Scalar { span, .. } = node else {
        return None;
    };
    let mut out = String::with_capacity(source.len() + replacement.len());
    out.push_str(source.get(..span.start)?);
    out.push_str(replacement);
    out.push_str(source.get(span.end..)?);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MANIFEST: &str = "# the api\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: api   # keep me\n  namespace: prod\nspec:\n  replicas: 2 # scaled by hand at 3am?\n  template:\n    spec:\n      containers:\n        - name: api\n          image: \"registry.example/api:1.2.3\"\n        - {name: sidecar, image: 'proxy:1'}\n---\napiVersion: v1\nkind: Service\nmetadata: {name: api}\n";

    fn at<'n>(node: &'n Node, path: &[&str]) -> &'n Node {
        path.iter().fold(node, |node, segment| match node {
            Node::Sequence { items, .. } => &items[segment.parse::<usize>().unwrap()],
            _ => node.get(segment).unwrap(),
        })
    }

    #[test]
    fn documents_are_read_with_their_values_and_spans() {
        let docs = documents(MANIFEST).unwrap();
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[0].get("kind").unwrap().as_str(), Some("Deployment"));
        assert_eq!(docs[1].to_json()["metadata"]["name"], "api");
        let replicas = at(&docs[0], &["spec", "replicas"]);
        assert_eq!(replicas.to_json(), serde_json::json!(2));
        let Node::Scalar { span, .. } = replicas else {
            panic!()
        };
        assert_eq!(&MANIFEST[span.clone()], "2");
    }

    #[test]
    fn one_scalar_is_rewritten_in_its_own_quoting_and_nothing_else_moves() {
        let docs = documents(MANIFEST).unwrap();
        let replicas = at(&docs[0], &["spec", "replicas"]);
        let text = scalar_text(replicas, &serde_json::json!(5)).unwrap();
        let out = replaced(MANIFEST, replicas, &text).unwrap();
        assert_eq!(out, MANIFEST.replace("replicas: 2 #", "replicas: 5 #"));

        let image = at(
            &docs[0],
            &["spec", "template", "spec", "containers", "0", "image"],
        );
        let text = scalar_text(image, &serde_json::json!("registry.example/api:1.2.4")).unwrap();
        assert_eq!(text, "\"registry.example/api:1.2.4\"");
        let sidecar = at(
            &docs[0],
            &["spec", "template", "spec", "containers", "1", "image"],
        );
        let text = scalar_text(sidecar, &serde_json::json!("it's:2")).unwrap();
        let out = replaced(MANIFEST, sidecar, &text).unwrap();
        assert!(out.contains("{name: sidecar, image: 'it''s:2'}"), "{out}");
        assert_eq!(
            documents(&out).unwrap()[0].to_json()["spec"]["template"]["spec"]["containers"][1]["image"],
            "it's:2"
        );
    }

    #[test]
    fn a_plain_string_that_would_read_as_another_type_is_quoted() {
        let docs = documents("a: x\n").unwrap();
        let node = docs[0].get("a").unwrap();
        for (value, written) in [
            ("api", "api"),
            ("registry.example/api:1.2.4", "registry.example/api:1.2.4"),
            ("y", "\"y\""),
            ("Off", "\"Off\""),
            ("1.2.4", "\"1.2.4\""),
            ("1:20", "\"1:20\""),
            ("a,b", "\"a,b\""),
            ("true", "\"true\""),
            ("10", "\"10\""),
            ("a: b", "\"a: b\""),
            ("", "\"\""),
            ("-x", "\"-x\""),
        ] {
            assert_eq!(
                scalar_text(node, &serde_json::json!(value)).unwrap(),
                written,
                "{value}"
            );
        }
    }

    #[test]
    fn collections_block_scalars_and_aliases_are_not_rewritten() {
        let docs = documents("a: [1]\nb: |\n  text\nc: &x 1\nd: *x\n").unwrap();
        let value = serde_json::json!(1);
        assert_eq!(
            scalar_text(docs[0].get("a").unwrap(), &value),
            Err(RewriteProblem::NotAScalar("list"))
        );
        assert_eq!(
            scalar_text(docs[0].get("b").unwrap(), &value),
            Err(RewriteProblem::BlockScalar)
        );
        assert_eq!(
            scalar_text(docs[0].get("d").unwrap(), &value),
            Err(RewriteProblem::Alias)
        );
        assert_eq!(
            scalar_text(docs[0].get("c").unwrap(), &serde_json::json!({"k": 1})),
            Err(RewriteProblem::ValueNotAScalar("mapping"))
        );
    }

    #[test]
    fn broken_yaml_is_an_error_not_a_panic() {
        assert!(documents("a: [1\n").is_err());
    }
}
