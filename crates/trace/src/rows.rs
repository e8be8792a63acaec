//! Turning a file's records into jobs, on one thread or several. A plain text file (see
//! [`crate::split::plain_text`]) whose rows parse independently is cut at line ends into
//! one piece per core; each piece is parsed on its own thread, and the pieces are joined
//! in file order, their ids checked in that order, and their first error or first skip
//! chosen by line. The result is the one a single pass gives, whatever the number of
//! pieces: the same jobs in the same order, the same error for a bad file, the same
//! counts. Parsing is four fifths of reading a trace, and every row is independent of
//! the others, so the pieces are the plainest way past one core's speed.

use crate::fields::{Parsed, RowAt, check_header};
use crate::format::Format;
use crate::order::Run;
use crate::parsers::{Parser, make_parser};
use crate::split::Fields;
use crate::{ReadOptions, TraceError};
use apiary_model::{Job, Time};
use csv::StringRecord;
use std::collections::BTreeMap;
use std::path::Path;

/// How a plain file is cut: a file of at least `min_file` bytes into pieces of
/// `min_bytes` to `max_bytes`, parsed `threads` at a time.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Pieces {
    pub(crate) threads: usize,
    pub(crate) min_file: usize,
    pub(crate) min_bytes: usize,
    pub(crate) max_bytes: usize,
    /// A file that `threads` pieces of at most this size cover is cut into that many,
    /// whatever `max_bytes` says: one round, and no piece's jobs wait long.
    pub(crate) even_bytes: usize,
}

impl Pieces {
    /// `threads` (default one per core), on files of 1 MiB or more: one piece per thread
    /// up to 2 MiB a piece, else pieces of 256 KiB to 1 MiB. Philly's 3.4 MB reads in two
    /// pieces on two cores, 9.5-10.5 ms against 11-12 ms in one pass (best of 20, in one
    /// process; more pieces of 1 MiB gave 10.4). Larger pieces on a large file would hold
    /// more jobs parsed ahead of joining (about six times their text) and add to its
    /// peak memory.
    pub(crate) fn for_this_machine(threads: Option<usize>) -> Pieces {
        Pieces {
            threads: threads.unwrap_or_else(|| {
                std::thread::available_parallelism().map_or(1, |n| n.get().min(16))
            }),
            min_file: 1 << 20,
            min_bytes: 256 << 10,
            max_bytes: 1 << 20,
            even_bytes: 2 << 20,
        }
    }
}

/// What reading a file has gathered so far, and what turns its records into jobs: the
/// same for the quick path and the CSV reader's, and for each piece of a cut file.
pub(crate) struct Rows<'a> {
    pub(crate) file: &'a str,
    pub(crate) format: Format,
    pub(crate) path: &'a Path,
    pub(crate) opts: &'a ReadOptions,
    /// The header, once read (pieces build their own parsers from it).
    header: Option<StringRecord>,
    /// Set once the header is read.
    parser: Option<Parser>,
    /// Fields every record must have (0: any number; the format checks).
    expected: usize,
    /// Formats that number their rows have unique ids by construction.
    ids: Option<crate::ids::Ids>,
    /// In a piece of a file whose ids are checked: each job's line, for the check made
    /// when the pieces are joined.
    lines: Option<Vec<u64>>,
    pub(crate) jobs: Vec<Job>,
    /// The pieces' jobs in submission order, each sorted on its own thread (see
    /// [`crate::order::Run`]), when the file was read in pieces; `None` otherwise, and
    /// once any piece could not be.
    pub(crate) runs: Option<Vec<(usize, Run)>>,
    /// In a piece whose order is found on its own thread: each kept job's submission
    /// time, gathered as it is parsed, so that sorting reads 8 bytes a job instead of
    /// going back over the 168-byte jobs.
    times: Option<Vec<Time>>,
    pub(crate) skipped: u64,
    /// The first skipped row's line and error.
    pub(crate) first_skip: Option<(u64, String)>,
    pub(crate) excluded: BTreeMap<&'static str, u64>,
}

impl<'a> Rows<'a> {
    pub(crate) fn new(
        file: &'a str,
        format: Format,
        path: &'a Path,
        opts: &'a ReadOptions,
        capacity: usize,
    ) -> Self {
        Rows {
            file,
            format,
            path,
            opts,
            header: None,
            parser: None,
            expected: 0,
            ids: format.id_field().map(crate::ids::Ids::new),
            lines: None,
            jobs: Vec::with_capacity(capacity),
            runs: None,
            times: None,
            skipped: 0,
            first_skip: None,
            excluded: BTreeMap::new(),
        }
    }

    pub(crate) fn header(&mut self, h: &StringRecord) -> Result<(), TraceError> {
        check_header(h, self.file)?;
        self.expected = h.len();
        self.parser = Some(make_parser(
            self.format,
            h,
            self.file,
            self.path,
            self.opts,
        )?);
        self.header = Some(h.clone());
        Ok(())
    }

    /// A record that could not be read at all: an error, or a skip when asked for.
    fn bad(&mut self, line: u64, e: TraceError) -> Result<(), TraceError> {
        if !self.opts.skip_bad_rows {
            return Err(e);
        }
        self.skipped += 1;
        if self.first_skip.as_ref().is_none_or(|(at, _)| line < *at) {
            self.first_skip = Some((line, e.to_string()));
        }
        Ok(())
    }

    /// Keeps the job just parsed onto the end of the list, checking its id where the
    /// format has them (a repeated one is taken off again).
    fn keep(&mut self, line: u64) -> Result<(), TraceError> {
        if let Some(ids) = &mut self.ids
            && let Some((j, before)) = self.jobs.split_last()
            && let Err(e) = ids.check(self.file, line, &j.id, before)
        {
            self.jobs.pop();
            return self.bad(line, e);
        }
        if let Some(lines) = &mut self.lines {
            lines.push(line);
        }
        if let (Some(times), Some(j)) = (&mut self.times, self.jobs.last()) {
            times.push(j.submit);
        }
        Ok(())
    }

    /// Keeps a job a piece parsed, checking its id before it joins the list: read back
    /// just after its copy, the id waits for that copy to land (the 1 M-job trace's
    /// joins took 12 % longer so).
    fn keep_from_piece(&mut self, line: u64, j: Job) -> Result<(), TraceError> {
        if let Some(ids) = &mut self.ids
            && let Err(e) = ids.check(self.file, line, &j.id, &self.jobs)
        {
            return self.bad(line, e);
        }
        if let Some(lines) = &mut self.lines {
            lines.push(line);
        }
        self.jobs.push(j);
        Ok(())
    }

    pub(crate) fn row(&mut self, line: u64, f: &Fields<'_>) -> Result<(), TraceError> {
        if f.is_blank() {
            return Ok(());
        }
        let cx = RowAt {
            file: self.file,
            line,
        };
        // Both paths read the header before any row.
        let Some(parser) = self.parser.as_mut() else {
            return Ok(());
        };
        let res = if self.expected > 0 && f.len() != self.expected {
            Err(cx.err(
                "record",
                format!("expected {} fields, found {}", self.expected, f.len()),
            ))
        } else {
            parser(&cx, f, &mut self.jobs)
        };
        match res {
            Ok(Parsed::Job) => self.keep(line)?,
            Ok(Parsed::Excluded(why)) => *self.excluded.entry(why).or_default() += 1,
            Err(e) => self.bad(line, e)?,
        }
        Ok(())
    }

    /// Reads a plain text (see [`crate::split::plain_text`]): its header, then its rows,
    /// cut into `pieces` where the format's rows parse independently.
    pub(crate) fn plain(
        &mut self,
        text: &str,
        delimiter: u8,
        spans: &mut Vec<(usize, usize)>,
        pieces: Pieces,
    ) -> Result<(), TraceError> {
        let (mut body, mut first_line) = (text, 1);
        if self.parser.is_none() {
            match crate::split::first_record(text) {
                Some((line, end)) => {
                    let head = &text[..end];
                    crate::split::for_each_record(head, 1, delimiter, spans, |_, f| {
                        self.header(&crate::split::header(f))
                    })?;
                    (body, first_line) = (&text[end..], line + 1);
                }
                None => return self.header(&StringRecord::new()),
            }
        }
        let cuts = cut(body, pieces, self.format.rows_independent());
        if cuts.len() <= 2 {
            return crate::split::for_each_record(body, first_line, delimiter, spans, |line, f| {
                self.row(line, f)
            });
        }
        let header = self.header.clone().unwrap_or_default();
        let checked = self.ids.is_some();
        // Each piece's first line number, and its line count (at most one job each).
        let bytes = body.as_bytes();
        let mut starts = vec![(first_line, 0usize)];
        for w in cuts.windows(2) {
            let n = memchr::memchr_iter(b'\n', &bytes[w[0]..w[1]]).count();
            let (line, _) = starts[starts.len() - 1];
            starts.push((line + n as u64, n + 1));
        }
        let (file, format, path, opts) = (self.file, self.format, self.path, self.opts);
        let count = cuts.len() - 1;
        // A piece whose ids are checked as it joins may lose jobs then, so its order
        // is found only once the list is whole.
        self.runs = (!checked).then(Vec::new);
        // Rounds of one piece per thread: at most a round's pieces wait to be joined.
        for first in (0..count).step_by(pieces.threads.max(1)) {
            let last = (first + pieces.threads).min(count);
            let (own, parts) = std::thread::scope(|s| {
                let handles: Vec<_> = (first + 1..last)
                    .map(|k| {
                        let piece = &body[cuts[k]..cuts[k + 1]];
                        let (line, capacity) = (starts[k].0, starts[k + 1].1);
                        let header = &header;
                        s.spawn(move || {
                            let mut part = Rows::new(file, format, path, opts, capacity);
                            part.ids = None;
                            part.lines = checked.then(|| Vec::with_capacity(capacity));
                            part.times = (!checked).then(|| Vec::with_capacity(capacity));
                            let res = part.header(header).and_then(|()| {
                                let mut spans = Vec::new();
                                crate::split::for_each_record(
                                    piece,
                                    line,
                                    delimiter,
                                    &mut spans,
                                    |l, f| part.row(l, f),
                                )
                            });
                            let run = part.times.take().and_then(Run::of_times);
                            (Piece::of(part, run), res)
                        })
                    })
                    .collect();
                // The round's first piece is this thread's, straight into the list.
                let offset = self.jobs.len();
                self.times = (!checked).then(|| Vec::with_capacity(starts[first + 1].1));
                let own = crate::split::for_each_record(
                    &body[cuts[first]..cuts[first + 1]],
                    starts[first].0,
                    delimiter,
                    spans,
                    |line, f| self.row(line, f),
                );
                let run = self.times.take().and_then(Run::of_times);
                self.add_run(offset, run, self.jobs.len() - offset);
                let parts: Vec<(Piece, Result<(), TraceError>)> = handles
                    .into_iter()
                    .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                    .collect();
                (own, parts)
            });
            own?;
            for (part, res) in parts {
                self.join(part)?;
                res?;
            }
        }
        Ok(())
    }

    /// Takes a piece's jobs and counts after this one's, checking its ids in file order.
    fn join(&mut self, mut part: Piece) -> Result<(), TraceError> {
        match part.lines.take() {
            Some(lines) if self.ids.is_some() => {
                self.jobs.reserve(part.jobs.len());
                for (j, line) in part.jobs.drain(..).zip(lines) {
                    self.keep_from_piece(line, j)?;
                }
            }
            _ => {
                self.add_run(self.jobs.len(), part.run.take(), part.jobs.len());
                self.jobs.append(&mut part.jobs);
            }
        }
        self.skipped += part.skipped;
        if let Some((line, e)) = part.first_skip
            && self.first_skip.as_ref().is_none_or(|(at, _)| line < *at)
        {
            self.first_skip = Some((line, e));
        }
        for (why, n) in part.excluded {
            *self.excluded.entry(why).or_default() += n;
        }
        Ok(())
    }

    /// Notes the order of a piece of `count` jobs from `offset`, or that the list must
    /// be sorted whole (`None`, or a run of another length).
    fn add_run(&mut self, offset: usize, run: Option<Run>, count: usize) {
        match (self.runs.as_mut(), run) {
            (Some(runs), Some(run)) if run.len() == count => runs.push((offset, run)),
            _ => self.runs = None,
        }
    }

    /// Reads `data` with the CSV reader: quoted fields, lone `\r`s, bad encodings.
    pub(crate) fn csv(
        &mut self,
        data: &[u8],
        tab: bool,
        spans: &mut Vec<(usize, usize)>,
    ) -> Result<(), TraceError> {
        let file = self.file;
        let (counted, mut lines) = crate::open::LineCount::new(crate::open::CrlfToLf::new(data));
        let mut rdr = csv::ReaderBuilder::new()
            .has_headers(!tab)
            .delimiter(if tab { b'\t' } else { b',' })
            .flexible(true)
            .quoting(!tab)
            .from_reader(counted);
        if !tab {
            let h = rdr
                .headers()
                .map_err(|e| TraceError::Row {
                    file: file.to_string(),
                    line: 1,
                    field: "header".into(),
                    message: e.to_string(),
                })?
                .clone();
            self.header(&h)?;
        }
        let mut rec = StringRecord::new();
        let mut line = if tab { 0 } else { 1 };
        loop {
            match rdr.read_record(&mut rec) {
                Ok(true) => {}
                Ok(false) => return Ok(()),
                Err(e) => {
                    let at = e.position().map_or(line + 1, |p| lines.line_of(p.byte()));
                    self.bad(
                        at,
                        TraceError::Row {
                            file: file.to_string(),
                            line: at,
                            field: "record".into(),
                            message: e.to_string(),
                        },
                    )?;
                    line += 1;
                    continue;
                }
            }
            line = rec.position().map_or(line + 1, |p| lines.line_of(p.byte()));
            self.row(line, &Fields::of_record(&rec, spans))?;
        }
    }
}

/// What a piece's thread hands back: its rows' outcome without its parser.
struct Piece {
    jobs: Vec<Job>,
    run: Option<Run>,
    lines: Option<Vec<u64>>,
    skipped: u64,
    first_skip: Option<(u64, String)>,
    excluded: BTreeMap<&'static str, u64>,
}

impl Piece {
    fn of(r: Rows<'_>, run: Option<Run>) -> Piece {
        Piece {
            jobs: r.jobs,
            run,
            lines: r.lines,
            skipped: r.skipped,
            first_skip: r.first_skip,
            excluded: r.excluded,
        }
    }
}

/// Where to cut `body` into pieces: offsets just past a line end (and 0 and the end),
/// one piece per thread unless that makes them smaller than `pieces.min_bytes` or
/// larger than both `pieces.max_bytes` and `pieces.even_bytes`; `[0, len]` when the
/// format's rows must be read in order or the body is under `pieces.min_file`.
fn cut(body: &str, pieces: Pieces, independent: bool) -> Vec<usize> {
    let len = body.len();
    if !independent || pieces.threads < 2 || len < pieces.min_file {
        return vec![0, len];
    }
    let even = len / pieces.threads;
    let size = if even <= pieces.even_bytes {
        even
    } else {
        even.min(pieces.max_bytes)
    }
    .max(pieces.min_bytes)
    .max(1);
    let mut cuts = vec![0];
    let mut from = size;
    while from < len {
        match memchr::memchr(b'\n', &body.as_bytes()[from..]) {
            Some(i) if from + i + 1 < len => cuts.push(from + i + 1),
            _ => break,
        }
        from = cuts[cuts.len() - 1] + size;
    }
    cuts.push(len);
    cuts
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::read::read_bytes;
    use apiary_model::rng::Rng;

    /// A random file of `format` (ITP raw, whose ids are checked, or Philly, numbered by
    /// line) with bad numbers, repeated ids, wrong field counts, blank and
    /// whitespace-only lines mixed in when `faults`.
    fn file(rng: &mut Rng, format: Format, rows: usize, faults: bool) -> String {
        let mut s = match format {
            Format::Philly => "timestamp,duration,num_gpus,gpu_time,cluster\n",
            _ => "job_id,submission_time,duration,num_gpu\n",
        }
        .to_string();
        if faults && rng.below(3) == 0 {
            s.insert(0, '\n');
        }
        for i in 0..rows {
            let fault = if faults { rng.below(40) } else { 99 };
            let gpus = 1 << rng.below(4);
            let (t, d) = (rng.below(100_000), rng.below(50_000));
            let line = match (format, fault) {
                (_, 0) => String::new(),
                (_, 1) => "  ".to_string(),
                (_, 2) => "1,2\r".to_string(),
                (Format::Philly, 3) => format!("2017-10-09 07:0x:55,{d}.0,{gpus},0,vc"),
                (Format::Philly, _) => format!(
                    "2017-10-{:02} {:02}:{:02}:{:02},{d}.0,{gpus},{d}.0,vc{}",
                    1 + t % 28,
                    t % 24,
                    t % 60,
                    d % 60,
                    t % 5
                ),
                (_, 3) => format!("j{i},{t},x{d},{gpus}"),
                (_, 4) => format!("j{},{t},{d},{gpus}", rng.below(i as u64 + 1)),
                (_, 5) => format!(",{t},{d},{gpus}"),
                _ => format!("j{i},{t},{d},{gpus}"),
            };
            s.push_str(&line);
            s.push('\n');
        }
        s
    }

    fn outcome(text: &str, format: Format, skip: bool, pieces: Pieces) -> String {
        let opts = ReadOptions {
            format: Some(format),
            skip_bad_rows: skip,
            ..ReadOptions::default()
        };
        let p = Path::new("t.csv");
        match read_bytes(text.as_bytes().to_vec(), "t.csv", p, format, &opts, pieces) {
            Ok(t) => format!(
                "{:?} {} {:?} {:?}",
                t.jobs, t.skipped, t.first_skip, t.excluded
            ),
            Err(e) => format!("error: {e}"),
        }
    }

    /// Cut into any number of pieces, read in any number of rounds, a file reads as it
    /// does in one pass: the same jobs, counts and first skip, or the same error (the
    /// earliest in the file, a repeated id in one piece coming before a bad row in a
    /// later one).
    #[test]
    fn pieces_read_as_one_pass_does() {
        let mut rng = Rng::new(7);
        let one = Pieces {
            threads: 1,
            min_file: 0,
            min_bytes: 1,
            max_bytes: usize::MAX,
            even_bytes: 0,
        };
        let mut errors = 0;
        for case in 0..300 {
            let format = if case % 2 == 0 {
                Format::Itp
            } else {
                Format::Philly
            };
            // Now and then a file long enough that its pieces are sorted by radix.
            let rows = if case % 50 == 1 {
                2_000 + rng.below(1_000) as usize
            } else {
                1 + rng.below(60) as usize
            };
            let text = file(&mut rng, format, rows, case % 5 != 0);
            for skip in [false, true] {
                let want = outcome(&text, format, skip, one);
                errors += usize::from(want.starts_with("error"));
                for threads in [2, 3, 7] {
                    // A long file's pieces of some hundreds of rows.
                    let scale = if rows > 1_000 { 500 } else { 1 };
                    let min_bytes = scale * (1 + rng.below(64) as usize);
                    let pieces = Pieces {
                        threads,
                        min_file: 0,
                        min_bytes,
                        max_bytes: min_bytes + scale * rng.below(400) as usize,
                        even_bytes: 0,
                    };
                    assert_eq!(
                        outcome(&text, format, skip, pieces),
                        want,
                        "case {case}, skip {skip}, {pieces:?}:\n{text}"
                    );
                }
            }
        }
        // The faults do reach the comparison.
        assert!(errors > 50, "{errors}");
    }

    #[test]
    fn cuts_fall_just_past_line_ends_and_cover_the_text() {
        let body = "a,1\nbb,22\nccc,333\nd,4\n";
        let pieces = |threads, min_bytes, max_bytes| Pieces {
            threads,
            min_file: 10,
            min_bytes,
            max_bytes,
            even_bytes: 0,
        };
        for threads in 1..8 {
            for max in [1, 5, 100] {
                let c = cut(body, pieces(threads, 1, max), true);
                assert_eq!(c.first(), Some(&0));
                assert_eq!(c.last(), Some(&body.len()));
                assert!(c.windows(2).all(|w| w[0] < w[1]), "{c:?}");
                for &x in &c[1..c.len() - 1] {
                    assert_eq!(body.as_bytes()[x - 1], b'\n', "{c:?}");
                }
                if max == 100 {
                    assert!(c.len() - 1 <= threads, "{c:?}");
                }
            }
        }
        // One line a piece when pieces may be a byte long.
        assert_eq!(cut(body, pieces(2, 1, 1), true), vec![0, 4, 10, 18, 22]);
        assert_eq!(cut(body, pieces(8, 1, 9), false), vec![0, body.len()]);
        assert_eq!(cut(body, pieces(8, 100, 200), true), vec![0, body.len()]);
        // One piece per thread where that many pieces of `even_bytes` cover the text,
        // however small `max_bytes` is.
        let even = Pieces {
            even_bytes: 11,
            ..pieces(2, 1, 1)
        };
        assert_eq!(cut(body, even, true), vec![0, 18, body.len()]);
        let uneven = Pieces {
            even_bytes: 10,
            ..pieces(2, 1, 4)
        };
        assert_eq!(cut(body, uneven, true), vec![0, 10, 18, 22]);
        assert_eq!(cut("", pieces(8, 1, 1), true), vec![0, 0]);
        // Below the smallest file cut.
        assert_eq!(cut("a,1\nb,2\n", pieces(8, 1, 1), true), vec![0, 8]);
    }
}
