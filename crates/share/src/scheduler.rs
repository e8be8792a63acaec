//! One pod at a time onto shared GPUs, as a Kubernetes scheduler with one score plugin
//! does it: filter the nodes (CPU, memory, GPU type, GPUs that hold the pod), score
//! the rest, take the highest, break ties by a seeded node order, and let the policy
//! pick the GPUs there.
//!
//! A node's score for a pod shape depends on nothing but the node and the shape, and
//! one placement changes one node, so scores are kept per (node, shape) and computed
//! again only for a node that changed: a pod costs a lookup per node, not a score. The
//! cluster's fragmentation is kept the same way, per node.

use crate::cluster::{Demand, NodeState, Prepared, Request, Types, affinity_slot};
use crate::policy::{Context, Pick, SharePolicy};
use crate::typical::{Typical, node_frag};
use apiary_core::Rng;
use std::collections::HashMap;

/// Where a pod went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placed {
    /// Node index.
    pub node: u32,
    /// GPUs on it.
    pub pick: Pick,
}

/// Scores kept per (shape, node), valid while the node's version is the one stored.
#[derive(Default)]
struct ScoreCache {
    ids: HashMap<Demand, usize, foldhash::fast::FixedState>,
    /// Per shape: per node (the node's version when scored, score); `u32::MAX`: none.
    scores: Vec<Vec<(u32, i64)>>,
}

/// The cluster's placement state under one policy.
pub struct Scheduler {
    types: Types,
    typical: Vec<Typical>,
    nodes: Vec<NodeState>,
    version: Vec<u32>,
    /// Tie-break order: the lower rank wins.
    rank: Vec<u32>,
    policy: Box<dyn SharePolicy>,
    rng: Rng,
    cache: ScoreCache,
    frag: Vec<f64>,
    frag_total: f64,
    used_milli: i64,
    total_milli: i64,
}

impl Scheduler {
    /// A scheduler for `prep`'s empty cluster, measuring fragmentation against
    /// `typical`. `seed` orders the nodes for ties and drives the policy's draws.
    pub fn new(
        prep: &Prepared,
        typical: Vec<Typical>,
        policy: Box<dyn SharePolicy>,
        seed: u64,
    ) -> Scheduler {
        let n = prep.nodes.len();
        let mut rank: Vec<u32> = (0..n as u32).collect();
        Rng::stream(seed, "share-node-order").shuffle(&mut rank);
        let frag: Vec<f64> = prep
            .nodes
            .iter()
            .map(|s| node_frag(s, &typical, &prep.types))
            .collect();
        Scheduler {
            types: prep.types.clone(),
            frag_total: frag.iter().sum(),
            frag,
            typical,
            nodes: prep.nodes.clone(),
            version: vec![0; n],
            rank,
            policy,
            rng: Rng::stream(seed, "share-policy"),
            cache: ScoreCache::default(),
            used_milli: 0,
            total_milli: prep.nodes.iter().map(|s| s.total_left()).sum(),
        }
    }

    /// Breaks ties by `order` instead of the seeded order: node `order[0]` first.
    /// Nodes it leaves out come after, in index order.
    pub fn set_order(&mut self, order: &[usize]) {
        let n = self.nodes.len();
        let mut rank: Vec<u32> = vec![u32::MAX; n];
        for (r, &i) in order.iter().enumerate() {
            if i < n {
                rank[i] = r as u32;
            }
        }
        let unnamed = rank.iter_mut().filter(|r| **r == u32::MAX);
        for (next, r) in (order.len() as u32..).zip(unnamed) {
            *r = next;
        }
        self.rank = rank;
    }

    /// Sets node `i`'s state to what it is now, for a caller whose nodes change by
    /// more than this scheduler's placements (the live service: whole-GPU jobs, nodes
    /// going down, processes ending). A state equal to the one kept changes nothing.
    pub fn set_node(&mut self, i: usize, state: NodeState) {
        if self.nodes[i] == state {
            return;
        }
        self.used_milli += self.nodes[i].total_left() - state.total_left();
        self.nodes[i] = state;
        self.version[i] = self.version[i].wrapping_add(1);
        let f = node_frag(&self.nodes[i], &self.typical, &self.types);
        self.frag_total += f - self.frag[i];
        self.frag[i] = f;
    }

    /// Measures fragmentation, and so scores FGD, against `typical` from now on.
    pub fn set_typical(&mut self, typical: Vec<Typical>) {
        self.typical = typical;
        self.frag = self
            .nodes
            .iter()
            .map(|s| node_frag(s, &self.typical, &self.types))
            .collect();
        self.frag_total = self.frag.iter().sum();
        for v in &mut self.version {
            *v = v.wrapping_add(1);
        }
    }

    /// The GPU types and constraints.
    pub fn types(&self) -> &Types {
        &self.types
    }

    /// The nodes' states.
    pub fn nodes(&self) -> &[NodeState] {
        &self.nodes
    }

    /// GPU thousandths in use.
    pub fn used_milli(&self) -> i64 {
        self.used_milli
    }

    /// GPU thousandths idle.
    pub fn idle_milli(&self) -> i64 {
        self.total_milli - self.used_milli
    }

    /// Idle GPU thousandths fragmented for the typical pods.
    pub fn frag_milli(&self) -> f64 {
        self.frag_total
    }

    /// Places `r`, or leaves the cluster as it is and returns `None` when no node
    /// can take it.
    pub fn place(&mut self, r: &Request) -> Option<Placed> {
        let node = if self.policy.random_node() {
            self.draw_node(r)?
        } else {
            self.best_node(r)?
        };
        let cx = Context {
            types: &self.types,
            typical: &self.typical,
        };
        let n = self.nodes[node];
        let pick = if r.demand.num == 0 {
            Pick::default()
        } else {
            self.policy.pick(&n, &r.demand, &cx, &mut self.rng)
        };
        self.apply(node, r, &pick, 1);
        Some(Placed {
            node: node as u32,
            pick,
        })
    }

    /// Gives back what `r` took at `at`.
    pub fn release(&mut self, r: &Request, at: &Placed) {
        self.apply(at.node as usize, r, &at.pick, -1);
    }

    fn draw_node(&mut self, r: &Request) -> Option<usize> {
        // Candidates in rank order, as the artifact lists its nodes, then one drawn.
        let mut fit: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| fits(&self.types, &self.nodes[i], r))
            .collect();
        if fit.is_empty() {
            return None;
        }
        fit.sort_unstable_by_key(|&i| self.rank[i]);
        Some(fit[self.rng.below(fit.len() as u64) as usize])
    }

    fn best_node(&mut self, r: &Request) -> Option<usize> {
        let n = self.nodes.len();
        let next = self.cache.ids.len();
        let shape = *self.cache.ids.entry(r.demand).or_insert(next);
        if shape == self.cache.scores.len() {
            self.cache.scores.push(vec![(u32::MAX, 0); n]);
        }
        let cx = Context {
            types: &self.types,
            typical: &self.typical,
        };
        let mut best: Option<(i64, u32, usize)> = None;
        for i in 0..n {
            let node = &self.nodes[i];
            if !fits(cx.types, node, r) {
                continue;
            }
            let slot = &mut self.cache.scores[shape][i];
            let score = if slot.0 == self.version[i] {
                slot.1
            } else {
                let s = self.policy.score(node, &r.demand, &cx);
                *slot = (self.version[i], s);
                s
            };
            let rank = self.rank[i];
            if best.is_none_or(|(bs, br, _)| score > bs || (score == bs && rank < br)) {
                best = Some((score, rank, i));
            }
        }
        best.map(|(_, _, i)| i)
    }

    fn apply(&mut self, i: usize, r: &Request, pick: &Pick, sign: i64) {
        let n = &mut self.nodes[i];
        n.cpu_left -= sign * r.cpu;
        n.mem_left -= sign * r.mem;
        for &g in pick.gpus() {
            n.gpu_left[usize::from(g)] -= (sign as i32) * r.demand.milli;
        }
        if let Some(slot) = affinity_slot(&r.demand) {
            n.affinity[slot] = n.affinity[slot].wrapping_add_signed(sign as i16);
        }
        self.used_milli += sign * i64::from(r.demand.milli) * pick.gpus().len() as i64;
        self.version[i] = self.version[i].wrapping_add(1);
        let f = node_frag(&self.nodes[i], &self.typical, &self.types);
        self.frag_total += f - self.frag[i];
        self.frag[i] = f;
    }
}

/// Kubernetes' filter as FGD's simulator runs it: the node has the CPU and memory, and
/// for a pod with GPUs, GPUs of an allowed type each with the thousandths it asks.
fn fits(types: &Types, n: &NodeState, r: &Request) -> bool {
    let d = &r.demand;
    n.cpu_left >= r.cpu
        && n.mem_left >= r.mem
        && (d.num == 0
            || (n.gpus > 0 && types.accessible(n.ty, d.spec) && n.gpus_fit(d.milli, d.num)))
}
