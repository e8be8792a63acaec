//! Random (FGD's baseline `RandomScore` with `-gpusel random`): a node drawn uniformly
//! among those that can take the pod, and on it a GPU drawn uniformly among those that
//! hold a fractional pod.

use super::{Context, Pick, SharePolicy, SharePolicySpec, exclusive_gpus};
use crate::cluster::{Demand, NodeState};
use apiary_core::Rng;

/// The declaration.
pub const SPEC: SharePolicySpec = SharePolicySpec {
    name: "random",
    about: "a node drawn uniformly among those that fit, and a GPU likewise (FGD's Random baseline)",
    params: &[],
    build: |_| Ok(Box::new(Random)),
};

struct Random;

impl SharePolicy for Random {
    fn score(&mut self, _: &NodeState, _: &Demand, _: &Context) -> i64 {
        0
    }

    fn random_node(&self) -> bool {
        true
    }

    fn pick(&mut self, n: &NodeState, d: &Demand, _: &Context, rng: &mut Rng) -> Pick {
        if !d.is_fractional() {
            return exclusive_gpus(n, d);
        }
        // Reservoir sampling over the GPUs that fit, as the artifact draws.
        let (mut seen, mut chosen) = (0u64, None);
        for (i, &left) in n.left().iter().enumerate() {
            if left >= d.milli {
                seen += 1;
                if rng.below(seen) == 0 {
                    chosen = Some(i);
                }
            }
        }
        chosen.map_or_else(Pick::default, Pick::one)
    }
}
