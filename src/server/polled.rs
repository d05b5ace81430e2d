//! Files polled for changes, for the reloaders of certificate files (the serving pair in
//! `tls`, the client CAs in `client_auth`): what one poll calls for, and the ticker and read
//! they share. Its own module, so that neither reloader imports the other for it.

use std::path::Path;
use std::time::Duration;

use driftgate_core::error::Error as CoreError;
use tokio::time::MissedTickBehavior;

use crate::error::Result;

/// The file at `path`, read without blocking the runtime.
pub(crate) async fn read_async(path: &Path) -> Result<Vec<u8>> {
    let read = tokio::fs::read(path)
        .await
        .map_err(|source| CoreError::Read {
            path: path.to_owned(),
            source,
        });
    Ok(read?)
}

/// A polled source's memory, for the reloaders of certificate files: what is serving, what was
/// refused, what is settling. `S` is what one poll read.
#[derive(Debug)]
pub(crate) struct Polled<S> {
    /// The contents in force; None when they have never loaded.
    serving: Option<S>,
    /// Contents already refused, so a bad file is logged and counted once, not every poll.
    refused: Option<S>,
    /// Contents seen once and not yet acted on. A change is applied only when two polls in a
    /// row agree, so a writer that replaces files one after the other is not caught halfway
    /// (a new certificate with the old key) and reported as a failed reload.
    settling: Option<S>,
}

/// What one poll calls for.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Poll<S> {
    /// Nothing new: what is serving, or what was refused already.
    Unchanged,
    /// A change seen for the first time; acted on if the next poll agrees.
    Changed,
    /// A change two polls agree on: load it, then report [`Polled::loaded`] or
    /// [`Polled::refused`].
    Stable(S),
}

impl<S: PartialEq> Polled<S> {
    pub(crate) fn new() -> Self {
        Polled {
            serving: None,
            refused: None,
            settling: None,
        }
    }

    pub(crate) fn observe(&mut self, snapshot: S) -> Poll<S> {
        if self.serving.as_ref() == Some(&snapshot) {
            // Unchanged, or changed back to what is serving: nothing to do, nothing pending.
            self.settling = None;
            self.refused = None;
            return Poll::Unchanged;
        }
        if self.refused.as_ref() == Some(&snapshot) {
            self.settling = None;
            return Poll::Unchanged;
        }
        if self.settling.as_ref() != Some(&snapshot) {
            self.settling = Some(snapshot);
            return Poll::Changed;
        }
        self.settling = None;
        Poll::Stable(snapshot)
    }

    /// `snapshot` is in force now.
    pub(crate) fn loaded(&mut self, snapshot: S) {
        self.serving = Some(snapshot);
        self.refused = None;
    }

    /// `snapshot` was refused; it is not tried again until the contents change.
    pub(crate) fn refused(&mut self, snapshot: S) {
        self.refused = Some(snapshot);
    }

    /// At start, contents that did not load: left to the polls, which refuse them only if they
    /// stay that way.
    pub(crate) fn pending(&mut self, snapshot: S) {
        self.settling = Some(snapshot);
    }
}

/// The ticker of a file poll every `interval`.
pub(crate) fn poll_ticker(interval: Duration) -> tokio::time::Interval {
    // tokio's interval panics on zero; a busy loop would be no better.
    let mut ticker = tokio::time::interval(interval.max(Duration::from_millis(10)));
    // After a stall, poll once rather than in a burst.
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    ticker
}
