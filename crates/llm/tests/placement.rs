//! DistServe's placement search: every split uses the budget, the ranking is by
//! goodput, each goodput meets the target when run again, and bad searches are
//! refused by field.

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
