//! ForestColl's schedule (collectives.md §1.5–1.7): from `x* = U/k`, remove the
//! switches by edge splitting so every cut the flow test needs keeps its value, then
//! pack `k` weighted spanning out-trees per compute node into what is left, and map the
//! trees' edges back to paths through the switches.
//!
//! Every step is a max-flow question on integer capacities, answered with one
//! [`MaxFlow`] network that is re-weighted and given temporary edges rather than
//! rebuilt. [`validate`] checks a schedule independently of how it was made.

use std::collections::VecDeque;

use apiary_solver::MaxFlow;
use serde::Serialize;

use crate::frac::Frac;
use crate::optimum::{Network, optimum};
use crate::topology::{NodeKind, Topology};

/// A capacity no cut can reach: marks helper edges that force a node to one side.
const INF: u64 = u64::MAX / 4;

/// One edge of a tree: a send from one compute node to another, routed along a path of
/// topology edges (through switches, or a direct link).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TreeEdge {
    /// Sending compute node (topology node index).
    pub from: u32,
    /// Receiving compute node.
    pub to: u32,
    /// Topology edge indices from `from` to `to`.
    pub path: Vec<u32>,
}

/// A weighted spanning out-tree: broadcasts `weight` of its root's `k` units.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Tree {
    /// Root compute node.
    pub root: u32,
    /// Units of the root's shard this tree carries (of `k`).
    pub weight: u64,
    /// Edges, each after the edge that reaches its sender.
    pub edges: Vec<TreeEdge>,
}

impl Tree {
    /// Longest root-to-leaf chain of sends (pipeline fill, §1.8).
    pub fn height(&self) -> u32 {
        let mut depth: std::collections::BTreeMap<u32, u32> = std::collections::BTreeMap::new();
        depth.insert(self.root, 0);
        let mut h = 0;
        for e in &self.edges {
            let d = depth.get(&e.from).copied().unwrap_or(0) + 1;
            depth.insert(e.to, d);
            h = h.max(d);
        }
        h
    }
}

/// A complete allgather schedule: `k` units per root spread over weighted trees, edge
/// `e` carrying at most `load[e]` units.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Schedule {
    /// Units per root.
    pub k: u64,
    /// Edge-load scale `U` (units per GB/s): `load[e] = U·b(e)`, rounded down in fixed-k
    /// mode.
    pub u: Frac,
    /// `U/k`, seconds per GB of shard: `x*` for the optimal schedule, at least `x*` in
    /// fixed-k mode.
    pub x: Frac,
    /// Units edge `e` may carry.
    pub load: Vec<u64>,
    /// The trees.
    pub trees: Vec<Tree>,
}

/// Why no schedule was produced.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlanError {
    /// A fixed `k` of zero.
    #[error("k must be at least 1")]
    ZeroK,
    /// The numbers outgrew 64 bits (very large k or bandwidth ratios).
    #[error("the schedule needs capacities beyond 64 bits (k = {0}); try a small fixed k")]
    Overflow(u64),
    /// An internal invariant failed: a bug, reported rather than hidden.
    #[error("internal error while planning: {0}")]
    Internal(String),
}

/// Units edge `e` may carry at scale `scale = U·(units per cap)` given as `num/den`,
/// rounded down.
fn loads(t: &Topology, num: u128, den: u128) -> Option<Vec<u64>> {
    t.edges()
        .iter()
        .map(|e| {
            u64::try_from(e.cap as u128 * num / den)
                .ok()
                .filter(|&l| l < INF / 4)
        })
        .collect()
}

/// The optimal schedule (`k = None`) or the best one with `k` units per root.
pub fn plan(t: &Topology, k: Option<u64>) -> Result<Schedule, PlanError> {
    let opt = optimum(t);
    // x* in capacity units: p/q, so U' = x·k (units per capacity unit).
    let x_units = opt.x_star.times(t.unit());
    let (k, u_units, load) = match k {
        None => {
            let u = x_units.times(Frac::int(opt.k as u128));
            let load = loads(t, u.num(), u.den()).ok_or(PlanError::Overflow(opt.k))?;
            (opt.k, u, load)
        }
        Some(0) => return Err(PlanError::ZeroK),
        Some(k) => {
            let (u, load) = fixed_k(t, x_units, k)?;
            (k, u, load)
        }
    };
    let mut d = Splitter::new(t, &load, k);
    d.split_all()?;
    let (h_edges, pieces) = d.into_compute_graph();
    let mut trees = pack(t, &h_edges, k)?;
    let trees = expand(&mut trees, &h_edges, pieces)?;
    let u = u_units.over(t.unit());
    Ok(Schedule {
        k,
        u,
        x: u.over(Frac::int(k as u128)),
        load,
        trees,
    })
}

/// Fixed-k: the smallest `U` whose rounded-down loads `⌊U·cap⌋` pass the flow test
/// with `k` units per root. It is a breakpoint `j/cap` of some capacity, so each distinct
/// capacity gets an exact integer search over `j`.
fn fixed_k(t: &Topology, x_units: Frac, k: u64) -> Result<(Frac, Vec<u64>), PlanError> {
    let mut net = Network::new(t);
    let n = t.n() as u64;
    let need = n.checked_mul(k).ok_or(PlanError::Overflow(k))?;
    let mut feasible = |num: u128, den: u128| -> Result<Option<Vec<u64>>, PlanError> {
        let load = loads(t, num, den).ok_or(PlanError::Overflow(k))?;
        net.set(load.iter().copied(), k);
        for &v in t.compute() {
            net.flow.reset();
            if net.flow.solve_up_to(net.source, v as usize, need) < need {
                return Ok(None);
            }
        }
        Ok(Some(load))
    };
    let lower = x_units.times(Frac::int(k as u128));
    let mut caps: Vec<u64> = t.edges().iter().map(|e| e.cap).collect();
    caps.sort_unstable();
    caps.dedup();
    let mut best: Option<(Frac, Vec<u64>)> = None;
    for &c in &caps {
        let c = c as u128;
        // Smallest j with j/c >= lower; then grow until feasible, then bisect.
        let lo0 = (lower.num() * c).div_ceil(lower.den());
        let mut step: u128 = 1;
        let mut lo = lo0; // j below lo are infeasible (below the real optimum) or untested
        let hi = loop {
            let j = lo0 + step - 1;
            if let Some(b) = &best
                && Frac::new(j, c) >= b.0
            {
                break None;
            }
            if feasible(j, c)?.is_some() {
                break Some(j);
            }
            lo = j + 1;
            step = step.checked_mul(2).ok_or(PlanError::Overflow(k))?;
        };
        let Some(mut hi) = hi else { continue };
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if feasible(mid, c)?.is_some() {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        let u = Frac::new(hi, c);
        if best.as_ref().is_none_or(|b| u < b.0) {
            let load =
                feasible(hi, c)?.ok_or_else(|| PlanError::Internal("fixed-k search".into()))?;
            best = Some((u, load));
        }
    }
    best.ok_or_else(|| PlanError::Internal("no feasible U in fixed-k search".into()))
}

/// A capacity-carrying piece of an edge of the split graph: `amount` units routed along
/// `path` (topology edges).
#[derive(Clone, Debug)]
struct Piece {
    amount: u64,
    path: Vec<u32>,
}

/// The flow network `D(U, k)` under edge splitting (§1.6).
struct Splitter<'a> {
    t: &'a Topology,
    flow: MaxFlow,
    s: usize,
    need: u64,
    /// Per node: (neighbour, edge id) lists, out and in.
    out: Vec<Vec<(u32, usize)>>,
    inn: Vec<Vec<(u32, usize)>>,
    /// Pieces per flow edge id / 2.
    pieces: Vec<VecDeque<Piece>>,
    is_compute: Vec<bool>,
}

impl<'a> Splitter<'a> {
    fn new(t: &'a Topology, load: &[u64], k: u64) -> Splitter<'a> {
        let n = t.nodes().len();
        let mut flow = MaxFlow::new(n + 1);
        let mut out = vec![Vec::new(); n + 1];
        let mut inn = vec![Vec::new(); n + 1];
        let mut pieces = Vec::new();
        for (i, e) in t.edges().iter().enumerate() {
            let id = flow.add_edge(e.from as usize, e.to as usize, load[i]);
            out[e.from as usize].push((e.to, id));
            inn[e.to as usize].push((e.from, id));
            pieces.push(VecDeque::from([Piece {
                amount: load[i],
                path: vec![i as u32],
            }]));
        }
        for &c in t.compute() {
            flow.add_edge(n, c as usize, k);
        }
        pieces.resize(flow.edges(), VecDeque::new());
        let mut is_compute = vec![false; n + 1];
        for &c in t.compute() {
            is_compute[c as usize] = true;
        }
        Splitter {
            t,
            flow,
            s: n,
            need: t.n() as u64 * k,
            out,
            inn,
            pieces,
            is_compute,
        }
    }

    fn cap(&self, id: usize) -> u64 {
        self.flow.capacity(id)
    }

    fn edge(&self, u: u32, v: u32) -> Option<usize> {
        self.out[u as usize]
            .iter()
            .find(|&&(x, _)| x == v)
            .map(|&(_, id)| id)
    }

    /// Smallest value, minus `N·k`, of the cuts that the split would weaken, capped at
    /// `limit`. Source side `src_side` forced together, sink side `sink` forced together,
    /// and some compute node must be on the sink side.
    fn slack(
        &mut self,
        from: usize,
        to: usize,
        helpers: &[(usize, usize)],
        free: &[u32],
        limit: u64,
    ) -> u64 {
        let keep = self.flow.edges();
        for &(a, b) in helpers {
            self.flow.add_edge(a, b, INF);
        }
        let cap = self.need + limit;
        let f = self.flow.solve_up_to(from, to, cap);
        let mut best = f;
        if f < cap {
            // Does the minimum cut leave some compute node out? Its residual source side
            // is the smallest minimum cut, so if it holds every compute node, they all do.
            let side = self.flow.min_cut_source_side(from);
            let leaves_one = self.t.compute().iter().any(|&c| !side[c as usize]);
            if !leaves_one {
                // Force each candidate compute node to the sink side in turn.
                best = cap;
                for &v in free {
                    let k2 = self.flow.edges();
                    self.flow.add_edge(v as usize, to, INF);
                    self.flow.reset();
                    let g = self.flow.solve_up_to(from, to, best);
                    best = best.min(g);
                    self.flow.truncate_edges(k2);
                }
            }
        }
        self.flow.truncate_edges(keep);
        best.saturating_sub(self.need).min(limit)
    }

    /// Largest safe split along `u → w → t`, at most `limit`.
    fn admissible(&mut self, u: u32, w: u32, t: u32, limit: u64) -> u64 {
        let (us, ws, ts, s) = (u as usize, w as usize, t as usize, self.s);
        // Cuts with u, t (and s) inside and w outside.
        let free: Vec<u32> = self
            .t
            .compute()
            .iter()
            .copied()
            .filter(|&c| c != u && c != t)
            .collect();
        let mut h1 = vec![(us, s)];
        if t != u {
            h1.push((us, ts));
        }
        let a = self.slack(us, ws, &h1, &free, limit);
        if a == 0 {
            return 0;
        }
        // Cuts with w (and s) inside and u, t outside.
        let mut h2 = vec![(ws, s)];
        if t != u {
            h2.push((us, ts));
        }
        let b = if self.is_compute[us] || self.is_compute[ts] {
            // A compute node is already outside: one flow answers it.
            let keep = self.flow.edges();
            for &(x, y) in &h2 {
                self.flow.add_edge(x, y, INF);
            }
            let cap = self.need + a;
            let f = self.flow.solve_up_to(ws, ts, cap);
            self.flow.truncate_edges(keep);
            f.saturating_sub(self.need).min(a)
        } else {
            self.slack(ws, ts, &h2, &free, a)
        };
        a.min(b)
    }

    fn split(&mut self, u: u32, t: u32, e_uw: usize, e_wt: usize, g: u64) {
        let c1 = self.cap(e_uw) - g;
        let c2 = self.cap(e_wt) - g;
        self.flow.set_capacity_no_reset(e_uw, c1);
        self.flow.set_capacity_no_reset(e_wt, c2);
        let a = take(&mut self.pieces[e_uw / 2], g);
        let b = take(&mut self.pieces[e_wt / 2], g);
        if u != t {
            let id = match self.edge(u, t) {
                Some(id) => id,
                None => {
                    let id = self.flow.add_edge(u as usize, t as usize, 0);
                    self.out[u as usize].push((t, id));
                    self.inn[t as usize].push((u, id));
                    self.pieces.resize(self.flow.edges(), VecDeque::new());
                    id
                }
            };
            let c = self.cap(id) + g;
            self.flow.set_capacity_no_reset(id, c);
            for p in join(a, b) {
                self.pieces[id / 2].push_back(p);
            }
        }
        self.flow.reset();
    }

    fn split_all(&mut self) -> Result<(), PlanError> {
        let switches: Vec<u32> = (0..self.t.nodes().len() as u32)
            .filter(|&i| self.t.nodes()[i as usize].kind == NodeKind::Switch)
            .collect();
        for w in switches {
            let ins = self.inn[w as usize].clone();
            let outs = self.out[w as usize].clone();
            for &(u, e_uw) in &ins {
                // Other out-neighbours first; the loop back to u last.
                let order = outs
                    .iter()
                    .filter(|&&(t, _)| t != u)
                    .chain(outs.iter().filter(|&&(t, _)| t == u));
                for &(t, e_wt) in order {
                    let limit = self.cap(e_uw).min(self.cap(e_wt));
                    if limit == 0 {
                        continue;
                    }
                    let g = self.admissible(u, w, t, limit);
                    if g > 0 {
                        self.split(u, t, e_uw, e_wt, g);
                    }
                    if self.cap(e_uw) == 0 {
                        break;
                    }
                }
                if self.cap(e_uw) > 0 {
                    return Err(PlanError::Internal(format!(
                        "switch '{}' could not be split off completely",
                        self.t.nodes()[w as usize].name
                    )));
                }
            }
        }
        Ok(())
    }

    /// The compute-only graph left: `(from, to, capacity)` per edge, and its pieces.
    fn into_compute_graph(self) -> ComputeGraph {
        let mut edges = Vec::new();
        let mut pieces = Vec::new();
        for (u, list) in self.out.iter().enumerate().take(self.t.nodes().len()) {
            for &(v, id) in list {
                let c = self.flow.capacity(id);
                if c > 0 && self.is_compute[u] && self.is_compute[v as usize] {
                    edges.push((u as u32, v, c));
                    pieces.push(self.pieces[id / 2].clone());
                }
            }
        }
        (edges, pieces)
    }
}

/// The compute-only graph after splitting: `(from, to, capacity)` per edge, and the
/// switch paths each edge's units run over.
type ComputeGraph = (Vec<(u32, u32, u64)>, Vec<VecDeque<Piece>>);

/// Removes `g` units from the front of `q`.
fn take(q: &mut VecDeque<Piece>, mut g: u64) -> Vec<Piece> {
    let mut out = Vec::new();
    while g > 0 {
        let front = q.front_mut().expect("pieces cover the capacity");
        if front.amount <= g {
            g -= front.amount;
            out.push(q.pop_front().expect("non-empty"));
        } else {
            front.amount -= g;
            out.push(Piece {
                amount: g,
                path: front.path.clone(),
            });
            g = 0;
        }
    }
    out
}

/// Pairs two piece lists of equal total into concatenated paths.
fn join(a: Vec<Piece>, b: Vec<Piece>) -> Vec<Piece> {
    let mut out = Vec::new();
    let (mut i, mut j) = (0, 0);
    let (mut ra, mut rb) = (
        a.first().map_or(0, |p| p.amount),
        b.first().map_or(0, |p| p.amount),
    );
    while i < a.len() && j < b.len() {
        let m = ra.min(rb);
        let mut path = a[i].path.clone();
        path.extend_from_slice(&b[j].path);
        out.push(Piece { amount: m, path });
        ra -= m;
        rb -= m;
        if ra == 0 {
            i += 1;
            ra = a.get(i).map_or(0, |p| p.amount);
        }
        if rb == 0 {
            j += 1;
            rb = b.get(j).map_or(0, |p| p.amount);
        }
    }
    out
}

/// A tree under construction on the compute-only graph: edges index `h_edges`.
struct Partial {
    root: u32,
    weight: u64,
    verts: Vec<u32>,
    edges: Vec<usize>,
    snode: usize,
}

/// Packs `k` units of spanning out-trees per root into the compute-only graph (§1.7).
fn pack(
    t: &Topology,
    h: &[(u32, u32, u64)],
    k: u64,
) -> Result<Vec<(u32, u64, Vec<usize>)>, PlanError> {
    let nodes = t.nodes().len();
    let n = t.n();
    let mut flow = MaxFlow::new(nodes);
    let mut out: Vec<Vec<(u32, usize, usize)>> = vec![Vec::new(); nodes];
    for (i, &(u, v, c)) in h.iter().enumerate() {
        let id = flow.add_edge(u as usize, v as usize, c);
        out[u as usize].push((v, id, i));
    }
    let mut queue: VecDeque<Partial> = VecDeque::new();
    for &r in t.compute() {
        let s = flow.add_node();
        flow.add_edge(s, r as usize, INF);
        queue.push_back(Partial {
            root: r,
            weight: k,
            verts: vec![r],
            edges: Vec::new(),
            snode: s,
        });
    }
    let mut live_total: u64 = k * n as u64;
    let mut done = Vec::new();
    let mut inside = vec![false; nodes];
    while let Some(mut tree) = queue.pop_front() {
        for &v in &tree.verts {
            inside[v as usize] = true;
        }
        let mut i = 0;
        while i < tree.verts.len() {
            let x = tree.verts[i];
            i += 1;
            for &(y, id, hi) in &out[x as usize] {
                let c = flow.capacity(id);
                if inside[y as usize] || c == 0 {
                    continue;
                }
                let others = live_total - tree.weight;
                let want = tree.weight.min(c);
                let keep = flow.edges();
                for p in &queue {
                    flow.add_edge(x as usize, p.snode, p.weight);
                }
                flow.reset();
                let f = flow.solve_up_to(x as usize, y as usize, others + want);
                flow.truncate_edges(keep);
                let mu = f.saturating_sub(others).min(want);
                if mu == 0 {
                    continue;
                }
                if mu < tree.weight {
                    let s = flow.add_node();
                    for &v in &tree.verts {
                        flow.add_edge(s, v as usize, INF);
                    }
                    queue.push_back(Partial {
                        root: tree.root,
                        weight: tree.weight - mu,
                        verts: tree.verts.clone(),
                        edges: tree.edges.clone(),
                        snode: s,
                    });
                    tree.weight = mu;
                }
                flow.set_capacity(id, c - mu);
                tree.edges.push(hi);
                tree.verts.push(y);
                inside[y as usize] = true;
                flow.add_edge(tree.snode, y as usize, INF);
            }
        }
        for &v in &tree.verts {
            inside[v as usize] = false;
        }
        if tree.verts.len() != n {
            return Err(PlanError::Internal(format!(
                "a tree from '{}' reached {} of {} compute nodes",
                t.nodes()[tree.root as usize].name,
                tree.verts.len(),
                n
            )));
        }
        live_total -= tree.weight;
        done.push((tree.root, tree.weight, tree.edges));
    }
    done.sort_by_key(|d| d.0);
    Ok(done)
}

/// Maps the compute-graph trees back to topology paths. An edge whose units run over
/// several paths splits its tree into trees of smaller weight, one per run of units on
/// which every edge keeps one path.
fn expand(
    trees: &mut [(u32, u64, Vec<usize>)],
    h: &[(u32, u32, u64)],
    mut pieces: Vec<VecDeque<Piece>>,
) -> Result<Vec<Tree>, PlanError> {
    let mut out = Vec::new();
    for (root, weight, edges) in trees.iter() {
        let parts: Vec<Vec<Piece>> = edges
            .iter()
            .map(|&e| take(&mut pieces[e], *weight))
            .collect();
        let mut cuts: Vec<u64> = vec![0, *weight];
        for p in &parts {
            let mut at = 0;
            for piece in p {
                at += piece.amount;
                cuts.push(at);
            }
        }
        cuts.sort_unstable();
        cuts.dedup();
        for w in cuts.windows(2) {
            let (lo, hi) = (w[0], w[1]);
            let mut tree_edges = Vec::with_capacity(edges.len());
            for (j, &e) in edges.iter().enumerate() {
                let mut at = 0;
                let piece = parts[j]
                    .iter()
                    .find(|p| {
                        at += p.amount;
                        at > lo
                    })
                    .ok_or_else(|| PlanError::Internal("tree edge without a path".into()))?;
                tree_edges.push(TreeEdge {
                    from: h[e].0,
                    to: h[e].1,
                    path: piece.path.clone(),
                });
            }
            out.push(Tree {
                root: *root,
                weight: hi - lo,
                edges: tree_edges,
            });
        }
    }
    Ok(out)
}

/// How a schedule breaks its topology (what [`validate`] finds).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidSchedule {
    /// A tree's defect.
    #[error("tree {tree}: {defect}")]
    Tree {
        /// The tree's index.
        tree: usize,
        /// What is wrong with it.
        defect: TreeDefect,
    },
    /// A root's trees do not carry `k` units together.
    #[error("root '{root}': weights add up to {sum}, not k = {k}")]
    Weights {
        /// The root's name.
        root: String,
        /// Its trees' weights added.
        sum: u64,
        /// The schedule's `k`.
        k: u64,
    },
    /// An edge carries more than its load allows.
    #[error("edge {edge}: carries {used} units, allowed {load}")]
    Overload {
        /// The edge's index.
        edge: usize,
        /// Units it carries.
        used: u64,
        /// Units allowed.
        load: u64,
    },
}

/// What is wrong with one tree.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TreeDefect {
    /// Its root is a switch.
    #[error("root is not a compute node")]
    SwitchRoot,
    /// An edge leaves a node the tree has not reached.
    #[error("sends from a node it has not reached")]
    Unreached,
    /// A node is reached twice.
    #[error("reaches a node twice")]
    Twice,
    /// An edge ends at a switch.
    #[error("an edge ends at a switch")]
    EndsAtSwitch,
    /// A path names an edge the topology lacks.
    #[error("unknown edge {0}")]
    UnknownEdge(u32),
    /// A path's edges do not follow on.
    #[error("path is not contiguous")]
    Broken,
    /// A path passes through a compute node.
    #[error("path passes through a compute node")]
    ThroughCompute,
    /// A path ends elsewhere than at its receiver.
    #[error("path does not end at the receiver")]
    WrongEnd,
    /// A compute node the tree misses.
    #[error("does not reach '{0}'")]
    Misses(String),
}

/// Checks a schedule against its topology: per root the weights add up to `k`; every
/// tree reaches every compute node once from its root; every tree edge is a path of
/// topology edges through switches only; no edge carries more than its load.
pub fn validate(t: &Topology, s: &Schedule) -> Result<(), InvalidSchedule> {
    let nodes = t.nodes();
    let mut per_root = vec![0u64; nodes.len()];
    let mut used = vec![0u64; t.edges().len()];
    for (ti, tree) in s.trees.iter().enumerate() {
        let fail = |defect| InvalidSchedule::Tree { tree: ti, defect };
        if nodes[tree.root as usize].kind != NodeKind::Compute {
            return Err(fail(TreeDefect::SwitchRoot));
        }
        per_root[tree.root as usize] += tree.weight;
        let mut reached = vec![false; nodes.len()];
        reached[tree.root as usize] = true;
        for e in &tree.edges {
            if !reached[e.from as usize] {
                return Err(fail(TreeDefect::Unreached));
            }
            if reached[e.to as usize] {
                return Err(fail(TreeDefect::Twice));
            }
            if nodes[e.to as usize].kind != NodeKind::Compute {
                return Err(fail(TreeDefect::EndsAtSwitch));
            }
            reached[e.to as usize] = true;
            let mut at = e.from;
            for (pi, &ei) in e.path.iter().enumerate() {
                let edge = t
                    .edges()
                    .get(ei as usize)
                    .ok_or_else(|| fail(TreeDefect::UnknownEdge(ei)))?;
                if edge.from != at {
                    return Err(fail(TreeDefect::Broken));
                }
                if pi > 0 && nodes[at as usize].kind != NodeKind::Switch {
                    return Err(fail(TreeDefect::ThroughCompute));
                }
                used[ei as usize] += tree.weight;
                at = edge.to;
            }
            if at != e.to {
                return Err(fail(TreeDefect::WrongEnd));
            }
        }
        if let Some(&c) = t.compute().iter().find(|&&c| !reached[c as usize]) {
            return Err(fail(TreeDefect::Misses(nodes[c as usize].name.clone())));
        }
    }
    for &c in t.compute() {
        if per_root[c as usize] != s.k {
            return Err(InvalidSchedule::Weights {
                root: nodes[c as usize].name.clone(),
                sum: per_root[c as usize],
                k: s.k,
            });
        }
    }
    for (i, (&u, &l)) in used.iter().zip(&s.load).enumerate() {
        if u > l {
            return Err(InvalidSchedule::Overload {
                edge: i,
                used: u,
                load: l,
            });
        }
    }
    Ok(())
}
