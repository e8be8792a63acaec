//! Prefix caching on Mooncake's published trace
//! (`../shared/llm/traces/mooncake_synthetic_trace.jsonl`, 512-token block hashes):
//! dispatch that counts each instance's cached blocks serves far more of the prompts
//! from cache than load-only dispatch, and starts them sooner. Skipped where the shared
//! data is absent.

use apiary_core::Params;
use apiary_llm::engine::Cluster;
use apiary_llm::hardware::{MemoryPlan, gpu, kv_blocks, model};
use apiary_llm::latency::{EngineKind, IterModel};
use apiary_llm::metrics::{LlmSummary, Slo};
use apiary_llm::policy;
use apiary_llm::replica::ReplicaConfig;
use apiary_llm::workload::{ClipRule, clip, read_trace};
use std::path::Path;
use std::sync::Arc;

#[test]
fn prefix_aware_dispatch_reuses_more_of_the_mooncake_trace() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/llm/traces/mooncake_synthetic_trace.jsonl");
    if !path.exists() {
        eprintln!("skipped: {} is absent", path.display());
        return;
    }
    let mut trace = read_trace(&path).unwrap();
    trace.requests.truncate(800);
    let m = model("mistral-7b-v0.1").unwrap();
    let g = gpu("A100").unwrap();
    let (clipped, refused) = clip(&mut trace.requests, m.max_ctx, ClipRule::Clip);
    assert!(
        clipped.clipped > 0,
        "the trace has prompts beyond 32k tokens"
    );
    let blocks = kv_blocks(&m, &g, 1, MemoryPlan::default(), 16).unwrap();
    let cluster = Cluster {
        instances: 8,
        replica: ReplicaConfig::vllm(blocks, m.max_ctx),
        model: IterModel::new(&m, &g, 1, 0.005, EngineKind::Sequential),
        kv_bytes_per_token_per_gpu: m.kv_bytes_per_token,
        prefix_cache: Some(Arc::new(trace.prefixes.clone())),
        host_tier: None,
    };
    let run = |name: &str| {
        let mut p = policy::build(name, &Params::default()).unwrap();
        let o = apiary_llm::simulate(
            &cluster,
            &trace.requests,
            &refused,
            p.as_mut(),
            &mut |_, _| {},
        )
        .unwrap();
        LlmSummary::of(name, &o, clipped, Slo::default())
    };
    let load = run("infaas++");
    let aware = run("prefix-aware");
    let (hl, ha) = (
        load.prefix.unwrap().hit_rate(),
        aware.prefix.unwrap().hit_rate(),
    );
    eprintln!(
        "hit rate {hl:.3} -> {ha:.3}; TTFT mean {:.3} -> {:.3} s",
        load.ttft.mean, aware.ttft.mean
    );
    assert_eq!(aware.requests, 800);
    assert!(ha > 4.0 * hl, "hit rate {ha} vs {hl}");
    assert!(aware.ttft.mean < load.ttft.mean);
}
