//! Each mechanism opened by its name (`ctx.elastic()?`), for policies to read well; a
//! new mechanism adds its line here.

use super::{
    Adaptive, Admission, Carbon, Cpus, Ctx, Elastic, Gpus, Groups, Guests, Handle, Holds, Hosting,
    Io, Lookahead, Online, Power, Speeds, Stalls,
};
use crate::PolicyError;

/// Shortcuts to open each mechanism by name (`ctx.elastic()?`): each is
/// [`Ctx::open`] with that mechanism.
pub trait Handles<'a> {
    /// [`Gpus`]: start jobs on GPUs the policy picks.
    fn gpus(&mut self) -> Result<Handle<'_, 'a, Gpus>, PolicyError>;
    /// [`Groups`]: jobs sharing GPUs.
    fn groups(&mut self) -> Result<Handle<'_, 'a, Groups>, PolicyError>;
    /// [`Guests`]: jobs on GPUs they do not hold.
    fn guests(&mut self) -> Result<Handle<'_, 'a, Guests>, PolicyError>;
    /// [`Speeds`]: factors on the modelled speed.
    fn speeds(&mut self) -> Result<Handle<'_, 'a, Speeds>, PolicyError>;
    /// [`Elastic`]: resizing jobs in place.
    fn elastic(&mut self) -> Result<Handle<'_, 'a, Elastic>, PolicyError>;
    /// [`Stalls`]: pauses and work caps.
    fn stalls(&mut self) -> Result<Handle<'_, 'a, Stalls>, PolicyError>;
    /// [`Holds`]: plan ends.
    fn holds(&mut self) -> Result<Handle<'_, 'a, Holds>, PolicyError>;
    /// [`Admission`]: turning jobs away.
    fn admission(&mut self) -> Result<Handle<'_, 'a, Admission>, PolicyError>;
    /// [`Lookahead`]: the jobs to come.
    fn lookahead(&mut self) -> Result<Handle<'_, 'a, Lookahead>, PolicyError>;
    /// [`Adaptive`]: what adaptive jobs report.
    fn adaptive(&mut self) -> Result<Handle<'_, 'a, Adaptive>, PolicyError>;
    /// [`Hosting`]: other policies inside tenants' shares.
    fn hosting(&mut self) -> Result<Handle<'_, 'a, Hosting>, PolicyError>;
    /// [`Carbon`]: the grid's carbon intensity.
    fn carbon(&mut self) -> Result<Handle<'_, 'a, Carbon>, PolicyError>;
    /// [`Io`]: cache and remote bandwidth.
    fn io(&mut self) -> Result<Handle<'_, 'a, Io>, PolicyError>;
    /// [`Cpus`]: CPUs for input pipelines.
    fn cpus(&mut self) -> Result<Handle<'_, 'a, Cpus>, PolicyError>;
    /// [`Power`]: GPU power limits per job.
    fn power(&mut self) -> Result<Handle<'_, 'a, Power>, PolicyError>;
    /// [`Online`]: offline jobs beside online services.
    fn online(&mut self) -> Result<Handle<'_, 'a, Online>, PolicyError>;
}

impl<'a> Handles<'a> for Ctx<'a> {
    fn gpus(&mut self) -> Result<Handle<'_, 'a, Gpus>, PolicyError> {
        self.open()
    }
    fn groups(&mut self) -> Result<Handle<'_, 'a, Groups>, PolicyError> {
        self.open()
    }
    fn guests(&mut self) -> Result<Handle<'_, 'a, Guests>, PolicyError> {
        self.open()
    }
    fn speeds(&mut self) -> Result<Handle<'_, 'a, Speeds>, PolicyError> {
        self.open()
    }
    fn elastic(&mut self) -> Result<Handle<'_, 'a, Elastic>, PolicyError> {
        self.open()
    }
    fn stalls(&mut self) -> Result<Handle<'_, 'a, Stalls>, PolicyError> {
        self.open()
    }
    fn holds(&mut self) -> Result<Handle<'_, 'a, Holds>, PolicyError> {
        self.open()
    }
    fn admission(&mut self) -> Result<Handle<'_, 'a, Admission>, PolicyError> {
        self.open()
    }
    fn lookahead(&mut self) -> Result<Handle<'_, 'a, Lookahead>, PolicyError> {
        self.open()
    }
    fn adaptive(&mut self) -> Result<Handle<'_, 'a, Adaptive>, PolicyError> {
        self.open()
    }
    fn hosting(&mut self) -> Result<Handle<'_, 'a, Hosting>, PolicyError> {
        self.open()
    }
    fn carbon(&mut self) -> Result<Handle<'_, 'a, Carbon>, PolicyError> {
        self.open()
    }
    fn io(&mut self) -> Result<Handle<'_, 'a, Io>, PolicyError> {
        self.open()
    }
    fn cpus(&mut self) -> Result<Handle<'_, 'a, Cpus>, PolicyError> {
        self.open()
    }
    fn power(&mut self) -> Result<Handle<'_, 'a, Power>, PolicyError> {
        self.open()
    }
    fn online(&mut self) -> Result<Handle<'_, 'a, Online>, PolicyError> {
        self.open()
    }
}
