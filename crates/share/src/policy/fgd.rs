//! FGD, fragmentation gradient descent (Weng et al., "Beware of Fragmentation", USENIX
//! ATC'23; the artifact's `FGDScore` with `-gpusel FGD -dimext share`): the node, and
//! on it the GPU, where the pod grows the node's expected fragmentation for the
//! workload's typical pods ([`crate::typical`]) least. The score is
//! `sigmoid((before − after) / 1000) × 100`, truncated to an integer as Kubernetes
//! scores are, so nearly equal nodes tie and go to the first in the seeded order.

use super::{Context, MAX_SCORE, Pick, SharePolicy, SharePolicySpec, exclusive_gpus};
use crate::cluster::{Demand, NodeState};
use crate::typical::node_frag;
use apiary_core::Rng;

/// The declaration.
pub const SPEC: SharePolicySpec = SharePolicySpec {
    name: "fgd",
    about: "the node and GPU where the pod adds least expected fragmentation for the typical pods (FGD, ATC'23)",
    params: &[],
    build: |_| Ok(Box::new(Fgd)),
};

struct Fgd;

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// The score and GPUs of placing `d` on `n`.
fn best(n: &NodeState, d: &Demand, cx: &Context) -> (i64, Pick) {
    let before = node_frag(n, cx.typical, cx.types);
    let score = |after: &NodeState| {
        let a = node_frag(after, cx.typical, cx.types);
        (sigmoid((before - a) / 1000.0) * MAX_SCORE as f64) as i64
    };
    let mut after = *n;
    after.cpu_left -= d.cpu;
    if d.is_fractional() {
        let mut best: Option<(i64, usize)> = None;
        for i in 0..usize::from(n.gpus) {
            if n.gpu_left[i] >= d.milli {
                let mut a = after;
                a.gpu_left[i] -= d.milli;
                let s = score(&a);
                if best.is_none_or(|(b, _)| s > b) {
                    best = Some((s, i));
                }
            }
        }
        return best.map_or((0, Pick::default()), |(s, i)| (s, Pick::one(i)));
    }
    let pick = exclusive_gpus(n, d);
    for &g in pick.gpus() {
        after.gpu_left[usize::from(g)] -= d.milli;
    }
    (score(&after), pick)
}

impl SharePolicy for Fgd {
    fn score(&mut self, n: &NodeState, d: &Demand, cx: &Context) -> i64 {
        best(n, d, cx).0
    }

    fn pick(&mut self, n: &NodeState, d: &Demand, cx: &Context, _: &mut Rng) -> Pick {
        best(n, d, cx).1
    }
}
