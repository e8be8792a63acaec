//! Combinatorial solvers the policies and planners share, behind apiary's own small
//! interfaces so the algorithms can be swapped or cross-checked without touching their
//! callers. Pure computation: no I/O, no clock, deterministic.
//!
//! Now:
//! - maximum flow and minimum cut on integer capacities ([`MaxFlow`], Dinic's
//!   algorithm), which ForestColl's optimality search and placement checks build on;
//! - maximum-weight matching on general graphs ([`matching::max_weight_matching`],
//!   Edmonds' blossom algorithm), which Muri groups jobs with;
//! - linear programs ([`lp::LinearProgram`], a primal-dual interior-point method), which
//!   Gavel's allocation policies solve every time the job set changes.

pub mod blossom;
pub mod lp;
pub mod matching;
pub mod maxflow;

pub use maxflow::MaxFlow;
