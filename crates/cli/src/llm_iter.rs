//! `apiary llm iteration`: where one engine iteration's time goes under the latency
//! model, part by part, for a batch given on the command line; the tool for checking
//! the model against a measured engine before fitting anything.

use anyhow::Result;
use apiary_llm::hardware;
use apiary_llm::latency::{Batch, EngineKind, IterModel, LinearSource};
use clap::Args;

/// The batch and the instance.
#[derive(Args, Clone)]
pub struct IterArgs {
    /// Model (see `apiary llm models`).
    #[arg(long, default_value = "llama-7b")]
    model: String,
    /// GPU (see `apiary llm models`).
    #[arg(long, default_value = "A10")]
    gpu: String,
    /// Tensor-parallel GPUs per instance.
    #[arg(long, default_value_t = 1)]
    tp: u32,
    /// Engine whose parts to show: vllm (v0) or vllm-v1.
    #[arg(long, default_value = "vllm")]
    engine: String,
    /// CPU time per iteration, ms (default: the engine's, 5 or 0.5).
    #[arg(long)]
    cpu_ms: Option<f64>,
    /// Requests decoding one token each.
    #[arg(long, default_value_t = 0)]
    decode: u64,
    /// Their mean context, tokens (prompt and output so far).
    #[arg(long, default_value_t = 1024)]
    context: u64,
    /// Prompt tokens prefilled in the iteration (one request's, from an empty cache).
    #[arg(long, default_value_t = 0)]
    prefill: u64,
    /// Print the parts as JSON (seconds).
    #[arg(long)]
    json: bool,
}

/// Prints the parts of one iteration.
pub fn run(a: &IterArgs) -> Result<()> {
    let model = hardware::model(&a.model)?;
    let gpu = hardware::gpu(&a.gpu)?;
    hardware::check_tp(&model, a.tp)?;
    let kind = apiary_llm::setup::engine(&a.engine)?;
    if kind == EngineKind::Overlapped {
        anyhow::bail!(
            "--engine nanoflow overlaps its parts, which this command lists in sequence: give vllm or vllm-v1"
        );
    }
    let cpu_ms = a.cpu_ms.unwrap_or(apiary_llm::setup::default_cpu_ms(kind));
    if !(cpu_ms.is_finite() && cpu_ms >= 0.0) {
        anyhow::bail!("--cpu-ms must be a non-negative number");
    }
    if a.decode + a.prefill == 0 {
        anyhow::bail!("give --decode N and/or --prefill TOKENS: an empty batch takes no time");
    }
    let m = IterModel::new(&model, &gpu, a.tp, cpu_ms / 1e3, kind);
    let p = a.prefill as f64;
    let b = Batch {
        prefill_tokens: a.prefill,
        prefill_pairs: p * (p + 1.0) / 2.0,
        decode_seqs: a.decode,
        decode_ctx: a.decode * a.context,
        logits: a.decode + u64::from(a.prefill > 0),
    };
    let parts = m.parts(&b);
    if a.json {
        println!("{}", serde_json::to_string_pretty(&parts)?);
        return Ok(());
    }
    let src = match m.linear_source() {
        LinearSource::Profiled(_) => "Vidur's profile",
        LinearSource::Roofline => "the roofline",
    };
    println!(
        "{} on {} x {}: {} decoding at {} tokens of context, {} prompt tokens; linear layers from {src}",
        model.name, a.tp, gpu.name, a.decode, a.context, a.prefill
    );
    let total = parts.total();
    for (name, v) in [
        ("linear layers", parts.linear),
        ("decode attention", parts.decode_attention),
        ("prefill attention", parts.prefill_attention),
        ("all-reduce", parts.allreduce),
        ("LM head", parts.head),
        ("CPU", parts.cpu),
    ] {
        println!(
            "  {name:<18} {:>9.3} ms  {:>5.1} %",
            v * 1e3,
            100.0 * v / total
        );
    }
    println!("  {:<18} {:>9.3} ms", "iteration", total * 1e3);
    // The floor no engine beats: every weight read once per iteration.
    let floor = model.weight_bytes / (gpu.mem_bw * f64::from(a.tp));
    println!(
        "  (reading the weights once at peak bandwidth takes {:.3} ms)",
        floor * 1e3
    );
    Ok(())
}
