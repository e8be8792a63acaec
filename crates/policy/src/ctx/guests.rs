//! Jobs that run as guests on GPUs they do not hold (`guests`: AntMan's opportunistic
//! jobs sit on GPUs guaranteed jobs may take; the policy decides who shares what).

use super::{Handle, Mechanism};
use crate::spec::Capability;
use crate::world::{Action, JobIdx};
use apiary_model::Placement;

/// The `guests` mechanism.
pub enum Guests {}

impl Mechanism for Guests {
    const CAPABILITY: Capability = Capability::Guests;
}

impl Handle<'_, '_, Guests> {
    /// Starts a job as a guest on the given GPUs, without taking them
    /// ([`crate::World::start_overlay`]).
    pub fn start_overlay(&mut self, i: JobIdx, p: Placement) -> bool {
        let ok = self.ctx.w.start_overlay(i, p);
        if ok {
            self.ctx.actions.push(Action::Start(i));
        }
        ok
    }
}
