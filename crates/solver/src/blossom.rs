//! Edmonds' weighted blossom algorithm, primal–dual, O(V³) on a dense weight matrix
//! (Galil, "Efficient algorithms for finding maximum matching in graphs", ACM
//! Computing Surveys 1986, §3–4).
//!
//! Written here rather than taken from a crate: `integer-blossom` 1.2.1 never returns
//! on some four-vertex graphs (see the regression test in `matching.rs`).
//!
//! Vertices are 1..=n inside; blossoms get numbers n+1..=2n. Dual variables are kept
//! doubled (`lab`), so with integer weights every quantity stays an integer: the
//! vertices of one alternating tree share a parity, and blossom duals move by 2δ.

const UNLABELLED: i8 = -1;
const EVEN: i8 = 0;
const ODD: i8 = 1;

#[derive(Clone, Copy, Default)]
struct Edge {
    u: u32,
    v: u32,
    w: i64,
}

/// Reusable working memory: callers that solve many instances (Muri solves one per
/// GPU count per event) keep one and avoid reallocating the O(V²) tables.
#[derive(Default)]
pub struct Blossom {
    n: usize,
    nx: usize,
    stride: usize,
    g: Vec<Edge>,
    lab: Vec<i64>,
    mate: Vec<u32>,
    slack: Vec<u32>,
    st: Vec<u32>,
    pa: Vec<u32>,
    flower_from: Vec<u32>,
    label: Vec<i8>,
    vis: Vec<u64>,
    stamp: u64,
    flower: Vec<Vec<u32>>,
    queue: std::collections::VecDeque<u32>,
}

impl std::fmt::Debug for Blossom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Blossom")
            .field("n", &self.n)
            .finish_non_exhaustive()
    }
}

impl Blossom {
    /// A solver with no memory reserved yet.
    pub fn new() -> Blossom {
        Blossom::default()
    }

    fn reset(&mut self, n: usize) {
        self.n = n;
        self.nx = n;
        self.stride = 2 * n + 1;
        let s = self.stride;
        self.g.clear();
        self.g.resize(s * s, Edge::default());
        for u in 1..s {
            for v in 1..s {
                self.g[u * s + v] = Edge {
                    u: u as u32,
                    v: v as u32,
                    w: 0,
                };
            }
        }
        for (vec, val) in [
            (&mut self.mate, 0u32),
            (&mut self.slack, 0),
            (&mut self.pa, 0),
        ] {
            vec.clear();
            vec.resize(s, val);
        }
        self.st.clear();
        self.st.extend(0..s as u32);
        self.lab.clear();
        self.lab.resize(s, 0);
        self.label.clear();
        self.label.resize(s, UNLABELLED);
        self.vis.clear();
        self.vis.resize(s, 0);
        self.stamp = 0;
        self.flower_from.clear();
        self.flower_from.resize(s * (n + 1), 0);
        for x in 1..=n {
            self.flower_from[x * (n + 1) + x] = x as u32;
        }
        self.flower.resize_with(s, Vec::new);
        for f in &mut self.flower {
            f.clear();
        }
        self.queue.clear();
    }

    #[inline]
    fn e(&self, u: u32, v: u32) -> Edge {
        self.g[u as usize * self.stride + v as usize]
    }

    #[inline]
    fn ff(&self, b: u32, x: u32) -> u32 {
        self.flower_from[b as usize * (self.n + 1) + x as usize]
    }

    /// Twice the edge's reduced cost; zero means the edge is tight.
    #[inline]
    fn delta(&self, e: Edge) -> i64 {
        self.lab[e.u as usize] + self.lab[e.v as usize] - e.w * 2
    }

    fn update_slack(&mut self, u: u32, x: u32) {
        let s = self.slack[x as usize];
        if s == 0 || self.delta(self.e(u, x)) < self.delta(self.e(s, x)) {
            self.slack[x as usize] = u;
        }
    }

    fn set_slack(&mut self, x: u32) {
        self.slack[x as usize] = 0;
        for u in 1..=self.n as u32 {
            if self.e(u, x).w > 0
                && self.st[u as usize] != x
                && self.label[self.st[u as usize] as usize] == EVEN
            {
                self.update_slack(u, x);
            }
        }
    }

    fn push(&mut self, x: u32) {
        if x as usize <= self.n {
            self.queue.push_back(x);
        } else {
            for i in 0..self.flower[x as usize].len() {
                let y = self.flower[x as usize][i];
                self.push(y);
            }
        }
    }

    fn set_st(&mut self, x: u32, b: u32) {
        self.st[x as usize] = b;
        if x as usize > self.n {
            for i in 0..self.flower[x as usize].len() {
                let y = self.flower[x as usize][i];
                self.set_st(y, b);
            }
        }
    }

    /// Position of sub-blossom `xr` in blossom `b`, turning the cycle so that the
    /// path from the base to it has even length.
    fn even_position(&mut self, b: u32, xr: u32) -> usize {
        let f = &mut self.flower[b as usize];
        let pr = f.iter().position(|&y| y == xr).expect("sub-blossom of b");
        if pr % 2 == 1 {
            f[1..].reverse();
            f.len() - pr
        } else {
            pr
        }
    }

    fn set_mate(&mut self, u: u32, v: u32) {
        let e = self.e(u, v);
        self.mate[u as usize] = e.v;
        if u as usize > self.n {
            let xr = self.ff(u, e.u);
            let pr = self.even_position(u, xr);
            for i in 0..pr {
                let (a, b) = (self.flower[u as usize][i], self.flower[u as usize][i ^ 1]);
                self.set_mate(a, b);
            }
            self.set_mate(xr, v);
            self.flower[u as usize].rotate_left(pr);
        }
    }

    fn augment(&mut self, mut u: u32, mut v: u32) {
        loop {
            let xnv = self.st[self.mate[u as usize] as usize];
            self.set_mate(u, v);
            if xnv == 0 {
                return;
            }
            let t = self.st[self.pa[xnv as usize] as usize];
            self.set_mate(xnv, t);
            u = t;
            v = xnv;
        }
    }

    fn lca(&mut self, mut u: u32, mut v: u32) -> u32 {
        self.stamp += 1;
        while u != 0 || v != 0 {
            if u != 0 {
                if self.vis[u as usize] == self.stamp {
                    return u;
                }
                self.vis[u as usize] = self.stamp;
                u = self.st[self.mate[u as usize] as usize];
                if u != 0 {
                    u = self.st[self.pa[u as usize] as usize];
                }
            }
            std::mem::swap(&mut u, &mut v);
        }
        0
    }

    /// Appends the tree path from `x` up to `lca` to a new blossom's cycle, queueing
    /// the odd vertices it passes (they become even inside the blossom).
    fn walk_to(&mut self, f: &mut Vec<u32>, mut x: u32, lca: u32) {
        while x != lca {
            let y = self.st[self.mate[x as usize] as usize];
            f.push(x);
            f.push(y);
            self.push(y);
            x = self.st[self.pa[y as usize] as usize];
        }
    }

    fn add_blossom(&mut self, u: u32, lca: u32, v: u32) {
        let mut b = self.n as u32 + 1;
        while (b as usize) <= self.nx && self.st[b as usize] != 0 {
            b += 1;
        }
        if b as usize > self.nx {
            self.nx += 1;
        }
        let bu = b as usize;
        self.lab[bu] = 0;
        self.label[bu] = EVEN;
        self.mate[bu] = self.mate[lca as usize];
        let mut f = std::mem::take(&mut self.flower[bu]);
        f.clear();
        f.push(lca);
        self.walk_to(&mut f, u, lca);
        f[1..].reverse();
        self.walk_to(&mut f, v, lca);
        self.flower[bu] = f;
        self.set_st(b, b);
        let s = self.stride;
        for x in 1..=self.nx {
            self.g[bu * s + x].w = 0;
            self.g[x * s + bu].w = 0;
        }
        let n1 = self.n + 1;
        for x in 1..=self.n {
            self.flower_from[bu * n1 + x] = 0;
        }
        for i in 0..self.flower[bu].len() {
            let xs = self.flower[bu][i] as usize;
            for x in 1..=self.nx {
                let cand = self.g[xs * s + x];
                if self.g[bu * s + x].w == 0 || self.delta(cand) < self.delta(self.g[bu * s + x]) {
                    self.g[bu * s + x] = cand;
                    self.g[x * s + bu] = self.g[x * s + xs];
                }
            }
            for x in 1..=self.n {
                if self.flower_from[xs * n1 + x] != 0 {
                    self.flower_from[bu * n1 + x] = xs as u32;
                }
            }
        }
        self.set_slack(b);
    }

    fn expand_blossom(&mut self, b: u32) {
        let bu = b as usize;
        for i in 0..self.flower[bu].len() {
            let y = self.flower[bu][i];
            self.set_st(y, y);
        }
        let xr = self.ff(b, self.e(b, self.pa[bu]).u);
        let pr = self.even_position(b, xr);
        let mut i = 0;
        while i < pr {
            let xs = self.flower[bu][i];
            let xns = self.flower[bu][i + 1];
            self.pa[xs as usize] = self.e(xns, xs).u;
            self.label[xs as usize] = ODD;
            self.label[xns as usize] = EVEN;
            self.slack[xs as usize] = 0;
            self.set_slack(xns);
            self.push(xns);
            i += 2;
        }
        self.label[xr as usize] = ODD;
        self.pa[xr as usize] = self.pa[bu];
        for i in pr + 1..self.flower[bu].len() {
            let xs = self.flower[bu][i];
            self.label[xs as usize] = UNLABELLED;
            self.set_slack(xs);
        }
        self.st[bu] = 0;
    }

    /// A tight edge from an even vertex: grow the tree, augment, or form a blossom.
    /// True when the matching grew.
    fn on_tight(&mut self, e: Edge) -> bool {
        let (u, v) = (self.st[e.u as usize], self.st[e.v as usize]);
        match self.label[v as usize] {
            UNLABELLED => {
                self.pa[v as usize] = e.u;
                self.label[v as usize] = ODD;
                let nu = self.st[self.mate[v as usize] as usize];
                self.slack[v as usize] = 0;
                self.slack[nu as usize] = 0;
                self.label[nu as usize] = EVEN;
                self.push(nu);
            }
            EVEN => {
                let l = self.lca(u, v);
                if l == 0 {
                    self.augment(u, v);
                    self.augment(v, u);
                    return true;
                }
                self.add_blossom(u, l, v);
            }
            _ => {}
        }
        false
    }

    /// One stage: grow alternating trees from every exposed vertex, adjusting duals,
    /// until the matching grows (true) or no positive gain is left (false).
    fn stage(&mut self) -> bool {
        for x in 1..=self.nx {
            self.label[x] = UNLABELLED;
            self.slack[x] = 0;
        }
        self.queue.clear();
        for x in 1..=self.nx as u32 {
            if self.st[x as usize] == x && self.mate[x as usize] == 0 {
                self.pa[x as usize] = 0;
                self.label[x as usize] = EVEN;
                self.push(x);
            }
        }
        if self.queue.is_empty() {
            return false;
        }
        loop {
            while let Some(u) = self.queue.pop_front() {
                if self.label[self.st[u as usize] as usize] == ODD {
                    continue;
                }
                for v in 1..=self.n as u32 {
                    let e = self.e(u, v);
                    if e.w > 0 && self.st[u as usize] != self.st[v as usize] {
                        if self.delta(e) == 0 {
                            if self.on_tight(e) {
                                return true;
                            }
                        } else {
                            let sv = self.st[v as usize];
                            self.update_slack(u, sv);
                        }
                    }
                }
            }
            let mut d = i64::MAX;
            for b in self.n + 1..=self.nx {
                if self.st[b] as usize == b && self.label[b] == ODD {
                    d = d.min(self.lab[b] / 2);
                }
            }
            for x in 1..=self.nx {
                let s = self.slack[x];
                if self.st[x] as usize == x && s != 0 {
                    let dx = self.delta(self.e(s, x as u32));
                    match self.label[x] {
                        UNLABELLED => d = d.min(dx),
                        EVEN => d = d.min(dx / 2),
                        _ => {}
                    }
                }
            }
            // An even vertex's dual reaching zero means no augmenting path of positive
            // gain is left. Checked before any dual moves: `d` may still be the
            // sentinel, which must not be added anywhere.
            if (1..=self.n).any(|u| self.label[self.st[u] as usize] == EVEN && self.lab[u] <= d) {
                return false;
            }
            for u in 1..=self.n {
                match self.label[self.st[u] as usize] {
                    EVEN => self.lab[u] -= d,
                    ODD => self.lab[u] += d,
                    _ => {}
                }
            }
            for b in self.n + 1..=self.nx {
                if self.st[b] as usize == b {
                    match self.label[b] {
                        EVEN => self.lab[b] += d * 2,
                        ODD => self.lab[b] -= d * 2,
                        _ => {}
                    }
                }
            }
            self.queue.clear();
            for x in 1..=self.nx as u32 {
                let s = self.slack[x as usize];
                if self.st[x as usize] == x
                    && s != 0
                    && self.st[s as usize] != x
                    && self.delta(self.e(s, x)) == 0
                    && self.on_tight(self.e(s, x))
                {
                    return true;
                }
            }
            for b in self.n as u32 + 1..=self.nx as u32 {
                if self.st[b as usize] == b
                    && self.label[b as usize] == ODD
                    && self.lab[b as usize] == 0
                {
                    self.expand_blossom(b);
                }
            }
        }
    }

    /// Maximum-weight matching of vertices 0..n given as a dense, symmetric `n × n`
    /// weight matrix (row-major; entries ≤ 0 are no edge). Returns each vertex's mate.
    pub fn solve(&mut self, n: usize, weights: &[i64]) -> Vec<Option<usize>> {
        debug_assert_eq!(weights.len(), n * n);
        if n == 0 {
            return Vec::new();
        }
        self.reset(n);
        let s = self.stride;
        let mut w_max = 0;
        for u in 0..n {
            for v in 0..n {
                let w = weights[u * n + v].max(0);
                self.g[(u + 1) * s + v + 1].w = w;
                w_max = w_max.max(w);
            }
        }
        for u in 1..=n {
            self.lab[u] = w_max;
        }
        while self.stage() {}
        (1..=n)
            .map(|u| match self.mate[u] {
                0 => None,
                m => Some(m as usize - 1),
            })
            .collect()
    }
}
