//! The `apiary llm compare` report: the table, CDFs of TTFT and TPOT, and instances
//! and load over time, as one self-contained page (the training report's charts).

use crate::engine::LlmOutcome;
use crate::metrics::{LlmSummary, table};
use crate::replica::Phase;
use apiary_report::html::{cdf, chart, page_start};

type Series = Vec<(String, Vec<(f64, f64)>)>;

/// The page for runs of one workload.
pub fn report(title: &str, runs: &[(LlmSummary, &LlmOutcome)]) -> String {
    let sums: Vec<LlmSummary> = runs.iter().map(|r| r.0.clone()).collect();
    let per_request = |f: &dyn Fn(&crate::replica::Req) -> Option<f64>| -> Series {
        runs.iter()
            .map(|(s, o)| {
                let v = o
                    .requests
                    .iter()
                    .filter(|q| q.phase == Phase::Done)
                    .filter_map(f)
                    .collect();
                (s.policy.clone(), cdf(v))
            })
            .collect()
    };
    let ttft = per_request(&|q| Some(q.ttft_s() * 1e3));
    let tpot = per_request(&|q| q.tpot_s().map(|t| t * 1e3));
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
    let mut h = page_start(title, &table(&sums));
    h.push_str(&chart(
        "TTFT CDF",
        "time to first token (ms, log scale)",
        "fraction of requests",
        true,
        &ttft,
    ));
    h.push_str(&chart(
        "TPOT CDF",
        "time per output token (ms, log scale)",
        "fraction of requests",
        true,
        &tpot,
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
    h.push_str(&chart(
        "Instances",
        "seconds",
        "instances",
        false,
        &over(&|p| f64::from(p.instances)),
    ));
    h.push_str("</body></html>\n");
    h
}
