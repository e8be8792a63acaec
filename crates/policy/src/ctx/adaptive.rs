//! What adaptive jobs report from inside (`adaptive`: Pollux's AdaptDL agents, their
//! batch, goodput model and progress), for the policy that hosts them.

use super::{Handle, Mechanism};
use crate::spec::Capability;
use crate::world::JobIdx;
use apiary_model::adaptive::Agent;

/// The `adaptive` mechanism.
pub enum Adaptive {}

impl Mechanism for Adaptive {
    const CAPABILITY: Capability = Capability::Adaptive;
}

impl Handle<'_, '_, Adaptive> {
    /// Job `i`'s agent, if it is adaptive.
    pub fn agent(&self, i: JobIdx) -> Option<&Agent> {
        self.ctx.w.agent(i)
    }
}
