//! The artifacts' passes that empty the cluster and place jobs again, in priority
//! order, to see which fit (Muri's candidates and groups, Themis' chosen jobs).
//!
//! Such a pass only takes GPUs, never gives any back, until it empties the copy
//! again. So the lowest node with `g` free GPUs never moves down during a pass, and
//! one cursor per size finds it, where the placement index moves every node it
//! touches between buckets of free counts. A pass places hundreds of jobs on a
//! copy of the whole cluster, every scheduling event.

use super::{FreeView, low_bits, multi_node};
use apiary_model::{Cluster, ClusterState, Placement};

/// An emptied copy of the cluster filled in priority order under the consolidated
/// strategy; its state and placement buffer are reused between passes.
#[derive(Debug, Default)]
pub struct Refill {
    fill: Option<Fill>,
    /// Whether this pass took anything from the copy.
    used: bool,
    p: Placement,
}

impl Refill {
    /// Places `gpus` GPUs as the consolidated strategy would on what this pass has
    /// left free, and takes them; false (taking nothing) if they do not fit.
    ///
    /// Inlined, with jobs that span nodes out of line: a pass asks this for every
    /// candidate and every group (hundreds each event), nearly all within one node,
    /// and the call with the multi-node path's registers saved cost more than the fit.
    #[inline]
    pub fn fits(&mut self, cluster: &Cluster, gpus: u32) -> bool {
        if gpus > cluster.max_gpus_per_node {
            return self.fits_across(cluster, gpus);
        }
        let f = Fill::of(&mut self.fill, cluster);
        if gpus == 0 || gpus as u64 > f.free_total {
            return false;
        }
        let Some(n) = f.first_with(gpus) else {
            return false;
        };
        let m = low_bits(f.free[n as usize], gpus);
        f.take(n, m);
        self.used = true;
        true
    }

    /// [`Refill::fits`] for a job larger than any node.
    #[inline(never)]
    fn fits_across(&mut self, cluster: &Cluster, gpus: u32) -> bool {
        let f = Fill::of(&mut self.fill, cluster);
        if gpus as u64 > f.free_total {
            return false;
        }
        self.p.clear();
        if !multi_node(&*f, gpus, false, &mut self.p) {
            return false;
        }
        for &(n, m) in &self.p.parts {
            f.take(n, m);
        }
        self.used = true;
        true
    }

    /// Empties the copy for the next pass.
    pub fn clear(&mut self) {
        if let Some(f) = &mut self.fill
            && std::mem::take(&mut self.used)
        {
            f.clear();
        }
    }
}

/// The free GPUs of the copy: per node its mask, per switch its idle nodes, and per
/// size the lowest node that may still have that many free.
#[derive(Debug)]
struct Fill {
    free: Vec<u64>,
    full: Vec<u64>,
    switch_of: Vec<u32>,
    switch_first: Vec<u32>,
    switch_len: Vec<u32>,
    idle: Vec<u32>,
    free_total: u64,
    capacity: u64,
    max_cap: u32,
    largest_switch: u64,
    /// For each size `g`, no node below `cursor[g]` has `g` GPUs free.
    cursor: Vec<u32>,
}

impl Fill {
    /// The copy in `slot`, made (all GPUs free) the first time a pass asks.
    #[inline]
    fn of<'a>(slot: &'a mut Option<Fill>, cluster: &Cluster) -> &'a mut Fill {
        slot.get_or_insert_with(|| Fill::new(&ClusterState::new(cluster)))
    }

    /// All GPUs of `state` free (a fresh index: nothing taken, nothing down).
    fn new(state: &ClusterState) -> Fill {
        let nodes = state.node_count() as u32;
        let switches = state.switch_count() as u32;
        let full: Vec<u64> = (0..nodes).map(|n| state.free_mask(n)).collect();
        let ranges: Vec<_> = (0..switches).map(|s| state.switch_nodes(s)).collect();
        let capacity = full.iter().map(|m| m.count_ones() as u64).sum();
        Fill {
            free: full.clone(),
            capacity,
            free_total: capacity,
            full,
            switch_of: (0..nodes).map(|n| state.switch_of(n)).collect(),
            switch_first: ranges.iter().map(|r| r.start).collect(),
            switch_len: ranges.iter().map(|r| r.end - r.start).collect(),
            idle: ranges.iter().map(|r| r.end - r.start).collect(),
            max_cap: state.max_free_bucket(),
            largest_switch: state.largest_switch_gpus(),
            cursor: vec![0; state.max_free_bucket() as usize + 1],
        }
    }

    /// The lowest node with at least `g` free GPUs (`g` at most the largest node).
    #[inline]
    fn first_with(&mut self, g: u32) -> Option<u32> {
        let c = &mut self.cursor[g as usize];
        while let Some(&m) = self.free.get(*c as usize) {
            if m.count_ones() >= g {
                return Some(*c);
            }
            *c += 1;
        }
        None
    }

    /// Takes the free GPUs `mask` of node `n`.
    #[inline]
    fn take(&mut self, n: u32, mask: u64) {
        let i = n as usize;
        debug_assert_eq!(mask & !self.free[i], 0, "takes only free GPUs");
        if self.free[i] == self.full[i] && mask != 0 {
            self.idle[self.switch_of[i] as usize] -= 1;
        }
        self.free[i] &= !mask;
        self.free_total -= mask.count_ones() as u64;
    }

    /// Every GPU free again.
    fn clear(&mut self) {
        self.free.copy_from_slice(&self.full);
        self.idle.copy_from_slice(&self.switch_len);
        self.cursor.fill(0);
        self.free_total = self.capacity;
    }
}

impl FreeView for Fill {
    fn node_count(&self) -> usize {
        self.free.len()
    }
    fn switch_count(&self) -> usize {
        self.switch_first.len()
    }
    fn switch_nodes(&self, s: u32) -> std::ops::Range<u32> {
        let f = self.switch_first[s as usize];
        f..f + self.switch_len[s as usize]
    }
    fn capacity_of(&self, n: u32) -> u32 {
        self.full[n as usize].count_ones()
    }
    fn node_idle(&self, n: u32) -> bool {
        self.free[n as usize] == self.full[n as usize]
    }
    fn free_on(&self, n: u32) -> u32 {
        self.free[n as usize].count_ones()
    }
    fn free_mask(&self, n: u32) -> u64 {
        self.free[n as usize]
    }
    fn idle_nodes_in_switch(&self, s: u32) -> u32 {
        self.idle[s as usize]
    }
    fn max_free_bucket(&self) -> u32 {
        self.max_cap
    }
    fn largest_switch_gpus(&self) -> u64 {
        self.largest_switch
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement::{PlacementStrategy, place};
    use apiary_model::ClusterSpec;

    /// Mixed node sizes under three switches, the largest switch smaller than the
    /// cluster, so that every path of the consolidated strategy is taken.
    const MIXED: &str = r#"
name = "mixed"
[[switches]]
[[switches.nodes]]
count = 3
gpus = 8
[[switches.nodes]]
count = 2
gpus = 4
[[switches]]
[[switches.nodes]]
count = 5
gpus = 2
[[switches]]
[[switches.nodes]]
count = 4
gpus = 6
"#;

    /// A refill accepts exactly the jobs that placing each on the placement index
    /// and allocating it accepts, and takes the same GPUs, over random passes of
    /// random sizes (some larger than any switch or than the cluster), on uniform,
    /// Philly-shaped and mixed clusters.
    #[test]
    fn refill_takes_what_consolidated_placement_takes() {
        let clusters = [
            ClusterSpec::preset("philly").unwrap().build().unwrap(),
            ClusterSpec::preset("n130g4").unwrap().build().unwrap(),
            ClusterSpec::from_toml_str(MIXED, "mixed")
                .unwrap()
                .build()
                .unwrap(),
        ];
        let mut x = 11u64;
        let mut next = |below: u64| {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (x >> 33) % below
        };
        for cluster in &clusters {
            let mut refill = Refill::default();
            let total = cluster.total_gpus as u64;
            let mut accepted = 0;
            for _pass in 0..40 {
                let mut state = ClusterState::new(cluster);
                let mut p = Placement::default();
                for _ in 0..200 {
                    let g = match next(10) {
                        0 => 1 + next(total + 8) as u32,
                        1..=3 => 1 + next(3 * cluster.max_gpus_per_node as u64) as u32,
                        _ => 1 + next(cluster.max_gpus_per_node as u64) as u32,
                    };
                    let want = place(cluster, &state, g, PlacementStrategy::Consolidated, &mut p)
                        && state.allocate(&p).is_ok();
                    assert_eq!(
                        refill.fits(cluster, g),
                        want,
                        "{} GPUs on {}",
                        g,
                        cluster.name
                    );
                    accepted += usize::from(want);
                    let f = refill.fill.as_ref().unwrap();
                    for n in 0..state.node_count() as u32 {
                        assert_eq!(f.free[n as usize], state.free_mask(n));
                    }
                    for s in 0..state.switch_count() as u32 {
                        assert_eq!(f.idle[s as usize], state.idle_nodes_in_switch(s));
                    }
                    assert_eq!(f.free_total, state.free_gpus());
                }
                refill.clear();
            }
            assert!(accepted > 300, "{accepted} placements on {}", cluster.name);
        }
    }
}
