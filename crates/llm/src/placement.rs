//! DistServe's placement search for disaggregated serving: within a GPU budget, which
//! prefill and decode pools, each with its own tensor-parallel degree, serve the most
//! requests per second with the SLO attainment held at a target. Each candidate's
//! goodput is found by bisection on the arrival rate, as DistServe's simulator searches
//! it, and every run is the one `apiary llm simulate --disagg` makes.

use crate::LlmError;
use crate::disagg;
use crate::hardware;
use crate::metrics::{LlmSummary, Slo};
use crate::setup::{Options, prepare};
use crate::workload::Trace;

/// What to search.
#[derive(Clone, Copy, Debug)]
pub struct Search {
    /// GPUs the two pools use between them, all of them.
    pub gpus: u32,
    /// The SLO the attainment counts against.
    pub slo: Slo,
    /// The share of requests that must meet it (DistServe: 0.9).
    pub attainment: f64,
    /// The highest rate tried, requests/s.
    pub max_rate: f64,
    /// Bisection steps per candidate.
    pub steps: u32,
    /// GPUs per node, when the budget is whole nodes: instances then stay within a
    /// node, and node-local splits are searched too (see [`search`]).
    pub node_gpus: Option<u32>,
}

/// One split of the GPUs and its goodput.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Candidate {
    /// Prefill instances.
    pub prefill: u32,
    /// GPUs per prefill instance.
    pub prefill_tp: u32,
    /// Decode instances.
    pub decode: u32,
    /// GPUs per decode instance.
    pub decode_tp: u32,
    /// Copies of the split: 1 for pools across the whole budget, whose KV crosses
    /// the network (`--kv-gbps`); the node count for a split of one node repeated on
    /// each, whose KV stays on the node's scale-up link.
    pub copies: u32,
    /// The highest rate found whose attainment meets the target, requests/s, over all
    /// copies (0 when even the lowest rate tried misses it).
    pub goodput: f64,
}

impl Candidate {
    /// GPUs of one copy.
    pub fn copy_gpus(&self) -> u32 {
        self.prefill * self.prefill_tp + self.decode * self.decode_tp
    }

    /// The link its KV crosses: `node` (each node's own split) or `network`.
    pub fn kv_link(&self) -> &'static str {
        if self.copies > 1 { "node" } else { "network" }
    }

    /// Goodput per GPU, requests/s.
    pub fn per_gpu(&self) -> f64 {
        self.goodput / f64::from(self.copy_gpus() * self.copies)
    }
}

/// Tensor-parallel degrees tried for each pool.
const TPS: [u32; 4] = [1, 2, 4, 8];

/// Every split of `s.gpus` into prefill and decode pools (degrees 1, 2, 4, 8 the
/// model splits over, at least one instance each) with its goodput, best first (ties
/// by fewer prefill GPUs, then in search order). `base` sets everything else a run
/// takes; its rate, instances and pools are the search's. Splits whose instances do not
/// hold the model are left out; if none does, the first refusal is the error.
///
/// With `node_gpus`, DistServe's two placements. Its high node-affinity one: pools
/// across the nodes, no instance wider than a node, and every KV transfer over the
/// network (`base.kv_gbps`; some pairs may share a node, so this is the slower
/// bound). Its low node-affinity one: each node holds prefill and decode instances
/// of its own and sends KV over its scale-up link (the GPU's `link_bw`); requests are
/// spread evenly over the nodes, so one node is run at its share of the rate and the
/// goodput is the node's times the node count. On one node only the second applies.
pub fn search(base: &Options, trace: &Trace, s: &Search) -> Result<Vec<Candidate>, LlmError> {
    if !(s.attainment > 0.0 && s.attainment <= 1.0) {
        return Err(LlmError::Invalid {
            what: "--attainment",
            message: format!("{}: expected a share in (0, 1]", s.attainment),
        });
    }
    if !(s.max_rate.is_finite() && s.max_rate > 0.0 && s.max_rate <= 1e6) {
        return Err(LlmError::Invalid {
            what: "--max-rate",
            message: format!("{}: expected requests/s in (0, 10^6]", s.max_rate),
        });
    }
    if s.gpus < 2 || s.gpus > 1024 {
        return Err(LlmError::Invalid {
            what: "--gpus",
            message: format!(
                "{}: expected 2 to 1,024 (a prefill and a decode pool)",
                s.gpus
            ),
        });
    }
    let model = hardware::model(&base.model)?;
    let widest = match s.node_gpus {
        None => s.gpus,
        Some(g) if g >= 1 && s.gpus.is_multiple_of(g) => g,
        Some(g) => {
            return Err(LlmError::Invalid {
                what: "--node-gpus",
                message: format!("{g}: expected a divisor of --gpus {}", s.gpus),
            });
        }
    };
    let tps: Vec<u32> = TPS
        .into_iter()
        .filter(|&t| t <= widest && hardware::check_tp(&model, t).is_ok())
        .collect();
    // (GPUs split, copies, KV link GB/s per GPU).
    let mut layouts = Vec::new();
    if s.node_gpus.is_none_or(|g| g < s.gpus) {
        layouts.push((s.gpus, 1, base.kv_gbps));
    }
    if let Some(g) = s.node_gpus {
        let link = hardware::gpu(&base.gpu)?.link_bw / 1e9;
        layouts.push((g, s.gpus / g, link));
    }
    let mut out = Vec::new();
    let mut refusal = None;
    for (gpus, copies, kv_gbps) in layouts {
        let one = Search {
            max_rate: s.max_rate / f64::from(copies),
            ..*s
        };
        for &ptp in &tps {
            for &dtp in &tps {
                for p in 1..gpus / ptp {
                    let left = gpus - p * ptp;
                    if left == 0 || !left.is_multiple_of(dtp) {
                        continue;
                    }
                    let d = left / dtp;
                    let o = Options {
                        disagg: Some((p, d)),
                        prefill_tp: Some(ptp),
                        tp: dtp,
                        kv_gbps,
                        ..base.clone()
                    };
                    match goodput(&o, trace, &one) {
                        Ok(g) => out.push(Candidate {
                            prefill: p,
                            prefill_tp: ptp,
                            decode: d,
                            decode_tp: dtp,
                            copies,
                            goodput: g * f64::from(copies),
                        }),
                        Err(e) => {
                            refusal.get_or_insert(e);
                        }
                    }
                }
            }
        }
    }
    if out.is_empty() {
        return Err(refusal.unwrap_or(LlmError::Invalid {
            what: "--gpus",
            message: format!("{} GPUs split into no prefill and decode pools", s.gpus),
        }));
    }
    // Stable: equal goodput keeps the search order.
    out.sort_by(|a, b| {
        b.goodput
            .total_cmp(&a.goodput)
            .then((a.prefill * a.prefill_tp * a.copies).cmp(&(b.prefill * b.prefill_tp * b.copies)))
    });
    Ok(out)
}

/// The SLO attainment of `o` at `rate`.
fn attainment(o: &Options, trace: &Trace, rate: f64, slo: Slo) -> Result<f64, LlmError> {
    let o = Options {
        rate: Some(rate),
        ..o.clone()
    };
    let setup = prepare(&o, "the search", trace.clone())?;
    let d = setup.disagg.as_ref().ok_or(LlmError::Invalid {
        what: "--disagg",
        message: "the search's runs are disaggregated".into(),
    })?;
    let out = disagg::simulate(d, &setup.requests, &setup.refused, &mut |_, _| {})?;
    Ok(LlmSummary::of("", &out, setup.clipped, slo).slo_attainment)
}

/// The highest rate in (0, max_rate] meeting the attainment, by bisection.
fn goodput(o: &Options, trace: &Trace, s: &Search) -> Result<f64, LlmError> {
    if attainment(o, trace, s.max_rate, s.slo)? >= s.attainment {
        return Ok(s.max_rate);
    }
    let (mut lo, mut hi) = (0.0, s.max_rate);
    for _ in 0..s.steps {
        let mid = (lo + hi) / 2.0;
        if attainment(o, trace, mid, s.slo)? >= s.attainment {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Ok(lo)
}
