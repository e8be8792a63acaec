//! A policy's factor on a job's modelled speed (`speed-factors`: Muri's interleaved
//! groups, AntMan's guests slowed by the job under them). It shapes simulated progress
//! only; a live process runs as fast as it runs.

use super::{Handle, Mechanism};
use crate::spec::Capability;
use crate::world::{Action, JobIdx, Status};

/// The `speed-factors` mechanism.
pub enum Speeds {}

impl Mechanism for Speeds {
    const CAPABILITY: Capability = Capability::SpeedFactors;
}

impl Handle<'_, '_, Speeds> {
    /// Sets a running or pending job's speed factor (1 = the throughput model's rate);
    /// a running job's completion is rescheduled.
    #[inline]
    pub fn set_speed(&mut self, i: JobIdx, factor: f64) {
        let w = &mut *self.ctx.w;
        if factor.is_finite() && factor > 0.0 && w.speed(i) != factor {
            w.set_speed(i, factor);
            if w.rt[i as usize].status == Status::Running {
                self.ctx.actions.push(Action::Speed(i));
            }
        }
    }
}
