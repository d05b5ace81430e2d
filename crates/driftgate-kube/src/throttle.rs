//! Rate limiting for repeated warnings, so a failing API server produces one log line a minute
//! rather than one per admission review.

use std::time::Duration;

use tokio::time::Instant;

/// How often a repeated failure is logged at warn level; the failures in between are counted and
/// reported with the next warning.
pub(crate) const WARN_INTERVAL: Duration = Duration::from_secs(60);

/// Decides whether a repeated failure should be logged now.
#[derive(Debug, Default)]
pub struct Throttle {
    last_warned: Option<Instant>,
    suppressed: u64,
    failing: bool,
}

impl Throttle {
    /// Records a failure. `Some(n)`: log it now, mentioning the `n` failures not logged since the
    /// last warning. `None`: stay quiet (at most debug level).
    pub fn failure(&mut self) -> Option<u64> {
        let now = Instant::now();
        self.failing = true;
        match self.last_warned {
            Some(at) if now.duration_since(at) < WARN_INTERVAL => {
                self.suppressed += 1;
                None
            }
            _ => {
                self.last_warned = Some(now);
                Some(std::mem::take(&mut self.suppressed))
            }
        }
    }

    /// Records a success. True when it ends a run of failures, which is worth saying once.
    pub fn success(&mut self) -> bool {
        let recovered = self.failing;
        self.failing = false;
        self.suppressed = 0;
        self.last_warned = None;
        recovered
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn warns_once_a_minute_and_counts_the_rest() {
        let mut throttle = Throttle::default();
        assert_eq!(throttle.failure(), Some(0));
        for _ in 0..99 {
            assert_eq!(throttle.failure(), None);
        }
        tokio::time::advance(WARN_INTERVAL).await;
        assert_eq!(throttle.failure(), Some(99));
        assert!(throttle.success());
        assert!(!throttle.success());
        assert_eq!(
            throttle.failure(),
            Some(0),
            "a new run of failures warns at once"
        );
    }
}
