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
pub mod carbon;
pub mod carbon_window;
pub mod ctx;
mod demands;
pub mod elasticflow;
pub mod fifo;
pub mod gandiva;
pub mod gavel;
pub mod goldminer;
pub mod greedy;
pub mod greenflow;
pub mod hosted;
pub mod muri;
pub mod muxflow;
pub mod placement;
pub mod plugin;
pub mod pollux;
pub mod registry;
mod runs;
pub mod silod;
pub mod spec;
pub mod srtf;
pub mod table;
pub mod testing;
pub mod themis;
pub mod tiresias;
pub mod vc;
pub mod world;

pub use apiary_core::params::{self, ParamError, Params};
pub use ctx::{Ctx, Declared, Handle, Handles, Mechanism, Pass, Placer, Tenant};
pub use placement::PlacementStrategy;
pub use registry::{BUILTIN, build, find};
pub use spec::{Capabilities, Capability, ParamSpec, PolicySpec};
pub use world::{Action, JobIdx, JobRt, Resources, Status, World};

use apiary_model::Cluster;

/// Why a policy cannot go on.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// It cannot work on this cluster.
    #[error("{policy}: {reason}")]
    Cluster {
        /// The policy.
        policy: &'static str,
        /// Why.
        reason: String,
    },
    /// It refuses one job.
    #[error("{policy} refuses job {job}: {reason}")]
    Job {
        /// The policy.
        policy: &'static str,
        /// The job's id.
        job: String,
        /// Why.
        reason: String,
    },
    /// Its tenant table does not fit the cluster or its jobs.
    #[error("{policy}: tenant table: {reason}")]
    Tenants {
        /// The policy.
        policy: &'static str,
        /// Why.
        reason: String,
    },
    /// A plugin's process failed or broke the protocol.
    #[error("plugin `{command}`: {reason}")]
    Plugin {
        /// Its command line.
        command: String,
        /// What went wrong.
        reason: String,
    },
    /// It used a mechanism its spec does not declare.
    #[error("{policy} used the `{capability}` capability, which its spec does not declare")]
    Undeclared {
        /// The policy.
        policy: &'static str,
        /// The capability.
        capability: Capability,
    },
}

/// One tenant's share, as a driver gives it: from the trace's demand in the simulator,
/// from `server.toml` live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TenantShare {
    /// The VC's name.
    pub name: String,
    /// Node cells it owns (HiveD, private partitions).
    pub nodes: u32,
    /// GPUs it may hold at once (quota).
    pub gpus: u64,
}

/// The extension point of policies with the [`Capability::Tenants`] capability.
pub trait Tenancy {
    /// The table for a run of `jobs` on `cluster` by the policy's parameters (the
    /// `demand` rule sizes VCs by the trace): only a driver that holds the whole trace,
    /// the simulator, can ask.
    fn plan(
        &self,
        cluster: &Cluster,
        jobs: &[apiary_model::Job],
    ) -> Result<Vec<TenantShare>, PolicyError>;
    /// Sets the table (before [`Policy::attach`]).
    fn set_table(&mut self, vcs: Vec<TenantShare>);
    /// Adds a tenant or changes its quota while running (live administration).
    fn set_share(&mut self, share: TenantShare) -> Result<(), PolicyError>;
    /// A job the driver finds running on `placement` (a scheduler recovering after a
    /// restart), already started in the world: the tenant counts it. False if its
    /// tenant cannot take it back.
    fn adopt(&mut self, world: &World, job: JobIdx) -> bool;
    /// A node went bad or came back.
    fn node_health(&mut self, node: &str, healthy: bool);
    /// Something outside the tenants' own jobs changed (GPUs held for stopping
    /// processes came back, a node's health changed): the next pass looks at every
    /// tenant, not only those whose jobs changed.
    fn refresh(&mut self);
    /// Why pending `job` waits as far as its tenant is concerned, if its tenant is why
    /// (the live service's `QuotaExceeded`): asked, never recounted by the driver.
    fn why_waits(&self, job: &apiary_model::Job) -> Option<TenantWait>;
    /// How tenants share the cluster, where it is one of the ways `apiary serve` knows.
    fn sharing(&self) -> Option<vc::Sharing> {
        None
    }
}

/// Why a pending job waits, as its tenancy sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TenantWait {
    /// Its tenant's running jobs hold `used` of the `capacity` GPUs its share allows
    /// (a quota, or a VC's node cells), too many for this job to fit beside them.
    ShareTaken {
        /// GPUs its tenant's running jobs hold.
        used: u64,
        /// GPUs its tenant may hold.
        capacity: u64,
    },
}

/// How a policy with the [`Capability::Adaptive`] capability wants its adaptive jobs
/// hosted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdaptiveHosting {
    /// Jobs tune their own batch size to the GPUs they get, as AdaptDL jobs do under
    /// Pollux, starting from their application's fixed batch.
    pub tunes_batch: bool,
    /// How often jobs advance (their step length), if the policy sets it.
    pub step: Option<apiary_model::Time>,
}

/// A scheduling policy.
///
/// # Calling contract
///
/// * The driver calls the methods from one thread, never concurrently, and in time
///   order: `ctx.now()` never decreases between calls.
/// * [`Policy::attach`] is called once, before anything else.
///   [`Policy::admit`] is called once per job, at its submission time, before the
///   next [`Policy::schedule`]. [`Policy::on_finish`] is called once per job when it
///   completes; its GPUs are already free.
/// * [`Policy::schedule`] is called after every batch of events that share a time stamp
///   (event-driven mode) or at every slot boundary (slotted mode), and at any time the
///   policy asked for with [`Ctx::wake_at`]. It acts through [`Ctx::start_with`] and
///   [`Ctx::preempt`], and through the mechanisms it declared ([`Ctx::open`]), which
///   take effect at once (a later placement sees the GPUs an earlier preemption freed).
/// * Decisions must be deterministic functions of the context and the policy's own
///   state: no wall clock, no hash-map iteration order, randomness only from a seeded
///   [`apiary_model::Rng`] stream.
/// * Policies are `Send` so that the live service can run one on any thread; they are
///   never called concurrently.
/// * Nothing may panic. A job that can never run (larger than the cluster) simply stays
///   pending; the driver reports it.
pub trait Policy: Send {
    /// Its spec: name, parameters, capabilities.
    fn spec(&self) -> &'static PolicySpec;

    /// The registry name: the spec's, whatever the parameters.
    fn name(&self) -> &'static str {
        self.spec().name
    }

    /// The capabilities this instance uses, with its parameters: its spec's unless a
    /// parameter adds one (Tiresias with `gittins=true` reads the jobs to come). The
    /// drivers check and grant exactly these.
    fn capabilities(&self) -> Capabilities {
        self.spec().capabilities
    }

    /// Called once, before any job, with the cluster it will schedule. A policy that
    /// cannot work on it (nodes of unequal size for buddy placement, say) says why; the
    /// driver then does not start. A policy with the [`Capability::Tenants`] capability
    /// has its tenant table by now ([`Policy::tenancy`]).
    fn attach(&mut self, _cluster: &Cluster) -> Result<(), PolicyError> {
        Ok(())
    }

    /// Optional extension point of policies that divide the cluster among tenants.
    fn tenancy(&mut self) -> Option<&mut dyn Tenancy> {
        None
    }

    /// The same, to read (why a tenant's job waits).
    fn tenants(&self) -> Option<&dyn Tenancy> {
        None
    }

    /// Optional extension point of policies with the [`Capability::Adaptive`]
    /// capability: how the driver hosts adaptive jobs for them. Without it, adaptive
    /// jobs (Pollux's workloads under a baseline) train with the batch size their trace
    /// row gives and advance every slot, or every 60 s in event-driven mode.
    fn adaptive(&self) -> Option<AdaptiveHosting> {
        None
    }

    /// A job was submitted and is now pending: the policy learns it here (jobs arrive
    /// one at a time; nothing may depend on jobs still to come). It may refuse the job
    /// with a reason, keeping nothing of it; the driver then turns it away.
    fn admit(&mut self, _ctx: &Ctx<'_>, _job: JobIdx) -> Result<(), PolicyError> {
        Ok(())
    }

    /// A job finished.
    fn on_finish(&mut self, _ctx: &Ctx<'_>, _job: JobIdx) {}

    /// A running job went back to pending without the policy asking (the live service:
    /// its process failed and it is retried, or its node was lost); its GPUs are already
    /// free. A policy that forgets jobs once they start must queue it again; one that
    /// keeps every unfinished job needs nothing.
    fn on_requeue(&mut self, _ctx: &Ctx<'_>, _job: JobIdx) {}

    /// Decide which jobs run now. A use of a mechanism the policy did not declare is
    /// the error ([`PolicyError::Undeclared`], from [`Ctx::open`]): the simulator stops
    /// on it, the live service refuses the pass.
    fn schedule(&mut self, ctx: &mut Ctx<'_>) -> Result<(), PolicyError>;
}
