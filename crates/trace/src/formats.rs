//! Format detection and one row parser per format.

use crate::fields::{Parsed, RowAt, column, optional_column, stage_fits};
use crate::open::{first_line, open};
use crate::split::Fields;
use crate::{ReadOptions, Trace, TraceError};
use apiary_model::{Job, StageTimes, Time, ToCompactString};
use csv::StringRecord;
use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

/// A trace format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// apiary's canonical CSV (times in seconds).
    Apiary,
    /// apiary's canonical JSON lines (same fields).
    Jsonl,
    /// Philly per-job summary (`philly.csv`, Pollux artifact).
    Philly,
    /// Gavel per-VC trace, 7 tab-separated fields.
    Gavel,
    /// Gavel physical-cluster trace, 10 tab-separated fields.
    Gavel10,
    /// Microsoft ITP raw (`job_id,submission_time,duration,num_gpu`).
    Itp,
    /// ITP with ElasticFlow's generated fields (`…,deadline,batch_size,num_gpu,duration`).
    ItpElasticflow,
    /// ElasticFlow's own CSV (`job_id,submit_time,…,ddl,…`).
    Elasticflow,
    /// Muri CSV (milliseconds, stage times).
    Muri,
    /// Tiresias CSV (seconds).
    Tiresias,
    /// Pollux workload (`name,time,application,num_replicas,batch_size`).
    Pollux,
    /// Alibaba GPU v2023 pod list.
    Alibaba,
}

const ALL: [(Format, &str); 12] = [
    (Format::Apiary, "apiary"),
    (Format::Jsonl, "jsonl"),
    (Format::Philly, "philly"),
    (Format::Gavel, "gavel"),
    (Format::Gavel10, "gavel10"),
    (Format::Itp, "itp"),
    (Format::ItpElasticflow, "itp-elasticflow"),
    (Format::Elasticflow, "elasticflow"),
    (Format::Muri, "muri"),
    (Format::Tiresias, "tiresias"),
    (Format::Pollux, "pollux"),
    (Format::Alibaba, "alibaba"),
];

impl Format {
    /// Parses a format name.
    pub fn parse(s: &str) -> Option<Format> {
        ALL.iter().find(|(_, n)| *n == s).map(|(f, _)| *f)
    }
    /// The name.
    pub fn name(self) -> &'static str {
        ALL.iter().find(|(f, _)| *f == self).map_or("?", |(_, n)| n)
    }
    /// Every format name.
    pub fn names() -> String {
        ALL.iter().map(|(_, n)| *n).collect::<Vec<_>>().join(", ")
    }

    /// The column (or JSON field) that holds job ids; `None` for formats that number
    /// their rows instead.
    pub(crate) fn id_field(self) -> Option<&'static str> {
        match self {
            Format::Apiary | Format::Jsonl => Some("id"),
            Format::Pollux | Format::Alibaba => Some("name"),
            Format::Philly | Format::Gavel | Format::Gavel10 => None,
            _ => Some("job_id"),
        }
    }

    /// Whether a row's job depends on its text and line number alone, so that pieces of
    /// a file can be parsed apart. Gavel's rows are numbered by the jobs before them.
    pub(crate) fn rows_independent(self) -> bool {
        !matches!(self, Format::Gavel | Format::Gavel10)
    }

    /// Recognises a format from a file's first line.
    pub fn detect(first: &str) -> Option<Format> {
        let t = first.trim();
        if t.starts_with('{') {
            return Some(Format::Jsonl);
        }
        if t.contains('\t') {
            return match t.split('\t').count() {
                7 => Some(Format::Gavel),
                10 => Some(Format::Gavel10),
                _ => None,
            };
        }
        let h: Vec<&str> = t.split(',').map(str::trim).collect();
        let has = |c: &str| h.contains(&c);
        if h.first() == Some(&"id") && has("submit") && has("gpus") && has("duration") {
            Some(Format::Apiary)
        } else if h == ["timestamp", "duration", "num_gpus", "gpu_time", "cluster"] {
            Some(Format::Philly)
        } else if has("resource_time_0") && has("iteration_time") {
            Some(Format::Muri)
        } else if has("submission_time") && has("deadline") {
            Some(Format::ItpElasticflow)
        } else if has("submission_time") && has("num_gpu") {
            Some(Format::Itp)
        } else if has("ddl") && has("submit_time") {
            Some(Format::Elasticflow)
        } else if has("submit_time") && has("num_gpu") && has("duration") && has("model_name") {
            Some(Format::Tiresias)
        } else if h == ["name", "time", "application", "num_replicas", "batch_size"] {
            Some(Format::Pollux)
        } else if has("gpu_milli") && has("creation_time") {
            Some(Format::Alibaba)
        } else {
            None
        }
    }
}

/// Days since 1970-01-01 of a civil date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Seconds since 1970 of a `YYYY-MM-DD HH:MM:SS` date, or what is wrong with it.
/// Years run 1970..=9999: earlier ones would put a job before the Unix epoch Philly's
/// clock counts from, later ones are typos.
fn parse_datetime(s: &str) -> Result<i64, String> {
    let bad = || format!("'{s}' is not a date YYYY-MM-DD HH:MM:SS");
    let [y, mo, da, h, mi, se] = match fixed_datetime(s.trim().as_bytes()) {
        Some(v) => v,
        None => loose_datetime(s).ok_or_else(bad)?,
    };
    if !(1970..=9999).contains(&y) {
        return Err(format!("'{s}': year {y} is outside 1970..=9999"));
    }
    if !(1..=12).contains(&mo) {
        return Err(format!("'{s}': month {mo} is outside 1..=12"));
    }
    if !(1..=days_in_month(y, mo)).contains(&da) {
        return Err(format!("'{s}': {y}-{mo:02} has no day {da}"));
    }
    if h > 23 || mi > 59 || se > 60 {
        return Err(format!(
            "'{s}': {h:02}:{mi:02}:{se:02} is not a time of day"
        ));
    }
    Ok(days_from_civil(y, mo, da) * 86_400 + h * 3600 + mi * 60 + se)
}

/// The six numbers of a date written exactly `YYYY-MM-DD HH:MM:SS` (as every Philly row
/// is), read without splitting; `None` sends other spellings to [`loose_datetime`].
fn fixed_datetime(b: &[u8]) -> Option<[i64; 6]> {
    if b.len() != 19
        || b[4] != b'-'
        || b[7] != b'-'
        || b[10] != b' '
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        b[r].iter().try_fold(0i64, |v, &c| {
            c.is_ascii_digit().then(|| v * 10 + i64::from(c - b'0'))
        })
    };
    Some([
        num(0..4)?,
        num(5..7)?,
        num(8..10)?,
        num(11..13)?,
        num(14..16)?,
        num(17..19)?,
    ])
}

/// The six numbers of a date with any number of digits per part (`2017-1-9 7:01:55`).
fn loose_datetime(s: &str) -> Option<[i64; 6]> {
    let (date, time) = s.trim().split_once(' ')?;
    // Unsigned parses: a '-1' hour is not an hour.
    let num = |x: &str| {
        if x.is_empty() || !x.bytes().all(|b| b.is_ascii_digit()) {
            None
        } else {
            x.parse::<u32>().ok().map(i64::from)
        }
    };
    // Three numbers each, without allocating.
    let three = |s: &str, sep: char| -> Option<[i64; 3]> {
        let mut it = s.split(sep);
        let v = [num(it.next()?)?, num(it.next()?)?, num(it.next()?)?];
        it.next().is_none().then_some(v)
    };
    let ([y, mo, da], [h, mi, se]) = (three(date, '-')?, three(time.trim(), ':')?);
    Some([y, mo, da, h, mi, se])
}

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
        skipped,
        first_skip,
        excluded,
        ..
    } = rows;
    if format == Format::Philly {
        // Philly times are wall-clock dates: start the trace at its first submission.
        if let Some(min) = jobs.iter().map(|j| j.submit).min() {
            for j in &mut jobs {
                j.submit -= min;
            }
        }
    }
    crate::sort_by_submit(&mut jobs);
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

/// ElasticFlow's throughput tables for the GPU type asked for (A100 by default, the
/// artifact's `--gpu_type`).
fn ef_tables(opts: &ReadOptions) -> Result<Option<crate::elasticflow::Tables>, TraceError> {
    let gpu = opts.elasticflow_gpu.as_deref().unwrap_or("A100");
    crate::elasticflow::Tables::builtin(gpu)
        .map(Some)
        .ok_or_else(|| TraceError::Missing {
            file: "--elasticflow-gpu".into(),
            message: format!(
                "no ElasticFlow throughput tables for GPU type '{gpu}' (one of: {})",
                crate::elasticflow::GPU_TYPES.join(", ")
            ),
        })
}

/// Gives a job with a model, global batch and iteration count its row of ElasticFlow's
/// tables, and makes its duration the time those iterations take on its trace GPU
/// count (the artifact ignores the trace's `duration` column).
fn attach_scaling(
    cx: &RowAt<'_>,
    j: &mut Job,
    t: &crate::elasticflow::Tables,
    model_field: &str,
) -> Result<(), TraceError> {
    let (Some(model), Some(batch), Some(iters)) = (j.model.as_deref(), j.batch_size, j.iterations)
    else {
        return Ok(());
    };
    let s = t
        .scaling(model, batch)
        .map_err(|e| cx.err(model_field, e.to_string()))?;
    let tput = s.tput(j.gpus).ok_or_else(|| {
        cx.err(
            "num_gpu",
            format!(
                "model '{model}' batch {batch} has no {} throughput at {} GPUs",
                t.gpu(),
                j.gpus
            ),
        )
    })?;
    let secs = (iters as f64 / tput).ceil();
    j.duration =
        apiary_model::time::secs_f64(secs).ok_or_else(|| cx.err("iteration", "out of range"))?;
    j.extras_mut().scaling = Some(s);
    Ok(())
}

pub(crate) type Parser = Box<dyn FnMut(&RowAt<'_>, &Fields<'_>) -> Result<Parsed, TraceError>>;

pub(crate) fn make_parser(
    format: Format,
    h: &StringRecord,
    file: &str,
    path: &Path,
    opts: &ReadOptions,
) -> Result<Parser, TraceError> {
    let c = |n: &str| column(h, n, file);
    Ok(match format {
        Format::Apiary => crate::canonical::csv_parser(h, file)?,
        Format::Pollux => {
            let apps = crate::pollux::applications().map_err(|e| TraceError::Missing {
                file: file.to_string(),
                message: e.to_string(),
            })?;
            let (na, ti, ap, nr, bs) = (
                c("name")?,
                c("time")?,
                c("application")?,
                c("num_replicas")?,
                c("batch_size")?,
            );
            Box::new(move |cx, r| {
                let name = cx.text(r, ap, "application")?;
                let app = apps.get(name).ok_or_else(|| {
                    cx.err(
                        "application",
                        format!(
                            "unknown application '{name}' (one of: {})",
                            crate::pollux::names().join(", ")
                        ),
                    )
                })?;
                let mut j = Job::new(
                    cx.text(r, na, "name")?,
                    cx.secs(r, ti, "time")?,
                    cx.gpus(r, nr, "num_replicas")?,
                    0,
                );
                j.model = Some(name.to_string());
                // Pollux's agents split the batch over replicas and accumulation steps up
                // to the application's largest batch; beyond it (or at 0) a step carries
                // no samples and the job would never finish.
                let batch = cx.u32(r, bs, "batch_size")?;
                if batch == 0 || batch > app.max_batch {
                    return Err(cx.err(
                        "batch_size",
                        format!(
                            "{batch} is outside {name}'s batch sizes 1..={}",
                            app.max_batch
                        ),
                    ));
                }
                j.batch_size = Some(batch);
                j.extras_mut().adaptive =
                    Some(apiary_model::adaptive::Adaptive { app: app.clone() });
                Ok(Parsed::Job(j))
            })
        }
        Format::Philly => {
            let (ts, du, ng, cl) = (
                c("timestamp")?,
                c("duration")?,
                c("num_gpus")?,
                c("cluster")?,
            );
            Box::new(move |cx, r| {
                let t = parse_datetime(cx.text(r, ts, "timestamp")?)
                    .map_err(|m| cx.err("timestamp", m))?;
                let mut j = Job::new(
                    (cx.line - 1).to_compact_string(),
                    // 9999-12-31 is 2.5e14 ms: far inside MAX_INPUT.
                    t as Time * 1000,
                    cx.gpus(r, ng, "num_gpus")?,
                    cx.secs(r, du, "duration")?,
                );
                j.vc = cx.opt(r, Some(cl));
                Ok(Parsed::Job(j))
            })
        }
        Format::Itp | Format::ItpElasticflow => {
            let tables = ef_tables(opts)?;
            let (id, st, du, ng) = (
                c("job_id")?,
                c("submission_time")?,
                c("duration")?,
                c("num_gpu")?,
            );
            let (it, mo, dl, bs) = (
                optional_column(h, "num_iteration"),
                optional_column(h, "model_name"),
                optional_column(h, "deadline"),
                optional_column(h, "batch_size"),
            );
            Box::new(move |cx, r| {
                let mut j = Job::new(
                    cx.text(r, id, "job_id")?,
                    cx.secs(r, st, "submission_time")?,
                    cx.gpus(r, ng, "num_gpu")?,
                    cx.secs(r, du, "duration")?,
                );
                if let Some(i) = it {
                    j.iterations = Some(cx.integer(r, i, "num_iteration")?)
                }
                j.model = cx.opt(r, mo);
                if let Some(i) = dl {
                    j.deadline = Some(cx.secs(r, i, "deadline")?)
                }
                if let Some(i) = bs {
                    j.batch_size = Some(cx.u32(r, i, "batch_size")?)
                }
                if let Some(t) = &tables {
                    attach_scaling(cx, &mut j, t, "model_name")?;
                }
                Ok(Parsed::Job(j))
            })
        }
        Format::Elasticflow => {
            let tables = ef_tables(opts)?;
            let (id, st, ng, du, dl) = (
                c("job_id")?,
                c("submit_time")?,
                c("num_gpu")?,
                c("duration")?,
                c("ddl")?,
            );
            let it = optional_column(h, "iteration").or(optional_column(h, "real_iteration"));
            let (mo, bs, be) = (
                optional_column(h, "model_name"),
                optional_column(h, "batch_size"),
                optional_column(h, "best_effort"),
            );
            Box::new(move |cx, r| {
                let mut j = Job::new(
                    cx.text(r, id, "job_id")?,
                    cx.secs(r, st, "submit_time")?,
                    cx.gpus(r, ng, "num_gpu")?,
                    cx.secs(r, du, "duration")?,
                );
                if let Some(i) = it {
                    j.iterations = Some(cx.integer(r, i, "iteration")?)
                }
                j.model = cx.opt(r, mo);
                if let Some(i) = bs {
                    j.batch_size = Some(cx.u32(r, i, "batch_size")?)
                }
                let best_effort = match be {
                    Some(i) => cx.integer(r, i, "best_effort")? == 1,
                    None => false,
                };
                if !best_effort {
                    j.deadline = Some(cx.secs(r, dl, "ddl")?);
                }
                if let Some(t) = &tables {
                    attach_scaling(cx, &mut j, t, "model_name")?;
                }
                Ok(Parsed::Job(j))
            })
        }
        Format::Muri => {
            let factor = opts.muri_itertime_factor.unwrap_or(1.015);
            let (id, ng, st, it, mo, bs, itt) = (
                c("job_id")?,
                c("num_gpu")?,
                c("submit_time")?,
                c("iterations")?,
                c("model_name")?,
                c("batch_size")?,
                c("iteration_time")?,
            );
            let (r0, r1, r2, pr) = (
                c("resource_time_0")?,
                c("resource_time_1")?,
                c("resource_time_2")?,
                optional_column(h, "priority"),
            );
            Box::new(move |cx, r| {
                let iters = cx.integer(r, it, "iterations")?;
                let t = cx.number(r, itt, "iteration_time")?;
                let dur = iters as f64 * t * factor;
                let dur = apiary_model::time::millis_f64(dur).ok_or_else(|| {
                    cx.beyond(
                        "iteration_time",
                        &format!("{iters} iterations x {t} ms x {factor}"),
                    )
                })?;
                let mut j = Job::new(
                    cx.text(r, id, "job_id")?,
                    cx.millis(r, st, "submit_time")?,
                    cx.gpus(r, ng, "num_gpu")?,
                    dur,
                );
                j.iterations = Some(iters);
                j.model = cx.opt(r, Some(mo));
                j.batch_size = Some(cx.u32(r, bs, "batch_size")?);
                // A stage's time over every iteration obeys the same limit as the
                // job's duration, so interleaving arithmetic stays finite.
                let stage = |i: usize, field: &str| -> Result<f64, TraceError> {
                    let x = cx.number(r, i, field)?;
                    if !stage_fits(x, iters) {
                        return Err(cx.beyond(field, &format!("{iters} iterations x {x} ms")));
                    }
                    Ok(x)
                };
                j.extras_mut().stages = Some(StageTimes {
                    data: stage(r0, "resource_time_0")?,
                    gpu: stage(r1, "resource_time_1")?,
                    net: stage(r2, "resource_time_2")?,
                });
                if let Some(i) = pr {
                    j.priority = cx.i32(r, i, "priority")?
                }
                Ok(Parsed::Job(j))
            })
        }
        Format::Tiresias => {
            let (id, ng, st, du) = (
                c("job_id")?,
                c("num_gpu")?,
                c("submit_time")?,
                c("duration")?,
            );
            let (it, mo) = (
                optional_column(h, "iterations"),
                optional_column(h, "model_name"),
            );
            Box::new(move |cx, r| {
                let mut j = Job::new(
                    cx.text(r, id, "job_id")?,
                    cx.secs(r, st, "submit_time")?,
                    cx.gpus(r, ng, "num_gpu")?,
                    cx.secs(r, du, "duration")?,
                );
                if let Some(i) = it {
                    j.iterations = Some(cx.integer(r, i, "iterations")?)
                }
                j.model = cx.opt(r, mo);
                Ok(Parsed::Job(j))
            })
        }
        Format::Alibaba => {
            let (nm, ng, gm, spec, ct, dt, stt) = (
                c("name")?,
                c("num_gpu")?,
                c("gpu_milli")?,
                c("gpu_spec")?,
                c("creation_time")?,
                c("deletion_time")?,
                c("scheduled_time")?,
            );
            let qos = optional_column(h, "qos");
            Box::new(move |cx, r| {
                let g = cx.gpus(r, ng, "num_gpu")?;
                let milli = cx.integer(r, gm, "gpu_milli")?;
                if g == 0 {
                    return Ok(Parsed::Excluded("CPU-only pod (num_gpu = 0)"));
                }
                if cx.opt_text(r, Some(stt)).is_none() || cx.opt_text(r, Some(dt)).is_none() {
                    return Ok(Parsed::Excluded(
                        "never scheduled or never deleted (empty scheduled_time or deletion_time)",
                    ));
                }
                let (c0, d0, s0) = (
                    cx.integer(r, ct, "creation_time")?,
                    cx.integer(r, dt, "deletion_time")?,
                    cx.integer(r, stt, "scheduled_time")?,
                );
                if d0 < s0 {
                    return Err(cx.err(
                        "deletion_time",
                        format!("{d0} is before scheduled_time {s0}"),
                    ));
                }
                if s0 == 0 && c0 > 0 {
                    return Ok(Parsed::Excluded("never scheduled (scheduled_time = 0)"));
                }
                let dur = apiary_model::time::secs_u64(d0 - s0)
                    .ok_or_else(|| cx.beyond("deletion_time", &format!("{d0} - {s0} s")))?;
                let submit = apiary_model::time::secs_u64(c0)
                    .ok_or_else(|| cx.beyond("creation_time", &format!("{c0} s")))?;
                let mut j = Job::new(cx.text(r, nm, "name")?, submit, g, dur);
                j.gpu_type = cx
                    .opt_text(r, Some(spec))
                    .map(|s| s.split('|').next().unwrap_or("").to_string());
                if milli > 0 && milli < 1000 {
                    // Fractional pods take one whole GPU here; GPU sharing is a later model.
                    j.model = Some(format!("shared-{milli}m"));
                }
                j.priority = match cx.opt_text(r, qos) {
                    Some("LS") | Some("Guaranteed") => 1,
                    _ => 0,
                };
                Ok(Parsed::Job(j))
            })
        }
        Format::Gavel | Format::Gavel10 => {
            let table = gavel_table(path, file, opts)?;
            let ten = format == Format::Gavel10;
            let (ty, steps, sf, at) = if ten { (0, 5, 6, 9) } else { (0, 4, 6, 5) };
            let worker = opts.gavel_worker.clone().unwrap_or_else(|| "v100".into());
            let types: Vec<String> = table
                .keys()
                .map(|k| k.0.clone())
                .filter(|w| !w.contains("unconsolidated"))
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect();
            let mut n = 0u64;
            Box::new(move |cx, r| {
                let want = if ten { 10 } else { 7 };
                if r.len() != want {
                    return Err(cx.err(
                        "record",
                        format!("expected {want} tab-separated fields, found {}", r.len()),
                    ));
                }
                let jt = cx.text(r, ty, "job_type")?;
                let s = cx.integer(r, steps, "total_steps")?;
                let g = cx.gpus(r, sf, "scale_factor")?;
                // Gavel's per-VC traces draw job types at random, so some (type, scale)
                // pairs were never measured; those fall back to the 1-GPU throughput.
                let lookup = |w: &str| {
                    table
                        .get(&(w.to_string(), jt.to_string(), g))
                        .or_else(|| table.get(&(w.to_string(), jt.to_string(), 1)))
                        .copied()
                };
                let tput = lookup(&worker).filter(|t| *t > 0.0).ok_or_else(|| {
                    cx.err(
                        "job_type",
                        format!("no {worker} throughput for ('{jt}', {g}) in the Gavel table"),
                    )
                })?;
                let dur = apiary_model::time::millis_f64(s as f64 / tput * 1000.0)
                    .ok_or_else(|| cx.beyond("total_steps", &format!("{s} steps at {tput}/s")))?;
                let mut j = Job::new(format!("{n}"), cx.secs(r, at, "arrival_time")?, g, dur);
                n += 1;
                j.iterations = Some(s);
                j.model = Some(jt.to_string());
                // Speeds on every GPU type the table measured, for heterogeneous
                // clusters (Gavel's throughput matrix).
                let speeds: BTreeMap<String, f64> = types
                    .iter()
                    .filter_map(|w| lookup(w).map(|t| (w.to_lowercase(), t / tput)))
                    .collect();
                if !speeds.is_empty() {
                    j.extras_mut().type_speeds = Some(speeds);
                }
                if ten {
                    let w = cx.number(r, 7, "priority_weight")?.round();
                    if w > i32::MAX as f64 {
                        return Err(cx.err(
                            "priority_weight",
                            format!("{w} is out of range (at most {})", i32::MAX),
                        ));
                    }
                    j.priority = w as i32;
                }
                Ok(Parsed::Job(j))
            })
        }
        Format::Jsonl => unreachable!("handled before"),
    })
}

fn gavel_table(
    path: &Path,
    file: &str,
    opts: &ReadOptions,
) -> Result<BTreeMap<(String, String, u32), f64>, TraceError> {
    let found = opts.gavel_throughputs.clone().or_else(|| {
        crate::speed::find_peer_file(path.parent(), "peers/gavel/simulation_throughputs.json")
    });
    let Some(tp) = found else {
        return Err(TraceError::Missing {
            file: file.into(),
            message: "Gavel traces give work in steps; pass --gavel-throughputs simulation_throughputs.json".into(),
        });
    };
    crate::speed::read_gavel_throughputs(&tp)
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn detects_headers() {
        assert_eq!(
            Format::detect("timestamp,duration,num_gpus,gpu_time,cluster"),
            Some(Format::Philly)
        );
        assert_eq!(
            Format::detect("job_id,submission_time,duration,num_gpu"),
            Some(Format::Itp)
        );
        assert_eq!(
            Format::detect("job_id,num_gpu,submit_time,iterations,model_name,duration,interval"),
            Some(Format::Tiresias)
        );
        assert_eq!(Format::detect("a\tb\tc\td\te\tf\tg"), Some(Format::Gavel));
        assert_eq!(Format::detect("hello,world"), None);
    }
    #[test]
    fn civil_dates() {
        assert_eq!(parse_datetime("1970-01-01 00:00:00"), Ok(0));
        assert_eq!(parse_datetime("2017-10-09 07:01:55"), Ok(1_507_532_515));
        assert_eq!(parse_datetime("2016-02-29 00:00:00"), Ok(1_456_704_000));
        for bad in [
            "2017-13-09 07:01:55",
            "yesterday",
            "2017-02-30 00:00:00",
            "2017-02-29 00:00:00",
            "2017-04-31 00:00:00",
            "2017-03-01 -1:00:00",
            "2017-03-01 +1:00:00",
            "2017-03-01 24:00:00",
            "900000000-10-01 00:00:00",
            "1969-12-31 23:59:59",
            "2017-03-01 01:00",
            "2017-03-01 01:00:00:00",
        ] {
            assert!(parse_datetime(bad).is_err(), "{bad}");
        }
        assert!(
            parse_datetime("2017-02-30 00:00:00")
                .unwrap_err()
                .contains("has no day 30")
        );
    }
}
