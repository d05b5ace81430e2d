//! Scratch directories for tests, shared so every test crate cleans up the same way.

use tempfile::TempDir;

/// A fresh directory under Cargo's per-target scratch space, removed when dropped; `name` (with
/// a random suffix) says which test left it, should a crash keep it.
pub fn scratch_dir(name: &str) -> TempDir {
    tempfile::Builder::new()
        .prefix(&format!("{name}-"))
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap_or_else(|e| {
            panic!(
                "cannot create a scratch directory for {name} in {}: {e}",
                env!("CARGO_TARGET_TMPDIR")
            )
        })
}
