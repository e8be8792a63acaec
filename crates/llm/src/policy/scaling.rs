//! Auto-scaling on the cluster's average freeness (Llumnix §4.4.4 and its code's
//! `avg_load` policy): below `scale_up` blocks per request instances are added, enough
//! to lift the projected average above it; above `scale_down` with one instance fewer,
//! the emptiest is drained and released. Llumnix drains by migration; a policy without
//! migration (INFaaS++ with load-aware scaling, the paper's baseline) waits for the
//! drained instance's requests to finish. Shared by the policies that scale.

use super::{InstanceState, InstanceView, Scale, ScalingConfig, available};
use crate::workload::Micros;
use apiary_core::params::{ParamError, ParamSpec, Params};

pub(crate) const AUTOSCALE: ParamSpec = ParamSpec {
    key: "autoscale",
    default: "false",
    about: "add and drain instances to keep the average freeness within [scale_up, scale_down]",
};
pub(crate) const SCALE_UP: ParamSpec = ParamSpec {
    key: "scale_up",
    default: "10",
    about: "average freeness below which instances are added",
};
pub(crate) const SCALE_DOWN: ParamSpec = ParamSpec {
    key: "scale_down",
    default: "60",
    about: "average freeness (with one instance fewer) above which one is drained",
};
pub(crate) const SCALE_INTERVAL: ParamSpec = ParamSpec {
    key: "scale_interval_s",
    default: "10",
    about: "seconds between scaling decisions",
};
pub(crate) const MIN_INST: ParamSpec = ParamSpec {
    key: "min_instances",
    default: "1",
    about: "fewest active instances under auto-scaling",
};
pub(crate) const MAX_INST: ParamSpec = ParamSpec {
    key: "max_instances",
    default: "0",
    about: "most instances under auto-scaling (0: the --instances count)",
};
pub(crate) const STARTUP: ParamSpec = ParamSpec {
    key: "startup_s",
    default: "10",
    about: "seconds a new instance takes to load its model",
};

/// A parameter in milliseconds, as [`Micros`].
pub(crate) fn ms(p: &Params, spec: &ParamSpec) -> Result<Micros, ParamError> {
    Ok((p.f64(spec)? * 1e3).round() as Micros)
}

/// The scaling rule with its settings.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Scaler {
    pub(crate) cfg: ScalingConfig,
    up: f64,
    down: f64,
}

impl Scaler {
    /// The scaler the parameters ask for (`autoscale=true`), if any.
    pub(crate) fn from_params(p: &Params) -> Result<Option<Scaler>, ParamError> {
        if !p.bool(&AUTOSCALE)? {
            return Ok(None);
        }
        Ok(Some(Scaler {
            cfg: ScalingConfig {
                interval: ms(p, &SCALE_INTERVAL)?.saturating_mul(1000).max(1_000),
                min: p.u64_in(&MIN_INST, 1..=100_000)? as u32,
                max: p.u64_in(&MAX_INST, 0..=100_000)? as u32,
                startup: ms(p, &STARTUP)?.saturating_mul(1000),
            },
            up: p.signed(&SCALE_UP)?,
            down: p.signed(&SCALE_DOWN)?,
        }))
    }

    /// The decision for a cluster that may hold `max` instances.
    pub(crate) fn decide(&self, view: &[InstanceView], max: u32) -> Scale {
        // Starting instances count as the room they will bring; draining ones as gone.
        let (mut room, mut reqs, mut cap, mut n, mut settled) = (0.0, 0u64, 0.0, 0u32, true);
        for v in view {
            match v.state {
                InstanceState::Active => {
                    room += available(&v.load) - v.load.waiting_blocks as f64;
                    reqs += u64::from(v.load.running + v.load.waiting);
                    n += 1;
                }
                InstanceState::Starting => {
                    room += available(&v.load);
                    n += 1;
                    settled = false;
                }
                InstanceState::Terminating => settled = false,
            }
            cap = f64::from(v.load.total_blocks);
        }
        let avg = |room: f64| {
            if reqs == 0 {
                f64::INFINITY
            } else {
                room / reqs as f64
            }
        };
        if avg(room) < self.up && n < max {
            let mut k = 1;
            while n + k < max && avg(room + cap * f64::from(k)) < self.up {
                k += 1;
            }
            return Scale::Up(k);
        }
        // Shrink one at a time, once earlier starts and drains are done.
        if settled && n > self.cfg.min && avg(room - cap) > self.down {
            let victim = view
                .iter()
                .filter(|v| v.state == InstanceState::Active)
                .min_by_key(|v| (v.load.running + v.load.waiting, std::cmp::Reverse(v.id)))
                .map(|v| v.id);
            if let Some(id) = victim {
                return Scale::Down(id);
            }
        }
        Scale::Hold
    }
}
