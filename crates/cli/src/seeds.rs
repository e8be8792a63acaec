//! `apiary compare --seeds N`: the comparison repeated over seeds, reported as means
//! with 95 % intervals and seed-paired ratios against the first policy, without a sweep
//! file. It writes the sweep file a researcher would have written (one load, the
//! compare's trace, cluster, settings and simulator options) and runs it through the
//! sweep machinery, so the figures are the ones `apiary sweep` gives for that file.

use crate::run::RunArgs;
use crate::settings::Setting;
use anyhow::{Context, Result, bail};
use apiary_policy::Params;
use apiary_sweep::aggregate::{aggregate, headlines, html, table};
use apiary_sweep::results::read_rows;
use apiary_sweep::shard;
use std::path::{Path, PathBuf};

/// Metrics a seeded comparison reports.
const METRICS: [&str; 6] = [
    "jct_mean",
    "pending_mean",
    "slowdown_mean",
    "jain",
    "ftf_mean",
    "util_mean",
];

/// Runs `settings` (with their `params`) over seeds 0..`seeds`, each seed drawing
/// `sample` jobs of the trace when given (else every job, so only what the simulator
/// draws changes), and prints the table and headlines; with `-o`, the sweep's folder
/// and report are kept in `OUT/seeds`.
pub(crate) fn compare_seeds(
    r: &RunArgs,
    settings: &[Setting],
    params: &[Params],
    seeds: u64,
    sample: Option<usize>,
) -> Result<()> {
    if seeds == 0 {
        bail!("--seeds must be at least 1");
    }
    let (dir, keep) = match r.out() {
        Some(o) => (o.join("seeds"), true),
        None => (
            std::env::temp_dir().join(format!("apiary-seeds-{}", std::process::id())),
            false,
        ),
    };
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let trace = match r.trace_path() {
        Some(p) => absolute(p)?,
        None => {
            let f = dir.join("philly-sample.csv");
            std::fs::write(&f, crate::run::SAMPLE_TRACE_BYTES)?;
            f
        }
    };
    let cluster = if Path::new(r.cluster()).is_file() {
        absolute(Path::new(r.cluster()))?.display().to_string()
    } else {
        r.cluster().to_string()
    };
    let mut doc = toml::Table::new();
    doc.insert("name".into(), "compare".into());
    doc.insert("seeds".into(), toml::Value::Integer(seeds as i64));
    doc.insert(
        "metrics".into(),
        toml::Value::Array(METRICS.iter().map(|m| (*m).into()).collect()),
    );
    doc.insert("clusters".into(), toml::Value::Array(vec![cluster.into()]));
    let mut t = toml::Table::new();
    t.insert("path".into(), trace.display().to_string().into());
    if let Some(n) = sample {
        t.insert("sample".into(), toml::Value::Integer(n as i64));
    }
    if let Some(f) = r.format() {
        t.insert("format".into(), f.into());
    }
    doc.insert("trace".into(), toml::Value::Array(vec![t.into()]));
    let mut policies = Vec::new();
    for (s, p) in settings.iter().zip(params) {
        let mut t = toml::Table::new();
        t.insert("name".into(), s.policy.clone().into());
        if !p.0.is_empty() {
            let set: toml::Table =
                p.0.iter()
                    .map(|(k, v)| (k.clone(), v.clone().into()))
                    .collect();
            t.insert("set".into(), set.into());
        }
        policies.push(toml::Value::Table(t));
    }
    doc.insert("policy".into(), toml::Value::Array(policies));
    doc.insert("sim".into(), toml::Value::Table(r.sweep_sim()));
    let file = dir.join("compare-seeds.toml");
    std::fs::write(&file, toml::to_string(&doc)?)
        .with_context(|| format!("writing {}", file.display()))?;

    let planned = shard::plan_into(&file, &dir.join("cells"))?;
    let ran = crate::sweep::run_cells(&planned, &planned.cells, None, r.quiet())?;
    let s = &planned.sweep;
    let m = apiary_sweep::results::merge(&planned.dir, s, &planned.cells)?;
    if !m.failed.is_empty() {
        bail!(
            "{} of {} runs failed (errors in {})",
            m.failed.len(),
            planned.cells.len(),
            planned.dir.join("results.csv").display()
        );
    }
    let rows = read_rows(&planned.dir.join("results.csv"), s)?;
    let baseline = s.settings.first().map(|x| x.label.clone());
    let lines = aggregate(s, &rows, baseline.as_deref());
    if !r.quiet() {
        eprintln!(
            "{} runs ({} settings x {seeds} seeds{}) in {:.1} s",
            ran.ran,
            s.settings.len(),
            sample.map_or(String::new(), |n| format!(", {n} jobs drawn per seed")),
            ran.secs
        );
    }
    print!("{}", table(s, &lines, baseline.as_deref()));
    if let Some(b) = &baseline {
        for h in headlines(s, &lines, b) {
            println!("{h}");
        }
    }
    if keep {
        let p = planned.dir.join("report.html");
        std::fs::write(&p, html(s, &lines, baseline.as_deref(), None, &[]))
            .with_context(|| format!("writing {}", p.display()))?;
        if !r.quiet() {
            eprintln!(
                "wrote {} (the sweep file is {})",
                p.display(),
                file.display()
            );
        }
    } else {
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(())
}

fn absolute(p: &Path) -> Result<PathBuf> {
    std::fs::canonicalize(p).with_context(|| format!("reading {}", p.display()))
}
