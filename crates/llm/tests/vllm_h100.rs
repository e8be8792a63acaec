//! Validation against measured vLLM runs on one H100 SXM (issue 54): inference-perf's
//! `shared_prefix` workload (9 system prompts of 100 tokens, 5 prompts each with a
//! question of 447 tokens, 248 output tokens, a constant rate for 600 s) under vLLM
//! with 2,048 batched tokens, 128 sequences and 4,096 tokens of context.
//!
//! inference-perf's "constant" load draws exponential gaps and scales them to the
//! stage's length (`ConstantLoadTimer` in `inference_perf/loadgen/load_timer.py`), so
//! the rows saw Poisson arrivals: the runs here draw them too (`--cv 1`), on 10 seeds.
//!
//! The measured TPOT column is inference-perf's normalised time per output token, whose
//! output count re-tokenizes the generated text (about 505 tokens for 248 generated):
//! E2E / TPOT is 505, 504, 504 and 509 on the four rows. The per-token time compared
//! here is therefore the one the rows' own E2E and TTFT give, (E2E - TTFT) / 247, which
//! is what apiary's TPOT measures. `cargo test -p apiary-llm --test vllm_h100 --
//! --nocapture` prints the table docs/llm.md shows.

use apiary_core::Params;
use apiary_llm::metrics::{LlmSummary, Slo};
use apiary_llm::setup::{Options, prepare};
use apiary_llm::workload::{SharedPrefix, shared_prefix_requests};

/// (model, TP, rate; measured TTFT mean ms, TTFT p99 ms, inference-perf TPOT ms, E2E s).
const ROWS: [(&str, u32, u32, [f64; 4]); 4] = [
    ("llama-2-7b", 1, 8, [27.1, 36.6, 4.08, 2.06]),
    ("llama-2-7b", 1, 20, [51.9, 72.5, 8.26, 4.16]),
    ("llama-2-70b", 4, 8, [57.4, 120.6, 9.29, 4.68]),
    ("llama-2-70b", 4, 20, [121.3, 986.8, 10.97, 5.58]),
];

const WORKLOAD: SharedPrefix = SharedPrefix {
    groups: 9,
    users: 5,
    system: 100,
    question: 447,
    output: 248,
};

/// Seeds each row is simulated on; the figures compared are their means.
const SEEDS: u64 = 10;

fn run(model: &str, tp: u32, rate: u32, seed: u64) -> LlmSummary {
    let trace = shared_prefix_requests(WORKLOAD, rate as usize * 600).unwrap();
    let o = Options {
        model: model.into(),
        gpu: "H100-80GB-SXM".into(),
        instances: 1,
        tp,
        rate: Some(f64::from(rate)),
        cv: 1.0,
        seed,
        max_len: Some(4096),
        max_seqs: Some(128),
        engine: "vllm-v1".into(),
        prefix_cache: true,
        ..Options::default()
    };
    let s = prepare(&o, "shared-prefix", trace).unwrap();
    let mut p = apiary_llm::policy::build("round-robin", &Params::default()).unwrap();
    let out = apiary_llm::simulate(
        &s.cluster,
        &s.requests,
        &s.refused,
        p.as_mut(),
        &mut |_, _| {},
    )
    .unwrap();
    LlmSummary::of("round-robin", &out, s.clipped, Slo::default())
}

fn err(sim: f64, measured: f64) -> f64 {
    100.0 * (sim / measured - 1.0)
}

/// Means over the seeds of TTFT mean and p99 (ms), TPOT mean (ms) and E2E mean (s).
fn means(model: &str, tp: u32, rate: u32) -> [f64; 4] {
    let mut sum = [0.0; 4];
    for seed in 0..SEEDS {
        let s = run(model, tp, rate, seed);
        assert_eq!(s.requests, u64::from(rate) * 600);
        let one = [
            s.ttft.mean * 1e3,
            s.ttft.p99 * 1e3,
            s.tpot.mean * 1e3,
            s.e2e.mean,
        ];
        for (a, b) in sum.iter_mut().zip(one) {
            *a += b / SEEDS as f64;
        }
    }
    sum
}

#[test]
fn vllm_v1_matches_measured_h100_runs() {
    println!("| model | rate | TTFT mean ms | TTFT p99 ms | TPOT mean ms | E2E mean s |");
    println!("|---|---|---|---|---|---|");
    let mut worst: (f64, f64, f64) = (0.0, 0.0, 0.0);
    for (model, tp, rate, [ttft, p99, _, e2e]) in ROWS {
        let [s_ttft, s_p99, s_tpot, s_e2e] = means(model, tp, rate);
        let per_token = (e2e - ttft / 1e3) / f64::from(WORKLOAD.output - 1) * 1e3;
        let (et, ep, ee) = (err(s_ttft, ttft), err(s_tpot, per_token), err(s_e2e, e2e));
        println!(
            "| {model}, TP {tp} | {rate} req/s | {s_ttft:.1} / {ttft} ({et:+.0} %) | {s_p99:.1} / {p99} ({:+.0} %) | {s_tpot:.2} / {per_token:.2} ({ep:+.1} %) | {s_e2e:.2} / {e2e} ({ee:+.1} %) |",
            err(s_p99, p99),
        );
        worst = (
            worst.0.max(et.abs()),
            worst.1.max(ep.abs()),
            worst.2.max(ee.abs()),
        );
    }
    println!(
        "worst: TTFT {:.0} %, TPOT {:.1} %, E2E {:.1} %",
        worst.0, worst.1, worst.2
    );
    // The targets for TPOT and E2E; TTFT is reported, not met (docs/llm.md).
    assert!(worst.1 < 10.0, "TPOT off by {:.1} %", worst.1);
    assert!(worst.2 < 10.0, "E2E off by {:.1} %", worst.2);
}

#[test]
fn measured_tpot_is_inference_perfs_retokenized_count() {
    // E2E / TPOT: the output tokens inference-perf divided by, about twice the 248
    // generated.
    for (_, _, _, [_, _, tpot, e2e]) in ROWS {
        let counted = e2e / (tpot / 1e3);
        assert!((500.0..512.0).contains(&counted), "{counted}");
    }
}
