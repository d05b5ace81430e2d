//! Field paths: how policies name parts of an object, and how diffs report them.
//!
//! A path is dotted (`spec.replicas`); a map key that itself contains dots or slashes goes in
//! brackets (`metadata.annotations[deployment.kubernetes.io/revision]`), and so does a list
//! index (`spec.template.spec.containers[0].image`). In a policy, any segment may be a glob
//! (`metadata.labels[team-*]`, `spec.template.spec.containers[*].image`).
//!
//! Any key can be written, so that the paths kept in backport records read back as the keys
//! they name: inside brackets a `]` is doubled (`spec.rules[a]]b]` is the key `a]b`) and every
//! other character, `[` included, is itself. A doubled `]` never occurred in a path before (a
//! `]` closing a bracket must be followed by `.`, `[` or the end), so every path written
//! earlier reads as it did.

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
                write!(f, "[{}]", segment.replace(']', "]]"))?;
            }
        }
        Ok(())
    }
}

/// Splits `a.b[c.d/e][0].f` into `["a", "b", "c.d/e", "0", "f"]`, and `a[b]]c]` into
/// `["a", "b]c"]`.
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
                while let Some((_, c)) = chars.next() {
                    if c == ']' {
                        // A `]` after a closing one would be an error: doubled, it is the key's.
                        if chars.next_if(|&(_, next)| next == ']').is_none() {
                            closed = true;
                            break;
                        }
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

    /// Issue 24, section 7: a custom resource's key may hold brackets; its path reads back as
    /// the key, and every path written before the doubled `]` reads as it did.
    #[test]
    fn keys_with_brackets_round_trip_and_earlier_paths_read_as_before() {
        for key in ["a]b", "a[b", "]", "[", "a]", "[0]", "]]", "", "a.b\\]"] {
            let path = FieldPath::new(["spec", "rules", key]);
            let text = path.to_string();
            assert_eq!(FieldPath::parse(&text), Ok(path), "{key:?} as {text:?}");
        }
        assert_eq!(
            FieldPath::new(["spec", "a]b", "c"]).to_string(),
            "spec[a]]b].c"
        );
        // Written before: a backslash, and every other character, is itself.
        for (earlier, segments) in [
            ("data[a\\b]", &["data", "a\\b"][..]),
            ("data[a\\].x", &["data", "a\\", "x"][..]),
            ("data[]", &["data", ""][..]),
            ("a[b.c/d][0].e", &["a", "b.c/d", "0", "e"][..]),
        ] {
            assert_eq!(FieldPath::parse(earlier).unwrap().0, segments, "{earlier}");
        }
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
