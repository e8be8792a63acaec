//! Cluster schedulers for inference instances, behind one small trait.
//!
//! A policy sees each instance only through its load figures ([`InstanceView`]), as
//! Llumnix's global scheduler does: it never tracks individual requests. It must
//! [`dispatch`](LlmPolicy::dispatch) each arriving request; everything else is optional
//! and declared by returning `Some` from a settings method: periodic
//! [`rebalance`](LlmPolicy::rebalance) with live migration
//! ([`LlmPolicy::migration`]) and auto-scaling ([`LlmPolicy::scaling`]). The engine
//! carries out what the policy decides (migration stages, instance start-up and
//! draining) so that a policy stays decision logic over a view.

mod infaas;
mod llumnix;
pub mod pool;
mod prefix_aware;
mod round_robin;
mod scaling;

pub use llumnix::{freeness_dispatch, freeness_migrate};

use crate::replica::Load;
use crate::workload::{Micros, Request};
use apiary_core::{Decl, Params, Registry};

/// An instance's life stage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InstanceState {
    /// Loading its model; takes no requests yet.
    Starting,
    /// Serving.
    Active,
    /// Being drained before release; takes no new requests.
    Terminating,
}

/// An instance as a cluster scheduler sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InstanceView {
    /// Its index.
    pub id: u32,
    /// Its stage.
    pub state: InstanceState,
    /// Its KV and queue figures.
    pub load: Load,
    /// Whether a migration into or out of it is in flight.
    pub migrating: bool,
    /// When dispatching a request with prefix caching on: the prompt tokens of that
    /// request it has cached (else 0).
    pub cached_tokens: u32,
}

/// Which running request a migration source sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MigrationChoice {
    /// The last admitted decoding request (Llumnix's first release).
    Lcfs,
    /// The shortest decoding request (Llumnix's later default).
    ShortestRunning,
}

/// How live migration moves a request (Llumnix §1.5 of the note).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MigrationConfig {
    /// Stages before giving up.
    pub max_stages: u32,
    /// Blocks left at which the next stage is the last, stop-the-world one.
    pub last_stage_blocks: u32,
    /// Bytes per second between instances.
    pub bandwidth: f64,
    /// Fixed cost of a stage (handshake and launch), µs.
    pub stage_overhead: Micros,
    /// Which request moves.
    pub choice: MigrationChoice,
}

/// How a policy scales the number of instances.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ScalingConfig {
    /// Between decisions, µs.
    pub interval: Micros,
    /// Fewest active instances.
    pub min: u32,
    /// Most instances (0: as many as the run starts with).
    pub max: u32,
    /// Time a new instance takes to load its model, µs.
    pub startup: Micros,
}

/// A scaling decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scale {
    /// Nothing.
    Hold,
    /// Start this many instances.
    Up(u32),
    /// Drain and release this instance.
    Down(u32),
}

/// A cluster scheduler for inference instances.
pub trait LlmPolicy {
    /// The instance for a new request among the [`InstanceState::Active`] ones; `None`
    /// when there is none.
    fn dispatch(&mut self, req: &Request, view: &[InstanceView]) -> Option<u32>;

    /// Time between [`LlmPolicy::rebalance`] calls, if it rebalances.
    fn interval(&self) -> Option<Micros> {
        None
    }

    /// Pairs (source, destination) of instances to migrate one request between.
    fn rebalance(&mut self, _view: &[InstanceView], _pairs: &mut Vec<(u32, u32)>) {}

    /// How migrations run, if it migrates.
    fn migration(&self) -> Option<MigrationConfig> {
        None
    }

    /// Whether instances admit high-priority requests first and preempt them last
    /// (the engine sets [`ReplicaConfig::priorities`](crate::replica::ReplicaConfig)).
    fn priorities(&self) -> bool {
        false
    }

    /// How it scales, if it does.
    fn scaling(&self) -> Option<ScalingConfig> {
        None
    }

    /// A scaling decision, every [`ScalingConfig::interval`], for a cluster that may hold
    /// `max` instances (starting and draining ones included).
    fn scale(&mut self, _view: &[InstanceView], _max: u32) -> Scale {
        Scale::Hold
    }
}

/// A policy's declaration: `apiary llm policies`, the docs and the builder read it.
pub type LlmPolicySpec = Decl<dyn LlmPolicy>;

/// The built-in policies.
pub const POLICIES: Registry<LlmPolicySpec> = Registry::new(
    "LLM policy",
    "apiary llm policies",
    &[
        round_robin::SPEC,
        infaas::SPEC,
        llumnix::SPEC,
        prefix_aware::SPEC,
    ],
);

/// The policy called `name`, built with `params` (unknown keys are errors).
pub fn build(name: &str, params: &Params) -> Result<Box<dyn LlmPolicy>, crate::LlmError> {
    Ok(POLICIES.build(name, params)?)
}

/// KV blocks free above the watermark: what freeness and the scaling rule count.
pub(crate) fn available(l: &Load) -> f64 {
    f64::from(l.free_blocks) - f64::from(l.watermark)
}

/// The active instance with the highest `score`, ties to the lowest index.
fn argmax(view: &[InstanceView], score: impl Fn(&InstanceView) -> f64) -> Option<u32> {
    let mut best: Option<(f64, u32)> = None;
    for v in view.iter().filter(|v| v.state == InstanceState::Active) {
        let s = score(v);
        if best.is_none_or(|(b, _)| s > b) {
            best = Some((s, v.id));
        }
    }
    best.map(|(_, id)| id)
}
