//! Text from requests, made safe to echo in messages, warnings and logs.
//!
//! Usernames, reasons, field managers and names come from clients. Echoed raw, a newline forges
//! a second log line, an escape sequence rewrites a terminal, and 200,000 characters push the
//! instruction that matters out of a warning (the API server drops warnings with control
//! characters and truncates long ones). Every piece of request text that driftgate repeats goes
//! through [`echo`], and every warning through [`warning`].

use std::borrow::Cow;
use std::fmt::Write;

/// At most this many characters of a username, group, field manager or object name.
pub const MAX_NAME_CHARS: usize = 128;
/// At most this many characters of a break-glass reason in a message or warning.
pub const MAX_REASON_CHARS: usize = 120;
/// The API server keeps warnings of at most this many characters.
pub const MAX_WARNING_CHARS: usize = 256;

/// `text` with control characters escaped (`\n`, `\u{1b}`) and cut to `max` characters, with
/// `…` where it was cut. Borrowed when nothing needed changing.
pub fn echo(text: &str, max: usize) -> Cow<'_, str> {
    let clean = !text.chars().any(char::is_control);
    if clean && text.chars().nth(max).is_none() {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len().min(max * 2));
    let mut count = 0;
    for c in text.chars() {
        let before = out.len();
        if c.is_control() {
            // `escape_debug` writes \n, \t, \u{1b}: visible, and free of control characters.
            let _ = write!(out, "{}", c.escape_debug());
        } else {
            out.push(c);
        }
        count += out[before..].chars().count();
        if count > max {
            out.truncate(before);
            out.push('…');
            break;
        }
    }
    Cow::Owned(out)
}

/// A warning as the API server will keep it: no control characters, at most
/// [`MAX_WARNING_CHARS`], cut with `…`. Put what the reader must do first.
pub fn warning(text: String) -> String {
    match echo(&text, MAX_WARNING_CHARS - 1) {
        Cow::Borrowed(_) => text,
        Cow::Owned(cut) => cut,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_is_borrowed() {
        assert!(matches!(echo("alice", 10), Cow::Borrowed("alice")));
    }

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(echo("bob\nuser=admin", 64), "bob\\nuser=admin");
        assert_eq!(echo("x\u{1b}[2J", 64), "x\\u{1b}[2J");
    }

    #[test]
    fn long_text_is_cut_on_a_character_boundary() {
        let long = "é".repeat(1000);
        let cut = echo(&long, 10);
        assert_eq!(cut.chars().count(), 11);
        assert!(cut.ends_with('…'));
        let newlines = "\n".repeat(100);
        let escaped = echo(&newlines, 5);
        assert_eq!(escaped, "\\n\\n…");
    }

    #[test]
    fn warnings_fit_the_api_servers_limit() {
        let w = warning(format!("backport it to Git: {}", "r".repeat(200_000)));
        assert!(w.chars().count() <= MAX_WARNING_CHARS);
        assert!(w.starts_with("backport it to Git"));
        assert!(!w.chars().any(char::is_control));
    }
}
