//! Reading a delimited trace file: its format (given or detected), its bytes, its rows
//! (the quick path for plain text, else the CSV reader), then Philly's clock and the
//! submission order.

use crate::format::Format;
use crate::open::{first_line, open};
use crate::{ReadOptions, Trace, TraceError};
use csv::StringRecord;
use std::io::Read;
use std::path::Path;

pub(crate) fn read(path: &Path, opts: &ReadOptions) -> Result<Trace, TraceError> {
    let file = path.display().to_string();
    let format = match opts.format {
        Some(f) => f,
        None => {
            let first = first_line(path)?;
            Format::detect(&first).ok_or_else(|| TraceError::UnknownFormat {
                file: file.clone(),
                first_line: first.chars().take(100).collect(),
                known: Format::names(),
            })?
        }
    };
    if format == Format::Jsonl {
        return crate::canonical::read_jsonl(path, opts);
    }
    // The whole file at once: its bytes are a fraction of the jobs built from them, and
    // the quick path needs to know there are no quotes before it starts.
    let mut data = Vec::new();
    open(path)?
        .read_to_end(&mut data)
        .map_err(|source| TraceError::Io {
            file: file.clone(),
            source,
        })?;
    read_bytes(
        data,
        &file,
        path,
        format,
        opts,
        crate::rows::Pieces::for_this_machine(opts.threads),
    )
}

/// Reads a delimited trace's bytes: the quick path when the text is plain, else the
/// CSV reader; then Philly's clock and the submission order.
pub(crate) fn read_bytes(
    data: Vec<u8>,
    file: &str,
    path: &Path,
    format: Format,
    opts: &ReadOptions,
    pieces: crate::rows::Pieces,
) -> Result<Trace, TraceError> {
    let tab = matches!(format, Format::Gavel | Format::Gavel10);
    // At most one job per line; a file of millions of blank lines reserves no more
    // than 4 M jobs (the list grows past that if they are real).
    let capacity = (memchr::memchr_iter(b'\n', &data).count() + 1).min(1 << 22);
    let mut rows = crate::rows::Rows::new(file, format, path, opts, capacity);
    if tab {
        rows.header(&StringRecord::new())?;
    }
    let mut spans = Vec::new();
    if let Some(text) = crate::split::plain_text(&data, !tab) {
        let delimiter = if tab { b'\t' } else { b',' };
        rows.plain(text, delimiter, &mut spans, pieces)?;
    } else {
        rows.csv(&data, tab, &mut spans)?;
    }
    drop(data);
    let crate::rows::Rows {
        mut jobs,
        runs,
        skipped,
        first_skip,
        excluded,
        ..
    } = rows;
    // Philly times are wall-clock dates: the trace starts at its first submission.
    let rebase = format == Format::Philly;
    match runs {
        Some(runs) => crate::order::sort_runs_by_submit(&mut jobs, runs, rebase),
        None if rebase => crate::order::sort_by_submit_from_first(&mut jobs),
        None => crate::order::sort_by_submit(&mut jobs),
    }
    if jobs.capacity() > jobs.len() + jobs.len() / 8 + 64 {
        jobs.shrink_to_fit();
    }
    Ok(Trace {
        jobs,
        format,
        skipped,
        first_skip: first_skip.map(|(_, e)| e),
        excluded: excluded
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
    })
}
