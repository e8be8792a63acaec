//! Choosing which GPUs a job gets.
//!
//! Three strategies, as the Tiresias-family simulators name them:
//!
//! * **counting**: any free GPUs, lowest-numbered nodes first. The job may span nodes
//!   freely (Tiresias' `count`).
//! * **consolidated** ("yarn"): a job that fits in a node gets one node (the
//!   lowest-numbered with room); a larger job takes whole idle nodes under one switch,
//!   with any remainder on one more node of that switch. A job larger than every switch
//!   spans consecutive switches, whole nodes first.
//! * **best-fit**: like consolidated, but picks the node with the fewest free GPUs that
//!   still fits, and the switch with the fewest idle nodes that still suffices, to keep
//!   large holes for large jobs.
//!
//! All choices are deterministic (lowest index wins ties). Nothing is allocated here:
//! the result is written into a reusable [`Placement`].

use apiary_model::{Cluster, ClusterState, Placement};

/// How to pick GPUs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlacementStrategy {
    /// Any free GPUs, lowest nodes first.
    Counting,
    /// One node if it fits, else whole nodes under one switch ("yarn").
    Consolidated,
    /// Consolidated, choosing the tightest node and switch.
    BestFit,
}

impl PlacementStrategy {
    /// Parses `counting` | `consolidated` (alias `yarn`) | `best-fit`.
    pub fn parse(s: &str) -> Option<PlacementStrategy> {
        match s {
            "counting" | "count" => Some(PlacementStrategy::Counting),
            "consolidated" | "yarn" => Some(PlacementStrategy::Consolidated),
            "best-fit" | "bestfit" => Some(PlacementStrategy::BestFit),
            _ => None,
        }
    }
    /// The canonical name.
    pub fn name(self) -> &'static str {
        match self {
            PlacementStrategy::Counting => "counting",
            PlacementStrategy::Consolidated => "consolidated",
            PlacementStrategy::BestFit => "best-fit",
        }
    }
}

fn low_bits(mask: u64, k: u32) -> u64 {
    let mut m = mask;
    let mut out = 0;
    for _ in 0..k {
        let b = m & m.wrapping_neg();
        out |= b;
        m ^= b;
    }
    out
}

/// Finds `gpus` GPUs; writes them to `out` (cleared first) and returns true, or
/// returns false if the strategy finds none.
pub fn place(
    cluster: &Cluster,
    state: &ClusterState,
    gpus: u32,
    strategy: PlacementStrategy,
    out: &mut Placement,
) -> bool {
    out.clear();
    if gpus == 0 || gpus as u64 > state.free_gpus() {
        return false;
    }
    let ok = match strategy {
        PlacementStrategy::Counting => counting(state, gpus, out),
        PlacementStrategy::Consolidated | PlacementStrategy::BestFit => {
            let best = strategy == PlacementStrategy::BestFit;
            if gpus <= cluster.max_gpus_per_node {
                match if best {
                    tightest_node(state, gpus)
                } else {
                    first_node(state, gpus)
                } {
                    Some(n) => {
                        out.parts.push((n, low_bits(state.free_mask(n), gpus)));
                        true
                    }
                    // A job that fits one node never spans nodes under consolidation
                    // (the yarn rule), unless no node of the cluster is large enough
                    // for it, which the check above excludes.
                    None => false,
                }
            } else {
                multi_node(state, gpus, best, out)
            }
        }
    };
    if ok {
        out.parts.sort_unstable_by_key(|p| p.0);
    } else {
        out.clear();
    }
    ok
}

fn first_node(state: &ClusterState, g: u32) -> Option<u32> {
    (g..=state.max_free_bucket())
        .filter_map(|f| state.nodes_with_free(f).first().copied())
        .min()
}

fn tightest_node(state: &ClusterState, g: u32) -> Option<u32> {
    (g..=state.max_free_bucket()).find_map(|f| state.nodes_with_free(f).first().copied())
}

fn counting(state: &ClusterState, gpus: u32, out: &mut Placement) -> bool {
    // K-way merge of the per-free-count buckets, so nodes come in index order without
    // scanning idle-less nodes.
    let mut iters: Vec<_> = (1..=state.max_free_bucket())
        .map(|f| state.nodes_with_free(f).iter().copied().peekable())
        .collect();
    let mut need = gpus;
    while need > 0 {
        let mut best: Option<(u32, usize)> = None;
        for (k, it) in iters.iter_mut().enumerate() {
            if let Some(&n) = it.peek()
                && best.is_none_or(|(b, _)| n < b)
            {
                best = Some((n, k));
            }
        }
        let Some((n, k)) = best else { return false };
        iters[k].next();
        let take = need.min(state.free_on(n));
        out.parts.push((n, low_bits(state.free_mask(n), take)));
        need -= take;
    }
    true
}

/// Whole idle nodes of switch `s` (in order), then the remainder on one node of the same
/// switch. Returns false if the switch cannot host the job.
fn fill_switch(state: &ClusterState, s: u32, gpus: u32, best: bool, out: &mut Placement) -> bool {
    let start = out.parts.len();
    let mut need = gpus;
    for n in state.switch_nodes(s) {
        let cap = state.capacity_of(n);
        if need >= cap && state.node_idle(n) {
            out.parts.push((n, state.free_mask(n)));
            need -= cap;
            if need == 0 {
                return true;
            }
        }
    }
    // Remainder: a node not yet used with room.
    let mut pick: Option<(u32, u32)> = None;
    for n in state.switch_nodes(s) {
        let f = state.free_on(n);
        if f >= need && !out.parts[start..].iter().any(|p| p.0 == n) {
            if !best {
                pick = Some((n, f));
                break;
            }
            if pick.is_none_or(|(_, pf)| f < pf) {
                pick = Some((n, f));
            }
        }
    }
    match pick {
        Some((n, _)) => {
            out.parts.push((n, low_bits(state.free_mask(n), need)));
            true
        }
        None => {
            out.parts.truncate(start);
            false
        }
    }
}

fn switch_gpus(state: &ClusterState, s: u32) -> u64 {
    state
        .switch_nodes(s)
        .map(|n| state.capacity_of(n) as u64)
        .sum()
}

fn multi_node(state: &ClusterState, gpus: u32, best: bool, out: &mut Placement) -> bool {
    let switches = state.switch_count() as u32;
    let max_cap = state.max_free_bucket();
    let largest_switch = (0..switches)
        .map(|s| switch_gpus(state, s))
        .max()
        .unwrap_or(0);
    if gpus as u64 <= largest_switch {
        let mut order: Vec<u32> = (0..switches)
            .filter(|&s| {
                state.idle_nodes_in_switch(s) as u64 * max_cap as u64 + max_cap as u64 > gpus as u64
            })
            .collect();
        if best {
            order.sort_by_key(|&s| (state.idle_nodes_in_switch(s), s));
        }
        return order
            .into_iter()
            .any(|s| fill_switch(state, s, gpus, best, out));
    }
    // Larger than any switch: whole idle nodes across switches in order, then the
    // remainder on the first node with room.
    let mut need = gpus;
    for n in 0..state.node_count() as u32 {
        let cap = state.capacity_of(n);
        if need >= cap && state.node_idle(n) {
            out.parts.push((n, state.free_mask(n)));
            need -= cap;
            if need == 0 {
                return true;
            }
        }
    }
    for n in 0..state.node_count() as u32 {
        if state.free_on(n) >= need && !out.parts.iter().any(|p| p.0 == n) {
            out.parts.push((n, low_bits(state.free_mask(n), need)));
            return true;
        }
    }
    false
}

/// An emptied copy of the cluster filled in priority order: the artifacts' passes that
/// empty the cluster and place jobs again to see which fit (Muri's candidates and
/// groups, Themis' chosen jobs). Its state and placements are reused between passes.
#[derive(Debug, Default)]
pub struct Refill {
    state: Option<ClusterState>,
    /// Placements taken this pass (`held[..used]`); later entries are spare buffers.
    held: Vec<Placement>,
    used: usize,
    p: Placement,
}

impl Refill {
    /// Places `gpus` GPUs by `strategy` on what this pass has left free, and takes
    /// them; false (taking nothing) if they do not fit.
    pub fn fits(&mut self, cluster: &Cluster, gpus: u32, strategy: PlacementStrategy) -> bool {
        let state = self.state.get_or_insert_with(|| ClusterState::new(cluster));
        if !place(cluster, state, gpus, strategy, &mut self.p) || state.allocate(&self.p).is_err() {
            return false;
        }
        if self.used == self.held.len() {
            self.held.push(Placement::default());
        }
        std::mem::swap(&mut self.held[self.used], &mut self.p);
        self.used += 1;
        true
    }

    /// Empties the copy for the next pass.
    pub fn clear(&mut self) {
        if let Some(state) = &mut self.state {
            for q in &self.held[..self.used] {
                state.release(q).expect("placed on this state");
            }
        }
        self.used = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use apiary_model::ClusterSpec;

    fn setup(name: &str) -> (Cluster, ClusterState) {
        let c = ClusterSpec::preset(name).unwrap().build().unwrap();
        let s = ClusterState::new(&c);
        (c, s)
    }

    #[test]
    fn consolidated_prefers_one_node() {
        let (c, mut s) = setup("n4g4");
        let mut p = Placement::default();
        s.allocate(&Placement {
            parts: vec![(0, 0b0111), (1, 0b0001)],
        })
        .unwrap();
        assert!(place(&c, &s, 3, PlacementStrategy::Consolidated, &mut p));
        assert_eq!(p.parts, vec![(1, 0b1110)]);
        assert!(place(&c, &s, 4, PlacementStrategy::Consolidated, &mut p));
        assert_eq!(p.parts, vec![(2, 0b1111)]);
        // Best-fit takes the tightest node: node 0 has exactly one free GPU.
        assert!(place(&c, &s, 1, PlacementStrategy::BestFit, &mut p));
        assert_eq!(p.parts, vec![(0, 0b1000)]);
        // Counting spreads from the lowest node.
        assert!(place(&c, &s, 5, PlacementStrategy::Counting, &mut p));
        assert_eq!(p.parts, vec![(0, 0b1000), (1, 0b1110), (2, 0b0001)]);
        assert_eq!(p.gpus(), 5);
    }

    #[test]
    fn multi_node_within_switch() {
        let (c, mut s) = setup("n64g8");
        let mut p = Placement::default();
        assert!(place(&c, &s, 20, PlacementStrategy::Consolidated, &mut p));
        assert_eq!(p.nodes(), 3);
        assert!(p.parts.iter().all(|(n, _)| *n < 32));
        s.allocate(&p).unwrap();
        // 256 GPUs = one whole switch; the first switch is partly used, so the second.
        assert!(place(&c, &s, 256, PlacementStrategy::Consolidated, &mut p));
        assert!(p.parts.iter().all(|(n, _)| (32..64).contains(n)));
        // Larger than any switch: spans switches.
        let (c2, s2) = setup("n64g8");
        assert!(place(
            &c2,
            &s2,
            300,
            PlacementStrategy::Consolidated,
            &mut p
        ));
        assert_eq!(p.gpus(), 300);
        assert!(!place(&c2, &s2, 513, PlacementStrategy::Counting, &mut p));
        assert!(p.parts.is_empty());
    }

    #[test]
    fn a_refill_fills_in_order_and_empties_again() {
        let c = ClusterSpec::preset("n2g8").unwrap().build().unwrap();
        let mut r = Refill::default();
        for _ in 0..2 {
            assert!(r.fits(&c, 8, PlacementStrategy::Consolidated));
            assert!(r.fits(&c, 6, PlacementStrategy::Consolidated));
            assert!(!r.fits(&c, 4, PlacementStrategy::Consolidated));
            assert!(r.fits(&c, 2, PlacementStrategy::Consolidated));
            assert!(!r.fits(&c, 1, PlacementStrategy::Consolidated));
            r.clear();
        }
    }
}
