//! How fast a job runs on the GPUs it was given.
//!
//! The default, [`DurationModel`], runs every job at its trace duration whatever its
//! placement, which is what the Tiresias-family simulators do ("placement only affects
//! queueing, never speed"). Placement-sensitive models plug in here.

use apiary_model::{Cluster, Job, Placement, SpreadTable};

/// A job's speed on a placement, as reference work per unit of time (1.0 = as in the
/// trace).
pub trait Throughput {
    /// Speed of `job` on `placement`.
    fn rate(&self, job: &Job, placement: &Placement, cluster: &Cluster) -> f64;
}

/// Every placement runs at the trace's speed.
#[derive(Clone, Copy, Debug, Default)]
pub struct DurationModel;

impl Throughput for DurationModel {
    fn rate(&self, _: &Job, _: &Placement, _: &Cluster) -> f64 {
        1.0
    }
}

/// Trace speed on one node; a measured slowdown (Gavel's unconsolidated throughputs or
/// Pollux's placement profiles, see [`SpreadTable`]) when the job spans several nodes.
#[derive(Clone, Debug)]
pub struct SpreadModel(pub SpreadTable);

impl Throughput for SpreadModel {
    fn rate(&self, job: &Job, placement: &Placement, _: &Cluster) -> f64 {
        self.0.factor(
            job.model.as_deref(),
            job.batch_size,
            job.gpus,
            placement.nodes() as u32,
        )
    }
}
