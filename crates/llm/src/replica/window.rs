//! Sliding-window attention (Mistral-7B-v0.1's 4,096 tokens) on an [`Instance`]. A
//! token attends to at most the window before it, and vLLM v0's block manager keeps a
//! request's blocks to the window's and one more, writing past them into blocks it
//! already holds. So a decoding request changes twice as it grows: it stops taking
//! new blocks, and its attention stops growing. Each change happens at a clock known
//! when it joins the decoding set, kept in a heap as completions are, so a decode step
//! still costs O(1) in the requests it runs.

use super::{Instance, Phase, Req};
use std::cmp::Reverse;

impl Instance {
    /// Where request `r` (joining the decoding set at the clock, with `q.stored` KV
    /// tokens) stands against the window: whether it has stopped taking blocks and
    /// whether it attends to the whole window; the changes still to come are queued.
    pub(super) fn window_join(&mut self, r: u32, q: &Req) -> (bool, bool) {
        let (Some(w), Some(wb)) = (self.cfg.window, self.cfg.window_blocks()) else {
            return (false, false);
        };
        let stored = u64::from(q.stored);
        // A step at clock c writes token `stored + c - clock0`; it takes a new block at
        // a block boundary below the cap, and attends to the window from token `w` on.
        let cap = u64::from(wb) * u64::from(self.cfg.block_size);
        let full = (stored >= cap, stored >= u64::from(w));
        for (i, limit) in [cap, u64::from(w)].into_iter().enumerate() {
            if stored < limit {
                self.window_at[i].push(Reverse((self.clock + limit - stored, r, q.epoch)));
            }
        }
        if full.1 {
            self.at_window += 1;
        }
        full
    }

    /// Applies the changes due by the clock, before a decode step counts blocks and
    /// attention.
    pub(super) fn window_step(&mut self, reqs: &mut [Req]) {
        let bs = u64::from(self.cfg.block_size);
        for i in 0..2 {
            while let Some(&Reverse((at, r, epoch))) = self.window_at[i].peek() {
                if at > self.clock {
                    break;
                }
                self.window_at[i].pop();
                let q = &mut reqs[r as usize];
                if q.epoch != epoch || q.phase != Phase::Decoding {
                    continue;
                }
                if i == 0 {
                    let key = (q.clock0 % bs + bs - u64::from(q.stored) % bs) % bs;
                    self.residue[key as usize] -= 1;
                    q.window_full.0 = true;
                } else {
                    self.sum_base -= i64::from(q.stored) - q.clock0 as i64;
                    self.at_window += 1;
                    q.window_full.1 = true;
                }
            }
        }
    }

    /// Query-key pairs of a prefill of `c` tokens after `before` computed ones: each
    /// token attends to those before it and itself, at most the window.
    pub(super) fn pairs(&self, before: u32, c: u32) -> f64 {
        let (a, c) = (f64::from(before), f64::from(c));
        let Some(w) = self.cfg.window.map(f64::from) else {
            return c * (a + (c + 1.0) / 2.0);
        };
        // Sum of min(i, w) over i = a + 1 ..= a + c.
        let (lo, hi) = (a + 1.0, a + c);
        if hi <= w {
            (lo + hi) * c / 2.0
        } else if lo > w {
            c * w
        } else {
            (lo + w) * (w - lo + 1.0) / 2.0 + (hi - w) * w
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Instance, ReplicaConfig};

    #[test]
    fn prefill_pairs_stop_growing_at_the_window() {
        let mut cfg = ReplicaConfig::vllm(100, 4096);
        let full = Instance::new(cfg);
        cfg.window = Some(4);
        let win = Instance::new(cfg);
        // Full attention: 3 tokens after 2 attend to 3, 4 and 5 tokens.
        assert_eq!(full.pairs(2, 3), 12.0);
        // A window of 4: 3, 4 and 4; all past it: 4 each.
        assert_eq!(win.pairs(2, 3), 11.0);
        assert_eq!(win.pairs(0, 3), 6.0);
        assert_eq!(win.pairs(10, 3), 12.0);
        // A request holds the window's blocks and one more: 4 tokens in blocks of 16 is
        // 1 block, so at most 2, and any length fits.
        assert_eq!(
            (cfg.blocks(15), cfg.blocks(17), cfg.blocks(100_000)),
            (1, 2, 2)
        );
        assert_eq!(cfg.fits_tokens(), u64::MAX);
    }
}
