//! GPU power limits per job (`power-limits`: GreenFlow's GPU-level knob). The driver
//! runs a capped job slower and charges it less power, by what Zeus measured for its
//! network at that limit (`apiary_model::power`).

use super::{Handle, Mechanism};
use crate::spec::Capability;
use crate::world::JobIdx;

/// The `power-limits` mechanism.
pub enum Power {}

impl Mechanism for Power {
    const CAPABILITY: Capability = Capability::PowerLimits;
}

impl Handle<'_, '_, Power> {
    /// Job `i`'s time and power at `fraction` of its GPUs' top limit, each relative to
    /// the top limit (on the type of the cluster's first node).
    pub fn scaling(&self, i: JobIdx, fraction: f64) -> (f64, f64) {
        let w = &*self.ctx.w;
        let net = w.jobs[i as usize]
            .model
            .as_deref()
            .and_then(apiary_model::power::network);
        let gpu = w.cluster.nodes.first().map_or("", |n| n.gpu_type.as_str());
        apiary_model::power::scaling(gpu, net, fraction)
    }

    /// Caps job `i`'s GPUs at `fraction` (0.3 to 1) of their top limit.
    pub fn set(&mut self, i: JobIdx, fraction: f64) {
        let w = &mut *self.ctx.w;
        let n = w.jobs.len();
        if w.resources.power_caps.len() < n {
            w.resources.power_caps.resize(n, 0.0);
        }
        let f = if fraction.is_finite() {
            fraction.clamp(0.3, 1.0)
        } else {
            1.0
        };
        if w.resources.power_caps[i as usize] != f {
            w.resources.power_caps[i as usize] = f;
            w.resources.power_dirty.push(i);
        }
    }
}
