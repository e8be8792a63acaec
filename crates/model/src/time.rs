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

/// Converts seconds given as a float (as most traces write them) to milliseconds,
/// rounding to the nearest millisecond. Returns `None` for negative or non-finite input.
pub fn secs_f64(s: f64) -> Option<Time> {
    if (0.0..1.0e15).contains(&s) {
        Some((s * 1000.0).round() as Time)
    } else {
        None
    }
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
    }
}
