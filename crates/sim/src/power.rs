//! Power limits (`--power-limit`): every GPU capped at a fraction of its type's top
//! limit runs its job slower by what Zeus measured for the job's network
//! ([`apiary_model::power`]); the energy observer charges the lower power.
//!
//! A resource rather than a throughput layer because it composes with the others as
//! they do: a capped GPU that waits for data anyway loses nothing to the cap (`min`).

use crate::error::SimError;
use crate::resource::Resource;
use apiary_model::{RunOutcome, Time};
use apiary_policy::{JobIdx, Status, World};

/// The cap over one run.
pub struct PowerCap {
    fraction: f64,
    /// Per job, its speed under the cap (0: not running).
    factors: Vec<f64>,
}

impl PowerCap {
    /// Every GPU at `fraction` of its top limit, for `jobs` jobs.
    pub fn new(fraction: f64, jobs: usize) -> PowerCap {
        PowerCap {
            fraction,
            factors: vec![0.0; jobs],
        }
    }
}

impl Resource for PowerCap {
    fn settle(
        &mut self,
        world: &mut World,
        started: &[JobIdx],
        changed: &mut Vec<JobIdx>,
    ) -> Result<(), SimError> {
        for &j in started {
            let rt = &world.rt[j as usize];
            if rt.status != Status::Running {
                continue;
            }
            let Some(&(node, _)) = rt.placement.parts.first() else {
                continue;
            };
            let net = world.jobs[j as usize]
                .model
                .as_deref()
                .and_then(apiary_model::power::network);
            let gpu = &world.cluster.nodes[node as usize].gpu_type;
            let (time, _) = apiary_model::power::scaling(gpu, net, self.fraction);
            if self.factors.len() <= j as usize {
                self.factors.resize(j as usize + 1, 0.0);
            }
            self.factors[j as usize] = (1.0 / time).min(1.0);
            changed.push(j);
        }
        Ok(())
    }

    fn factor(&self, j: JobIdx) -> f64 {
        match self.factors.get(j as usize) {
            Some(&f) if f > 0.0 => f,
            _ => 1.0,
        }
    }

    fn next_change(&self, _world: &World) -> Option<Time> {
        None
    }

    fn interval(&mut self, _world: &World, _from: Time, _to: Time) {}

    fn report(self: Box<Self>, _outcome: &mut RunOutcome) {}
}
