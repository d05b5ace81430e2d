//! Reading a policy file so that one run reports every problem: the file is cut into its
//! documents (each judged alone, so a broken one hides nothing in the others), and a document's
//! unknown fields are blanked out one by one, so that the rest of it is still checked.
//!
//! Blanking replaces characters by spaces and keeps every line break: each later problem keeps
//! the line and column the author sees.

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::{Location, Spanned};

/// One YAML document of a file: the whole file's text with every other document blanked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DocumentText {
    /// 1-based, counting only documents with content.
    pub number: usize,
    pub text: String,
}

/// The documents of `text` that hold anything but comments, each cut at its `---` separator.
pub fn documents(text: &str) -> Vec<DocumentText> {
    let lines: Vec<&str> = text.split('\n').collect();
    let mut starts = vec![0];
    starts.extend((1..lines.len()).filter(|&i| lines[i].starts_with("---")));
    starts.push(lines.len());
    let mut out = Vec::new();
    for bounds in starts.windows(2) {
        let (from, to) = (bounds[0], bounds[1]);
        let has_content = lines[from..to].iter().any(|line| {
            let line = line.trim();
            let line = line.strip_prefix("---").unwrap_or(line).trim();
            !line.is_empty() && !line.starts_with('#')
        });
        if !has_content {
            continue;
        }
        let kept: Vec<&str> = (0..lines.len())
            .map(|i| {
                if (from..to).contains(&i) {
                    lines[i]
                } else {
                    ""
                }
            })
            .collect();
        out.push(DocumentText {
            number: out.len() + 1,
            text: kept.join("\n"),
        });
    }
    out
}

/// `text` without the mapping entry whose key starts at `at` (key and value blanked), or None
/// when `at` is not inside the text.
pub fn blank_entry(text: &str, at: Location) -> Option<String> {
    let mut chars: Vec<char> = text.chars().collect();
    let start = index_of(&chars, at.line(), at.column())?;
    let end = if in_flow(&chars, start) {
        flow_entry_end(&chars, start)
    } else {
        block_entry_end(&chars, start, at.column() as usize - 1)
    };
    for c in &mut chars[start..end] {
        if *c != '\n' {
            *c = ' ';
        }
    }
    Some(chars.into_iter().collect())
}

fn index_of(chars: &[char], line: u64, column: u64) -> Option<usize> {
    if line == 0 || column == 0 {
        return None;
    }
    let mut current = 1;
    let mut line_start = 0;
    for (i, c) in chars.iter().enumerate() {
        if current == line {
            break;
        }
        if *c == '\n' {
            current += 1;
            line_start = i + 1;
        }
    }
    let index = line_start + column as usize - 1;
    (current == line && index < chars.len()).then_some(index)
}

/// A key in a flow mapping (`{a: 1, b: 2}`, JSON) follows `{` or `,`.
fn in_flow(chars: &[char], key: usize) -> bool {
    chars[..key]
        .iter()
        .rev()
        .find(|c| !c.is_whitespace())
        .is_some_and(|c| matches!(c, '{' | ','))
}

/// Up to and including the entry's comma, or up to the closing bracket.
fn flow_entry_end(chars: &[char], key: usize) -> usize {
    let mut depth = 0usize;
    let mut quote: Option<char> = None;
    let mut i = key;
    while i < chars.len() {
        let c = chars[i];
        match quote {
            Some('"') if c == '\\' => i += 1,
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None => match c {
                '"' | '\'' => quote = Some(c),
                '{' | '[' => depth += 1,
                '}' | ']' if depth == 0 => return i,
                '}' | ']' => depth -= 1,
                ',' if depth == 0 => return i + 1,
                _ => {}
            },
        }
        i += 1;
    }
    chars.len()
}

/// The key's line, then every following line indented deeper than the key (its nested value),
/// or at the key's indentation and starting with `- ` (a list value written flush with it).
fn block_entry_end(chars: &[char], key: usize, indent: usize) -> usize {
    let mut end = chars[key..]
        .iter()
        .position(|c| *c == '\n')
        .map_or(chars.len(), |n| key + n);
    while end < chars.len() {
        let next_start = end + 1;
        let next_end = chars[next_start..]
            .iter()
            .position(|c| *c == '\n')
            .map_or(chars.len(), |n| next_start + n);
        let line: String = chars[next_start..next_end].iter().collect();
        let body = line.trim_start();
        let depth = line.len() - body.len();
        let belongs = body.is_empty()
            || depth > indent
            || (depth == indent && (body == "-" || body.starts_with("- ")));
        if !belongs {
            break;
        }
        end = next_end;
    }
    end
}

/// A document as a tree of keys with their positions: enough to name any key's field path and
/// to read any document's apiVersion and kind, whatever its schema.
#[derive(Debug)]
pub enum Node {
    Map(Vec<(Spanned<String>, Spanned<Node>)>),
    List(Vec<Spanned<Node>>),
    Text(String),
    /// Numbers, booleans, null: nothing a check needs to read.
    Other,
}

impl Node {
    /// The value of `key`, when this is a mapping that has it.
    pub fn get(&self, key: &str) -> Option<&Spanned<Node>> {
        match self {
            Node::Map(entries) => entries.iter().find(|(k, _)| k.value == key).map(|(_, v)| v),
            _ => None,
        }
    }

    pub fn text(&self) -> Option<&str> {
        match self {
            Node::Text(text) => Some(text),
            _ => None,
        }
    }

    /// The dotted path (`spec.controllers[0].name`) of the key written at `at`.
    pub fn path_of_key(&self, at: Location) -> Option<String> {
        match self {
            Node::Map(entries) => entries.iter().find_map(|(key, value)| {
                if same_place(key.referenced, at) {
                    return Some(key.value.clone());
                }
                Some(join(&key.value, &value.value.path_of_key(at)?))
            }),
            Node::List(items) => items
                .iter()
                .enumerate()
                .find_map(|(i, item)| Some(join(&format!("[{i}]"), &item.value.path_of_key(at)?))),
            _ => None,
        }
    }

    /// The path of the value written at `at`, and the key of the mapping entry that holds it
    /// (the entry to blank to read past a value of the wrong type).
    pub fn value_at(&self, at: Location) -> Option<(String, Location)> {
        self.find_value(at, None)
    }

    fn find_value(&self, at: Location, entry: Option<Location>) -> Option<(String, Location)> {
        match self {
            Node::Map(entries) => entries.iter().find_map(|(key, value)| {
                if same_place(value.referenced, at) {
                    return Some((key.value.clone(), key.referenced));
                }
                let (inner, entry) = value.value.find_value(at, Some(key.referenced))?;
                Some((join(&key.value, &inner), entry))
            }),
            Node::List(items) => items.iter().enumerate().find_map(|(i, item)| {
                let index = format!("[{i}]");
                if same_place(item.referenced, at) {
                    return entry.map(|entry| (index, entry));
                }
                let (inner, entry) = item.value.find_value(at, entry)?;
                Some((join(&index, &inner), entry))
            }),
            _ => None,
        }
    }
}

fn same_place(a: Location, b: Location) -> bool {
    a.line() == b.line() && a.column() == b.column()
}

/// `spec` and `namespaces` make `spec.namespaces`; `usernames` and `[0]`, `usernames[0]`.
fn join(outer: &str, inner: &str) -> String {
    if inner.starts_with('[') {
        format!("{outer}{inner}")
    } else {
        format!("{outer}.{inner}")
    }
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any YAML value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut entries = Vec::new();
        while let Some(key) = map.next_key::<Spanned<String>>()? {
            entries.push((key, map.next_value()?));
        }
        Ok(Node::Map(entries))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Node::List(items))
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<Node, E> {
        Ok(Node::Text(value.to_owned()))
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Node, D::Error> {
        Node::deserialize(deserializer)
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Node, E> {
        Ok(Node::Other)
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Node, E> {
        Ok(Node::Other)
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Node, E> {
        Ok(Node::Other)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Node, E> {
        Ok(Node::Other)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Node, E> {
        Ok(Node::Other)
    }

    fn visit_none<E: de::Error>(self) -> Result<Node, E> {
        Ok(Node::Other)
    }
}

/// The known field nearest to an unknown one, if one is near enough to be a slip: the same
/// letters in another case or spelling style (`max_duration`), or a typo or two away.
pub fn nearest_field<'a>(unknown: &str, known: &[&'a str]) -> Option<&'a str> {
    let fold = |s: &str| -> String {
        s.chars()
            .filter(|c| !matches!(c, '_' | '-'))
            .flat_map(char::to_lowercase)
            .collect()
    };
    let unknown = fold(unknown);
    let allowed = (unknown.chars().count() / 3).clamp(1, 3);
    known
        .iter()
        .map(|field| (strsim::damerau_levenshtein(&unknown, &fold(field)), *field))
        .filter(|(distance, _)| *distance <= allowed)
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, field)| field)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_are_cut_at_separators_and_keep_their_lines() {
        let text = "# c\n---\na: 1\n---\n# only a comment\n---\nb: 2\n";
        let docs = documents(text);
        assert_eq!(docs.len(), 2, "{docs:?}");
        assert_eq!(docs[0].number, 1);
        assert_eq!(docs[0].text, "\n---\na: 1\n\n\n\n\n");
        assert_eq!(docs[1].number, 2);
        assert_eq!(docs[1].text, "\n\n\n\n\n---\nb: 2\n");
    }

    fn key_at(text: &str, key: &str) -> Location {
        let (line, rest) = text
            .lines()
            .enumerate()
            .find_map(|(i, l)| l.find(key).map(|c| (i, c)))
            .unwrap();
        let node: Node = serde_saphyr::from_str(text).unwrap();
        let mut found = None;
        fn walk(node: &Node, line: u64, col: u64, found: &mut Option<Location>) {
            match node {
                Node::Map(entries) => {
                    for (k, v) in entries {
                        if k.referenced.line() == line && k.referenced.column() == col {
                            *found = Some(k.referenced);
                        }
                        walk(&v.value, line, col, found);
                    }
                }
                Node::List(items) => items.iter().for_each(|i| walk(&i.value, line, col, found)),
                _ => {}
            }
        }
        walk(&node, line as u64 + 1, rest as u64 + 1, &mut found);
        found.unwrap_or_else(|| panic!("no key {key} in {text}"))
    }

    #[test]
    fn a_block_entry_is_blanked_with_its_nested_value() {
        let text = "a:\n  lable:\n  - x\n  - y\n  b: 1\nc: 2\n";
        let blanked = blank_entry(text, key_at(text, "lable")).unwrap();
        assert_eq!(blanked, "a:\n        \n     \n     \n  b: 1\nc: 2\n");
        let value: serde_json::Value = serde_saphyr::from_str(&blanked).unwrap();
        assert_eq!(value, serde_json::json!({"a": {"b": 1}, "c": 2}));
    }

    #[test]
    fn a_flow_entry_is_blanked_with_its_comma() {
        for (text, key, after) in [
            (
                "a: {lable: [1, {x: 2}], b: 1}\n",
                "lable",
                serde_json::json!({"a": {"b": 1}}),
            ),
            (
                r#"{"a":{"b":1,"lable":"x,}"}}"#,
                "\"lable",
                serde_json::json!({"a": {"b": 1}}),
            ),
        ] {
            let blanked = blank_entry(text, key_at(text, key)).unwrap();
            assert_eq!(blanked.len(), text.len());
            let value: serde_json::Value = serde_saphyr::from_str(&blanked).unwrap();
            assert_eq!(value, after, "{blanked}");
        }
    }

    #[test]
    fn a_key_is_named_by_its_path() {
        let text = "spec:\n  controllers:\n  - name: a\n    lable: x\n";
        let node: Node = serde_saphyr::from_str(text).unwrap();
        assert_eq!(
            node.path_of_key(key_at(text, "lable")).as_deref(),
            Some("spec.controllers[0].lable")
        );
    }

    #[test]
    fn a_value_is_found_with_the_entry_that_holds_it() {
        let text = "spec:\n  usernames: [a, {b: c}]\n  owner: 3\n";
        let node: Node = serde_saphyr::from_str(text).unwrap();
        let owner = node.get("spec").unwrap().value.get("owner").unwrap();
        let (path, entry) = node.value_at(owner.referenced).unwrap();
        assert_eq!(path, "spec.owner");
        assert_eq!((entry.line(), entry.column()), (3, 3));
        let Node::List(items) = &node
            .get("spec")
            .unwrap()
            .value
            .get("usernames")
            .unwrap()
            .value
        else {
            panic!("a list")
        };
        let (path, entry) = node.value_at(items[1].referenced).unwrap();
        assert_eq!(path, "spec.usernames[1]");
        assert_eq!((entry.line(), entry.column()), (2, 3));
    }

    #[test]
    fn the_nearest_field_is_a_slip_away_or_none() {
        let known = ["label", "reasonAnnotation", "maxDuration", "openers"];
        assert_eq!(nearest_field("lable", &known), Some("label"));
        assert_eq!(nearest_field("max_duration", &known), Some("maxDuration"));
        assert_eq!(
            nearest_field("reasonannotaton", &known),
            Some("reasonAnnotation")
        );
        assert_eq!(nearest_field("opener", &known), Some("openers"));
        assert_eq!(nearest_field("colour", &known), None);
    }
}
