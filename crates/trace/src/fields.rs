//! Reading one CSV row's fields: typed readers whose errors name the file, line and
//! field, the header checks, and the limits every format shares.

use crate::TraceError;
use crate::split::{Fields, trim};
use apiary_model::Time;
use csv::StringRecord;
use std::collections::BTreeMap;

/// The most GPUs one job may ask for.
pub(crate) const MAX_GPUS: u64 = 1_000_000;

/// Where a row was read, so that every field error names its file, line and field.
pub(crate) struct RowAt<'a> {
    pub(crate) file: &'a str,
    pub(crate) line: u64,
}

impl RowAt<'_> {
    pub(crate) fn err(&self, field: &str, message: impl Into<String>) -> TraceError {
        TraceError::Row {
            file: self.file.to_string(),
            line: self.line,
            field: field.to_string(),
            message: message.into(),
        }
    }
    pub(crate) fn text<'r>(
        &self,
        rec: &Fields<'r>,
        i: usize,
        field: &str,
    ) -> Result<&'r str, TraceError> {
        rec.get(i)
            .map(trim)
            .ok_or_else(|| self.err(field, "missing"))
    }
    pub(crate) fn number(
        &self,
        rec: &Fields<'_>,
        i: usize,
        field: &str,
    ) -> Result<f64, TraceError> {
        let v = self.text(rec, i, field)?;
        match decimal(v) {
            Ok(x) if x.is_finite() && x >= 0.0 => Ok(x),
            _ => Err(self.err(field, format!("'{v}' is not a non-negative number"))),
        }
    }
    pub(crate) fn secs(&self, rec: &Fields<'_>, i: usize, field: &str) -> Result<Time, TraceError> {
        let x = self.number(rec, i, field)?;
        apiary_model::time::secs_f64(x).ok_or_else(|| self.beyond(field, &format!("{x} s")))
    }
    pub(crate) fn millis(
        &self,
        rec: &Fields<'_>,
        i: usize,
        field: &str,
    ) -> Result<Time, TraceError> {
        let x = self.number(rec, i, field)?;
        apiary_model::time::millis_f64(x).ok_or_else(|| self.beyond(field, &format!("{x} ms")))
    }
    pub(crate) fn beyond(&self, field: &str, what: &str) -> TraceError {
        self.err(
            field,
            format!(
                "{what} is beyond the longest time apiary accepts (10^12 s, about 31,700 years)"
            ),
        )
    }
    pub(crate) fn integer(
        &self,
        rec: &Fields<'_>,
        i: usize,
        field: &str,
    ) -> Result<u64, TraceError> {
        let v = self.text(rec, i, field)?;
        v.parse::<u64>()
            .or_else(|_| {
                v.parse::<f64>()
                    .ok()
                    .filter(|x| x.fract() == 0.0 && *x >= 0.0 && *x < 1e18)
                    .map(|x| x as u64)
                    .ok_or(())
            })
            .map_err(|_| self.err(field, format!("'{v}' is not a non-negative integer")))
    }
    /// A non-negative integer that must fit 32 bits (batch sizes): larger values are
    /// errors, never truncated.
    pub(crate) fn u32(&self, rec: &Fields<'_>, i: usize, field: &str) -> Result<u32, TraceError> {
        let x = self.integer(rec, i, field)?;
        u32::try_from(x)
            .map_err(|_| self.err(field, format!("{x} is out of range (at most {})", u32::MAX)))
    }
    /// A priority: an integer that must fit a signed 32-bit value (never wrapped).
    pub(crate) fn i32(&self, rec: &Fields<'_>, i: usize, field: &str) -> Result<i32, TraceError> {
        let v = self.text(rec, i, field)?;
        let x: i64 = v
            .parse::<i64>()
            .ok()
            .or_else(|| {
                v.parse::<f64>()
                    .ok()
                    .filter(|x| x.fract() == 0.0 && x.abs() < 1e18)
                    .map(|x| x as i64)
            })
            .ok_or_else(|| self.err(field, format!("'{v}' is not an integer")))?;
        i32::try_from(x).map_err(|_| {
            self.err(
                field,
                format!("{x} is out of range ({}..={})", i32::MIN, i32::MAX),
            )
        })
    }
    pub(crate) fn gpus(&self, rec: &Fields<'_>, i: usize, field: &str) -> Result<u32, TraceError> {
        let g = self.integer(rec, i, field)?;
        if g > MAX_GPUS {
            return Err(self.err(
                field,
                format!("{g} GPUs is out of range (at most {MAX_GPUS})"),
            ));
        }
        Ok(g as u32)
    }
    pub(crate) fn opt<S: for<'a> From<&'a str>>(
        &self,
        rec: &Fields<'_>,
        i: Option<usize>,
    ) -> Option<S> {
        self.opt_text(rec, i).map(S::from)
    }
    pub(crate) fn opt_text<'r>(&self, rec: &Fields<'r>, i: Option<usize>) -> Option<&'r str> {
        i.and_then(|i| rec.get(i))
            .map(trim)
            .filter(|s| !s.is_empty())
    }
}

/// Exact powers of ten up to 10^15 (every one is an f64 without rounding).
const POW10: [f64; 16] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
];

/// `s` as an f64, bit for bit what `str::parse` gives. Plain decimals (`123`, `66.0`)
/// of up to 15 digits take Clinger's fast path: the digits are an exact integer and the
/// divisor an exact power of ten, so one IEEE division rounds correctly. Anything else
/// (signs, exponents, `inf`, long digit strings) goes to the standard parser. Trace
/// readers parse a number or two per row, and the standard parser's generality cost
/// more than the CSV scan.
pub(crate) fn decimal(s: &str) -> Result<f64, std::num::ParseFloatError> {
    let mut mantissa: u64 = 0;
    let (mut digits, mut fraction, mut dot) = (0usize, 0usize, false);
    for &c in s.as_bytes() {
        match c {
            b'0'..=b'9' if digits < 15 => {
                mantissa = mantissa * 10 + u64::from(c - b'0');
                digits += 1;
                fraction += usize::from(dot);
            }
            b'.' if !dot && digits > 0 => dot = true,
            _ => return s.parse(),
        }
    }
    if digits == 0 || (dot && fraction == 0) {
        return s.parse();
    }
    Ok(mantissa as f64 / POW10[fraction])
}

/// Whether a stage time (ms per iteration) over every iteration stays within the
/// longest time an input may give, so that interleaving arithmetic stays finite.
pub(crate) fn stage_fits(ms_per_iteration: f64, iterations: u64) -> bool {
    apiary_model::time::millis_f64(ms_per_iteration * iterations.max(1) as f64).is_some()
}

/// Refuses a header that names a column twice: which of the two a reader took would
/// be an accident.
pub(crate) fn check_header(h: &StringRecord, file: &str) -> Result<(), TraceError> {
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, c) in h.iter().enumerate() {
        let c = c.trim();
        if let Some(k) = seen.insert(c, i) {
            return Err(TraceError::Row {
                file: file.to_string(),
                line: 1,
                field: c.to_string(),
                message: format!("column appears twice (columns {} and {})", k + 1, i + 1),
            });
        }
    }
    Ok(())
}

pub(crate) fn column(h: &StringRecord, name: &str, file: &str) -> Result<usize, TraceError> {
    h.iter()
        .position(|c| c.trim() == name)
        .ok_or_else(|| TraceError::Row {
            file: file.to_string(),
            line: 1,
            field: name.to_string(),
            message: "column missing from the header".into(),
        })
}
pub(crate) fn optional_column(h: &StringRecord, name: &str) -> Option<usize> {
    h.iter().position(|c| c.trim() == name)
}

/// What a record gave: a job (the parser pushed exactly one onto the list it was given,
/// and nothing else), or a row the format leaves out, and why.
pub(crate) enum Parsed {
    Job,
    Excluded(&'static str),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_parse_bit_for_bit_as_the_standard_parser() {
        let cases = [
            "0",
            "1",
            "66.0",
            "2951.0",
            "0.1",
            "0.3",
            "123456789012345",
            "1234567890123456",
            "99999999999999.9",
            "0.000000000000001",
            "1.7976931348623157",
            "007.50",
            "5.",
            ".5",
            "",
            ".",
            "+1",
            "-1",
            "1e3",
            "inf",
            "NaN",
            "1.2.3",
            "12a",
            "0.1000000000000000055511151231257827",
        ];
        for c in cases {
            let want = c.parse::<f64>();
            match (decimal(c), want) {
                (Ok(a), Ok(b)) => assert_eq!(a.to_bits(), b.to_bits(), "{c}"),
                (Err(_), Err(_)) => {}
                (a, b) => panic!("{c}: {a:?} vs {b:?}"),
            }
        }
        // Every value a trace writes with one or two decimals, across magnitudes.
        let mut x = 1u64;
        for _ in 0..200_000 {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let v = (x >> 20) % 10_000_000_000;
            for s in [
                format!("{v}"),
                format!("{}.{:02}", v / 100, v % 100),
                format!("{}.{}", v / 10, v % 10),
            ] {
                assert_eq!(
                    decimal(&s).unwrap().to_bits(),
                    s.parse::<f64>().unwrap().to_bits(),
                    "{s}"
                );
            }
        }
    }
}
