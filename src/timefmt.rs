//! The two time formats driftgate reads: break-glass expiries in label values, and durations
//! in policies and on the command line.

use std::fmt;

use jiff::{SignedDuration, Timestamp, civil::DateTime, tz::Offset};

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
}
