//! apiary's own trace format: one row per job, times in seconds (millisecond
//! precision), every optional field of [`Job`] as a column. CSV and JSON lines carry
//! the same fields under the same names.

use crate::fields::{MAX_GPUS, Parsed, RowAt, stage_fits};
use crate::{ReadOptions, Trace, TraceError};
use apiary_model::{CompactString, Job, JobExtras, StageTimes, Time};
use csv::StringRecord;
use serde::{Deserialize, Serialize};
use std::io::{BufRead, Write};
use std::path::Path;

/// Column order of the canonical CSV.
pub const COLUMNS: [&str; 16] = [
    "id",
    "submit",
    "gpus",
    "duration",
    "iterations",
    "model",
    "batch_size",
    "vc",
    "priority",
    "deadline",
    "stage_data_ms",
    "stage_gpu_ms",
    "stage_net_ms",
    "dataset_gb",
    "gpu_type",
    "type_speeds",
];

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Row {
    id: CompactString,
    submit: f64,
    gpus: u32,
    duration: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    iterations: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    batch_size: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    vc: Option<CompactString>,
    #[serde(default)]
    priority: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    deadline: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    stage_data_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    stage_gpu_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    stage_net_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    dataset_gb: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    gpu_type: Option<String>,
    /// Speed per GPU type relative to `duration`'s, as `k80:0.14;v100:1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    type_speeds: Option<String>,
}

fn secs(ms: Time) -> f64 {
    ms as f64 / 1000.0
}

impl Row {
    fn from_job(j: &Job) -> Row {
        Row {
            id: j.id.clone(),
            submit: secs(j.submit),
            gpus: j.gpus,
            duration: secs(j.duration),
            iterations: j.iterations,
            model: j.model.clone(),
            batch_size: j.batch_size,
            vc: j.vc.clone(),
            priority: j.priority,
            deadline: j.deadline.map(secs),
            stage_data_ms: j.extras().stages.map(|s| s.data),
            stage_gpu_ms: j.extras().stages.map(|s| s.gpu),
            stage_net_ms: j.extras().stages.map(|s| s.net),
            dataset_gb: j.extras().dataset_gb,
            gpu_type: j.gpu_type.clone(),
            type_speeds: j.extras().type_speeds.as_ref().map(|m| {
                m.iter()
                    .map(|(k, v)| format!("{k}:{v}"))
                    .collect::<Vec<_>>()
                    .join(";")
            }),
        }
    }
}

fn parse_speeds(text: &str) -> Result<std::collections::BTreeMap<String, f64>, String> {
    text.split(';')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(|e| {
            let (t, v) = e
                .split_once(':')
                .ok_or_else(|| format!("'{e}' is not TYPE:SPEED"))?;
            let v: f64 = v
                .trim()
                .parse()
                .ok()
                .filter(|x: &f64| x.is_finite() && *x >= 0.0)
                .ok_or_else(|| format!("'{e}': the speed is not a non-negative number"))?;
            Ok((t.trim().to_lowercase(), v))
        })
        .collect()
}

fn ms(field: &str, v: f64) -> Result<Time, String> {
    apiary_model::time::secs_f64(v)
        .ok_or_else(|| format!("{field}: {v} is not a non-negative number of seconds"))
}

fn to_job(r: Row) -> Result<Job, (String, String)> {
    if r.gpus as u64 > MAX_GPUS {
        return Err((
            "gpus".into(),
            format!("{} GPUs is out of range (at most {})", r.gpus, MAX_GPUS),
        ));
    }
    // A dataset size must be finite too, so cache arithmetic stays finite.
    let iters = r.iterations.unwrap_or(0);
    for (field, v) in [
        ("stage_data_ms", r.stage_data_ms),
        ("stage_gpu_ms", r.stage_gpu_ms),
        ("stage_net_ms", r.stage_net_ms),
    ] {
        if let Some(x) = v
            && !stage_fits(x, iters)
        {
            return Err((
                field.into(),
                format!(
                    "{x} ms per iteration is not a non-negative time within 10^12 s over {iters} iterations"
                ),
            ));
        }
    }
    if let Some(x) = r
        .dataset_gb
        .filter(|x| !(x.is_finite() && (0.0..=1e12).contains(x)))
    {
        return Err((
            "dataset_gb".into(),
            format!("{x} is not a size in 0..=10^12 GB"),
        ));
    }
    let mut j = Job::new(
        r.id,
        ms("submit", r.submit).map_err(|m| ("submit".into(), m))?,
        r.gpus,
        ms("duration", r.duration).map_err(|m| ("duration".into(), m))?,
    );
    j.iterations = r.iterations;
    j.model = r.model;
    j.batch_size = r.batch_size;
    j.vc = r.vc;
    j.priority = r.priority;
    j.deadline = r
        .deadline
        .map(|d| ms("deadline", d))
        .transpose()
        .map_err(|m| ("deadline".into(), m))?;
    j.gpu_type = r.gpu_type;
    j.set_extras(JobExtras {
        stages: match (r.stage_data_ms, r.stage_gpu_ms, r.stage_net_ms) {
            (None, None, None) => None,
            (d, g, n) => Some(StageTimes {
                data: d.unwrap_or(0.0),
                gpu: g.unwrap_or(0.0),
                net: n.unwrap_or(0.0),
            }),
        },
        dataset_gb: r.dataset_gb,
        type_speeds: r
            .type_speeds
            .as_deref()
            .map(parse_speeds)
            .transpose()
            .map_err(|m| ("type_speeds".to_string(), m))?
            .filter(|m| !m.is_empty()),
        ..JobExtras::default()
    });
    Ok(j)
}

/// Writes jobs as canonical CSV.
pub fn write_csv(jobs: &[Job], out: impl Write) -> std::io::Result<()> {
    let mut w = csv::WriterBuilder::new()
        .has_headers(false)
        .from_writer(out);
    w.write_record(COLUMNS).map_err(io_error)?;
    let o = |x: Option<String>| x.unwrap_or_default();
    for j in jobs {
        let r = Row::from_job(j);
        w.write_record([
            r.id.into_string(),
            format!("{:.3}", r.submit),
            r.gpus.to_string(),
            format!("{:.3}", r.duration),
            o(r.iterations.map(|x| x.to_string())),
            o(r.model),
            o(r.batch_size.map(|x| x.to_string())),
            o(r.vc.map(CompactString::into_string)),
            r.priority.to_string(),
            o(r.deadline.map(|x| format!("{x:.3}"))),
            o(r.stage_data_ms.map(|x| x.to_string())),
            o(r.stage_gpu_ms.map(|x| x.to_string())),
            o(r.stage_net_ms.map(|x| x.to_string())),
            o(r.dataset_gb.map(|x| x.to_string())),
            o(r.gpu_type),
            o(r.type_speeds),
        ])
        .map_err(io_error)?;
    }
    w.flush()
}

/// The writer's own error when the CSV writer failed writing, so a caller can tell a
/// closed pipe (`ErrorKind::BrokenPipe`) from a full disk.
fn io_error(e: csv::Error) -> std::io::Error {
    if !e.is_io_error() {
        return std::io::Error::other(e);
    }
    match e.into_kind() {
        csv::ErrorKind::Io(io) => io,
        other => std::io::Error::other(format!("{other:?}")),
    }
}

/// Writes jobs as canonical JSON lines.
pub fn write_jsonl(jobs: &[Job], mut out: impl Write) -> std::io::Result<()> {
    for j in jobs {
        serde_json::to_writer(&mut out, &Row::from_job(j))?;
        out.write_all(b"\n")?;
    }
    out.flush()
}

type CsvParser = Box<
    dyn FnMut(&RowAt<'_>, &crate::split::Fields<'_>, &mut Vec<Job>) -> Result<Parsed, TraceError>,
>;

pub(crate) fn csv_parser(h: &StringRecord, file: &str) -> Result<CsvParser, TraceError> {
    let idx: Vec<Option<usize>> = COLUMNS
        .iter()
        .map(|c| h.iter().position(|x| x.trim() == *c))
        .collect();
    for (k, c) in COLUMNS.iter().enumerate().take(4) {
        if idx[k].is_none() {
            return Err(TraceError::Row {
                file: file.into(),
                line: 1,
                field: (*c).into(),
                message: "column missing from the header".into(),
            });
        }
    }
    if let Some(extra) = h.iter().find(|x| !COLUMNS.contains(&x.trim())) {
        return Err(TraceError::Row {
            file: file.into(),
            line: 1,
            field: extra.into(),
            message: format!("unknown column (known: {})", COLUMNS.join(",")),
        });
    }
    Ok(Box::new(move |cx, r, out| {
        let get = |k: usize| {
            idx[k]
                .and_then(|i| r.get(i))
                .map(crate::split::trim)
                .filter(|s| !s.is_empty())
        };
        let num = |k: usize| -> Result<Option<f64>, TraceError> {
            get(k)
                .map(|v| {
                    // Bit for bit `str::parse`, with a fast path for plain decimals.
                    crate::fields::decimal(v)
                        .ok()
                        .filter(|x| x.is_finite() && *x >= 0.0)
                        .ok_or_else(|| {
                            cx.err(COLUMNS[k], format!("'{v}' is not a non-negative number"))
                        })
                })
                .transpose()
        };
        let int = |k: usize| -> Result<Option<u64>, TraceError> {
            get(k)
                .map(|v| {
                    v.parse::<u64>().map_err(|_| {
                        cx.err(COLUMNS[k], format!("'{v}' is not a non-negative integer"))
                    })
                })
                .transpose()
        };
        let row = Row {
            id: get(0).ok_or_else(|| cx.err("id", "missing"))?.into(),
            submit: num(1)?.ok_or_else(|| cx.err("submit", "missing"))?,
            gpus: int(2)?
                .ok_or_else(|| cx.err("gpus", "missing"))?
                .try_into()
                .map_err(|_| cx.err("gpus", "out of range"))?,
            duration: num(3)?.ok_or_else(|| cx.err("duration", "missing"))?,
            iterations: int(4)?,
            model: get(5).map(str::to_string),
            batch_size: int(6)?.map(u32::try_from).transpose().map_err(|_| {
                cx.err("batch_size", format!("out of range (at most {})", u32::MAX))
            })?,
            vc: get(7).map(CompactString::from),
            priority: match get(8) {
                None => 0,
                Some(v) => v
                    .parse()
                    .map_err(|_| cx.err("priority", format!("'{v}' is not an integer")))?,
            },
            deadline: num(9)?,
            stage_data_ms: num(10)?,
            stage_gpu_ms: num(11)?,
            stage_net_ms: num(12)?,
            dataset_gb: num(13)?,
            gpu_type: get(14).map(str::to_string),
            type_speeds: get(15).map(str::to_string),
        };
        let j = to_job(row).map_err(|(f, m)| cx.err(&f, m))?;
        out.push(j);
        Ok(Parsed::Job)
    }))
}

pub(crate) fn read_jsonl(path: &Path, opts: &ReadOptions) -> Result<Trace, TraceError> {
    let file = path.display().to_string();
    let r = crate::open::open(path)?;
    let mut jobs = Vec::new();
    let (mut skipped, mut first_skip) = (0, None);
    let mut ids = crate::ids::Ids::new("id");
    for (i, line) in r.split(b'\n').enumerate() {
        let line = line.map_err(|e| TraceError::Io {
            file: file.clone(),
            source: e,
        })?;
        let line = match String::from_utf8(line) {
            Ok(l) => l,
            Err(e) => {
                let err = TraceError::Row {
                    file: file.clone(),
                    line: i as u64 + 1,
                    field: "json".into(),
                    message: format!("not UTF-8 (byte {})", e.utf8_error().valid_up_to() + 1),
                };
                if opts.skip_bad_rows {
                    skipped += 1;
                    first_skip.get_or_insert(err.to_string());
                    continue;
                }
                return Err(err);
            }
        };
        if line.trim().is_empty() {
            continue;
        }
        let res = serde_json::from_str::<Row>(&line)
            .map_err(|e| TraceError::Row {
                file: file.clone(),
                line: i as u64 + 1,
                field: "json".into(),
                message: e.to_string(),
            })
            .and_then(|row| {
                to_job(row).map_err(|(f, m)| TraceError::Row {
                    file: file.clone(),
                    line: i as u64 + 1,
                    field: f,
                    message: m,
                })
            })
            .and_then(|j| ids.check(&file, i as u64 + 1, &j.id, &jobs).map(|()| j));
        match res {
            Ok(j) => jobs.push(j),
            Err(e) if opts.skip_bad_rows => {
                skipped += 1;
                first_skip.get_or_insert(e.to_string());
            }
            Err(e) => return Err(e),
        }
    }
    crate::order::sort_by_submit(&mut jobs);
    Ok(Trace {
        jobs,
        format: crate::Format::Jsonl,
        skipped,
        first_skip,
        excluded: Vec::new(),
    })
}
