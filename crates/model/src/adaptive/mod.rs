//! Adaptive training jobs, as Pollux (OSDI'21) models them: a job that picks its own
//! batch size for the GPUs it is given, learns its step-time model as it runs, and
//! progresses by *goodput* (throughput times statistical efficiency) through per-epoch
//! training curves measured at several batch sizes.
//!
//! The simulator runs the job side ([`Agent`]: the AdaptDL library inside each job) on
//! measured data ([`Application`]); a scheduler sees only what a real AdaptDL job reports
//! ([`Agent::goodput`]). No I/O: the trace crate loads the data.

mod agent;
mod app;
mod delaunay;
mod goodput;

pub use agent::Agent;
pub use app::{AppError, Application, EpochStats, StepRow, placement_id};
pub use delaunay::Delaunay3;
pub use goodput::{Config, Goodput, GradParams, PerfParams, Sample, fit_perf_params};

use std::sync::Arc;

/// What makes a job adaptive: the batch limits it declares (what AdaptDL tells its
/// scheduler), and, in the simulator, the measured application it trains on.
#[derive(Clone, Debug)]
pub struct Adaptive {
    /// Its batch limits, which the scheduler reads.
    pub limits: BatchLimits,
    /// The measured application a simulated job trains on; `None` for a live job,
    /// which trains by itself and reports its goodput model (AdaptDL's hints).
    pub app: Option<Arc<Application>>,
}

impl Adaptive {
    /// A simulated job of `app`.
    pub fn of(app: Arc<Application>) -> Adaptive {
        Adaptive {
            limits: app.limits(),
            app: Some(app),
        }
    }
}

impl PartialEq for Adaptive {
    fn eq(&self, other: &Adaptive) -> bool {
        self.limits == other.limits
            && match (&self.app, &other.app) {
                (Some(a), Some(b)) => Arc::ptr_eq(a, b) || a.name == b.name,
                (None, None) => true,
                _ => false,
            }
    }
}

/// An adaptive job's batch limits: AdaptDL's `initBatchSize`, `maxBatchSize` and
/// `localBszBounds`, and the most replicas it may get, if it is limited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchLimits {
    /// The batch it starts with, at which its statistical efficiency is 1.
    pub init_batch: u32,
    /// The largest total batch it may use.
    pub max_batch: u32,
    /// The smallest per-GPU batch.
    pub min_local: u32,
    /// The largest per-GPU batch.
    pub max_local: u32,
    /// The most replicas a scheduler may give it, if limited.
    pub max_replicas: Option<u32>,
}
