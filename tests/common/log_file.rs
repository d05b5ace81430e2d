//! Reading a driftgate's log file from a test. driftgate writes its log on a thread of its own,
//! in batches (`log_queue::FLUSH_INTERVAL` apart), off the request path: a review's line
//! reaches the file a moment after its answer, so a test that reads the log straight after an
//! answer waits for the file to stop growing first.

use std::path::Path;
use std::time::{Duration, Instant};

use driftgate::log_queue::FLUSH_INTERVAL;

/// Waits (up to 3 s) until `path` has not grown for four of the log writer's intervals.
pub fn wait_for_quiet_file(path: &Path) {
    let size = || std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    let quiet = FLUSH_INTERVAL * 4;
    let deadline = Instant::now() + Duration::from_secs(3);
    let (mut last, mut since) = (size(), Instant::now());
    while Instant::now() < deadline {
        std::thread::sleep(FLUSH_INTERVAL / 2);
        let now = size();
        if now != last {
            (last, since) = (now, Instant::now());
        } else if since.elapsed() >= quiet {
            return;
        }
    }
}
