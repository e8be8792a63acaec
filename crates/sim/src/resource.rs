//! Resources besides GPUs that running jobs share (remote-storage bandwidth, a cache,
//! a CPU pool): an extension point of the engine, not a method on the world.
//!
//! A throughput model prices a placement on its own; a shared resource's share depends
//! on every other running job, so it is settled after each change to the running set,
//! and a job runs at its throughput model's rate times the smallest of the resources'
//! factors: each is the share of its GPU-bound speed the job reaches for want of that
//! resource alone, and the scarcest sets the pace (`min(GPU, IO, CPU)`). A
//! resource may also change by itself (a cache warms up) and says when; and it measures
//! its own use between events, as an observer does.

use crate::error::SimError;
use apiary_model::{RunOutcome, Time};
use apiary_policy::{JobIdx, Status, World};

/// A resource running jobs share, slowing those that get too little of it.
pub trait Resource {
    /// The running set or the policy's shares changed (after a pass, a completion or a
    /// time [`Resource::next_change`] named; `started` are the jobs the engine started,
    /// restarted or resized since the last settle): recompute the running jobs'
    /// factors and push those that changed onto `changed`; it may leave what it
    /// settled in the world for policies to read. An error stops the run (a policy
    /// gave more than there is).
    fn settle(
        &mut self,
        world: &mut World,
        started: &[JobIdx],
        changed: &mut Vec<JobIdx>,
    ) -> Result<(), SimError>;
    /// Job `j`'s speed factor now, in (0, 1].
    fn factor(&self, j: JobIdx) -> f64;
    /// The next time the factors change by themselves, after `world.now`.
    fn next_change(&self, world: &World) -> Option<Time>;
    /// The cluster stood as `world` shows it over `[from, to)`: measure.
    fn interval(&mut self, world: &World, from: Time, to: Time);
    /// Writes what it measured into the run's outcome.
    fn report(self: Box<Self>, outcome: &mut RunOutcome);
}

/// The running jobs a resource model holds a share for. It learns starts from the
/// engine ([`Resource::settle`]'s `started`) and finds the jobs that stopped itself,
/// looking only when the world's running set changed since it last looked.
#[derive(Clone, Debug)]
pub struct Holders {
    jobs: Vec<JobIdx>,
    /// The world's running-set changes when it last looked.
    seen: u64,
}

impl Default for Holders {
    fn default() -> Holders {
        Holders {
            jobs: Vec::new(),
            seen: u64::MAX,
        }
    }
}

impl Holders {
    /// Holds a share for job `j` from now on (it was not held).
    pub fn add(&mut self, j: JobIdx) {
        self.jobs.push(j);
    }

    /// The jobs held.
    pub fn jobs(&self) -> &[JobIdx] {
        &self.jobs
    }

    /// Lets go of the jobs held that no longer run, appending them to `out`.
    pub fn release_stopped(&mut self, world: &World, out: &mut Vec<JobIdx>) {
        if world.running_changes() == self.seen {
            return;
        }
        self.seen = world.running_changes();
        let mut k = 0;
        while k < self.jobs.len() {
            let j = self.jobs[k];
            if world.rt[j as usize].status == Status::Running {
                k += 1;
            } else {
                self.jobs.swap_remove(k);
                out.push(j);
            }
        }
    }
}
