//! Readers for every GPU-cluster trace format apiary replays, plus apiary's own
//! canonical CSV/JSONL and a Philly-calibrated synthetic generator.
//!
//! Every reader streams (gzip and zstd are recognised by their magic bytes, whatever the
//! file name), turns rows into [`apiary_model::Job`]s with times in milliseconds, and
//! reports bad input as [`TraceError::Row`] naming the file, line and field. With
//! `skip_bad_rows` a reader skips such rows instead and counts them; nothing is dropped
//! without a count. Jobs come back sorted by submission time (stable, so equal times
//! keep file order).

mod canonical;
mod formats;
mod open;
pub mod speed;
pub mod synth;

pub use canonical::{write_csv, write_jsonl};
pub use formats::Format;

use apiary_model::Job;
use std::path::{Path, PathBuf};

/// Why a trace could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The file could not be opened or read.
    #[error("{file}: {source}")]
    Io {
        /// The file.
        file: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// A row was malformed.
    #[error("{file}, line {line}, field '{field}': {message}")]
    Row {
        /// The file.
        file: String,
        /// 1-based line.
        line: u64,
        /// The column.
        field: String,
        /// What was wrong.
        message: String,
    },
    /// The format could not be recognised.
    #[error(
        "{file}: unrecognised trace format (first line: '{first_line}'); pass --format (one of: {known})"
    )]
    UnknownFormat {
        /// The file.
        file: String,
        /// Its first line, shortened.
        first_line: String,
        /// Format names.
        known: String,
    },
    /// A needed side file was missing.
    #[error("{file}: {message}")]
    Missing {
        /// The file.
        file: String,
        /// What is missing and how to provide it.
        message: String,
    },
}

/// How to read.
#[derive(Clone, Debug, Default)]
pub struct ReadOptions {
    /// Force a format instead of detecting it.
    pub format: Option<Format>,
    /// Skip malformed rows (counting them) instead of failing.
    pub skip_bad_rows: bool,
    /// Gavel throughput table (`simulation_throughputs.json`) for Gavel traces, whose
    /// work is in steps; found automatically beside a `../shared/traces` layout.
    pub gavel_throughputs: Option<PathBuf>,
    /// Gavel worker type whose throughput defines a job's duration (default `v100`).
    pub gavel_worker: Option<String>,
    /// Muri's simulator scales every iteration time by 1.015 when loading; this factor
    /// (default 1.015) reproduces it. Set 1 for the trace's raw times.
    pub muri_itertime_factor: Option<f64>,
}

/// A loaded trace.
#[derive(Clone, Debug)]
pub struct Trace {
    /// Jobs sorted by submit time.
    pub jobs: Vec<Job>,
    /// The format read.
    pub format: Format,
    /// Rows skipped as malformed (with `skip_bad_rows`).
    pub skipped: u64,
    /// The first skipped row's error, to show the user.
    pub first_skip: Option<String>,
    /// Rows deliberately not turned into jobs, with the reason (e.g. CPU-only pods).
    pub excluded: Vec<(String, u64)>,
}

/// Reads a trace file.
pub fn read(path: &Path, opts: &ReadOptions) -> Result<Trace, TraceError> {
    formats::read(path, opts)
}
