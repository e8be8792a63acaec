//! Placement policies for shared GPUs: each scores a node for a pod, as one
//! Kubernetes score plugin does in FGD's artifact, and picks the GPUs on the node it
//! wins. The scheduler ([`crate::Scheduler`]) filters the nodes, asks for scores, takes
//! the highest (ties to the node first in a seeded order) and applies the pick.
//!
//! Every policy is one module with its own [`SharePolicySpec`]; `apiary policies` lists
//! [`POLICIES`].

mod bestfit;
mod clustering;
mod dotprod;
mod fgd;
mod packing;
mod random;

use crate::cluster::{Demand, M, NodeState, Types};
use crate::typical::Typical;
use apiary_core::registry::{Decl, Registry};
use apiary_core::{ParamError, Params, Rng};
use apiary_model::share::MAX_GPUS_PER_NODE;

/// What policies see besides the node and the pod.
#[derive(Clone, Copy, Debug)]
pub struct Context<'a> {
    /// GPU types and constraints.
    pub types: &'a Types,
    /// The workload's typical pods.
    pub typical: &'a [Typical],
}

/// GPUs chosen on one node (indices), at most [`MAX_GPUS_PER_NODE`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pick {
    idx: [u8; MAX_GPUS_PER_NODE],
    len: u8,
}

impl Pick {
    /// The chosen indices.
    pub fn gpus(&self) -> &[u8] {
        &self.idx[..usize::from(self.len)]
    }

    fn push(&mut self, i: usize) {
        self.idx[usize::from(self.len)] = i as u8;
        self.len += 1;
    }

    fn one(i: usize) -> Pick {
        let mut p = Pick::default();
        p.push(i);
        p
    }
}

/// A placement policy for shared GPUs.
pub trait SharePolicy: Send {
    /// The score of putting `d` on `n` (higher is better), for a node that passed the
    /// filter (the node has the CPU, memory and GPUs, of an allowed type). It must
    /// depend on nothing but `n`, `d` and `cx`: the scheduler keeps it until `n` changes.
    fn score(&mut self, n: &NodeState, d: &Demand, cx: &Context) -> i64;

    /// The GPUs for `d` (which asks for some) on the node it was placed on.
    fn pick(&mut self, n: &NodeState, d: &Demand, cx: &Context, rng: &mut Rng) -> Pick {
        let _ = (cx, rng);
        best_fit_gpu(n, d)
    }

    /// Whether it draws a node uniformly among those that pass the filter instead of
    /// scoring them.
    fn random_node(&self) -> bool {
        false
    }
}

/// A policy's declaration: `apiary policies`, the docs and the builder read it.
pub type SharePolicySpec = Decl<dyn SharePolicy>;

/// The built-in GPU-sharing policies, FGD's six.
pub const POLICIES: Registry<SharePolicySpec> = Registry::new(
    "GPU-sharing policy",
    "apiary policies",
    &[
        fgd::SPEC,
        bestfit::SPEC,
        dotprod::SPEC,
        packing::SPEC,
        clustering::SPEC,
        random::SPEC,
    ],
);

/// The policy called `name`, built with `params` (unknown keys are errors).
pub fn build(name: &str, params: &Params) -> Result<Box<dyn SharePolicy>, ParamError> {
    POLICIES.build(name, params)
}

/// Whether `name` is a GPU-sharing policy.
pub fn is_share_policy(name: &str) -> bool {
    POLICIES.find(name).is_some()
}

/// Thousandths of GPUs per node and CPU thousandths that FGD's scores divide by (its
/// `MaxSpecGpu` and `MaxSpecCpu`: the largest node of Alibaba's cluster).
pub(crate) const MAX_SPEC_GPU: i64 = 8000;
pub(crate) const MAX_SPEC_CPU: i64 = 128_000;
/// Kubernetes' highest node score.
pub(crate) const MAX_SCORE: i64 = 100;

/// The first free GPUs in index order, as many as `d` asks for (FGD's
/// `AllocateExclusiveGpuId`).
pub(crate) fn exclusive_gpus(n: &NodeState, d: &Demand) -> Pick {
    let mut p = Pick::default();
    let mut need = d.total_milli();
    for (i, &left) in n.left().iter().enumerate() {
        if need <= 0 {
            break;
        }
        if left == M {
            p.push(i);
            need -= i64::from(M);
        }
    }
    p
}

/// A fractional pod to the GPU with the least left that holds it (first on ties); a
/// whole-GPU pod to the first free GPUs (the artifact's default `-gpusel best`).
pub(crate) fn best_fit_gpu(n: &NodeState, d: &Demand) -> Pick {
    if !d.is_fractional() {
        return exclusive_gpus(n, d);
    }
    let mut best: Option<(usize, i32)> = None;
    for (i, &left) in n.left().iter().enumerate() {
        if left >= d.milli && best.is_none_or(|(_, b)| left < b) {
            best = Some((i, left));
        }
    }
    best.map_or_else(Pick::default, |(i, _)| Pick::one(i))
}

#[cfg(test)]
mod tests;
