//! Swap preemption: a decoding victim's blocks copied to host memory and back (vLLM's
//! `--preemption-mode swap`), as [`Instance`]'s preemption and iteration start use it.

use super::{Instance, Phase, Req, StepOut};
use crate::workload::Micros;

/// Swapping between GPU and host memory on one instance.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct Swaps {
    /// Requests swapped out.
    pub outs: u64,
    /// Requests swapped back in.
    pub ins: u64,
    /// Blocks copied out.
    pub blocks_out: u64,
    /// Blocks copied in.
    pub blocks_in: u64,
    /// Seconds of iterations spent copying.
    pub secs: f64,
}

impl Swaps {
    /// Adds `o`'s counts to these.
    pub fn add(&mut self, o: &Swaps) {
        self.outs += o.outs;
        self.ins += o.ins;
        self.blocks_out += o.blocks_out;
        self.blocks_in += o.blocks_in;
        self.secs += o.secs;
    }
}

impl Instance {
    /// Copies decoding request `r`'s `held` blocks (already freed) to host memory.
    pub(super) fn swap_out(
        &mut self,
        now: Micros,
        r: u32,
        held: u32,
        reqs: &mut [Req],
        out: &mut StepOut,
    ) {
        let q = &mut reqs[r as usize];
        self.swap_free -= held;
        self.swap_pending_ns += u64::from(held) * self.cfg.swap_ns_per_block;
        self.swaps.outs += 1;
        self.swaps.blocks_out += u64::from(held);
        q.phase = Phase::Swapped;
        q.preemptions += 1;
        q.preempted_at = now;
        self.waiting_blocks += u64::from(held);
        self.swapped.push_back(r);
        out.preempted.push(r);
    }

    /// Copies swapped requests back while the cache keeps its watermark free (vLLM's
    /// `can_swap_in`), oldest first; they decode from this iteration on.
    pub(super) fn swap_in(&mut self, now: Micros, reqs: &mut [Req]) {
        while let Some(&r) = self.swapped.front() {
            let need = self.cfg.blocks(reqs[r as usize].stored);
            if self.running.len() as u32 >= self.cfg.max_seqs
                || self.free < need + self.cfg.watermark
            {
                break;
            }
            self.swapped.pop_front();
            self.free -= need;
            self.swap_free += need;
            self.swap_pending_ns += u64::from(need) * self.cfg.swap_ns_per_block;
            self.swaps.ins += 1;
            self.swaps.blocks_in += u64::from(need);
            self.waiting_blocks -= u64::from(need);
            let q = &mut reqs[r as usize];
            q.loss += now - q.preempted_at;
            self.pin_prompt(q);
            self.fit_cache();
            let q = &reqs[r as usize];
            self.running.insert(self.key(q, r));
            let q = &mut reqs[r as usize];
            self.join_decoding(r, q);
        }
    }
}
