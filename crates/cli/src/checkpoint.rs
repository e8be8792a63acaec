//! `apiary checkpoint plan`: for one job under a failure model, each checkpoint level's
//! interval, the expected waste and the effective training time ratio, and, with
//! `--simulate`, the same job run failure by failure beside the closed form.

use anyhow::{Context, Result, bail};
use apiary_model::failures::FailureModel;
use apiary_model::failures::checkpoint::{self, Level, Plan, Rule};
use apiary_model::failures::montecarlo::{self, Run};
use clap::{Args, Subcommand};
use serde_json::json;

#[derive(Subcommand)]
pub enum CheckpointCmd {
    /// The optimal interval per checkpoint level for a job, the expected waste and the
    /// ETTR.
    Plan(PlanArgs),
}

#[derive(Args)]
pub struct PlanArgs {
    /// GPUs of the job.
    #[arg(long)]
    gpus: u32,
    /// Failure model: a preset (llama3, philly) or a TOML file of [[class]] tables.
    #[arg(long, value_name = "PRESET|FILE")]
    failures: String,
    /// Model whose parameters size the checkpoint (`apiary llm models` lists them).
    #[arg(long, conflicts_with = "params_b")]
    model: Option<String>,
    /// Parameters, billions, for a model not in the table (405 for Llama 3 405B).
    #[arg(long, value_name = "BILLIONS")]
    params_b: Option<f64>,
    /// Checkpoint levels: a TOML file of [[level]] tables (default: host memory, a
    /// peer's memory, persistent storage).
    #[arg(long, value_name = "FILE")]
    levels: Option<String>,
    /// Seconds from a failure to training again, restore excluded (overrides the
    /// model's restart_s).
    #[arg(long, value_name = "SECONDS")]
    restart_s: Option<f64>,
    /// Interval rule: risk (each level for the failures it recovers), young or daly
    /// (each level for every failure it survives), or cap:SHARE (CheckFreq's overhead
    /// cap, e.g. cap:3.5%).
    #[arg(long)]
    rule: Option<String>,
    /// Also run the job through the failures for this many hours, seed by seed.
    #[arg(long, value_name = "HOURS")]
    simulate: Option<f64>,
    /// First seed of the simulation.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Seeds to simulate.
    #[arg(long, default_value_t = 5)]
    seeds: u64,
    /// One JSON object instead of the table.
    #[arg(long)]
    json: bool,
}

/// The failure model `spec` names: a preset, or a TOML file.
pub fn failure_model(spec: &str) -> Result<FailureModel> {
    apiary_trace::failures::load(spec, std::path::Path::new(""))
        .map_err(|e| anyhow::anyhow!("--failures {e}"))
}

/// The simulator's setting for `--failures SPEC`.
pub fn failure_setting(spec: &str) -> Result<apiary_sim::failures::Setting> {
    apiary_sim::failures::Setting::of(failure_model(spec)?)
        .map_err(|e| anyhow::anyhow!("--failures {spec}: rule {e}"))
}

fn params(a: &PlanArgs) -> Result<(String, f64)> {
    match (&a.model, a.params_b) {
        (Some(m), _) => {
            let spec = apiary_llm::hardware::model(m)?;
            Ok((spec.name.clone(), spec.weight_bytes / 2.0))
        }
        (None, Some(b)) if b.is_finite() && b > 0.0 => Ok((format!("{b}B parameters"), b * 1e9)),
        (None, Some(b)) => bail!("--params-b {b}: give billions of parameters above 0"),
        (None, None) => bail!("give --model NAME or --params-b BILLIONS to size the checkpoint"),
    }
}

/// `apiary checkpoint plan`.
pub fn plan(a: &PlanArgs) -> Result<()> {
    let mut model = failure_model(&a.failures)?;
    if let Some(r) = a.restart_s {
        if !(r.is_finite() && (0.0..=1e7).contains(&r)) {
            bail!("--restart-s {r}: give seconds, 0 to 10^7");
        }
        model.restart_s = r;
    }
    let levels: Vec<Level> = match &a.levels {
        None if !model.levels.is_empty() => model.levels.clone(),
        None => checkpoint::default_levels(),
        Some(f) => {
            let text =
                std::fs::read_to_string(f).with_context(|| format!("reading --levels {f}"))?;
            checkpoint::parse_levels(&text, f)?
        }
    };
    let rule_text = a
        .rule
        .clone()
        .or_else(|| model.rule.clone())
        .unwrap_or_else(|| "risk".into());
    let rule: Rule = rule_text
        .parse()
        .map_err(|e: String| anyhow::anyhow!("--rule {e}"))?;
    let (what, params) = params(a)?;
    let bytes = params * checkpoint::BYTES_PER_PARAM;
    let p = checkpoint::plan(&model, &levels, a.gpus, bytes, rule)?;
    let runs: Vec<Run> = match a.simulate {
        Some(h) if !(h.is_finite() && h > 0.0 && h <= 1e6) => {
            bail!("--simulate {h}: give hours above 0, at most 10^6")
        }
        Some(h) => {
            let survives = checkpoint::survival(&model, &levels);
            (a.seed..a.seed + a.seeds.max(1))
                .map(|s| montecarlo::simulate(&model, &p, &survives, h, s))
                .collect()
        }
        None => Vec::new(),
    };
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&to_json(&model, &p, &what, &runs))?
        );
    } else {
        print_table(&model, &p, &what, &rule_text, &runs);
    }
    Ok(())
}

fn mean(xs: impl Iterator<Item = f64>) -> f64 {
    let v: Vec<f64> = xs.collect();
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

fn interval(s: f64) -> String {
    if !s.is_finite() {
        "never".into()
    } else if s < 120.0 {
        format!("{s:.1} s")
    } else if s < 7200.0 {
        format!("{:.1} min", s / 60.0)
    } else {
        format!("{:.1} h", s / 3600.0)
    }
}

fn print_table(m: &FailureModel, p: &Plan, what: &str, rule: &str, runs: &[Run]) {
    println!(
        "job: {} GPUs on {} nodes, {what}: checkpoint {:.2} TB, {:.2} GB per node",
        p.gpus,
        p.nodes,
        p.bytes / 1e12,
        p.bytes / f64::from(p.nodes) / 1e9
    );
    let every = if p.failures_per_hour > 0.0 {
        format!("an interruption every {:.2} h", p.mtti_hours())
    } else {
        "no interruption a job recovers from".to_string()
    };
    let fatal = m
        .classes
        .iter()
        .filter(|c| c.kind == apiary_model::failures::Kind::Fatal)
        .count();
    let fatal = if fatal > 0 {
        format!(", {fatal} fatal, left out: they end the job")
    } else {
        String::new()
    };
    println!(
        "failures: {} ({} classes{fatal}), {every}; restart {:.0} s; rule {rule}",
        m.name,
        m.classes.len(),
        m.restart_s
    );
    println!(
        "\n{:<10} {:>10} {:>10} {:>11} {:>9}  RECOVERS",
        "LEVEL", "STALL", "RESTORE", "INTERVAL", "OVERHEAD"
    );
    for l in &p.levels {
        let classes: Vec<&str> = l
            .recovers
            .iter()
            .map(|&k| m.classes[k].name.as_str())
            .collect();
        println!(
            "{:<10} {:>8.3} s {:>8.2} s {:>11} {:>8.3}%  {}",
            l.name,
            l.stall_s,
            l.restore_s,
            interval(l.interval_s),
            100.0 * l.overhead(),
            if classes.is_empty() {
                "-".to_string()
            } else {
                format!("{} ({:.3}/h)", classes.join(", "), l.recovers_per_hour)
            }
        );
    }
    let w = &p.waste;
    println!(
        "\nexpected waste {:.2}%: checkpoints {:.2}%, rework {:.2}%, restore {:.2}%, restart {:.2}%",
        100.0 * w.total(),
        100.0 * w.checkpoint,
        100.0 * w.rework,
        100.0 * w.restore,
        100.0 * w.restart
    );
    println!("ETTR {:.2}%", 100.0 * p.ettr);
    if !runs.is_empty() {
        let hours = runs[0].wall_s / 3600.0;
        let ettr = mean(runs.iter().map(Run::ettr));
        let lo = runs.iter().map(Run::ettr).fold(f64::INFINITY, f64::min);
        let hi = runs.iter().map(Run::ettr).fold(0.0, f64::max);
        let n = mean(runs.iter().map(|r| r.failures.iter().sum::<u64>() as f64));
        let share = |f: fn(&Run) -> f64| 100.0 * mean(runs.iter().map(|r| f(r) / r.wall_s));
        println!(
            "simulated, {} seeds of {hours:.0} h: {n:.1} interruptions, ETTR {:.2}% ({:.2}-{:.2}); \
             checkpoints {:.2}%, rework {:.2}%, restore {:.2}%, restart {:.2}%",
            runs.len(),
            100.0 * ettr,
            100.0 * lo,
            100.0 * hi,
            share(|r| r.checkpoint_s),
            share(|r| r.rework_s),
            share(|r| r.restore_s),
            share(|r| r.restart_s),
        );
    }
}

fn to_json(m: &FailureModel, p: &Plan, what: &str, runs: &[Run]) -> serde_json::Value {
    let finite = |x: f64| x.is_finite().then_some(x);
    json!({
        "gpus": p.gpus,
        "nodes": p.nodes,
        "model": what,
        "checkpoint_bytes": p.bytes,
        "failures": m.name,
        "failures_per_hour": p.failures_per_hour,
        "mtti_hours": p.mtti_hours(),
        "restart_s": m.restart_s,
        "levels": p.levels.iter().map(|l| json!({
            "name": l.name,
            "stall_s": l.stall_s,
            "restore_s": l.restore_s,
            "interval_s": finite(l.interval_s),
            "overhead": l.overhead(),
            "recovers": l.recovers.iter().map(|&k| m.classes[k].name.clone()).collect::<Vec<_>>(),
            "recovers_per_hour": l.recovers_per_hour,
        })).collect::<Vec<_>>(),
        "waste": {
            "total": p.waste.total(),
            "checkpoint": p.waste.checkpoint,
            "rework": p.waste.rework,
            "restore": p.waste.restore,
            "restart": p.waste.restart,
        },
        "ettr": p.ettr,
        "simulated": runs.iter().map(|r| json!({
            "hours": r.wall_s / 3600.0,
            "ettr": r.ettr(),
            "failures": m.classes.iter().zip(&r.failures).map(|(c, n)| (c.name.clone(), json!(n))).collect::<serde_json::Map<_, _>>(),
            "checkpoint_s": r.checkpoint_s,
            "rework_s": r.rework_s,
            "restore_s": r.restore_s,
            "restart_s": r.restart_s,
        })).collect::<Vec<_>>(),
    })
}
