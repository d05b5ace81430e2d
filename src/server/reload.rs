//! Policy reload: the policy path is polled (a ConfigMap mount swaps a `..data` symlink, which
//! file-event watchers often miss), and `SIGHUP` forces a reload. A valid new policy set replaces
//! the old one atomically; an invalid one is refused and the last good set keeps serving.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use crate::policy::{PolicyErrors, PolicySet};

/// What the policy path holds now: every candidate file's name and content, hashed. Reading
/// contents (not mtimes) sees a symlink swap and an edit in place alike.
fn fingerprint(path: &Path) -> u64 {
    let mut hasher = DefaultHasher::new();
    let mut files = Vec::new();
    if path.is_dir() {
        if let Ok(entries) = std::fs::read_dir(path) {
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                if !name.starts_with('.') && (name.ends_with(".yaml") || name.ends_with(".yml")) {
                    files.push(entry.path());
                }
            }
        }
    } else {
        files.push(path.to_path_buf());
    }
    files.sort();
    for file in files {
        file.hash(&mut hasher);
        match std::fs::read(&file) {
            Ok(bytes) => bytes.hash(&mut hasher),
            Err(error) => error.kind().hash(&mut hasher),
        }
    }
    hasher.finish()
}

/// Loads the policies now and swaps them in when valid. Returns the errors of a refused load.
pub fn reload_now(
    path: &Path,
    policies: &ArcSwap<PolicySet>,
    metrics: &Metrics,
) -> Result<usize, PolicyErrors> {
    match PolicySet::load(path) {
        Ok(set) => {
            let count = set.policies().len();
            policies.store(Arc::new(set));
            Metrics::count_result(&metrics.policy_reloads, true);
            metrics
                .policy_last_reload
                .set(jiff::Timestamp::now().as_millisecond() as f64 / 1000.0);
            tracing::info!(path = %path.display(), policies = count, "policy loaded");
            Ok(count)
        }
        Err(errors) => {
            Metrics::count_result(&metrics.policy_reloads, false);
            for error in &errors.0 {
                tracing::error!(
                    file = %error.file,
                    line = error.line,
                    field = %error.field,
                    problem = %error.problem,
                    "policy reload refused; the last good policy keeps serving"
                );
            }
            Err(errors)
        }
    }
}

/// Polls `path` every `interval` and reloads on change; `force` (signalled on SIGHUP) reloads
/// even when nothing changed. A refused content is not retried until it changes again.
pub fn spawn_policy_reloader(
    path: PathBuf,
    policies: Arc<ArcSwap<PolicySet>>,
    interval: Duration,
    force: Arc<Notify>,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut last = fingerprint(&path);
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let forced = tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = ticker.tick() => false,
                _ = force.notified() => true,
            };
            let current = fingerprint(&path);
            if !forced && current == last {
                continue;
            }
            last = current;
            let _ = reload_now(&path, &policies, &metrics);
        }
    })
}
