//! Round-robin dispatch: the load-oblivious baseline of Llumnix's evaluation.

use super::{InstanceState, InstanceView, LlmPolicy, LlmPolicySpec};
use crate::workload::Request;

/// The spec.
pub const SPEC: LlmPolicySpec = LlmPolicySpec {
    name: "round-robin",
    about: "each request to the next active instance in turn; no migration",
    params: &[],
    build: |_| Ok(Box::new(RoundRobin { next: 0 })),
};

struct RoundRobin {
    next: u32,
}

impl LlmPolicy for RoundRobin {
    fn dispatch(&mut self, _req: &Request, view: &[InstanceView]) -> Option<u32> {
        let active: Vec<u32> = view
            .iter()
            .filter(|v| v.state == InstanceState::Active)
            .map(|v| v.id)
            .collect();
        if active.is_empty() {
            return None;
        }
        let pick = active
            .iter()
            .copied()
            .find(|&id| id >= self.next)
            .unwrap_or(active[0]);
        self.next = pick + 1;
        Some(pick)
    }
}
