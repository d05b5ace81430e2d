//! The time formats driftgate reads: break-glass expiries in label values, durations in
//! policies and `break-glass open --for` (strict: whole units, d/h/m/s), and the durations of
//! `serve`'s flags (jiff's friendly format: `500ms`, `1.5s`, `2m`, `30d`).

use std::fmt;
use std::time::Duration;

use jiff::{SignedDuration, Span, SpanRelativeTo, Timestamp, civil::DateTime, tz::Offset};

/// Why a break-glass label value is not an expiry.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "\"{value}\" is not an expiry in UTC basic format such as 20261130T0930Z or 20261130T093015Z ({problem})"
)]
pub struct ExpiryError {
    pub value: String,
    pub problem: &'static str,
}

/// Parses a break-glass label value: the expiry in UTC, ISO 8601 basic format, `YYYYMMDDTHHMMZ`
/// or `YYYYMMDDTHHMMSSZ`. Label values cannot hold `:`, so the extended format cannot be used.
/// Anything around the timestamp (spaces, junk) is refused: a label is either exact or invalid.
pub fn parse_expiry(value: &str) -> Result<Timestamp, ExpiryError> {
    let fail = |problem| ExpiryError {
        value: value.to_owned(),
        problem,
    };
    let bytes = value.as_bytes();
    let has_seconds = match bytes.len() {
        14 => false,
        16 => true,
        _ => return Err(fail("wrong length")),
    };
    if bytes[8] != b'T' || bytes[bytes.len() - 1] != b'Z' {
        return Err(fail("expected 'T' after the date and 'Z' at the end"));
    }
    let digits = |range: std::ops::Range<usize>| -> Result<i32, ExpiryError> {
        let part = &bytes[range];
        if !part.iter().all(u8::is_ascii_digit) {
            return Err(fail("expected digits"));
        }
        Ok(part
            .iter()
            .fold(0i32, |acc, digit| acc * 10 + i32::from(digit - b'0')))
    };
    let year = digits(0..4)?;
    let month = digits(4..6)?;
    let day = digits(6..8)?;
    let hour = digits(9..11)?;
    let minute = digits(11..13)?;
    let second = if has_seconds { digits(13..15)? } else { 0 };
    // All parts are at most four digits, so the narrowing casts cannot truncate.
    let datetime = DateTime::new(
        year as i16,
        month as i8,
        day as i8,
        hour as i8,
        minute as i8,
        second as i8,
        0,
    )
    .map_err(|_| fail("not a calendar date and time"))?;
    Offset::UTC
        .to_timestamp(datetime)
        .map_err(|_| fail("out of range"))
}

/// Formats an expiry as a label value; seconds are written only when they are not zero.
pub fn format_expiry(expiry: Timestamp) -> String {
    let dt = Offset::UTC.to_datetime(expiry);
    if dt.second() == 0 {
        format!(
            "{:04}{:02}{:02}T{:02}{:02}Z",
            dt.year(),
            dt.month(),
            dt.day(),
            dt.hour(),
            dt.minute()
        )
    } else {
        format!(
            "{:04}{:02}{:02}T{:02}{:02}{:02}Z",
            dt.year(),
            dt.month(),
            dt.day(),
            dt.hour(),
            dt.minute(),
            dt.second()
        )
    }
}

/// A positive duration as policies and the command line write it: `90m`, `4h`, `1h30m`, `45s`, `2d`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct WindowDuration(SignedDuration);

/// Why a duration could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "\"{value}\" is not a duration; write a number and a unit (d, h, m, s), such as 90m, 4h or 1h30m ({problem})"
)]
pub struct DurationError {
    pub value: String,
    pub problem: &'static str,
}

impl WindowDuration {
    pub fn parse(value: &str) -> Result<Self, DurationError> {
        let fail = |problem| DurationError {
            value: value.to_owned(),
            problem,
        };
        if value.is_empty() {
            return Err(fail("empty"));
        }
        let mut total: i64 = 0;
        let mut number: Option<i64> = None;
        for c in value.chars() {
            if let Some(digit) = c.to_digit(10) {
                let next = number
                    .unwrap_or(0)
                    .checked_mul(10)
                    .and_then(|n| n.checked_add(i64::from(digit)))
                    .ok_or_else(|| fail("too large"))?;
                number = Some(next);
                continue;
            }
            let unit = match c {
                'd' => 86_400,
                'h' => 3_600,
                'm' => 60,
                's' => 1,
                _ => return Err(fail("unknown unit")),
            };
            let n = number.take().ok_or_else(|| fail("a unit needs a number"))?;
            total = n
                .checked_mul(unit)
                .and_then(|seconds| total.checked_add(seconds))
                .ok_or_else(|| fail("too large"))?;
        }
        if number.is_some() {
            return Err(fail("a number needs a unit"));
        }
        if total == 0 {
            return Err(fail("must be longer than zero"));
        }
        // A window longer than a year is a mistake, and keeps timestamp arithmetic in range.
        if total > 366 * 86_400 {
            return Err(fail("longer than a year"));
        }
        Ok(WindowDuration(SignedDuration::from_secs(total)))
    }

    pub fn as_signed(self) -> SignedDuration {
        self.0
    }

    pub fn from_secs(seconds: i64) -> Self {
        WindowDuration(SignedDuration::from_secs(seconds))
    }
}

impl fmt::Display for WindowDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut rest = self.0.as_secs();
        for (unit, seconds) in [("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)] {
            if rest >= seconds {
                write!(f, "{}{unit}", rest / seconds)?;
                rest %= seconds;
            }
        }
        Ok(())
    }
}

/// Why a flag's value is not a duration it takes.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FlagDurationError {
    #[error(
        "\"{value}\" is not a duration ({problem}); write a number and a unit, such as 500ms, 1.5s, 2m, 4h or 30d"
    )]
    Unreadable { value: String, problem: String },
    #[error(
        "\"{value}\" counts in months or years, which have no fixed length; count in days or weeks, such as 30d"
    )]
    Calendar { value: String },
    #[error("\"{value}\" is negative; write a duration such as 10s")]
    Negative { value: String },
    #[error("\"{value}\" is longer than a year; write a year or less, such as 90d")]
    TooLong { value: String },
    #[error("\"{value}\" is zero, which means nothing for this flag; write a duration such as 10s")]
    Zero { value: String },
}

/// A flag's duration longer than this is a slip (and would overflow timestamp arithmetic).
const LONGEST_FLAG_DURATION: Duration = Duration::from_secs(366 * 86_400);

/// A flag's duration in jiff's friendly format (`500ms`, `1.5s`, `1h30m`, `30d`; days are 24
/// hours), zero included (`0` or `0s`), for flags whose zero means something.
pub fn flag_duration(value: &str) -> Result<Duration, FlagDurationError> {
    if value == "0" {
        return Ok(Duration::ZERO);
    }
    let unreadable = |error: jiff::Error| FlagDurationError::Unreadable {
        value: value.to_owned(),
        problem: friendly_problem(&error),
    };
    let span: Span = value.parse().map_err(unreadable)?;
    let signed = span
        .to_duration(SpanRelativeTo::days_are_24_hours())
        .map_err(|_| FlagDurationError::Calendar {
            value: value.to_owned(),
        })?;
    let duration = Duration::try_from(signed).map_err(|_| FlagDurationError::Negative {
        value: value.to_owned(),
    })?;
    if duration > LONGEST_FLAG_DURATION {
        return Err(FlagDurationError::TooLong {
            value: value.to_owned(),
        });
    }
    Ok(duration)
}

/// [`flag_duration`] for flags whose zero means nothing (an interval, a timeout, a validity).
pub fn positive_flag_duration(value: &str) -> Result<Duration, FlagDurationError> {
    match flag_duration(value)? {
        Duration::ZERO => Err(FlagDurationError::Zero {
            value: value.to_owned(),
        }),
        duration => Ok(duration),
    }
}

/// jiff's reason, without the prefix every friendly-format error shares.
fn friendly_problem(error: &jiff::Error) -> String {
    let text = error.to_string();
    let prefix = "failed to parse input in the \"friendly\" duration format: ";
    text.strip_prefix(prefix).unwrap_or(&text).to_owned()
}

/// A timestamp for people: `2026-11-30 09:30 UTC`.
pub fn human_utc(at: Timestamp) -> String {
    let dt = Offset::UTC.to_datetime(at);
    if dt.second() == 0 {
        format!("{} UTC", dt.strftime("%Y-%m-%d %H:%M"))
    } else {
        format!("{} UTC", dt.strftime("%Y-%m-%d %H:%M:%S"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiry_round_trips_both_forms() {
        let t = parse_expiry("20261130T0930Z").unwrap();
        assert_eq!(t.to_string(), "2026-11-30T09:30:00Z");
        assert_eq!(format_expiry(t), "20261130T0930Z");
        let t = parse_expiry("20261130T093015Z").unwrap();
        assert_eq!(t.to_string(), "2026-11-30T09:30:15Z");
        assert_eq!(format_expiry(t), "20261130T093015Z");
    }

    #[test]
    fn expiry_refuses_junk_and_impossible_dates() {
        for bad in [
            "",
            "20261130T0930",
            " 20261130T0930Z",
            "20261130T0930Zx",
            "2026-11-30T09:30Z",
            "20261131T0930Z",
            "20261130T2430Z",
            "20261130T0960Z",
            "2026113OT0930Z",
            "20261130t0930z",
            "+0261130T0930Z",
        ] {
            assert!(parse_expiry(bad).is_err(), "{bad:?} should be refused");
        }
    }

    #[test]
    fn durations() {
        assert_eq!(
            WindowDuration::parse("4h").unwrap().as_signed().as_secs(),
            14_400
        );
        assert_eq!(
            WindowDuration::parse("1h30m")
                .unwrap()
                .as_signed()
                .as_secs(),
            5_400
        );
        assert_eq!(WindowDuration::parse("90m").unwrap().to_string(), "1h30m");
        assert_eq!(WindowDuration::parse("2d").unwrap().to_string(), "2d");
        for bad in [
            "",
            "4",
            "h",
            "4x",
            "0m",
            "-1h",
            "1.5h",
            "999999999999999999999h",
            "400d",
        ] {
            assert!(
                WindowDuration::parse(bad).is_err(),
                "{bad:?} should be refused"
            );
        }
    }

    #[test]
    fn flag_durations_are_friendly() {
        for (text, expected) in [
            ("500ms", Duration::from_millis(500)),
            ("1.5s", Duration::from_millis(1500)),
            ("2m", Duration::from_secs(120)),
            ("1h30m", Duration::from_secs(5400)),
            ("720h", Duration::from_secs(30 * 86_400)),
            ("30d", Duration::from_secs(30 * 86_400)),
            ("90d", Duration::from_secs(90 * 86_400)),
            ("2w", Duration::from_secs(14 * 86_400)),
            ("0s", Duration::ZERO),
            ("0", Duration::ZERO),
        ] {
            assert_eq!(flag_duration(text), Ok(expected), "{text}");
        }
        assert_eq!(positive_flag_duration("10s"), Ok(Duration::from_secs(10)));
    }

    #[test]
    fn flag_durations_refuse_with_a_sentence() {
        let message = |text| positive_flag_duration(text).unwrap_err().to_string();
        for zero in ["0", "0s", "0ms"] {
            assert_eq!(
                message(zero),
                format!(
                    "\"{zero}\" is zero, which means nothing for this flag; write a duration such as 10s"
                )
            );
        }
        let garbage = message("fifteen");
        assert!(
            garbage.starts_with("\"fifteen\" is not a duration (")
                && garbage.ends_with("such as 500ms, 1.5s, 2m, 4h or 30d"),
            "{garbage}"
        );
        assert!(!garbage.contains("friendly"), "{garbage}");
        assert!(message("10").contains("is not a duration"));
        assert!(message("1mo").contains("no fixed length"));
        assert!(message("-1s").contains("negative"));
        assert!(message("400d").contains("longer than a year"));
    }
}
