//! Prefix-aware dispatch: each request to the instance where it would see its first
//! token soonest, counting the prompt blocks that instance has cached. This is the rule
//! of Mooncake's Conductor (FAST'25, Algorithm 1: least queueing plus prefill time over
//! the instances, prefill time shortened by the instance's prefix match) on a cluster
//! that neither disaggregates prefill from decode nor moves cache between instances.
//! Time is counted in prompt tokens to prefill: those queued on the instance plus this
//! prompt's uncached ones (prefill time is close to linear in tokens); ties go to the
//! freest instance, as Llumnix's dispatch would choose. Without `--prefix-cache` it is
//! a least-queued-tokens dispatch.

use super::{InstanceState, InstanceView, LlmPolicy, LlmPolicySpec, freeness_dispatch};
use crate::workload::Request;

/// The spec.
pub const SPEC: LlmPolicySpec = LlmPolicySpec {
    name: "prefix-aware",
    about: "each request to the instance with the fewest prompt tokens to prefill before its own, cached blocks counted (Mooncake's Conductor, no disaggregation)",
    params: &[],
    build: |_| Ok(Box::new(PrefixAware)),
};

struct PrefixAware;

impl LlmPolicy for PrefixAware {
    fn dispatch(&mut self, req: &Request, view: &[InstanceView]) -> Option<u32> {
        let mut best: Option<(u64, f64, u32)> = None;
        for v in view.iter().filter(|v| v.state == InstanceState::Active) {
            let l = &v.load;
            let queued = l.waiting_blocks * u64::from(l.block_size);
            let tokens = queued + u64::from(req.input.saturating_sub(v.cached_tokens));
            let free = freeness_dispatch(v, 0.0, false);
            let better = best.is_none_or(|(t, f, _)| tokens < t || (tokens == t && free > f));
            if better {
                best = Some((tokens, free, v.id));
            }
        }
        best.map(|(_, _, id)| id)
    }
}
