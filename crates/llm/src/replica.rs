//! One inference instance: continuous batching over a paged KV cache with vLLM v0's
//! scheduling rules.
//!
//! Blocks hold `block_size` tokens; a prompt is admitted (FCFS) only while the free
//! blocks after it stay above the watermark (1 % of the cache); without chunked prefill
//! an iteration either prefills the admitted prompts or decodes every running request;
//! when a decode step needs blocks that are not there, the most recently admitted
//! request is preempted by recomputation: its blocks are freed and it returns to the
//! front of the queue, to prefill its prompt and the tokens it had generated again.
//! With swap space (vLLM's `--preemption-mode swap` and `--swap-space`), a decoding
//! victim's blocks are copied to host memory instead while the host has room; swapped
//! requests come back, copied in, before any new prompt is admitted, and the copies
//! take their time in the iteration that makes them, as vLLM's worker runs them on the
//! model's stream.
//! With chunked prefill (Sarathi-Serve, later vLLM) an iteration carries every decode
//! plus prompt chunks up to a token budget.
//!
//! A decode iteration costs O(1) however many requests run: every decoding request
//! gains one token per iteration, so its length is its length when it joined plus the
//! iterations since, the KV tokens the batch reads are a running sum plus the count
//! times the clock, the requests that need a fresh block this iteration are the ones in
//! one residue class of the clock (kept as counts), and completions sit in a heap keyed
//! by the iteration they finish on.

use crate::latency::{Batch, Cost, IterModel};
use crate::prefix::{HostTier, PrefixCache};
use crate::workload::Prefixes;
use crate::workload::{Micros, Request};
use std::cell::RefCell;
use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, VecDeque};
use std::rc::Rc;
use std::sync::Arc;

mod swap;
mod window;
pub use swap::Swaps;

/// A running request's place in the preemption order.
type RunKey = (u8, u64, u32);

/// How an instance schedules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplicaConfig {
    /// Tokens per KV block (vLLM: 16).
    pub block_size: u32,
    /// KV blocks of the instance.
    pub total_blocks: u32,
    /// Blocks a new prompt must leave free (vLLM: 1 % of the cache).
    pub watermark: u32,
    /// Most requests running at once (vLLM: 256).
    pub max_seqs: u32,
    /// Most prompt tokens one prefill iteration takes (without chunking).
    pub max_batched_tokens: u32,
    /// Token budget per iteration with chunked prefill; `None` runs vLLM v0's
    /// prefill-first iterations.
    pub chunk: Option<u32>,
    /// Whether high-priority requests (priority above 0) are admitted before normal
    /// ones and preempted after them (Llumnix's llumlet); off, the queue is FCFS.
    pub priorities: bool,
    /// KV blocks of host memory that preempted requests swap to; 0 preempts by
    /// recomputation only (vLLM's default for single-sequence requests).
    pub swap_blocks: u32,
    /// Nanoseconds to copy one block between host and GPU (each GPU its shard, at
    /// once).
    pub swap_ns_per_block: u64,
    /// Sliding-window attention over this many tokens (Mistral-7B-v0.1: 4,096): a
    /// token attends to the window before it, and a request holds the window's blocks
    /// and one more, as vLLM v0's block manager keeps them (`None`: full attention).
    pub window: Option<u32>,
    /// A disaggregated prefill instance: a request whose prompt is done stops here,
    /// holding its blocks, for its KV cache to be sent to a decode instance
    /// ([`StepOut::handoff`], then [`Instance::release`]).
    pub prefill_only: bool,
}

impl ReplicaConfig {
    /// Tokens of one request (prompt and output) the cache holds with the watermark
    /// free: a longer request could never finish, so it is refused up front.
    pub fn fits_tokens(&self) -> u64 {
        let room = self.total_blocks.saturating_sub(self.watermark);
        if self.window_blocks().is_some_and(|w| w <= room) {
            // A request never holds more than its window's blocks.
            return u64::MAX;
        }
        u64::from(room) * u64::from(self.block_size)
    }

    /// The most blocks a request holds under a sliding window: the window's and one
    /// more (vLLM v0's `block_sliding_window`).
    pub fn window_blocks(&self) -> Option<u32> {
        self.window
            .map(|w| w.div_ceil(self.block_size.max(1)).saturating_add(1))
    }

    /// vLLM v0's defaults for a cache of `total_blocks`, admitting prompts up to
    /// `max_len` tokens in one iteration.
    pub fn vllm(total_blocks: u32, max_len: u32) -> ReplicaConfig {
        ReplicaConfig {
            block_size: 16,
            total_blocks,
            watermark: total_blocks / 100,
            max_seqs: 256,
            max_batched_tokens: max_len.max(2048),
            chunk: None,
            priorities: false,
            swap_blocks: 0,
            swap_ns_per_block: 0,
            window: None,
            prefill_only: false,
        }
    }

    /// Blocks holding `tokens` of one request's KV cache (at most the window's).
    pub fn blocks(&self, tokens: u32) -> u32 {
        let b = tokens.div_ceil(self.block_size);
        self.window_blocks().map_or(b, |w| b.min(w))
    }
}

/// Where a request is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Not arrived yet.
    Future,
    /// In an instance's queue.
    Waiting,
    /// Admitted, its prompt (or a recomputation) being prefilled.
    Prefilling,
    /// Generating, one token per iteration.
    Decoding,
    /// Stopped for the last stage of a live migration.
    Frozen,
    /// Preempted with its KV cache copied to host memory, waiting to be copied back.
    Swapped,
    /// Finished.
    Done,
    /// Never run (longer than the context or the instance's cache).
    Refused,
}

/// A request's state and its record.
#[derive(Clone, Debug)]
pub struct Req {
    /// The request.
    pub req: Request,
    /// Where it is.
    pub phase: Phase,
    /// Its instance.
    pub inst: u32,
    /// Tokens generated so far (while decoding: as of `clock0`).
    pub generated: u32,
    /// KV tokens stored (while decoding: as of `clock0`).
    pub stored: u32,
    /// Prompt tokens prefilled in the current (chunked) prefill.
    pub prefilled: u32,
    /// The instance's decode clock when it joined the decoding set.
    pub clock0: u64,
    /// Admission order on its instance.
    pub admitted: u64,
    /// Bumped whenever it leaves the decoding set, to void its heap entry.
    pub epoch: u32,
    /// Decoding under a sliding window: whether it has stopped taking new blocks, and
    /// whether its attention has reached the window.
    pub window_full: (bool, bool),
    /// Waiting after a preemption.
    pub preempted: bool,
    /// Prefilling again after a preemption.
    pub recompute: bool,
    /// The outgoing migration it is in, if any.
    pub migration: Option<u32>,
    /// First token, µs (`Micros::MAX` before).
    pub first: Micros,
    /// Completion, µs.
    pub done: Micros,
    /// Times preempted.
    pub preemptions: u32,
    /// When last preempted.
    pub preempted_at: Micros,
    /// Preemption loss: time from each preemption to the end of its recomputation.
    pub loss: Micros,
    /// Completed migrations.
    pub migrations: u32,
    /// Time frozen by migrations.
    pub downtime: Micros,
    /// Leading prompt blocks it pins in its instance's prefix cache.
    pub cached: u32,
}

impl Req {
    /// A request not yet arrived.
    pub fn new(req: Request) -> Req {
        Req {
            req,
            phase: Phase::Future,
            inst: u32::MAX,
            generated: 0,
            stored: 0,
            prefilled: 0,
            clock0: 0,
            admitted: 0,
            epoch: 0,
            window_full: (false, false),
            preempted: false,
            recompute: false,
            migration: None,
            first: Micros::MAX,
            done: 0,
            preemptions: 0,
            preempted_at: 0,
            loss: 0,
            migrations: 0,
            downtime: 0,
            cached: 0,
        }
    }

    /// Time to first token, seconds (a finished request).
    pub fn ttft_s(&self) -> f64 {
        (self.first - self.req.arrival) as f64 / 1e6
    }

    /// Time per output token after the first, seconds; `None` for a one-token request.
    pub fn tpot_s(&self) -> Option<f64> {
        (self.req.output > 1)
            .then(|| (self.done - self.first) as f64 / 1e6 / f64::from(self.req.output - 1))
    }

    /// Arrival to last token, seconds.
    pub fn e2e_s(&self) -> f64 {
        (self.done - self.req.arrival) as f64 / 1e6
    }

    /// Tokens a (re)prefill computes: the prompt and whatever was generated before a
    /// preemption.
    pub fn prefill_len(&self) -> u32 {
        self.req.input + self.generated
    }
}

/// The load figures a cluster scheduler reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Load {
    /// KV blocks in all.
    pub total_blocks: u32,
    /// Tokens per block.
    pub block_size: u32,
    /// Free blocks (pre-allocations for incoming migrations count as used).
    pub free_blocks: u32,
    /// The watermark.
    pub watermark: u32,
    /// Requests admitted (prefilling or decoding).
    pub running: u32,
    /// Requests queued.
    pub waiting: u32,
    /// Blocks all queued requests need.
    pub waiting_blocks: u64,
    /// Blocks the head of the queue needs.
    pub head_blocks: u32,
    /// Queued requests that were preempted.
    pub preempted: u32,
    /// High-priority requests on it, queued or running.
    pub high: u32,
}

/// What an iteration's end reports to the cluster.
#[derive(Debug, Default)]
pub struct StepOut {
    /// Requests that finished.
    pub finished: Vec<u32>,
    /// Requests preempted when it started.
    pub preempted: Vec<u32>,
    /// On a prefill-only instance: requests whose prompt is done, holding their blocks
    /// until their KV cache is sent.
    pub handoff: Vec<u32>,
}

/// One instance.
#[derive(Debug)]
pub struct Instance {
    cfg: ReplicaConfig,
    free: u32,
    waiting: VecDeque<u32>,
    waiting_blocks: u64,
    preempted_waiting: u32,
    /// High-priority requests at the front of `waiting` (with priorities on).
    waiting_high: u32,
    high: u32,
    /// Keyed by (class, admission): the last entry is the next preemption victim.
    running: BTreeSet<RunKey>,
    next_admit: u64,
    decoding: u32,
    residue: Vec<u32>,
    sum_base: i64,
    /// Sliding window: decoding requests whose attention spans the whole window, and
    /// the clocks at which requests stop taking blocks and reach the window.
    at_window: u32,
    window_at: [BinaryHeap<Reverse<(u64, u32, u32)>>; 2],
    clock: u64,
    finish_at: BinaryHeap<Reverse<(u64, u32, u32)>>,
    prefilling: Vec<u32>,
    joins: Vec<u32>,
    batch: Vec<(u32, u32)>,
    decode_step: bool,
    busy: bool,
    prefix: Option<PrefixCache>,
    /// The cluster's host-memory pool of prompt blocks, shared by its instances, and
    /// the nanoseconds to load one token's KV from it.
    host: Option<(Rc<RefCell<HostTier>>, f64)>,
    /// Load time from the host tier the next iteration carries, ns.
    load_pending_ns: u64,
    /// Requests swapped to host memory, in the order they come back.
    swapped: VecDeque<u32>,
    /// Host blocks free.
    swap_free: u32,
    /// Copy time the next iteration carries, ns.
    swap_pending_ns: u64,
    /// Requests swapped out and back in, and the blocks copied each way.
    pub swaps: Swaps,
    /// Time spent in iterations, µs.
    pub busy_us: Micros,
    /// FLOPs and bytes of all iterations.
    pub work: Cost,
    /// Iterations run.
    pub iterations: u64,
}

impl Instance {
    /// An empty instance.
    pub fn new(cfg: ReplicaConfig) -> Instance {
        Instance {
            cfg,
            free: cfg.total_blocks,
            waiting: VecDeque::new(),
            waiting_blocks: 0,
            preempted_waiting: 0,
            waiting_high: 0,
            high: 0,
            running: BTreeSet::new(),
            next_admit: 0,
            decoding: 0,
            residue: vec![0; cfg.block_size as usize],
            sum_base: 0,
            at_window: 0,
            window_at: [BinaryHeap::new(), BinaryHeap::new()],
            clock: 0,
            finish_at: BinaryHeap::new(),
            prefilling: Vec::new(),
            joins: Vec::new(),
            batch: Vec::new(),
            decode_step: false,
            busy: false,
            prefix: None,
            host: None,
            load_pending_ns: 0,
            swapped: VecDeque::new(),
            swap_free: cfg.swap_blocks,
            swap_pending_ns: 0,
            swaps: Swaps::default(),
            busy_us: 0,
            work: Cost::default(),
            iterations: 0,
        }
    }

    /// An empty instance that caches computed prompt blocks named by `table`.
    pub fn with_prefix_cache(cfg: ReplicaConfig, table: Arc<Prefixes>) -> Instance {
        let mut i = Instance::new(cfg);
        i.prefix = Some(PrefixCache::new(table, cfg.block_size));
        i
    }

    /// Shares `tier` below its prefix cache, loading a token's KV in `ns_per_token`.
    pub fn with_host_tier(mut self, tier: Rc<RefCell<HostTier>>, ns_per_token: f64) -> Instance {
        self.host = Some((tier, ns_per_token));
        self
    }

    /// Its prefix cache, if it has one.
    pub fn prefix_cache(&self) -> Option<&PrefixCache> {
        self.prefix.as_ref()
    }

    /// Pins the prompt blocks of `q` from its `cached`-th on.
    fn pin_prompt(&mut self, q: &mut Req) {
        if let Some(c) = &mut self.prefix {
            let n = c.hashes(&q.req).len();
            c.acquire(&q.req, q.cached as usize, n);
            q.cached = n as u32;
        }
    }

    /// Unpins the prompt blocks `q` holds; call [`Instance::fit_cache`] once its
    /// blocks are freed.
    fn unpin_prompt(&mut self, q: &mut Req) {
        if let Some(c) = &mut self.prefix {
            c.release(&q.req, q.cached as usize);
            q.cached = 0;
        }
    }

    /// Evicts cached blocks the free blocks no longer hold.
    fn fit_cache(&mut self) {
        if let Some(c) = &mut self.prefix {
            c.fit(self.free);
        }
    }

    /// Its configuration.
    pub fn config(&self) -> &ReplicaConfig {
        &self.cfg
    }

    /// Whether an iteration is in flight.
    pub fn busy(&self) -> bool {
        self.busy
    }

    /// Whether it holds no request at all.
    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
            && self.running.is_empty()
            && self.joins.is_empty()
            && self.swapped.is_empty()
    }

    /// Free blocks.
    pub fn free_blocks(&self) -> u32 {
        self.free
    }

    /// Blocks in use (held by requests or reserved).
    pub fn used_blocks(&self) -> u32 {
        self.cfg.total_blocks - self.free
    }

    /// Resizes the cache to `total` blocks, keeping those in use (at most `total`): a
    /// KV pool shared with other models' instances grants this one what is left of it
    /// before each of its iterations.
    pub fn set_capacity(&mut self, total: u32) {
        let used = self.used_blocks();
        debug_assert!(total >= used);
        self.cfg.total_blocks = total.max(used);
        self.free = self.cfg.total_blocks - used;
    }

    /// Requests admitted so far (a counter; it moves when a prefill admits one).
    pub fn admissions(&self) -> u64 {
        self.next_admit
    }

    /// Requests admitted (prefilling or decoding), and those about to join.
    pub fn running(&self) -> u32 {
        (self.running.len() + self.joins.len()) as u32
    }

    /// Its load figures.
    pub fn load(&self, reqs: &[Req]) -> Load {
        Load {
            total_blocks: self.cfg.total_blocks,
            block_size: self.cfg.block_size,
            free_blocks: self.free,
            watermark: self.cfg.watermark,
            running: self.running(),
            waiting: (self.waiting.len() + self.swapped.len()) as u32,
            waiting_blocks: self.waiting_blocks,
            head_blocks: self
                .waiting
                .front()
                .map_or(0, |&r| self.cfg.blocks(reqs[r as usize].prefill_len())),
            preempted: self.preempted_waiting,
            high: self.high,
        }
    }

    fn key(&self, q: &Req, r: u32) -> RunKey {
        // High priority sorts first, so the newest normal request is the last entry.
        let class = if self.cfg.priorities {
            u8::MAX - q.req.priority
        } else {
            0
        };
        (class, q.admitted, r)
    }

    /// Puts `r` in the queue: high-priority requests (with priorities on) behind the
    /// other high-priority ones, the rest at the back, or at the front when `front`
    /// (a preempted request goes first within its class).
    fn queue(&mut self, r: u32, q: &Req, front: bool) {
        let high = self.cfg.priorities && q.req.priority > 0;
        if high {
            if front {
                self.waiting.push_front(r);
            } else {
                self.waiting.insert(self.waiting_high as usize, r);
            }
            self.waiting_high += 1;
        } else if front {
            self.waiting.insert(self.waiting_high as usize, r);
        } else {
            self.waiting.push_back(r);
        }
    }

    /// Queues an arrived (or returned) request at the back.
    pub fn enqueue(&mut self, r: u32, reqs: &mut [Req], id: u32) {
        let q = &mut reqs[r as usize];
        q.phase = Phase::Waiting;
        q.inst = id;
        if q.preempted {
            self.preempted_waiting += 1;
        }
        self.high += u32::from(q.req.priority > 0);
        self.waiting_blocks += u64::from(self.cfg.blocks(q.prefill_len()));
        let q = &reqs[r as usize];
        self.queue(r, q, false);
    }

    /// Empties the queue (a draining instance hands its queued requests back).
    pub fn take_waiting(&mut self, reqs: &mut [Req]) -> Vec<u32> {
        self.waiting_blocks = 0;
        self.preempted_waiting = 0;
        self.waiting_high = 0;
        let mut out: Vec<u32> = self.waiting.drain(..).collect();
        // Swapped requests go too, their host copies dropped: they prefill again
        // wherever they land.
        for r in std::mem::take(&mut self.swapped) {
            let q = &mut reqs[r as usize];
            self.swap_free += self.cfg.blocks(q.stored);
            q.stored = 0;
            q.preempted = true;
            q.recompute = false;
            out.push(r);
        }
        for &r in &out {
            let q = &mut reqs[r as usize];
            q.phase = Phase::Future;
            self.high -= u32::from(q.req.priority > 0);
        }
        out
    }

    /// A request's KV tokens and generated tokens now.
    pub fn progress(&self, q: &Req) -> (u32, u32) {
        if q.phase == Phase::Decoding {
            let d = (self.clock - q.clock0) as u32;
            (q.stored + d, q.generated + d)
        } else {
            (q.stored, q.generated)
        }
    }

    fn join_decoding(&mut self, r: u32, q: &mut Req) {
        let bs = u64::from(self.cfg.block_size);
        q.phase = Phase::Decoding;
        q.clock0 = self.clock;
        q.window_full = self.window_join(r, q);
        if !q.window_full.0 {
            let key = (self.clock % bs + bs - u64::from(q.stored) % bs) % bs;
            self.residue[key as usize] += 1;
        }
        if !q.window_full.1 {
            self.sum_base += i64::from(q.stored) - self.clock as i64;
        }
        self.decoding += 1;
        let left = u64::from(q.req.output.saturating_sub(q.generated));
        self.finish_at
            .push(Reverse((self.clock + left, r, q.epoch)));
    }

    /// Takes a decoding request out of the decoding set, its progress written back; its
    /// blocks stay held.
    fn leave_decoding(&mut self, q: &mut Req) {
        let bs = u64::from(self.cfg.block_size);
        if !q.window_full.0 {
            let key = (q.clock0 % bs + bs - u64::from(q.stored) % bs) % bs;
            self.residue[key as usize] -= 1;
        }
        if q.window_full.1 {
            self.at_window -= 1;
        } else {
            self.sum_base -= i64::from(q.stored) - q.clock0 as i64;
        }
        self.decoding -= 1;
        let (stored, generated) = self.progress(q);
        q.stored = stored;
        q.generated = generated;
        q.epoch = q.epoch.wrapping_add(1);
    }

    /// Takes a decoding request out for the last stage of a migration: it stops, its
    /// blocks stay held until [`Instance::release`]. Returns its KV tokens.
    pub fn freeze(&mut self, r: u32, reqs: &mut [Req]) -> u32 {
        let q = &mut reqs[r as usize];
        debug_assert_eq!(q.phase, Phase::Decoding);
        self.leave_decoding(q);
        let key = self.key(q, r);
        self.running.remove(&key);
        self.high -= u32::from(q.req.priority > 0);
        q.phase = Phase::Frozen;
        self.unpin_prompt(q);
        self.fit_cache();
        q.stored
    }

    /// Puts a frozen request back (its migration failed at the last stage).
    pub fn unfreeze(&mut self, r: u32, reqs: &mut [Req]) {
        self.pin_prompt(&mut reqs[r as usize]);
        let q = &reqs[r as usize];
        self.running.insert(self.key(q, r));
        self.high += u32::from(q.req.priority > 0);
        self.joins.push(r);
    }

    /// Frees the blocks of `tokens` KV tokens (a migrated request's copy).
    pub fn release(&mut self, tokens: u32) {
        self.free += self.cfg.blocks(tokens);
    }

    /// Frees the blocks of a request handed off from this prefill-only instance once
    /// its KV cache is sent; its prompt's blocks stay cached, now evictable.
    pub fn release_sent(&mut self, q: &mut Req) {
        self.free += self.cfg.blocks(q.stored);
        self.unpin_prompt(q);
        self.fit_cache();
    }

    /// Sets aside `blocks` for an incoming migration if that leaves the watermark free.
    pub fn reserve(&mut self, blocks: u32) -> bool {
        if self.free >= blocks + self.cfg.watermark {
            self.free -= blocks;
            self.fit_cache();
            true
        } else {
            false
        }
    }

    /// Returns reserved blocks.
    pub fn unreserve(&mut self, blocks: u32) {
        self.free += blocks;
    }

    /// Takes in a migrated request whose blocks are reserved; it decodes from the next
    /// iteration.
    pub fn accept(&mut self, r: u32, reqs: &mut [Req], id: u32) {
        let q = &mut reqs[r as usize];
        q.inst = id;
        q.admitted = self.next_admit;
        self.next_admit += 1;
        // Its prompt's KV came with it.
        self.pin_prompt(q);
        let q = &reqs[r as usize];
        self.running.insert(self.key(q, r));
        self.high += u32::from(q.req.priority > 0);
        self.joins.push(r);
    }

    /// Decoding requests, newest admission first (normal priority before high with
    /// priorities on): migration candidates.
    pub fn decoding_newest_first<'a>(&'a self, reqs: &'a [Req]) -> impl Iterator<Item = u32> + 'a {
        self.running
            .iter()
            .rev()
            .map(|&(_, _, r)| r)
            .filter(move |&r| reqs[r as usize].phase == Phase::Decoding)
    }

    fn preempt(&mut self, now: Micros, r: u32, reqs: &mut [Req], out: &mut StepOut) {
        let q = &mut reqs[r as usize];
        if q.phase == Phase::Decoding {
            self.leave_decoding(q);
        } else {
            self.prefilling.retain(|&p| p != r);
        }
        let key = self.key(q, r);
        self.running.remove(&key);
        // Blocks held: the whole prompt's for a prefilling request, else its tokens'.
        let held = if q.phase == Phase::Prefilling {
            self.cfg.blocks(q.prefill_len())
        } else {
            self.cfg.blocks(q.stored)
        };
        self.free += held;
        self.unpin_prompt(q);
        self.fit_cache();
        if q.phase == Phase::Decoding && held <= self.swap_free {
            self.swap_out(now, r, held, reqs, out);
            return;
        }
        if q.recompute {
            q.recompute = false;
            q.loss += now - q.preempted_at;
        }
        q.stored = 0;
        q.prefilled = 0;
        q.phase = Phase::Waiting;
        q.preemptions += 1;
        q.preempted_at = now;
        q.preempted = true;
        self.preempted_waiting += 1;
        self.waiting_blocks += u64::from(self.cfg.blocks(q.prefill_len()));
        let q = &reqs[r as usize];
        self.queue(r, q, true);
        out.preempted.push(r);
    }

    /// Makes room for this decode step's new blocks, preempting the newest admissions;
    /// returns whether any was preempted.
    fn make_room(&mut self, now: Micros, reqs: &mut [Req], out: &mut StepOut) -> bool {
        let bs = u64::from(self.cfg.block_size);
        let slot = (self.clock % bs) as usize;
        let mut any = false;
        while self.free < self.residue[slot] {
            let Some(&(_, _, victim)) = self.running.iter().next_back() else {
                break;
            };
            self.preempt(now, victim, reqs, out);
            any = true;
        }
        let need = self.residue[slot].min(self.free);
        self.free -= need;
        self.fit_cache();
        any
    }

    /// Admits the head of the queue if it fits; returns it.
    fn admit(&mut self, reqs: &mut [Req], tokens_left: u32, whole: bool) -> Option<u32> {
        let &r = self.waiting.front()?;
        let q = &mut reqs[r as usize];
        let len = q.prefill_len();
        let blocks = self.cfg.blocks(len);
        let (hit, gpu_saved) = self
            .prefix
            .as_ref()
            .map_or((0, 0), |c| c.lookup(&q.req, len));
        // Leading blocks past the instance's own, in the cluster's host tier.
        let (host_blocks, saved) = match (&self.prefix, &self.host) {
            (Some(c), Some((t, _))) => {
                let more = t.borrow().leading(&c.hashes(&q.req)[hit as usize..]) as u32;
                let saved = ((hit + more) * c.block_tokens()).min(len.saturating_sub(1));
                (more, saved.max(gpu_saved))
            }
            _ => (0, gpu_saved),
        };
        if self.running.len() as u32 >= self.cfg.max_seqs
            || self.free < blocks + self.cfg.watermark
            || (whole && len - saved > tokens_left)
            || tokens_left == 0
        {
            return None;
        }
        self.waiting.pop_front();
        if self.cfg.priorities && q.req.priority > 0 {
            self.waiting_high -= 1;
        }
        self.waiting_blocks -= u64::from(blocks);
        if q.preempted {
            q.preempted = false;
            q.recompute = true;
            self.preempted_waiting -= 1;
        }
        self.free -= blocks;
        q.phase = Phase::Prefilling;
        // The cached leading blocks count as prefilled.
        q.prefilled = saved;
        q.admitted = self.next_admit;
        self.next_admit += 1;
        if let Some(c) = &mut self.prefix {
            c.count(len, saved);
            c.acquire(&q.req, 0, hit as usize);
            q.cached = hit;
            c.fit(self.free);
            if let Some((t, ns)) = &self.host
                && host_blocks > 0
            {
                let loaded = saved - gpu_saved;
                let mut t = t.borrow_mut();
                t.touch(&c.hashes(&q.req)[hit as usize..(hit + host_blocks) as usize]);
                t.hit_tokens += u64::from(loaded);
                self.load_pending_ns += (f64::from(loaded) * ns).ceil() as u64;
            }
        }
        let q = &reqs[r as usize];
        self.running.insert(self.key(q, r));
        Some(r)
    }

    /// Admits whole prompts from the head of the queue up to the token budget (vLLM v0's
    /// prefill iterations).
    fn admit_prompts(&mut self, reqs: &mut [Req], b: &mut Batch) {
        // vLLM schedules no new prompt while a request waits in host memory.
        if !self.swapped.is_empty() {
            return;
        }
        let mut left = self.cfg.max_batched_tokens;
        while let Some(r) = self.admit(reqs, left, true) {
            let q = &reqs[r as usize];
            let c = q.prefill_len() - q.prefilled;
            left -= c;
            self.batch.push((r, c));
            b.prefill_tokens += u64::from(c);
            b.prefill_pairs += self.pairs(q.prefilled, c);
            b.logits += 1;
        }
    }

    /// Starts an iteration at `now`; returns its duration, or `None` when there is
    /// nothing to run.
    pub fn start(
        &mut self,
        now: Micros,
        reqs: &mut [Req],
        model: &IterModel,
        out: &mut StepOut,
    ) -> Option<Micros> {
        debug_assert!(!self.busy);
        for r in std::mem::take(&mut self.joins) {
            let q = &mut reqs[r as usize];
            self.join_decoding(r, q);
        }
        self.batch.clear();
        self.decode_step = false;
        self.swap_in(now, reqs);
        self.window_step(reqs);
        let mut b = Batch::default();
        match self.cfg.chunk {
            None => {
                self.admit_prompts(reqs, &mut b);
                if self.batch.is_empty() && self.decoding > 0 {
                    self.make_room(now, reqs, out);
                    self.decode_step = self.decoding > 0;
                    if !self.decode_step {
                        // Every decoding request was preempted (the blocks were held
                        // by a migration): the queue's head may fit now.
                        self.admit_prompts(reqs, &mut b);
                    }
                }
            }
            Some(budget) => {
                let preempted = self.decoding > 0 && self.make_room(now, reqs, out);
                self.decode_step = self.decoding > 0;
                let mut left = budget.saturating_sub(self.decoding);
                for &r in &self.prefilling {
                    if left == 0 {
                        break;
                    }
                    let q = &reqs[r as usize];
                    let c = (q.prefill_len() - q.prefilled).min(left);
                    left -= c;
                    self.batch.push((r, c));
                }
                // vLLM admits no prompt in an iteration that preempted, unless nothing
                // is left to decode, nor while a request waits in host memory.
                if (!preempted || !self.decode_step) && self.swapped.is_empty() {
                    while let Some(r) = self.admit(reqs, left, false) {
                        let q = &reqs[r as usize];
                        let c = (q.prefill_len() - q.prefilled).min(left);
                        left -= c;
                        self.prefilling.push(r);
                        self.batch.push((r, c));
                    }
                }
                for &(r, c) in &self.batch {
                    let q = &reqs[r as usize];
                    b.prefill_tokens += u64::from(c);
                    b.prefill_pairs += self.pairs(q.prefilled, c);
                    if q.prefilled + c == q.prefill_len() {
                        b.logits += 1;
                    }
                }
            }
        }
        if self.decode_step {
            let n = u64::from(self.decoding);
            b.decode_seqs = n;
            // Requests at the window attend to it; the others to their length.
            let open = u64::from(self.decoding - self.at_window);
            let window = u64::from(self.cfg.window.unwrap_or(0));
            b.decode_ctx = (self.sum_base + (open * self.clock) as i64) as u64
                + open
                + u64::from(self.at_window) * window;
            b.logits += n;
        }
        if b.tokens() == 0 {
            return None;
        }
        let cost = model.cost(&b);
        // Swaps are copies on the model's stream, before its kernels; so are loads
        // from the host tier.
        let swap_ns = std::mem::take(&mut self.swap_pending_ns);
        self.swaps.secs += swap_ns as f64 / 1e9;
        let load_ns = std::mem::take(&mut self.load_pending_ns);
        if let Some((t, _)) = &self.host {
            t.borrow_mut().load_secs += load_ns as f64 / 1e9;
        }
        let us = ((cost.secs * 1e6).ceil() as Micros).max(1) + (swap_ns + load_ns).div_ceil(1000);
        self.busy = true;
        self.busy_us += us;
        self.work.flops += cost.flops;
        self.work.bytes += cost.bytes;
        self.work.secs += cost.secs;
        self.iterations += 1;
        Some(us)
    }

    /// Ends the iteration at `now`.
    pub fn finish(&mut self, now: Micros, reqs: &mut [Req], out: &mut StepOut) {
        debug_assert!(self.busy);
        self.busy = false;
        if self.decode_step {
            self.clock += 1;
            while let Some(&Reverse((at, r, epoch))) = self.finish_at.peek() {
                let q = &reqs[r as usize];
                if q.epoch != epoch || q.phase != Phase::Decoding {
                    self.finish_at.pop();
                    continue;
                }
                if at > self.clock {
                    break;
                }
                self.finish_at.pop();
                let q = &mut reqs[r as usize];
                self.leave_decoding(q);
                self.complete(now, r, q, out);
            }
        }
        for i in 0..self.batch.len() {
            let (r, c) = self.batch[i];
            let q = &mut reqs[r as usize];
            q.prefilled += c;
            if q.prefilled < q.prefill_len() {
                continue;
            }
            if self.cfg.chunk.is_some() {
                self.prefilling.retain(|&p| p != r);
            }
            q.stored = q.prefill_len();
            q.generated += 1;
            q.prefilled = 0;
            self.pin_prompt(q);
            // Written through to the host tier.
            if let (Some(c), Some((t, _))) = (&self.prefix, &self.host) {
                t.borrow_mut().touch(c.hashes(&q.req));
            }
            if q.first == Micros::MAX {
                q.first = now;
            }
            if q.recompute {
                q.recompute = false;
                q.loss += now - q.preempted_at;
            }
            if q.generated >= q.req.output {
                self.complete(now, r, q, out);
            } else if self.cfg.prefill_only {
                self.hand_off(r, q, out);
            } else {
                self.join_decoding(r, q);
            }
        }
    }

    /// Stops a prefilled request on a prefill-only instance; its blocks stay held, and
    /// its prompt's cached blocks pinned, until [`Instance::release_sent`].
    fn hand_off(&mut self, r: u32, q: &mut Req, out: &mut StepOut) {
        let key = self.key(q, r);
        self.running.remove(&key);
        self.high -= u32::from(q.req.priority > 0);
        q.phase = Phase::Frozen;
        out.handoff.push(r);
    }

    fn complete(&mut self, now: Micros, r: u32, q: &mut Req, out: &mut StepOut) {
        let key = self.key(q, r);
        self.running.remove(&key);
        self.high -= u32::from(q.req.priority > 0);
        self.free += self.cfg.blocks(q.stored);
        self.unpin_prompt(q);
        self.fit_cache();
        q.phase = Phase::Done;
        q.done = now;
        out.finished.push(r);
    }

    /// Blocks held by the requests it runs, recounted from their lengths (for checks):
    /// during a decode step each decoding request already holds the block of the token
    /// being written.
    pub fn held_blocks(&self, reqs: &[Req]) -> u64 {
        let stepping = self.busy && self.decode_step;
        self.running
            .iter()
            .map(|&(_, _, r)| {
                let q = &reqs[r as usize];
                let tokens = match q.phase {
                    Phase::Prefilling => q.prefill_len(),
                    Phase::Decoding if stepping => self.progress(q).0 + 1,
                    _ => self.progress(q).0,
                };
                u64::from(self.cfg.blocks(tokens))
            })
            .sum()
    }
}
