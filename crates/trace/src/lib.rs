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
    sort_by_submit(&mut t.jobs);
    Ok(t)
}

/// Orders jobs by submission time, ties in file order (as a stable sort would). Only
/// (time, index) pairs are sorted, and the jobs are then swapped into place along the
/// permutation's cycles: a `Job` is 168 bytes, and sorting them directly took a third
/// of reading the Philly trace. Traces already in order are only checked.
pub(crate) fn sort_by_submit(jobs: &mut [Job]) {
    if jobs.is_sorted_by_key(|j| j.submit) {
        return;
    }
    // (time, index) packed in one word when both fit (every trace apiary has seen):
    // sorting plain integers is faster than sorting pairs, and the order is the same.
    let bits = usize::BITS - jobs.len().leading_zeros();
    let latest = jobs.iter().map(|j| j.submit).max().unwrap_or(0);
    let order: Vec<usize> = if latest.leading_zeros() >= bits {
        let mut keys: Vec<u64> = jobs
            .iter()
            .enumerate()
            .map(|(i, j)| (j.submit << bits) | i as u64)
            .collect();
        keys.sort_unstable();
        let mask = (1u64 << bits) - 1;
        keys.into_iter().map(|k| (k & mask) as usize).collect()
    } else {
        let mut pairs: Vec<(apiary_model::Time, usize)> = jobs
            .iter()
            .enumerate()
            .map(|(i, j)| (j.submit, i))
            .collect();
        pairs.sort_unstable();
        pairs.into_iter().map(|(_, i)| i).collect()
    };
    permute(jobs, order);
}

/// Puts `jobs[order[k]]` at `k` for every `k`, in place along the permutation's cycles.
/// Moving the jobs into a second list instead touches a fresh list the trace's size,
/// and on Philly its page faults were half of reading.
///
/// A shuffled trace's cycles jump across the whole list, so nearly every job moved is
/// a cache miss. The walk reads each job a few steps before it moves it (`AHEAD`), so
/// those misses overlap instead of coming one after another (about 8 % of reading
/// Philly).
fn permute(jobs: &mut [Job], mut order: Vec<usize>) {
    const DONE: usize = usize::MAX;
    const AHEAD: usize = 8;
    for start in 0..order.len() {
        if order[start] == DONE {
            continue;
        }
        // `ahead` runs `AHEAD` steps in front of `k` on the same cycle, whose entries
        // ahead of `k` are not marked yet.
        let mut ahead = order[start];
        for _ in 0..AHEAD {
            if ahead == start {
                break;
            }
            touch(&jobs[ahead]);
            ahead = order[ahead];
        }
        let mut k = start;
        // `order` is a permutation: each cycle is followed once, marking its entries.
        while order[k] != DONE {
            let src = std::mem::replace(&mut order[k], DONE);
            if src == start {
                break;
            }
            if ahead != start {
                touch(&jobs[ahead]);
                ahead = order[ahead];
            }
            swap(jobs, k, src);
            k = src;
        }
    }
}

/// Swaps two distinct jobs through registers: `slice::swap` may be asked to swap an
/// element with itself, so it goes through a copy in memory, three calls to `memcpy`
/// for a 168-byte job.
#[inline(always)]
fn swap(jobs: &mut [Job], a: usize, b: usize) {
    debug_assert_ne!(a, b);
    let (lo, hi) = (a.min(b), a.max(b));
    let (left, right) = jobs.split_at_mut(hi);
    std::mem::swap(&mut left[lo], &mut right[0]);
}

/// Loads a word of a job, so that its memory is on its way when the job is moved.
#[inline(always)]
fn touch(job: &Job) {
    std::hint::black_box(job.submit);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_sort_by_submit_keeping_file_order_on_ties() {
        let mut x = 3u64;
        // Small times sort as packed words; times near the top of the range as pairs.
        for (n, scale) in [0, 1, 2, 7, 100, 5000]
            .into_iter()
            .flat_map(|n| [(n, 1), (n, 1 << 57)])
        {
            let mut jobs: Vec<Job> = (0..n)
                .map(|i| {
                    x = x
                        .wrapping_mul(6_364_136_223_846_793_005)
                        .wrapping_add(1_442_695_040_888_963_407);
                    Job::new(i.to_string(), (x >> 33) % 50 * scale, 1, 1)
                })
                .collect();
            let mut want = jobs.clone();
            want.sort_by_key(|j| j.submit);
            sort_by_submit(&mut jobs);
            let ids = |v: &[Job]| v.iter().map(|j| j.id.clone()).collect::<Vec<_>>();
            assert_eq!(ids(&jobs), ids(&want), "{n} jobs");
        }
    }
}
