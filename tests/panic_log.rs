//! With `--log-format json`, a panic is one JSON log line, not Rust's text report (its own test
//! binary: the panic hook and the log's subscriber are global to the process).

#[path = "common/captured_log.rs"]
mod captured_log;

use captured_log::Captured;
use driftgate::serve::{LogFormat, log_panics};
use serde_json::Value;

#[test]
fn a_panic_is_one_json_log_line_naming_the_message_place_and_thread() {
    let captured = Captured::default();
    let writer = captured.clone();
    tracing_subscriber::fmt()
        .json()
        .flatten_event(true)
        .with_writer(move || writer.clone())
        .init();
    log_panics(LogFormat::Json);

    let thread = std::thread::Builder::new()
        .name("review-worker".into())
        .spawn(|| panic!("the policy {} vanished mid-review", "production"))
        .unwrap();
    assert!(thread.join().is_err(), "the thread panicked");

    let text = captured.text();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1, "one line, not a text report:\n{text}");
    let line: Value = serde_json::from_str(lines[0]).expect("the line is JSON");
    assert_eq!(line["level"], "ERROR", "{line}");
    assert_eq!(line["message"], "a thread panicked", "{line}");
    assert_eq!(
        line["panic"], "the policy production vanished mid-review",
        "{line}"
    );
    assert_eq!(line["thread"], "review-worker", "{line}");
    let location = line["location"].as_str().unwrap();
    assert!(location.starts_with("tests/panic_log.rs:"), "{line}");
}

/// `serve`'s own logging, as `driftgate serve --log-format json` sets it up, in a child
/// process of this test (the hook and subscriber are global): its stderr holds the panic as
/// one JSON line and no text report.
#[test]
fn serve_logging_in_json_reports_a_panic_on_stderr_as_one_json_line() {
    const CHILD: &str = "DRIFTGATE_PANIC_LOG_CHILD";
    const NAME: &str = "serve_logging_in_json_reports_a_panic_on_stderr_as_one_json_line";
    if std::env::var_os(CHILD).is_some() {
        let log = driftgate::serve::init_logging(LogFormat::Json, 64).unwrap();
        let thread = std::thread::Builder::new()
            .name("review-worker".into())
            .spawn(|| panic!("the policy vanished"))
            .unwrap();
        assert!(thread.join().is_err());
        drop(log);
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([NAME, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        !stderr.contains("panicked at"),
        "Rust's text report:\n{stderr}"
    );
    let panics: Vec<Value> = stderr
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|line| line["message"] == "a thread panicked")
        .collect();
    assert_eq!(panics.len(), 1, "{stderr}");
    assert_eq!(panics[0]["panic"], "the policy vanished", "{stderr}");
    assert_eq!(panics[0]["thread"], "review-worker", "{stderr}");
}
