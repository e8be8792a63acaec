//! Topology-optimal collective planning (ForestColl, Zhao et al.), so the scheduler can
//! price a placement by how fast its GPUs can allreduce, and so real runtimes can run
//! the schedule.
//!
//! A [`Topology`] is GPUs, switches and directed links with bandwidths. [`optimum`]
//! finds the exact optimal allgather factor `x*` (the worst cut ratio) with its
//! bottleneck cut by Newton iteration over integer max-flows; allgather,
//! reduce-scatter and allreduce bandwidths follow from it. Pure computation, no I/O
//! beyond reading a topology file, deterministic.
//!
//! The research note this follows is `shared/specs/collectives.md`; section numbers in
//! comments refer to it.

pub mod alltoall;
pub mod closed;
pub mod cluster;
pub mod frac;
pub mod msccl;
pub mod nccl;
pub mod optimum;
pub mod presets;
pub mod schedule;
pub mod topology;

pub use cluster::{PlacementError, placement_topology};
pub use frac::Frac;
pub use optimum::{Bandwidths, Collective, Optimum, optimum};
pub use presets::preset;
pub use schedule::{InvalidSchedule, PlanError, Schedule, Tree, TreeDefect, plan, validate};
pub use topology::{NodeKind, Topology, TopologyBuilder, TopologyError};

/// A topology from a file path (JSON or TOML) when one exists, else from a preset name.
pub fn load(spec: &str) -> Result<Topology, TopologyError> {
    let path = std::path::Path::new(spec);
    if path.is_file() {
        Topology::read(path)
    } else if spec.ends_with(".json") || spec.ends_with(".toml") {
        Err(TopologyError::Syntax {
            at: spec.to_string(),
            msg: "no such file".to_string(),
        })
    } else {
        preset(spec)
    }
}
