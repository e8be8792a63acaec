//! BestFit (FGD's baseline `BestFitScore`): the node whose CPU and GPU left after the
//! pod, each as a share of the largest node's, weigh least, half and half.

use super::{Context, MAX_SCORE, MAX_SPEC_CPU, MAX_SPEC_GPU, SharePolicy, SharePolicySpec};
use crate::cluster::{Demand, NodeState};

/// The declaration.
pub const SPEC: SharePolicySpec = SharePolicySpec {
    name: "bestfit",
    about: "the node with the least CPU and GPU left after the pod, half and half (FGD's BestFit baseline)",
    params: &[],
    build: |_| Ok(Box::new(BestFit)),
};

struct BestFit;

impl SharePolicy for BestFit {
    fn score(&mut self, n: &NodeState, d: &Demand, _: &Context) -> i64 {
        let free = [n.cpu_left as f64, n.total_left() as f64];
        let req = [d.cpu as f64, d.total_milli() as f64];
        let max = [MAX_SPEC_CPU as f64, MAX_SPEC_GPU as f64];
        let mut left = 0.0;
        for i in 0..2 {
            left += (free[i] - req[i]) / max[i] * 0.5;
        }
        // The artifact then rescales scores to 0..100 over the candidates, which keeps
        // their order and their ties; the raw score picks the same node.
        ((1.0 - left) * MAX_SCORE as f64) as i64
    }
}
