//! How fast a job runs on the GPUs it was given.
//!
//! The default, [`DurationModel`], runs every job at its trace duration whatever its
//! placement, which is what the Tiresias-family simulators do ("placement only affects
//! queueing, never speed"). Placement-sensitive models plug in here, and [`Stack`]
//! composes them with the per-job factors every run applies (GPU types, elastic scaling).

use apiary_model::{Cluster, Job, Placement, SpreadTable};

/// A job's speed on a placement, as reference work per unit of time (1.0 = as in the
/// trace).
pub trait Throughput {
    /// Speed of `job` on `placement`; an error stops the run rather than guessing a
    /// speed.
    fn rate(&self, job: &Job, placement: &Placement, cluster: &Cluster) -> Result<f64, RateError>;
}

/// Why a model could not price a placement.
#[derive(Debug, thiserror::Error)]
pub enum RateError {
    /// The collective model could not price the placement's allreduce.
    #[error("pricing the allreduce of a placement: {0}")]
    Comm(#[from] apiary_comm::PlacementError),
    /// A layer added outside this crate failed.
    #[error(transparent)]
    Other(Box<dyn std::error::Error + Send + Sync>),
}

/// Every placement runs at the trace's speed.
#[derive(Clone, Copy, Debug, Default)]
pub struct DurationModel;

impl Throughput for DurationModel {
    fn rate(&self, _: &Job, _: &Placement, _: &Cluster) -> Result<f64, RateError> {
        Ok(1.0)
    }
}

/// Trace speed on one node; a measured slowdown (Gavel's unconsolidated throughputs or
/// Pollux's placement profiles, see [`SpreadTable`]) when the job spans several nodes.
#[derive(Clone, Debug)]
pub struct SpreadModel(pub SpreadTable);

impl Throughput for SpreadModel {
    fn rate(&self, job: &Job, placement: &Placement, _: &Cluster) -> Result<f64, RateError> {
        Ok(self.0.factor(
            job.model.as_deref(),
            job.batch_size,
            job.gpus,
            placement.nodes() as u32,
        ))
    }
}

/// A job's speed on the GPU types of its placement: the slowest type it spans (a gang
/// waits for its slowest member), 1.0 for jobs without per-type speeds (Gavel's
/// heterogeneous traces have them).
#[derive(Clone, Copy, Debug, Default)]
pub struct GpuTypes;

impl Throughput for GpuTypes {
    fn rate(&self, job: &Job, placement: &Placement, cluster: &Cluster) -> Result<f64, RateError> {
        if job.extras().type_speeds.is_none() {
            return Ok(1.0);
        }
        Ok(placement
            .parts
            .iter()
            .map(|&(node, _)| job.type_speed(&cluster.nodes[node as usize].gpu_type))
            .fold(f64::INFINITY, f64::min)
            .clamp(1e-9, 1e9))
    }
}

/// An elastic job's speed-up on the GPUs it holds over the count it asked for, from its
/// throughput table (ElasticFlow's traces); 1.0 for jobs without one.
#[derive(Clone, Copy, Debug, Default)]
pub struct Scaling;

impl Throughput for Scaling {
    fn rate(&self, job: &Job, placement: &Placement, _: &Cluster) -> Result<f64, RateError> {
        Ok(job
            .extras()
            .scaling
            .as_ref()
            .map_or(1.0, |s| s.speedup(placement.gpus(), job.gpus)))
    }
}

/// Throughput models applied together: a job's rate is the product of every layer's,
/// in layer order. The engine runs [`Stack::standard`]; a new effect on speed (cache
/// and IO, power caps) is a new layer.
#[derive(Clone)]
pub struct Stack<'a> {
    base: &'a dyn Throughput,
    /// Layers on top of the standard ones, in order.
    more: Vec<&'a dyn Throughput>,
}

impl<'a> Stack<'a> {
    /// `base` (placement speed), then GPU types, then elastic scaling.
    pub fn standard(base: &'a dyn Throughput) -> Stack<'a> {
        Stack {
            base,
            more: Vec::new(),
        }
    }

    /// Adds a layer on top.
    pub fn push(&mut self, layer: &'a dyn Throughput) -> &mut Self {
        self.more.push(layer);
        self
    }
}

impl Throughput for Stack<'_> {
    fn rate(&self, job: &Job, placement: &Placement, cluster: &Cluster) -> Result<f64, RateError> {
        let mut rate = 1.0;
        rate *= self.base.rate(job, placement, cluster)?;
        // GPU types and scaling read only the fields some traces carry: for a job
        // without them both are exactly 1.0, and skipping them changes no bit (a
        // Gandiva run on Philly starts 4.6 M jobs).
        if job.has_extras() {
            rate *= GpuTypes.rate(job, placement, cluster)?;
            rate *= Scaling.rate(job, placement, cluster)?;
        }
        for layer in &self.more {
            rate *= layer.rate(job, placement, cluster)?;
        }
        Ok(rate)
    }
}
