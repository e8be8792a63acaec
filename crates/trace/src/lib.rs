//! Readers for every GPU-cluster trace format apiary replays, plus apiary's own
//! canonical CSV/JSONL and a Philly-calibrated synthetic generator.
//!
//! Every reader takes plain, gzip or zstd files (recognised by their magic bytes,
//! whatever the file name); the CSV readers hold the decompressed bytes while they
//! read, a fraction of the jobs built from them, and split plain files on bytes without
//! the CSV machinery (`split`). Each turns rows into [`apiary_model::Job`]s with times in milliseconds, and
//! reports bad input as [`TraceError::Row`] naming the file, line and field. With
//! `skip_bad_rows` a reader skips such rows instead and counts them; nothing is dropped
//! without a count. Jobs come back sorted by submission time (stable, so equal times
//! keep file order).

mod canonical;
pub mod carbon;
mod dates;
pub mod efgen;
pub mod elasticflow;
pub mod failures;
mod fields;
mod format;
mod ids;
mod open;
pub mod openb;
mod order;
mod parsers;
pub mod pollux;
mod read;
mod rows;
pub mod speed;
mod split;
pub mod synth;

pub use canonical::{write_csv, write_jsonl};
pub use format::Format;

use apiary_model::{CompactString, Job, format_compact};
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
    /// A reading option had an unusable value.
    #[error("{option}: {message}")]
    Option {
        /// The option, as the command line spells it.
        option: String,
        /// What is wrong with its value.
        message: String,
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
    /// GPU type whose ElasticFlow throughput tables turn iterations into time for
    /// ElasticFlow traces (`A100`, the default, or `T4`).
    pub elasticflow_gpu: Option<String>,
    /// Threads that parse pieces of a large plain file at once (default: one per core;
    /// 1 reads it in one pass). The jobs, counts and errors are the same for any number.
    pub threads: Option<usize>,
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

/// Reads a trace file, or a directory of per-VC trace files.
///
/// The files [`read`] reads for a trace directory: its `*.trace` files, in name order
/// (a record of the run digests exactly these).
pub fn dir_files(path: &Path) -> Result<Vec<std::path::PathBuf>, TraceError> {
    let io = |source| TraceError::Io {
        file: path.display().to_string(),
        source,
    };
    let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(path)
        .map_err(io)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "trace"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(TraceError::Missing {
            file: path.display().to_string(),
            message: "a trace directory must hold per-VC *.trace files (Gavel's per-VC traces)"
                .into(),
        });
    }
    Ok(files)
}

/// A directory holds one file per virtual cluster, as Gavel's per-VC Philly traces
/// (`gavel_msr_seed0/<vc>.trace`): every `*.trace` file is read (in name order), its jobs
/// get the file's stem as their VC and `<vc>/<id>` as their id, and the jobs of all files
/// are merged by submit time (each file's own clock, as Gavel's traces start every VC
/// at 0; ties keep file order).
pub fn read(path: &Path, opts: &ReadOptions) -> Result<Trace, TraceError> {
    if let Some(f) = opts
        .muri_itertime_factor
        .filter(|f| !(f.is_finite() && *f > 0.0))
    {
        return Err(TraceError::Option {
            option: "--muri-itertime-factor".into(),
            message: format!("{f} is not a positive number (Muri's simulator uses 1.015)"),
        });
    }
    if !path.is_dir() {
        return read::read(path, opts);
    }
    let files = dir_files(path)?;
    let mut all: Option<Trace> = None;
    for f in &files {
        let mut t = read::read(f, opts)?;
        let vc = f
            .file_stem()
            .map(|s| CompactString::from(s.to_string_lossy()))
            .unwrap_or_default();
        for j in &mut t.jobs {
            j.id = format_compact!("{vc}/{}", j.id);
            j.vc = Some(vc.clone());
        }
        match &mut all {
            None => all = Some(t),
            Some(a) => {
                if a.format != t.format {
                    return Err(TraceError::Missing {
                        file: f.display().to_string(),
                        message: format!(
                            "is {} but the directory's first file is {}; one format per directory",
                            t.format.name(),
                            a.format.name()
                        ),
                    });
                }
                a.jobs.append(&mut t.jobs);
                a.skipped += t.skipped;
                if a.first_skip.is_none() {
                    a.first_skip = t.first_skip;
                }
                a.excluded.append(&mut t.excluded);
            }
        }
    }
    let mut t = all.expect("at least one file");
    order::sort_by_submit(&mut t.jobs);
    Ok(t)
}
