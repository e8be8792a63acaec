//! Resizing jobs in place (`elastic`: ElasticFlow, EDF and Pollux move jobs between GPU
//! counts as the cluster changes).

use super::{Handle, Mechanism};
use crate::spec::Capability;
use crate::world::JobIdx;
use apiary_model::Placement;

/// The `elastic` mechanism.
pub enum Elastic {}

impl Mechanism for Elastic {
    const CAPABILITY: Capability = Capability::Elastic;
}

impl Handle<'_, '_, Elastic> {
    /// Gives elastic jobs new placements at once ([`crate::World::reassign`]): any GPU
    /// count, an empty placement pauses a running job. False (changing nothing) if the
    /// set is not feasible.
    pub fn reassign(&mut self, changes: &[(JobIdx, Placement)]) -> bool {
        match self.ctx.w.reassign(changes) {
            Some(done) => {
                self.ctx.actions.extend(done);
                true
            }
            None => false,
        }
    }
}
