//! Dinic's maximum flow on a directed graph with integer capacities.
//!
//! Integer capacities keep results exact (ForestColl needs exact cut ratios) and
//! deterministic. Edges are stored in one arena with their reverse edge at `index ^ 1`;
//! adjacency lists keep insertion order, so the flow found, not only its value, is a
//! function of the input alone.

/// A flow network under construction and its solver.
#[derive(Clone, Debug, Default)]
pub struct MaxFlow {
    head: Vec<Vec<u32>>,
    to: Vec<u32>,
    cap: Vec<u64>,
    /// Capacities as given, so a network can be solved again from zero flow without
    /// being rebuilt (ForestColl solves one network for every sink, many times over).
    orig: Vec<u64>,
    level: Vec<u32>,
    path: Vec<u32>,
    iter: Vec<usize>,
    queue: Vec<u32>,
}

const UNSEEN: u32 = u32::MAX;

impl MaxFlow {
    /// A network with `n` nodes and no edges.
    pub fn new(n: usize) -> MaxFlow {
        MaxFlow {
            head: vec![Vec::new(); n],
            ..MaxFlow::default()
        }
    }

    /// Adds a node with no edges and returns its index.
    pub fn add_node(&mut self) -> usize {
        self.head.push(Vec::new());
        self.head.len() - 1
    }

    /// Number of nodes.
    pub fn nodes(&self) -> usize {
        self.head.len()
    }

    /// Adds a directed edge `u → v` with capacity `c` and returns its id. Panics only on a
    /// node index out of range (a caller bug, not input).
    pub fn add_edge(&mut self, u: usize, v: usize, c: u64) -> usize {
        assert!(
            u < self.nodes() && v < self.nodes(),
            "edge endpoint out of range"
        );
        let id = self.to.len();
        self.to.push(v as u32);
        self.cap.push(c);
        self.orig.push(c);
        self.head[u].push(id as u32);
        self.to.push(u as u32);
        self.cap.push(0);
        self.orig.push(0);
        self.head[v].push(id as u32 + 1);
        id
    }

    /// Flow currently on edge `id` (as returned by [`MaxFlow::add_edge`]).
    pub fn flow(&self, id: usize) -> u64 {
        self.cap[id ^ 1]
    }

    /// Number of edges added so far (ids are `0, 2, 4, ...` below twice this).
    pub fn edges(&self) -> usize {
        self.to.len() / 2
    }

    /// Capacity edge `id` was given.
    pub fn capacity(&self, id: usize) -> u64 {
        self.orig[id]
    }

    /// Removes all flow: every edge is back at the capacity it was given.
    pub fn reset(&mut self) {
        self.cap.copy_from_slice(&self.orig);
    }

    /// Changes the capacity of edge `id` and removes all flow.
    pub fn set_capacity(&mut self, id: usize, c: u64) {
        self.orig[id] = c;
        self.reset();
    }

    /// Changes the capacity of edge `id` without touching any flow: for callers that set
    /// many capacities and then call [`MaxFlow::reset`] once.
    pub fn set_capacity_no_reset(&mut self, id: usize, c: u64) {
        self.orig[id] = c;
    }

    /// Removes the edges added after the first `keep` (temporary helper edges) and all
    /// flow.
    pub fn truncate_edges(&mut self, keep: usize) {
        let keep_ids = 2 * keep;
        if keep_ids >= self.to.len() {
            self.reset();
            return;
        }
        // Edges are appended to adjacency lists in id order, so the removed ones sit at
        // the tails of the lists.
        for id in (keep_ids..self.to.len()).rev() {
            let u = self.to[id ^ 1] as usize;
            let popped = self.head[u].pop();
            debug_assert_eq!(popped, Some(id as u32));
        }
        self.to.truncate(keep_ids);
        self.cap.truncate(keep_ids);
        self.orig.truncate(keep_ids);
        self.reset();
    }

    fn bfs(&mut self, s: usize, t: usize) -> bool {
        self.level.clear();
        self.level.resize(self.nodes(), UNSEEN);
        self.queue.clear();
        self.level[s] = 0;
        self.queue.push(s as u32);
        let mut i = 0;
        while i < self.queue.len() {
            let u = self.queue[i] as usize;
            i += 1;
            for &e in &self.head[u] {
                let v = self.to[e as usize] as usize;
                if self.cap[e as usize] > 0 && self.level[v] == UNSEEN {
                    self.level[v] = self.level[u] + 1;
                    self.queue.push(v as u32);
                }
            }
        }
        self.level[t] != UNSEEN
    }

    /// One augmenting path in the level graph, found iteratively (no recursion, so deep
    /// graphs cannot overflow the stack).
    fn augment(&mut self, s: usize, t: usize) -> u64 {
        let mut path = std::mem::take(&mut self.path);
        path.clear();
        let pushed = self.augment_along(s, t, &mut path);
        self.path = path;
        pushed
    }

    fn augment_along(&mut self, s: usize, t: usize, path: &mut Vec<u32>) -> u64 {
        let mut u = s;
        loop {
            if u == t {
                let push = path
                    .iter()
                    .map(|&e| self.cap[e as usize])
                    .min()
                    .unwrap_or(0);
                for &e in path.iter() {
                    self.cap[e as usize] -= push;
                    self.cap[e as usize ^ 1] += push;
                }
                return push;
            }
            let mut advanced = false;
            while self.iter[u] < self.head[u].len() {
                let e = self.head[u][self.iter[u]] as usize;
                let v = self.to[e] as usize;
                if self.cap[e] > 0 && self.level[v] == self.level[u] + 1 {
                    path.push(e as u32);
                    u = v;
                    advanced = true;
                    break;
                }
                self.iter[u] += 1;
            }
            if !advanced {
                // Dead end: retreat and never try this node's exhausted edges again.
                match path.pop() {
                    None => return 0,
                    Some(e) => {
                        u = self.to[e as usize ^ 1] as usize;
                        self.iter[u] += 1;
                    }
                }
            }
        }
    }

    /// Pushes a maximum flow from `s` to `t` (on top of any flow already there) and
    /// returns the amount added.
    pub fn solve(&mut self, s: usize, t: usize) -> u64 {
        self.solve_up_to(s, t, u64::MAX)
    }

    /// Like [`MaxFlow::solve`] but stops once at least `limit` has been added: for
    /// feasibility tests that only ask whether the flow reaches a threshold. A result
    /// below `limit` is the maximum flow, and the residual graph then holds a minimum cut.
    pub fn solve_up_to(&mut self, s: usize, t: usize, limit: u64) -> u64 {
        if s == t {
            return 0;
        }
        let mut total = 0u64;
        while total < limit && self.bfs(s, t) {
            self.iter.clear();
            self.iter.resize(self.nodes(), 0);
            while total < limit {
                let f = self.augment(s, t);
                if f == 0 {
                    break;
                }
                total = total.saturating_add(f);
            }
        }
        total
    }

    /// After [`MaxFlow::solve`], the source side of a minimum cut: nodes reachable from
    /// `s` in the residual graph.
    pub fn min_cut_source_side(&self, s: usize) -> Vec<bool> {
        let mut seen = vec![false; self.nodes()];
        let mut stack = vec![s];
        seen[s] = true;
        while let Some(u) = stack.pop() {
            for &e in &self.head[u] {
                let v = self.to[e as usize] as usize;
                if self.cap[e as usize] > 0 && !seen[v] {
                    seen[v] = true;
                    stack.push(v);
                }
            }
        }
        seen
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn textbook_network() {
        // CLRS figure 26.1: max flow 23.
        let mut g = MaxFlow::new(6);
        for &(u, v, c) in &[
            (0, 1, 16),
            (0, 2, 13),
            (2, 1, 4),
            (1, 3, 12),
            (3, 2, 9),
            (2, 4, 14),
            (4, 3, 7),
            (3, 5, 20),
            (4, 5, 4),
        ] {
            g.add_edge(u, v, c);
        }
        assert_eq!(g.solve(0, 5), 23);
        let side = g.min_cut_source_side(0);
        assert!(side[0] && !side[5]);
        assert_eq!(g.solve(0, 5), 0, "a second solve adds nothing");
    }

    /// Smallest s-t cut by enumerating every node subset.
    fn brute_min_cut(n: usize, edges: &[(usize, usize, u64)], s: usize, t: usize) -> u64 {
        let mut best = u64::MAX;
        for mask in 0u32..(1 << n) {
            if mask & (1 << s) == 0 || mask & (1 << t) != 0 {
                continue;
            }
            let cut: u64 = edges
                .iter()
                .filter(|&&(u, v, _)| mask & (1 << u) != 0 && mask & (1 << v) == 0)
                .map(|e| e.2)
                .sum();
            best = best.min(cut);
        }
        best
    }

    proptest! {
        #[test]
        fn max_flow_equals_brute_force_min_cut(
            n in 2usize..8,
            raw in proptest::collection::vec((0usize..8, 0usize..8, 0u64..20), 0..30),
        ) {
            let edges: Vec<(usize, usize, u64)> =
                raw.into_iter().map(|(u, v, c)| (u % n, v % n, c)).filter(|e| e.0 != e.1).collect();
            let mut g = MaxFlow::new(n);
            let ids: Vec<usize> = edges.iter().map(|&(u, v, c)| g.add_edge(u, v, c)).collect();
            let f = g.solve(0, n - 1);
            prop_assert_eq!(f, brute_min_cut(n, &edges, 0, n - 1));
            // Capacity and conservation hold on the flow found.
            let mut net = vec![0i128; n];
            for (&(u, v, c), &id) in edges.iter().zip(&ids) {
                prop_assert!(g.flow(id) <= c);
                net[u] -= g.flow(id) as i128;
                net[v] += g.flow(id) as i128;
            }
            for (x, &b) in net.iter().enumerate() {
                if x != 0 && x != n - 1 {
                    prop_assert_eq!(b, 0);
                }
            }
            prop_assert_eq!(net[n - 1], f as i128);
            // The residual cut has exactly the flow's value.
            let side = g.min_cut_source_side(0);
            let cut: u64 = edges.iter().filter(|e| side[e.0] && !side[e.1]).map(|e| e.2).sum();
            prop_assert_eq!(cut, f);
        }
    }
}

#[cfg(test)]
mod petgraph_cross_check {
    use super::MaxFlow;
    use petgraph::graph::{DiGraph, NodeIndex};
    use proptest::prelude::*;

    proptest! {
        /// The same value as petgraph's Dinic on random graphs up to 30 nodes, including
        /// after `reset`, `set_capacity` and `truncate_edges`, which the ForestColl
        /// planner leans on.
        #[test]
        fn agrees_with_petgraph(
            n in 2usize..30,
            raw in proptest::collection::vec((0usize..30, 0usize..30, 0u64..50), 0..120),
            extra in proptest::collection::vec((0usize..30, 0usize..30, 0u64..50), 0..10),
        ) {
            let edges: Vec<(usize, usize, u64)> =
                raw.into_iter().map(|(u, v, c)| (u % n, v % n, c)).filter(|e| e.0 != e.1).collect();
            let value = |edges: &[(usize, usize, u64)]| {
                let mut g: DiGraph<(), u64> = DiGraph::new();
                let ids: Vec<NodeIndex> = (0..n).map(|_| g.add_node(())).collect();
                for &(u, v, c) in edges {
                    g.add_edge(ids[u], ids[v], c);
                }
                petgraph::algo::dinics(&g, ids[0], ids[n - 1]).0
            };
            let mut mf = MaxFlow::new(n);
            for &(u, v, c) in &edges {
                mf.add_edge(u, v, c);
            }
            prop_assert_eq!(mf.solve(0, n - 1), value(&edges));
            // Temporary edges, then removed: back to the original value.
            let keep = mf.edges();
            let mut with = edges.clone();
            for &(u, v, c) in &extra {
                let (u, v) = (u % n, v % n);
                if u != v {
                    mf.add_edge(u, v, c);
                    with.push((u, v, c));
                }
            }
            mf.reset();
            prop_assert_eq!(mf.solve(0, n - 1), value(&with));
            mf.truncate_edges(keep);
            prop_assert_eq!(mf.solve(0, n - 1), value(&edges));
            // Halve every capacity.
            let halved: Vec<(usize, usize, u64)> = edges.iter().map(|&(u, v, c)| (u, v, c / 2)).collect();
            for (i, &(_, _, c)) in halved.iter().enumerate() {
                mf.set_capacity_no_reset(2 * i, c);
            }
            mf.reset();
            prop_assert_eq!(mf.solve(0, n - 1), value(&halved));
            // An early stop reports at least the limit, or the exact maximum below it.
            mf.reset();
            let full = value(&halved);
            let got = mf.solve_up_to(0, n - 1, full / 2 + 1);
            prop_assert!(got >= (full / 2 + 1).min(full) && got <= full);
        }
    }
}
