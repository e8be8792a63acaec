//! Scheduling policies as pure decision logic over a cluster view.
//!
//! A policy never sees a clock, a socket or a file: it gets a [`Ctx`] holding the
//! current time (simulated or wall, it cannot tell), the jobs, and the free GPUs, and it
//! answers by starting and preempting jobs through that context. The simulator and the
//! live service drive the same implementations.
//!
//! The calling contract is on [`Policy`]. Shared pieces live beside the policies:
//! [`placement`] (counting, consolidated "yarn", best-fit) and [`greedy`] (the
//! priority-order, count-then-place pass that FIFO, SJF, SRTF, SRSF and Tiresias share).
//! [`registry::BUILTIN`] is the one table that `apiary policies`, the docs and parameter
//! validation read.

pub mod antman;
pub mod elasticflow;
pub mod fifo;
pub mod gandiva;
pub mod gavel;
pub mod greedy;
pub mod muri;
pub mod params;
pub mod placement;
pub mod pollux;
pub mod registry;
pub mod srtf;
pub mod themis;
pub mod tiresias;
pub mod vc;
pub mod world;

pub use params::{ParamError, Params};
pub use placement::PlacementStrategy;
pub use registry::{BUILTIN, PolicySpec, build, find};
pub use world::{Action, Ctx, JobIdx, JobRt, Placer, Status, Tenant, World};

/// A scheduling policy.
///
/// # Calling contract
///
/// * The driver calls the methods from one thread, never concurrently, and in time
///   order: `ctx.now()` never decreases between calls.
/// * [`Policy::on_submit`] is called once per job, at its submission time, before the
///   next [`Policy::schedule`]. [`Policy::on_finish`] is called once per job when it
///   completes; its GPUs are already free.
/// * [`Policy::schedule`] is called after every batch of events that share a time stamp
///   (event-driven mode) or at every slot boundary (slotted mode), and at any time the
///   policy asked for with [`Ctx::wake_at`]. It acts only through [`Ctx::start`] and
///   [`Ctx::preempt`], which take effect at once (a later placement sees the GPUs an
///   earlier preemption freed).
/// * Decisions must be deterministic functions of the context and the policy's own
///   state: no wall clock, no hash-map iteration order, randomness only from a seeded
///   [`apiary_model::Rng`] stream.
/// * Policies are `Send` so that the live service can run one on any thread; they are
///   never called concurrently.
/// * Nothing may panic. A job that can never run (larger than the cluster) simply stays
///   pending; the driver reports it.
pub trait Policy: Send {
    /// The registry name.
    fn name(&self) -> &'static str;

    /// Called once before the first event with every job of the run (still in the
    /// future) and the cluster. A policy that cannot work on them (a tenant assignment
    /// that does not fit the cluster, say) says why; the run then does not start.
    fn prepare(&mut self, _world: &World) -> Result<(), String> {
        Ok(())
    }

    /// Whether adaptive jobs (Pollux's workloads) tune their own batch size to the GPUs
    /// they get, as AdaptDL jobs do under Pollux; otherwise they train with the batch
    /// size their trace row gives.
    fn adaptive_batch(&self) -> bool {
        false
    }

    /// How often adaptive jobs advance (their step length), when the policy sets it;
    /// otherwise the slot, or 60 s in event-driven mode.
    fn adaptive_step(&self) -> Option<apiary_model::Time> {
        None
    }

    /// A job was submitted and is now pending.
    fn on_submit(&mut self, _ctx: &Ctx<'_>, _job: JobIdx) {}

    /// A job finished.
    fn on_finish(&mut self, _ctx: &Ctx<'_>, _job: JobIdx) {}

    /// A running job went back to pending without the policy asking (the live service:
    /// its process failed and it is retried, or its node was lost); its GPUs are already
    /// free. A policy that forgets jobs once they start must queue it again; one that
    /// keeps every unfinished job needs nothing.
    fn on_requeue(&mut self, _ctx: &Ctx<'_>, _job: JobIdx) {}

    /// Decide which jobs run now.
    fn schedule(&mut self, ctx: &mut Ctx<'_>);
}
