//! The fluid all-to-all optimum (collectives.md §4, the HPDC'24 formulation): the
//! maximum concurrent multi-commodity flow in which every compute node sends the same
//! rate `d` to every other. Per-pair data of `m` GB then takes at best `m·τ` seconds
//! with `τ = 1/d`. Flows are aggregated by source (one commodity per sender with a
//! demand of `d` at each receiver), which has the same optimum as one commodity per
//! pair and `N` times fewer variables. Solved as an LP with `good_lp` on the pure-Rust
//! `microlp` backend.

use good_lp::{Expression, Solution, SolverModel, Variable, microlp, variable, variables};
use serde::Serialize;

use crate::topology::Topology;

/// The all-to-all optimum.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AllToAll {
    /// Seconds per GB of per-pair data (`τ`).
    pub tau: f64,
    /// Per-pair rate at the optimum, GB/s (`1/τ`).
    pub pair_rate_gbps: f64,
    /// LP variables.
    pub variables: usize,
    /// LP constraints.
    pub constraints: usize,
}

/// Why the LP did not give an answer.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AllToAllError {
    /// The solver failed.
    #[error("all-to-all LP: {0}")]
    Solver(String),
}

/// Solves the all-to-all LP on `t`.
pub fn alltoall(t: &Topology) -> Result<AllToAll, AllToAllError> {
    let n = t.n();
    let nodes = t.nodes().len();
    let edges = t.edges();
    let mut vars = variables!();
    let d = vars.add(variable().min(0));
    let f: Vec<Vec<Variable>> = (0..n)
        .map(|_| edges.iter().map(|_| vars.add(variable().min(0))).collect())
        .collect();
    let count = 1 + n * edges.len();
    let mut model = vars.maximise(d).using(microlp);
    let mut constraints = 0;
    let mut rank = vec![usize::MAX; nodes];
    for (r, &c) in t.compute().iter().enumerate() {
        rank[c as usize] = r;
    }
    for (s, fs) in f.iter().enumerate() {
        let mut net: Vec<Expression> = vec![Expression::from(0.0); nodes];
        for (e, x) in edges.iter().zip(fs) {
            net[e.from as usize] += *x;
            net[e.to as usize] -= *x;
        }
        for (v, out) in net.into_iter().enumerate() {
            let rhs: Expression = if rank[v] == s {
                (n as f64 - 1.0) * d
            } else if rank[v] != usize::MAX {
                -1.0 * d
            } else {
                Expression::from(0.0)
            };
            model = model.with(out.eq(rhs));
            constraints += 1;
        }
    }
    for (i, e) in edges.iter().enumerate() {
        let load: Expression = f.iter().map(|fs| fs[i]).sum();
        model = model.with(load.leq(t.bandwidth(e.cap).to_f64()));
        constraints += 1;
    }
    let sol = model
        .solve()
        .map_err(|e| AllToAllError::Solver(e.to_string()))?;
    let rate = sol.value(d);
    if !(rate.is_finite() && rate > 0.0) {
        return Err(AllToAllError::Solver(format!("optimal rate {rate}")));
    }
    Ok(AllToAll {
        tau: 1.0 / rate,
        pair_rate_gbps: rate,
        variables: count,
        constraints,
    })
}
