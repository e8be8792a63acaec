//! The `apiary llm compare` report, as the training report reads: headlines, an HTML
//! table with each figure's ratio to the first policy, CDFs of TTFT and TPOT and the
//! load over time (all in seconds), and the record of the run. One self-contained page;
//! its bytes depend only on the numbers and the record.

use crate::engine::LlmOutcome;
use crate::metrics::LlmSummary;
use crate::replica::Phase;
use apiary_report::html::{cdf, chart, page_head, record_table};
use apiary_report::present::{Better, compare_ratio, ratio_class, ratio_text};
use apiary_report::text::esc;
use std::fmt::Write as _;

type Series = Vec<(String, Vec<(f64, f64)>)>;

/// One row of the table.
struct Measure {
    label: &'static str,
    value: fn(&LlmSummary) -> f64,
    show: fn(f64) -> String,
    /// Which way is better (none: neither).
    better: Option<Better>,
    /// In the headlines.
    headline: bool,
}

fn secs(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0} s")
    } else if v >= 1.0 {
        format!("{v:.2} s")
    } else {
        format!("{v:.3} s")
    }
}
fn percent(v: f64) -> String {
    format!("{:.1} %", v * 100.0)
}
fn count(v: f64) -> String {
    format!("{v:.0}")
}
fn number(v: f64) -> String {
    format!("{v:.2}")
}

const MEASURES: &[Measure] = &[
    Measure {
        label: "requests served",
        value: |s| s.requests as f64,
        show: count,
        better: None,
        headline: false,
    },
    Measure {
        label: "TTFT mean",
        value: |s| s.ttft.mean,
        show: secs,
        better: Some(Better::Lower),
        headline: true,
    },
    Measure {
        label: "TTFT p99",
        value: |s| s.ttft.p99,
        show: secs,
        better: Some(Better::Lower),
        headline: true,
    },
    Measure {
        label: "TPOT mean",
        value: |s| s.tpot.mean,
        show: secs,
        better: Some(Better::Lower),
        headline: false,
    },
    Measure {
        label: "TPOT p99",
        value: |s| s.tpot.p99,
        show: secs,
        better: Some(Better::Lower),
        headline: true,
    },
    Measure {
        label: "end-to-end mean",
        value: |s| s.e2e.mean,
        show: secs,
        better: Some(Better::Lower),
        headline: false,
    },
    Measure {
        label: "end-to-end p99",
        value: |s| s.e2e.p99,
        show: secs,
        better: Some(Better::Lower),
        headline: true,
    },
    Measure {
        label: "SLO attainment",
        value: |s| s.slo_attainment,
        show: percent,
        better: Some(Better::Higher),
        headline: true,
    },
    Measure {
        label: "preemptions",
        value: |s| s.preemptions as f64,
        show: count,
        better: Some(Better::Lower),
        headline: false,
    },
    Measure {
        label: "migrations",
        value: |s| s.migrations as f64,
        show: count,
        better: None,
        headline: false,
    },
    Measure {
        label: "aborted migrations",
        value: |s| s.aborted_migrations as f64,
        show: count,
        better: Some(Better::Lower),
        headline: false,
    },
    Measure {
        label: "instances (mean)",
        value: |s| s.instances_mean,
        show: number,
        better: None,
        headline: false,
    },
    Measure {
        label: "GPU busy",
        value: |s| s.gpu_util,
        show: percent,
        better: None,
        headline: false,
    },
    Measure {
        label: "output tokens/s",
        value: |s| s.tokens_per_s,
        show: count,
        better: Some(Better::Higher),
        headline: false,
    },
    Measure {
        label: "refused",
        value: |s| s.refused as f64,
        show: count,
        better: Some(Better::Lower),
        headline: false,
    },
];

/// The table: a column per policy, each figure beside its ratio to the first policy's.
fn table(sums: &[LlmSummary]) -> String {
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
    for m in MEASURES {
        let _ = write!(o, "<tr><th>{}</th>", esc(m.label));
        let base = sums.first().map(|s| (m.value)(s));
        for (i, s) in sums.iter().enumerate() {
            let v = (m.value)(s);
            let _ = write!(o, "<td>{}", esc(&(m.show)(v)));
            if let (Some(b), true) = (base, i > 0)
                && b > 0.0
            {
                let r = v / b;
                let class = ratio_class(m.better, r);
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

/// Per headline figure, the policy after the first that does best on it, against the
/// first: `llumnix: TTFT p99 4.24x lower than round-robin (0.51 s against 2.16 s)`.
fn headlines(sums: &[LlmSummary]) -> Vec<String> {
    let Some(base) = sums.first() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for m in MEASURES.iter().filter(|m| m.headline) {
        let b = (m.value)(base);
        let best = sums[1..].iter().map(|s| (s, (m.value)(s))).reduce(|x, y| {
            let y_better = match m.better {
                Some(Better::Higher) => y.1 > x.1,
                _ => y.1 < x.1,
            };
            if y_better { y } else { x }
        });
        let Some((s, v)) = best else { continue };
        let phrase = if b == 0.0 {
            if v == 0.0 {
                "the same as".into()
            } else {
                compare_ratio(f64::INFINITY)
            }
        } else {
            compare_ratio(v / b)
        };
        out.push(format!(
            "{}: {} {phrase} {} ({} against {})",
            s.policy,
            m.label,
            base.policy,
            (m.show)(v),
            (m.show)(b)
        ));
    }
    out
}

/// The page for runs of one workload, with the run's record (and each policy's
/// parameters) at its foot when given.
pub fn report(
    title: &str,
    runs: &[(LlmSummary, &LlmOutcome)],
    record: Option<(&apiary_report::Record, &[(String, String)])>,
) -> String {
    let sums: Vec<LlmSummary> = runs.iter().map(|r| r.0.clone()).collect();
    let per_request = |f: &dyn Fn(&crate::replica::Req) -> Option<f64>| -> Series {
        runs.iter()
            .map(|(s, o)| {
                let v = (o.requests.iter())
                    .filter(|q| q.phase == Phase::Done)
                    .filter_map(f)
                    .collect();
                (s.policy.clone(), cdf(v))
            })
            .collect()
    };
    let over = |f: &dyn Fn(&crate::engine::Sample) -> f64| -> Series {
        runs.iter()
            .map(|(s, o)| {
                (
                    s.policy.clone(),
                    o.series.iter().map(|p| (p.t, f(p))).collect(),
                )
            })
            .collect()
    };
    let mut h = page_head(title);
    let lines = headlines(&sums);
    if !lines.is_empty() {
        h.push_str("<ul class=\"headlines\">\n");
        for l in lines {
            let _ = writeln!(h, "<li>{}</li>", esc(&l));
        }
        h.push_str("</ul>\n");
    }
    h.push_str(&table(&sums));
    h.push_str(&chart(
        "TTFT CDF",
        "time to first token (s, log scale)",
        "fraction of requests",
        true,
        &per_request(&|q| Some(q.ttft_s())),
    ));
    h.push_str(&chart(
        "TPOT CDF",
        "time per output token (s, log scale)",
        "fraction of requests",
        true,
        &per_request(&|q| q.tpot_s()),
    ));
    h.push_str(&chart(
        "Requests in the system",
        "seconds",
        "running + queued",
        false,
        &over(&|p| f64::from(p.running + p.waiting)),
    ));
    h.push_str(&chart(
        "KV cache in use",
        "seconds",
        "share of blocks",
        false,
        &over(&|p| p.kv_used),
    ));
    // A fixed cluster's instances are a flat line: drawn only where they change.
    let scaled = runs.iter().any(|(_, o)| {
        o.series
            .windows(2)
            .any(|w| w[0].instances != w[1].instances)
    });
    if scaled {
        h.push_str(&chart(
            "Instances",
            "seconds",
            "instances",
            false,
            &over(&|p| f64::from(p.instances)),
        ));
    }
    if let Some((r, params)) = record {
        h.push_str(&record_table(r, "requests read", params));
    }
    h.push_str("</body></html>\n");
    h
}
