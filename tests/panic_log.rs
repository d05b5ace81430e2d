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
