//! Disaggregated prefill and decode: one request worked by hand against the colocated
//! engine, decode iterations no prompt can stall, one copy at a time on a link, a
//! sliding window's KV sent and held,
//! and, on random workloads with small caches and windows, every request finishing with the blocks balanced (the simulation audits
//! them after every event in debug builds) and the same run giving the same records.

use apiary_core::Params;
use apiary_llm::disagg::{self, DisaggCluster};
use apiary_llm::engine::{Cluster, LlmOutcome};
use apiary_llm::hardware::{gpu, model};
use apiary_llm::latency::{EngineKind, IterModel};
use apiary_llm::replica::{Phase, ReplicaConfig};
use apiary_llm::workload::Request;
use proptest::prelude::*;

/// Llama-2-7B on A100s, at `gbps` per GPU between the pools.
fn pools(p: u32, d: u32, blocks: u32, gbps: f64) -> DisaggCluster {
    let m = model("Llama-2-7B").unwrap();
    let g = gpu("A100").unwrap();
    let iter = IterModel::new(&m, &g, 1, 0.003, EngineKind::Sequential);
    DisaggCluster {
        prefill: p,
        decode: d,
        prefill_replica: ReplicaConfig {
            prefill_only: true,
            ..ReplicaConfig::vllm(blocks, 4096)
        },
        decode_replica: ReplicaConfig::vllm(blocks, 4096),
        prefill_model: iter.clone(),
        decode_model: iter,
        transfer_secs_per_token: m.kv_bytes_per_token / (gbps * 1e9),
        prefix_cache: None,
        host_tier: None,
    }
}

fn colocated(n: u32, blocks: u32) -> Cluster {
    let c = pools(1, 1, blocks, 25.0);
    Cluster {
        instances: n,
        replica: c.decode_replica,
        model: c.decode_model,
        kv_bytes_per_token_per_gpu: 0.0,
        prefix_cache: None,
        host_tier: None,
    }
}

fn req(at_ms: u64, input: u32, output: u32) -> Request {
    Request {
        arrival: at_ms * 1000,
        input,
        output,
        priority: 0,
        prefix: (0, 0),
    }
}

fn run_colocated(c: &Cluster, reqs: &[Request]) -> LlmOutcome {
    let mut p = apiary_llm::policy::build("round-robin", &Params::default()).unwrap();
    apiary_llm::simulate(
        c,
        reqs,
        &vec![false; reqs.len()],
        p.as_mut(),
        &mut |_, _| {},
    )
    .unwrap()
}

#[test]
fn one_request_pays_its_kv_transfer_between_its_first_and_second_tokens() {
    let reqs = [req(0, 1000, 10)];
    let d = disagg::simulate(&pools(1, 1, 2000, 25.0), &reqs, &[false], &mut |_, _| {}).unwrap();
    let c = run_colocated(&colocated(1, 2000), &reqs);
    let (qd, qc) = (&d.requests[0], &c.requests[0]);
    assert_eq!((qd.phase, qc.phase), (Phase::Done, Phase::Done));
    // The same prefill iteration gives the first token in both.
    assert_eq!(qd.first, qc.first);
    // Its 1,000 prompt tokens' KV (512 KiB each) cross at 25 GB/s: 20.97 ms, rounded
    // up to the microsecond; the nine decode steps after it cost the same.
    let transfer_us = (1000.0 * 524_288.0 / 25e9 * 1e6f64).ceil() as u64;
    assert_eq!(transfer_us, 20_972);
    assert_eq!(qd.done - qc.done, transfer_us);
    assert_eq!((d.kv_transfers, qd.inst), (1, 1));
}

#[test]
fn a_prefill_instance_reuses_the_prompt_blocks_it_has_cached() {
    // The same 1,024-token prompt (two 512-token blocks) twice, the second after the
    // first is done: on a prefill instance with a prefix cache the second prefills
    // only its last token (a cached prompt still computes it), so its first token
    // comes sooner, and all its KV is still sent.
    let mut reqs = [req(0, 1024, 10), req(2000, 1024, 10)];
    for r in &mut reqs {
        r.prefix = (0, 2);
    }
    let mut c = pools(1, 1, 2000, 25.0);
    let cold = disagg::simulate(&c, &reqs, &[false; 2], &mut |_, _| {}).unwrap();
    c.prefix_cache = Some(std::sync::Arc::new(apiary_llm::workload::Prefixes {
        block_tokens: 512,
        hashes: vec![7, 8],
    }));
    let warm = disagg::simulate(&c, &reqs, &[false; 2], &mut |_, _| {}).unwrap();
    let ttft = |o: &LlmOutcome, i: usize| o.requests[i].first - o.requests[i].req.arrival;
    assert_eq!(ttft(&warm, 0), ttft(&cold, 0));
    assert!(
        ttft(&warm, 1) * 4 < ttft(&cold, 1),
        "{} {}",
        ttft(&warm, 1),
        ttft(&cold, 1)
    );
    let p = warm.prefix.unwrap();
    assert_eq!((p.prompt_tokens, p.hit_tokens), (2048, 1023));
    assert_eq!(warm.kv_transfer_secs, cold.kv_transfer_secs);
    assert!(warm.requests.iter().all(|q| q.phase == Phase::Done));
}

#[test]
fn the_prefill_pool_shares_a_host_tier() {
    // Prompt A, then B (other blocks) pushing A out of the prefill instance's small
    // cache, then A again: without a host tier A is computed again; with one, its
    // blocks (written through when first computed) load over the link instead, sooner.
    let mut reqs = [req(0, 1024, 2), req(1000, 1024, 2), req(2000, 1024, 2)];
    let starts = [0, 2, 0];
    for (r, &s) in reqs.iter_mut().zip(&starts) {
        r.prefix = (s, 2);
    }
    let mut c = pools(1, 1, 2000, 25.0);
    c.prefill_replica.total_blocks = 70;
    c.prefill_replica.watermark = 0;
    c.prefix_cache = Some(std::sync::Arc::new(apiary_llm::workload::Prefixes {
        block_tokens: 512,
        hashes: vec![1, 2, 3, 4],
    }));
    let gpu_only = disagg::simulate(&c, &reqs, &[false; 3], &mut |_, _| {}).unwrap();
    c.host_tier = Some(apiary_llm::prefix::HostTierConfig {
        blocks: 16,
        ns_per_token: 20_000.0,
    });
    let tiered = disagg::simulate(&c, &reqs, &[false; 3], &mut |_, _| {}).unwrap();
    let (g, t) = (gpu_only.prefix.unwrap(), tiered.prefix.unwrap());
    assert_eq!((g.hit_tokens, g.host_hit_tokens), (0, 0));
    assert_eq!(t.host_hit_tokens, 1023);
    assert!(t.host_load_secs > 0.0);
    let ttft = |o: &LlmOutcome| o.requests[2].first - o.requests[2].req.arrival;
    assert!(
        ttft(&tiered) < ttft(&gpu_only),
        "{} {}",
        ttft(&tiered),
        ttft(&gpu_only)
    );
}

#[test]
fn a_link_carries_one_copy_at_a_time() {
    // Two prompts arriving while a long one runs are prefilled together on the one
    // prefill instance: its link sends the second cache after the first, though two
    // decode instances could take them at once. (The long prompt's one token comes
    // with its prefill, so it sends nothing.)
    let transfer_us = (1000.0 * 524_288.0 / 25e9 * 1e6f64).ceil();
    let reqs = [req(0, 2000, 1), req(1, 1000, 10), req(1, 1000, 10)];
    let one =
        disagg::simulate(&pools(1, 2, 2000, 25.0), &reqs, &[false; 3], &mut |_, _| {}).unwrap();
    let (a, b) = (&one.requests[1], &one.requests[2]);
    assert_eq!(a.first, b.first);
    assert_ne!(a.inst, b.inst);
    assert_eq!((one.kv_transfers, one.kv_wait_secs), (2, transfer_us / 1e6));
    assert_eq!(b.done - a.done, transfer_us as u64);
    // On two prefill instances each prompt runs and is sent on its own, and neither
    // waits.
    let reqs = [req(0, 1000, 10), req(0, 1000, 10)];
    let two =
        disagg::simulate(&pools(2, 2, 2000, 25.0), &reqs, &[false; 2], &mut |_, _| {}).unwrap();
    assert_ne!(two.requests[0].inst, two.requests[1].inst);
    assert_eq!(two.kv_wait_secs, 0.0);
    assert_eq!(two.requests[0].done, two.requests[1].done);
}

#[test]
fn a_long_prompt_never_stalls_the_decode_pool() {
    // A request decoding when a 4,000-token prompt arrives: colocated, the prompt's
    // prefill iteration runs between two of its decode steps (vLLM v0 prefills first)
    // and its decoding takes longer than alone; disaggregated, the prompt runs on the
    // prefill pool, and its decoding takes exactly as long as alone.
    let reqs = [req(0, 100, 400), req(200, 4000, 1)];
    let decoding = |o: &LlmOutcome| o.requests[0].done - o.requests[0].first;
    let c = pools(1, 1, 2000, 25.0);
    let run_d =
        |r: &[Request]| disagg::simulate(&c, r, &vec![false; r.len()], &mut |_, _| {}).unwrap();
    let (d, d_alone) = (run_d(&reqs), run_d(&reqs[..1]));
    let co = colocated(1, 2000);
    let (c2, c_alone) = (run_colocated(&co, &reqs), run_colocated(&co, &reqs[..1]));
    assert_eq!(d.requests[1].phase, Phase::Done);
    assert!(
        decoding(&c2) > decoding(&c_alone) + 100_000,
        "{} {}",
        decoding(&c2),
        decoding(&c_alone)
    );
    assert_eq!(decoding(&d), decoding(&d_alone));
}

#[test]
fn under_a_sliding_window_only_the_window_is_sent_and_held() {
    // A 64-token window keeps a request to 5 blocks (the window's 4 and one more) on
    // both pools, so a 1,000-token prompt sends 80 tokens' KV, not 1,000, and runs
    // where the decode pool's 20 blocks could never hold its 63.
    let reqs = [req(0, 1000, 10)];
    let mut c = pools(1, 1, 2000, 25.0);
    c.decode_replica.total_blocks = 20;
    c.decode_replica.watermark = 0;
    let full = disagg::simulate(&c, &reqs, &[false], &mut |_, _| {}).unwrap();
    assert_eq!(full.requests[0].phase, Phase::Refused);
    c.prefill_replica.window = Some(64);
    c.decode_replica.window = Some(64);
    let w = disagg::simulate(&c, &reqs, &[false], &mut |_, _| {}).unwrap();
    assert_eq!(w.requests[0].phase, Phase::Done);
    let transfer_us = (80.0 * 524_288.0 / 25e9 * 1e6f64).ceil();
    assert_eq!((w.kv_transfers, w.kv_transfer_secs), (1, transfer_us / 1e6));
}

/// Prompt blocks of 64 tokens: request `i` with `docs[i]` = 0 has blocks of its own,
/// others share their leading blocks with every request of the same document.
fn shared_prefixes(reqs: &mut [Request], docs: &[u8]) -> apiary_llm::workload::Prefixes {
    let mut hashes = Vec::new();
    for (i, (r, &d)) in reqs.iter_mut().zip(docs).enumerate() {
        let n = r.input.div_ceil(64);
        r.prefix = (hashes.len() as u32, n);
        hashes.extend((0..u64::from(n)).map(|j| match d {
            0 => 1_000_000 + i as u64 * 100 + j,
            d => u64::from(d) * 1000 + j,
        }));
    }
    apiary_llm::workload::Prefixes {
        block_tokens: 64,
        hashes,
    }
}

fn requests() -> impl Strategy<Value = Vec<Request>> {
    prop::collection::vec((0u64..400, 1u32..1500, 1u32..300), 1..80).prop_map(|v| {
        let mut t = 0;
        v.into_iter()
            .map(|(gap, input, output)| {
                t += gap;
                req(t, input, output)
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn every_request_finishes_or_is_refused_and_runs_repeat(
        reqs in requests(),
        p in 1u32..3,
        d in 1u32..4,
        blocks in 60u32..300,
        decode_blocks in 60u32..300,
        window in prop::option::of(16u32..600),
        docs in prop::collection::vec(0u8..3, 80),
        host in prop::option::of(1u64..40),
    ) {
        let mut reqs = reqs;
        let mut c = pools(p, d, blocks, 25.0);
        c.decode_replica.total_blocks = decode_blocks;
        c.decode_replica.watermark = decode_blocks / 100;
        c.prefill_replica.window = window;
        c.decode_replica.window = window;
        // Without a window (the setup drops it under a prefix cache), prompts share
        // leading blocks from three documents (0: a prompt of its own), some runs
        // with a host tier behind the prefill caches.
        if window.is_none() {
            c.prefix_cache = Some(std::sync::Arc::new(shared_prefixes(&mut reqs, &docs)));
            c.host_tier = host.map(|blocks| apiary_llm::prefix::HostTierConfig {
                blocks,
                ns_per_token: 5_000.0,
            });
        }
        let o = disagg::simulate(&c, &reqs, &vec![false; reqs.len()], &mut |_, _| {}).unwrap();
        for (q, r) in o.requests.iter().zip(&reqs) {
            let fits = u64::from(r.input) + u64::from(r.output)
                <= c.decode_replica.fits_tokens()
                && u64::from(r.input) < c.prefill_replica.fits_tokens();
            if !fits {
                prop_assert_eq!(q.phase, Phase::Refused);
                continue;
            }
            prop_assert_eq!(q.phase, Phase::Done);
            prop_assert!(q.first >= r.arrival && q.done >= q.first);
            prop_assert_eq!(q.generated, r.output);
            // Decoded on a decode instance, unless its one token came with the prompt.
            prop_assert!(r.output == 1 || q.inst >= p);
        }
        let sent = o.requests.iter().filter(|q| q.phase == Phase::Done && q.req.output > 1).count();
        prop_assert_eq!(o.kv_transfers, sent as u64);
        prop_assert!(o.max_flop_share <= 1.0 && o.max_bw_share <= 1.0);
        let again = disagg::simulate(&c, &reqs, &vec![false; reqs.len()], &mut |_, _| {}).unwrap();
        let key = |o: &LlmOutcome| o.requests.iter().map(|q| (q.first, q.done, q.preemptions)).collect::<Vec<_>>();
        prop_assert_eq!(key(&o), key(&again));
    }
}
