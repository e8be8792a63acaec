//! The replica model against measurements it was not fitted on: Splitwise's profiled
//! prefill and decode iteration times of Llama-2-70B on A100 and H100 at TP 2, 4 and 8
//! (`../shared/llm/profiling/derived/splitwise_perf_medians.csv`, medians of five
//! runs). Our iteration times take the linear layers from Vidur's operator profiles and
//! the rest from the roofline; Splitwise measured whole iterations on its own engine.
//! Also against DistServe's fitted vLLM iteration times for OPT-13B on A100. Prints the
//! error tables `docs/llm.md` quotes
//! (`cargo test -p apiary-llm --test heldout -- --nocapture`); skipped where the shared
//! data is absent.

use apiary_llm::hardware::{gpu, model};
use apiary_llm::latency::{Batch, EngineKind, IterModel};
use std::collections::BTreeMap;
use std::path::Path;

/// Splitwise's rows: (hardware, tp, prompt, batch, tokens, prompt ms, token ms).
type Row = (String, u32, u64, u64, u64, f64, f64);

fn rows() -> Option<Vec<Row>> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/llm/profiling/derived/splitwise_perf_medians.csv");
    let text = std::fs::read_to_string(p).ok()?;
    let mut out = Vec::new();
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        if f[0] != "llama2-70b" || f[1].ends_with("pcap") {
            continue;
        }
        out.push((
            f[1].to_string(),
            f[2].parse().unwrap(),
            f[3].parse().unwrap(),
            f[4].parse().unwrap(),
            f[5].parse().unwrap(),
            f[7].parse().unwrap(),
            f[8].parse().unwrap(),
        ));
    }
    Some(out)
}

#[test]
fn iteration_times_match_splitwise_measurements() {
    let Some(rows) = rows() else {
        eprintln!("../shared/llm/profiling not found: skipped");
        return;
    };
    let m = model("llama-2-70b").unwrap();
    // Per (hardware, tp): prefill and decode absolute percentage errors.
    let mut errs: BTreeMap<(String, u32), (Vec<f64>, Vec<f64>)> = BTreeMap::new();
    for (hw, tp, prompt, batch, tokens, prompt_ms, token_ms) in &rows {
        let g = gpu(if hw.starts_with("a100") {
            "a100"
        } else {
            "h100"
        })
        .unwrap();
        let it = IterModel::new(&m, &g, *tp, 0.005, EngineKind::Sequential);
        let pre = it.cost(&Batch {
            prefill_tokens: batch * prompt,
            prefill_pairs: (batch * prompt * (prompt + 1)) as f64 / 2.0,
            logits: *batch,
            ..Batch::default()
        });
        // Splitwise's token time is the mean decode iteration as the context grows
        // from the prompt to the prompt plus the generated tokens.
        let dec = it.cost(&Batch {
            decode_seqs: *batch,
            decode_ctx: batch * (prompt + tokens / 2 + 1),
            logits: *batch,
            ..Batch::default()
        });
        let e = errs.entry((hw.clone(), *tp)).or_default();
        // Splitwise's known outliers: large-batch prefills faster than one prompt.
        if *batch <= 16 {
            e.0.push((pre.secs * 1e3 - prompt_ms).abs() / prompt_ms);
        }
        e.1.push((dec.secs * 1e3 - token_ms).abs() / token_ms);
        if *prompt == 512 && *batch == 1 && *tokens == 128 {
            eprintln!(
                "{hw} tp {tp}, 512-token prompt, batch 1: decode {:.1} ms (Splitwise {token_ms}), prefill {:.1} ms (Splitwise {prompt_ms})",
                dec.secs * 1e3,
                pre.secs * 1e3
            );
        }
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let (mut all_pre, mut all_dec) = (Vec::new(), Vec::new());
    eprintln!("hardware   tp  prefill MAPE  decode MAPE  rows");
    for ((hw, tp), (pre, dec)) in &errs {
        eprintln!(
            "{hw:<10} {tp:>2}  {:>11.1}%  {:>10.1}%  {}",
            mean(pre) * 100.0,
            mean(dec) * 100.0,
            dec.len()
        );
        all_pre.extend(pre);
        all_dec.extend(dec);
    }
    let (p, d) = (mean(&all_pre), mean(&all_dec));
    eprintln!(
        "all           {:>11.1}%  {:>10.1}%  {}",
        p * 100.0,
        d * 100.0,
        all_dec.len()
    );
    assert!(!all_dec.is_empty());
    // Vidur reports under 9 % error on its own held-out traces; we hold the model to
    // the errors it has now, so that a change that worsens it fails here.
    assert!(p < 0.25 && d < 0.25, "prefill {p:.3}, decode {d:.3}");
}

/// DistServe's fits of vLLM's iteration times on A100-80GB
/// (`../shared/llm/profiling/distserve/profiler-a100-80g.vllm.json`; prefill
/// `a + b·Σlen + c·Σlen²` ms, decode `a + b·Σ(context + 1) + c·batch` ms with one set of
/// coefficients below a batch of 95 and another above), for OPT-13B at TP 1, 2 and 4,
/// over prompts of 128 to 2,047 tokens and decode batches of 1 to 256 that fit the KV
/// capacity DistServe lists. OPT-66B is not in our model table.
#[test]
fn iteration_times_match_distserve_fits_for_opt_13b() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/llm/profiling/distserve");
    let (Ok(json), Ok(caps)) = (
        std::fs::read_to_string(dir.join("profiler-a100-80g.vllm.json")),
        std::fs::read_to_string(dir.join("max_num_tokens.csv")),
    ) else {
        eprintln!("../shared/llm/profiling/distserve not found: skipped");
        return;
    };
    let fits: serde_json::Value = serde_json::from_str(&json).unwrap();
    let m = model("opt-13b").unwrap();
    let g = gpu("a100").unwrap();
    let coef = |tp: u32, key: &str| -> Vec<f64> {
        fits["facebook/opt-13b"][tp.to_string()][key]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect()
    };
    let (mut all_pre, mut all_dec) = (Vec::new(), Vec::new());
    eprintln!("OPT-13B, A100-80GB  tp  prefill MAPE  decode MAPE  points");
    for tp in [1u32, 2, 4] {
        let cap: u64 = caps
            .lines()
            .map(|l| l.split(',').collect::<Vec<_>>())
            .find(|f| f[0] == "facebook/opt-13b" && f[1] == tp.to_string() && f[2] == "1")
            .map(|f| f[3].parse().unwrap())
            .unwrap();
        let it = IterModel::new(&m, &g, tp, 0.005, EngineKind::Sequential);
        let (pre_c, small, large) = (
            coef(tp, "prefill"),
            coef(tp, "decoding_smallbs"),
            coef(tp, "decoding_largebs"),
        );
        let (mut pre, mut dec) = (Vec::new(), Vec::new());
        for len in [128u64, 256, 512, 1024, 2047] {
            for batch in [1u64, 2, 4] {
                let n = batch * len;
                if n > 4096 {
                    continue;
                }
                let ours = it.cost(&Batch {
                    prefill_tokens: n,
                    prefill_pairs: (batch * len * (len + 1)) as f64 / 2.0,
                    logits: batch,
                    ..Batch::default()
                });
                let sq = (batch * len * len) as f64;
                let theirs = pre_c[0] + pre_c[1] * n as f64 + pre_c[2] * sq;
                pre.push((ours.secs * 1e3 - theirs).abs() / theirs);
            }
        }
        for batch in [1u64, 8, 32, 64, 128, 256] {
            for ctx in [256u64, 512, 1024, 1792] {
                if batch * (ctx + 1) > cap {
                    continue;
                }
                let ours = it.cost(&Batch {
                    decode_seqs: batch,
                    decode_ctx: batch * (ctx + 1),
                    logits: batch,
                    ..Batch::default()
                });
                let c = if batch < 95 { &small } else { &large };
                let theirs = c[0] + c[1] * (batch * (ctx + 1)) as f64 + c[2] * batch as f64;
                dec.push((ours.secs * 1e3 - theirs).abs() / theirs);
            }
        }
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
        eprintln!(
            "                    {tp:>2}  {:>11.1}%  {:>10.1}%  {}+{}",
            mean(&pre) * 100.0,
            mean(&dec) * 100.0,
            pre.len(),
            dec.len()
        );
        all_pre.extend(pre);
        all_dec.extend(dec);
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let (p, d) = (mean(&all_pre), mean(&all_dec));
    eprintln!(
        "all                     {:>11.1}%  {:>10.1}%",
        p * 100.0,
        d * 100.0
    );
    // DistServe's vLLM (2023) spends about 20 ms per iteration whatever the batch and
    // gains little from TP 2 and 4 on small batches; ours, at the 5 ms CPU time the
    // Splitwise check uses, is faster there. Held to the errors it has now.
    assert!(p < 0.40 && d < 0.27, "prefill {p:.3}, decode {d:.3}");
}
