//! One row parser per format: the columns it reads, found from the header once, and a
//! closure that turns a row into a job (or an excluded row) with errors naming the line
//! and field.

use crate::dates::parse_datetime;
use crate::fields::{Parsed, RowAt, column, optional_column, stage_fits};
use crate::format::Format;
use crate::split::Fields;
use crate::{ReadOptions, TraceError};
use apiary_model::{CompactString, Job, StageTimes, Time};
use csv::StringRecord;
use std::collections::BTreeMap;
use std::path::Path;

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

/// Parses one record: a job goes straight onto the list given (a `Job` is 168 bytes,
/// and returning it through the row reader copied it twice more).
pub(crate) type Parser =
    Box<dyn FnMut(&RowAt<'_>, &Fields<'_>, &mut Vec<Job>) -> Result<Parsed, TraceError>>;

pub(crate) fn make_parser(
    format: Format,
    h: &StringRecord,
    file: &str,
    path: &Path,
    opts: &ReadOptions,
) -> Result<Parser, TraceError> {
    Ok(match format {
        Format::Apiary => crate::canonical::csv_parser(h, file)?,
        Format::Pollux => pollux(h, file)?,
        Format::Philly => philly(h, file)?,
        Format::Itp | Format::ItpElasticflow => itp(h, file, opts)?,
        Format::Elasticflow => elasticflow(h, file, opts)?,
        Format::Muri => muri(h, file, opts)?,
        Format::Tiresias => tiresias(h, file)?,
        Format::Alibaba => alibaba(h, file)?,
        Format::Gavel | Format::Gavel10 => gavel(file, format, path, opts)?,
        Format::Jsonl => unreachable!("handled before"),
    })
}

/// Pollux workloads: adaptive jobs with their application's measured curves.
fn pollux(h: &StringRecord, file: &str) -> Result<Parser, TraceError> {
    let c = |n: &str| column(h, n, file);
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
    Ok(Box::new(move |cx, r, out| {
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
        j.extras_mut().adaptive = Some(apiary_model::adaptive::Adaptive::of(app.clone()));
        out.push(j);
        Ok(Parsed::Job)
    }))
}

/// Philly's per-job summary: wall-clock dates, the VC from `cluster`.
fn philly(h: &StringRecord, file: &str) -> Result<Parser, TraceError> {
    let c = |n: &str| column(h, n, file);
    let (ts, du, ng, cl) = (
        c("timestamp")?,
        c("duration")?,
        c("num_gpus")?,
        c("cluster")?,
    );
    Ok(Box::new(move |cx, r, out| {
        let t = parse_datetime(cx.text(r, ts, "timestamp")?).map_err(|m| cx.err("timestamp", m))?;
        let mut j = Job::new(
            CompactString::new(itoa::Buffer::new().format(cx.line - 1)),
            // 9999-12-31 is 2.5e14 ms: far inside MAX_INPUT.
            t as Time * 1000,
            cx.gpus(r, ng, "num_gpus")?,
            cx.secs(r, du, "duration")?,
        );
        j.vc = cx.opt(r, Some(cl));
        out.push(j);
        Ok(Parsed::Job)
    }))
}

/// ITP's raw and ElasticFlow-generated CSVs: seconds; with a model, batch and iteration count, ElasticFlow's throughput table.
fn itp(h: &StringRecord, file: &str, opts: &ReadOptions) -> Result<Parser, TraceError> {
    let c = |n: &str| column(h, n, file);
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
    Ok(Box::new(move |cx, r, out| {
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
        out.push(j);
        Ok(Parsed::Job)
    }))
}

/// ElasticFlow's CSVs: deadlines (none for best-effort jobs) and throughput tables.
fn elasticflow(h: &StringRecord, file: &str, opts: &ReadOptions) -> Result<Parser, TraceError> {
    let c = |n: &str| column(h, n, file);
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
    Ok(Box::new(move |cx, r, out| {
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
            Some(i) => match cx.integer(r, i, "best_effort")? {
                0 => false,
                1 => true,
                v => return Err(cx.err("best_effort", format!("{v}: expected 0 or 1"))),
            },
            None => false,
        };
        if !best_effort {
            j.deadline = Some(cx.secs(r, dl, "ddl")?);
        }
        if let Some(t) = &tables {
            attach_scaling(cx, &mut j, t, "model_name")?;
        }
        out.push(j);
        Ok(Parsed::Job)
    }))
}

/// Muri's CSVs: milliseconds, iterations times iteration time, and stage times.
fn muri(h: &StringRecord, file: &str, opts: &ReadOptions) -> Result<Parser, TraceError> {
    let c = |n: &str| column(h, n, file);
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
    Ok(Box::new(move |cx, r, out| {
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
        out.push(j);
        Ok(Parsed::Job)
    }))
}

/// The Tiresias simulator's CSVs: seconds.
fn tiresias(h: &StringRecord, file: &str) -> Result<Parser, TraceError> {
    let c = |n: &str| column(h, n, file);
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
    Ok(Box::new(move |cx, r, out| {
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
        out.push(j);
        Ok(Parsed::Job)
    }))
}

/// Alibaba's GPU v2023 pod lists: CPU-only and never-scheduled pods are excluded and counted.
fn alibaba(h: &StringRecord, file: &str) -> Result<Parser, TraceError> {
    let c = |n: &str| column(h, n, file);
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
    Ok(Box::new(move |cx, r, out| {
        let g = cx.gpus(r, ng, "num_gpu")?;
        let milli = cx.integer(r, gm, "gpu_milli")?;
        if milli > 1000 {
            return Err(cx.err(
                "gpu_milli",
                format!("{milli}: thousandths of one GPU, at most 1000"),
            ));
        }
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
        out.push(j);
        Ok(Parsed::Job)
    }))
}

/// Gavel's per-VC (7 fields) and physical-cluster (10 fields) traces: steps to time by the throughput table, speeds on every GPU type it measured.
fn gavel(
    file: &str,
    format: Format,
    path: &Path,
    opts: &ReadOptions,
) -> Result<Parser, TraceError> {
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
    Ok(Box::new(move |cx, r, out| {
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
        out.push(j);
        Ok(Parsed::Job)
    }))
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
