//! The migration micro-benchmark's shape (Llumnix §6.2): live migration stops a request
//! for a constant time whatever its length, in two stages, while blocking copy and
//! recompute grow with the length and recompute takes seconds for long LLaMA-30B
//! requests.

use apiary_core::Params;
use apiary_llm::hardware::{gpu, model};
use apiary_llm::migration::migration_point;
use apiary_llm::policy;

fn points(name: &str, tp: u32) -> Vec<apiary_llm::migration::MigrationPoint> {
    let p = policy::build("llumnix", &Params::default()).unwrap();
    let (cfg, interval) = (p.migration().unwrap(), p.interval().unwrap());
    let (m, g) = (model(name).unwrap(), gpu("A10").unwrap());
    [1024, 2048, 4096, 8192]
        .iter()
        .map(|&n| migration_point(&m, &g, tp, n, cfg, interval).unwrap())
        .collect()
}

#[test]
fn live_downtime_is_flat_while_the_baselines_grow_with_length() {
    for (name, tp) in [("llama-7b", 1), ("llama-30b", 4)] {
        let pts = points(name, tp);
        let first = pts[0].live_downtime_s;
        for p in &pts {
            eprintln!("{name} {p:?}");
            assert_eq!(p.stages, 2, "{name} at {} tokens", p.tokens);
            assert!((p.live_downtime_s - first).abs() < 1e-3);
            assert!(p.live_downtime_s < 0.03, "one decode step or less");
            assert!(p.live_total_s >= p.live_downtime_s);
        }
        for w in pts.windows(2) {
            // Doubling the length nearly doubles both baselines.
            assert!(w[1].blocking_copy_s > 1.7 * w[0].blocking_copy_s);
            assert!(w[1].recompute_s > 1.9 * w[0].recompute_s);
        }
        let last = pts[3];
        assert!(last.recompute_s > 50.0 * last.live_downtime_s);
        assert!(last.blocking_copy_s > 20.0 * last.live_downtime_s);
    }
    // The note's example: about 3.5 s to recompute 8k tokens of LLaMA-30B.
    let r = points("llama-30b", 4)[3].recompute_s;
    assert!((2.0..5.0).contains(&r), "{r} s");
}

#[test]
fn a_request_beyond_the_cache_is_an_error() {
    let p = policy::build("llumnix", &Params::default()).unwrap();
    let (m, g) = (model("llama-7b").unwrap(), gpu("A10").unwrap());
    let e = migration_point(&m, &g, 1, 20_000, p.migration().unwrap(), 50_000).unwrap_err();
    assert!(e.to_string().contains("do not fit"), "{e}");
}
