//! `serve`'s log writer: a line is appended to a queue by the thread that logs it, and a thread
//! of its own writes the queue out in batches, on a timer.
//!
//! Why not a channel with a line per message (tracing-appender's `non_blocking`, used before):
//! its thread sleeps on the channel, so every review's line woke it, and at 2,000 reviews a
//! second that was 2,000 wake-ups and 2,000 writes to stderr, a tenth of the server's CPU. On a
//! machine of two cores the woken thread also took the core from a worker answering a review,
//! which shows in the p99. Here a line wakes the writer only when the queue was empty (the
//! writer sleeps with no timer then, so an idle pod wakes nobody) or is half full (a burst that
//! would otherwise be dropped); while lines wait, the writer writes them every
//! [`FLUSH_INTERVAL`] in one call. A stalled stderr still holds no review: lines beyond the
//! queue's limit are dropped and counted, as before.

use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// How long a line may wait before it is written: short beside a person reading `kubectl logs`,
/// long beside 2,000 reviews a second (about a hundred lines a write).
pub const FLUSH_INTERVAL: Duration = Duration::from_millis(50);

/// How long dropping the [`LogQueue`]'s guard waits for the lines still queued to be written.
const CLOSE_WAIT: Duration = Duration::from_secs(1);

/// How many lines were dropped because the queue was full; read at each metrics scrape.
#[derive(Clone, Debug, Default)]
pub struct DroppedLines(Arc<AtomicUsize>);

impl DroppedLines {
    pub fn get(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }
}

/// The lines waiting to be written.
#[derive(Default)]
struct Queued {
    bytes: Vec<u8>,
    lines: usize,
    /// The writer was asked to write before its timer: the queue is half full.
    woken: bool,
    closing: bool,
}

struct Shared {
    queued: Mutex<Queued>,
    wake: Condvar,
    limit_lines: usize,
    interval: Duration,
    dropped: DroppedLines,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queued> {
        // A thread that panicked while appending left whole bytes at worst: keep logging.
        self.queued.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `bytes` (one or more whole lines, as a formatter writes them), or drops and
    /// counts them when `limit_lines` are already waiting.
    fn append(&self, bytes: &[u8]) {
        let lines = bytes.iter().filter(|&&b| b == b'\n').count();
        let mut queued = self.lock();
        if queued.lines >= self.limit_lines {
            drop(queued);
            self.dropped.0.fetch_add(lines.max(1), Ordering::Relaxed);
            return;
        }
        // Only the writer empties the queue, and it sleeps with no timer while it is empty: the
        // first line after that wakes it (a wake-up while it writes is lost, and harmless).
        let first_since_idle = queued.bytes.is_empty();
        queued.bytes.extend_from_slice(bytes);
        queued.lines += lines;
        let half_full = !queued.woken && queued.lines * 2 >= self.limit_lines;
        queued.woken |= half_full;
        drop(queued);
        if half_full || first_since_idle {
            self.wake.notify_one();
        }
    }
}

/// The writing end (`fmt().with_writer(move || queue.clone())`): cheap to clone, and each write
/// is queued whole.
#[derive(Clone)]
pub struct LogQueue {
    shared: Arc<Shared>,
}

impl LogQueue {
    /// Starts the writer thread, named `thread_name`, writing to `out` every `interval`
    /// ([`FLUSH_INTERVAL`] for `serve`); at most `limit_lines` lines wait (at least one). The
    /// guard writes out what is queued when dropped.
    pub fn start<W: Write + Send + 'static>(
        out: W,
        limit_lines: usize,
        interval: Duration,
        thread_name: &str,
    ) -> std::io::Result<(LogQueue, LogQueueGuard)> {
        let shared = Arc::new(Shared {
            queued: Mutex::new(Queued::default()),
            wake: Condvar::new(),
            limit_lines: limit_lines.max(1),
            interval,
            dropped: DroppedLines::default(),
        });
        let (closed, on_close) = std::sync::mpsc::channel();
        let writer = shared.clone();
        std::thread::Builder::new()
            .name(thread_name.to_owned())
            .spawn(move || {
                write_until_closed(&writer, out);
                let _ = closed.send(());
            })?;
        let guard = LogQueueGuard {
            shared: shared.clone(),
            on_close,
        };
        Ok((LogQueue { shared }, guard))
    }

    /// The count of dropped lines, for `driftgate_log_lines_dropped_total`.
    pub fn dropped(&self) -> DroppedLines {
        self.shared.dropped.clone()
    }
}

/// The writer thread: sleeps until a line comes, then lets lines gather for an interval (less
/// when woken) and writes them in one call, outside the lock (a stalled stderr holds the
/// writer, never a line's author).
fn write_until_closed<W: Write>(shared: &Shared, mut out: W) {
    let mut batch = Vec::new();
    loop {
        let mut queued = shared.lock();
        while queued.bytes.is_empty() && !queued.closing {
            queued = shared
                .wake
                .wait(queued)
                .unwrap_or_else(PoisonError::into_inner);
        }
        if !queued.woken && !queued.closing {
            queued = shared
                .wake
                .wait_timeout(queued, shared.interval)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        // Swapped, so that both buffers keep their capacity from batch to batch.
        std::mem::swap(&mut batch, &mut queued.bytes);
        queued.lines = 0;
        queued.woken = false;
        let closing = queued.closing;
        drop(queued);
        if !batch.is_empty() {
            // Nowhere to report a failed write of the log but the log: the lines are lost.
            let _ = out.write_all(&batch).and_then(|()| out.flush());
            batch.clear();
        }
        if closing {
            return;
        }
    }
}

impl Write for LogQueue {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.shared.append(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Writes out the lines still queued when dropped, waiting for at most a second (a stalled
/// stderr must not hold the process's exit).
#[must_use = "dropping the guard stops the writing of log lines"]
pub struct LogQueueGuard {
    shared: Arc<Shared>,
    on_close: std::sync::mpsc::Receiver<()>,
}

impl Drop for LogQueueGuard {
    fn drop(&mut self) {
        self.shared.lock().closing = true;
        self.shared.wake.notify_one();
        let _ = self.on_close.recv_timeout(CLOSE_WAIT);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::sync::mpsc;

    /// A timer that never fires within a test; a short one; and how long a test waits for what
    /// should come at once (long, so that a loaded machine does not fail it).
    const LONG: Duration = Duration::from_secs(3600);
    const SHORT: Duration = Duration::from_millis(10);
    const WAIT: Duration = Duration::from_secs(10);

    /// An output that collects what is written, and tells each write.
    #[derive(Clone)]
    struct Collected(Arc<Mutex<Vec<u8>>>, mpsc::Sender<usize>);

    impl Write for Collected {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            let _ = self.1.send(bytes.len());
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// An output whose writes block until the test lets them go (drops the sender).
    pub(crate) struct Stalled(pub(crate) mpsc::Receiver<()>);

    impl Write for Stalled {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            let _ = self.0.recv();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn lines_are_written_in_order_in_one_batch_and_none_is_lost_on_close() {
        let text = Arc::new(Mutex::new(Vec::new()));
        let (told, writes) = mpsc::channel();
        let (mut queue, guard) =
            LogQueue::start(Collected(text.clone(), told), 1000, LONG, "test-log").unwrap();
        for i in 0..100 {
            queue.write_all(format!("line {i}\n").as_bytes()).unwrap();
        }
        drop(guard);
        let expected: String = (0..100).map(|i| format!("line {i}\n")).collect();
        assert_eq!(
            String::from_utf8(text.lock().unwrap().clone()).unwrap(),
            expected
        );
        // Nothing woke the writer before the close: one write.
        let writes: Vec<usize> = writes.try_iter().collect();
        assert_eq!(writes, [expected.len()]);
        assert_eq!(queue.dropped().get(), 0);
    }

    #[test]
    fn a_line_is_written_on_the_timer_without_a_wake_up() {
        let text = Arc::new(Mutex::new(Vec::new()));
        let (told, writes) = mpsc::channel();
        let (mut queue, _guard) =
            LogQueue::start(Collected(text.clone(), told), 1000, SHORT, "test-log").unwrap();
        queue.write_all(b"one line\n").unwrap();
        // Far below half the limit: nothing wakes the writer, its timer does.
        let written = writes.recv_timeout(WAIT).expect("written");
        assert_eq!(written, 9);
        assert_eq!(&*text.lock().unwrap(), b"one line\n");
    }

    /// With nothing to write, the writer sleeps until a line comes: an idle pod's log thread
    /// wakes nobody (with a timer of 10 ms it would wake about 30 times here).
    #[cfg(target_os = "linux")]
    #[test]
    fn an_idle_writer_sleeps_until_a_line_comes() {
        let (told, writes) = mpsc::channel();
        let (mut queue, _guard) =
            LogQueue::start(Collected(Arc::default(), told), 1000, SHORT, "idle-log").unwrap();
        let wake_ups = || -> u64 {
            let task = std::fs::read_dir("/proc/self/task")
                .unwrap()
                .map(|t| t.unwrap().path())
                .find(|t| std::fs::read_to_string(t.join("comm")).unwrap() == "idle-log\n")
                .expect("the writer thread");
            let status = std::fs::read_to_string(task.join("status")).unwrap();
            let line = status
                .lines()
                .find(|l| l.starts_with("voluntary_ctxt_switches:"))
                .unwrap();
            line.split_whitespace().nth(1).unwrap().parse().unwrap()
        };
        std::thread::sleep(SHORT * 3);
        let before = wake_ups();
        std::thread::sleep(SHORT * 30);
        let idle = wake_ups() - before;
        assert!(idle <= 2, "the idle writer woke {idle} times");
        queue.write_all(b"one line\n").unwrap();
        assert_eq!(writes.recv_timeout(WAIT).unwrap(), 9);
    }

    #[test]
    fn a_stalled_output_holds_no_writer_and_lines_beyond_the_limit_are_counted() {
        let (release, stalled) = mpsc::channel();
        let (mut queue, guard) = LogQueue::start(Stalled(stalled), 4, SHORT, "test-log").unwrap();
        // The writer takes what queued and stalls writing it; then the queue fills.
        queue.write_all(b"first\n").unwrap();
        std::thread::sleep(SHORT * 20);
        for i in 0..10 {
            queue.write_all(format!("line {i}\n").as_bytes()).unwrap();
        }
        assert_eq!(queue.dropped().get(), 6, "4 queued, 6 dropped");
        drop(release);
        drop(guard);
    }

    #[test]
    fn half_the_limit_wakes_the_writer_before_its_timer() {
        let text = Arc::new(Mutex::new(Vec::new()));
        let (told, writes) = mpsc::channel();
        let (mut queue, _guard) =
            LogQueue::start(Collected(text, told), 8, LONG, "test-log").unwrap();
        queue.write_all(b"a\nb\nc\n").unwrap();
        assert!(
            writes.recv_timeout(SHORT * 10).is_err(),
            "a quarter full waits for the timer"
        );
        queue.write_all(b"d\n").unwrap();
        assert_eq!(writes.recv_timeout(WAIT).unwrap(), 8);
    }
}
