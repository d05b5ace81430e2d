//! Field paths: how policies name parts of an object, and how diffs report them.
//!
//! A path is dotted (`spec.replicas`); a map key that itself contains dots or slashes goes in
//! brackets (`metadata.annotations[deployment.kubernetes.io/revision]`), and so does a list
//! index (`spec.template.spec.containers[0].image`). In a policy, any segment may be a glob
//! (`metadata.labels[team-*]`, `spec.template.spec.containers[*].image`).

use std::fmt;

use globset::{GlobBuilder, GlobMatcher};

/// A concrete path into an object: every segment is a map key, or a list index in decimal.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FieldPath(pub Vec<String>);

/// Why a field path or pattern could not be parsed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{problem} at character {offset} of \"{path}\"")]
pub struct FieldPathError {
    pub path: String,
    pub offset: usize,
    pub problem: &'static str,
}

impl FieldPath {
    pub fn new<I, S>(segments: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        FieldPath(segments.into_iter().map(Into::into).collect())
    }

    pub fn parse(text: &str) -> Result<Self, FieldPathError> {
        split_segments(text).map(FieldPath)
    }

    pub fn segments(&self) -> &[String] {
        &self.0
    }

    /// Whether this path equals `prefix` or lies below it.
    pub fn starts_with(&self, prefix: &[&str]) -> bool {
        self.0.len() >= prefix.len() && self.0.iter().zip(prefix).all(|(a, b)| a == b)
    }
}

/// Keys that can be written after a dot without brackets. All-digit keys are bracketed so that
/// they read like the list indices they usually are.
fn is_plain_key(key: &str) -> bool {
    !key.is_empty()
        && !key.bytes().all(|b| b.is_ascii_digit())
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, segment) in self.0.iter().enumerate() {
            if is_plain_key(segment) {
                if i > 0 {
                    f.write_str(".")?;
                }
                f.write_str(segment)?;
            } else {
                write!(f, "[{segment}]")?;
            }
        }
        Ok(())
    }
}

/// Splits `a.b[c.d/e][0].f` into `["a", "b", "c.d/e", "0", "f"]`.
fn split_segments(text: &str) -> Result<Vec<String>, FieldPathError> {
    let fail = |offset: usize, problem: &'static str| FieldPathError {
        path: text.to_owned(),
        offset,
        problem,
    };
    if text.is_empty() {
        return Err(fail(0, "a field path cannot be empty"));
    }
    let mut segments = Vec::new();
    let mut chars = text.char_indices().peekable();
    // Whether the next character may start a bare (dotted) segment.
    let mut expect_name = true;
    while let Some(&(offset, c)) = chars.peek() {
        match c {
            '[' => {
                chars.next();
                let mut key = String::new();
                let mut closed = false;
                for (_, c) in chars.by_ref() {
                    if c == ']' {
                        closed = true;
                        break;
                    }
                    if c == '[' {
                        return Err(fail(offset, "brackets cannot nest"));
                    }
                    key.push(c);
                }
                if !closed {
                    return Err(fail(offset, "a '[' is never closed"));
                }
                segments.push(key);
                expect_name = false;
            }
            '.' => {
                chars.next();
                if expect_name {
                    return Err(fail(offset, "a segment is empty"));
                }
                match chars.peek() {
                    None => return Err(fail(offset, "a path cannot end with '.'")),
                    Some((_, '[')) => return Err(fail(offset, "write a[b], not a.[b]")),
                    _ => expect_name = true,
                }
            }
            ']' => return Err(fail(offset, "a ']' has no '['")),
            _ => {
                if !expect_name {
                    return Err(fail(offset, "a '.' or '[' must follow ']'"));
                }
                let mut key = String::new();
                while let Some(&(_, c)) = chars.peek() {
                    if matches!(c, '.' | '[' | ']') {
                        break;
                    }
                    key.push(c);
                    chars.next();
                }
                segments.push(key);
                expect_name = false;
            }
        }
    }
    Ok(segments)
}

/// One segment of a pattern: exact text, or a glob over a key (or a list index in decimal).
#[derive(Clone, Debug)]
enum SegmentPattern {
    Exact(String),
    Glob(GlobMatcher),
}

impl SegmentPattern {
    fn matches(&self, segment: &str) -> bool {
        match self {
            SegmentPattern::Exact(text) => text == segment,
            SegmentPattern::Glob(glob) => glob.is_match(segment),
        }
    }
}

/// A field path as written in a policy, e.g. a delegation's `fields` entry.
#[derive(Clone, Debug)]
pub struct FieldPattern {
    source: String,
    segments: Vec<SegmentPattern>,
}

impl FieldPattern {
    pub fn parse(text: &str) -> Result<Self, FieldPathError> {
        let segments = split_segments(text)?
            .into_iter()
            .map(|segment| {
                if segment.contains(['*', '?', '{']) {
                    GlobBuilder::new(&segment)
                        .literal_separator(false)
                        .build()
                        .map(|glob| SegmentPattern::Glob(glob.compile_matcher()))
                        .map_err(|_| FieldPathError {
                            path: text.to_owned(),
                            offset: text.find(&segment).unwrap_or(0),
                            problem: "a segment is not a valid glob",
                        })
                } else {
                    Ok(SegmentPattern::Exact(segment))
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(FieldPattern {
            source: text.to_owned(),
            segments,
        })
    }

    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// Whether a change at `path` lies within this pattern: the path is the named field or
    /// something below it. A change to a parent of the named field (replacing the whole
    /// `spec`, say) is not covered.
    pub fn covers(&self, path: &FieldPath) -> bool {
        path.0.len() >= self.segments.len()
            && self
                .segments
                .iter()
                .zip(&path.0)
                .all(|(pattern, segment)| pattern.matches(segment))
    }
}

impl fmt::Display for FieldPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_dots_brackets_and_indices() {
        let path =
            FieldPath::parse("metadata.annotations[deployment.kubernetes.io/revision]").unwrap();
        assert_eq!(
            path.0,
            [
                "metadata",
                "annotations",
                "deployment.kubernetes.io/revision"
            ]
        );
        let path = FieldPath::parse("spec.template.spec.containers[0].image").unwrap();
        assert_eq!(
            path.0,
            ["spec", "template", "spec", "containers", "0", "image"]
        );
        assert_eq!(path.to_string(), "spec.template.spec.containers[0].image");
    }

    #[test]
    fn rejects_malformed_paths() {
        for bad in [
            "", ".a", "a.", "a..b", "a[b", "a]b", "a[b]c", "a.[b]", "a[[b]]",
        ] {
            assert!(FieldPath::parse(bad).is_err(), "{bad:?} should not parse");
        }
    }

    #[test]
    fn patterns_cover_the_field_and_below_but_not_parents() {
        let replicas = FieldPattern::parse("spec.replicas").unwrap();
        assert!(replicas.covers(&FieldPath::new(["spec", "replicas"])));
        assert!(!replicas.covers(&FieldPath::new(["spec"])));
        assert!(!replicas.covers(&FieldPath::new(["spec", "replicasX"])));

        let team = FieldPattern::parse("metadata.labels[team-*]").unwrap();
        assert!(team.covers(&FieldPath::new(["metadata", "labels", "team-payments"])));
        assert!(!team.covers(&FieldPath::new(["metadata", "labels", "tier"])));

        let images = FieldPattern::parse("spec.template.spec.containers[*].image").unwrap();
        assert!(images.covers(&FieldPath::new([
            "spec",
            "template",
            "spec",
            "containers",
            "3",
            "image"
        ])));
        assert!(!images.covers(&FieldPath::new([
            "spec",
            "template",
            "spec",
            "containers",
            "3",
            "env"
        ])));
    }
}
