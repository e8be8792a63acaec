//! `apiary sweep`: plan a sweep file's cells, run them on every core (resuming what a
//! previous run left), and report means with 95 % intervals and ratios against a
//! baseline.

use crate::figures::Figures;
use anyhow::{Context, Result, bail};
use apiary_report::chart::Format;
use apiary_sweep::aggregate::{
    aggregate, groups, headlines, html, load_chart, per_vc, relative_chart, table,
};
use apiary_sweep::cell::Inputs;
use apiary_sweep::launch::{self, K8sOptions, Launch, SlurmOptions};
use apiary_sweep::plan::Cell;
use apiary_sweep::results::{
    Row, done, merge, ranges, read_rows, read_vc_rows, vc_results, write_cell, write_vc_cell,
};
use apiary_sweep::shard::{self, Planned};
use apiary_sweep::{Sweep, plan};
use clap::{Subcommand, ValueEnum};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

#[derive(Subcommand)]
pub enum SweepCmd {
    /// Print the cells a sweep file expands to (trace x cluster x load x setting x seed);
    /// with -o, plan them into a folder whose shards any process can run.
    Plan {
        /// Sweep file (TOML; see docs/sweep.md).
        file: PathBuf,
        /// Results folder to plan into: a copy of the file and manifest.toml (cell ids,
        /// seeds, resolved paths), for `sweep run DIR --index I` and the launchers.
        #[arg(long, short)]
        out: Option<PathBuf>,
    },
    /// Run a sweep's cells on all cores (cells already done are skipped): a sweep file
    /// with -o DIR, or a folder planned by `sweep plan -o`. With a shard index (--index,
    /// SLURM_ARRAY_TASK_ID or JOB_COMPLETION_INDEX) only that shard runs.
    Run {
        /// Sweep file, or a folder planned by `apiary sweep plan FILE -o DIR`.
        target: PathBuf,
        /// Results folder (with a sweep file): one file per cell under cells/, then
        /// results.csv.
        #[arg(long, short)]
        out: Option<PathBuf>,
        /// Run only shard I: cells I*K to I*K+K-1 (default: SLURM_ARRAY_TASK_ID, then
        /// JOB_COMPLETION_INDEX, else every cell). A shard does not merge; `sweep merge`
        /// does once every shard has run.
        #[arg(long)]
        index: Option<usize>,
        /// Cells per shard (K).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
        count: u64,
        /// Worker threads (default: every core). Results do not depend on it.
        #[arg(long, short = 'j')]
        threads: Option<usize>,
        /// No progress bar.
        #[arg(long, short)]
        quiet: bool,
    },
    /// Merge the cell files of a folder into results.csv, in cell order (byte-identical
    /// whichever launcher ran the shards); exits 1 naming the cells still missing.
    Merge {
        /// Results folder.
        dir: PathBuf,
    },
    /// Write a launcher for a planned folder's shards: a Slurm job-array script
    /// (DIR/sweep.sbatch) and the command that submits it, or with --emit k8s a
    /// Kubernetes Indexed Job (DIR/sweep-job.yaml).
    Slurm {
        /// A folder planned by `apiary sweep plan FILE -o DIR` (seen by every node).
        dir: PathBuf,
        /// What to write.
        #[arg(long, value_enum, default_value_t = Emit::Slurm)]
        emit: Emit,
        /// Cells per shard (one array task or pod each).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
        count: u64,
        /// Threads (cores) per shard.
        #[arg(long, short = 'j', default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
        threads: u64,
        /// Shards running at once (the array's %K; the Job's parallelism). Default: all.
        #[arg(long)]
        parallel: Option<usize>,
        /// The apiary the tasks run (default: this binary's path).
        #[arg(long)]
        apiary: Option<String>,
        /// Slurm partition.
        #[arg(long)]
        partition: Option<String>,
        /// Slurm time limit per shard (MM, HH:MM:SS or D-HH).
        #[arg(long)]
        time: Option<String>,
        /// Container image holding apiary (k8s).
        #[arg(long, default_value = "apiary:latest")]
        image: String,
        /// PersistentVolumeClaim mounted at DIR's path in each pod (k8s).
        #[arg(long)]
        claim: Option<String>,
        /// Retries per shard (k8s backoffLimitPerIndex).
        #[arg(long, default_value_t = 2)]
        retries: usize,
    },
    /// Means over seeds with 95 % intervals, ratios against a baseline, and report.html.
    Report {
        /// Results folder of `apiary sweep run`.
        dir: PathBuf,
        /// The setting ratios are taken against (default: the sweep file's `baseline`).
        #[arg(long)]
        baseline: Option<String>,
        /// Also write each chart as a pgfplots figure for papers (`charts/NAME.tex`,
        /// beside its SVG and CSV).
        #[arg(long, value_enum)]
        figures: Option<Figures>,
    },
}

/// What `sweep slurm` writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Emit {
    /// A Slurm job-array script.
    Slurm,
    /// A Kubernetes Indexed Job.
    K8s,
}

pub fn run(cmd: SweepCmd) -> Result<()> {
    match cmd {
        SweepCmd::Plan { file, out } => plan_cmd(&file, out.as_deref()),
        SweepCmd::Run {
            target,
            out,
            index,
            count,
            threads,
            quiet,
        } => run_cmd(
            &target,
            out.as_deref(),
            index,
            count as usize,
            threads,
            quiet,
        ),
        SweepCmd::Merge { dir } => merge_cmd(&dir),
        SweepCmd::Slurm {
            dir,
            emit,
            count,
            threads,
            parallel,
            apiary,
            partition,
            time,
            image,
            claim,
            retries,
        } => {
            let l = Launch {
                apiary: match apiary {
                    Some(a) => a,
                    None => std::env::current_exe()
                        .context("finding this binary's path (give --apiary)")?
                        .display()
                        .to_string(),
                },
                count: count as usize,
                threads: threads as usize,
                parallel,
            };
            match emit {
                Emit::Slurm => slurm_cmd(&dir, &l, &SlurmOptions { partition, time }),
                Emit::K8s => k8s_cmd(
                    &dir,
                    &l,
                    &K8sOptions {
                        image,
                        claim,
                        retries,
                    },
                ),
            }
        }
        SweepCmd::Report {
            dir,
            baseline,
            figures,
        } => report_cmd(&dir, baseline, figures),
    }
}

fn plan_cmd(file: &Path, out: Option<&Path>) -> Result<()> {
    let (s, cells) = match out {
        Some(dir) => {
            let p = shard::plan_into(file, dir)?;
            (p.sweep, p.cells)
        }
        None => {
            let s = Sweep::load(file)?;
            let cells = plan(&s);
            (s, cells)
        }
    };
    println!(
        "{}: {} cells = {} traces x {} clusters x {} {}s x {} settings x {} seeds",
        s.name,
        cells.len(),
        s.traces.len(),
        s.clusters.len(),
        s.loads.len(),
        s.load_word(),
        s.settings.len(),
        s.seeds.len()
    );
    for c in &cells {
        println!("{:>6}  {}", c.id, c.describe(&s));
    }
    if let Some(dir) = out {
        eprintln!(
            "planned into {}: run shard I with `apiary sweep run {} --index I [--count K]`, \
             then `apiary sweep merge {}`",
            dir.join(shard::MANIFEST).display(),
            dir.display(),
            dir.display()
        );
    }
    Ok(())
}

fn run_cmd(
    target: &Path,
    out: Option<&Path>,
    index: Option<usize>,
    count: usize,
    threads: Option<usize>,
    quiet: bool,
) -> Result<()> {
    let planned = if target.is_dir() {
        if out.is_some() {
            bail!(
                "{} is a planned folder: run it without -o, or give a sweep file with -o",
                target.display()
            );
        }
        shard::open(target)?
    } else {
        let Some(dir) = out else {
            bail!(
                "give the results folder: apiary sweep run {} -o DIR",
                target.display()
            );
        };
        shard::plan_into(target, dir)?
    };
    match shard::index(index, |k| std::env::var(k).ok())? {
        Some((i, from)) => {
            let cells = shard::shard(&planned.cells, i, count)?;
            let n = shard::shards(planned.cells.len(), count);
            let r = run_cells(&planned, cells, threads, quiet)?;
            if !quiet {
                eprintln!(
                    "shard {i} of {n} (from {}): cells {}: {} already done, {} run in {:.1} s, \
                     {} failed",
                    from.name(),
                    ranges(&cells.iter().map(|c| c.id).collect::<Vec<_>>()),
                    cells.len() - r.ran,
                    r.ran,
                    r.secs,
                    r.failed
                );
            }
            if r.failed > 0 {
                bail!(
                    "{} of shard {i}'s cells failed; a rerun retries them",
                    r.failed
                );
            }
            Ok(())
        }
        None => {
            let r = run_cells(&planned, &planned.cells, threads, quiet)?;
            let (dir, s) = (&planned.dir, &planned.sweep);
            let m = merge(dir, s, &planned.cells)?;
            if !quiet {
                eprintln!(
                    "{} cells run in {:.1} s; {} done, {} failed; wrote {}",
                    r.ran,
                    r.secs,
                    m.done,
                    m.failed.len(),
                    dir.join("results.csv").display()
                );
            }
            if !m.failed.is_empty() {
                bail!(
                    "{} of {} cells failed (their errors are in the error column of {}); a \
                     rerun retries them",
                    m.failed.len(),
                    planned.cells.len(),
                    dir.join("results.csv").display()
                );
            }
            Ok(())
        }
    }
}

/// What [`run_cells`] did.
pub(crate) struct Ran {
    pub(crate) ran: usize,
    pub(crate) failed: usize,
    pub(crate) secs: f64,
}

/// Runs those of `cells` not done yet on `threads` threads, one result file each.
pub(crate) fn run_cells(
    p: &Planned,
    cells: &[Cell],
    threads: Option<usize>,
    quiet: bool,
) -> Result<Ran> {
    let (s, dir) = (&p.sweep, p.dir.as_path());
    let finished = done(dir, s, cells);
    let todo: Vec<Cell> = cells
        .iter()
        .zip(&finished)
        .filter(|(_, d)| !**d)
        .map(|(c, _)| *c)
        .collect();
    let threads = threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .clamp(1, todo.len().max(1));
    if !quiet {
        eprintln!(
            "{}: {} cells, {} already done, {} to run on {} threads",
            s.name,
            cells.len(),
            cells.len() - todo.len(),
            todo.len(),
            threads
        );
    }
    let bar = crate::run::progress_bar(
        quiet,
        todo.len(),
        "cells",
        "{prefix} [{bar:30}] {pos}/{len} cells, {elapsed_precise} elapsed, ETA {eta_precise}, {msg}",
    );
    bar.enable_steady_tick(Duration::from_millis(500));
    let t0 = Instant::now();
    // Without a terminal (a log, a batch job) the bar is hidden: a plain line every
    // 10 s says how far the sweep is instead.
    let plain = !quiet && !std::io::stderr().is_terminal();
    let last_line = Mutex::new(0.0f64);
    let done_cells = AtomicUsize::new(0);
    let inputs = Inputs::new(s);
    let next = AtomicUsize::new(0);
    let failed = AtomicUsize::new(0);
    let write_err: Mutex<Option<anyhow::Error>> = Mutex::new(None);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(cell) = todo.get(i) else { break };
                    let outcome = inputs.run(cell);
                    let row = Row::of(s, cell, outcome.as_ref().map(|o| &o.measured));
                    let vcs = outcome
                        .as_ref()
                        .ok()
                        .filter(|o| !o.vcs.is_empty())
                        .map(|o| vc_results(s, cell, &o.vcs));
                    if let Err(e) = &outcome {
                        bar.suspend(|| {
                            eprintln!("failed: cell {} ({}): {e}", cell.id, cell.describe(s))
                        });
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                    let written = match &vcs {
                        Some(v) => write_vc_cell(dir, s, cell.id, v),
                        None => Ok(()),
                    };
                    if let Err(e) = written.and_then(|()| write_cell(dir, s, &row)) {
                        *write_err.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.into());
                        next.store(todo.len(), Ordering::Relaxed);
                    }
                    bar.inc(1);
                    let t = t0.elapsed().as_secs_f64();
                    let n = done_cells.fetch_add(1, Ordering::Relaxed) + 1;
                    if plain {
                        let mut last = last_line.lock().unwrap_or_else(|p| p.into_inner());
                        if t - *last >= 10.0 && n < todo.len() {
                            *last = t;
                            let eta = t / n as f64 * (todo.len() - n) as f64;
                            eprintln!(
                                "{}: {n}/{} cells, {t:.0} s elapsed, about {eta:.0} s to go",
                                s.name,
                                todo.len()
                            );
                        }
                    }
                    bar.set_message(format!(
                        "{:.1} cells/s",
                        bar.position() as f64 / t.max(1e-9)
                    ));
                }
            });
        }
    });
    bar.finish_and_clear();
    if let Some(e) = write_err.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(e);
    }
    Ok(Ran {
        ran: todo.len(),
        failed: failed.into_inner(),
        secs: t0.elapsed().as_secs_f64(),
    })
}

fn merge_cmd(dir: &Path) -> Result<()> {
    let p = shard::open(dir)?;
    let m = merge(dir, &p.sweep, &p.cells)?;
    let out = dir.join("results.csv");
    eprintln!(
        "merged {} of {} cells into {}: {} done, {} failed, {} missing",
        p.cells.len() - m.missing.len(),
        p.cells.len(),
        out.display(),
        m.done,
        m.failed.len(),
        m.missing.len()
    );
    if !m.failed.is_empty() {
        eprintln!(
            "failed cells: {} (their errors are in the error column)",
            ranges(&m.failed)
        );
    }
    if !m.missing.is_empty() {
        eprintln!("cells with no result yet: {}", ranges(&m.missing));
    }
    if !m.failed.is_empty() || !m.missing.is_empty() {
        bail!(
            "the sweep is not complete; run the shards again (cells done are skipped), then \
             merge"
        );
    }
    Ok(())
}

fn slurm_cmd(dir: &Path, l: &Launch, o: &SlurmOptions) -> Result<()> {
    let p = absolute(dir)?;
    let script = p.dir.join("sweep.sbatch");
    let logs = p.dir.join("logs");
    std::fs::create_dir_all(&logs).with_context(|| format!("creating {}", logs.display()))?;
    std::fs::write(&script, launch::slurm_script(&p, l, o))
        .with_context(|| format!("writing {}", script.display()))?;
    eprintln!(
        "wrote {}: {} shards of {} cells; submit the array and a merge that waits for it \
         with:",
        script.display(),
        l.shards(&p),
        l.count
    );
    println!("{}", launch::slurm_submit(&p, l, &script));
    Ok(())
}

fn k8s_cmd(dir: &Path, l: &Launch, o: &K8sOptions) -> Result<()> {
    let p = absolute(dir)?;
    let job = p.dir.join("sweep-job.yaml");
    std::fs::write(&job, launch::k8s_job(&p, l, o))
        .with_context(|| format!("writing {}", job.display()))?;
    eprintln!(
        "wrote {}: an Indexed Job of {} shards of {} cells; once it completes, run \
         `apiary sweep merge {}`",
        job.display(),
        l.shards(&p),
        l.count,
        p.dir.display()
    );
    println!(
        "kubectl apply -f {}",
        launch::shell_quote(&job.display().to_string())
    );
    Ok(())
}

/// A planned folder, named by its absolute path (launched tasks start elsewhere).
fn absolute(dir: &Path) -> Result<Planned> {
    let abs = std::fs::canonicalize(dir).with_context(|| format!("opening {}", dir.display()))?;
    Ok(shard::open(&abs)?)
}

/// How a sweep report was made: the command, apiary and its commit, the date, the
/// manifest it read (with its SHA-256) and what the manifest fixes.
fn made(dir: &Path, s: &Sweep, planned: &Planned) -> Result<Vec<(String, String)>> {
    use sha2::Digest;
    let manifest = dir.join(shard::MANIFEST);
    let bytes =
        std::fs::read(&manifest).with_context(|| format!("reading {}", manifest.display()))?;
    let sha = crate::run::hex(&sha2::Sha256::digest(&bytes));
    let mut rows = vec![
        (
            "command".to_string(),
            std::env::args().collect::<Vec<_>>().join(" "),
        ),
        (
            "apiary".into(),
            format!(
                "{} (commit {})",
                env!("CARGO_PKG_VERSION"),
                env!("APIARY_GIT_COMMIT")
            ),
        ),
        ("made".into(), crate::run::made_date()),
        ("manifest".into(), manifest.display().to_string()),
        ("manifest SHA-256".into(), sha),
        ("cells".into(), planned.cells.len().to_string()),
        (
            "seeds".into(),
            s.seeds
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", "),
        ),
        (
            format!("{}s", s.load_word()),
            s.loads
                .iter()
                .map(f64::to_string)
                .collect::<Vec<_>>()
                .join(", "),
        ),
        ("clusters".into(), s.cluster_sources.join(", ")),
    ];
    for t in &s.traces {
        let sample = t
            .sample
            .map_or(String::new(), |n| format!(", {n} jobs a seed"));
        rows.push((
            format!("trace {}", t.name),
            format!("{}{sample}", t.path.display()),
        ));
    }
    Ok(rows)
}

/// A chart's points as CSV: setting, load, value and the 95 % half-width.
fn chart_data(
    lines: &[apiary_sweep::aggregate::Line],
    trace: &str,
    cluster: &str,
    what: &str,
    value: impl Fn(&apiary_sweep::aggregate::Line) -> Option<apiary_report::stats::Estimate>,
) -> String {
    let mut o = format!("setting,load,{what},ci95_half_width\n");
    for l in lines
        .iter()
        .filter(|l| l.trace == trace && l.cluster == cluster)
    {
        if let Some(e) = value(l) {
            // A setting's label can hold commas (`tiresias:starvation=2,backfill=true`).
            let setting = if l.setting.contains([',', '"']) {
                format!("\"{}\"", l.setting.replace('"', "\"\""))
            } else {
                l.setting.clone()
            };
            o.push_str(&format!("{setting},{},{},{}\n", l.load, e.mean, e.ci95));
        }
    }
    o
}

fn report_cmd(dir: &Path, baseline: Option<String>, figures: Option<Figures>) -> Result<()> {
    let planned = shard::open(dir)?;
    let s = &planned.sweep;
    let baseline = baseline.or_else(|| s.baseline.clone());
    if let Some(b) = &baseline
        && !s.settings.iter().any(|x| &x.label == b)
    {
        let known: Vec<&str> = s.settings.iter().map(|x| x.label.as_str()).collect();
        bail!(
            "--baseline '{b}' is none of the settings ({})",
            known.join(", ")
        );
    }
    let rows = read_rows(&dir.join("results.csv"), s)?;
    let lines = aggregate(s, &rows, baseline.as_deref());
    print!("{}", table(s, &lines, baseline.as_deref()));
    if let Some(b) = &baseline {
        for h in headlines(s, &lines, b) {
            println!("{h}");
        }
    }
    let missing = planned.cells.len().saturating_sub(rows.len());
    if missing > 0 {
        println!("({missing} cells have no results yet: run the sweep again to finish it)");
    }
    let vc_file = dir.join("vc-results.csv");
    let vcs = if s.per_vc.is_empty() || !vc_file.exists() {
        None
    } else {
        Some(per_vc(s, &read_vc_rows(&vc_file, s)?, baseline.as_deref()))
    };
    let vc_view = vcs.as_ref().map(|(vs, vl)| (vs, vl.as_slice()));
    let p = dir.join("report.html");
    std::fs::write(
        &p,
        html(
            s,
            &lines,
            baseline.as_deref(),
            vc_view,
            &made(dir, s, &planned)?,
        ),
    )
    .with_context(|| format!("writing {}", p.display()))?;
    // Each chart also as its own SVG file, for papers and docs.
    let charts = dir.join("charts");
    std::fs::create_dir_all(&charts).with_context(|| format!("creating {}", charts.display()))?;
    let write =
        |stem: &str, fig: &str, data, tex| crate::figures::write(&charts, stem, fig, data, tex);
    let pgf = figures == Some(Figures::Pgf);
    let b = baseline.as_deref();
    for (trace, cluster) in groups(&lines) {
        for (m, metric) in s.metrics.iter().enumerate() {
            let stem = format!("{trace}-{cluster}-{metric}");
            // Each chart's numbers beside it, in the metric's own units (seconds for
            // times), for a plotting tool of the reader's choice.
            let data = chart_data(&lines, trace, cluster, "mean", |l| l.stats[m]);
            let tex = pgf.then(|| load_chart(s, &lines, trace, cluster, m, Format::Pgf));
            let svg = load_chart(s, &lines, trace, cluster, m, Format::Svg);
            write(&stem, &svg, data, tex)?;
            if let Some(fig) = relative_chart(s, &lines, trace, cluster, m, b, Format::Svg) {
                let data = chart_data(&lines, trace, cluster, "ratio", |l| l.ratios[m]);
                let tex =
                    relative_chart(s, &lines, trace, cluster, m, b, Format::Pgf).filter(|_| pgf);
                write(&format!("{stem}-relative"), &fig, data, tex)?;
            }
        }
    }
    // Per VC: each VC's chart of each per-VC metric against load.
    if let Some((vs, vlines)) = &vcs {
        for (trace, cluster) in groups(vlines) {
            for (m, metric) in vs.metrics.iter().enumerate() {
                let data = chart_data(vlines, trace, cluster, "mean", |l| l.stats[m]);
                let tex = pgf.then(|| load_chart(vs, vlines, trace, cluster, m, Format::Pgf));
                let svg = load_chart(vs, vlines, trace, cluster, m, Format::Svg);
                write(&format!("{trace}-{cluster}-{metric}"), &svg, data, tex)?;
            }
        }
    }
    eprintln!(
        "wrote {} and its charts in {}",
        p.display(),
        charts.display()
    );
    Ok(())
}
