//! `apiary llm place`: DistServe's search for the split of a GPU budget into prefill
//! and decode pools, printed best first.

use crate::llm::LlmArgs;
use crate::llm_input::read_requests;
use anyhow::{Result, bail};
use apiary_llm::placement::{self, Search};
use clap::Args;

/// The budget and the target, with the workload's options.
#[derive(Args, Clone)]
pub struct PlaceArgs {
    #[command(flatten)]
    run: LlmArgs,
    /// GPUs the prefill and decode pools use between them.
    #[arg(long, default_value_t = 8)]
    gpus: u32,
    /// Share of requests that must meet the SLO (DistServe: 0.9).
    #[arg(long, default_value_t = 0.9)]
    attainment: f64,
    /// Highest rate tried, requests/s.
    #[arg(long, default_value_t = 64.0)]
    max_rate: f64,
    /// Bisection steps on the rate per split.
    #[arg(long, default_value_t = 10)]
    steps: u32,
    /// GPUs per node, a divisor of --gpus: instances stay within a node, and each
    /// node may hold a prefill and decode split of its own, its KV on the GPU's
    /// scale-up link (DistServe's low node-affinity placement) beside pools across the
    /// nodes, their KV over --kv-gbps.
    #[arg(long)]
    node_gpus: Option<u32>,
    /// Splits to print.
    #[arg(long, default_value_t = 10)]
    top: usize,
}

/// Searches and prints the splits.
pub fn run(a: &PlaceArgs) -> Result<()> {
    if a.run.pools_given() {
        bail!("place chooses the pools itself: drop --disagg and --prefill-tp");
    }
    if a.steps == 0 || a.steps > 40 {
        bail!("--steps {}: expected 1 to 40", a.steps);
    }
    let (spec, n, seed) = a.run.workload_spec();
    let (name, trace) = read_requests(spec, n, seed)?;
    let base = a.run.options()?;
    if base.rate.is_some() {
        bail!("place searches the rate itself (up to --max-rate): drop --rate");
    }
    let s = Search {
        gpus: a.gpus,
        slo: a.run.slo(),
        attainment: a.attainment,
        max_rate: a.max_rate,
        steps: a.steps,
        node_gpus: a.node_gpus,
    };
    let t0 = std::time::Instant::now();
    let found = placement::search(&base, &trace, &s)?;
    if a.run.json() {
        let rows: Vec<serde_json::Value> = found
            .iter()
            .map(|c| {
                serde_json::json!({
                    "prefill": c.prefill, "prefill_tp": c.prefill_tp,
                    "decode": c.decode, "decode_tp": c.decode_tp,
                    "copies": c.copies, "kv": c.kv_link(),
                    "goodput": c.goodput, "goodput_per_gpu": c.per_gpu(),
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    println!(
        "{} splits of {} GPUs for {name} ({} on {}), goodput at {:.0} % of requests within TTFT {} s and TPOT {} s, found in {:.2} s:",
        found.len(),
        a.gpus,
        base.model,
        base.gpu,
        a.attainment * 100.0,
        s.slo.ttft_s,
        s.slo.tpot_s,
        t0.elapsed().as_secs_f64()
    );
    // With nodes, a column says where each split's KV goes.
    let over = |v: String| match a.node_gpus {
        Some(_) => format!("  {v:>9}"),
        None => String::new(),
    };
    println!(
        "{:>4}  {:>9}  {:>9}{}  {:>9}  {:>11}",
        "rank",
        "prefill",
        "decode",
        over("KV over".into()),
        "req/s",
        "req/s/GPU"
    );
    for (i, c) in found.iter().take(a.top).enumerate() {
        let link = match c.copies {
            1 => c.kv_link().to_string(),
            n => format!("{} x{n}", c.kv_link()),
        };
        println!(
            "{:>4}  {:>9}  {:>9}{}  {:>9.2}  {:>11.3}",
            i + 1,
            format!("{}xTP{}", c.prefill, c.prefill_tp),
            format!("{}xTP{}", c.decode, c.decode_tp),
            over(link),
            c.goodput,
            c.per_gpu()
        );
    }
    if found.iter().any(|c| c.copies > 1) {
        println!("(node xN: the split is each node's, repeated on N nodes, req/s over all)");
    }
    Ok(())
}
