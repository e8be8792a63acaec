//! Hosting other policies inside tenants' shares (`tenants`: HiveD, quotas and private
//! partitions run an unchanged intra-VC policy per VC).

use super::{Ctx, Declared, Handle, Mechanism, Placer, Scope, Tenant};
use crate::spec::Capability;
use apiary_model::Time;

/// The `tenants` mechanism.
pub enum Hosting {}

impl Mechanism for Hosting {
    const CAPABILITY: Capability = Capability::Tenants;
}

impl Handle<'_, '_, Hosting> {
    /// A context narrowed to `tenant`, for one call of the hosted policy `who`
    /// describes: its starts go through `placer`, its wake-up request goes to `wake`.
    /// Inside it only mechanisms that read and never act open.
    pub fn host<'b>(
        &'b mut self,
        tenant: &'b mut Tenant,
        placer: &'b mut dyn Placer,
        who: Declared,
        wake: &'b mut Option<Time>,
    ) -> Ctx<'b> {
        Ctx {
            w: &mut *self.ctx.w,
            actions: &mut *self.ctx.actions,
            wake,
            scope: Some(Scope { tenant, placer }),
            who,
        }
    }
}
