//! HiveD (OSDI '20) as an apiary capability: tenants own *cells* (multi-level units of GPU
//! affinity) in virtual clusters, bound lazily to physical cells by buddy cell allocation
//! so that a VC's guarantee survives sharing ("sharing safety").
//!
//! This crate is the algorithm and its data: no I/O, no clock. The simulator and the live
//! service drive the same [`Hived`] through HiveD's own calls.
//!
//! # Calling contract (as upstream's `SchedulerAlgorithm`)
//!
//! * Calls are never concurrent and take effect in call order.
//! * [`Hived::schedule`] decides for one pod; a `Bind` changes nothing until the caller
//!   commits it with [`Hived::add_allocated_pod`] (the same call rebuilds state after a
//!   restart, from the recorded [`BindInfo`]). In [`Phase::Preempting`] a `Preempt`
//!   reserves the placement; the caller deletes the victims
//!   ([`Hived::delete_allocated_pod`]) and calls `schedule` again.
//! * A pod that leaves before binding is reported with [`Hived::delete_unallocated_pod`].
//! * Node health comes in through [`Hived::set_node_bad`] / [`Hived::set_node_healthy`];
//!   every node starts bad, as in upstream, unless built with
//!   [`Hived::with_all_nodes_healthy`].
//! * Errors ([`HivedError`]) never change state and nothing panics on input.
//!
//! Tie-breaking is deterministic and documented in `docs/policies/hived.md`: chains of a
//! leaf type are tried in descending name order, leaf types in ascending order, VCs in
//! name order, and list orders follow upstream (free lists swap-remove, node views re-sort
//! with Go's stable sort).

mod algo;
mod cells;
pub mod check;
pub mod config;
mod gosort;
pub mod inspect;
pub mod replay;
mod types;

pub use algo::{GroupState, Hived, UsableOrder};
pub use cells::{CellState, FREE, MAX_PRIORITY, OPPORTUNISTIC};
pub use config::{Config, ConfigError};
pub use types::*;
