//! DistServe's placement search: every split uses the budget, the ranking is by
//! goodput, each goodput meets the target when run again, node-local splits keep
//! their KV on the node's link, and bad searches are refused by field.

use apiary_llm::disagg;
use apiary_llm::metrics::{LlmSummary, Slo};
use apiary_llm::placement::{Search, search};
use apiary_llm::setup::{Options, prepare};
use apiary_llm::workload::{Trace, power_law_requests};

fn trace() -> Trace {
    Trace {
        requests: power_law_requests(256, 128, 400, 7).unwrap(),
        ..Trace::default()
    }
}

fn base() -> Options {
    Options {
        model: "llama-2-7b".into(),
        gpu: "A100".into(),
        ..Options::default()
    }
}

fn budget(gpus: u32) -> Search {
    Search {
        gpus,
        slo: Slo {
            ttft_s: 0.5,
            tpot_s: 0.05,
        },
        attainment: 0.9,
        max_rate: 64.0,
        steps: 8,
        node_gpus: None,
    }
}

#[test]
fn every_split_uses_the_budget_and_the_best_meets_the_target() {
    let s = budget(4);
    let found = search(&base(), &trace(), &s).unwrap();
    // 1:3, 2:2 and 3:1 at TP 1; 2 x TP1 with 1 x TP2; 1 x TP2 with 2 x TP1; 1 x TP2
    // with 1 x TP2.
    assert_eq!(found.len(), 6, "{found:?}");
    for c in &found {
        assert_eq!(
            c.prefill * c.prefill_tp + c.decode * c.decode_tp,
            4,
            "{c:?}"
        );
        assert!(c.prefill >= 1 && c.decode >= 1);
    }
    assert!(found.windows(2).all(|w| w[0].goodput >= w[1].goodput));
    let best = found[0];
    assert!(best.goodput > 0.0, "{found:?}");
    // Run again at the goodput found: the attainment meets the target.
    let o = Options {
        disagg: Some((best.prefill, best.decode)),
        prefill_tp: Some(best.prefill_tp),
        tp: best.decode_tp,
        rate: Some(best.goodput),
        ..base()
    };
    let setup = prepare(&o, "again", trace()).unwrap();
    let d = setup.disagg.as_ref().unwrap();
    let out = disagg::simulate(d, &setup.requests, &setup.refused, &mut |_, _| {}).unwrap();
    let att = LlmSummary::of("", &out, setup.clipped, s.slo).slo_attainment;
    assert!(att >= 0.9, "{att}");
    // The same search gives the same answer.
    assert_eq!(search(&base(), &trace(), &s).unwrap(), found);
}

#[test]
fn bad_searches_are_refused_by_field() {
    for (s, field) in [
        (
            Search {
                attainment: 0.0,
                ..budget(4)
            },
            "--attainment",
        ),
        (
            Search {
                attainment: 1.5,
                ..budget(4)
            },
            "--attainment",
        ),
        (
            Search {
                max_rate: 0.0,
                ..budget(4)
            },
            "--max-rate",
        ),
        (
            Search {
                max_rate: f64::NAN,
                ..budget(4)
            },
            "--max-rate",
        ),
        (budget(1), "--gpus"),
        (
            Search {
                node_gpus: Some(3),
                ..budget(4)
            },
            "--node-gpus",
        ),
        (
            Search {
                node_gpus: Some(0),
                ..budget(4)
            },
            "--node-gpus",
        ),
    ] {
        let e = search(&base(), &trace(), &s).unwrap_err().to_string();
        assert!(e.contains(field), "{field}: {e}");
    }
    // Llama-2-70B on 2 A100s: no instance holds it on one GPU, so no split runs.
    let big = Options {
        model: "llama-2-70b".into(),
        ..base()
    };
    assert!(search(&big, &trace(), &budget(2)).is_err());
}

#[test]
fn on_nodes_both_placements_are_searched_and_node_local_kv_stays_on_the_node() {
    // Two nodes of two GPUs behind a slow network (0.1 GB/s per GPU): pools across the
    // nodes (every instance at TP 1, as TP 2 would fill a node: 1:3, 2:2, 3:1, and
    // 1 x TP2 with 2 x TP1 and back, and 1 x TP2 with 1 x TP2) and one 1:1 split
    // per node.
    let slow = Options {
        kv_gbps: 0.1,
        ..base()
    };
    let s = Search {
        node_gpus: Some(2),
        max_rate: 1000.0,
        ..budget(4)
    };
    let found = search(&slow, &trace(), &s).unwrap();
    let local: Vec<_> = found.iter().filter(|c| c.copies == 2).collect();
    assert_eq!((found.len(), local.len()), (7, 1), "{found:?}");
    for c in &found {
        assert_eq!(c.copy_gpus() * c.copies, 4, "{c:?}");
        assert!(c.prefill_tp <= 2 && c.decode_tp <= 2, "{c:?}");
    }
    // The node-local 1:1 pair, run alone at half its goodput over the A100's
    // NVLink, meets the target.
    let l = local[0];
    assert_eq!((l.prefill, l.decode), (1, 1));
    assert!(l.goodput > 0.0);
    let link = apiary_llm::hardware::gpu("A100").unwrap().link_bw / 1e9;
    let o = Options {
        disagg: Some((1, 1)),
        rate: Some(l.goodput / 2.0),
        kv_gbps: link,
        ..slow.clone()
    };
    let setup = prepare(&o, "node", trace()).unwrap();
    let d = setup.disagg.as_ref().unwrap();
    let out = disagg::simulate(d, &setup.requests, &setup.refused, &mut |_, _| {}).unwrap();
    assert!(LlmSummary::of("", &out, setup.clipped, s.slo).slo_attainment >= 0.9);
    // The same 2:2 across the slow network does worse than two 1:1 nodes on NVLink:
    // a prompt's KV takes seconds to cross, which a short answer's TPOT cannot hide.
    let across = found
        .iter()
        .find(|c| c.copies == 1 && (c.prefill, c.decode, c.prefill_tp, c.decode_tp) == (2, 2, 1, 1))
        .unwrap();
    assert!(across.goodput < l.goodput, "{across:?} {l:?}");
    // One node: only the node-local layout, the same splits as without nodes.
    let one = search(
        &slow,
        &trace(),
        &Search {
            node_gpus: Some(4),
            ..budget(4)
        },
    )
    .unwrap();
    assert!(one.iter().all(|c| c.copies == 1));
    assert_eq!(one.len(), 6);
}
