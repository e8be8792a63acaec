//! How long one engine iteration takes: the replica latency model.
//!
//! An iteration's time is the sum of its parts, per block of the model:
//! token-parallel GEMMs (Vidur's profiled fit where Vidur profiled the GPU, model and
//! tensor-parallel degree, else the roofline), decode attention (reading each decode
//! request's KV cache), prefill attention (quadratic in the chunk), two all-reduces per
//! block under tensor parallelism, then the LM head and a per-iteration CPU cost. A
//! NanoFlow-style engine overlaps the compute-, memory- and network-bound parts, so
//! its iteration takes the longest of them instead of their sum. Each part is also
//! held to the hardware's floor (FLOPs over peak FLOP/s, bytes over peak bandwidth), so
//! no instance can run faster than the GPU could.

use crate::hardware::{GpuSpec, MlpFit, ModelSpec, Moe, mlp_fit};

/// Share of peak bandwidth weight streaming sustains (Vidur's A100 Llama-2-7B floor:
/// 0.28 ms per block against 0.20 ms ideal).
pub const E_WEIGHTS: f64 = 0.70;
/// Share of peak FLOP/s large GEMMs sustain (Vidur, A100, Llama-2-7B at 4,096 tokens).
pub const E_GEMM: f64 = 0.65;
/// Share of peak bandwidth decode attention sustains (FlashInfer on A30: 0.42 at batch
/// 8, 0.56 at batch 32).
pub const E_ATTN_BW: f64 = 0.5;
/// Share of peak FLOP/s prefill attention sustains (0.2 for 4k chunks on A30, 0.5-0.7
/// for FlashAttention-2 on A100 long sequences).
pub const E_ATTN_FLOPS: f64 = 0.5;
/// Share of the scale-up link's bandwidth a ring all-reduce sustains, as algorithm
/// bandwidth `link * e * n / (2 (n - 1))`: 64 MB in 0.40/0.58/0.68 ms on 2/4/8
/// A100s, as Vidur's NCCL tables measure.
pub const E_ALLREDUCE: f64 = 0.55;
/// Fixed cost of one all-reduce: NCCL latency plus the launch (Vidur's 0.02 ms).
pub const ALLREDUCE_ALPHA_S: f64 = 0.05e-3;
/// Share of peak FLOP/s a NanoFlow-style overlapped engine sustains once compute
/// bound: NanoFlow reaches 68.5 % of its optimum on Llama-2-70B and 59-72 % across
/// the models it ported.
pub const E_NANOFLOW: f64 = 0.70;

/// The work of one iteration, summed over its requests.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Batch {
    /// Prompt (or chunk) tokens computed.
    pub prefill_tokens: u64,
    /// Query-key pairs of the prefill attention: `sum c * before + c (c + 1) / 2` over
    /// chunks of `c` tokens after `before` cached ones.
    pub prefill_pairs: f64,
    /// Requests decoding one token each.
    pub decode_seqs: u64,
    /// KV tokens the decode requests attend to (their context, new token included).
    pub decode_ctx: u64,
    /// Sequences producing a token this iteration (the LM head's rows).
    pub logits: u64,
}

impl Batch {
    /// Tokens through the token-parallel layers.
    pub fn tokens(&self) -> u64 {
        self.prefill_tokens + self.decode_seqs
    }
}

/// Which iteration an instance runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EngineKind {
    /// vLLM-style (v0, 2023-24): the parts run one after another.
    Sequential,
    /// NanoFlow-style: compute-, memory- and network-bound parts overlap.
    Overlapped,
    /// vLLM V1 (2025) with CUDA graphs: the parts in sequence, but a GEMM streams its
    /// weights while it computes (the profile's floor or its compute slope, whichever
    /// is longer, not their sum), decode attention at [`E_ATTN_BW_V1`] and all-reduces
    /// at [`ALLREDUCE_ALPHA_V1_S`]. Calibrated on measured vLLM runs on H100 (docs/llm.md).
    VllmV1,
}

/// Share of peak bandwidth vLLM V1's decode attention sustains: fitted to the measured
/// vLLM runs of Llama-2-7B on one H100 at 8 and 20 req/s, whose per-token times differ
/// by the KV cache the extra 66 running requests read (docs/llm.md).
pub const E_ATTN_BW_V1: f64 = 0.83;
/// Fixed cost of one all-reduce under vLLM V1: what its custom all-reduce takes inside
/// a CUDA graph on NVLink (10-20 µs), chosen against the measured Llama-2-70B runs on
/// four H100s, the only rows it touches (docs/llm.md).
pub const ALLREDUCE_ALPHA_V1_S: f64 = 0.015e-3;
/// CPU time per iteration vLLM V1 leaves on the critical path (scheduling and
/// sampling, mostly overlapped by its separate engine process): the measured runs'
/// per-token time less the model's GPU time at 8 req/s (docs/llm.md).
pub const CPU_V1_MS: f64 = 0.5;

/// Where the token-parallel time comes from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum LinearSource {
    /// Vidur's profile of this GPU, model and degree.
    Profiled(MlpFit),
    /// The roofline (no profile for this triple).
    Roofline,
}

/// One iteration's time, FLOPs and bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Cost {
    /// Seconds.
    pub secs: f64,
    /// Floating-point operations over all GPUs of the instance.
    pub flops: f64,
    /// Bytes read from GPU memory over all GPUs of the instance.
    pub bytes: f64,
}

/// Where one vLLM-style (sequential) iteration's time goes, seconds over all blocks;
/// the parts sum to its time (to rounding).
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct Parts {
    /// Token-parallel GEMMs (weights streamed, or compute once batches are large).
    pub linear: f64,
    /// Decode attention: reading every decoding request's KV cache.
    pub decode_attention: f64,
    /// Prefill attention, quadratic in the chunk.
    pub prefill_attention: f64,
    /// Two all-reduces per block under tensor parallelism.
    pub allreduce: f64,
    /// The LM head.
    pub head: f64,
    /// CPU time per iteration.
    pub cpu: f64,
}

impl Parts {
    /// Their sum: the iteration's time.
    pub fn total(&self) -> f64 {
        self.linear
            + self.decode_attention
            + self.prefill_attention
            + self.allreduce
            + self.head
            + self.cpu
    }
}

/// The latency model of one instance: a model on `tp` GPUs of one kind.
#[derive(Clone, Debug)]
pub struct IterModel {
    layers: f64,
    tp: f64,
    linear: LinearSource,
    /// Per GPU: weight bytes of one block's shard that every iteration reads (all of
    /// a dense block; attention and the router's share of a mixture of experts).
    layer_weight_bytes: f64,
    /// A mixture of experts' experts, and the bytes of one expert's shard per GPU: an
    /// iteration reads the experts its tokens are routed to.
    experts: Option<(Moe, f64)>,
    /// Per GPU: GEMM FLOPs of one block's shard per token.
    layer_flops_per_token: f64,
    /// Per GPU: KV bytes of one block's shard per token.
    layer_kv_bytes: f64,
    /// Per GPU: attention FLOPs of one block's shard per query-key pair.
    layer_attn_flops_per_pair: f64,
    /// Per GPU: LM head weight bytes (vocabulary split over the degree).
    head_bytes: f64,
    /// Per GPU: LM head FLOPs per sequence producing a token.
    head_flops_per_logit: f64,
    /// Bytes all-reduced per token per call.
    allreduce_bytes_per_token: f64,
    /// Algorithm bandwidth of the all-reduce, bytes/s (infinite at degree 1).
    allreduce_bw: f64,
    gpu_flops: f64,
    gpu_bw: f64,
    /// CPU cost of one iteration (scheduling, sampling, input preparation), seconds.
    pub cpu_secs: f64,
    /// Sequential or overlapped.
    pub kind: EngineKind,
}

impl IterModel {
    /// The model of `model` on `tp` GPUs of kind `gpu`, with `cpu_secs` of CPU time per
    /// iteration.
    pub fn new(
        model: &ModelSpec,
        gpu: &GpuSpec,
        tp: u32,
        cpu_secs: f64,
        kind: EngineKind,
    ) -> IterModel {
        let tpf = f64::from(tp.max(1));
        let linear = mlp_fit(model, gpu, tp).map_or(LinearSource::Roofline, LinearSource::Profiled);
        let allreduce_bw = if tp > 1 {
            gpu.link_bw * E_ALLREDUCE * tpf / (2.0 * (tpf - 1.0))
        } else {
            f64::INFINITY
        };
        IterModel {
            layers: f64::from(model.layers),
            tp: tpf,
            linear,
            layer_weight_bytes: model.bytes_per_param
                * (model.params_per_layer
                    - model
                        .moe
                        .map_or(0.0, |m| f64::from(m.active) * m.expert_params))
                / tpf,
            experts: model
                .moe
                .map(|m| (m, model.bytes_per_param * m.expert_params / tpf)),
            layer_flops_per_token: 2.0 * model.params_per_layer / tpf,
            layer_kv_bytes: model.kv_bytes_per_token / f64::from(model.layers) / tpf,
            layer_attn_flops_per_pair: 4.0 * f64::from(model.heads * model.head_dim) / tpf,
            head_bytes: model.bytes_per_param * f64::from(model.vocab) * f64::from(model.d_model)
                / tpf,
            head_flops_per_logit: 2.0 * f64::from(model.vocab) * f64::from(model.d_model) / tpf,
            allreduce_bytes_per_token: 2.0 * f64::from(model.d_model),
            allreduce_bw,
            gpu_flops: gpu.flops,
            gpu_bw: gpu.mem_bw,
            cpu_secs,
            kind,
        }
    }

    /// Where the token-parallel time comes from.
    pub fn linear_source(&self) -> LinearSource {
        self.linear
    }

    /// Peak FLOP/s of the whole instance.
    pub fn peak_flops(&self) -> f64 {
        self.gpu_flops * self.tp
    }

    /// Peak memory bandwidth of the whole instance, bytes/s.
    pub fn peak_bw(&self) -> f64 {
        self.gpu_bw * self.tp
    }

    /// Where a sequential iteration over `b` spends its time.
    pub fn parts(&self, b: &Batch) -> Parts {
        let p = self.per_block(b);
        Parts {
            linear: self.layers * p.lin,
            decode_attention: self.layers * p.dec,
            prefill_attention: self.layers * p.pf,
            allreduce: self.layers * p.comm,
            head: p.head,
            cpu: self.cpu_secs,
        }
    }

    /// The time, FLOPs and bytes of one iteration over `b`.
    pub fn cost(&self, b: &Batch) -> Cost {
        let p = self.per_block(b);
        let secs = match self.kind {
            // As `parts` splits it; summed per block first, as it always was.
            EngineKind::Sequential | EngineKind::VllmV1 => {
                self.layers * (p.lin + p.dec + p.pf + p.comm) + p.head + self.cpu_secs
            }
            EngineKind::Overlapped => {
                // Compute at NanoFlow's sustained share, memory at the decode-attention
                // and weight-streaming rates, network apart; the CPU work overlaps too
                // (NanoFlow forms the next batch while this one runs).
                let compute = p.flops / self.tp / (self.gpu_flops * E_NANOFLOW);
                let memory = self.layers * (p.lin_bytes / (self.gpu_bw * E_WEIGHTS) + p.dec)
                    + self.head_bytes / (self.gpu_bw * E_WEIGHTS);
                compute
                    .max(memory)
                    .max(self.layers * p.comm)
                    .max(self.cpu_secs)
            }
        };
        Cost {
            secs,
            flops: p.flops,
            bytes: p.bytes,
        }
    }

    /// One block's parts over `b` (the head whole), and the iteration's FLOPs and bytes.
    fn per_block(&self, b: &Batch) -> PerBlock {
        let n = b.tokens() as f64;
        // Per GPU, per block.
        let lin_flops = self.layer_flops_per_token * n;
        let lin_bytes =
            self.layer_weight_bytes + self.experts.map_or(0.0, |(m, bytes)| m.touched(n) * bytes);
        let lin_floor = (lin_flops / self.gpu_flops).max(lin_bytes / self.gpu_bw);
        let lin = match self.linear {
            LinearSource::Profiled(f) if self.kind == EngineKind::VllmV1 => {
                (f.floor_ms.max(f.slope_ms * n) * 1e-3).max(lin_floor)
            }
            LinearSource::Profiled(f) => {
                (f.floor_ms.max(f.intercept_ms + f.slope_ms * n) * 1e-3).max(lin_floor)
            }
            LinearSource::Roofline => {
                (lin_bytes / (self.gpu_bw * E_WEIGHTS)).max(lin_flops / (self.gpu_flops * E_GEMM))
            }
        };
        let dec_bytes = self.layer_kv_bytes * b.decode_ctx as f64;
        let (attn_share, alpha) = match self.kind {
            EngineKind::VllmV1 => (E_ATTN_BW_V1, ALLREDUCE_ALPHA_V1_S),
            _ => (E_ATTN_BW, ALLREDUCE_ALPHA_S),
        };
        let dec = dec_bytes / (self.gpu_bw * attn_share);
        let pf_flops = self.layer_attn_flops_per_pair * b.prefill_pairs;
        let pf = pf_flops / (self.gpu_flops * E_ATTN_FLOPS);
        let comm = if self.tp > 1.0 {
            2.0 * (alpha + n * self.allreduce_bytes_per_token / self.allreduce_bw)
        } else {
            0.0
        };
        let head_flops = self.head_flops_per_logit * b.logits as f64;
        let head = (self.head_bytes / (self.gpu_bw * E_WEIGHTS))
            .max(head_flops / (self.gpu_flops * E_GEMM));
        let dec_flops = self.layer_attn_flops_per_pair * b.decode_ctx as f64;
        PerBlock {
            lin,
            lin_bytes,
            dec,
            pf,
            comm,
            head,
            flops: (self.layers * (lin_flops + pf_flops + dec_flops) + head_flops) * self.tp,
            bytes: (self.layers * (lin_bytes + dec_bytes) + self.head_bytes) * self.tp,
        }
    }
}

/// One block's seconds per part (the head for the whole model), and the iteration's
/// FLOPs and bytes over all GPUs.
struct PerBlock {
    lin: f64,
    lin_bytes: f64,
    dec: f64,
    pf: f64,
    comm: f64,
    head: f64,
    flops: f64,
    bytes: f64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hardware::{gpu, model};

    fn decode(seqs: u64, ctx: u64) -> Batch {
        Batch {
            decode_seqs: seqs,
            decode_ctx: seqs * ctx,
            logits: seqs,
            ..Batch::default()
        }
    }

    fn prefill(len: u64) -> Batch {
        Batch {
            prefill_tokens: len,
            prefill_pairs: (len * (len + 1) / 2) as f64,
            logits: 1,
            ..Batch::default()
        }
    }

    #[test]
    fn the_notes_worked_examples_come_out() {
        // Llama-2-7B, A100, TP1: decode batch 32 at 1,024 context is 9.1 ms of GEMMs
        // plus ~14 ms of attention; a 2,048-token prefill ~140 ms.
        let m = IterModel::new(
            &model("llama-2-7b").unwrap(),
            &gpu("a100").unwrap(),
            1,
            0.0,
            EngineKind::Sequential,
        );
        assert!(matches!(m.linear_source(), LinearSource::Profiled(_)));
        let d = m.cost(&decode(32, 1024)).secs * 1e3;
        assert!((20.0..30.0).contains(&d), "{d}");
        let p = m.cost(&prefill(2048)).secs * 1e3;
        assert!((130.0..160.0).contains(&p), "{p}");
    }

    #[test]
    fn the_parts_sum_to_the_iteration() {
        // Llama-2-7B on one H100 SXM: 16 requests decoding at 670 tokens of context.
        // The KV cache read is 16 x 670 tokens x 512 KiB = 5.62 GB, at half of 3,350 GB/s
        // 3.36 ms; the weights at least 13.5 GB / 3,350 GB/s = 4.03 ms.
        let m = IterModel::new(
            &model("Llama-2-7B").unwrap(),
            &gpu("H100-80GB-SXM").unwrap(),
            1,
            2e-3,
            EngineKind::Sequential,
        );
        let b = decode(16, 670);
        let p = m.parts(&b);
        assert!((p.total() - m.cost(&b).secs).abs() < 1e-12);
        let kv = 16.0 * 670.0 * 524_288.0;
        assert!(
            (p.decode_attention - kv / (3350e9 * E_ATTN_BW)).abs() < 1e-9,
            "{p:?}"
        );
        assert!(p.linear >= 13.4e9 / 3350e9, "{p:?}");
        assert_eq!(p.cpu, 2e-3);
        assert_eq!((p.prefill_attention, p.allreduce), (0.0, 0.0));
    }

    #[test]
    fn vllm_v1_overlaps_weights_with_compute_and_reads_kv_faster() {
        // Llama-2-70B on four H100s: Vidur's fit per block is max(0.1821, 0.1274 +
        // 0.000654 N) ms; V1 takes max(0.1821, 0.000654 N).
        let (m, g) = (model("Llama-2-70B").unwrap(), gpu("H100-80GB-SXM").unwrap());
        let v0 = IterModel::new(&m, &g, 4, 0.0, EngineKind::Sequential);
        let v1 = IterModel::new(&m, &g, 4, 0.0, EngineKind::VllmV1);
        let LinearSource::Profiled(f) = v1.linear_source() else {
            panic!("no profile")
        };
        let mut b = decode(112, 670);
        b.prefill_tokens = 200;
        let (p0, p1) = (v0.parts(&b), v1.parts(&b));
        let per_block = |ms: f64| 80.0 * ms * 1e-3;
        assert!((p0.linear - per_block(f.intercept_ms + f.slope_ms * 312.0)).abs() < 1e-9);
        assert!((p1.linear - per_block(f.slope_ms * 312.0)).abs() < 1e-9);
        // At a decode batch alone both sit on the floor.
        let small = decode(37, 670);
        assert_eq!(v0.parts(&small).linear, v1.parts(&small).linear);
        assert!(
            (p1.decode_attention / p0.decode_attention - E_ATTN_BW / E_ATTN_BW_V1).abs() < 1e-9
        );
        // 160 all-reduces: the fixed cost drops from 50 to 15 µs each.
        let fixed = p0.allreduce - p1.allreduce;
        assert!((fixed - 160.0 * (ALLREDUCE_ALPHA_S - ALLREDUCE_ALPHA_V1_S)).abs() < 1e-9);
    }

    #[test]
    fn a_mixture_of_experts_reads_the_experts_its_tokens_route_to() {
        // Mixtral-8x7B on one H200 (it needs 93 GB): a decode step of one request
        // streams attention and 2 experts per block; of 256 requests, all 8 experts.
        let m = model("mixtral-8x7b").unwrap();
        let g = gpu("h200").unwrap();
        let im = IterModel::new(&m, &g, 1, 0.0, EngineKind::Sequential);
        assert_eq!(im.linear_source(), LinearSource::Roofline);
        let moe = m.moe.unwrap();
        let attention = m.params_per_layer - 2.0 * moe.expert_params;
        let block = |experts: f64| 2.0 * (attention + experts * moe.expert_params);
        let one = im.per_block(&decode(1, 100));
        assert_eq!(one.lin_bytes, block(2.0));
        let many = im.per_block(&decode(256, 100));
        assert!((many.lin_bytes - block(8.0)).abs() < 1.0);
        // Its FLOPs per token are the active parameters' (2 experts), at any batch;
        // at batch 1 the block is weight-bound, at the roofline's streaming rate.
        assert_eq!(im.layer_flops_per_token, 2.0 * m.params_per_layer);
        assert_eq!(one.lin, block(2.0) / (g.mem_bw * E_WEIGHTS));
    }

    #[test]
    fn no_iteration_beats_the_hardware() {
        for (mn, gn, tp) in [
            ("llama-7b", "A10", 1),
            ("llama-2-70b", "a100", 8),
            ("llama-3-8b", "h100", 1),
            ("opt-13b", "a100", 2),
        ] {
            for kind in [EngineKind::Sequential, EngineKind::Overlapped] {
                let m = IterModel::new(&model(mn).unwrap(), &gpu(gn).unwrap(), tp, 0.0, kind);
                for b in [decode(1, 10), decode(256, 2000), prefill(1), prefill(8192)] {
                    let c = m.cost(&b);
                    assert!(
                        c.secs >= c.flops / m.peak_flops() * (1.0 - 1e-9),
                        "{mn} {b:?}"
                    );
                    assert!(c.secs >= c.bytes / m.peak_bw() * (1.0 - 1e-9), "{mn} {b:?}");
                }
            }
        }
    }
}
