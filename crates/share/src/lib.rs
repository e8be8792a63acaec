//! GPU sharing: pods that take thousandths of a GPU, whole GPUs, CPU and memory, placed
//! by fragmentation-aware policies.
//!
//! Most pods in Alibaba's 2023 GPU trace ask for part of one GPU, and how they are
//! packed decides how many GPUs stay usable: the FGD paper (Weng et al., USENIX ATC'23)
//! measured it on that trace. This crate has FGD and its five baselines as policies
//! ([`policy`]), FGD's fragmentation measure ([`typical`]), a scheduler that places one
//! pod at a time as FGD's Kubernetes-based simulator does ([`scheduler`]), and FGD's
//! fill experiment beside a replay of the trace's own times ([`experiment`]). It has no
//! clock and no I/O: readers are in `apiary-trace`, front ends in the `apiary` command.

pub mod cluster;
pub mod experiment;
pub mod policy;
pub mod scheduler;
pub mod typical;

pub use cluster::{Demand, NodeState, Prepared, Request, Types};
pub use experiment::{ByArrived, ByHour, Figures, Mode, Outcome, Step, run};
pub use policy::{POLICIES, SharePolicy, SharePolicySpec, build, is_share_policy};
pub use scheduler::{Placed, Scheduler};
pub use typical::{Typical, node_frag, typical_of_counts, typical_pods};

/// Why a GPU-sharing run could not go on.
#[derive(Debug, thiserror::Error)]
pub enum ShareError {
    /// The cluster or the pods cannot be used as given.
    #[error("{0}")]
    Input(String),
    /// A policy name or parameter is wrong.
    #[error(transparent)]
    Param(#[from] apiary_core::ParamError),
}

/// FGD's typical pods of a workload: its commonest shapes covering `popularity` percent
/// (the artifact uses 95), CPU-only pods included.
pub fn workload_typical(prep: &Prepared, popularity: f64) -> Vec<Typical> {
    let demands: Vec<Demand> = prep.pods.iter().map(|r| r.demand).collect();
    typical_pods(&demands, &prep.types, popularity)
}
