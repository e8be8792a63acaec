//! Disaggregated prefill and decode (DistServe, Splitwise, Mooncake): prompts run on
//! a pool of prefill instances, and each request's KV cache is then sent to a decode
//! instance, which generates the rest. The two phases stop competing for one
//! instance's iterations (a long prefill no longer stalls every decode beside it), at
//! the price of a KV transfer per request and of GPUs split between the pools.
//!
//! Each pool is instances of [`Instance`], with its own tensor-parallel degree and
//! latency model. A prefill instance admits prompts FCFS as vLLM does and, when a
//! prompt is done (its first token out), holds the request's blocks until the cache is
//! sent. Requests wait for a decode instance in the order their prefills ended; the
//! one with the most free blocks that keeps its watermark free takes the next, and the
//! copy takes `tokens x KV bytes per token / (link x GPUs)` (each GPU sends its shard).
//! An instance's link carries one copy at a time: a copy starts when both its prefill
//! instance's link and its decode instance's are free, in the order the copies were
//! placed. The prefill instance frees the blocks when the copy ends, and the decode
//! instance decodes the request from its next iteration. A new request goes to the
//! prefill instance with the fewest blocks queued and held, as DistServe's controller
//! sends it to the shortest queue. With `--prefix-cache` each prefill instance keeps a
//! cache of the prompt blocks it computed, and a request goes first to the one with
//! the fewest prompt tokens to prefill before its first token, its cached blocks
//! counted (Mooncake's Conductor); `--host-cache-gb` adds a host-memory pool of prompt
//! blocks the prefill instances share (Mooncake's DRAM tier).

use crate::LlmError;
use crate::engine::LlmOutcome;
use crate::latency::IterModel;
use crate::prefix::HostTier;
use crate::replica::{Instance, Phase, ReplicaConfig, Req, StepOut};
use crate::serving::Serving;
use crate::workload::{Micros, Request};
use apiary_core::EventQueue;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;

/// A disaggregated cluster.
#[derive(Clone, Debug)]
pub struct DisaggCluster {
    /// Prefill instances.
    pub prefill: u32,
    /// Decode instances.
    pub decode: u32,
    /// How a prefill instance schedules (`prefill_only` set).
    pub prefill_replica: ReplicaConfig,
    /// How a decode instance schedules.
    pub decode_replica: ReplicaConfig,
    /// A prefill instance's iterations.
    pub prefill_model: IterModel,
    /// A decode instance's iterations.
    pub decode_model: IterModel,
    /// Seconds to send one token's KV cache from a prefill to a decode instance.
    pub transfer_secs_per_token: f64,
    /// The trace's prompt blocks, when each prefill instance keeps a prefix cache of
    /// them (`--prefix-cache`; decode instances take whole caches and keep none).
    pub prefix_cache: Option<std::sync::Arc<crate::workload::Prefixes>>,
    /// With the prefix caches: the host-memory pool of prompt blocks the prefill
    /// instances share (Mooncake's DRAM tier, `--host-cache-gb`).
    pub host_tier: Option<crate::prefix::HostTierConfig>,
}

#[derive(Clone, Copy, Debug)]
enum Ev {
    /// An iteration of prefill (`true`) or decode instance `i` ended.
    IterDone(bool, u32),
    /// Request `r`'s KV cache reached decode instance `dst` from prefill instance
    /// `src`.
    Sent { r: u32, src: u32, dst: u32 },
}

struct Sim<'a> {
    c: &'a DisaggCluster,
    reqs: Vec<Req>,
    prefill: Vec<Instance>,
    decode: Vec<Instance>,
    /// Prefilled requests waiting for a decode instance, in the order they were done.
    handoffs: VecDeque<u32>,
    /// When each prefill instance's link, and each decode instance's, is next free.
    send_free: Vec<Micros>,
    take_free: Vec<Micros>,
    /// The prefill pool's host tier, when it has one.
    host: Option<Rc<RefCell<HostTier>>>,
    /// The first arrival.
    first: Micros,
    queue: EventQueue<Ev>,
    out: StepOut,
    now: Micros,
    done: usize,
    total: usize,
    outcome: LlmOutcome,
}

/// Runs `requests` (sorted by arrival; `refused` marks those not to run) on `c`.
pub fn simulate(
    c: &DisaggCluster,
    requests: &[Request],
    refused: &[bool],
    progress: &mut dyn FnMut(usize, usize),
) -> Result<LlmOutcome, LlmError> {
    if c.prefill == 0 || c.decode == 0 {
        return Err(LlmError::Invalid {
            what: "--disagg",
            message: "at least one prefill and one decode instance".into(),
        });
    }
    if requests.windows(2).any(|w| w[1].arrival < w[0].arrival) {
        return Err(LlmError::Invalid {
            what: "requests",
            message: "not sorted by arrival".into(),
        });
    }
    let prefill_cfg = ReplicaConfig {
        prefill_only: true,
        ..c.prefill_replica
    };
    let host = (c.prefix_cache.as_ref()).and(c.host_tier).map(|t| {
        (
            Rc::new(RefCell::new(HostTier::new(t.blocks))),
            t.ns_per_token,
        )
    });
    let mut sim = Sim {
        c,
        reqs: requests.iter().map(|&r| Req::new(r)).collect(),
        prefill: (0..c.prefill)
            .map(|_| {
                let inst = match &c.prefix_cache {
                    Some(t) => Instance::with_prefix_cache(prefill_cfg, std::sync::Arc::clone(t)),
                    None => Instance::new(prefill_cfg),
                };
                match &host {
                    Some((t, ns)) => inst.with_host_tier(Rc::clone(t), *ns),
                    None => inst,
                }
            })
            .collect(),
        decode: (0..c.decode)
            .map(|_| Instance::new(c.decode_replica))
            .collect(),
        handoffs: VecDeque::new(),
        send_free: vec![0; c.prefill as usize],
        take_free: vec![0; c.decode as usize],
        host: host.map(|(t, _)| t),
        first: requests.first().map_or(0, |r| r.arrival),
        queue: EventQueue::new(),
        out: StepOut::default(),
        now: 0,
        done: 0,
        total: 0,
        outcome: LlmOutcome::default(),
    };
    // A request must fit a prefill instance's cache with its prompt and a decode
    // instance's with all of it, else it could never finish.
    let prompt_fits = c.prefill_replica.fits_tokens();
    let fits = c.decode_replica.fits_tokens();
    for (i, q) in sim.reqs.iter_mut().enumerate() {
        let len = u64::from(q.req.input) + u64::from(q.req.output);
        if refused.get(i).copied().unwrap_or(false)
            || len > fits
            || u64::from(q.req.input) + 1 > prompt_fits
            || q.req.output == 0
        {
            q.phase = Phase::Refused;
        }
    }
    sim.total = sim
        .reqs
        .iter()
        .filter(|q| q.phase != Phase::Refused)
        .count();
    crate::serving::run(&mut sim, requests, progress);
    Ok(sim.finish())
}

impl Sim<'_> {
    fn kick(&mut self, prefill: bool, i: u32) {
        let (inst, model) = if prefill {
            (&mut self.prefill[i as usize], &self.c.prefill_model)
        } else {
            (&mut self.decode[i as usize], &self.c.decode_model)
        };
        if inst.busy() {
            return;
        }
        self.out.preempted.clear();
        if let Some(d) = inst.start(self.now, &mut self.reqs, model, &mut self.out) {
            self.queue.push(self.now + d, Ev::IterDone(prefill, i));
        }
    }

    /// Sends the waiting prefilled requests, in order, while a decode instance has
    /// room for the next.
    fn place_handoffs(&mut self) {
        while let Some(&r) = self.handoffs.front() {
            let stored = self.reqs[r as usize].stored;
            let blocks = self.c.decode_replica.blocks(stored);
            // Under a sliding window only the blocks the decode instance keeps are
            // sent: the window's and one more.
            let tokens = stored.min(blocks.saturating_mul(self.c.decode_replica.block_size));
            // The most free blocks, ties to the lower index: every decode instance
            // keeps the same watermark, so if that one cannot take it none can.
            let dst = (0..self.c.decode)
                .max_by_key(|&d| (self.decode[d as usize].free_blocks(), std::cmp::Reverse(d)))
                .unwrap_or(0);
            if !self.decode[dst as usize].reserve(blocks) {
                break;
            }
            self.handoffs.pop_front();
            let src = self.reqs[r as usize].inst;
            let secs = f64::from(tokens) * self.c.transfer_secs_per_token;
            let us = ((secs * 1e6).ceil() as Micros).max(1);
            let start = self
                .now
                .max(self.send_free[src as usize])
                .max(self.take_free[dst as usize]);
            self.send_free[src as usize] = start + us;
            self.take_free[dst as usize] = start + us;
            self.outcome.kv_transfers += 1;
            self.outcome.kv_transfer_secs += us as f64 / 1e6;
            self.outcome.kv_wait_secs += (start - self.now) as f64 / 1e6;
            self.queue.push(start + us, Ev::Sent { r, src, dst });
        }
    }

    fn finish(mut self) -> LlmOutcome {
        let mut o = std::mem::take(&mut self.outcome);
        o.span = self.now.saturating_sub(self.first);
        let all = self.prefill.iter().chain(&self.decode);
        let n = (self.c.prefill + self.c.decode) as f64;
        o.instance_secs = n * o.span as f64 / 1e6;
        o.peak_flops = self
            .c
            .prefill_model
            .peak_flops()
            .max(self.c.decode_model.peak_flops());
        o.peak_bw = self
            .c
            .prefill_model
            .peak_bw()
            .max(self.c.decode_model.peak_bw());
        for inst in all {
            o.busy_secs += inst.busy_us as f64 / 1e6;
            o.flops += inst.work.flops;
            o.bytes += inst.work.bytes;
            o.iterations += inst.iterations;
            o.swaps.add(&inst.swaps);
            if let Some(c) = inst.prefix_cache() {
                o.prefix.get_or_insert_with(Default::default).add_cache(c);
            }
        }
        let shares = |insts: &[Instance], m: &IterModel| -> (f64, f64) {
            insts
                .iter()
                .filter(|i| i.busy_us > 0)
                .map(|i| {
                    let busy = i.busy_us as f64 / 1e6;
                    (
                        i.work.flops / busy / m.peak_flops(),
                        i.work.bytes / busy / m.peak_bw(),
                    )
                })
                .fold((0.0, 0.0), |a, b| (a.0.max(b.0), a.1.max(b.1)))
        };
        let p = shares(&self.prefill, &self.c.prefill_model);
        let d = shares(&self.decode, &self.c.decode_model);
        o.max_flop_share = p.0.max(d.0);
        o.max_bw_share = p.1.max(d.1);
        if let (Some(p), Some(t)) = (&mut o.prefix, &self.host) {
            p.set_host(&t.borrow());
        }
        o.requests = self.reqs;
        o
    }
}

impl Serving for Sim<'_> {
    type Event = Ev;
    fn queue(&mut self) -> &mut EventQueue<Ev> {
        &mut self.queue
    }
    fn refused(&self, r: usize) -> bool {
        self.reqs[r].phase == Phase::Refused
    }
    fn tick(&mut self, t: Micros) {
        self.now = t;
        self.outcome.events += 1;
    }
    fn arrive(&mut self, r: usize) {
        // The fewest blocks queued and held, ties to the lower index. With prefix
        // caches, first the fewest prompt tokens to prefill before this one's first
        // token: those queued plus its own not cached there (Mooncake's Conductor).
        let q = &self.reqs[r];
        let (req, len) = (q.req, q.prefill_len());
        let pick = (0..self.c.prefill)
            .min_by_key(|&i| {
                let inst = &self.prefill[i as usize];
                let load = inst.load(&self.reqs);
                let ahead = inst.prefix_cache().map_or(0, |c| {
                    let queued = load.waiting_blocks * u64::from(load.block_size);
                    queued + u64::from(req.input.saturating_sub(c.lookup(&req, len).1))
                });
                (ahead, load.waiting_blocks + u64::from(inst.used_blocks()))
            })
            .unwrap_or(0);
        self.prefill[pick as usize].enqueue(r as u32, &mut self.reqs, pick);
        self.kick(true, pick);
    }
    fn handle(&mut self, ev: Ev) {
        match ev {
            Ev::IterDone(prefill, i) => {
                self.out.finished.clear();
                self.out.handoff.clear();
                let inst = if prefill {
                    &mut self.prefill[i as usize]
                } else {
                    &mut self.decode[i as usize]
                };
                inst.finish(self.now, &mut self.reqs, &mut self.out);
                self.done += self.out.finished.len();
                self.handoffs.extend(self.out.handoff.iter().copied());
                self.place_handoffs();
                self.kick(prefill, i);
            }
            Ev::Sent { r, src, dst } => {
                self.prefill[src as usize].release_sent(&mut self.reqs[r as usize]);
                let id = self.c.prefill + dst;
                self.decode[dst as usize].accept(r, &mut self.reqs, id);
                self.kick(true, src);
                self.kick(false, dst);
            }
        }
    }
    fn progress(&self) -> (usize, usize) {
        (self.done, self.total)
    }
    fn audit(&self) {
        // A prefill instance's blocks in use are its running requests' and those it
        // holds for sending; a decode instance's, its running requests' and those
        // reserved for copies in flight.
        for (i, inst) in self.prefill.iter().enumerate() {
            let held: u64 = self
                .reqs
                .iter()
                .filter(|q| q.phase == Phase::Frozen && q.inst == i as u32)
                .map(|q| u64::from(self.c.prefill_replica.blocks(q.stored)))
                .sum();
            assert_eq!(
                u64::from(inst.used_blocks()),
                inst.held_blocks(&self.reqs) + held,
                "prefill instance {i}"
            );
            if let Some(c) = inst.prefix_cache() {
                assert!(
                    c.idle_blocks() <= u64::from(inst.free_blocks()),
                    "prefill instance {i}: cached blocks beyond the free ones"
                );
            }
        }
        for (i, inst) in self.decode.iter().enumerate() {
            assert!(
                u64::from(inst.used_blocks()) >= inst.held_blocks(&self.reqs),
                "decode instance {i}"
            );
        }
    }
}
