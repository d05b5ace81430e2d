//! Glob lists of a policy (namespaces, kinds) compiled once: a leaf, so that the policy and its
//! suspension rules share it without importing each other.

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};

/// The globs of `patterns` as one set; a pattern that is not a glob is named in the error.
pub(super) fn compile_globs(patterns: &[&str]) -> Result<GlobSet, String> {
    let mut builder = GlobSetBuilder::new();
    for pattern in patterns {
        let glob = GlobBuilder::new(pattern)
            .literal_separator(false)
            .build()
            .map_err(|error| format!("\"{pattern}\" is not a valid glob: {}", error.kind()))?;
        builder.add(glob);
    }
    builder.build().map_err(|error| error.to_string())
}
