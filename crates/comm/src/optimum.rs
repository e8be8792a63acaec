//! The optimal allgather factor `x*`: the worst ratio, over vertex sets `S` holding
//! some compute nodes but not all, of the compute nodes inside `S` to the bandwidth
//! leaving `S` (collectives.md §1.2). ForestColl proves pipelined spanning trees reach
//! it, so an allgather of `M` bytes over `N` GPUs takes `(M/N)·x*` at best.
//!
//! Found exactly by Newton (Dinkelbach) iteration on the cut ratio (§1.4): test the
//! current `x` with one max-flow per compute node; every violated cut has a larger
//! ratio, so jump to the largest and repeat. No floating point, and each step is a real
//! cut, so the final cut certifies the answer.

use apiary_solver::MaxFlow;
use serde::Serialize;

use crate::frac::{Frac, gcd};
use crate::topology::Topology;

/// The optimum and its certificate.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Optimum {
    /// `x*` in seconds per GB of shard: an allgather of `M` GB over `N` compute nodes
    /// takes `(M/N)·x*` seconds at best.
    pub x_star: Frac,
    /// Node indices of the bottleneck cut's side `S` (the set data has to leave).
    pub cut: Vec<u32>,
    /// Compute nodes in `S`.
    pub cut_compute: u32,
    /// Bandwidth leaving `S`, GB/s.
    pub cut_bandwidth: Frac,
    /// Trees per root in the optimal packing (`x* = U/k`).
    pub k: u64,
    /// Edge-load scale: edge `e` carries at most `U·b(e)` tree units (`b` in GB/s).
    pub u: Frac,
    /// Newton steps taken (each one max-flow per compute node).
    pub iterations: u32,
    /// Max-flow calls made.
    pub maxflows: u32,
}

/// The flow network `D` of §1.3: the topology plus a super-source with an edge to every
/// compute node, set up once and re-weighted for each candidate `x`.
pub(crate) struct Network {
    pub(crate) flow: MaxFlow,
    pub(crate) source: usize,
    edges: usize,
}

impl Network {
    pub(crate) fn new(t: &Topology) -> Network {
        let n = t.nodes().len();
        let mut flow = MaxFlow::new(n + 1);
        for e in t.edges() {
            flow.add_edge(e.from as usize, e.to as usize, e.cap);
        }
        for &c in t.compute() {
            flow.add_edge(n, c as usize, 1);
        }
        Network {
            flow,
            source: n,
            edges: t.edges().len(),
        }
    }

    /// Edge capacities `scale·cap(e)`, source edges `source_cap`.
    pub(crate) fn weigh(&mut self, t: &Topology, scale: u64, source_cap: u64) {
        self.set(t.edges().iter().map(|e| e.cap * scale), source_cap);
    }

    /// Topology edges get `loads` (in edge order), source edges `source_cap`.
    pub(crate) fn set(&mut self, loads: impl IntoIterator<Item = u64>, source_cap: u64) {
        for (i, l) in loads.into_iter().enumerate() {
            self.flow.set_capacity_no_reset(2 * i, l);
        }
        for j in self.edges..self.flow.edges() {
            self.flow.set_capacity_no_reset(2 * j, source_cap);
        }
        self.flow.reset();
    }
}

/// Compute nodes in `side` and the capacity (units) leaving it.
fn ratio_of(t: &Topology, side: &[bool]) -> (u32, u64) {
    let inside = t.compute().iter().filter(|&&c| side[c as usize]).count() as u32;
    let leaving = t
        .edges()
        .iter()
        .filter(|e| side[e.from as usize] && !side[e.to as usize])
        .map(|e| e.cap)
        .sum();
    (inside, leaving)
}

/// The exact `x*` of `t` with its bottleneck cut.
pub fn optimum(t: &Topology) -> Optimum {
    let n = t.n() as u64;
    let nodes = t.nodes().len();
    // Start at the single-GPU cut with the least ingress: a valid lower bound and its
    // own certificate.
    let mut ingress = vec![0u64; nodes];
    for e in t.edges() {
        ingress[e.to as usize] += e.cap;
    }
    let &v_min = t
        .compute()
        .iter()
        .min_by_key(|&&c| ingress[c as usize])
        .expect("a topology has compute nodes");
    let mut best = (n as u32 - 1, ingress[v_min as usize]);
    let mut cut: Vec<bool> = (0..nodes).map(|i| i != v_min as usize).collect();
    let mut net = Network::new(t);
    let mut iterations = 0;
    let mut maxflows = 0;
    loop {
        iterations += 1;
        // x = p/q: source edges q, edge capacities p·cap, test flow >= N·q.
        let (p, q) = (best.0 as u64, best.1);
        net.weigh(t, p, q);
        let need = n * q;
        let mut improved: Option<((u32, u64), Vec<bool>)> = None;
        for &v in t.compute() {
            net.flow.reset();
            maxflows += 1;
            if net.flow.solve_up_to(net.source, v as usize, need) >= need {
                continue;
            }
            let mut side = net.flow.min_cut_source_side(net.source);
            side.truncate(nodes);
            let r = ratio_of(t, &side);
            let better = match &improved {
                None => true,
                Some((b, _)) => (r.0 as u128) * (b.1 as u128) > (b.0 as u128) * (r.1 as u128),
            };
            if better {
                improved = Some((r, side));
            }
        }
        match improved {
            None => break,
            Some((r, side)) => {
                debug_assert!((r.0 as u128) * (best.1 as u128) > (best.0 as u128) * (r.1 as u128));
                best = r;
                cut = side;
            }
        }
    }
    // x* = best.0 / (best.1 · unit) in GB/s terms.
    let x_units = Frac::new(best.0 as u128, best.1 as u128);
    let x_star = x_units.over(t.unit());
    let g = t
        .edges()
        .iter()
        .fold(x_units.den(), |g, e| gcd(g, e.cap as u128))
        .max(1);
    let k = (x_units.den() / g) as u64;
    let u_units = Frac::new(x_units.num(), g);
    Optimum {
        x_star,
        cut: (0..nodes as u32).filter(|&i| cut[i as usize]).collect(),
        cut_compute: best.0,
        cut_bandwidth: t.bandwidth(best.1),
        k,
        u: u_units.over(t.unit()),
        iterations,
        maxflows,
    }
}

/// Optimal times and bandwidths for the three tree collectives.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Bandwidths {
    /// Allgather: `x*` of the topology.
    pub allgather: Optimum,
    /// Reduce-scatter: `x*` of the reversed topology (the same on symmetric fabrics).
    pub reduce_scatter: Optimum,
}

impl Bandwidths {
    /// Both optima of `t` (one solve when `t` is symmetric).
    pub fn of(t: &Topology) -> Bandwidths {
        let allgather = optimum(t);
        let reduce_scatter = if t.is_symmetric() {
            allgather.clone()
        } else {
            optimum(&t.reversed())
        };
        Bandwidths {
            allgather,
            reduce_scatter,
        }
    }

    /// Seconds per GB of the named buffer (`M`, nccl-tests' convention: total output for
    /// allgather, total input for reduce-scatter, per-rank buffer for allreduce), i.e.
    /// `1 / algbw`.
    pub fn seconds_per_gb(&self, c: Collective, n: usize) -> Frac {
        let per = Frac::new(1, n as u128);
        match c {
            Collective::Allgather => self.allgather.x_star.times(per),
            Collective::ReduceScatter => self.reduce_scatter.x_star.times(per),
            Collective::Allreduce => self
                .allgather
                .x_star
                .plus(self.reduce_scatter.x_star)
                .times(per),
        }
    }
}

/// A collective ForestColl schedules with spanning trees.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Collective {
    /// Every rank ends with every shard.
    Allgather,
    /// Every rank ends with the sum of its shard over all ranks.
    ReduceScatter,
    /// Reduce-scatter then allgather.
    Allreduce,
}

impl Collective {
    /// Parses `allgather`, `reduce-scatter` (or `reducescatter`), `allreduce`.
    pub fn parse(s: &str) -> Option<Collective> {
        match s {
            "allgather" => Some(Collective::Allgather),
            "reduce-scatter" | "reducescatter" => Some(Collective::ReduceScatter),
            "allreduce" => Some(Collective::Allreduce),
            _ => None,
        }
    }

    /// nccl-tests' busbw factor (collectives.md §2.1).
    pub fn bus_factor(self, n: usize) -> f64 {
        let n = n as f64;
        match self {
            Collective::Allreduce => 2.0 * (n - 1.0) / n,
            _ => (n - 1.0) / n,
        }
    }

    /// Name as in MSCCL's `coll` attribute.
    pub fn msccl_name(self) -> &'static str {
        match self {
            Collective::Allgather => "allgather",
            Collective::ReduceScatter => "reducescatter",
            Collective::Allreduce => "allreduce",
        }
    }
}

impl Optimum {
    /// The bottleneck in words: the compute nodes on the smaller side of the cut, with
    /// runs such as `b1.gpu0..b1.gpu7` written `b1.gpu0-7`.
    pub fn describe_cut(&self, t: &Topology) -> String {
        let mut inside = vec![false; t.nodes().len()];
        for &i in &self.cut {
            inside[i as usize] = true;
        }
        let names = |want: bool| -> Vec<&str> {
            t.compute()
                .iter()
                .filter(|&&c| inside[c as usize] == want)
                .map(|&c| t.nodes()[c as usize].name.as_str())
                .collect()
        };
        let (a, b) = (names(true), names(false));
        let bw = crate::topology::decimal(self.cut_bandwidth);
        if a.len() <= b.len() {
            format!(
                "{} compute node(s) {} send out through {bw} GB/s",
                a.len(),
                compress(&a)
            )
        } else {
            format!(
                "{} compute node(s) (all but {}) send to the rest through {bw} GB/s",
                a.len(),
                compress(&b)
            )
        }
    }
}

/// `["b0.gpu0", "b0.gpu1", "b0.gpu2", "x"]` → `b0.gpu0-2, x`, at most eight groups.
pub fn compress(names: &[&str]) -> String {
    let split = |s: &str| -> (String, Option<u64>) {
        let digits = s.len() - s.trim_end_matches(|c: char| c.is_ascii_digit()).len();
        if digits == 0 || digits > 9 {
            return (s.to_string(), None);
        }
        let (p, d) = s.split_at(s.len() - digits);
        (p.to_string(), d.parse().ok())
    };
    let mut groups: Vec<String> = Vec::new();
    let mut i = 0;
    while i < names.len() {
        let (p, n) = split(names[i]);
        let mut j = i + 1;
        if let Some(n) = n {
            while j < names.len() && split(names[j]) == (p.clone(), Some(n + (j - i) as u64)) {
                j += 1;
            }
        }
        groups.push(if j - i > 1 {
            format!("{}-{}", names[i], n.unwrap_or(0) + (j - i - 1) as u64)
        } else {
            names[i].to_string()
        });
        i = j;
    }
    if groups.len() > 8 {
        let more = groups.len() - 8;
        groups.truncate(8);
        groups.push(format!("… {more} more"));
    }
    groups.join(", ")
}
