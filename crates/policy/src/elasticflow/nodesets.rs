//! The artifact's own placement (`cluster.py`'s `elastic_placement` and
//! `release_job_res`, `log.py`'s `scheduling_result`), kept as it keeps it, for
//! `progress=artifact`.
//!
//! Placement changes no job's speed in the artifact; it decides which jobs are "cached"
//! and pay the small overhead. The artifact keeps node sets in lists by the size of job
//! their free GPUs suit (`node_g`) and its free nodes in one list sorted by node id,
//! where a node's id is its index within its switch: on a cluster of several switches
//! the free list interleaves them, and which of two equal ids comes first depends on
//! which was freed first. A job's cache key is not its GPUs but the rank of its first
//! GPU in switch-major order and its GPU count, as if its nodes were consecutive. Every
//! one of those details moves a key, so they are kept, list order included.

use crate::JobIdx;
use apiary_model::Placement;

/// `node_g`'s keys, in its (insertion) order.
const KEYS: [u32; 16] = [1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 56, 64, 72, 88, 128, 256];

fn key_index(n: u32) -> Option<usize> {
    KEYS.iter().position(|&k| k == n)
}

/// The largest key that divides `free` (`free > 0`), as the artifact picks a set's list.
fn class_of(free: u32) -> usize {
    (0..KEYS.len())
        .rev()
        .find(|&i| KEYS[i] <= free && free.is_multiple_of(KEYS[i]))
        .unwrap_or(0)
}

#[derive(Clone, Debug, Default)]
struct NodeSet {
    nodes: Vec<u32>,
    capacity: u32,
    util: u32,
    /// The artifact's `num_gpus`: the list it believes the set is in.
    num_gpus: u32,
    jobs: Vec<(JobIdx, u32)>,
    /// The `node_g` list that holds it (always exactly one while it has jobs).
    list: usize,
}

/// The artifact's node sets, free-node list and `node_g` lists.
#[derive(Clone, Debug, Default)]
pub struct NodeSets {
    node_gpus: u32,
    /// Each node's id in the artifact: its index within its switch.
    ids: Vec<u32>,
    free: Vec<u32>,
    /// Whether `free` has been sorted by id yet (the artifact first sorts it when a
    /// set is first emptied; until then it is in switch-major order).
    free_sorted: bool,
    is_free: Vec<bool>,
    sets: Vec<NodeSet>,
    unused: Vec<usize>,
    lists: [Vec<usize>; KEYS.len()],
    /// The set holding each node, and each job's set.
    node_set: Vec<Option<usize>>,
    job_set: Vec<Option<usize>>,
}

impl NodeSets {
    /// All nodes free, in switch-major order as the artifact lists them at start.
    /// `switch_of[g]` is node `g`'s switch; nodes of a switch are consecutive.
    pub fn new(node_gpus: u32, switch_of: &[u32]) -> NodeSets {
        let mut ids = Vec::with_capacity(switch_of.len());
        let mut first = 0usize;
        for g in 0..switch_of.len() {
            if g > 0 && switch_of[g] != switch_of[g - 1] {
                first = g;
            }
            ids.push((g - first) as u32);
        }
        NodeSets {
            node_gpus,
            ids,
            free: (0..switch_of.len() as u32).collect(),
            is_free: vec![true; switch_of.len()],
            node_set: vec![None; switch_of.len()],
            ..NodeSets::default()
        }
    }

    fn file(&mut self, s: usize, k: usize) {
        self.lists[k].push(s);
        self.sets[s].list = k;
    }

    fn sort_list(&mut self, k: usize) {
        let sets = &self.sets;
        self.lists[k].sort_by_key(|&s| sets[s].util);
    }

    /// Frees `j`'s GPUs (`release_job_res`); nothing if it holds none.
    pub fn release(&mut self, j: JobIdx) {
        let Some(s) = self.job_set.get_mut(j as usize).and_then(Option::take) else {
            return;
        };
        let set = &mut self.sets[s];
        let Some(pos) = set.jobs.iter().position(|x| x.0 == j) else {
            return;
        };
        let (_, n) = set.jobs.remove(pos);
        set.util = set.util.saturating_sub(n);
        let free = set.capacity - set.util;
        if set.util == 0 {
            // Appended, then sorted by id (stable): once the list is sorted, each goes
            // after every equal id.
            let ids = &self.ids;
            for &g in &set.nodes {
                if self.free_sorted {
                    let at = self
                        .free
                        .partition_point(|&x| ids[x as usize] <= ids[g as usize]);
                    self.free.insert(at, g);
                } else {
                    self.free.push(g);
                }
                self.is_free[g as usize] = true;
                self.node_set[g as usize] = None;
            }
            if !self.free_sorted {
                self.free.sort_by_key(|&x| ids[x as usize]);
                self.free_sorted = true;
            }
            let l = &mut self.lists[set.list];
            if let Some(p) = l.iter().position(|&x| x == s) {
                l.remove(p);
            }
            self.sets[s] = NodeSet::default();
            self.unused.push(s);
        } else if free > 0 {
            let k = class_of(free);
            if free == set.num_gpus {
                return;
            }
            // The artifact takes it out of the list its `num_gpus` names, which is
            // the one holding it whenever the artifact does not fail there.
            set.num_gpus = KEYS[k];
            let l = &mut self.lists[set.list];
            if let Some(p) = l.iter().position(|&x| x == s) {
                l.remove(p);
            }
            self.file(s, k);
            self.sort_list(k);
        }
    }

    /// Files set `s` as the artifact does after a job joins it: by its free GPUs into
    /// the list of the largest key dividing them, or, when full, under the job's size
    /// (`own`), wherever it came from; the lists it touches are sorted by use. The list
    /// it went to, when by its free GPUs.
    fn refile(&mut self, s: usize, own: usize) -> Option<usize> {
        let set = &self.sets[s];
        let free = set.nodes.len() as u32 * self.node_gpus - set.util;
        if free > 0 {
            let k = class_of(free);
            self.file(s, k);
            self.sort_list(own);
            self.sort_list(k);
            Some(k)
        } else {
            self.file(s, own);
            self.sort_list(own);
            None
        }
    }

    /// Adds `j` (of `n` GPUs) to set `s` (the artifact's two "fits an existing set"
    /// branches), which then believes it is in the list it is filed into.
    fn join(&mut self, s: usize, j: JobIdx, n: u32, own: usize) {
        let set = &mut self.sets[s];
        set.util += n;
        set.jobs.push((j, n));
        self.job_set[j as usize] = Some(s);
        if let Some(k) = self.refile(s, own) {
            self.sets[s].num_gpus = KEYS[k];
        }
    }

    /// Places `j` on `n` GPUs (`elastic_placement`); false if the artifact could not.
    pub fn place(&mut self, j: JobIdx, n: u32) -> bool {
        let Some(own) = key_index(n) else {
            return false;
        };
        if self.job_set.len() <= j as usize {
            self.job_set.resize(j as usize + 1, None);
        }
        if !self.lists[own].is_empty() {
            let s = self.lists[own].remove(0);
            if self.sets[s].util + n <= self.sets[s].capacity {
                self.join(s, j, n, own);
                return true;
            }
            self.file(s, own);
        }
        for k in (0..KEYS.len()).rev() {
            if KEYS[k] <= n {
                break;
            }
            if self.lists[k].is_empty() {
                continue;
            }
            let s = self.lists[k].remove(0);
            if self.sets[s].util + n <= self.sets[s].capacity {
                self.join(s, j, n, own);
                return true;
            }
            self.file(s, k);
        }
        let need = n.div_ceil(self.node_gpus) as usize;
        if need > self.free.len() {
            return false;
        }
        let nodes: Vec<u32> = self.free.drain(..need).collect();
        let s = self.unused.pop().unwrap_or_else(|| {
            self.sets.push(NodeSet::default());
            self.sets.len() - 1
        });
        for &g in &nodes {
            self.is_free[g as usize] = false;
            self.node_set[g as usize] = Some(s);
        }
        let capacity = need as u32 * self.node_gpus;
        self.sets[s] = NodeSet {
            nodes,
            capacity,
            util: n,
            num_gpus: n,
            jobs: vec![(j, n)],
            list: own,
        };
        self.job_set[j as usize] = Some(s);
        // A new set keeps the job's size as its `num_gpus`, whichever list it goes to.
        self.refile(s, own);
        true
    }

    /// Every placed job's GPUs and the artifact's cache key for them (the rank of its
    /// first GPU in switch-major order, and its GPU count), in the order
    /// `scheduling_result` visits them.
    pub fn placements(&self, out: &mut Vec<(JobIdx, Placement, (u32, u32))>) {
        out.clear();
        let full_mask = |g: u32| {
            if g >= 64 { u64::MAX } else { (1u64 << g) - 1 }
        };
        for g in 0..self.ids.len() as u32 {
            if self.is_free[g as usize] {
                continue;
            }
            let Some(s) = self.node_set[g as usize] else {
                continue;
            };
            let set = &self.sets[s];
            // A set over several nodes is logged at its first.
            if set.nodes.iter().any(|&x| x < g) {
                continue;
            }
            let whole = KEYS[set.list] >= self.node_gpus;
            let rank = g * self.node_gpus;
            if whole || set.nodes.len() > 1 {
                // One job over whole nodes, its GPUs node by node.
                let Some(&(j, n)) = set.jobs.first() else {
                    continue;
                };
                let mut p = Placement::default();
                let mut left = n;
                for &x in &set.nodes {
                    let take = left.min(self.node_gpus);
                    if take > 0 {
                        p.add(x, full_mask(take));
                    }
                    left -= take;
                }
                out.push((j, p, (rank, n)));
            } else {
                let mut off = 0;
                for &(j, n) in &set.jobs {
                    let mut p = Placement::default();
                    p.add(g, full_mask(n) << off);
                    out.push((j, p, (rank + off, n)));
                    off += n;
                }
            }
        }
    }

    /// Frees everything (after a round the artifact could not have placed).
    pub fn reset(&mut self) {
        let js: Vec<JobIdx> = (0..self.job_set.len() as JobIdx)
            .filter(|&j| self.job_set[j as usize].is_some())
            .collect();
        for j in js {
            self.release(j);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(ns: &NodeSets) -> Vec<(JobIdx, (u32, u32))> {
        let mut out = Vec::new();
        ns.placements(&mut out);
        out.into_iter().map(|(j, _, k)| (j, k)).collect()
    }

    #[test]
    fn two_switches_interleave_once_a_node_is_freed() {
        // n64g8: two switches of 32 nodes.
        let sw: Vec<u32> = (0..64).map(|g| g / 32).collect();
        let mut ns = NodeSets::new(8, &sw);
        // At start the free list is switch-major: a 32-GPU job takes nodes 0..4.
        assert!(ns.place(1, 32));
        assert_eq!(keys(&ns), vec![(1, (0, 32))]);
        ns.release(1);
        // Sorted by id, the list is now s0n0, s1n0, s0n1, s1n1, ...: the next two
        // 32-GPU jobs take nodes {0, 32, 1, 33} and {2, 34, 3, 35}, and the second's
        // first GPU in switch-major order is rank 16, as the artifact logs it.
        assert!(ns.place(2, 32));
        assert!(ns.place(3, 32));
        assert_eq!(keys(&ns), vec![(2, (0, 32)), (3, (16, 32))]);
    }

    #[test]
    fn a_small_job_goes_to_the_largest_class_not_the_fullest_node() {
        let sw = vec![0u32; 4];
        let mut ns = NodeSets::new(8, &sw);
        assert!(ns.place(1, 4)); // node 0: 4 used, class 4
        assert!(ns.place(2, 2)); // node 0 takes it (class 4 > 2): 6 used, class 2
        assert!(ns.place(3, 4)); // node 1: class 4
        // A 1-GPU job: no class-1 set, so the largest class above 1 with a set (4),
        // its lowest util first: node 1, not the fuller node 0.
        assert!(ns.place(4, 1));
        let k = keys(&ns);
        assert_eq!(k, vec![(1, (0, 4)), (2, (4, 2)), (3, (8, 4)), (4, (12, 1))]);
        // Placements never overlap.
        let mut out = Vec::new();
        ns.placements(&mut out);
        let mut used = [0u64; 4];
        for (_, p, _) in &out {
            for &(g, m) in &p.parts {
                assert_eq!(used[g as usize] & m, 0);
                used[g as usize] |= m;
            }
        }
    }

    #[test]
    fn release_refiles_a_set_and_frees_empty_ones() {
        let sw = vec![0u32; 2];
        let mut ns = NodeSets::new(8, &sw);
        assert!(ns.place(1, 4));
        assert!(ns.place(2, 2));
        assert!(ns.place(3, 2));
        ns.release(2);
        ns.release(3);
        ns.release(1);
        assert_eq!(ns.free, vec![0, 1]);
        assert!(ns.lists.iter().all(Vec::is_empty));
        assert!(!ns.place(4, 256 + 1));
        assert!(ns.place(5, 16));
        assert!(!ns.place(6, 1));
    }
}
