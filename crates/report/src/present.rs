//! How a comparison is shown to people: durations in the unit a reader thinks in
//! (`54.3 h`, not `195643.5` or `2.6699e6`), counts with thousands separators, only the
//! rows that apply to the runs, ratios against a baseline, and a one-line headline per
//! metric ("tiresias: mean JCT 4.24x lower than fifo"). The terminal table and the HTML
//! report read the same rows, so they agree.

use crate::Summary;
use crate::text::{esc, thousands};
use std::fmt::Write as _;

/// A duration in seconds, in the largest unit that keeps it readable: `45.2 s`,
/// `12.5 min`, `3.4 h`, `2.15 d`.
pub fn duration(secs: f64) -> String {
    let a = secs.abs();
    if a == 0.0 {
        "0 s".into()
    } else if a < 1.0 {
        format!("{secs:.3} s")
    } else if a < 120.0 {
        format!("{secs:.1} s")
    } else if a < 7_200.0 {
        format!("{:.1} min", secs / 60.0)
    } else if a < 172_800.0 {
        format!("{:.1} h", secs / 3_600.0)
    } else if a < 8_640_000.0 {
        format!("{:.2} d", secs / 86_400.0)
    } else {
        format!("{} d", thousands(secs / 86_400.0))
    }
}

/// An axis tick in seconds, as short as it can be: `10 s`, `10 min`, `1 h`, `2 d`.
pub fn duration_tick(secs: f64) -> String {
    let (v, unit) = if secs.abs() < 60.0 {
        (secs, "s")
    } else if secs.abs() < 3_600.0 {
        (secs / 60.0, "min")
    } else if secs.abs() < 86_400.0 {
        (secs / 3_600.0, "h")
    } else {
        (secs / 86_400.0, "d")
    };
    format!("{} {unit}", short(v, 2))
}

/// `v` to `n` significant figures (`0.0362`, `1.77`, `7,673`): a ratio reads the same at
/// any size, and a small interval does not round to 0.
pub fn significant(v: f64, n: i32) -> String {
    if v == 0.0 || !v.is_finite() {
        return format!("{v}");
    }
    if v.abs() >= 1000.0 {
        return thousands(v);
    }
    let d = (n - 1 - v.abs().log10().floor() as i32).clamp(0, 6) as usize;
    format!("{v:.d$}")
}

/// `v` as short as an axis label wants it: thousands separators from 1,000, whole
/// numbers without decimals, else at most `decimals` of them, trailing zeros dropped.
pub fn short(v: f64, decimals: usize) -> String {
    if v.abs() >= 1000.0 {
        thousands(v)
    } else if (v - v.round()).abs() < 1e-9 {
        format!("{v:.0}")
    } else {
        let s = format!("{v:.decimals$}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// A duration `secs` and a half-width `ci` in one unit, the one `secs` reads best in:
/// `19.5 ± 2.1 h`.
pub fn duration_pm(secs: f64, ci: f64) -> String {
    let a = secs.abs();
    let (f, unit) = if a < 120.0 {
        (1.0, "s")
    } else if a < 7_200.0 {
        (60.0, "min")
    } else if a < 172_800.0 {
        (3_600.0, "h")
    } else {
        (86_400.0, "d")
    };
    let digits = if a / f >= 100.0 {
        0
    } else if a / f >= 10.0 {
        1
    } else {
        2
    };
    format!("{:.d$} ± {:.d$} {unit}", secs / f, ci / f, d = digits)
}

/// How a metric of a sweep (a field of `summary.json`) reads, its name for people, and
/// which way is better.
pub fn metric_info(metric: &str) -> (Kind, &'static str, Better) {
    use Better::{Higher, Lower};
    match metric {
        "jct_mean" => (Kind::Duration, "mean JCT", Lower),
        "jct_median" => (Kind::Duration, "median JCT", Lower),
        "jct_p95" => (Kind::Duration, "p95 JCT", Lower),
        "jct_p99" => (Kind::Duration, "p99 JCT", Lower),
        "queue_mean" => (Kind::Duration, "mean first-start delay", Lower),
        "queue_median" => (Kind::Duration, "median first-start delay", Lower),
        "pending_mean" => (Kind::Duration, "mean pending time", Lower),
        "pending_median" => (Kind::Duration, "median pending time", Lower),
        "slowdown_mean" => (Kind::Ratio, "mean slowdown", Lower),
        "slowdown_p99" => (Kind::Ratio, "p99 slowdown", Lower),
        "jain" => (Kind::Ratio, "Jain's fairness index", Higher),
        "ftf_mean" => (Kind::Ratio, "mean finish-time fairness", Lower),
        "ftf_max" => (Kind::Ratio, "worst finish-time fairness", Lower),
        "makespan" => (Kind::Duration, "makespan", Lower),
        "best_effort_jct_mean" => (Kind::Duration, "best-effort mean JCT", Lower),
        "util_mean" => (Kind::Percent, "GPU utilisation", Higher),
        "ce_mean" => (Kind::Percent, "cluster efficiency", Higher),
        "deadline_ratio" => (Kind::Percent, "deadlines met", Higher),
        "finished" => (Kind::Count, "jobs finished", Higher),
        "unfinished" => (Kind::Count, "jobs unfinished", Lower),
        "rejected" => (Kind::Count, "jobs rejected", Lower),
        "preemptions" => (Kind::Count, "preemptions", Lower),
        "energy_kwh" => (Kind::Count, "jobs' GPU energy, kWh", Lower),
        "carbon_kg" => (Kind::Count, "jobs' carbon, kg CO2eq", Lower),
        "cluster_carbon_kg" => (Kind::Count, "cluster carbon (idle too), kg", Lower),
        "cache_hit_ratio" => (Kind::Percent, "cache hit ratio", Higher),
        "io_util" => (Kind::Percent, "remote IO utilisation", Higher),
        "util_computing" => (Kind::Percent, "GPU utilisation, computing", Higher),
        "cpu_util" => (Kind::Percent, "CPU pool utilisation", Higher),
        "online_gpu_util" => (Kind::Percent, "serving GPUs' utilisation", Higher),
        "online_sm_activity" => (Kind::Percent, "serving GPUs' SM activity", Higher),
        "slo_violation" => (Kind::Percent, "online SLO violations", Lower),
        "goodput" => (Kind::Percent, "goodput", Higher),
        "lost_gpu_hours" => (Kind::Count, "GPU-hours lost to failures", Lower),
        "failures" => (Kind::Count, "failures", Lower),
        "failed_gpu_share" => (Kind::Percent, "GPU time of failed jobs", Lower),
        // GPU sharing's figures are percents already (apiary_share::experiment::METRICS).
        "alloc_pct_100" => (Kind::Count, "GPUs allocated at 100 % arrived, %", Higher),
        "alloc_pct_130" => (Kind::Count, "GPUs allocated at 130 % arrived, %", Higher),
        "alloc_pct_final" => (Kind::Count, "GPUs allocated at the end, %", Higher),
        "frag_pct_80" => (
            Kind::Count,
            "fragmented GPUs at 80 % arrived, % of all",
            Lower,
        ),
        "frag_ratio_pct_80" => (
            Kind::Count,
            "fragmented GPUs at 80 % arrived, % of idle",
            Lower,
        ),
        // LLM serving's figures (apiary_llm::metrics::METRICS), in seconds and shares.
        "ttft_mean_s" => (Kind::Duration, "mean TTFT", Lower),
        "ttft_p50_s" => (Kind::Duration, "median TTFT", Lower),
        "ttft_p99_s" => (Kind::Duration, "p99 TTFT", Lower),
        "tpot_mean_s" => (Kind::Duration, "mean TPOT", Lower),
        "tpot_p99_s" => (Kind::Duration, "p99 TPOT", Lower),
        "e2e_mean_s" => (Kind::Duration, "mean end-to-end latency", Lower),
        "e2e_p99_s" => (Kind::Duration, "p99 end-to-end latency", Lower),
        "normalised_mean_s" => (Kind::Duration, "mean latency per output token", Lower),
        "slo_attainment" => (Kind::Percent, "SLO attainment", Higher),
        "gpu_util" => (Kind::Percent, "instances busy", Higher),
        "tokens_per_s" => (Kind::Count, "output tokens/s", Higher),
        "migrations" => (Kind::Count, "migrations", Higher),
        "preemption_loss_mean_s" => (Kind::Duration, "mean preemption loss", Lower),
        "swap_outs" => (Kind::Count, "requests swapped out", Lower),
        "aborted_migrations" => (Kind::Count, "migrations abandoned", Lower),
        "migration_downtime_mean_s" => (Kind::Duration, "mean migration downtime", Lower),
        "pods_placed" => (Kind::Count, "pods placed", Higher),
        "pods_failed" => (Kind::Count, "pods that fit nowhere", Lower),
        _ => (Kind::Count, "events", Lower),
    }
}

/// A mean and its 95 % half-width as `kind` reads.
pub fn show_pm(kind: Kind, mean: f64, ci: f64) -> String {
    match kind {
        Kind::Duration => duration_pm(mean, ci),
        Kind::Percent => format!("{:.1} ± {:.1} %", mean * 100.0, ci * 100.0),
        Kind::Count if mean.abs() >= 1000.0 => format!("{} ± {}", thousands(mean), thousands(ci)),
        Kind::Count => format!("{mean:.1} ± {ci:.1}"),
        Kind::Ratio => format!("{} ± {}", significant(mean, 3), significant(ci, 2)),
    }
}

/// How a ratio reads in a headline: `4.24x lower than`, `1.10x higher than`, `the same
/// as`.
pub fn compare_ratio(r: f64) -> String {
    if (r - 1.0).abs() < 0.005 {
        return "the same as".into();
    }
    let (f, dir) = if r < 1.0 {
        (1.0 / r, "lower")
    } else {
        (r, "higher")
    };
    if r == 0.0 || r.is_infinite() {
        return format!("{dir} than");
    }
    format!("{f:.2}x {dir} than")
}

/// Ids for people, runs joined: `3-5, 9, 11-12`.
pub fn id_ranges(ids: &[u64]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < ids.len() {
        let mut j = i;
        while j + 1 < ids.len() && ids[j + 1] == ids[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            ids[i].to_string()
        } else {
            format!("{}-{}", ids[i], ids[j])
        });
        i = j + 1;
    }
    out.join(", ")
}

/// How a measure's values read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Seconds.
    Duration,
    /// A count.
    Count,
    /// A fraction, shown as a percentage.
    Percent,
    /// A dimensionless ratio, shown to three figures (`1.84`, `0.973`).
    Ratio,
}

/// Which way is better, for headlines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Better {
    /// Smaller values are better (times).
    Lower,
    /// Larger values are better (utilisation).
    Higher,
}

/// The CSS class a ratio to the baseline takes in a table: ` good` or ` bad` when it
/// moved more than half a per cent the way `better` says (nothing otherwise).
pub fn ratio_class(better: Option<Better>, r: f64) -> &'static str {
    match better {
        Some(Better::Lower) if r < 0.995 => " good",
        Some(Better::Lower) if r > 1.005 => " bad",
        Some(Better::Higher) if r > 1.005 => " good",
        Some(Better::Higher) if r < 0.995 => " bad",
        _ => "",
    }
}

/// A row of the comparison.
pub struct Measure {
    /// Its metric (a field of `summary.json`, one of [`crate::METRICS`]), whose name
    /// for people ([`metric_info`]) labels the row, as every output names it.
    pub key: &'static str,
    /// Which way is better, for the row's headline; rows without one get no headline.
    pub headline: Option<Better>,
    /// How the values read.
    pub kind: Kind,
    /// The value of a run; `None` where the row does not apply to it.
    pub value: fn(&Summary) -> Option<f64>,
}

impl Measure {
    /// The row's label: its metric's name for people.
    pub fn label(&self) -> &'static str {
        metric_info(self.key).1
    }
}

/// The rows, in the order tables show them.
pub const MEASURES: &[Measure] = &[
    Measure {
        key: "finished",
        headline: None,
        kind: Kind::Count,
        value: |s| Some(s.finished as f64),
    },
    Measure {
        key: "unfinished",
        headline: None,
        kind: Kind::Count,
        value: |s| Some(s.unfinished as f64),
    },
    Measure {
        key: "rejected",
        headline: None,
        kind: Kind::Count,
        value: |s| (s.rejected > 0).then_some(s.rejected as f64),
    },
    Measure {
        key: "jct_mean",
        headline: Some(Better::Lower),
        kind: Kind::Duration,
        value: |s| Some(s.jct_mean),
    },
    Measure {
        key: "jct_median",
        headline: None,
        kind: Kind::Duration,
        value: |s| Some(s.jct_median),
    },
    Measure {
        key: "jct_p95",
        headline: None,
        kind: Kind::Duration,
        value: |s| Some(s.jct_p95),
    },
    Measure {
        key: "jct_p99",
        headline: Some(Better::Lower),
        kind: Kind::Duration,
        value: |s| Some(s.jct_p99),
    },
    Measure {
        key: "queue_mean",
        headline: None,
        kind: Kind::Duration,
        value: |s| Some(s.queue_mean),
    },
    Measure {
        key: "pending_mean",
        headline: Some(Better::Lower),
        kind: Kind::Duration,
        value: |s| Some(s.pending_mean),
    },
    Measure {
        key: "slowdown_mean",
        headline: Some(Better::Lower),
        kind: Kind::Ratio,
        value: |s| Some(s.slowdown_mean),
    },
    Measure {
        key: "slowdown_p99",
        headline: None,
        kind: Kind::Ratio,
        value: |s| Some(s.slowdown_p99),
    },
    Measure {
        key: "jain",
        headline: Some(Better::Higher),
        kind: Kind::Ratio,
        value: |s| Some(s.jain),
    },
    Measure {
        key: "ftf_mean",
        headline: None,
        kind: Kind::Ratio,
        value: |s| Some(s.ftf_mean),
    },
    Measure {
        key: "ftf_max",
        headline: Some(Better::Lower),
        kind: Kind::Ratio,
        value: |s| Some(s.ftf_max),
    },
    Measure {
        key: "makespan",
        headline: Some(Better::Lower),
        kind: Kind::Duration,
        value: |s| Some(s.makespan),
    },
    Measure {
        key: "util_mean",
        headline: Some(Better::Higher),
        kind: Kind::Percent,
        value: |s| Some(s.util_mean),
    },
    Measure {
        key: "ce_mean",
        headline: None,
        kind: Kind::Percent,
        value: |s| s.ce_mean,
    },
    Measure {
        key: "energy_kwh",
        headline: None,
        kind: Kind::Count,
        value: |s| s.energy_kwh,
    },
    Measure {
        key: "carbon_kg",
        headline: Some(Better::Lower),
        kind: Kind::Count,
        value: |s| s.carbon_kg,
    },
    Measure {
        key: "cluster_carbon_kg",
        headline: None,
        kind: Kind::Count,
        value: |s| s.cluster_carbon_kg,
    },
    Measure {
        key: "cache_hit_ratio",
        headline: None,
        kind: Kind::Percent,
        value: |s| s.cache_hit_ratio,
    },
    Measure {
        key: "io_util",
        headline: None,
        kind: Kind::Percent,
        value: |s| s.io_util,
    },
    Measure {
        key: "util_computing",
        headline: Some(Better::Higher),
        kind: Kind::Percent,
        value: |s| s.util_computing,
    },
    Measure {
        key: "cpu_util",
        headline: None,
        kind: Kind::Percent,
        value: |s| s.cpu_util,
    },
    Measure {
        key: "online_gpu_util",
        headline: Some(Better::Higher),
        kind: Kind::Percent,
        value: |s| s.online_gpu_util,
    },
    Measure {
        key: "online_sm_activity",
        headline: None,
        kind: Kind::Percent,
        value: |s| s.online_sm_activity,
    },
    Measure {
        key: "slo_violation",
        headline: Some(Better::Lower),
        kind: Kind::Percent,
        value: |s| s.slo_violation,
    },
    Measure {
        key: "goodput",
        headline: Some(Better::Higher),
        kind: Kind::Percent,
        value: |s| s.goodput,
    },
    Measure {
        key: "lost_gpu_hours",
        headline: None,
        kind: Kind::Count,
        value: |s| s.lost_gpu_hours,
    },
    Measure {
        key: "failures",
        headline: None,
        kind: Kind::Count,
        value: |s| s.failures.map(|n| n as f64),
    },
    Measure {
        key: "failed_gpu_share",
        headline: None,
        kind: Kind::Percent,
        value: |s| s.failed_gpu_share,
    },
    Measure {
        key: "preemptions",
        headline: None,
        kind: Kind::Count,
        value: |s| Some(s.preemptions as f64),
    },
    Measure {
        key: "deadline_ratio",
        headline: Some(Better::Higher),
        kind: Kind::Percent,
        value: |s| s.deadline_ratio,
    },
    Measure {
        key: "best_effort_jct_mean",
        headline: None,
        kind: Kind::Duration,
        value: |s| s.best_effort_jct_mean,
    },
];

/// A value as the row's kind reads.
pub fn show(kind: Kind, v: f64) -> String {
    match kind {
        Kind::Duration => duration(v),
        Kind::Count => thousands(v),
        Kind::Percent => format!("{:.1} %", v * 100.0),
        Kind::Ratio => significant(v, 3),
    }
}

/// The rows that apply to some of `sums`.
fn applying(sums: &[Summary]) -> impl Iterator<Item = &'static Measure> + '_ {
    MEASURES
        .iter()
        .filter(|m| sums.iter().any(|s| (m.value)(s).is_some()))
}

/// `v` over the baseline's `b`, when both are there and the baseline is not 0.
fn ratio(v: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (v, b) {
        (Some(v), Some(b)) if b != 0.0 => Some(v / b),
        (Some(0.0), Some(_)) => Some(1.0),
        _ => None,
    }
}

/// The cells of one row: each run's value, then its ratio to the first run's.
fn cells(m: &Measure, sums: &[Summary]) -> Vec<(String, Option<f64>)> {
    let base = sums.first().and_then(|s| (m.value)(s));
    sums.iter()
        .enumerate()
        .map(|(i, s)| {
            let v = (m.value)(s);
            let text = match v {
                Some(x) if m.key == "finished" => {
                    format!("{} / {}", thousands(x), thousands(s.jobs as f64))
                }
                Some(x) => show(m.kind, x),
                None => "-".into(),
            };
            let shown = i > 0 && m.kind != Kind::Count;
            (text, if shown { ratio(v, base) } else { None })
        })
        .collect()
}

/// A side-by-side text table of runs; with two or more, each column after the first
/// (the baseline) shows its ratio to the baseline's value in parentheses.
pub fn table(sums: &[Summary]) -> String {
    let rows: Vec<(&str, Vec<String>)> = applying(sums)
        .map(|m| {
            let c = cells(m, sums)
                .into_iter()
                .map(|(t, r)| match r {
                    Some(r) => format!("{t} ({})", ratio_text(r)),
                    None => t,
                })
                .collect();
            (m.label(), c)
        })
        .collect();
    let label_w = rows.iter().map(|r| r.0.len()).max().unwrap_or(0);
    let col_w: Vec<usize> = sums
        .iter()
        .enumerate()
        .map(|(i, s)| {
            rows.iter()
                .map(|r| r.1[i].chars().count())
                .max()
                .unwrap_or(0)
                .max(s.policy.chars().count())
        })
        .collect();
    let mut out = String::new();
    let _ = write!(out, "{:label_w$}", "");
    for (i, s) in sums.iter().enumerate() {
        let _ = write!(out, "  {:>w$}", s.policy, w = col_w[i]);
    }
    out.push('\n');
    for (label, c) in &rows {
        let _ = write!(out, "{label:label_w$}");
        for (i, v) in c.iter().enumerate() {
            let _ = write!(out, "  {v:>w$}", w = col_w[i]);
        }
        out.push('\n');
    }
    out
}

/// The same table as HTML: a column per run, the first the baseline, ratios beside the
/// others' values.
pub fn html_table(sums: &[Summary]) -> String {
    let mut o = String::from("<table class=\"cmp\">\n<thead><tr><th></th>");
    for (i, s) in sums.iter().enumerate() {
        let tag = if i == 0 && sums.len() > 1 {
            " <span class=\"base\">baseline</span>"
        } else {
            ""
        };
        let _ = write!(o, "<th>{}{tag}</th>", esc(&s.policy));
    }
    o.push_str("</tr></thead>\n<tbody>\n");
    for m in applying(sums) {
        let _ = write!(o, "<tr><th>{}</th>", esc(m.label()));
        for (t, r) in cells(m, sums) {
            let _ = write!(o, "<td>{}", esc(&t));
            if let Some(r) = r {
                let class = ratio_class(m.headline, r);
                let _ = write!(
                    o,
                    " <span class=\"ratio{class}\">{}</span>",
                    esc(&ratio_text(r))
                );
            }
            o.push_str("</td>");
        }
        o.push_str("</tr>\n");
    }
    o.push_str("</tbody></table>\n");
    o
}

/// A ratio as a table shows it: `0.24x`, `0.004x`.
pub fn ratio_text(r: f64) -> String {
    if r >= 99.5 {
        format!("{}x", thousands(r))
    } else if r == 0.0 || r >= 0.095 {
        format!("{r:.2}x")
    } else if r >= 0.000_95 {
        format!("{r:.3}x")
    } else {
        "<0.001x".into()
    }
}

/// One line per headline metric: the run after the first (the baseline) that does best
/// on it, against the baseline, e.g. `tiresias: mean JCT 4.24x lower than fifo (12.8 h
/// against 2.26 d)`.
pub fn headlines(sums: &[Summary]) -> Vec<String> {
    let Some(base) = sums.first() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for m in MEASURES {
        let (name, Some(better)) = (m.label(), m.headline) else {
            continue;
        };
        let Some(b) = (m.value)(base) else { continue };
        let best = sums[1..]
            .iter()
            .filter_map(|s| Some((s, (m.value)(s)?)))
            .reduce(|x, y| {
                let y_better = match better {
                    Better::Lower => y.1 < x.1,
                    Better::Higher => y.1 > x.1,
                };
                if y_better { y } else { x }
            });
        let Some((s, v)) = best else { continue };
        let vs = format!("({} against {})", show(m.kind, v), show(m.kind, b));
        let phrase = match (b == 0.0, v == 0.0) {
            (true, true) => "the same as".to_string(),
            (true, false) => compare_ratio(f64::INFINITY),
            _ => compare_ratio(v / b),
        };
        out.push(format!(
            "{}: {name} {phrase} {} {vs}",
            s.policy, base.policy
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_join_runs() {
        assert_eq!(id_ranges(&[]), "");
        assert_eq!(id_ranges(&[3, 4, 5, 9, 11, 12]), "3-5, 9, 11-12");
    }

    #[test]
    fn durations_read_in_a_people_unit() {
        assert_eq!(duration(0.0), "0 s");
        assert_eq!(duration(45.23), "45.2 s");
        assert_eq!(duration(750.0), "12.5 min");
        assert_eq!(duration(195_643.5), "2.26 d");
        assert_eq!(duration(12_240.0), "3.4 h");
        assert_eq!(duration(2_669_900.0), "30.90 d");
        assert_eq!(duration_tick(600.0), "10 min");
        assert_eq!(duration_tick(86_400.0 * 2.5), "2.5 d");
    }
}
