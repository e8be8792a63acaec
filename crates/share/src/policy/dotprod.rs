//! DotProd (FGD's baseline `DotProductScore` with `-dimext merge -norm max`, after
//! Tetris): the node whose CPU and GPU left, each as a share of the largest node's,
//! align least with the pod's request.

use super::{Context, MAX_SCORE, MAX_SPEC_CPU, MAX_SPEC_GPU, SharePolicy, SharePolicySpec};
use crate::cluster::{Demand, NodeState};

/// The declaration.
pub const SPEC: SharePolicySpec = SharePolicySpec {
    name: "dotprod",
    about: "the node whose free CPU and GPU have the smallest dot product with the request (FGD's DotProd baseline)",
    params: &[],
    build: |_| Ok(Box::new(DotProd)),
};

struct DotProd;

impl SharePolicy for DotProd {
    fn score(&mut self, n: &NodeState, d: &Demand, _: &Context) -> i64 {
        if n.cpu_left < d.cpu {
            return 0;
        }
        let node = [
            n.cpu_left as f64 / MAX_SPEC_CPU as f64,
            n.total_left() as f64 / MAX_SPEC_GPU as f64,
        ];
        let pod = [
            d.cpu as f64 / MAX_SPEC_CPU as f64,
            d.total_milli() as f64 / MAX_SPEC_GPU as f64,
        ];
        let mut dot = 0.0;
        for i in 0..2 {
            dot += node[i] * pod[i];
        }
        let score = 1.0 - dot / 2.0;
        (MAX_SCORE as f64 * score) as i64
    }
}
