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

/// What makes a trace job adaptive: its application, and the batch the trace asked for
/// (used by schedulers that do not let jobs tune their batch).
#[derive(Clone, Debug)]
pub struct Adaptive {
    /// The measured application.
    pub app: Arc<Application>,
}

impl PartialEq for Adaptive {
    fn eq(&self, other: &Adaptive) -> bool {
        Arc::ptr_eq(&self.app, &other.app) || self.app.name == other.app.name
    }
}
