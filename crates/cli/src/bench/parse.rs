//! Trace reading speed: each reader on a real file, in-process, best of several reads,
//! beside the limit for that file: reading its bytes and counting its lines, which any
//! reader must do at least.

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// One reader on one file.
#[derive(Debug, serde::Serialize)]
pub struct ParseFigure {
    /// Case name.
    pub case: String,
    /// The file read.
    pub file: String,
    /// Its size in bytes.
    pub bytes: u64,
    /// Jobs read.
    pub jobs: usize,
    /// Best wall time of one whole read (open, parse, check, sort), seconds.
    pub best_s: f64,
    /// `bytes` over `best_s`, MB/s.
    pub mb_per_s: f64,
    /// The same read on one thread (the pieces of a large file parsed in one pass), MB/s.
    pub one_thread_mb_per_s: f64,
    /// The limit: reading the file and counting its lines (best of the same number of
    /// tries), MB/s.
    pub scan_mb_per_s: f64,
}

/// The name of the Philly summary's reading case.
pub const PHILLY: &str = "philly summary, 82,247 jobs";

/// The files read: every reader whose input the project has in `../shared`, and with
/// `synth` the 1 M-job canonical CSV.
pub fn cases(shared: Option<&Path>, synth: Option<&Path>) -> Vec<(String, PathBuf)> {
    let mut v = Vec::new();
    if let Some(d) = shared {
        for (name, file) in [
            (PHILLY, "philly/philly.csv"),
            ("ITP cluster04 raw, 15,802 jobs", "itp/raw/cluster04.csv"),
            (
                "ITP cluster04 elasticflow (throughput tables)",
                "itp/elasticflow/cluster04.csv",
            ),
            (
                "alibaba v2023 default pod list",
                "alibaba/gpu-v2023/openb_pod_list_default.csv",
            ),
        ] {
            let p = d.join(file);
            if p.is_file() {
                v.push((name.to_string(), p));
            }
        }
    }
    if let Some(p) = synth.filter(|p| p.is_file()) {
        v.push(("synthetic 1,000,000 jobs (canonical CSV)".into(), p.into()));
    }
    v
}

/// Reads `path` `tries` times with apiary's reader (on every core, then on one) and as a
/// plain byte scan, keeping the best of each. The three take turns, so that a faster or
/// slower spell of the machine falls on all of them: measured one after the other, the
/// share of the byte scan moved with whichever spell the scan fell in.
pub fn measure(case: &str, path: &Path, tries: usize) -> Result<ParseFigure> {
    let bytes = std::fs::metadata(path)
        .with_context(|| format!("reading {}", path.display()))?
        .len();
    let mut jobs = 0;
    let mut read = |threads| -> Result<f64> {
        let opts = apiary_trace::ReadOptions {
            threads,
            ..Default::default()
        };
        let t0 = Instant::now();
        let t = apiary_trace::read(path, &opts)?;
        let took = t0.elapsed().as_secs_f64();
        jobs = t.jobs.len();
        // Freeing the jobs is not reading them.
        drop(t);
        Ok(took)
    };
    let (mut best, mut one, mut scan) = (f64::INFINITY, f64::INFINITY, f64::INFINITY);
    let mut lines = 0;
    for _ in 0..tries {
        best = best.min(read(None)?);
        one = one.min(read(Some(1))?);
        let t0 = Instant::now();
        let data = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        lines = data.iter().filter(|&&b| b == b'\n').count();
        scan = scan.min(t0.elapsed().as_secs_f64());
    }
    // The count is used, so the scan cannot be optimised away.
    std::hint::black_box(lines);
    let mb = bytes as f64 / 1e6;
    Ok(ParseFigure {
        case: case.to_string(),
        file: path.display().to_string(),
        bytes,
        jobs,
        best_s: best,
        mb_per_s: mb / best.max(1e-9),
        one_thread_mb_per_s: mb / one.max(1e-9),
        scan_mb_per_s: mb / scan.max(1e-9),
    })
}
