//! Buddy placement, as ElasticFlow's artifact places its power-of-two allocations.

use crate::JobIdx;
use apiary_model::Placement;

/// Buddy placement: power-of-two jobs, largest first; a job of a node or more takes
/// whole free nodes, a smaller one the aligned block of its size in the fullest node
/// that has one. With sizes placed in decreasing order a node's free GPUs are always
/// one aligned run, so any set whose sizes sum to at most the cluster fits. `free`
/// holds each node's GPU count (all equal, a power of two); returns per job its
/// placement, or `None` if the set does not fit.
pub fn buddy(
    node_gpus: u32,
    nodes: usize,
    jobs: &[(JobIdx, u32)],
) -> Option<Vec<(JobIdx, Placement)>> {
    buddy_ordered(node_gpus, nodes, jobs, false)
}

/// [`buddy`], with jobs of a node or more placed in the order given when
/// `big_in_order` (the artifact's `ef_sim_jobs` places them in the order they started),
/// still before every smaller one.
pub fn buddy_ordered(
    node_gpus: u32,
    nodes: usize,
    jobs: &[(JobIdx, u32)],
    big_in_order: bool,
) -> Option<Vec<(JobIdx, Placement)>> {
    let mut order: Vec<usize> = (0..jobs.len()).collect();
    order.sort_by_key(|&k| {
        let n = jobs[k].1;
        std::cmp::Reverse(if big_in_order && n >= node_gpus {
            u32::MAX
        } else {
            n
        })
    });
    let mut used = vec![0u32; nodes];
    let mut out = vec![(0, Placement::default()); jobs.len()];
    let full = if node_gpus >= 64 {
        u64::MAX
    } else {
        (1u64 << node_gpus) - 1
    };
    let mut next_free_node = 0usize;
    for k in order {
        let (j, n) = jobs[k];
        let mut p = Placement::default();
        if n >= node_gpus {
            let need = n.div_ceil(node_gpus) as usize;
            let mut got = 0;
            while got < need {
                while next_free_node < nodes && used[next_free_node] != 0 {
                    next_free_node += 1;
                }
                if next_free_node >= nodes {
                    return None;
                }
                used[next_free_node] = node_gpus;
                p.add(next_free_node as u32, full);
                got += 1;
            }
        } else if n > 0 {
            // The fullest node with room; whole free nodes only when none is partly used.
            let best = (0..nodes)
                .filter(|&x| used[x] > 0 && node_gpus - used[x] >= n)
                .max_by_key(|&x| (used[x], std::cmp::Reverse(x)))
                .or_else(|| (0..nodes).find(|&x| used[x] == 0))?;
            let off = used[best];
            let mask = ((1u64 << n) - 1) << off;
            used[best] += n;
            p.add(best as u32, mask);
        }
        out[k] = (j, p);
    }
    Some(out)
}

/// The nodes in service (not down for repair, not cordoned) of a cluster of `nodes`
/// nodes of `node_gpus` GPUs each: buddy placement over them alone, numbered among
/// themselves, lets a plan sized to them go on while others are out.
pub struct InService {
    up: Vec<u32>,
    all: usize,
    node_gpus: u32,
}

impl InService {
    /// The nodes of `state` in service.
    pub fn of(state: &apiary_model::ClusterState, nodes: usize, node_gpus: u32) -> InService {
        InService {
            up: (0..nodes as u32).filter(|&n| !state.is_down(n)).collect(),
            all: nodes,
            node_gpus,
        }
    }

    /// Whether every node is in service.
    pub fn all_up(&self) -> bool {
        self.up.len() == self.all
    }

    /// [`buddy_ordered`] over them, with the cluster's own node numbers.
    pub fn buddy(
        &self,
        jobs: &[(JobIdx, u32)],
        big_in_order: bool,
    ) -> Option<Vec<(JobIdx, Placement)>> {
        let mut placed = buddy_ordered(self.node_gpus, self.up.len(), jobs, big_in_order)?;
        if !self.all_up() {
            for (_, p) in placed.iter_mut() {
                for part in p.parts.iter_mut() {
                    part.0 = self.up[part.0 as usize];
                }
            }
        }
        Some(placed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buddy_fits_any_feasible_power_of_two_set() {
        let jobs = [(0, 2), (1, 8), (2, 1), (3, 4), (4, 1)];
        let out = buddy(8, 2, &jobs).unwrap();
        let mut state = [0u64; 2];
        for (j, p) in &out {
            let want = jobs.iter().find(|x| x.0 == *j).unwrap().1;
            assert_eq!(p.gpus(), want);
            for &(n, m) in &p.parts {
                assert_eq!(state[n as usize] & m, 0, "GPUs overlap");
                state[n as usize] |= m;
            }
        }
        assert!(buddy(8, 2, &[(0, 8), (1, 8), (2, 1)]).is_none());
    }

    #[test]
    fn ef_loop_places_whole_node_jobs_in_start_order() {
        let nodes = |out: Vec<(JobIdx, Placement)>| -> Vec<(JobIdx, Vec<u32>)> {
            out.into_iter()
                .map(|(j, p)| (j, p.parts.iter().map(|&(n, _)| n).collect()))
                .collect()
        };
        let jobs = [(0, 8), (1, 16), (2, 4)];
        // By size, the 16-GPU job takes the first nodes; in start order, the 8-GPU one.
        assert_eq!(
            nodes(buddy(8, 4, &jobs).unwrap()),
            vec![(0, vec![2]), (1, vec![0, 1]), (2, vec![3])]
        );
        assert_eq!(
            nodes(buddy_ordered(8, 4, &jobs, true).unwrap()),
            vec![(0, vec![0]), (1, vec![1, 2]), (2, vec![3])]
        );
    }
}
