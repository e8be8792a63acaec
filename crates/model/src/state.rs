//! Which GPUs are free right now, indexed for fast placement.
//!
//! Every GPU is a bit in its node's mask, so a double booking is detectable at the
//! moment it would happen. Nodes are also bucketed by their free-GPU count, so a
//! placement strategy finds "the first node with at least g free GPUs" in
//! O(G N/64) word reads at worst (bitsets) instead of scanning every node: the
//! simulator calls this on every start.

use crate::cluster::Cluster;
use crate::nodeset::NodeSet;

/// A set of GPUs: per node, a bit mask of GPU indices.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Placement {
    /// `(node index, GPU mask)` pairs, one per node used, in increasing node order.
    pub parts: Vec<(u32, u64)>,
}

impl Placement {
    /// Number of GPUs.
    #[inline]
    pub fn gpus(&self) -> u32 {
        self.parts.iter().map(|(_, m)| m.count_ones()).sum()
    }
    /// Number of distinct nodes.
    pub fn nodes(&self) -> usize {
        self.parts.len()
    }
    /// Removes all parts, keeping the allocation for reuse.
    pub fn clear(&mut self) {
        self.parts.clear();
    }
    /// Adds the GPUs of `mask` on `node`, keeping the parts in node order.
    pub fn add(&mut self, node: u32, mask: u64) {
        match self.parts.binary_search_by_key(&node, |p| p.0) {
            Ok(i) => self.parts[i].1 |= mask,
            Err(i) => self.parts.insert(i, (node, mask)),
        }
    }
}

/// An allocation request that would break the cluster's invariants.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum StateError {
    /// A GPU is already in use.
    #[error("GPU {gpu} of node {node} is already allocated")]
    DoubleBooked {
        /// Node index.
        node: u32,
        /// GPU index within the node.
        gpu: u32,
    },
    /// A GPU index or node index does not exist.
    #[error("node {node} has no GPU set {mask:#x}")]
    NoSuchGpu {
        /// Node index.
        node: u32,
        /// The offending mask.
        mask: u64,
    },
    /// Releasing a GPU that was free.
    #[error("GPU {gpu} of node {node} is not allocated")]
    NotAllocated {
        /// Node index.
        node: u32,
        /// GPU index.
        gpu: u32,
    },
}

/// Free-GPU bookkeeping for one cluster.
#[derive(Clone, Debug)]
pub struct ClusterState {
    free_mask: Vec<u64>,
    full_mask: Vec<u64>,
    switch_of: Vec<u32>,
    free_total: u64,
    by_free: Vec<NodeSet>,
    full_free_per_switch: Vec<u32>,
    switch_first: Vec<u32>,
    switch_nodes: Vec<u32>,
    /// Per node: out of service (down for repair, cordoned); empty until one is. The
    /// driver holds such a node's free GPUs itself; this says why they are taken.
    down: Vec<bool>,
    /// The GPUs of the nodes out of service (planners read it on their hot paths).
    down_gpus: u32,
    /// The GPUs under the largest switch.
    largest_switch: u64,
}

impl ClusterState {
    /// All GPUs free.
    pub fn new(cluster: &Cluster) -> ClusterState {
        let full_mask: Vec<u64> = cluster
            .nodes
            .iter()
            .map(|n| {
                if n.gpus == 64 {
                    u64::MAX
                } else {
                    (1u64 << n.gpus) - 1
                }
            })
            .collect();
        let mut by_free = vec![
            NodeSet::with_capacity(cluster.nodes.len());
            cluster.max_gpus_per_node as usize + 1
        ];
        for (i, n) in cluster.nodes.iter().enumerate() {
            by_free[n.gpus as usize].insert(i as u32);
        }
        let largest_switch = cluster
            .switches
            .iter()
            .map(|s| {
                let nodes = s.first_node as usize..(s.first_node + s.nodes) as usize;
                full_mask
                    .get(nodes)
                    .unwrap_or(&[])
                    .iter()
                    .map(|m| m.count_ones() as u64)
                    .sum()
            })
            .max()
            .unwrap_or(0);
        ClusterState {
            largest_switch,
            free_mask: full_mask.clone(),
            full_mask,
            switch_of: cluster.nodes.iter().map(|n| n.switch).collect(),
            free_total: cluster.total_gpus as u64,
            by_free,
            full_free_per_switch: cluster.switches.iter().map(|s| s.nodes).collect(),
            switch_first: cluster.switches.iter().map(|s| s.first_node).collect(),
            switch_nodes: cluster.switches.iter().map(|s| s.nodes).collect(),
            down: Vec::new(),
            down_gpus: 0,
        }
    }

    /// Marks node `n` out of service (down, cordoned) or back in: policies that size
    /// their plans to the cluster plan on the nodes in service.
    pub fn set_down(&mut self, n: u32, down: bool) {
        if down && self.down.is_empty() {
            self.down = vec![false; self.free_mask.len()];
        }
        if let Some(d) = self.down.get_mut(n as usize)
            && *d != down
        {
            *d = down;
            let gpus = self.full_mask[n as usize].count_ones();
            if down {
                self.down_gpus += gpus;
            } else {
                self.down_gpus -= gpus;
            }
        }
    }

    /// The GPUs of the nodes out of service.
    pub fn down_gpus(&self) -> u32 {
        self.down_gpus
    }

    /// Whether node `n` is out of service.
    pub fn is_down(&self, n: u32) -> bool {
        self.down.get(n as usize).copied().unwrap_or(false)
    }

    /// Free GPUs in the whole cluster.
    pub fn free_gpus(&self) -> u64 {
        self.free_total
    }
    /// Number of nodes.
    pub fn node_count(&self) -> usize {
        self.free_mask.len()
    }
    /// Free GPUs on one node.
    pub fn free_on(&self, node: u32) -> u32 {
        self.free_mask[node as usize].count_ones()
    }
    /// Capacity of one node.
    pub fn capacity_of(&self, node: u32) -> u32 {
        self.full_mask[node as usize].count_ones()
    }
    /// Free-GPU mask of one node.
    pub fn free_mask(&self, node: u32) -> u64 {
        self.free_mask[node as usize]
    }
    /// Whether every GPU of the node is free.
    pub fn node_idle(&self, node: u32) -> bool {
        self.free_mask[node as usize] == self.full_mask[node as usize]
    }
    /// Nodes with exactly `f` free GPUs, in node order.
    pub fn nodes_with_free(&self, f: u32) -> &NodeSet {
        static EMPTY: NodeSet = NodeSet::EMPTY;
        self.by_free.get(f as usize).unwrap_or(&EMPTY)
    }
    /// Nodes with at least one free GPU, in index order: those outside the bucket of
    /// nodes with none, a word of 64 nodes at a time.
    pub fn nodes_with_free_gpus(&self) -> impl Iterator<Item = u32> + '_ {
        let nodes = self.free_mask.len();
        let none_free = &self.by_free[0];
        (0..nodes.div_ceil(64)).flat_map(move |w| {
            let tail = nodes - w * 64;
            let valid = if tail >= 64 {
                u64::MAX
            } else {
                (1u64 << tail) - 1
            };
            crate::nodeset::word_members(w, !none_free.word(w) & valid)
        })
    }

    /// Largest per-node GPU count.
    pub fn max_free_bucket(&self) -> u32 {
        self.by_free.len() as u32 - 1
    }
    /// Number of switches.
    pub fn switch_count(&self) -> usize {
        self.switch_first.len()
    }
    /// Node range of a switch.
    pub fn switch_nodes(&self, s: u32) -> std::ops::Range<u32> {
        let f = self.switch_first[s as usize];
        f..f + self.switch_nodes[s as usize]
    }
    /// Fully idle nodes under a switch.
    pub fn idle_nodes_in_switch(&self, s: u32) -> u32 {
        self.full_free_per_switch[s as usize]
    }
    /// The GPUs under the largest switch, free or not.
    pub fn largest_switch_gpus(&self) -> u64 {
        self.largest_switch
    }
    /// Switch of a node.
    pub fn switch_of(&self, node: u32) -> u32 {
        self.switch_of[node as usize]
    }

    #[inline]
    fn set_mask(&mut self, node: u32, new: u64) {
        let n = node as usize;
        let old = self.free_mask[n];
        let full = self.full_mask[n];
        let (fo, fnew) = (old.count_ones() as usize, new.count_ones() as usize);
        if fo != fnew {
            self.by_free[fo].remove(node);
            self.by_free[fnew].insert(node);
        }
        let s = self.switch_of[n] as usize;
        if old == full && new != full {
            self.full_free_per_switch[s] -= 1;
        } else if old != full && new == full {
            self.full_free_per_switch[s] += 1;
        }
        self.free_total = self.free_total + fnew as u64 - fo as u64;
        self.free_mask[n] = new;
    }

    /// Checks that every GPU of `p` exists and is free.
    pub fn check_free(&self, p: &Placement) -> Result<(), StateError> {
        for &(node, mask) in &p.parts {
            let full = *self
                .full_mask
                .get(node as usize)
                .ok_or(StateError::NoSuchGpu { node, mask })?;
            if mask & !full != 0 || mask == 0 {
                return Err(StateError::NoSuchGpu { node, mask });
            }
            let busy = mask & !self.free_mask[node as usize];
            if busy != 0 {
                return Err(StateError::DoubleBooked {
                    node,
                    gpu: busy.trailing_zeros(),
                });
            }
        }
        Ok(())
    }

    /// Marks the GPUs of `p` busy; fails without changing anything if any is taken.
    pub fn allocate(&mut self, p: &Placement) -> Result<(), StateError> {
        self.check_free(p)?;
        for &(node, mask) in &p.parts {
            let m = self.free_mask[node as usize] & !mask;
            self.set_mask(node, m);
        }
        Ok(())
    }

    /// Marks the GPUs of `p` free again.
    pub fn release(&mut self, p: &Placement) -> Result<(), StateError> {
        for &(node, mask) in &p.parts {
            let full = *self
                .full_mask
                .get(node as usize)
                .ok_or(StateError::NoSuchGpu { node, mask })?;
            if mask & !full != 0 {
                return Err(StateError::NoSuchGpu { node, mask });
            }
            let already = mask & self.free_mask[node as usize];
            if already != 0 {
                return Err(StateError::NotAllocated {
                    node,
                    gpu: already.trailing_zeros(),
                });
            }
        }
        for &(node, mask) in &p.parts {
            let m = self.free_mask[node as usize] | mask;
            self.set_mask(node, m);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ClusterSpec;

    #[test]
    fn allocate_release_and_double_booking() {
        let c = ClusterSpec::preset("n2g4").unwrap().build().unwrap();
        let mut s = ClusterState::new(&c);
        assert_eq!(s.free_gpus(), 8);
        let p = Placement {
            parts: vec![(0, 0b0011), (1, 0b1111)],
        };
        s.allocate(&p).unwrap();
        assert_eq!(s.free_gpus(), 2);
        assert_eq!(s.nodes_with_free(2).iter().collect::<Vec<_>>(), vec![0]);
        assert_eq!(s.nodes_with_free(0).iter().collect::<Vec<_>>(), vec![1]);
        assert_eq!(s.idle_nodes_in_switch(0), 0);
        let q = Placement {
            parts: vec![(0, 0b0110)],
        };
        assert_eq!(
            s.allocate(&q),
            Err(StateError::DoubleBooked { node: 0, gpu: 1 })
        );
        assert_eq!(s.free_gpus(), 2, "failed allocation changes nothing");
        s.release(&p).unwrap();
        assert_eq!(s.free_gpus(), 8);
        assert_eq!(s.idle_nodes_in_switch(0), 2);
        assert!(s.release(&p).is_err());
        assert!(
            s.allocate(&Placement {
                parts: vec![(0, 0b1_0000)]
            })
            .is_err()
        );
    }

    /// The nodes with free GPUs, read off the bucket of nodes with none, are the merge
    /// of every other bucket in index order, on a cluster whose node count is not a
    /// multiple of 64, as GPUs are taken and given back at random.
    #[test]
    fn nodes_with_free_gpus_are_the_other_buckets_merged() {
        let c = ClusterSpec::preset("n130g4").unwrap().build().unwrap();
        let mut s = ClusterState::new(&c);
        let mut held: Vec<Placement> = Vec::new();
        let mut x = 7u64;
        for _ in 0..3_000 {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            if !(x >> 33).is_multiple_of(3) || held.is_empty() {
                let node = ((x >> 40) % 130) as u32;
                let free = s.free_mask(node);
                if free != 0 {
                    let p = Placement {
                        parts: vec![(node, free & free.wrapping_neg())],
                    };
                    s.allocate(&p).unwrap();
                    held.push(p);
                }
            } else {
                let p = held.swap_remove(((x >> 40) as usize) % held.len());
                s.release(&p).unwrap();
            }
            let mut want: Vec<u32> = (1..=s.max_free_bucket())
                .flat_map(|f| s.nodes_with_free(f).iter())
                .collect();
            want.sort_unstable();
            assert_eq!(s.nodes_with_free_gpus().collect::<Vec<_>>(), want);
        }
    }
}
