//! The model and GPU tables built into the crate, and what follows from them alone: the
//! KV-cache capacity of one instance.

use crate::LlmError;

const MODELS_CSV: &str = include_str!("../data/models.csv");
const GPUS_CSV: &str = include_str!("../data/hardware.csv");
const FITS_CSV: &str = include_str!("../data/vidur_mlp_linear_fits.csv");
/// Built-in models the table's columns cannot describe (mixtures of experts), as
/// model files.
const MODEL_FILES: [(&str, &str); 1] = [(
    "data/mixtral-8x7b.toml",
    include_str!("../data/mixtral-8x7b.toml"),
)];

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
    /// KV-cache bytes of one token over all layers, whole model (not per shard).
    pub kv_bytes_per_token: f64,
    /// Bytes of one weight: 2 for FP16 and BF16, 1 for FP8.
    pub bytes_per_param: f64,
    /// Mixture of experts: experts per block, the experts each token is routed to, and
    /// the parameters of one expert's MLP. `None` for a dense model. `params_per_layer`
    /// counts what one token passes through (attention and its routed experts), and
    /// `weight_bytes` every expert.
    pub moe: Option<Moe>,
    /// Sliding-window attention's window, tokens (`None`: full attention).
    pub sliding_window: Option<u32>,
}

/// A mixture-of-experts block's experts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Moe {
    /// Experts per block.
    pub experts: u32,
    /// Experts each token is routed to.
    pub active: u32,
    /// Parameters of one expert's MLP.
    pub expert_params: f64,
}

impl Moe {
    /// Experts one block reads for `tokens` tokens, each routed to `active` of the
    /// `experts` uniformly at random: `E (1 - (1 - k/E)^n)`, the expected number that
    /// at least one token picks (`k` for one token, all of them for large batches).
    pub fn touched(&self, tokens: f64) -> f64 {
        let (e, k) = (f64::from(self.experts), f64::from(self.active));
        if tokens <= 0.0 {
            return 0.0;
        }
        (e * (1.0 - (1.0 - k / e).powf(tokens))).max(k)
    }
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

/// Every built-in model: the table's, then the built-in model files'.
pub fn models() -> Vec<ModelSpec> {
    let files = MODEL_FILES
        .iter()
        // Built in and checked by a test; a bad file is a build defect.
        .filter_map(|(path, text)| model_text(path, text).ok());
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
            bytes_per_param: 2.0,
            moe: None,
            // Mistral-7B-v0.1's config.json: a 4,096-token window (the table has no
            // column for it).
            sliding_window: (c[0] == "Mistral-7B-v0.1").then_some(4096),
        })
        .chain(files)
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

/// A model described by a TOML file (`--model FILE.toml`): its shapes, from which its
/// weights and KV cache follow as for the built-in table.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ModelFile {
    name: String,
    layers: u32,
    hidden: u32,
    heads: u32,
    /// Grouped-query attention's key/value heads (`heads` when absent).
    kv_heads: Option<u32>,
    /// `hidden / heads` when absent.
    head_dim: Option<u32>,
    /// The MLP's inner size.
    ffn: u32,
    /// Three MLP matrices (SwiGLU) rather than two.
    #[serde(default = "yes")]
    gated_mlp: bool,
    vocab: u32,
    /// Context length, tokens.
    context: u32,
    /// `fp16` (default), `bf16` or `fp8`, for the weights...
    #[serde(default)]
    dtype: Option<String>,
    /// ... and for the KV cache (the weights' when absent).
    #[serde(default)]
    kv_dtype: Option<String>,
    /// Sliding-window attention's window, tokens.
    sliding_window: Option<u32>,
    /// Mixture of experts: experts per block, each an MLP of `ffn` (none: dense).
    experts: Option<u32>,
    /// With `experts`: the experts each token is routed to.
    active_experts: Option<u32>,
}

fn yes() -> bool {
    true
}

fn file_err(path: &str, message: impl Into<String>) -> LlmError {
    LlmError::Invalid {
        what: "--model",
        message: format!("{path}: {}", message.into()),
    }
}

fn dtype_bytes(path: &str, field: &str, v: Option<&str>) -> Result<f64, LlmError> {
    match v.unwrap_or("fp16") {
        "fp16" | "bf16" => Ok(2.0),
        "fp8" => Ok(1.0),
        other => Err(file_err(
            path,
            format!("{field}: '{other}' is not fp16, bf16 or fp8"),
        )),
    }
}

/// Reads a model file.
fn model_file(path: &str) -> Result<ModelSpec, LlmError> {
    let text = std::fs::read_to_string(path).map_err(|source| LlmError::Io {
        path: path.to_string(),
        source,
    })?;
    model_text(path, &text)
}

/// The experts of a model file, checked.
fn moe_of(path: &str, f: &ModelFile, expert_params: f64) -> Result<Option<Moe>, LlmError> {
    match (f.experts, f.active_experts) {
        (None, None) => Ok(None),
        (Some(e), Some(k)) if e >= 1 && (1..=e).contains(&k) => Ok(Some(Moe {
            experts: e,
            active: k,
            expert_params,
        })),
        (Some(e), Some(k)) => Err(file_err(
            path,
            format!("active_experts: {k} must be 1 to experts ({e})"),
        )),
        (Some(_), None) => Err(file_err(
            path,
            "active_experts: give the experts each token is routed to",
        )),
        (None, Some(_)) => Err(file_err(path, "experts: give the experts per block")),
    }
}

/// A model from the text of a model file (`path` names it in errors).
fn model_text(path: &str, text: &str) -> Result<ModelSpec, LlmError> {
    let f: ModelFile =
        toml::from_str(text).map_err(|e| file_err(path, e.to_string().trim_end()))?;
    if f.sliding_window == Some(0) {
        return Err(file_err(path, "sliding_window: must be at least 1 token"));
    }
    for (field, v) in [
        ("layers", f.layers),
        ("hidden", f.hidden),
        ("heads", f.heads),
        ("ffn", f.ffn),
        ("vocab", f.vocab),
        ("context", f.context),
    ] {
        if v == 0 {
            return Err(file_err(path, format!("{field}: must be at least 1")));
        }
    }
    let kv_heads = f.kv_heads.unwrap_or(f.heads);
    if kv_heads == 0 || !f.heads.is_multiple_of(kv_heads) {
        return Err(file_err(
            path,
            format!("kv_heads: {kv_heads} must divide heads ({})", f.heads),
        ));
    }
    let head_dim = match f.head_dim {
        Some(h) if h > 0 => h,
        Some(_) => return Err(file_err(path, "head_dim: must be at least 1")),
        None if f.hidden.is_multiple_of(f.heads) => f.hidden / f.heads,
        None => {
            return Err(file_err(
                path,
                "head_dim: hidden does not split over heads; give it",
            ));
        }
    };
    let w = dtype_bytes(path, "dtype", f.dtype.as_deref())?;
    let kv = dtype_bytes(
        path,
        "kv_dtype",
        f.kv_dtype.as_deref().or(f.dtype.as_deref()),
    )?;
    let (d, q, kvd) = (
        f64::from(f.hidden),
        f64::from(f.heads * head_dim),
        f64::from(kv_heads * head_dim),
    );
    let mlp = if f.gated_mlp { 3.0 } else { 2.0 } * d * f64::from(f.ffn);
    let moe = moe_of(path, &f, mlp)?;
    let attention = 2.0 * d * q + 2.0 * d * kvd;
    // What a token passes through, and what the block stores: every expert (the
    // router's d x E weights are left out, under 0.01 % of a block).
    let (active, stored) = match moe {
        Some(m) => (f64::from(m.active) * mlp, f64::from(m.experts) * mlp),
        None => (mlp, mlp),
    };
    let params_per_layer = attention + active;
    let params = f64::from(f.layers) * (attention + stored) + 2.0 * f64::from(f.vocab) * d;
    Ok(ModelSpec {
        name: f.name,
        layers: f.layers,
        d_model: f.hidden,
        heads: f.heads,
        kv_heads,
        head_dim,
        vocab: f.vocab,
        max_ctx: f.context,
        params_per_layer,
        weight_bytes: params * w,
        kv_bytes_per_token: 2.0 * f64::from(f.layers) * kvd * kv,
        bytes_per_param: w,
        moe,
        sliding_window: f.sliding_window,
    })
}

/// A GPU described by a TOML file (`--gpu FILE.toml`).
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct GpuFile {
    name: String,
    memory_gb: f64,
    bandwidth_gbs: f64,
    /// Dense FP16/BF16 tensor TFLOP/s.
    tflops: f64,
    /// Scale-up link bandwidth per direction, GB/s.
    link_gbs: f64,
}

fn gpu_file(path: &str) -> Result<GpuSpec, LlmError> {
    let bad = |message: String| LlmError::Invalid {
        what: "--gpu",
        message: format!("{path}: {message}"),
    };
    let text = std::fs::read_to_string(path).map_err(|source| LlmError::Io {
        path: path.to_string(),
        source,
    })?;
    let f: GpuFile =
        toml::from_str(&text).map_err(|e| bad(e.to_string().trim_end().to_string()))?;
    for (field, v) in [
        ("memory_gb", f.memory_gb),
        ("bandwidth_gbs", f.bandwidth_gbs),
        ("tflops", f.tflops),
        ("link_gbs", f.link_gbs),
    ] {
        if !(v.is_finite() && v > 0.0 && v < 1e9) {
            return Err(bad(format!("{field}: {v} must be above 0")));
        }
    }
    Ok(GpuSpec {
        name: f.name,
        mem_bytes: f.memory_gb * 1e9,
        mem_bw: f.bandwidth_gbs * 1e9,
        flops: f.tflops * 1e12,
        link_bw: f.link_gbs * 1e9,
    })
}

/// The model called `name` (case and `-hf`/`meta-` decorations ignored), or read from
/// `name` when it is a `.toml` file.
pub fn model(name: &str) -> Result<ModelSpec, LlmError> {
    if name.ends_with(".toml") {
        return model_file(name);
    }
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

/// The GPU called `name` (case ignored; `A100`, `H100` and `H200` mean the SXM parts),
/// or read from `name` when it is a `.toml` file.
pub fn gpu(name: &str) -> Result<GpuSpec, LlmError> {
    if name.ends_with(".toml") {
        return gpu_file(name);
    }
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
    // Vidur profiled 16-bit weights.
    if model.bytes_per_param != 2.0 {
        return None;
    }
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
        assert_eq!(ms.len(), 13 + MODEL_FILES.len());
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
        assert_eq!(gs.len(), 12);
        assert!(
            gs.iter()
                .all(|g| g.flops > 0.0 && g.mem_bw > 0.0 && g.link_bw > 0.0)
        );
        assert!(rows(FITS_CSV).all(|c| c[4..7].iter().all(|v| num(v).is_finite())));
    }

    #[test]
    fn llama_3_1_rows_follow_from_their_shapes() {
        // Per block: q and o projections d x d, k and v d x (8 x 128), a gated MLP of
        // three d x ffn matrices; weights add the embedding and the LM head.
        for (name, d, ffn, layers, gb) in [
            ("Llama-3.1-8B", 4096.0, 14336.0, 32.0, 16.1),
            ("Llama-3.1-70B", 8192.0, 28672.0, 80.0, 141.1),
        ] {
            let m = model(name).unwrap();
            let per_block = 2.0 * d * d + 2.0 * d * 1024.0 + 3.0 * d * ffn;
            assert!(
                (m.params_per_layer - per_block).abs() / per_block < 1e-3,
                "{name}"
            );
            let weights = 2.0 * (layers * per_block + 2.0 * 128_256.0 * d);
            assert!(
                (weights / 1e9 - gb).abs() < 0.1,
                "{name}: {}",
                weights / 1e9
            );
            assert_eq!(m.max_ctx, 131_072);
        }
    }

    fn write(name: &str, text: &str) -> String {
        let p = std::env::temp_dir().join(format!("apiary-hw-{}-{name}", std::process::id()));
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    }

    #[test]
    fn models_and_gpus_come_from_files() {
        const LLAMA31_8B: &str = "name = \"mine\"\nlayers = 32\nhidden = 4096\nheads = 32\nkv_heads = 8\nffn = 14336\nvocab = 128256\ncontext = 131072\n";
        let f = model(&write("m.toml", LLAMA31_8B)).unwrap();
        let b = model("Llama-3.1-8B").unwrap();
        assert_eq!(
            (f.head_dim, f.kv_bytes_per_token, f.bytes_per_param),
            (128, b.kv_bytes_per_token, 2.0)
        );
        assert!((f.params_per_layer - b.params_per_layer).abs() / b.params_per_layer < 1e-3);
        assert!((f.weight_bytes - b.weight_bytes).abs() / b.weight_bytes < 0.01);
        // FP8 weights and cache: half the bytes, the same FLOPs, no fp16 profile.
        let q = model(&write("q.toml", &format!("{LLAMA31_8B}dtype = \"fp8\"\n"))).unwrap();
        assert_eq!(
            (q.weight_bytes * 2.0, q.kv_bytes_per_token * 2.0),
            (f.weight_bytes, f.kv_bytes_per_token)
        );
        let h100 = gpu("H100").unwrap();
        assert!(mlp_fit(&q, &h100, 1).is_none());
        // A window is read; a window of nothing is refused, naming the field; so are
        // unknown keys.
        let m = model(&write(
            "w.toml",
            &format!("{LLAMA31_8B}sliding_window = 4096\n"),
        ))
        .unwrap();
        assert_eq!(m.sliding_window, Some(4096));
        assert_eq!(model("mistral-7b-v0.1").unwrap().sliding_window, Some(4096));
        let e = model(&write(
            "w0.toml",
            &format!("{LLAMA31_8B}sliding_window = 0\n"),
        ))
        .unwrap_err()
        .to_string();
        assert!(e.contains("w0.toml") && e.contains("sliding_window"), "{e}");
        let e = model(&write("u.toml", &format!("{LLAMA31_8B}hiden = 1\n")))
            .unwrap_err()
            .to_string();
        assert!(e.contains("hiden"), "{e}");
        let g = gpu(&write(
            "g.toml",
            "name = \"X1\"\nmemory_gb = 96\nbandwidth_gbs = 4000\ntflops = 1000\nlink_gbs = 400\n",
        ))
        .unwrap();
        assert_eq!(
            (g.mem_bytes, g.mem_bw, g.flops, g.link_bw),
            (96e9, 4e12, 1e15, 400e9)
        );
        let e = gpu(&write(
            "z.toml",
            "name = \"X\"\nmemory_gb = 0\nbandwidth_gbs = 1\ntflops = 1\nlink_gbs = 1\n",
        ))
        .unwrap_err()
        .to_string();
        assert!(e.contains("memory_gb"), "{e}");
    }

    #[test]
    fn mixtral_stores_every_expert_and_a_token_passes_two() {
        let m = model("mixtral-8x7b").unwrap();
        let moe = m.moe.unwrap();
        assert_eq!((moe.experts, moe.active), (8, 2));
        // Per block: attention 2 x 4096^2 + 2 x 4096 x 1024 = 41.9 M; one expert
        // 3 x 4096 x 14336 = 176.2 M. Mistral AI: 46.7 B in all, 12.9 B active.
        let attention = 2.0 * 4096.0 * 4096.0 + 2.0 * 4096.0 * 1024.0;
        let expert = 3.0 * 4096.0 * 14336.0;
        assert_eq!(moe.expert_params, expert);
        assert_eq!(m.params_per_layer, attention + 2.0 * expert);
        let embeddings = 2.0 * 32000.0 * 4096.0;
        let total = 32.0 * (attention + 8.0 * expert) + embeddings;
        let active = 32.0 * m.params_per_layer + embeddings;
        assert!((total / 1e9 - 46.7).abs() < 0.05, "{total}");
        assert!((active / 1e9 - 12.9).abs() < 0.05, "{active}");
        assert_eq!(m.weight_bytes, 2.0 * total);
        // One token reads its 2 experts; 2 tokens 8 (1 - (3/4)^2) = 3.5; many, all 8.
        assert_eq!(moe.touched(1.0), 2.0);
        assert_eq!(moe.touched(2.0), 3.5);
        assert!((moe.touched(256.0) - 8.0).abs() < 1e-9);
        // Experts without the active count, or more active than there are: refused.
        let base = "name = \"m\"\nlayers = 2\nhidden = 64\nheads = 4\nffn = 128\nvocab = 10\ncontext = 64\n";
        for (extra, field) in [
            ("experts = 8\n", "active_experts"),
            ("experts = 8\nactive_experts = 9\n", "active_experts"),
            ("active_experts = 2\n", "experts"),
        ] {
            let e = model(&write("e.toml", &format!("{base}{extra}")))
                .unwrap_err()
                .to_string();
            assert!(e.contains(field), "{extra}: {e}");
        }
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
