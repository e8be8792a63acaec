//! Jobs that share GPUs (`shared-gpus`: Muri's groups interleave their stages on one
//! placement, which goes back only when the last member leaves).

use super::{Handle, Mechanism};
use crate::placement::PlacementStrategy;
use crate::spec::Capability;
use crate::world::{Action, JobIdx, Status};

/// The `shared-gpus` mechanism.
pub enum Groups {}

impl Mechanism for Groups {
    const CAPABILITY: Capability = Capability::SharedGpus;
}

impl Handle<'_, '_, Groups> {
    /// Starts `members` (pending, same GPU count) as one group on one placement chosen
    /// by `strategy` for the first: they share the GPUs. All or none start.
    pub fn start_group(&mut self, members: &[JobIdx], strategy: PlacementStrategy) -> bool {
        let Some((&first, rest)) = members.split_first() else {
            return false;
        };
        let w = &*self.ctx.w;
        if rest.iter().any(|&j| {
            w.rt[j as usize].status != Status::Pending
                || w.jobs[j as usize].gpus != w.jobs[first as usize].gpus
        }) {
            return false;
        }
        if !self.ctx.start_with(first, strategy) {
            return false;
        }
        for &j in rest {
            if self.ctx.w.start_shared(j, first) {
                self.ctx.actions.push(Action::Start(j));
            }
        }
        true
    }

    /// The group whose GPUs job `i` shares (named by its first member), if any.
    pub fn share_group(&self, i: JobIdx) -> Option<JobIdx> {
        self.ctx.w.share_group(i)
    }

    /// How many running jobs hold job `i`'s GPUs, `i` included (1 when it shares none).
    pub fn sharing_count(&self, i: JobIdx) -> u32 {
        self.ctx.w.sharing_count(i)
    }
}
