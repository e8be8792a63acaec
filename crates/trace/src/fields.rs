//! Reading one CSV row's fields: typed readers whose errors name the file, line and
//! field, the header checks, and the limits every format shares.

use crate::TraceError;
use apiary_model::{Job, Time};
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
        rec: &'r StringRecord,
        i: usize,
        field: &str,
    ) -> Result<&'r str, TraceError> {
        rec.get(i)
            .map(str::trim)
            .ok_or_else(|| self.err(field, "missing"))
    }
    pub(crate) fn number(
        &self,
        rec: &StringRecord,
        i: usize,
        field: &str,
    ) -> Result<f64, TraceError> {
        let v = self.text(rec, i, field)?;
        match v.parse::<f64>() {
            Ok(x) if x.is_finite() && x >= 0.0 => Ok(x),
            _ => Err(self.err(field, format!("'{v}' is not a non-negative number"))),
        }
    }
    pub(crate) fn secs(
        &self,
        rec: &StringRecord,
        i: usize,
        field: &str,
    ) -> Result<Time, TraceError> {
        let x = self.number(rec, i, field)?;
        apiary_model::time::secs_f64(x).ok_or_else(|| self.beyond(field, &format!("{x} s")))
    }
    pub(crate) fn millis(
        &self,
        rec: &StringRecord,
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
        rec: &StringRecord,
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
    pub(crate) fn u32(&self, rec: &StringRecord, i: usize, field: &str) -> Result<u32, TraceError> {
        let x = self.integer(rec, i, field)?;
        u32::try_from(x)
            .map_err(|_| self.err(field, format!("{x} is out of range (at most {})", u32::MAX)))
    }
    /// A priority: an integer that must fit a signed 32-bit value (never wrapped).
    pub(crate) fn i32(&self, rec: &StringRecord, i: usize, field: &str) -> Result<i32, TraceError> {
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
    pub(crate) fn gpus(
        &self,
        rec: &StringRecord,
        i: usize,
        field: &str,
    ) -> Result<u32, TraceError> {
        let g = self.integer(rec, i, field)?;
        if g > MAX_GPUS {
            return Err(self.err(
                field,
                format!("{g} GPUs is out of range (at most {MAX_GPUS})"),
            ));
        }
        Ok(g as u32)
    }
    pub(crate) fn opt(&self, rec: &StringRecord, i: Option<usize>) -> Option<String> {
        i.and_then(|i| rec.get(i))
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    }
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

// Rows move straight into the trace's job vector; boxing would cost an allocation each.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Parsed {
    Job(Job),
    Excluded(&'static str),
}
