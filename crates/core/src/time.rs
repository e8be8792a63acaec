//! Simulated and wall time share one representation: integer milliseconds.
//!
//! Integers keep event ordering exact and results byte-identical across runs; a
//! millisecond is fine enough for the Muri traces (which are in ms) and coarse enough
//! that a u64 never overflows (585 million years).

/// A point in time or a duration, in milliseconds since the trace's origin.
pub type Time = u64;
/// One second.
pub const SECOND: Time = 1_000;
/// One minute.
pub const MINUTE: Time = 60 * SECOND;
/// One hour.
pub const HOUR: Time = 60 * MINUTE;

/// Formats a duration for humans: `1d 02:03:04`, `02:03:04` or `12.345s`.
pub fn fmt_duration(ms: Time) -> String {
    if ms < MINUTE {
        return format!("{}.{:03}s", ms / SECOND, ms % SECOND);
    }
    let s = ms / SECOND;
    let (d, h, m, s) = (s / 86_400, (s / 3600) % 24, (s / 60) % 60, s % 60);
    if d > 0 {
        format!("{d}d {h:02}:{m:02}:{s:02}")
    } else {
        format!("{h:02}:{m:02}:{s:02}")
    }
}

/// How long before `now` the time `at` was, for people: `12s ago`, `5m ago`, `3h ago`,
/// `2d ago` (both in ms).
pub fn fmt_age(now: Time, at: Time) -> String {
    let s = now.saturating_sub(at) / SECOND;
    match s {
        0..60 => format!("{s}s ago"),
        60..3600 => format!("{}m ago", s / 60),
        3600..86_400 => format!("{}h ago", s / 3600),
        _ => format!("{}d ago", s / 86_400),
    }
}

/// Unix milliseconds as an RFC 3339 UTC timestamp: `2026-11-25T13:51:40.123Z`.
pub fn rfc3339_utc(unix_ms: Time) -> String {
    let secs = unix_ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        unix_ms % 1000
    )
}

/// The proleptic Gregorian date `days` after 1970-01-01 (Howard Hinnant's
/// `civil_from_days`).
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// The latest time, and the longest duration, any input may give: 10^15 ms, about
/// 31,700 years. Readers refuse anything beyond it, so that sums of input-derived times
/// (a submission plus its duration plus every restart) stay far from `u64::MAX` and
/// the simulator's arithmetic never wraps.
pub const MAX_INPUT: Time = 1_000_000_000_000_000;

/// Converts seconds given as a float (as most traces write them) to milliseconds,
/// rounding to the nearest millisecond. Returns `None` for negative, non-finite or
/// out-of-range (beyond [`MAX_INPUT`]) input.
pub fn secs_f64(s: f64) -> Option<Time> {
    millis_f64(s * 1000.0)
}

/// Rounds milliseconds given as a float to a [`Time`]; `None` for negative, non-finite
/// or out-of-range input.
pub fn millis_f64(ms: f64) -> Option<Time> {
    if (0.0..=MAX_INPUT as f64).contains(&ms) {
        Some(ms.round() as Time)
    } else {
        None
    }
}

/// Whole seconds (as integer traces write them) to milliseconds; `None` beyond
/// [`MAX_INPUT`].
pub fn secs_u64(s: u64) -> Option<Time> {
    s.checked_mul(SECOND).filter(|ms| *ms <= MAX_INPUT)
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn timestamps() {
        assert_eq!(rfc3339_utc(0), "1970-01-01T00:00:00.000Z");
        // 2026-11-25 13:51:40.123 UTC.
        assert_eq!(rfc3339_utc(1_795_614_700_123), "2026-11-25T13:51:40.123Z");
        // A leap day.
        assert_eq!(rfc3339_utc(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
    }

    #[test]
    fn formats() {
        assert_eq!(fmt_duration(1_234), "1.234s");
        assert_eq!(fmt_duration(3_723_000), "01:02:03");
        assert_eq!(fmt_duration(90_061_000), "1d 01:01:01");
        assert_eq!(secs_f64(1.5), Some(1_500));
        assert_eq!(secs_f64(-1.0), None);
        assert_eq!(secs_f64(f64::NAN), None);
        assert_eq!(secs_f64(f64::INFINITY), None);
        assert_eq!(secs_f64(1e12), Some(MAX_INPUT));
        assert_eq!(secs_f64(1.1e12), None);
        assert_eq!(secs_u64(1_000_000_000_000), Some(MAX_INPUT));
        assert_eq!(secs_u64(1_000_000_000_001), None);
        assert_eq!(secs_u64(u64::MAX), None);
        assert_eq!(millis_f64(-0.4), None);
    }
}
