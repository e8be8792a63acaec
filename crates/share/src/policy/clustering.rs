//! GpuClustering (FGD's baseline `GpuClusteringScore`): pods of one GPU count together.
//! A node holding only pods like this one scores highest, then one holding these among
//! others, then an idle node, then one holding only other kinds; within each band, the
//! fuller node first.

use super::{Context, MAX_SCORE, MAX_SPEC_GPU, SharePolicy, SharePolicySpec};
use crate::cluster::{Demand, NodeState, affinity_slot};

/// The declaration.
pub const SPEC: SharePolicySpec = SharePolicySpec {
    name: "gpu-clustering",
    about: "nodes holding pods of the same GPU count first (FGD's GpuClustering baseline)",
    params: &[],
    build: |_| Ok(Box::new(Clustering)),
};

struct Clustering;

impl SharePolicy for Clustering {
    fn score(&mut self, n: &NodeState, d: &Demand, _: &Context) -> i64 {
        let Some(slot) = affinity_slot(d) else {
            return 0;
        };
        // Integer arithmetic, as the artifact computes it.
        let fill = MAX_SCORE / 4 * (MAX_SPEC_GPU - n.total_left()) / MAX_SPEC_GPU;
        let kinds = n.affinity.iter().filter(|&&c| c > 0).count();
        let band = if n.affinity[slot] > 0 {
            if kinds == 1 { 3 } else { 2 }
        } else if kinds == 0 {
            1
        } else {
            0
        };
        fill + MAX_SCORE * band / 4
    }
}
