//! Properties of shared-pool runs (several services on one pool of GPU groups): every
//! request finishes or is reported refused, a group's instances never hold more KV
//! memory than it has (the engine audits each event in debug builds), runs repeat
//! exactly, and a unified KV cache lets a service use memory a fixed split would not.

use apiary_core::Params;
use apiary_llm::hardware::{GpuSpec, MemoryPlan, gpu, model};
use apiary_llm::latency::{EngineKind, IterModel};
use apiary_llm::policy::pool;
use apiary_llm::pool::{Pool, PoolOutcome, Service, simulate_pool};
use apiary_llm::replica::Phase;
use apiary_llm::workload::Request;
use proptest::prelude::*;

fn service(name: &str, model_name: &str, g: &GpuSpec) -> Service {
    let m = model(model_name).unwrap();
    Service {
        name: name.into(),
        iter: IterModel::new(&m, g, 1, 0.005, EngineKind::Sequential),
        max_len: m.max_ctx,
        model: m,
        chunk: None,
    }
}

fn run(
    pool_: &Pool,
    services: &[Service],
    reqs: &[Request],
    of: &[u16],
    name: &str,
    set: &[&str],
) -> Result<PoolOutcome, apiary_llm::LlmError> {
    let params = Params::from_pairs(set.iter().copied()).unwrap();
    let mut p = pool::build(name, &params).unwrap();
    simulate_pool(
        pool_,
        services,
        reqs,
        of,
        &vec![false; reqs.len()],
        p.as_mut(),
        &mut |_, _| {},
    )
}

/// `groups` single-GPU groups of `gpu`, vLLM's memory plan, weights loaded over PCIe 4.0.
fn groups_of_one(groups: u32, gpu: GpuSpec) -> Pool {
    Pool {
        groups,
        gpu,
        tp: 1,
        mem: MemoryPlan::default(),
        load_bw: Pool::PCIE4_LOAD_BW,
    }
}

/// One request of `input` and `output` tokens arriving at the start.
fn at_zero(input: u32, output: u32) -> Request {
    Request {
        arrival: 0,
        input,
        output,
        priority: 0,
        prefix: (0, 0),
    }
}

/// An A100 with `gb` of memory, so that KV runs short.
fn small_a100(gb: f64) -> GpuSpec {
    let mut g = gpu("a100").unwrap();
    g.mem_bytes = gb * 1e9;
    g
}

fn requests() -> impl Strategy<Value = Vec<(Request, u16)>> {
    prop::collection::vec((0u64..2_000_000, 1u32..900, 1u32..400, 0u16..3), 1..150).prop_map(|v| {
        let mut t = 0;
        v.into_iter()
            .map(|(gap, input, output, s)| {
                t += gap / 20;
                (
                    Request {
                        arrival: t,
                        input,
                        output,
                        priority: 0,
                        prefix: (0, 0),
                    },
                    s,
                )
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]

    #[test]
    fn pool_requests_finish_or_are_refused_and_memory_balances(
        tagged in requests(),
        groups in 3u32..6,
        which in 0usize..6,
    ) {
        let g = small_a100(40.0);
        let services = [
            service("a", "llama-2-7b", &g),
            service("b", "llama-3-8b", &g),
            service("c", "llama-2-7b", &g),
        ];
        let pool_ = groups_of_one(groups, g);
        let reqs: Vec<Request> = tagged.iter().map(|t| t.0).collect();
        let of: Vec<u16> = tagged.iter().map(|t| t.1).collect();
        let (name, set): (&str, &[&str]) = [
            ("dedicated", &[][..]),
            ("static-partition", &[][..]),
            ("seallm", &["min_kv_share=0.05"][..]),
            ("seallm", &["min_kv_share=0.05", "sched=rr"][..]),
            ("seallm", &["min_kv_share=0.05", "unified_kv=false", "max_wait_ms=0"][..]),
            ("seallm", &["min_kv_share=0.05", "replan_s=0.2", "horizon_s=0.2", "drift=0.01", "min_gain=0"][..]),
        ][which];
        let o = run(&pool_, &services, &reqs, &of, name, set).unwrap();
        for (q, r) in o.outcome.requests.iter().zip(&reqs) {
            if q.phase == Phase::Refused {
                continue;
            }
            prop_assert_eq!(q.phase, Phase::Done);
            prop_assert!(q.first >= r.arrival && q.done >= q.first);
            prop_assert_eq!(q.generated, r.output);
        }
        // Requests this small fit any instance: none is refused.
        prop_assert!(o.outcome.requests.iter().all(|q| q.phase == Phase::Done));
        prop_assert!(o.outcome.max_flop_share <= 1.0 && o.outcome.max_bw_share <= 1.0);
        let again = run(&pool_, &services, &reqs, &of, name, set).unwrap();
        let key = |o: &PoolOutcome| o.outcome.requests.iter().map(|q| (q.first, q.done, q.preemptions)).collect::<Vec<_>>();
        prop_assert_eq!(key(&o), key(&again));
        prop_assert_eq!(o.placement, again.placement);
        prop_assert_eq!(&o.replans, &again.replans);
    }
}

/// `n` requests of `service`, one every `gap` µs from `start`.
fn stream(service: u16, start: u64, gap: u64, n: usize) -> Vec<(Request, u16)> {
    (0..n as u64)
        .map(|i| {
            let r = Request {
                arrival: start + i * gap,
                input: 600 + (i % 7) as u32 * 100,
                output: 150 + (i % 5) as u32 * 50,
                priority: 0,
                prefix: (0, 0),
            };
            (r, service)
        })
        .collect()
}

#[test]
fn re_placement_follows_a_shift_in_the_mix() {
    // Two 13B services that cannot share a 40 GB GPU; the first is busy for five
    // minutes, then the second for five.
    let g = small_a100(40.0);
    let services = [
        service("early", "llama-2-13b", &g),
        service("late", "llama-2-13b", &g),
    ];
    let pool_ = groups_of_one(4, g);
    let mut tagged = stream(0, 0, 200_000, 1500);
    tagged.extend(stream(1, 300_000_000, 200_000, 1500));
    let reqs: Vec<Request> = tagged.iter().map(|t| t.0).collect();
    let of: Vec<u16> = tagged.iter().map(|t| t.1).collect();
    let fixed = run(&pool_, &services, &reqs, &of, "seallm", &["replan_s=0"]).unwrap();
    let set = ["replan_s=10", "horizon_s=30"];
    let adaptive = run(&pool_, &services, &reqs, &of, "seallm", &set).unwrap();
    assert_eq!(fixed.placement, vec![vec![0], vec![0], vec![1], vec![1]]);
    assert!(fixed.replans.is_empty());
    for o in [&fixed, &adaptive] {
        assert!(o.outcome.requests.iter().all(|q| q.phase == Phase::Done));
    }
    // Both halves get three of the four groups in turn.
    let (t1, first) = &adaptive.replans[0];
    assert!(*t1 < 300_000_000, "{t1}");
    assert_eq!(first.iter().filter(|s| s[..] == [0]).count(), 3);
    assert!(
        adaptive
            .replans
            .iter()
            .any(|(t, p)| *t > 300_000_000 && p.iter().filter(|s| s[..] == [1]).count() == 3),
        "{:?}",
        adaptive.replans
    );
    assert!(adaptive.model_loads >= 2);
    let mean_e2e = |o: &PoolOutcome| {
        o.outcome.requests.iter().map(|q| q.e2e_s()).sum::<f64>() / o.outcome.requests.len() as f64
    };
    assert!(
        mean_e2e(&adaptive) < 0.8 * mean_e2e(&fixed),
        "adaptive {} fixed {}",
        mean_e2e(&adaptive),
        mean_e2e(&fixed)
    );
}

#[test]
fn a_unified_cache_runs_what_a_fixed_split_refuses() {
    // One group holding a 7B and a 13B model with about 2.1 GB of KV between them.
    let seven = model("llama-2-7b").unwrap();
    let thirteen = model("llama-2-13b").unwrap();
    let plan = MemoryPlan::default();
    let weights = seven.weight_bytes + thirteen.weight_bytes;
    let gb = (weights + 2.1e9 + plan.activation_reserve) / plan.utilisation / 1e9;
    let g = small_a100(gb);
    let services = [
        service("chat", "llama-2-7b", &g),
        service("code", "llama-2-13b", &g),
    ];
    let pool_ = groups_of_one(1, g);
    // A fixed split by load leaves the 13B service under 1,700 tokens of the ~2,560 the
    // cache holds in its units; its request needs 1,800.
    let reqs = [at_zero(1500, 300), at_zero(1500, 300)];
    let of = [1u16, 0];
    let split = run(
        &pool_,
        &services,
        &reqs,
        &of,
        "seallm",
        &["min_kv_share=0", "unified_kv=false"],
    )
    .unwrap();
    assert_eq!(split.outcome.requests[0].phase, Phase::Refused);
    let unified = run(&pool_, &services, &reqs, &of, "seallm", &["min_kv_share=0"]).unwrap();
    assert!(
        unified
            .outcome
            .requests
            .iter()
            .all(|q| q.phase == Phase::Done)
    );
    assert_eq!(unified.placement, vec![vec![0, 1]]);
}

#[test]
fn a_sliding_window_model_holds_only_its_window_in_a_pool() {
    // Mistral-7B-v0.1 (a 4,096-token window) with about 1 GB of KV, some 8,000 tokens:
    // a 12,000-token prompt fits only because a request keeps the window's blocks.
    let plan = MemoryPlan::default();
    let m = model("mistral-7b-v0.1").unwrap();
    let gb = (m.weight_bytes + 1.0e9 + plan.activation_reserve) / plan.utilisation / 1e9;
    let g = small_a100(gb);
    let windowed = service("chat", "mistral-7b-v0.1", &g);
    assert_eq!(windowed.model.sliding_window, Some(4096));
    let mut full = windowed.clone();
    full.model.sliding_window = None;
    let reqs = [at_zero(12_000, 100)];
    let pool_ = groups_of_one(1, g);
    let phase = |s: &Service| {
        let o = run(&pool_, std::slice::from_ref(s), &reqs, &[0], "seallm", &[]).unwrap();
        o.outcome.requests[0].phase
    };
    assert_eq!(phase(&full), Phase::Refused);
    assert_eq!(phase(&windowed), Phase::Done);
}

#[test]
fn a_pool_with_fewer_groups_than_services_is_a_clear_error() {
    let g = gpu("a100").unwrap();
    let services = [
        service("a", "llama-2-7b", &g),
        service("b", "llama-2-7b", &g),
    ];
    let pool_ = groups_of_one(1, g);
    let reqs = [at_zero(10, 10)];
    let e = run(&pool_, &services, &reqs, &[1], "dedicated", &[])
        .unwrap_err()
        .to_string();
    assert!(e.contains("service 'b' is on no group"), "{e}");
}
