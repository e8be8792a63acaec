//! Combinatorial solvers the policies and planners share, behind apiary's own small
//! interfaces so the algorithms can be swapped or cross-checked without touching their
//! callers. Pure computation: no I/O, no clock, deterministic.
//!
//! Now: maximum flow and minimum cut on integer capacities ([`MaxFlow`], Dinic's
//! algorithm), which ForestColl's optimality search and placement checks build on.
//! Matching (for Muri) and LP (for Themis and Gavel) join here with their first users.

pub mod maxflow;

pub use maxflow::MaxFlow;
