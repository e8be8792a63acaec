//! `apiary llm compare --seeds N`: the comparison repeated over seeds 0..N (each seed
//! draws its own arrivals, and its own lengths for synthetic traces), reported as means
//! with 95 % intervals and ratios against the first policy paired by seed, so that a
//! claim rests on more than one draw.

use anyhow::Result;
use apiary_llm::metrics::LlmSummary;
use apiary_report::stats::{Estimate, paired_ratio};
use std::fmt::Write as _;

/// The figures a seeded comparison reports: (label, JSON key, lower is better).
pub const METRICS: [(&str, &str, bool); 7] = [
    ("TTFT mean (s)", "ttft_mean_s", true),
    ("TTFT p99 (s)", "ttft_p99_s", true),
    ("TPOT p99 (s)", "tpot_p99_s", true),
    ("E2E p99 (s)", "e2e_p99_s", true),
    ("SLO attainment", "slo_attainment", false),
    ("GPU busy", "gpu_util", false),
    ("output tokens/s", "tokens_per_s", false),
];

fn value(s: &LlmSummary, key: &str) -> f64 {
    s.metric(key).unwrap_or(f64::NAN)
}

/// One figure of one policy over the seeds, and its ratio to the first policy's.
pub struct Cell {
    /// Over the seeds.
    pub estimate: Estimate,
    /// Paired by seed against the first policy (none for the first).
    pub ratio: Option<Estimate>,
}

/// `runs[p][k]` is policy `p` on seed `k`; returns `cells[metric][policy]`.
pub fn cells(runs: &[Vec<LlmSummary>]) -> Vec<Vec<Cell>> {
    METRICS
        .iter()
        .map(|&(_, key, _)| {
            let per = |p: &Vec<LlmSummary>| -> Vec<(u64, f64)> {
                p.iter()
                    .enumerate()
                    .map(|(k, s)| (k as u64, value(s, key)))
                    .collect()
            };
            let base = runs.first().map(per).unwrap_or_default();
            runs.iter()
                .enumerate()
                .map(|(i, p)| {
                    let v = per(p);
                    let vals: Vec<f64> = v.iter().map(|x| x.1).collect();
                    Cell {
                        estimate: Estimate::of(&vals).expect("at least one seed"),
                        ratio: (i > 0).then(|| paired_ratio(&v, &base)).flatten(),
                    }
                })
                .collect()
        })
        .collect()
}

/// The table: a row per figure, a column per policy, `mean ± half-width` and, after the
/// first policy, the seed-paired ratio to it with its interval.
pub fn table(policies: &[String], cells: &[Vec<Cell>], seeds: usize) -> String {
    let mut o = String::new();
    let _ = write!(o, "{:<16}", format!("{seeds} seeds"));
    for p in policies {
        let _ = write!(o, " {p:>34}");
    }
    o.push('\n');
    for ((label, _, _), row) in METRICS.iter().zip(cells) {
        let _ = write!(o, "{label:<16}");
        for c in row {
            let e = c.estimate;
            let mut t = format!("{} ± {}", sig(e.mean), sig(e.ci95));
            if let Some(r) = c.ratio {
                let _ = write!(t, " ({:.2}x ± {:.2})", r.mean, r.ci95);
            }
            let _ = write!(o, " {t:>34}");
        }
        o.push('\n');
    }
    o
}

fn sig(v: f64) -> String {
    if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// The JSON of a seeded comparison: per policy and figure, mean, half-width, seeds and
/// the seed-paired ratio to the first policy.
pub fn json(policies: &[String], cells: &[Vec<Cell>]) -> Result<serde_json::Value> {
    let mut out = serde_json::Map::new();
    for (i, p) in policies.iter().enumerate() {
        let mut m = serde_json::Map::new();
        for ((_, key, _), row) in METRICS.iter().zip(cells) {
            let c = &row[i];
            let mut v = serde_json::json!({
                "mean": c.estimate.mean, "ci95": c.estimate.ci95, "seeds": c.estimate.n,
            });
            if let Some(r) = c.ratio {
                v["ratio_mean"] = r.mean.into();
                v["ratio_ci95"] = r.ci95.into();
            }
            m.insert((*key).to_string(), v);
        }
        out.insert(p.clone(), m.into());
    }
    Ok(out.into())
}
