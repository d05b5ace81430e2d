//! Policy reload: the policy path is polled (a ConfigMap mount swaps a `..data` symlink, which
//! file-event watchers often miss), and `SIGHUP` forces a reload. A valid new policy set replaces
//! the old one atomically; an invalid one is refused and the last good set keeps serving.
//!
//! Without a last good set (the policy was invalid from the start) there is nothing to decide
//! with: the process stays up, not ready, answers reviews 503 with the reason, and keeps
//! polling, so that fixing the file is the whole recovery (no crash loop to wait out).

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::metrics::{FILE_SOURCE, Metrics};
use driftgate_core::policy::{PolicyErrors, PolicySet};

/// Whether a valid policy set is deciding, and what is wrong with the source's current content.
#[derive(Debug, Default)]
pub struct PolicyStatus {
    state: ArcSwap<PolicyState>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct PolicyState {
    /// A valid set has been loaded (it may be older than the source's current content).
    serving: bool,
    /// The source's current content's problems, one `file:line: field: problem` a line; None
    /// when it loaded.
    problems: Option<String>,
}

impl PolicyStatus {
    /// The status of a set already loaded and valid (a caller that loaded it itself).
    pub fn valid() -> PolicyStatus {
        let status = PolicyStatus::default();
        status.loaded();
        status
    }

    /// Why no review can be decided: no valid policy has loaded yet, with the problems of
    /// the source's content. None once a valid set serves (even if a later edit was refused).
    pub fn unavailable(&self) -> Option<String> {
        let state = self.state.load();
        if state.serving {
            return None;
        }
        Some(
            state
                .problems
                .clone()
                .unwrap_or_else(|| "the policy has not been loaded yet".to_owned()),
        )
    }

    /// The problems of the source's current content, when it was refused.
    pub fn problems(&self) -> Option<String> {
        self.state.load().problems.clone()
    }

    fn loaded(&self) {
        self.state.store(Arc::new(PolicyState {
            serving: true,
            problems: None,
        }));
    }

    /// Records a refused content; returns whether a last good set keeps serving.
    fn refused(&self, errors: &PolicyErrors) -> bool {
        let serving = self.state.load().serving;
        self.state.store(Arc::new(PolicyState {
            serving,
            problems: Some(errors.to_string()),
        }));
        serving
    }
}

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

/// Where the file source's valid sets go: straight to the active set, or (with GatePolicies
/// on) to [`super::gatepolicies::PolicySources`], which joins them with the objects' policies.
pub trait FilePolicies {
    fn store_files(&self, set: PolicySet);
}

impl FilePolicies for ArcSwap<PolicySet> {
    fn store_files(&self, set: PolicySet) {
        self.store(Arc::new(set));
    }
}

impl<P: FilePolicies + ?Sized> FilePolicies for Arc<P> {
    fn store_files(&self, set: PolicySet) {
        P::store_files(self, set);
    }
}

/// Loads the policies now and swaps them in when valid, recording the outcome in `status`.
/// Returns the errors of a refused load.
pub fn reload_now<P: FilePolicies + ?Sized>(
    path: &Path,
    policies: &P,
    status: &PolicyStatus,
    metrics: &Metrics,
) -> Result<usize, PolicyErrors> {
    match PolicySet::load(path) {
        Ok(set) => {
            let count = set.policies().len();
            policies.store_files(set);
            status.loaded();
            metrics.set_policy_valid(FILE_SOURCE, true);
            Metrics::count_result(&metrics.policy_reloads, true);
            metrics
                .policy_last_reload
                .set(jiff::Timestamp::now().as_millisecond() as f64 / 1000.0);
            tracing::info!(path = %path.display(), policies = count, "policy loaded");
            Ok(count)
        }
        Err(errors) => {
            let serving = status.refused(&errors);
            metrics.set_policy_valid(FILE_SOURCE, false);
            Metrics::count_result(&metrics.policy_reloads, false);
            let outcome = if serving {
                "policy reload refused; the last good policy keeps serving"
            } else {
                "policy refused and no valid policy loaded yet: not ready, reviews are answered 503 until the policy is fixed"
            };
            for error in &errors.0 {
                tracing::error!(
                    file = %error.file,
                    line = error.line,
                    field = %error.field,
                    problem = %error.problem,
                    "{outcome}"
                );
            }
            Err(errors)
        }
    }
}

/// The policy path and what it held when it was last loaded, so that the reloader sees every
/// later change (a fix made while `serve` was still starting included).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    path: PathBuf,
    fingerprint: u64,
}

/// The first load, at start. A refused policy does not stop `serve`: see the module's comment.
pub fn load_at_start<P: FilePolicies + ?Sized>(
    path: PathBuf,
    policies: &P,
    status: &PolicyStatus,
    metrics: &Metrics,
) -> Seen {
    // Fingerprinted before it is read: a change in between is then loaded again, never missed.
    let fingerprint = fingerprint(&path);
    let _ = reload_now(&path, policies, status, metrics);
    Seen { path, fingerprint }
}

/// Polls the path every `interval` and reloads on a change since `seen`; `force` (signalled on
/// SIGHUP) reloads even when nothing changed. A refused content is not retried until it
/// changes again.
pub fn spawn_policy_reloader<P: FilePolicies + Send + Sync + ?Sized + 'static>(
    seen: Seen,
    policies: Arc<P>,
    status: Arc<PolicyStatus>,
    interval: Duration,
    force: Arc<Notify>,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let Seen {
            path,
            fingerprint: mut last,
        } = seen;
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
            let _ = reload_now(&path, policies.as_ref(), &status, &metrics);
        }
    })
}
