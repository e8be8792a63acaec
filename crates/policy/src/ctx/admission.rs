//! Admission control (`declines`): turning a pending job away for good, as ElasticFlow
//! does when admitting it would make an admitted job miss its deadline.

use super::{Handle, Mechanism};
use crate::spec::Capability;
use crate::world::JobIdx;

/// The `declines` mechanism.
pub enum Admission {}

impl Mechanism for Admission {
    const CAPABILITY: Capability = Capability::Declines;
}

impl Handle<'_, '_, Admission> {
    /// Declines a pending job ([`crate::World::decline`]): it never runs, and the
    /// outcome records `reason`. False if it was not pending.
    pub fn decline(&mut self, i: JobIdx, reason: impl Into<String>) -> bool {
        self.ctx.w.decline(i, reason.into().into_boxed_str())
    }
}
