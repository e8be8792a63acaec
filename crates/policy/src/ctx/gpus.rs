//! Starting jobs on GPUs the policy picks itself, not through the driver's (or a
//! tenant's) placement (`chooses-gpus`: Gandiva's node-sets, AntMan's reservations,
//! Gavel's per-type rounds).

use super::{Handle, Mechanism};
use crate::spec::Capability;
use crate::world::JobIdx;
use apiary_model::Placement;

/// The `chooses-gpus` mechanism.
pub enum Gpus {}

impl Mechanism for Gpus {
    const CAPABILITY: Capability = Capability::ChoosesGpus;
}

impl Handle<'_, '_, Gpus> {
    /// Starts a job on the given GPUs. Returns false (changing nothing) if the job is
    /// not pending, the GPU count is wrong, or a GPU is taken.
    pub fn start(&mut self, i: JobIdx, p: Placement) -> bool {
        self.ctx.start_on(i, p)
    }

    /// A count that moves whenever a job joins or leaves the running set (the whole
    /// cluster's, in a tenant's scope too): while it stands still, the jobs a policy
    /// started are the ones running, and it need not read them again.
    pub fn running_changes(&self) -> u64 {
        self.ctx.w.running_changes()
    }

    /// An empty placement to fill for [`Self::start`], in the list of one that was
    /// given back when it can: a policy that starts jobs at every tick then allocates
    /// nothing for them.
    pub fn empty_placement(&mut self) -> Placement {
        self.ctx.w.spare_placement()
    }
}
