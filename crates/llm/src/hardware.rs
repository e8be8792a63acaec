//! The model and GPU tables built into the crate, and what follows from them alone: the
//! KV-cache capacity of one instance.

use crate::LlmError;

const MODELS_CSV: &str = include_str!("../data/models.csv");
const GPUS_CSV: &str = include_str!("../data/hardware.csv");
const FITS_CSV: &str = include_str!("../data/vidur_mlp_linear_fits.csv");

/// Architecture constants of one model (a row of `models.csv`).
#[derive(Clone, Debug, PartialEq)]
pub struct ModelSpec {
    /// Name as the table writes it (`Llama-2-7B`).
    pub name: String,
    /// Transformer blocks.
    pub layers: u32,
    /// Hidden size.
    pub d_model: u32,
    /// Query heads.
    pub heads: u32,
    /// Key/value heads (fewer than `heads` under grouped-query attention).
    pub kv_heads: u32,
    /// Size of one head.
    pub head_dim: u32,
    /// Vocabulary (the LM head's rows).
    pub vocab: u32,
    /// Context length the model was trained for.
    pub max_ctx: u32,
    /// Parameters of one block (GEMM weights only).
    pub params_per_layer: f64,
    /// Bytes of all weights in fp16.
    pub weight_bytes: f64,
    /// KV-cache bytes of one token over all layers, fp16, whole model (not per shard).
    pub kv_bytes_per_token: f64,
}

/// Peak figures of one GPU (a row of `hardware.csv`).
#[derive(Clone, Debug, PartialEq)]
pub struct GpuSpec {
    /// Name as the table writes it (`A100-80GB-SXM`).
    pub name: String,
    /// Memory, bytes.
    pub mem_bytes: f64,
    /// Memory bandwidth, bytes/s.
    pub mem_bw: f64,
    /// Dense fp16 FLOP/s.
    pub flops: f64,
    /// Scale-up link bandwidth per direction, bytes/s (tensor-parallel all-reduce).
    pub link_bw: f64,
}

/// Vidur's profiled non-attention time of one block, fitted as
/// `max(floor, intercept + slope * tokens)` milliseconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MlpFit {
    /// Milliseconds at small batches (weight streaming).
    pub floor_ms: f64,
    /// Milliseconds at zero tokens of the linear part.
    pub intercept_ms: f64,
    /// Milliseconds per token of the linear part.
    pub slope_ms: f64,
}

/// Lower-case, without the organisation's and the checkpoint's decorations, so
/// `meta-llama-3-8b`, `Meta-Llama-3-8B` and `llama-3-8b` meet.
fn norm(name: &str) -> String {
    let mut s = name.trim().to_ascii_lowercase();
    if let Some(rest) = s.strip_prefix("meta-") {
        s = rest.to_string();
    }
    for suffix in ["-hf", "-instruct"] {
        if let Some(rest) = s.strip_suffix(suffix) {
            s = rest.to_string();
        }
    }
    s
}

fn rows(csv: &str) -> impl Iterator<Item = Vec<&str>> {
    csv.lines()
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.split(',').map(str::trim).collect())
}

fn num(v: &str) -> f64 {
    // The tables are built in and checked by a test; a bad cell is a build defect.
    v.parse().unwrap_or(f64::NAN)
}

/// Every model in the built-in table.
pub fn models() -> Vec<ModelSpec> {
    rows(MODELS_CSV)
        .map(|c| ModelSpec {
            name: c[0].to_string(),
            layers: num(c[2]) as u32,
            d_model: num(c[3]) as u32,
            heads: num(c[4]) as u32,
            kv_heads: num(c[5]) as u32,
            head_dim: num(c[6]) as u32,
            vocab: num(c[9]) as u32,
            max_ctx: num(c[10]) as u32,
            params_per_layer: num(c[11]) * 1e6,
            weight_bytes: num(c[13]) * 1e9,
            kv_bytes_per_token: num(c[14]),
        })
        .collect()
}

/// Every GPU in the built-in table.
pub fn gpus() -> Vec<GpuSpec> {
    rows(GPUS_CSV)
        .map(|c| GpuSpec {
            name: c[0].to_string(),
            mem_bytes: num(c[1]) * 1e9,
            mem_bw: num(c[2]) * 1e9,
            flops: num(c[3]) * 1e12,
            link_bw: num(c[5]) * 1e9,
        })
        .collect()
}

/// The model called `name` (case and `-hf`/`meta-` decorations ignored).
pub fn model(name: &str) -> Result<ModelSpec, LlmError> {
    let all = models();
    let want = norm(name);
    all.iter()
        .find(|m| norm(&m.name) == want)
        .cloned()
        .ok_or_else(|| LlmError::Unknown {
            what: "model",
            name: name.to_string(),
            known: all
                .iter()
                .map(|m| m.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        })
}

/// Short names for the GPUs most runs mean.
const GPU_ALIASES: [(&str, &str); 3] = [
    ("a100", "A100-80GB-SXM"),
    ("h100", "H100-80GB-SXM"),
    ("h200", "H200-141GB-SXM"),
];

/// The GPU called `name` (case ignored; `A100`, `H100` and `H200` mean the SXM parts).
pub fn gpu(name: &str) -> Result<GpuSpec, LlmError> {
    let all = gpus();
    let lower = name.trim().to_ascii_lowercase();
    let want = GPU_ALIASES
        .iter()
        .find(|(a, _)| *a == lower)
        .map_or(lower.clone(), |(_, full)| full.to_ascii_lowercase());
    all.iter()
        .find(|g| g.name.to_ascii_lowercase() == want)
        .cloned()
        .ok_or_else(|| LlmError::Unknown {
            what: "GPU",
            name: name.to_string(),
            known: all
                .iter()
                .map(|g| g.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        })
}

/// Vidur's fit for `model` on `gpu` at tensor-parallel degree `tp`, where Vidur
/// profiled that triple (A100-80GB and H100-80GB SXM nodes only). LLaMA-7B has
/// Llama-2-7B's shapes, so it shares its profile.
pub fn mlp_fit(model: &ModelSpec, gpu: &GpuSpec, tp: u32) -> Option<MlpFit> {
    let device = match gpu.name.as_str() {
        "A100-80GB-SXM" => "a100",
        "H100-80GB-SXM" => "h100",
        _ => return None,
    };
    let mut want = norm(&model.name);
    if want == "llama-7b" {
        want = "llama-2-7b".into();
    }
    rows(FITS_CSV)
        .find(|c| c[0] == device && norm(c[1]) == want && num(c[2]) as u32 == tp)
        .map(|c| MlpFit {
            floor_ms: num(c[4]),
            slope_ms: num(c[5]),
            intercept_ms: num(c[6]),
        })
}

/// How much of each GPU the engine may use and what it keeps back, as vLLM sizes its
/// KV cache.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MemoryPlan {
    /// `gpu_memory_utilization` (vLLM's default 0.9).
    pub utilisation: f64,
    /// Bytes per GPU kept for activations at the largest batch (about 0.9 GiB for
    /// 7B-class models, which gives Llumnix's 13,616-token LLaMA-7B instance on an A10).
    pub activation_reserve: f64,
}

impl Default for MemoryPlan {
    fn default() -> Self {
        MemoryPlan {
            utilisation: 0.9,
            activation_reserve: 0.9 * (1u64 << 30) as f64,
        }
    }
}

/// Whether `model` splits over `tp` GPUs as vLLM splits it: every GPU takes the same
/// number of query heads, and key/value heads are split evenly or, when there are fewer
/// of them than GPUs, each replicated on an equal share of the GPUs.
pub fn check_tp(model: &ModelSpec, tp: u32) -> Result<(), LlmError> {
    let bad = |message: String| {
        Err(LlmError::Invalid {
            what: "--tp",
            message,
        })
    };
    if tp == 0 {
        return bad("must be at least 1".into());
    }
    if !model.heads.is_multiple_of(tp) {
        return bad(format!(
            "{tp}: {} has {} attention heads, which do not split evenly over {tp} GPUs",
            model.name, model.heads
        ));
    }
    let kv = model.kv_heads;
    if (kv >= tp && !kv.is_multiple_of(tp)) || (kv < tp && !tp.is_multiple_of(kv)) {
        return bad(format!(
            "{tp}: {} has {kv} key/value heads, which neither split evenly over {tp} GPUs nor replicate evenly on them",
            model.name
        ));
    }
    Ok(())
}

/// KV-cache blocks of `block_size` tokens one instance of `model` on `tp` GPUs holds.
pub fn kv_blocks(
    model: &ModelSpec,
    gpu: &GpuSpec,
    tp: u32,
    mem: MemoryPlan,
    block_size: u32,
) -> Result<u32, LlmError> {
    let tp_f = f64::from(tp);
    let left =
        tp_f * (gpu.mem_bytes * mem.utilisation - mem.activation_reserve) - model.weight_bytes;
    let tokens = left / model.kv_bytes_per_token;
    let blocks = (tokens / f64::from(block_size)).floor();
    if blocks < 1.0 {
        return Err(LlmError::DoesNotFit {
            model: model.name.clone(),
            gpu: gpu.name.clone(),
            tp,
            weights_gb: model.weight_bytes / 1e9,
            usable_gb: tp_f * (gpu.mem_bytes * mem.utilisation - mem.activation_reserve) / 1e9,
        });
    }
    Ok(blocks.min(f64::from(u32::MAX)) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tensor_parallelism_splits_heads_evenly() {
        let m = model("Llama-2-70B").unwrap();
        assert_eq!((m.heads, m.kv_heads), (64, 8));
        for tp in [1, 2, 4, 8, 16] {
            check_tp(&m, tp).unwrap();
        }
        let e = check_tp(&m, 3).unwrap_err().to_string();
        assert_eq!(
            e,
            "--tp: 3: Llama-2-70B has 64 attention heads, which do not split evenly over 3 GPUs"
        );
        assert!(check_tp(&m, 0).is_err());
        // 64 heads over 32 GPUs split, but 8 key/value heads replicate 4 times: fine.
        check_tp(&m, 32).unwrap();
    }

    #[test]
    fn tables_parse_completely() {
        let ms = models();
        assert_eq!(ms.len(), 11);
        for m in &ms {
            assert!(m.layers > 0 && m.heads > 0 && m.head_dim > 0, "{m:?}");
            assert!(
                m.weight_bytes.is_finite() && m.kv_bytes_per_token > 0.0,
                "{m:?}"
            );
            let kv = 2.0 * 2.0 * f64::from(m.layers * m.kv_heads * m.head_dim);
            assert_eq!(kv, m.kv_bytes_per_token, "{}", m.name);
        }
        let gs = gpus();
        assert_eq!(gs.len(), 11);
        assert!(
            gs.iter()
                .all(|g| g.flops > 0.0 && g.mem_bw > 0.0 && g.link_bw > 0.0)
        );
        assert!(rows(FITS_CSV).all(|c| c[4..7].iter().all(|v| num(v).is_finite())));
    }

    #[test]
    fn names_resolve_loosely_and_unknown_ones_list_the_table() {
        assert_eq!(model("llama-2-7b").unwrap().name, "Llama-2-7B");
        assert_eq!(model("meta-llama-3-8b").unwrap().name, "Llama-3-8B");
        assert_eq!(gpu("a10").unwrap().name, "A10");
        assert_eq!(gpu("A100").unwrap().name, "A100-80GB-SXM");
        let e = model("gpt-5").unwrap_err().to_string();
        assert!(e.contains("gpt-5") && e.contains("Llama-2-70B"), "{e}");
    }

    #[test]
    fn llumnix_llama_7b_on_a10_holds_about_851_blocks() {
        let m = model("llama-7b").unwrap();
        let g = gpu("A10").unwrap();
        let b = kv_blocks(&m, &g, 1, MemoryPlan::default(), 16).unwrap();
        // Llumnix reports 13,616 tokens = 851 blocks of 16.
        assert!((848..=854).contains(&b), "{b}");
        let e = kv_blocks(
            &model("llama-2-70b").unwrap(),
            &g,
            1,
            MemoryPlan::default(),
            16,
        );
        assert!(e.unwrap_err().to_string().contains("does not fit"));
    }

    #[test]
    fn vidur_fits_cover_the_profiled_triples_only() {
        let a100 = gpu("a100").unwrap();
        let f = mlp_fit(&model("Llama-2-7B").unwrap(), &a100, 1).unwrap();
        assert_eq!(f.floor_ms, 0.2844);
        assert!(mlp_fit(&model("llama-7b").unwrap(), &a100, 1).is_some());
        assert!(mlp_fit(&model("Llama-2-7B").unwrap(), &gpu("a10").unwrap(), 1).is_none());
        assert!(mlp_fit(&model("Qwen2-7B").unwrap(), &a100, 1).is_none());
    }
}
