//! `apiary llm pool`: several LLM services sharing one GPU pool (SeaLLM's setting)
//! under the pool policies.

use crate::llm_input::{params_for, print_timing, read_requests};
use anyhow::{Context, Result, bail};
use apiary_llm::LlmOutcome;
use apiary_llm::hardware::{self, MemoryPlan};
use apiary_llm::latency::{EngineKind, IterModel};
use apiary_llm::metrics::{LlmSummary, table};
use apiary_llm::policy::pool::{self, POOL_POLICIES};
use apiary_llm::pool::{Pool, PoolOutcome, Service, simulate_pool, summary};
use apiary_llm::workload::{self, ClipRule, Clipped, Request};
use clap::Args;
use std::path::PathBuf;
use std::time::Instant;

/// What to run.
#[derive(Args, Clone)]
pub struct PoolArgs {
    /// A service, `NAME=MODEL:TRACE[@RATE]` (TRACE as `apiary llm simulate -t`; RATE
    /// replaces its arrivals by a Poisson process, requests/s); repeatable. Default:
    /// `chat=llama-2-7b:sample:conv` and `code=llama-2-13b:sample:code`, the committed
    /// samples of the Azure conversation and code traces.
    #[arg(long = "service", short = 's', value_name = "NAME=MODEL:TRACE[@RATE]")]
    services: Vec<String>,
    /// Pool policies to run, comma-separated (see `apiary llm policies`).
    #[arg(long, short, default_value = "dedicated,static-partition,seallm")]
    policy: String,
    /// GPU (see `apiary llm models`).
    #[arg(long, default_value = "A100")]
    gpu: String,
    /// GPUs in the pool.
    #[arg(long, default_value_t = 4)]
    gpus: u32,
    /// GPUs per group (every model on a group runs at this tensor parallelism).
    #[arg(long, default_value_t = 1)]
    tp: u32,
    /// Host-to-GPU bandwidth for loading weights when a policy re-places a model,
    /// GB/s per GPU (PCIe 4.0 x16 from pinned memory).
    #[arg(long, default_value_t = Pool::PCIE4_LOAD_BW / 1e9)]
    load_gbps: f64,
    /// Coefficient of variation of the generated arrivals (with @RATE).
    #[arg(long, default_value_t = 1.0)]
    cv: f64,
    /// Use the first N requests of each service (synthetic ones: generate N; default
    /// 10,000).
    #[arg(long, short = 'n')]
    requests: Option<usize>,
    /// Refuse requests longer than their model's context instead of clipping them.
    #[arg(long)]
    refuse_long: bool,
    /// CPU time per iteration, ms.
    #[arg(long, default_value_t = 5.0)]
    cpu_ms: f64,
    /// A request meets its SLO when its end-to-end latency is at most this many times
    /// what it takes alone on an idle group.
    #[arg(long, default_value_t = 5.0)]
    slo_scale: f64,
    /// Seed of the generators.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Policy parameter `key=value`, or `policy.key=value` for one policy; repeatable.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Also write an HTML report here.
    #[arg(long)]
    html: Option<PathBuf>,
    /// Print the summaries as a JSON array.
    #[arg(long)]
    json: bool,
    /// No progress or timing lines.
    #[arg(long, short)]
    quiet: bool,
}

struct Mix {
    pool: Pool,
    services: Vec<Service>,
    requests: Vec<Request>,
    service_of: Vec<u16>,
    refused: Vec<bool>,
    clipped: Clipped,
}

/// `NAME=MODEL:TRACE[@RATE]`.
fn parse_service(spec: &str) -> Result<(String, String, String, Option<f64>)> {
    let bad = || {
        anyhow::anyhow!(
            "--service '{spec}': expected NAME=MODEL:TRACE[@RATE], e.g. chat=llama-2-7b:sample:conv@4"
        )
    };
    let (name, rest) = spec.split_once('=').ok_or_else(bad)?;
    let (model, trace) = rest.split_once(':').ok_or_else(bad)?;
    let (trace, rate) = match trace.rsplit_once('@') {
        Some((t, r)) => {
            let rate: f64 = r
                .parse()
                .map_err(|_| anyhow::anyhow!("--service '{spec}': rate '{r}' is not a number"))?;
            (t, Some(rate))
        }
        None => (trace, None),
    };
    if name.is_empty() || model.is_empty() || trace.is_empty() {
        return Err(bad());
    }
    Ok((name.into(), model.into(), trace.into(), rate))
}

fn load(a: &PoolArgs) -> Result<Mix> {
    let gpu = hardware::gpu(&a.gpu)?;
    if a.tp == 0 || a.gpus < a.tp || !a.gpus.is_multiple_of(a.tp) {
        bail!(
            "--gpus ({}) must be a positive multiple of --tp ({})",
            a.gpus,
            a.tp
        );
    }
    if !(a.cpu_ms.is_finite() && a.cpu_ms >= 0.0) {
        bail!("--cpu-ms must be a non-negative number");
    }
    if !(a.load_gbps.is_finite() && a.load_gbps > 0.0) {
        bail!("--load-gbps must be above 0");
    }
    if !(a.slo_scale.is_finite() && a.slo_scale > 0.0) {
        bail!("--slo-scale must be above 0");
    }
    let specs: Vec<String> = if a.services.is_empty() {
        vec![
            "chat=llama-2-7b:sample:conv".into(),
            "code=llama-2-13b:sample:code".into(),
        ]
    } else {
        a.services.clone()
    };
    let mut services = Vec::new();
    let mut tagged: Vec<(Request, u16)> = Vec::new();
    let mut refused_tagged: Vec<bool> = Vec::new();
    let mut clipped = Clipped::default();
    for (i, spec) in specs.iter().enumerate() {
        let (name, model_name, trace, rate) = parse_service(spec)?;
        if services.iter().any(|s: &Service| s.name == name) {
            bail!("--service '{spec}': a service called '{name}' is already given");
        }
        let model = hardware::model(&model_name)?;
        hardware::check_tp(&model, a.tp)?;
        // Each service draws its own streams: seed + its position.
        let seed = a.seed.wrapping_add(i as u64);
        let (tname, t) = read_requests(Some(&trace), a.requests, seed)?;
        if t.repeated_prefix_blocks > 0 && !a.quiet {
            eprintln!(
                "note: {tname} shares {} prefix blocks between requests; pools do not cache prefixes, every prompt is prefilled in full",
                t.repeated_prefix_blocks
            );
        }
        let (mut reqs, timed) = (t.requests, t.timed);
        if let Some(n) = a.requests {
            reqs.truncate(n);
        }
        match rate {
            Some(r) => workload::set_arrivals(&mut reqs, r, a.cv, seed)?,
            None if !timed => bail!("--service '{spec}': {tname} has no arrival times; add @RATE"),
            None => {}
        }
        let rule = if a.refuse_long {
            ClipRule::Refuse
        } else {
            ClipRule::Clip
        };
        let (c, refused) = workload::clip(&mut reqs, model.max_ctx, rule);
        clipped.clipped += c.clipped;
        clipped.refused += c.refused;
        if !a.quiet {
            eprintln!(
                "service {name}: {} requests from {tname} on {}",
                reqs.len(),
                model.name
            );
        }
        let iter = IterModel::new(&model, &gpu, a.tp, a.cpu_ms / 1e3, EngineKind::Sequential);
        tagged.extend(reqs.into_iter().map(|r| (r, i as u16)));
        refused_tagged.extend(refused);
        services.push(Service {
            name,
            max_len: model.max_ctx,
            model,
            iter,
            chunk: None,
        });
    }
    // One stream of arrivals, ties in service order (a stable sort keeps trace order).
    let mut order: Vec<usize> = (0..tagged.len()).collect();
    order.sort_by_key(|&i| (tagged[i].0.arrival, tagged[i].1));
    let requests = order.iter().map(|&i| tagged[i].0).collect();
    let service_of = order.iter().map(|&i| tagged[i].1).collect();
    let refused = order.iter().map(|&i| refused_tagged[i]).collect();
    let pool = Pool {
        groups: a.gpus / a.tp,
        gpu,
        tp: a.tp,
        mem: MemoryPlan::default(),
        load_bw: a.load_gbps * 1e9,
    };
    if !a.quiet {
        eprintln!(
            "pool: {} groups of {} x {} ({:.1} GB usable each)",
            pool.groups,
            pool.tp,
            pool.gpu.name,
            pool.usable_bytes() / 1e9
        );
    }
    Ok(Mix {
        pool,
        services,
        requests,
        service_of,
        refused,
        clipped,
    })
}

fn run_one(a: &PoolArgs, m: &Mix, name: &str) -> Result<(LlmSummary, PoolOutcome)> {
    let known: Vec<&str> = POOL_POLICIES.names().collect();
    let params = params_for(&a.set, name, &known)?;
    let mut p = pool::build(name, &params)?;
    let bar = crate::run::progress_bar(
        a.quiet,
        m.requests.len(),
        name,
        "{prefix} [{bar:30}] {pos}/{len} requests done",
    );
    let t0 = Instant::now();
    let out = simulate_pool(
        &m.pool,
        &m.services,
        &m.requests,
        &m.service_of,
        &m.refused,
        p.as_mut(),
        &mut |d, _| bar.set_position(d as u64),
    )
    .map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
    bar.finish_and_clear();
    let wall = t0.elapsed().as_secs_f64();
    let sum = summary(
        name,
        &out,
        &m.services,
        &m.service_of,
        m.clipped,
        a.slo_scale,
    );
    if !a.quiet {
        let names = |placement: &[Vec<u16>]| -> Vec<String> {
            placement
                .iter()
                .map(|g| {
                    g.iter()
                        .map(|&s| m.services[s as usize].name.as_str())
                        .collect::<Vec<_>>()
                        .join("+")
                })
                .collect()
        };
        let placed = names(&out.placement);
        let loads: Vec<String> = out
            .demand
            .iter()
            .map(|d| format!("{} {:.2}", d.name, d.load))
            .collect();
        eprintln!(
            "{name}: groups hold [{}]; estimated load (busy groups) {}",
            placed.join(", "),
            loads.join(", ")
        );
        if let Some((_, last)) = out.replans.last() {
            eprintln!(
                "{name}: re-placed {} times ({} model loads), last to [{}]",
                out.replans.len(),
                out.model_loads,
                names(last).join(", ")
            );
        }
        print_timing(name, out.outcome.events, wall, &sum);
    }
    Ok((sum, out))
}

/// Runs `apiary llm pool`.
pub fn run(a: PoolArgs) -> Result<()> {
    let m = load(&a)?;
    let mut out = Vec::new();
    for p in a.policy.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        out.push(run_one(&a, &m, p)?);
    }
    let sums: Vec<LlmSummary> = out.iter().map(|o| o.0.clone()).collect();
    if a.json {
        let v: Vec<_> = sums.iter().map(LlmSummary::to_json).collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{}", table(&sums));
        println!(
            "(slo: end-to-end latency within {} x the request's latency alone; per service below each policy)",
            a.slo_scale
        );
        for s in &sums {
            println!(
                "{:<18} normalised latency mean {:.3} s/token p99 {:.3}",
                s.policy, s.normalised.mean, s.normalised.p99
            );
            for g in &s.groups {
                println!(
                    "  {:<16} normalised mean {:.3} p99 {:.3}",
                    g.name, g.normalised.mean, g.normalised.p99
                );
            }
        }
    }
    if let Some(html) = &a.html {
        let runs: Vec<(LlmSummary, &LlmOutcome)> =
            out.iter().map(|(s, o)| (s.clone(), &o.outcome)).collect();
        let names: Vec<&str> = m.services.iter().map(|s| s.name.as_str()).collect();
        let page = apiary_llm::html::report(
            &format!("apiary llm pool: {}", names.join(", ")),
            &runs,
            None,
        );
        std::fs::write(html, page).with_context(|| format!("writing {}", html.display()))?;
        if !a.quiet {
            eprintln!("wrote {}", html.display());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_specs_parse_and_bad_ones_say_what_is_expected() {
        assert_eq!(
            parse_service("chat=llama-2-7b:powerlaw:M-M@4.5").unwrap(),
            (
                "chat".into(),
                "llama-2-7b".into(),
                "powerlaw:M-M".into(),
                Some(4.5)
            )
        );
        assert_eq!(
            parse_service("c=m:trace.csv").unwrap(),
            ("c".into(), "m".into(), "trace.csv".into(), None)
        );
        let e = parse_service("chat").unwrap_err().to_string();
        assert!(e.contains("NAME=MODEL:TRACE"), "{e}");
        let e = parse_service("chat=m:t@fast").unwrap_err().to_string();
        assert!(e.contains("rate 'fast'"), "{e}");
    }
}
