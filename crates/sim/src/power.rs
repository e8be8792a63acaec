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
    /// The run's limit, for jobs a policy did not cap itself.
    fraction: f64,
    /// Per job, its speed under the cap (0: not running).
    factors: Vec<f64>,
}

impl PowerCap {
    /// Every GPU at `fraction` of its top limit unless a policy with `power-limits`
    /// sets a job's own, for `jobs` jobs.
    pub fn new(fraction: f64, jobs: usize) -> PowerCap {
        PowerCap {
            fraction,
            factors: vec![0.0; jobs],
        }
    }

    /// Job `j`'s speed at its limit, on its first node's GPU type.
    fn speed(&self, world: &World, j: JobIdx) -> Option<f64> {
        let rt = &world.rt[j as usize];
        let &(node, _) = rt.placement.parts.first()?;
        let net = world.jobs[j as usize]
            .model
            .as_deref()
            .and_then(apiary_model::power::network);
        let gpu = &world.cluster.nodes[node as usize].gpu_type;
        let f = limit(world, j, self.fraction);
        let (time, _) = apiary_model::power::scaling(gpu, net, f);
        Some((1.0 / time).min(1.0))
    }
}

/// Job `j`'s power limit: its own where a policy set one, else the run's.
pub fn limit(world: &World, j: JobIdx, run: f64) -> f64 {
    match world.resources.power_caps.get(j as usize) {
        Some(&f) if f > 0.0 => f,
        _ => run,
    }
}

impl Resource for PowerCap {
    fn settle(
        &mut self,
        world: &mut World,
        started: &[JobIdx],
        changed: &mut Vec<JobIdx>,
    ) -> Result<(), SimError> {
        let dirty = std::mem::take(&mut world.resources.power_dirty);
        // A job (re)started is re-timed whatever its factor; a recapped one when its
        // factor moved.
        let jobs = started.iter().map(|&j| (j, true));
        for (j, fresh) in jobs.chain(dirty.iter().map(|&j| (j, false))) {
            if world.rt[j as usize].status != Status::Running {
                continue;
            }
            let Some(f) = self.speed(world, j) else {
                continue;
            };
            if self.factors.len() <= j as usize {
                self.factors.resize(j as usize + 1, 0.0);
            }
            if fresh || self.factors[j as usize] != f {
                self.factors[j as usize] = f;
                changed.push(j);
            }
        }
        let mut dirty = dirty;
        dirty.clear();
        world.resources.power_dirty = dirty;
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
