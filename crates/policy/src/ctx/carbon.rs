//! The grid's carbon intensity (`carbon`): what carbon-aware policies decide on. The
//! simulator gives the run's series (`--carbon`); live, the server's file, re-read as
//! it changes. Without a series the documented constant applies, so a policy always
//! sees one.

use super::{Handle, Mechanism};
use crate::spec::Capability;
use apiary_model::Time;
use apiary_model::energy::{DEFAULT_INTENSITY, Intensity};

/// The `carbon` mechanism.
pub enum Carbon {}

impl Mechanism for Carbon {
    const CAPABILITY: Capability = Capability::Carbon;
}

impl Handle<'_, '_, Carbon> {
    /// The intensity at `t`, gCO2eq/kWh.
    pub fn at(&self, t: Time) -> f64 {
        self.ctx
            .w
            .carbon
            .as_ref()
            .map_or(DEFAULT_INTENSITY, |c| c.at(t))
    }

    /// The facility's PUE, by which the driver multiplies GPU energy.
    pub fn pue(&self) -> f64 {
        self.ctx.w.pue
    }

    /// The whole series (a forecast, to a policy that plans ahead), if the driver has
    /// one.
    pub fn series(&self) -> Option<&Intensity> {
        self.ctx.w.carbon.as_deref()
    }
}
