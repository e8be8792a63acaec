//! The grid's carbon intensity for the live service: a dated CSV (`carbon_file` in
//! server.toml, the format of `--carbon FILE`, docs/carbon.md) read at start and read
//! again whenever its contents change, so that a forecast a cron job rewrites reaches
//! the carbon-aware policies. Rows are hours on the wall clock from the first row's
//! timestamp; after the last the last value holds.

use apiary_model::energy::Intensity;
use apiary_trace::TraceError;
use std::path::{Path, PathBuf};

/// Why the carbon file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum CarbonError {
    /// It could not be read or a row is bad.
    #[error("carbon_file: {0}")]
    Read(#[from] TraceError),
    /// It has no timestamps, so its hours cannot be put on the clock.
    #[error("carbon_file {0}: the live service needs dated rows (a `timestamp` column)")]
    Undated(String),
}

/// The file and what was last read from it.
#[derive(Debug)]
pub struct CarbonFile {
    path: PathBuf,
    last: Vec<u8>,
}

fn load(path: &Path) -> Result<Intensity, CarbonError> {
    let spec = path.display().to_string();
    let s = apiary_trace::carbon::read_intensity(&spec)?;
    let origin = s
        .stamped
        .ok_or_else(|| CarbonError::Undated(spec.clone()))?;
    Ok(s.anchored(origin))
}

impl CarbonFile {
    /// Reads `path` once; an error if it cannot be used.
    pub fn open(path: &Path) -> Result<(CarbonFile, Intensity), CarbonError> {
        let last = std::fs::read(path).map_err(|source| TraceError::Io {
            file: path.display().to_string(),
            source,
        })?;
        let s = load(path)?;
        Ok((
            CarbonFile {
                path: path.to_path_buf(),
                last,
            },
            s,
        ))
    }

    /// The series again if the file's contents changed since the last read; `None` if
    /// they did not (or the file cannot be read now: the last series stays).
    pub fn poll(&mut self) -> Option<Result<Intensity, CarbonError>> {
        let bytes = std::fs::read(&self.path).ok()?;
        if bytes == self.last {
            return None;
        }
        self.last = bytes;
        Some(load(&self.path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rewritten_file_is_read_again_and_an_undated_one_refused() {
        let d = std::env::temp_dir().join(format!("apiary-carbon-live-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let f = d.join("ci.csv");
        std::fs::write(&f, "timestamp,g_per_kwh\n2026-01-01 00:00:00,400\n").unwrap();
        let (mut w, s) = CarbonFile::open(&f).unwrap();
        // 2026-01-01 00:00 UTC, and a later time holds the last value.
        assert_eq!(s.at(1_767_225_600_000), 400.0);
        assert_eq!(s.at(1_800_000_000_000), 400.0);
        assert!(w.poll().is_none());
        std::fs::write(&f, "timestamp,g_per_kwh\n2026-01-01 00:00:00,90\n").unwrap();
        let s = w.poll().unwrap().unwrap();
        assert_eq!(s.at(1_767_225_600_000), 90.0);
        assert!(w.poll().is_none());
        std::fs::write(&f, "g_per_kwh\n90\n").unwrap();
        let e = w.poll().unwrap().unwrap_err().to_string();
        assert!(e.contains("dated rows"), "{e}");
        let g = d.join("undated.csv");
        std::fs::write(&g, "g_per_kwh\n90\n").unwrap();
        assert!(CarbonFile::open(&g).is_err());
    }
}
