//! From options to a runnable cluster and request list: what `apiary llm simulate`,
//! `compare` and `apiary sweep`'s LLM cells all do before a run, in one place so that a
//! sweep cell runs exactly what the command line runs. The options are the command
//! line's; what a person should hear about (requests clipped or too big, a context
//! stretched) comes back as notes for the caller to print.

use crate::LlmError;
use crate::disagg::DisaggCluster;
use crate::engine::Cluster;
use crate::hardware::{self, MemoryPlan};
use crate::latency::{EngineKind, IterModel, LinearSource};
use crate::replica::ReplicaConfig;
use crate::workload::{self, ClipRule, Clipped, Request, Trace};
use std::sync::Arc;

/// How a run is set up (the options of `apiary llm simulate` that shape the run).
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    /// Model name or `.toml` file.
    pub model: String,
    /// GPU name or `.toml` file.
    pub gpu: String,
    /// Instances.
    pub instances: u32,
    /// Tensor-parallel GPUs per instance.
    pub tp: u32,
    /// Arrivals at this rate (requests/s) instead of the trace's times.
    pub rate: Option<f64>,
    /// Their coefficient of variation (1: Poisson).
    pub cv: f64,
    /// Share of requests at high priority.
    pub high_priority: Option<f64>,
    /// The first this many requests only.
    pub requests: Option<usize>,
    /// Longest prompt plus output (the model's context when `None`).
    pub max_len: Option<u32>,
    /// Refuse longer requests instead of clipping them.
    pub refuse_long: bool,
    /// Chunked prefill's token budget.
    pub chunk: Option<u32>,
    /// Most requests running at once on an instance (vLLM's `--max-num-seqs`; 256
    /// when `None`, vLLM v0's default).
    pub max_seqs: Option<u32>,
    /// `vllm`, `vllm-v1` or `nanoflow` ([`engine`]).
    pub engine: String,
    /// CPU time per iteration, ms (`None`: the engine's, [`default_cpu_ms`]).
    pub cpu_ms: Option<f64>,
    /// KV blocks per instance (from memory when `None`).
    pub kv_blocks: Option<u32>,
    /// Prefix caching (the trace must name its prompts' blocks).
    pub prefix_cache: bool,
    /// Host memory per GPU that preempted requests swap their KV cache to, GiB (vLLM's
    /// `--swap-space` with `--preemption-mode swap`); 0 preempts by recomputation.
    pub swap_gib: f64,
    /// Host-GPU copy rate per GPU, GB/s.
    pub swap_gbps: f64,
    /// Disaggregated serving: prefill and decode instances (replacing `instances`).
    pub disagg: Option<(u32, u32)>,
    /// Tensor-parallel GPUs of a prefill instance (`tp` when `None`).
    pub prefill_tp: Option<u32>,
    /// The link a KV cache crosses from a prefill to a decode instance, or from the host
    /// tier to an instance, GB/s per GPU.
    pub kv_gbps: f64,
    /// With prefix caching: the cluster's host-memory tier of prompt blocks, GB in all
    /// (Mooncake's DRAM pool); 0 for none.
    pub host_cache_gb: f64,
    /// The seed of arrivals and priorities.
    pub seed: u64,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            model: "llama-2-7b".into(),
            gpu: "A10".into(),
            instances: 16,
            tp: 1,
            rate: None,
            cv: 1.0,
            high_priority: None,
            requests: None,
            max_len: None,
            refuse_long: false,
            chunk: None,
            max_seqs: None,
            engine: "vllm".into(),
            cpu_ms: None,
            kv_blocks: None,
            prefix_cache: false,
            swap_gib: 0.0,
            swap_gbps: SWAP_GBPS,
            disagg: None,
            prefill_tp: None,
            kv_gbps: KV_GBPS,
            host_cache_gb: 0.0,
            seed: 0,
        }
    }
}

/// A run ready to simulate.
pub struct Setup {
    /// The requests, arrivals set.
    pub requests: Vec<Request>,
    /// Which of them are refused (too long under `refuse_long`).
    pub refused: Vec<bool>,
    /// What the context rule did.
    pub clipped: Clipped,
    /// The cluster.
    pub cluster: Cluster,
    /// What the caller should tell a person, one line each, in order.
    pub notes: Vec<String>,
    /// One line on what runs: requests, instances, model, GPUs, blocks, and where the
    /// linear layers' times come from.
    pub about: String,
    /// With `disagg`: the prefill and decode pools, which run instead of `cluster`.
    pub disagg: Option<DisaggCluster>,
}

/// PCIe 4.0 x16's sustained host-to-GPU copy rate, GB/s (of its 32 GB/s peak).
pub const SWAP_GBPS: f64 = 25.0;
/// A 200 Gb/s network interface per GPU (InfiniBand HDR, as DistServe's and
/// Splitwise's clusters have), GB/s.
pub const KV_GBPS: f64 = 25.0;

/// vLLM V1's token budget per iteration when none is given (`max_num_batched_tokens`).
pub const V1_BATCHED_TOKENS: u32 = 2048;

/// The engine called `name`: `vllm`, `vllm-v1` or `nanoflow`.
pub fn engine(name: &str) -> Result<EngineKind, LlmError> {
    match name {
        "vllm" => Ok(EngineKind::Sequential),
        "vllm-v1" => Ok(EngineKind::VllmV1),
        "nanoflow" => Ok(EngineKind::Overlapped),
        e => Err(bad(
            "--engine",
            format!("must be vllm, vllm-v1 or nanoflow (got '{e}')"),
        )),
    }
}

/// CPU time per iteration an engine spends unless told (`--cpu-ms`): 5 ms for vLLM v0
/// and NanoFlow (as every figure before vLLM V1 was run), vLLM V1's calibrated
/// [`CPU_V1_MS`](crate::latency::CPU_V1_MS).
pub fn default_cpu_ms(kind: EngineKind) -> f64 {
    match kind {
        EngineKind::VllmV1 => crate::latency::CPU_V1_MS,
        EngineKind::Sequential | EngineKind::Overlapped => 5.0,
    }
}

fn bad(what: &'static str, message: impl Into<String>) -> LlmError {
    LlmError::Invalid {
        what,
        message: message.into(),
    }
}

/// Sets up `trace` (called `name` in notes) under `o`.
pub fn prepare(o: &Options, name: &str, trace: Trace) -> Result<Setup, LlmError> {
    let model = hardware::model(&o.model)?;
    let gpu = hardware::gpu(&o.gpu)?;
    hardware::check_tp(&model, o.tp)?;
    let mut notes = Vec::new();
    match o.max_len {
        Some(0) => return Err(bad("--max-len", "must be at least 1 token")),
        // Llumnix's own set-up runs LLaMA-7B (2k) at 12k: allowed, but said.
        Some(m) if m > model.max_ctx => notes.push(format!(
            "--max-len {m} is beyond {}'s context of {} tokens: longer requests are modelled past what the model was trained for",
            model.name, model.max_ctx
        )),
        _ => {}
    }
    let Trace {
        mut requests,
        timed,
        repeated_prefix_blocks,
        prefixes,
    } = trace;
    if o.prefix_cache && prefixes.hashes.is_empty() {
        return Err(bad(
            "--prefix-cache",
            format!(
                "needs a trace that names its prompts' blocks (Mooncake's hash_ids); {name} does not"
            ),
        ));
    }
    if repeated_prefix_blocks > 0 && !o.prefix_cache {
        notes.push(format!(
            "{name} shares {repeated_prefix_blocks} prefix blocks between requests; every prompt is prefilled in full unless --prefix-cache is given"
        ));
    }
    if let Some(n) = o.requests {
        requests.truncate(n);
    }
    match o.rate {
        Some(rate) => workload::set_arrivals(&mut requests, rate, o.cv, o.seed)?,
        None if !timed => {
            return Err(bad(
                "--rate",
                format!(
                    "{name} has no arrival times: give --rate (requests/s) and optionally --cv"
                ),
            ));
        }
        None => {}
    }
    if let Some(share) = o.high_priority {
        workload::set_priorities(&mut requests, share, o.seed)?;
    }
    let max_len = o.max_len.unwrap_or(model.max_ctx);
    let rule = if o.refuse_long {
        ClipRule::Refuse
    } else {
        ClipRule::Clip
    };
    let (clipped, refused) = workload::clip(&mut requests, max_len, rule);
    let blocks = match o.kv_blocks {
        Some(b) if b > 0 => b,
        Some(_) => return Err(bad("--kv-blocks", "must be at least 1")),
        None => hardware::kv_blocks(&model, &gpu, o.tp, MemoryPlan::default(), 16)?,
    };
    let mut replica = ReplicaConfig::vllm(blocks, max_len);
    replica.window = model.sliding_window;
    if let Some(w) = replica.window
        && o.prefix_cache
    {
        // vLLM v0 refuses prefix caching with a sliding window too.
        notes.push(format!(
            "{}'s {w}-token sliding window is not modelled with prefix caching: it runs with full attention",
            model.name
        ));
        replica.window = None;
    }
    let fits = replica.fits_tokens();
    let too_big = (requests.iter().zip(&refused))
        .filter(|(r, no)| !**no && u64::from(r.input) + u64::from(r.output) > fits)
        .count();
    if too_big > 0 {
        notes.push(format!(
            "{too_big} requests need more KV cache than an instance holds ({fits} tokens with vLLM's watermark free) and are refused (the summary's 'refused')"
        ));
    }
    let kind = engine(&o.engine)?;
    // vLLM V1 always chunks prefills, by its max_num_batched_tokens (2,048 unless set).
    let chunk = match (o.chunk, kind) {
        (None, EngineKind::VllmV1) => Some(V1_BATCHED_TOKENS),
        (c, _) => c,
    };
    if let Some(c) = chunk {
        if c == 0 {
            return Err(bad("--chunk", "must be at least 1 token"));
        }
        replica.chunk = Some(c);
    }
    match o.max_seqs {
        Some(0) => return Err(bad("--max-seqs", "must be at least 1")),
        Some(m) => replica.max_seqs = m,
        None => {}
    }
    if !(o.swap_gib.is_finite() && (0.0..=1e6).contains(&o.swap_gib)) {
        return Err(bad("--swap-space", "must be 0 to 10^6 GiB"));
    }
    if !(o.swap_gbps.is_finite() && o.swap_gbps > 0.0 && o.swap_gbps <= 1e6) {
        return Err(bad("--swap-gbps", "must be above 0 and at most 10^6 GB/s"));
    }
    // Each GPU holds, and copies, its shard of every block.
    let block_bytes_per_gpu =
        f64::from(replica.block_size) * model.kv_bytes_per_token / f64::from(o.tp);
    replica.swap_blocks =
        (o.swap_gib * (1u64 << 30) as f64 / block_bytes_per_gpu).min(f64::from(u32::MAX)) as u32;
    replica.swap_ns_per_block = (block_bytes_per_gpu / (o.swap_gbps * 1e9) * 1e9).ceil() as u64;
    let cpu_ms = o.cpu_ms.unwrap_or(default_cpu_ms(kind));
    if !(cpu_ms.is_finite() && cpu_ms >= 0.0) {
        return Err(bad("--cpu-ms", "must be a non-negative number"));
    }
    if !(o.kv_gbps.is_finite() && o.kv_gbps > 0.0 && o.kv_gbps <= 1e6) {
        return Err(bad("--kv-gbps", "must be above 0 and at most 10^6 GB/s"));
    }
    let iter = IterModel::new(&model, &gpu, o.tp, cpu_ms / 1e3, kind);
    let host = host_tier(o, &model, &prefixes, o.tp)?;
    // A disaggregated run's prefill instances load from the tier at their own width.
    let prefill_host = host_tier(o, &model, &prefixes, o.prefill_tp.unwrap_or(o.tp))?;
    let prefixes = o.prefix_cache.then(|| Arc::new(prefixes));
    let disagg = match o.disagg {
        None => None,
        Some((p, d)) => Some(DisaggCluster {
            prefix_cache: prefixes.clone(),
            host_tier: prefill_host,
            ..disaggregated(o, &model, &gpu, kind, (p, d), replica, &iter)?
        }),
    };
    let src = match iter.linear_source() {
        LinearSource::Profiled(_) => "Vidur's profile",
        LinearSource::Roofline => "the roofline (no Vidur profile for this GPU, model and TP)",
    };
    let about = format!(
        "{} requests from {name}; {} x {} on {} x {} ({} KV blocks of 16 each), linear layers from {src}",
        requests.len(),
        o.instances,
        model.name,
        o.tp,
        gpu.name,
        blocks
    );
    let about = match &disagg {
        None => about,
        Some(dc) => format!(
            "{} requests from {name}; {} on {}: {} prefill instances of {} GPUs ({} KV blocks each) and {} decode instances of {} ({} blocks each), KV sent at {} GB/s per GPU; linear layers from {src}",
            requests.len(),
            model.name,
            gpu.name,
            dc.prefill,
            o.prefill_tp.unwrap_or(o.tp),
            dc.prefill_replica.total_blocks,
            dc.decode,
            o.tp,
            blocks,
            o.kv_gbps
        ),
    };
    if clipped.clipped + clipped.refused > 0 {
        notes.push(format!(
            "{} requests longer than {max_len} tokens were {}",
            clipped.clipped + clipped.refused,
            if o.refuse_long {
                "refused"
            } else {
                "clipped (prompt cut to max-len - 1, output to what is left)"
            }
        ));
    }
    Ok(Setup {
        requests,
        refused,
        clipped,
        cluster: Cluster {
            instances: o.instances,
            replica,
            model: iter,
            kv_bytes_per_token_per_gpu: model.kv_bytes_per_token / f64::from(o.tp),
            host_tier: host,
            prefix_cache: prefixes,
        },
        notes,
        about,
        disagg,
    })
}

/// The host tier `--host-cache-gb` asks for: whole prompt blocks of the trace's size,
/// each of an instance's `tp` GPUs loading its shard over `--kv-gbps`.
fn host_tier(
    o: &Options,
    model: &hardware::ModelSpec,
    prefixes: &crate::workload::Prefixes,
    tp: u32,
) -> Result<Option<crate::prefix::HostTierConfig>, LlmError> {
    if o.host_cache_gb == 0.0 {
        return Ok(None);
    }
    if !(o.host_cache_gb.is_finite() && o.host_cache_gb > 0.0 && o.host_cache_gb <= 1e9) {
        return Err(bad("--host-cache-gb", "must be 0 to 10^9 GB"));
    }
    if !o.prefix_cache {
        return Err(bad(
            "--host-cache-gb",
            "holds prompt blocks for prefix caching: give --prefix-cache too",
        ));
    }
    let block_bytes = f64::from(prefixes.block_tokens) * model.kv_bytes_per_token;
    Ok(Some(crate::prefix::HostTierConfig {
        blocks: (o.host_cache_gb * 1e9 / block_bytes) as u64,
        ns_per_token: model.kv_bytes_per_token / f64::from(tp) / (o.kv_gbps * 1e9) * 1e9,
    }))
}

/// The pools of a disaggregated run: `p` prefill instances of `prefill_tp` GPUs (vLLM's
/// whole-prompt iterations) and `d` decode instances as `decode` and `decode_model` set
/// them up; no prefix caches or host tier (the caller adds the prefill pool's).
fn disaggregated(
    o: &Options,
    model: &hardware::ModelSpec,
    gpu: &hardware::GpuSpec,
    kind: EngineKind,
    (p, d): (u32, u32),
    decode: ReplicaConfig,
    decode_model: &IterModel,
) -> Result<DisaggCluster, LlmError> {
    if p == 0 || d == 0 {
        return Err(bad(
            "--disagg",
            "give P:D with at least one prefill and one decode instance",
        ));
    }
    let ptp = o.prefill_tp.unwrap_or(o.tp);
    hardware::check_tp(model, ptp)?;
    let blocks = match o.kv_blocks {
        Some(b) => b,
        None => hardware::kv_blocks(model, gpu, ptp, MemoryPlan::default(), 16)?,
    };
    let prefill_replica = ReplicaConfig {
        // DistServe's prefill instances run whole prompts, and never decode.
        chunk: None,
        swap_blocks: 0,
        prefill_only: true,
        // A prompt past the window keeps the window's blocks, as in a colocated
        // instance.
        window: decode.window,
        ..ReplicaConfig::vllm(blocks, decode.max_batched_tokens)
    };
    Ok(DisaggCluster {
        prefill: p,
        decode: d,
        prefill_replica,
        decode_replica: decode,
        prefill_model: IterModel::new(model, gpu, ptp, decode_model.cpu_secs, kind),
        decode_model: decode_model.clone(),
        // Each GPU of the narrower side sends or takes its shard at once.
        transfer_secs_per_token: model.kv_bytes_per_token
            / (o.kv_gbps * 1e9 * f64::from(ptp.min(o.tp))),
        prefix_cache: None,
        host_tier: None,
    })
}
