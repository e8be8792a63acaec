//! The discrete-event simulator: replays a trace on a cluster under a policy.
//!
//! Determinism by construction: time is an integer (ms), completions sit in a binary
//! heap keyed by `(time, seq)` so equal times pop in insertion order, arrivals come from
//! the time-sorted job list, and every event at one time stamp is applied before the
//! policy is asked once. Completions made stale by a preemption or a speed change are
//! skipped by a per-job generation number rather than removed from the heap.
//!
//! The engine owns no decision logic: it advances time, applies the policy's starts and
//! preemptions to the [`World`](apiary_policy::World), asks a [`Stack`] of throughput
//! models how fast each started job runs, and lets [`observe`] record what happened.
//! It comes in parts ([`Engine`], [`EventQueue`], [`hooks`], [`observe`],
//! [`throughput`]) that the live driver's replay and the LLM serving simulator reuse.

mod adaptive;
pub mod comm;
mod engine;
pub mod experiment;
pub mod hooks;
pub mod observe;
mod overhead;
pub mod queue;
pub mod throughput;

pub use comm::CommModel;
pub use engine::{Engine, Finish};
pub use overhead::muri_restart_overhead;
pub use queue::EventQueue;
pub use throughput::{DurationModel, SpreadModel, Stack, Throughput};

use apiary_model::{Cluster, Job, RunOutcome, Time};
use apiary_policy::{Capability, Policy, PolicyError};

/// When the policy is consulted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// After every batch of simultaneous events (Tiresias, Muri).
    EventDriven,
    /// Only at multiples of the slot length (ElasticFlow 60/240 s, Gavel 360 s rounds).
    Slotted(Time),
}

/// Engine settings beyond the policy.
#[derive(Clone, Debug)]
pub struct Config {
    /// Scheduling mode.
    pub mode: Mode,
    /// Time a job makes no progress after resuming from a preemption.
    pub restart_overhead: Time,
    /// Artifact quirk (Muri and its Tiresias/SRTF baselines): at every event, every
    /// running job loses its model's restart overhead from the interval just ended,
    /// whether or not it was touched. See `docs/fidelity.md`.
    pub per_event_overhead: bool,
    /// Seed for any randomness (recorded in the outcome).
    pub seed: u64,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            mode: Mode::EventDriven,
            restart_overhead: 0,
            per_event_overhead: false,
            seed: 0,
        }
    }
}

/// How far a run has got, for progress bars.
#[derive(Clone, Copy, Debug)]
pub struct Progress {
    /// Simulated time.
    pub now: Time,
    /// Events so far.
    pub events: u64,
    /// Jobs finished.
    pub finished: usize,
    /// Jobs in the trace.
    pub total: usize,
}

/// Why a run could not be carried out.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The jobs were not sorted by submission time.
    #[error("jobs must be sorted by submit time (job {id} at {submit} ms comes after {prev} ms)")]
    Unsorted {
        /// The offending job.
        id: String,
        /// Its submit time.
        submit: Time,
        /// The previous job's submit time.
        prev: Time,
    },
    /// A slot length of zero.
    #[error("slot length must be positive")]
    ZeroSlot,
    /// The policy cannot work on this cluster and trace, or broke its contract.
    #[error("policy {0}")]
    Policy(#[from] PolicyError),
    /// A throughput model could not price a placement the policy chose.
    #[error("job {job}: {source}")]
    Rate {
        /// The job.
        job: String,
        /// Why.
        source: throughput::RateError,
    },
    /// A job lacks data the policy's spec declares it reads.
    #[error("policy {policy} reads {what} ({capability}), which job {job} lacks{hint}")]
    Missing {
        /// The policy.
        policy: &'static str,
        /// The capability.
        capability: Capability,
        /// What the job lacks.
        what: &'static str,
        /// The first job without it.
        job: String,
        /// Where such jobs come from.
        hint: &'static str,
    },
}

/// Runs `jobs` (sorted by submit time) on `cluster` under `policy`, at the speeds
/// `throughput` gives on the standard stack ([`Stack::standard`]).
///
/// Jobs that need more GPUs than the cluster has are not given to the policy; they
/// appear in the outcome with `rejected` set, never silently dropped.
pub fn run(
    cluster: Cluster,
    jobs: Vec<Job>,
    policy: &mut dyn Policy,
    throughput: &dyn Throughput,
    cfg: &Config,
    progress: &mut dyn FnMut(Progress),
) -> Result<RunOutcome, SimError> {
    Engine::new(cluster, jobs, policy, Stack::standard(throughput), cfg)?.run(progress)
}
