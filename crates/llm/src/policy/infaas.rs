//! INFaaS++: load-aware dispatch, no migration: the baseline Llumnix's authors built
//! from INFaaS. Their artifact runs it as Llumnix's own `load` dispatch (freeness,
//! every queued request counted) with migration off (`run.sh`: `load 0 0`); the note's
//! reading, dispatch on the used-block ratio including queued demand, is the
//! `metric=used-ratio` option.

use super::{InstanceView, LlmPolicy, LlmPolicySpec, argmax, freeness_dispatch};
use crate::workload::Request;
use apiary_policy::ParamSpec;

const METRIC: ParamSpec = ParamSpec {
    key: "metric",
    default: "freeness",
    about: "freeness (the artifact: Llumnix's dispatch load) | used-ratio ((used + queued blocks) / total)",
};

/// The spec.
pub const SPEC: LlmPolicySpec = LlmPolicySpec {
    name: "infaas++",
    about: "each request to the least loaded instance, queued demand counted; no migration",
    params: &[METRIC],
    build: |p| {
        let used_ratio = p.choice(&METRIC, &[("freeness", false), ("used-ratio", true)])?;
        Ok(Box::new(Infaas { used_ratio }))
    },
};

struct Infaas {
    used_ratio: bool,
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
            argmax(view, |v| freeness_dispatch(v, 0.0))
        }
    }
}
