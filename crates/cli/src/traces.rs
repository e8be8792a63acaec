//! `apiary trace`: reading, converting, summarising and generating traces.

use crate::run::{ReadArgs, read_opts};
use anyhow::{Context, Result, bail};
use apiary_model::fmt_duration;
use clap::Subcommand;
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Subcommand)]
pub(crate) enum TraceCmd {
    /// Job count, time span, GPU-count histogram and GPU-hours.
    Info {
        /// Trace file.
        file: PathBuf,
        #[command(flatten)]
        read: ReadArgs,
    },
    /// Write a trace in apiary's canonical CSV (or JSON lines).
    Convert {
        /// Trace file.
        file: PathBuf,
        /// Output file (`-` for stdout).
        #[arg(long, short)]
        out: PathBuf,
        /// Write JSON lines instead of CSV.
        #[arg(long)]
        jsonl: bool,
        #[command(flatten)]
        read: ReadArgs,
    },
    /// Generate a trace as ElasticFlow's `generate_trace.py` does (same seed, same jobs).
    ///
    /// Fig. 10: `--jobs 100 --lam 1500 --min-ddl 1.5 --max-ddl 1.5 --seed 1`; Fig. 9:
    /// `--jobs 1000 --lam 1500`; Fig. 11: `--jobs 200 --lam 900 --best-effort 0.1..0.9`.
    Elasticflow {
        /// Number of jobs (`--num_jobs`).
        #[arg(long, default_value_t = 100)]
        jobs: usize,
        /// Mean inter-arrival time, seconds (`--lam`; 0 puts every job at time 0).
        #[arg(long, default_value_t = 0.0)]
        lam: f64,
        /// Seed (`--seed`).
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Deadline = arrival + U(min, max) x duration (`--min_ddl`).
        #[arg(long, default_value_t = 0.5)]
        min_ddl: f64,
        /// See --min-ddl (`--max_ddl`).
        #[arg(long, default_value_t = 1.5)]
        max_ddl: f64,
        /// Share of best-effort jobs, 0 to 1 (`--best_effort_percentage`).
        #[arg(long, default_value_t = 0.0)]
        best_effort: f64,
        /// Most GPUs a job asks for (`--max_scale_factor`).
        #[arg(long, default_value_t = 16)]
        max_gpus: u32,
        /// Throughput tables that turn durations into iterations: A100 or T4.
        #[arg(long, default_value = "A100")]
        gpu: String,
        /// Output file (`-` for stdout).
        #[arg(long, short)]
        out: PathBuf,
    },
    /// Generate a Philly-calibrated synthetic trace.
    Synth {
        /// Number of jobs.
        #[arg(long, default_value_t = 10_000)]
        jobs: usize,
        /// GPUs of the target cluster (sets the arrival rate).
        #[arg(long, default_value_t = 2816)]
        gpus: u32,
        /// Offered load (GPU-time demanded ÷ capacity); Philly's own is 0.133.
        #[arg(long, default_value_t = apiary_trace::synth::PHILLY_LOAD)]
        load: f64,
        /// Seed.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Output file (`-` for stdout).
        #[arg(long, short)]
        out: PathBuf,
    },
}

fn open_out(p: &Path) -> Result<Box<dyn Write>> {
    if p == Path::new("-") {
        Ok(Box::new(std::io::BufWriter::new(std::io::stdout().lock())))
    } else {
        Ok(Box::new(std::io::BufWriter::new(
            std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))?,
        )))
    }
}

/// `apiary trace info`: job count, time span, GPU-count histogram and GPU-hours.
fn info(file: &Path, read: &ReadArgs) -> Result<()> {
    let t = apiary_trace::read(file, &read_opts(read)?)?;
    let jobs = &t.jobs;
    println!("file      {}", file.display());
    println!("format    {}", t.format.name());
    println!("jobs      {}", jobs.len());
    if t.skipped > 0 {
        println!(
            "skipped   {} malformed rows (first: {})",
            t.skipped,
            t.first_skip.as_deref().unwrap_or("")
        );
    }
    for (why, n) in &t.excluded {
        println!("excluded  {n} rows: {why}");
    }
    if let (Some(f), Some(l)) = (jobs.first(), jobs.last()) {
        println!(
            "span      {} (first submit {:.3} s, last {:.3} s)",
            fmt_duration(l.submit - f.submit),
            f.submit as f64 / 1e3,
            l.submit as f64 / 1e3
        );
    }
    let gpu_h: f64 = jobs.iter().map(|j| j.gpu_time() as f64).sum::<f64>() / 3.6e6;
    println!("GPU-hours {gpu_h:.1}");
    let mut hist = std::collections::BTreeMap::<u32, usize>::new();
    for j in jobs {
        *hist.entry(j.gpus).or_default() += 1;
    }
    println!("GPUs per job:");
    for (g, n) in hist {
        println!(
            "  {g:>6}  {n:>8}  {:5.1}%",
            100.0 * n as f64 / jobs.len().max(1) as f64
        );
    }
    let mut d: Vec<u64> = jobs.iter().map(|j| j.duration).collect();
    d.sort_unstable();
    if !d.is_empty() {
        let mean = d.iter().map(|x| *x as f64).sum::<f64>() / d.len() as f64;
        println!(
            "duration  median {}  mean {}  max {}",
            fmt_duration(d[d.len() / 2]),
            fmt_duration(mean as u64),
            fmt_duration(d[d.len() - 1])
        );
    }
    let vcs: std::collections::BTreeSet<&str> =
        jobs.iter().filter_map(|j| j.vc.as_deref()).collect();
    if !vcs.is_empty() {
        println!("VCs       {}", vcs.len());
    }
    Ok(())
}

pub(crate) fn trace_cmd(cmd: TraceCmd) -> Result<()> {
    match cmd {
        TraceCmd::Info { file, read } => info(&file, &read),
        TraceCmd::Convert {
            file,
            out,
            jsonl,
            read,
        } => {
            let t = apiary_trace::read(&file, &read_opts(&read)?)?;
            let w = open_out(&out)?;
            if jsonl {
                apiary_trace::write_jsonl(&t.jobs, w)?
            } else {
                apiary_trace::write_csv(&t.jobs, w)?
            }
            if out != Path::new("-") {
                eprintln!(
                    "wrote {} jobs ({} format) to {}",
                    t.jobs.len(),
                    t.format.name(),
                    out.display()
                );
            }
            Ok(())
        }
        TraceCmd::Elasticflow {
            jobs,
            lam,
            seed,
            min_ddl,
            max_ddl,
            best_effort,
            max_gpus,
            gpu,
            out,
        } => {
            if !(lam.is_finite() && lam >= 0.0) {
                bail!("--lam must be 0 or more seconds");
            }
            if !(min_ddl.is_finite() && max_ddl.is_finite() && 0.0 < min_ddl && min_ddl <= max_ddl)
            {
                bail!("--min-ddl and --max-ddl must satisfy 0 < min <= max");
            }
            if !(0.0..=1.0).contains(&best_effort) {
                bail!("--best-effort must be between 0 and 1");
            }
            if max_gpus == 0 {
                bail!("--max-gpus must be at least 1");
            }
            let tables = apiary_trace::elasticflow::Tables::builtin(&gpu).with_context(|| {
                format!(
                    "--gpu {gpu}: no such throughput tables (choose {})",
                    apiary_trace::elasticflow::GPU_TYPES.join(", ")
                )
            })?;
            let o = apiary_trace::efgen::EfGenOptions {
                jobs,
                lam,
                seed,
                min_ddl,
                max_ddl,
                best_effort,
                max_gpus,
            };
            let js = apiary_trace::efgen::generate(&o, &tables)?;
            apiary_trace::efgen::write(&js, open_out(&out)?)?;
            if out != Path::new("-") {
                eprintln!(
                    "wrote {}: {} ElasticFlow jobs (seed {seed}, {gpu} tables; read it with \
                     -t {0}, ElasticFlow's format)",
                    out.display(),
                    js.len()
                );
            }
            Ok(())
        }
        TraceCmd::Synth {
            jobs,
            gpus,
            load,
            seed,
            out,
        } => {
            if !(load.is_finite() && load > 0.0) {
                bail!("--load must be positive");
            }
            let o = apiary_trace::synth::SynthOptions {
                jobs,
                cluster_gpus: gpus,
                load,
                seed,
                max_gpus: gpus,
            };
            let js = apiary_trace::synth::generate(&o);
            apiary_trace::write_csv(&js, open_out(&out)?)?;
            if out != Path::new("-") {
                let span = js.iter().map(|j| j.submit).max().unwrap_or(0)
                    - js.iter().map(|j| j.submit).min().unwrap_or(0);
                let sizes: u64 = js.iter().map(|j| u64::from(j.gpus)).sum();
                eprintln!(
                    "wrote {}: {} jobs (seed {seed}) submitted over {}, {:.1} GPUs a job on \
                     average, sized for {gpus} GPUs at load {load}; run it with `apiary \
                     simulate -t {} -c {}`",
                    out.display(),
                    js.len(),
                    apiary_report::present::duration(span as f64 / 1000.0),
                    sizes as f64 / js.len().max(1) as f64,
                    out.display(),
                    if gpus % 8 == 0 {
                        format!("n{}g8", gpus / 8)
                    } else {
                        format!("n{gpus}g1")
                    }
                );
            }
            Ok(())
        }
    }
}
