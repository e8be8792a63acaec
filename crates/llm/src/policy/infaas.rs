//! INFaaS++: load-aware dispatch, no migration: the baseline Llumnix's authors built
//! from INFaaS. Their artifact runs it as Llumnix's own `load` dispatch (freeness,
//! every queued request counted) with migration off (`run.sh`: `load 0 0`); the note's
//! reading, dispatch on the used-block ratio including queued demand, is the
//! `metric=used-ratio` option. With `autoscale=true` it scales as Llumnix does (the
//! artifact's auto-scaling runs differ only in migration), so an instance chosen for
//! release drains by finishing its requests instead of migrating them.

use super::scaling::{self, Scaler};
use super::{
    InstanceView, LlmPolicy, LlmPolicySpec, Scale, ScalingConfig, argmax, freeness_dispatch,
};
use crate::workload::Request;
use apiary_core::params::ParamSpec;

const METRIC: ParamSpec = ParamSpec {
    key: "metric",
    default: "freeness",
    about: "freeness (the artifact: Llumnix's dispatch load) | used-ratio ((used + queued blocks) / total)",
};

/// The spec.
pub const SPEC: LlmPolicySpec = LlmPolicySpec {
    name: "infaas++",
    about: "each request to the least loaded instance, queued demand counted; no migration; optional auto-scaling",
    params: &[
        METRIC,
        super::llumnix::OVERLOAD,
        scaling::AUTOSCALE,
        scaling::SCALE_UP,
        scaling::SCALE_DOWN,
        scaling::SCALE_INTERVAL,
        scaling::MIN_INST,
        scaling::MAX_INST,
        scaling::STARTUP,
    ],
    build: |p| {
        let used_ratio = p.choice(&METRIC, &[("freeness", false), ("used-ratio", true)])?;
        Ok(Box::new(Infaas {
            used_ratio,
            spread: super::llumnix::spread(p)?,
            scaler: Scaler::from_params(p)?,
        }))
    },
};

struct Infaas {
    used_ratio: bool,
    spread: bool,
    scaler: Option<Scaler>,
}

/// Used and queued blocks over the total (Llumnix's `kv_blocks_ratio`).
pub fn used_ratio(v: &InstanceView) -> f64 {
    let l = &v.load;
    let used = f64::from(l.total_blocks - l.free_blocks);
    (used + l.waiting_blocks as f64) / f64::from(l.total_blocks.max(1))
}

impl LlmPolicy for Infaas {
    fn dispatch(&mut self, _req: &Request, view: &[InstanceView]) -> Option<u32> {
        if self.used_ratio {
            argmax(view, |v| -used_ratio(v))
        } else {
            argmax(view, |v| freeness_dispatch(v, 0.0, self.spread))
        }
    }

    fn scaling(&self) -> Option<ScalingConfig> {
        self.scaler.as_ref().map(|s| s.cfg)
    }

    fn scale(&mut self, view: &[InstanceView], max: u32) -> Scale {
        self.scaler
            .as_ref()
            .map_or(Scale::Hold, |s| s.decide(view, max))
    }
}
