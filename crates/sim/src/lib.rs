//! The discrete-event simulator: replays a trace on a cluster under a policy.
//!
//! Determinism by construction: time is an integer (ms), completions sit in an
//! [`EventQueue`] keyed by `(time, seq)` so equal times pop in insertion order, arrivals
//! come from the time-sorted job list, and every event at one time stamp is applied
//! before the policy is asked once. Completions made stale by a preemption or a speed
//! change are skipped by a per-job generation number rather than removed from the queue.
//!
//! The engine owns no decision logic: it advances time over a [`Backend`] (the world and
//! the policy behind it), asks a [`Stack`] of throughput models how fast each started
//! job runs, and lets [`observe`] record what happened. It is the one loop of both
//! drivers: the simulator runs it over [`SimBackend`], `simulate --driver live` over
//! the live service's state machine (`apiary-server`). Its parts ([`Engine`],
//! [`backend`], [`hooks`], [`observe`], [`throughput`], [`scenario`]) are public so
//! that a driver or a test can put them together.

mod adaptive;
pub mod backend;
pub mod comm;
mod config;
pub mod cpu;
mod engine;
mod error;
pub mod experiment;
pub mod failures;
pub mod hooks;
pub mod io;
pub mod observe;
pub mod online;
mod overhead;
pub mod power;
pub mod resource;
pub mod scenario;
pub mod testing;
pub mod throughput;

pub use apiary_core::queue::{self, EventQueue};
pub use backend::{Backend, SimBackend};
pub use comm::CommModel;
pub use config::{Config, Mode, Progress};
pub use engine::{Engine, Finish};
pub use error::SimError;
pub use overhead::muri_restart_overhead;
pub use throughput::{DurationModel, SpreadModel, Stack, Throughput};

use apiary_model::{Cluster, Job, RunOutcome};
use apiary_policy::Policy;

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
    Engine::sim(cluster, jobs, policy, Stack::standard(throughput), cfg)?.run(progress)
}
