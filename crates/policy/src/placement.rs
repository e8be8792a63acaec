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
//! * **random**: that many free GPUs drawn uniformly, wherever they are (a stream
//!   seeded by the run's seed, the job and the time).
//! * **topology**: the placement a [`Scorer`] the driver injects prices best (the
//!   simulator and the live service inject the optimal allreduce of
//!   `apiary_comm::cluster`): among single nodes that fit, the best-priced node type
//!   and within it the tightest node; when no node fits, candidates in each switch and
//!   across switches, on the fewest nodes and on one or two more, filled greedily and
//!   evenly, each priced exactly.
//!
//! All choices are deterministic (lowest index wins ties). The first three strategies
//! allocate nothing: the result is written into a reusable [`Placement`].

use std::sync::Mutex;

use apiary_model::{Cluster, ClusterState, Placement, Rng, Time};

mod refill;
pub use refill::Refill;

/// Prices placements for the topology strategy. The policies never see a network
/// model: the driver injects one ([`crate::World::set_scorer`]).
pub trait Scorer: Send + std::fmt::Debug {
    /// The cost of running one job on `parts` (each a node and the GPUs taken there);
    /// lower is better, infinite for a placement it cannot price.
    fn score(&mut self, cluster: &Cluster, parts: &[(u32, u32)]) -> f64;
}

/// Where a run keeps its scorer, if its driver injected one.
pub type ScorerSlot = Mutex<Option<Box<dyn Scorer>>>;

/// How to pick GPUs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlacementStrategy {
    /// Any free GPUs, lowest nodes first.
    Counting,
    /// One node if it fits, else whole nodes under one switch ("yarn").
    Consolidated,
    /// Consolidated, choosing the tightest node and switch.
    BestFit,
    /// Free GPUs drawn uniformly.
    Random,
    /// The fastest optimal allreduce among candidate placements.
    Topology,
}

impl PlacementStrategy {
    /// Parses `counting` | `consolidated` (alias `yarn`) | `best-fit` | `random` |
    /// `topology`.
    pub fn parse(s: &str) -> Option<PlacementStrategy> {
        match s {
            "counting" | "count" => Some(PlacementStrategy::Counting),
            "consolidated" | "yarn" => Some(PlacementStrategy::Consolidated),
            "best-fit" | "bestfit" => Some(PlacementStrategy::BestFit),
            "random" => Some(PlacementStrategy::Random),
            "topology" => Some(PlacementStrategy::Topology),
            _ => None,
        }
    }
    /// The canonical name.
    pub fn name(self) -> &'static str {
        match self {
            PlacementStrategy::Counting => "counting",
            PlacementStrategy::Consolidated => "consolidated",
            PlacementStrategy::BestFit => "best-fit",
            PlacementStrategy::Random => "random",
            PlacementStrategy::Topology => "topology",
        }
    }
    /// Every name `parse` accepts, canonical first, for help and errors.
    pub const NAMES: &'static str = "counting, consolidated (yarn), best-fit, random, topology";
}

/// What the multi-node consolidated and best-fit placements read of the free GPUs:
/// the placement index, or a refill's lighter copy ([`Refill`]).
trait FreeView {
    fn node_count(&self) -> usize;
    fn switch_count(&self) -> usize;
    fn switch_nodes(&self, s: u32) -> std::ops::Range<u32>;
    fn capacity_of(&self, n: u32) -> u32;
    fn node_idle(&self, n: u32) -> bool;
    fn free_on(&self, n: u32) -> u32;
    fn free_mask(&self, n: u32) -> u64;
    fn idle_nodes_in_switch(&self, s: u32) -> u32;
    fn max_free_bucket(&self) -> u32;
    fn largest_switch_gpus(&self) -> u64;
}

impl FreeView for ClusterState {
    fn node_count(&self) -> usize {
        ClusterState::node_count(self)
    }
    fn switch_count(&self) -> usize {
        ClusterState::switch_count(self)
    }
    fn switch_nodes(&self, s: u32) -> std::ops::Range<u32> {
        ClusterState::switch_nodes(self, s)
    }
    fn capacity_of(&self, n: u32) -> u32 {
        ClusterState::capacity_of(self, n)
    }
    fn node_idle(&self, n: u32) -> bool {
        ClusterState::node_idle(self, n)
    }
    fn free_on(&self, n: u32) -> u32 {
        ClusterState::free_on(self, n)
    }
    fn free_mask(&self, n: u32) -> u64 {
        ClusterState::free_mask(self, n)
    }
    fn idle_nodes_in_switch(&self, s: u32) -> u32 {
        ClusterState::idle_nodes_in_switch(self, s)
    }
    fn max_free_bucket(&self) -> u32 {
        ClusterState::max_free_bucket(self)
    }
    fn largest_switch_gpus(&self) -> u64 {
        ClusterState::largest_switch_gpus(self)
    }
}

/// The lowest `k` set bits of `mask` (all of them if it has fewer). Taken from the
/// low end or, when that is shorter, by clearing the highest of the rest: a job that
/// fills a node then costs no loop at all.
#[inline]
fn low_bits(mask: u64, k: u32) -> u64 {
    let have = mask.count_ones();
    if k >= have {
        return mask;
    }
    let mut m = mask;
    if k <= have - k {
        let mut out = 0;
        for _ in 0..k {
            let b = m & m.wrapping_neg();
            out |= b;
            m ^= b;
        }
        out
    } else {
        for _ in 0..have - k {
            m &= !(1u64 << (63 - m.leading_zeros()));
        }
        m
    }
}

/// What the random and topology strategies need beyond the free GPUs: the stream a
/// random draw comes from, and the scorer that prices placements.
#[derive(Clone, Copy)]
pub struct Aux<'a> {
    /// The run's seed.
    pub seed: u64,
    /// Which job is placed, and when: with the seed, they name the random stream.
    pub job: &'a str,
    /// The current time.
    pub now: Time,
    /// Prices placements; one per run, injected by the driver.
    pub scorer: &'a ScorerSlot,
}

/// Finds `gpus` GPUs; writes them to `out` (cleared first) and returns true, or
/// returns false if the strategy finds none. `random` and `topology` draw and price
/// with `aux`; without it `random` uses a stream named by the GPU count and `topology`,
/// having no scorer, finds nothing.
pub fn place(
    cluster: &Cluster,
    state: &ClusterState,
    gpus: u32,
    strategy: PlacementStrategy,
    out: &mut Placement,
) -> bool {
    place_with(cluster, state, gpus, strategy, None, out)
}

/// [`place`] with the random stream and the scorer of a run.
pub fn place_with(
    cluster: &Cluster,
    state: &ClusterState,
    gpus: u32,
    strategy: PlacementStrategy,
    aux: Option<Aux<'_>>,
    out: &mut Placement,
) -> bool {
    out.clear();
    if gpus == 0 || gpus as u64 > state.free_gpus() {
        return false;
    }
    let ok = match strategy {
        PlacementStrategy::Counting => counting(state, gpus, out),
        PlacementStrategy::Random => {
            let mut rng = match aux {
                Some(a) => Rng::stream(a.seed, &format!("random-placement/{}/{}", a.job, a.now)),
                None => Rng::stream(0, &format!("random-placement/{gpus}")),
            };
            random(state, gpus, &mut rng, out)
        }
        PlacementStrategy::Topology => {
            let Some(a) = aux else { return false };
            let mut slot = a.scorer.lock().unwrap_or_else(|e| e.into_inner());
            match slot.as_deref_mut() {
                Some(scorer) => topology(cluster, state, gpus, scorer, out),
                None => false,
            }
        }
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

/// The free GPUs of nodes of GPU type `t` only (the others shown full), for a job that
/// names a type; `None` if no node has it.
pub fn of_type(cluster: &Cluster, state: &ClusterState, t: &str) -> Option<ClusterState> {
    let mut view = state.clone();
    let mut any = false;
    for (n, node) in cluster.nodes.iter().enumerate() {
        if node.gpu_type == t {
            any = true;
            continue;
        }
        let free = view.free_mask(n as u32);
        if free != 0 {
            // Free GPUs of the view's own node: allocating them cannot fail.
            let _ = view.allocate(&Placement {
                parts: vec![(n as u32, free)],
            });
        }
    }
    any.then_some(view)
}

/// `gpus` of the free GPUs, uniformly (Floyd's sampling of distinct indices, then one
/// pass over the nodes).
fn random(state: &ClusterState, gpus: u32, rng: &mut Rng, out: &mut Placement) -> bool {
    let free = state.free_gpus();
    let mut picked: Vec<u64> = Vec::with_capacity(gpus as usize);
    for j in free - gpus as u64..free {
        let t = rng.below(j + 1);
        if picked.contains(&t) {
            picked.push(j);
        } else {
            picked.push(t);
        }
    }
    picked.sort_unstable();
    let mut next = picked.iter().copied().peekable();
    let mut base = 0u64;
    for n in 0..state.node_count() as u32 {
        let f = state.free_on(n) as u64;
        let mut mask = 0u64;
        while let Some(&i) = next.peek().filter(|&&i| i < base + f) {
            // The (i − base)-th free GPU of the node.
            let m = state.free_mask(n);
            let bit = nth_bit(m, (i - base) as u32);
            mask |= bit;
            next.next();
        }
        if mask != 0 {
            out.parts.push((n, mask));
        }
        base += f;
        if next.peek().is_none() {
            break;
        }
    }
    out.gpus() == gpus
}

fn nth_bit(mask: u64, k: u32) -> u64 {
    let mut m = mask;
    for _ in 0..k {
        m &= m - 1;
    }
    m & m.wrapping_neg()
}

/// The topology strategy: see the module's documentation.
fn topology(
    cluster: &Cluster,
    state: &ClusterState,
    gpus: u32,
    scorer: &mut dyn Scorer,
    out: &mut Placement,
) -> bool {
    let mut price = |parts: &[(u32, u32)]| scorer.score(cluster, parts);
    // One node: every node of a type prices the same, so the best type's tightest node.
    let mut best: Option<(f64, u32, u32)> = None;
    let mut types: Vec<(&apiary_model::Node, f64)> = Vec::new();
    for f in gpus..=state.max_free_bucket() {
        for n in state.nodes_with_free(f).iter() {
            let node = &cluster.nodes[n as usize];
            let same = |t: &apiary_model::Node| {
                (t.gpus, &t.gpu_type, t.intra_gbps, t.nic_gbps)
                    == (node.gpus, &node.gpu_type, node.intra_gbps, node.nic_gbps)
            };
            let s = match types.iter().find(|(t, _)| same(t)) {
                Some(&(_, s)) => s,
                None => {
                    let s = price(&[(n, gpus)]);
                    types.push((node, s));
                    s
                }
            };
            if best.is_none_or(|(bs, bf, bn)| (s, f, n) < (bs, bf, bn)) {
                best = Some((s, f, n));
            }
        }
    }
    if let Some((_, _, n)) = best {
        out.parts.push((n, low_bits(state.free_mask(n), gpus)));
        return true;
    }
    // Several nodes: per switch, then across switches.
    let mut scopes: Vec<Vec<(u32, u32)>> = (0..state.switch_count() as u32)
        .map(|s| {
            state
                .switch_nodes(s)
                .map(|n| (n, state.free_on(n)))
                .filter(|p| p.1 > 0)
                .collect()
        })
        .collect();
    scopes.push(scopes.concat());
    // The best candidate so far (its parts), keyed by price, then node count.
    let mut key = (f64::INFINITY, 0usize);
    let mut chosen: Vec<(u32, u32)> = Vec::new();
    let mut cand: Vec<(u32, u32)> = Vec::new();
    for nodes in &mut scopes {
        if nodes.iter().map(|p| p.1 as u64).sum::<u64>() < gpus as u64 {
            continue;
        }
        nodes.sort_by_key(|&(n, f)| (std::cmp::Reverse(f), n));
        let mut k_min = 0;
        let mut covered = 0;
        while covered < gpus {
            covered += nodes[k_min].1;
            k_min += 1;
        }
        for k in k_min..=(k_min + 2).min(nodes.len()) {
            for even in [false, true] {
                if !even && k > k_min {
                    continue;
                }
                fill(&nodes[..k], gpus, even, &mut cand);
                let s = price(&cand);
                if chosen.is_empty() || (s, k) < key {
                    key = (s, k);
                    chosen.clone_from(&cand);
                }
            }
        }
    }
    if chosen.is_empty() {
        return false;
    }
    for (n, g) in chosen {
        out.parts.push((n, low_bits(state.free_mask(n), g)));
    }
    true
}

/// `gpus` over `nodes` (`(node, free)`, most free first): greedily, or as evenly as
/// their free GPUs allow (water-filling).
fn fill(nodes: &[(u32, u32)], gpus: u32, even: bool, out: &mut Vec<(u32, u32)>) {
    out.clear();
    if !even {
        let mut left = gpus;
        for &(n, f) in nodes {
            let take = left.min(f);
            if take > 0 {
                out.push((n, take));
            }
            left -= take;
        }
        return;
    }
    // Nodes with the least room take all of it while that is below the even share.
    let mut left = gpus;
    let mut rest = nodes.len() as u32;
    let mut take = vec![0u32; nodes.len()];
    for (i, &(_, f)) in nodes.iter().enumerate().rev() {
        let share = left.div_ceil(rest);
        take[i] = f.min(share);
        left -= take[i];
        rest -= 1;
    }
    // Rounding may leave a remainder; the roomiest nodes absorb it.
    for (i, &(_, f)) in nodes.iter().enumerate() {
        let more = left.min(f - take[i]);
        take[i] += more;
        left -= more;
    }
    out.extend(
        nodes
            .iter()
            .zip(&take)
            .filter(|(_, t)| **t > 0)
            .map(|(&(n, _), &t)| (n, t)),
    );
}

fn first_node(state: &ClusterState, g: u32) -> Option<u32> {
    (g..=state.max_free_bucket())
        .filter_map(|f| state.nodes_with_free(f).first())
        .min()
}

fn tightest_node(state: &ClusterState, g: u32) -> Option<u32> {
    (g..=state.max_free_bucket()).find_map(|f| state.nodes_with_free(f).first())
}

fn counting(state: &ClusterState, gpus: u32, out: &mut Placement) -> bool {
    // Nodes with free GPUs in index order, read off the bucket of nodes with none (a
    // merge of the per-free-count buckets allocated and compared at every start).
    let mut need = gpus;
    for n in state.nodes_with_free_gpus() {
        let take = need.min(state.free_on(n));
        out.parts.push((n, low_bits(state.free_mask(n), take)));
        need -= take;
        if need == 0 {
            return true;
        }
    }
    false
}

/// Whole idle nodes of switch `s` (in order), then the remainder on one node of the same
/// switch. Returns false if the switch cannot host the job.
fn fill_switch<V: FreeView>(state: &V, s: u32, gpus: u32, best: bool, out: &mut Placement) -> bool {
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

fn multi_node<V: FreeView>(state: &V, gpus: u32, best: bool, out: &mut Placement) -> bool {
    let switches = state.switch_count() as u32;
    let max_cap = state.max_free_bucket() as u64;
    if gpus as u64 <= state.largest_switch_gpus() {
        let room =
            |s: &u32| state.idle_nodes_in_switch(*s) as u64 * max_cap + max_cap > gpus as u64;
        if !best {
            return (0..switches)
                .filter(room)
                .any(|s| fill_switch(state, s, gpus, best, out));
        }
        let mut order: Vec<u32> = (0..switches).filter(room).collect();
        order.sort_by_key(|&s| (state.idle_nodes_in_switch(s), s));
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

#[cfg(test)]
mod tests {
    use super::*;
    use apiary_model::ClusterSpec;

    fn setup(name: &str) -> (Cluster, ClusterState) {
        let c = ClusterSpec::preset(name).unwrap().build().unwrap();
        let s = ClusterState::new(&c);
        (c, s)
    }

    /// The lowest `k` set bits, whichever end they are found from, on every mask of 8
    /// bits and on wide random masks, for every `k` up to past the mask's count.
    #[test]
    fn low_bits_are_the_lowest_set_bits() {
        fn reference(mask: u64, k: u32) -> u64 {
            let (mut m, mut out) = (mask, 0);
            for _ in 0..k {
                let b = m & m.wrapping_neg();
                out |= b;
                m ^= b;
            }
            out
        }
        let mut masks: Vec<u64> = (0..256).collect();
        let mut x = 3u64;
        for _ in 0..500 {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            masks.push(x);
        }
        masks.push(u64::MAX);
        for &m in &masks {
            for k in 0..=66 {
                assert_eq!(low_bits(m, k), reference(m, k), "mask {m:#x}, k {k}");
            }
        }
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
    fn random_draws_free_gpus_from_its_stream() {
        let (c, mut s) = setup("n8g8");
        s.allocate(&Placement {
            parts: vec![(0, 0xff), (3, 0b1010_1010)],
        })
        .unwrap();
        let scorer = Mutex::new(None);
        let draw = |seed, job: &str, g| {
            let aux = Aux {
                seed,
                job,
                now: 7,
                scorer: &scorer,
            };
            let mut p = Placement::default();
            assert!(place_with(
                &c,
                &s,
                g,
                PlacementStrategy::Random,
                Some(aux),
                &mut p
            ));
            p
        };
        let mut seen = std::collections::BTreeSet::new();
        for seed in 0..20 {
            let p = draw(seed, "j1", 12);
            assert_eq!(p.gpus(), 12);
            for &(n, m) in &p.parts {
                assert_eq!(m & !s.free_mask(n), 0, "GPU on node {n} is taken");
            }
            assert_eq!(p, draw(seed, "j1", 12), "same seed, job and time");
            seen.insert(format!("{:?}", p.parts));
        }
        assert!(seen.len() > 15, "draws differ: {}", seen.len());
        // All free GPUs: every one of them.
        let all = draw(3, "j2", s.free_gpus() as u32);
        assert_eq!(all.gpus() as u64, s.free_gpus());
    }

    #[test]
    fn topology_without_a_scorer_finds_nothing() {
        let (c, s) = setup("n2g8");
        let mut p = Placement::default();
        assert!(!place(&c, &s, 4, PlacementStrategy::Topology, &mut p));
        assert!(p.parts.is_empty());
    }

    #[test]
    fn even_fill_respects_room() {
        let mut out = Vec::new();
        fill(&[(0, 8), (1, 8), (2, 2)], 13, true, &mut out);
        assert_eq!(out, vec![(0, 5), (1, 6), (2, 2)]);
        fill(&[(0, 8), (1, 8), (2, 2)], 13, false, &mut out);
        assert_eq!(out, vec![(0, 8), (1, 5)]);
        fill(&[(0, 3), (1, 3)], 6, true, &mut out);
        assert_eq!(out, vec![(0, 3), (1, 3)]);
    }

    #[test]
    fn a_refill_fills_in_order_and_empties_again() {
        let c = ClusterSpec::preset("n2g8").unwrap().build().unwrap();
        let mut r = Refill::default();
        for _ in 0..2 {
            assert!(r.fits(&c, 8));
            assert!(r.fits(&c, 6));
            assert!(!r.fits(&c, 4));
            assert!(r.fits(&c, 2));
            assert!(!r.fits(&c, 1));
            r.clear();
        }
    }
}
