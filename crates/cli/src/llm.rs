//! `apiary llm`: simulate and compare cluster schedulers for LLM inference.

use crate::llm_input::{params_for, print_timing, read_requests};
use anyhow::{Result, bail};
use apiary_llm::engine::{Cluster, LlmOutcome};
use apiary_llm::hardware::{self, MemoryPlan};
use apiary_llm::metrics::{LlmSummary, Slo, table};
use apiary_llm::policy::{self, POLICIES};
use apiary_llm::setup;
use apiary_llm::workload::{Clipped, Request};
use clap::{Args, Subcommand};
use std::path::PathBuf;
use std::time::Instant;

/// `apiary llm` subcommands.
#[derive(Subcommand)]
pub enum LlmCmd {
    /// Replay requests on a cluster of inference instances under one policy.
    Simulate(LlmArgs),
    /// Run several policies on one workload; print a table and write an HTML report.
    Compare {
        #[command(flatten)]
        run: LlmArgs,
        /// Folder for summary.json, POLICY-requests.csv and report.html (an earlier
        /// comparison's files there are replaced, and the run says so).
        #[arg(long, short = 'o', default_value = "llm-compare")]
        out: PathBuf,
        /// Repeat over seeds 0..N (arrivals, and synthetic lengths, drawn anew) and
        /// report means with 95 % intervals and seed-paired ratios against the first
        /// policy; DIR gets seeds.json.
        #[arg(long, value_name = "N")]
        seeds: Option<u64>,
    },
    /// Several services sharing one GPU pool (SeaLLM's setting): compare the pool
    /// policies on a mix of services.
    Pool(crate::llm_pool::PoolArgs),
    /// The migration micro-benchmark (Llumnix §6.2): one request per length moved
    /// between two idle instances by live migration, against blocking copy and
    /// recompute.
    Migration(MigrationArgs),
    /// Where one engine iteration's time goes under the latency model, part by part.
    Iteration(crate::llm_iter::IterArgs),
    /// DistServe's placement search: the split of a GPU budget into prefill and decode
    /// pools, each with its own tensor-parallel degree, that serves the most requests
    /// per second within the SLO.
    Place(crate::llm_place::PlaceArgs),
    /// List the cluster schedulers and their parameters.
    Policies,
    /// List the built-in models and GPUs, and what an instance of each holds.
    Models,
}

/// What to run.
#[derive(Args, Clone)]
pub struct LlmArgs {
    /// Trace file (Azure LLM 2023 CSV, ShareGPT lengths CSV, Mooncake JSONL),
    /// `powerlaw:IN-OUT` with IN, OUT in S, M, L (Llumnix's means 128, 256, 512) or 1024,
    /// `shared-prefix:G:U:SYS:Q:OUT` (inference-perf's workload: G system prompts of SYS
    /// tokens, U users each, questions of Q tokens, answers of OUT), or `sample:conv` /
    /// `sample:code` (committed samples of the Azure traces). Default: `sample:conv`.
    #[arg(long, short)]
    trace: Option<String>,
    /// Policy, or a comma-separated list for `compare`.
    #[arg(long, short, default_value = "llumnix")]
    policy: String,
    /// Model (see `apiary llm models`), or a model file (`.toml`, docs/llm.md).
    #[arg(long, default_value = "llama-2-7b")]
    model: String,
    /// GPU (see `apiary llm models`), or a GPU file (`.toml`, docs/llm.md).
    #[arg(long, default_value = "A10")]
    gpu: String,
    /// Instances at the start.
    #[arg(long, default_value_t = 16)]
    instances: u32,
    /// Tensor-parallel GPUs per instance.
    #[arg(long, default_value_t = 1)]
    tp: u32,
    /// Replace arrivals by a Poisson (cv 1), Gamma or constant (cv 0) process at this
    /// many requests/s.
    #[arg(long)]
    rate: Option<f64>,
    /// Coefficient of variation of the inter-arrival gaps (with --rate; 0 sends at a
    /// constant rate).
    #[arg(long, default_value_t = 1.0)]
    cv: f64,
    /// Mark this share of requests high-priority, drawn at random with --seed (Llumnix
    /// §6.5 uses 0.1).
    #[arg(long, value_name = "SHARE")]
    high_priority: Option<f64>,
    /// Use the first N requests (synthetic workloads: generate N; default 10,000).
    #[arg(long, short = 'n')]
    requests: Option<usize>,
    /// Longest request (prompt + output) in tokens; default the model's context.
    #[arg(long)]
    max_len: Option<u32>,
    /// Refuse requests longer than --max-len instead of clipping them.
    #[arg(long)]
    refuse_long: bool,
    /// Chunked prefill with this token budget per iteration (default: vLLM v0's
    /// prefill-first iterations).
    #[arg(long)]
    chunk: Option<u32>,
    /// Most requests running at once on an instance (vLLM's --max-num-seqs; default
    /// 256, vLLM v0's).
    #[arg(long)]
    max_seqs: Option<u32>,
    /// Engine: vllm (v0, parts in sequence), vllm-v1 (vLLM V1 as calibrated on H100,
    /// chunked prefill of 2,048 tokens unless --chunk) or nanoflow (compute, memory and
    /// network overlap).
    #[arg(long, default_value = "vllm")]
    engine: String,
    /// CPU time per iteration, ms (scheduling, sampling; 10-25 for 2023-era engines).
    /// Default: 5, or 0.5 under vllm-v1 (calibrated, docs/llm.md).
    #[arg(long)]
    cpu_ms: Option<f64>,
    /// KV blocks per instance (default: what the GPU memory leaves, as vLLM sizes it).
    #[arg(long)]
    kv_blocks: Option<u32>,
    /// Automatic prefix caching (vLLM's APC): a prompt skips the prefill of leading
    /// blocks its instance has cached, named by the trace's block hashes (Mooncake's
    /// `hash_ids`).
    #[arg(long)]
    prefix_cache: bool,
    /// Host memory per GPU, GiB, that a preempted decoding request's KV cache is copied
    /// to instead of being recomputed (vLLM's --swap-space with --preemption-mode swap);
    /// 0, the default, recomputes.
    #[arg(long, default_value_t = 0.0)]
    swap_space: f64,
    /// Host-GPU copy rate per GPU for swapping, GB/s (25: PCIe 4.0 x16; 50 for 5.0).
    #[arg(long, default_value_t = apiary_llm::setup::SWAP_GBPS)]
    swap_gbps: f64,
    /// Disaggregated prefill and decode (DistServe, Splitwise): P prefill and D decode
    /// instances instead of --instances; --tp is a decode instance's GPUs.
    #[arg(long, value_name = "P:D")]
    disagg: Option<String>,
    /// GPUs of a prefill instance under --disagg (--tp when absent).
    #[arg(long)]
    prefill_tp: Option<u32>,
    /// Link a KV cache crosses from a prefill to a decode instance, or from the host tier
    /// to an instance, GB/s per GPU (25: a 200 Gb/s NIC).
    #[arg(long, default_value_t = apiary_llm::setup::KV_GBPS)]
    kv_gbps: f64,
    /// With --prefix-cache: the cluster's host-memory tier of prompt blocks, GB in all
    /// (Mooncake's DRAM pool); a prompt loads blocks from it over --kv-gbps instead of
    /// computing them.
    #[arg(long, default_value_t = 0.0)]
    host_cache_gb: f64,
    /// TTFT bound of the SLO, seconds.
    #[arg(long, default_value_t = 2.0)]
    slo_ttft: f64,
    /// TPOT bound of the SLO, seconds.
    #[arg(long, default_value_t = 0.2)]
    slo_tpot: f64,
    /// Seed of the generators.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Policy parameter `key=value` (see `apiary llm policies`), or `policy.key=value`
    /// for one policy of a compare; repeatable.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Print the summary as JSON (one object; an array for `compare`).
    #[arg(long)]
    json: bool,
    /// No progress or timing lines.
    #[arg(long, short)]
    quiet: bool,
}

/// What the migration micro-benchmark moves.
#[derive(Args, Clone)]
pub struct MigrationArgs {
    /// Model (see `apiary llm models`), or a model file (`.toml`, docs/llm.md).
    #[arg(long, default_value = "llama-7b")]
    model: String,
    /// GPU (see `apiary llm models`), or a GPU file (`.toml`, docs/llm.md).
    #[arg(long, default_value = "A10")]
    gpu: String,
    /// Tensor-parallel GPUs per instance.
    #[arg(long, default_value_t = 1)]
    tp: u32,
    /// Request lengths (prompt tokens), comma-separated.
    #[arg(long, default_value = "1024,2048,4096,8192", value_delimiter = ',')]
    lengths: Vec<u32>,
    /// Llumnix migration parameter `key=value` (bandwidth_gbs, stage_overhead_ms,
    /// last_stage_blocks, max_stages; see `apiary llm policies`); repeatable.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Print the points as a JSON array.
    #[arg(long)]
    json: bool,
}

fn migration_bench(a: &MigrationArgs) -> Result<()> {
    let model = hardware::model(&a.model)?;
    let gpu = hardware::gpu(&a.gpu)?;
    hardware::check_tp(&model, a.tp)?;
    let params = params_for(&a.set, "llumnix", &["llumnix"])?;
    let llumnix = policy::build("llumnix", &params)?;
    let (Some(cfg), Some(interval)) = (llumnix.migration(), llumnix.interval()) else {
        bail!("--set migration=false leaves nothing to measure");
    };
    let mut points = Vec::new();
    for &len in &a.lengths {
        points.push(apiary_llm::migration::migration_point(
            &model, &gpu, a.tp, len, cfg, interval,
        )?);
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&points)?);
        return Ok(());
    }
    println!(
        "{} on {} x {}, migration at {:.0} Gb/s, {} ms per stage, last stage at {} blocks",
        model.name,
        a.tp,
        gpu.name,
        cfg.bandwidth * 8.0 / 1e9,
        cfg.stage_overhead as f64 / 1e3,
        cfg.last_stage_blocks
    );
    println!(
        "{:>7} {:>14} {:>7} {:>11} {:>14} {:>13} {:>15}",
        "tokens",
        "live downtime",
        "stages",
        "live total",
        "blocking copy",
        "recompute",
        "recompute/live"
    );
    for p in &points {
        println!(
            "{:>7} {:>11.1} ms {:>7} {:>8.1} ms {:>11.1} ms {:>10.1} ms {:>14.1}x",
            p.tokens,
            p.live_downtime_s * 1e3,
            p.stages,
            p.live_total_s * 1e3,
            p.blocking_copy_s * 1e3,
            p.recompute_s * 1e3,
            p.recompute_s / p.live_downtime_s.max(1e-9)
        );
    }
    Ok(())
}

/// The record of a run with these flags, for summary.json and report.html.
fn record(a: &LlmArgs, requests: usize) -> Result<apiary_report::Record> {
    use sha2::Digest;
    let sha256 = crate::llm_input::trace_bytes(a.trace.as_deref())?
        .map_or("- (synthetic, from the seed)".into(), |b| {
            crate::run::hex(&sha2::Sha256::digest(&b))
        });
    let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    let options = [
        ("policy", a.policy.clone()),
        ("model", a.model.clone()),
        ("gpu", a.gpu.clone()),
        ("instances", a.instances.to_string()),
        ("tp", a.tp.to_string()),
        ("rate", opt(a.rate.map(|r| r.to_string()))),
        ("cv", a.cv.to_string()),
        ("high-priority", opt(a.high_priority.map(|r| r.to_string()))),
        ("requests", opt(a.requests.map(|r| r.to_string()))),
        ("max-len", opt(a.max_len.map(|r| r.to_string()))),
        ("refuse-long", a.refuse_long.to_string()),
        ("chunk", opt(a.chunk.map(|r| r.to_string()))),
        ("engine", a.engine.clone()),
        ("cpu-ms", opt(a.cpu_ms.map(|r| r.to_string()))),
        ("kv-blocks", opt(a.kv_blocks.map(|r| r.to_string()))),
        ("prefix-cache", a.prefix_cache.to_string()),
        ("slo-ttft", a.slo_ttft.to_string()),
        ("slo-tpot", a.slo_tpot.to_string()),
        ("set", a.set.join(" ")),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    Ok(apiary_report::Record {
        command: std::env::args().collect(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        commit: env!("APIARY_GIT_COMMIT").to_string(),
        date: crate::run::made_date(),
        trace: apiary_report::TraceRecord {
            path: a.trace.clone().unwrap_or_else(|| "sample:conv".into()),
            sha256,
            jobs: requests,
        },
        cluster: format!("{} x {} on {} x {}", a.instances, a.model, a.tp, a.gpu),
        options,
        seed: a.seed,
    })
}

impl LlmArgs {
    /// The trace spec, the number of requests asked for and the seed.
    pub(crate) fn workload_spec(&self) -> (Option<&str>, Option<usize>, u64) {
        (self.trace.as_deref(), self.requests, self.seed)
    }

    /// The SLO attainment counts against.
    pub(crate) fn slo(&self) -> Slo {
        Slo {
            ttft_s: self.slo_ttft,
            tpot_s: self.slo_tpot,
        }
    }

    /// Whether pools were given by hand (`--disagg`, `--prefill-tp`).
    pub(crate) fn pools_given(&self) -> bool {
        self.disagg.is_some() || self.prefill_tp.is_some()
    }

    /// Whether the summary is wanted as JSON.
    pub(crate) fn json(&self) -> bool {
        self.json
    }
}

/// Runs an `apiary llm` subcommand.
pub fn run(cmd: LlmCmd) -> Result<()> {
    match cmd {
        LlmCmd::Place(a) => crate::llm_place::run(&a),
        LlmCmd::Simulate(a) => {
            if a.policy.contains(',') {
                bail!("simulate runs one policy; use `apiary llm compare` for a list");
            }
            let w = Workload::load(&a)?;
            let (sum, _) = run_policy(&a, &w, &a.policy)?;
            if a.json {
                println!("{}", serde_json::to_string_pretty(&sum.to_json())?);
            } else {
                print!("{}", table(std::slice::from_ref(&sum)));
                print_details(&sum);
            }
            Ok(())
        }
        LlmCmd::Compare { run, .. } if run.disagg.is_some() => bail!(
            "--disagg schedules its pools itself: run `apiary llm simulate --disagg P:D`, and compare it with a colocated run of the same GPUs"
        ),
        LlmCmd::Compare {
            run,
            out: dir,
            seeds: Some(n),
        } => compare_seeds(&run, &dir, n),
        LlmCmd::Compare {
            run,
            out: dir,
            seeds: None,
        } => {
            let w = Workload::load(&run)?;
            let mut out = Vec::new();
            for p in run
                .policy
                .split(',')
                .map(str::trim)
                .filter(|p| !p.is_empty())
            {
                out.push(run_policy(&run, &w, p)?);
            }
            let sums: Vec<LlmSummary> = out.iter().map(|o| o.0.clone()).collect();
            if run.json {
                let v: Vec<_> = sums.iter().map(LlmSummary::to_json).collect();
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                print!("{}", table(&sums));
            }
            let runs: Vec<(LlmSummary, &LlmOutcome)> =
                out.iter().map(|(s, o)| (s.clone(), o)).collect();
            let record = record(&run, w.requests.len())?;
            crate::llm_out::write(&dir, &w.name, &record, &runs, run.quiet)?;
            Ok(())
        }
        LlmCmd::Pool(a) => crate::llm_pool::run(a),
        LlmCmd::Migration(a) => migration_bench(&a),
        LlmCmd::Iteration(a) => crate::llm_iter::run(&a),
        LlmCmd::Policies => {
            let print = |name: &str, about: &str, params: &[apiary_policy::ParamSpec]| {
                println!("{name:<16} {about}");
                for p in params {
                    println!(
                        "    {:<20} {:<10} {}",
                        p.key,
                        format!("[{}]", p.default),
                        p.about
                    );
                }
            };
            println!("instance schedulers (apiary llm simulate / compare):");
            for s in POLICIES.specs {
                print(s.name, s.about, s.params);
            }
            println!("pool schedulers, several services on shared GPUs (apiary llm pool):");
            for s in apiary_llm::policy::pool::POOL_POLICIES.specs {
                print(s.name, s.about, s.params);
            }
            Ok(())
        }
        LlmCmd::Models => {
            let gpus = hardware::gpus();
            println!(
                "models (KV blocks of 16 tokens per instance at TP 1 on: {}):",
                gpus.iter()
                    .map(|g| g.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            for m in hardware::models() {
                let blocks: Vec<String> = gpus
                    .iter()
                    .map(|g| {
                        hardware::kv_blocks(&m, g, 1, MemoryPlan::default(), 16)
                            .map_or("-".into(), |b| b.to_string())
                    })
                    .collect();
                println!(
                    "  {:<16} {:>3} layers, ctx {:>6}, {:>6.1} GB weights, {:>5.0} KiB KV/token; {}",
                    m.name,
                    m.layers,
                    m.max_ctx,
                    m.weight_bytes / 1e9,
                    m.kv_bytes_per_token / 1024.0,
                    blocks.join(" ")
                );
            }
            println!("gpus:");
            for g in gpus {
                println!(
                    "  {:<16} {:>4.0} GB, {:>5.0} GB/s, {:>4.0} TFLOPS, link {:>3.0} GB/s",
                    g.name,
                    g.mem_bytes / 1e9,
                    g.mem_bw / 1e9,
                    g.flops / 1e12,
                    g.link_bw / 1e9
                );
            }
            Ok(())
        }
    }
}

struct Workload {
    name: String,
    requests: Vec<Request>,
    refused: Vec<bool>,
    clipped: Clipped,
    cluster: Cluster,
    disagg: Option<apiary_llm::disagg::DisaggCluster>,
}

impl Workload {
    fn load(a: &LlmArgs) -> Result<Workload> {
        let (spec, n, seed) = a.workload_spec();
        let (name, trace) = read_requests(spec, n, seed)?;
        let s = setup::prepare(&a.options()?, &name, trace)?;
        if !a.quiet {
            for n in &s.notes {
                eprintln!("note: {n}");
            }
            eprintln!("{}", s.about);
        }
        Ok(Workload {
            name,
            requests: s.requests,
            refused: s.refused,
            clipped: s.clipped,
            cluster: s.cluster,
            disagg: s.disagg,
        })
    }
}

impl LlmArgs {
    /// The options that shape the run.
    pub(crate) fn options(&self) -> Result<setup::Options> {
        let disagg = match &self.disagg {
            None => None,
            Some(t) => {
                let parsed = t
                    .split_once(':')
                    .and_then(|(p, d)| Some((p.trim().parse().ok()?, d.trim().parse().ok()?)));
                match parsed {
                    Some(pd) => Some(pd),
                    None => {
                        bail!("--disagg: '{t}' is not P:D (prefill and decode instances, e.g. 2:6)")
                    }
                }
            }
        };
        if self.prefill_tp.is_some() && disagg.is_none() {
            bail!("--prefill-tp is for --disagg's prefill instances");
        }
        Ok(setup::Options {
            model: self.model.clone(),
            gpu: self.gpu.clone(),
            instances: self.instances,
            tp: self.tp,
            rate: self.rate,
            cv: self.cv,
            high_priority: self.high_priority,
            requests: self.requests,
            max_len: self.max_len,
            refuse_long: self.refuse_long,
            chunk: self.chunk,
            max_seqs: self.max_seqs,
            engine: self.engine.clone(),
            cpu_ms: self.cpu_ms,
            kv_blocks: self.kv_blocks,
            prefix_cache: self.prefix_cache,
            swap_gib: self.swap_space,
            swap_gbps: self.swap_gbps,
            disagg,
            prefill_tp: self.prefill_tp,
            kv_gbps: self.kv_gbps,
            host_cache_gb: self.host_cache_gb,
            seed: self.seed,
        })
    }
}

/// `compare --seeds N`: every policy on seeds 0..N, as means with intervals.
fn compare_seeds(run: &LlmArgs, dir: &std::path::Path, n: u64) -> Result<()> {
    if n == 0 {
        bail!("--seeds must be at least 1");
    }
    let policies: Vec<String> = (run.policy.split(','))
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(String::from)
        .collect();
    let mut runs: Vec<Vec<LlmSummary>> = vec![Vec::new(); policies.len()];
    let mut requests = 0;
    for seed in 0..n {
        let mut a = run.clone();
        a.seed = seed;
        a.quiet = run.quiet || seed > 0;
        let w = Workload::load(&a)?;
        requests = w.requests.len();
        for (i, p) in policies.iter().enumerate() {
            runs[i].push(run_policy(&a, &w, p)?.0);
        }
    }
    let cells = crate::llm_seeds::cells(&runs);
    print!("{}", crate::llm_seeds::table(&policies, &cells, n as usize));
    std::fs::create_dir_all(dir)?;
    let path = dir.join("seeds.json");
    let json = serde_json::json!({
        "record": record(run, requests)?,
        "seeds": n,
        "policies": crate::llm_seeds::json(&policies, &cells)?,
    });
    if path.exists() {
        eprintln!("note: replacing {}", path.display());
    }
    std::fs::write(&path, serde_json::to_string_pretty(&json)? + "\n")?;
    if !run.quiet {
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

fn run_policy(a: &LlmArgs, w: &Workload, name: &str) -> Result<(LlmSummary, LlmOutcome)> {
    let known: Vec<&str> = POLICIES.names().collect();
    let label = match &w.disagg {
        Some(d) => format!("disagg {}:{}", d.prefill, d.decode),
        None => name.to_string(),
    };
    let bar = crate::run::progress_bar(
        a.quiet,
        w.requests.len(),
        &label,
        "{prefix} [{bar:30}] {pos}/{len} requests done",
    );
    let t0 = Instant::now();
    let mut progress = |d: usize, _: usize| bar.set_position(d as u64);
    let out = match &w.disagg {
        Some(d) => apiary_llm::disagg::simulate(d, &w.requests, &w.refused, &mut progress)?,
        None => {
            let params = params_for(&a.set, name, &known)?;
            let mut p = policy::build(name, &params)?;
            apiary_llm::simulate(
                &w.cluster,
                &w.requests,
                &w.refused,
                p.as_mut(),
                &mut progress,
            )?
        }
    };
    bar.finish_and_clear();
    let wall = t0.elapsed().as_secs_f64();
    let sum = LlmSummary::of(&label, &out, w.clipped, a.slo());
    if !a.quiet {
        print_timing(&label, out.events, wall, &sum);
    }
    Ok((sum, out))
}

fn print_details(s: &LlmSummary) {
    println!(
        "TTFT  mean {:.3} s  p50 {:.3}  p90 {:.3}  p99 {:.3}",
        s.ttft.mean, s.ttft.p50, s.ttft.p90, s.ttft.p99
    );
    println!(
        "TPOT  mean {:.1} ms  p50 {:.1}  p90 {:.1}  p99 {:.1}",
        s.tpot.mean * 1e3,
        s.tpot.p50 * 1e3,
        s.tpot.p90 * 1e3,
        s.tpot.p99 * 1e3
    );
    println!(
        "E2E   mean {:.2} s  p99 {:.2};  normalised mean {:.3} s/token  p99 {:.3}",
        s.e2e.mean, s.e2e.p99, s.normalised.mean, s.normalised.p99
    );
    println!(
        "SLO (TTFT <= {} s, TPOT <= {} s): {:.1} %",
        s.slo_ttft_s,
        s.slo_tpot_s,
        s.slo_attainment * 100.0
    );
    println!(
        "preemptions {} ({} requests), loss mean {:.3} s;  migrations {} (aborted {}), downtime mean {:.1} ms",
        s.preemptions,
        s.preempted_requests,
        s.preemption_loss_mean_s,
        s.migrations,
        s.aborted_migrations,
        s.migration_downtime_mean_s * 1e3
    );
    if s.kv_transfers > 0 {
        println!(
            "KV caches sent from prefill to decode instances {} times, {:.1} ms each on average after {:.1} ms waiting for a link",
            s.kv_transfers,
            s.kv_transfer_mean_s * 1e3,
            s.kv_wait_mean_s * 1e3
        );
    }
    if s.swaps.outs > 0 {
        println!(
            "swapped to host memory {} times, back {} ({} blocks out), copies {:.3} s of iterations",
            s.swaps.outs, s.swaps.ins, s.swaps.blocks_out, s.swaps.secs
        );
    }
    if s.aborted_migrations > 0 {
        let why: Vec<String> = (s.aborts.iter())
            .filter(|(_, n)| *n > 0)
            .map(|(w, n)| format!("{} {n}", w.replace('_', " ")))
            .collect();
        println!(
            "aborted migrations: {}; they copied {} KV blocks and held the link {:.1} s for nothing",
            why.join(", "),
            s.aborted_blocks,
            s.aborted_secs
        );
    }
    println!(
        "instances {:.2} on average, GPU busy {:.1} %, {:.0} output tokens/s ({:.0} in + out), span {:.1} s;  clipped {}, refused {}",
        s.instances_mean,
        s.gpu_util * 100.0,
        s.tokens_per_s,
        s.total_tokens_per_s,
        s.span_s,
        s.clipped,
        s.refused
    );
    if let Some(p) = &s.prefix {
        println!(
            "prefix cache: {:.1} % of prompt tokens served from cache ({} of {}), {} blocks evicted",
            p.hit_rate() * 100.0,
            p.hit_tokens,
            p.prompt_tokens,
            p.evictions
        );
        if p.host_hit_tokens > 0 || p.host_evictions > 0 {
            let share = |t: u64| t as f64 / p.prompt_tokens.max(1) as f64 * 100.0;
            println!(
                "  by tier: GPU {:.1} %, host {:.1} % ({} tokens loaded in {:.3} s of iterations, {} host blocks evicted)",
                share(p.hit_tokens - p.host_hit_tokens),
                share(p.host_hit_tokens),
                p.host_hit_tokens,
                p.host_load_secs,
                p.host_evictions
            );
        }
    }
    for g in &s.groups {
        println!(
            "{:<7} {} requests: TTFT mean {:.3} s p99 {:.3};  TPOT mean {:.1} ms p99 {:.1};  E2E mean {:.2} s p99 {:.2};  SLO {:.1} %",
            g.name,
            g.requests,
            g.ttft.mean,
            g.ttft.p99,
            g.tpot.mean * 1e3,
            g.tpot.p99 * 1e3,
            g.e2e.mean,
            g.e2e.p99,
            g.slo_attainment * 100.0
        );
    }
}
