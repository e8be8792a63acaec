//! `apiary sweep`: plan a sweep file's cells, run them on every core (resuming what a
//! previous run left), and report means with 95 % intervals and ratios against a
//! baseline.

use anyhow::{Context, Result, bail};
use apiary_sweep::aggregate::{aggregate, headlines, html, table};
use apiary_sweep::cell::Inputs;
use apiary_sweep::results::{Row, done, merge, read_rows, write_cell};
use apiary_sweep::{Sweep, plan};
use clap::Subcommand;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The sweep's own copy of its file, kept in its results folder.
const KEPT: &str = "sweep.toml";

#[derive(Subcommand)]
pub enum SweepCmd {
    /// Print the cells a sweep file expands to (trace x cluster x load x setting x seed).
    Plan {
        /// Sweep file (TOML; see docs/sweep.md).
        file: PathBuf,
    },
    /// Run a sweep's cells on all cores; cells already done in DIR are skipped.
    Run {
        /// Sweep file.
        file: PathBuf,
        /// Results folder: one file per cell under cells/, then results.csv.
        #[arg(long, short)]
        out: PathBuf,
        /// Worker threads (default: every core). Results do not depend on it.
        #[arg(long, short = 'j')]
        threads: Option<usize>,
        /// No progress bar.
        #[arg(long, short)]
        quiet: bool,
    },
    /// Means over seeds with 95 % intervals, ratios against a baseline, and report.html.
    Report {
        /// Results folder of `apiary sweep run`.
        dir: PathBuf,
        /// The setting ratios are taken against (default: the sweep file's `baseline`).
        #[arg(long)]
        baseline: Option<String>,
    },
}

pub fn run(cmd: SweepCmd) -> Result<()> {
    match cmd {
        SweepCmd::Plan { file } => plan_cmd(&file),
        SweepCmd::Run {
            file,
            out,
            threads,
            quiet,
        } => run_cmd(&file, &out, threads, quiet),
        SweepCmd::Report { dir, baseline } => report_cmd(&dir, baseline),
    }
}

fn plan_cmd(file: &Path) -> Result<()> {
    let s = Sweep::load(file)?;
    let cells = plan(&s);
    println!(
        "{}: {} cells = {} traces x {} clusters x {} loads x {} settings x {} seeds",
        s.name,
        cells.len(),
        s.traces.len(),
        s.clusters.len(),
        s.loads.len(),
        s.settings.len(),
        s.seeds.len()
    );
    for c in &cells {
        println!("{:>6}  {}", c.id, c.describe(&s));
    }
    Ok(())
}

/// Keeps a copy of the sweep file in `dir`, refusing a folder that holds another
/// sweep's results.
fn keep_file(file: &Path, dir: &Path) -> Result<()> {
    let text = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let kept = dir.join(KEPT);
    match std::fs::read(&kept) {
        Ok(old) if old != text => bail!(
            "{} holds the results of a different sweep file ({}); give another --out or \
             remove it",
            dir.display(),
            kept.display()
        ),
        Ok(_) => Ok(()),
        Err(_) => {
            std::fs::write(&kept, &text).with_context(|| format!("writing {}", kept.display()))
        }
    }
}

fn run_cmd(file: &Path, dir: &Path, threads: Option<usize>, quiet: bool) -> Result<()> {
    let s = Sweep::load(file)?;
    keep_file(file, dir)?;
    let cells = plan(&s);
    let finished = done(dir, &s, &cells);
    let todo: Vec<_> = cells
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
        "{prefix} [{bar:30}] {pos}/{len} {elapsed_precise} elapsed, ETA {eta_precise} ({per_sec})",
    );
    bar.enable_steady_tick(Duration::from_millis(500));
    let t0 = Instant::now();
    let inputs = Inputs::new(&s);
    let next = AtomicUsize::new(0);
    let failures: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let write_err: Mutex<Option<anyhow::Error>> = Mutex::new(None);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(cell) = todo.get(i) else { break };
                    let outcome = inputs.run(cell);
                    let row = Row::of(&s, cell, &outcome);
                    if let Err(e) = &outcome {
                        let line = format!("cell {} ({}): {e}", cell.id, cell.describe(&s));
                        bar.suspend(|| eprintln!("failed: {line}"));
                        failures
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .push(line);
                    }
                    if let Err(e) = write_cell(dir, &s, &row) {
                        *write_err.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.into());
                        next.store(todo.len(), Ordering::Relaxed);
                    }
                    bar.inc(1);
                }
            });
        }
    });
    bar.finish_and_clear();
    if let Some(e) = write_err.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(e);
    }
    let m = merge(dir, &s, &cells)?;
    if !quiet {
        eprintln!(
            "{} cells run in {:.1} s; {} done, {} failed; wrote {}",
            todo.len(),
            t0.elapsed().as_secs_f64(),
            m.done,
            m.failed,
            dir.join("results.csv").display()
        );
    }
    if m.failed > 0 {
        bail!(
            "{} of {} cells failed (their errors are in the error column of {}); a rerun \
             retries them",
            m.failed,
            cells.len(),
            dir.join("results.csv").display()
        );
    }
    Ok(())
}

fn report_cmd(dir: &Path, baseline: Option<String>) -> Result<()> {
    let kept = dir.join(KEPT);
    if !kept.exists() {
        bail!(
            "{} has no {KEPT}: is it the --out folder of `apiary sweep run`?",
            dir.display()
        );
    }
    let s = Sweep::load(&kept)?;
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
    let rows = read_rows(&dir.join("results.csv"), &s)?;
    let lines = aggregate(&s, &rows, baseline.as_deref());
    print!("{}", table(&s, &lines, baseline.as_deref()));
    if let Some(b) = &baseline {
        for h in headlines(&s, &lines, b) {
            println!("{h}");
        }
    }
    let missing = plan(&s).len().saturating_sub(rows.len());
    if missing > 0 {
        println!("({missing} cells have no results yet: run the sweep again to finish it)");
    }
    let p = dir.join("report.html");
    std::fs::write(&p, html(&s, &lines, baseline.as_deref()))
        .with_context(|| format!("writing {}", p.display()))?;
    eprintln!("wrote {}", p.display());
    Ok(())
}
