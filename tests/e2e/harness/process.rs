//! Child processes that cannot outlive the test binary.
//!
//! Safe Rust has no `prctl(PR_SET_PDEATHSIG)`, and a `static` is never dropped, so a process
//! started for the whole test binary would be left running when the binary exits (or is
//! killed). Each one therefore runs under a small `sh` guard whose stdin is a pipe from this
//! process: when the pipe closes -- an explicit [`Guarded::stop`], or the test binary exiting
//! for any reason, panics and SIGKILL included -- the guard sends the process SIGTERM (SIGKILL
//! if it has not exited after a grace period), waits for it, and removes its scratch directory. The guard also exits when the process does, so
//! [`Guarded::exited`] tells whether it is still running.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// `sh -c GUARD guard DIR GRACE PROGRAM ARGS...`
const GUARD: &str = r#"
dir=$1; grace=$2; shift 2
"$@" &
pid=$!
exec 3<&0
( read _ <&3; kill $pid 2>/dev/null; sleep $grace; kill -9 $pid 2>/dev/null ) &
watcher=$!
exec 3<&- 0</dev/null
trap 'kill $pid 2>/dev/null' INT TERM HUP
wait $pid; status=$?
while kill -0 $pid 2>/dev/null; do wait $pid; status=$?; done
kill $watcher 2>/dev/null
if [ -n "$dir" ]; then rm -rf "$dir"; fi
exit $status
"#;

pub struct Guarded {
    name: String,
    guard: Child,
    stdin: Option<ChildStdin>,
    log: PathBuf,
}

impl Guarded {
    /// Starts `program args` with stdout and stderr written to `log`. `cleanup`, when given, is
    /// removed once the process has exited. Stopping sends SIGTERM, then SIGKILL after `grace`.
    pub fn spawn(
        name: &str,
        program: &Command,
        log: &Path,
        cleanup: Option<&Path>,
        grace: Duration,
    ) -> Guarded {
        let log_file =
            File::create(log).unwrap_or_else(|e| panic!("cannot create {}: {e}", log.display()));
        let mut guard = Command::new("sh");
        guard
            .arg("-c")
            .arg(GUARD)
            .arg("driftgate-e2e-guard")
            .arg(cleanup.unwrap_or(Path::new("")))
            .arg(grace.as_secs().max(1).to_string())
            .arg(program.get_program())
            .args(program.get_args())
            .stdin(Stdio::piped())
            .stdout(log_file.try_clone().expect("the log file handle clones"))
            .stderr(log_file);
        for (key, value) in program.get_envs() {
            match value {
                Some(value) => guard.env(key, value),
                None => guard.env_remove(key),
            };
        }
        if let Some(dir) = program.get_current_dir() {
            guard.current_dir(dir);
        }
        let mut guard = guard
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name} under sh: {e}"));
        let stdin = guard.stdin.take();
        Guarded {
            name: name.to_owned(),
            guard,
            stdin,
            log: log.to_owned(),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The last `lines` lines of the process's output.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// The process's own PID (not its guard's), for reading its CPU time and memory from
    /// /proc: the guard's child that is not the guard's own `sh` watcher. None once it has exited.
    pub fn pid(&self) -> Option<u32> {
        let guard = self.guard.id();
        let children =
            std::fs::read_to_string(format!("/proc/{guard}/task/{guard}/children")).ok()?;
        children
            .split_whitespace()
            .filter_map(|pid| pid.parse::<u32>().ok())
            .find(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/comm"))
                    .is_ok_and(|comm| comm.trim() != "sh")
            })
    }

    /// The exit status, once the process has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.guard.try_wait().ok().flatten()
    }

    /// Panics with the log tail if the process has exited.
    pub fn assert_running(&mut self) {
        if let Some(status) = self.exited() {
            panic!(
                "{} exited ({status}); the end of {}:\n{}",
                self.name,
                self.log.display(),
                self.log_tail(40)
            );
        }
    }

    /// SIGKILL to the process itself, as a crash would end it (nothing it does on SIGTERM
    /// happens), then waits up to 10 s for its guard to exit.
    pub fn kill(&mut self) {
        // The guard's children: the process and the guard's own stdin watcher.
        let _ = Command::new("pkill")
            .args(["-KILL", "-P", &self.guard.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.exited().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM (SIGKILL after the grace period given to [`Guarded::spawn`]), then waits up to
    /// `wait` for the process to exit and its directory to be removed.
    pub fn stop(&mut self, wait: Duration) {
        drop(self.stdin.take());
        let deadline = Instant::now() + wait;
        while Instant::now() < deadline {
            if self.exited().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.guard.kill();
        let _ = self.guard.wait();
    }
}
