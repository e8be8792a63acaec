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
