//! GpuPacking (FGD's baseline `GpuPackingScore`): first GPUs already shared that still
//! hold the pod, the fuller the better; then nodes partly used, using as few free GPUs
//! as it can; idle nodes last, those with fewer GPUs first.

use super::{Context, MAX_SCORE, SharePolicy, SharePolicySpec};
use crate::cluster::{Demand, M, NodeState};

/// The declaration.
pub const SPEC: SharePolicySpec = SharePolicySpec {
    name: "gpu-packing",
    about: "shared GPUs first, then partly used nodes, then idle ones (FGD's GpuPacking baseline)",
    params: &[],
    build: |_| Ok(Box::new(Packing)),
};

struct Packing;

impl SharePolicy for Packing {
    fn score(&mut self, n: &NodeState, d: &Demand, _: &Context) -> i64 {
        if d.milli <= 0 {
            return 0;
        }
        let free = n.free_gpus() as i64;
        if free == i64::from(n.gpus) {
            return (MAX_SCORE / 3 - free).max(free);
        }
        // The GPUs it would use, least left first (a stable sort, so index order on ties).
        let mut order: Vec<usize> = (0..usize::from(n.gpus)).collect();
        order.sort_by_key(|&i| n.gpu_left[i]);
        let (mut need, mut free_used, mut left_pct) = (i64::from(d.num), 0, 0i64);
        for i in order {
            if need == 0 {
                break;
            }
            let left = n.gpu_left[i];
            if d.milli <= left {
                need -= 1;
                left_pct += i64::from(left) * 100 / i64::from(M);
                if left == M {
                    free_used += 1;
                }
            }
        }
        if need != 0 {
            return 0;
        }
        if free_used > 0 {
            return (MAX_SCORE / 2 - free_used).max(MAX_SCORE / 3);
        }
        (MAX_SCORE - left_pct / 10).max(MAX_SCORE / 2)
    }
}
