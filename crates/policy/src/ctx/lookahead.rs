//! The run's jobs not yet submitted (`lookahead`), as some artifacts read them: how many
//! are still to come (Gavel, Gandiva's ElasticFlow clock), or the whole trace's GPU-time
//! distribution (Tiresias' Gittins index). The simulator's world holds the whole
//! trace; live, only the jobs submitted so far, so there the policy sees no future.

use super::{Handle, Mechanism};
use crate::spec::Capability;
use apiary_model::Job;

/// The `lookahead` mechanism.
pub enum Lookahead {}

impl Mechanism for Lookahead {
    const CAPABILITY: Capability = Capability::Lookahead;
}

impl Handle<'_, '_, Lookahead> {
    /// Every job of the run, those not yet submitted included.
    pub fn all_jobs(&self) -> &[Job] {
        &self.ctx.w.jobs
    }
}
