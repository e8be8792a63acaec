//! The cluster simulation: arrivals, iterations, migrations and scaling on one event
//! queue.
//!
//! Instances change state only at iteration boundaries: a request dispatched to a busy
//! instance waits for its next iteration, a migrated request joins its destination's
//! batch at the next boundary, and a migration's last stage stops the request when its
//! source's current iteration ends. Live migration follows Llumnix's protocol: stages
//! copy the KV blocks written so far (all but the one being written) while the request
//! keeps decoding on the source, each preceded by a pre-allocation on the destination
//! that may fail (abort); once few enough blocks are left the request stops, the rest
//! are copied, the destination commits and the source frees. A request that finishes or
//! is preempted mid-copy aborts its migration.

use crate::LlmError;
use crate::latency::IterModel;
use crate::policy::{
    InstanceState, InstanceView, LlmPolicy, MigrationChoice, MigrationConfig, Scale,
};
use crate::replica::{Instance, Phase, ReplicaConfig, Req, StepOut};
use crate::serving::Serving;
use crate::workload::Prefixes;
use crate::workload::{Micros, Request, SEC};
use apiary_core::EventQueue;
use std::sync::Arc;

/// The instances of a run.
#[derive(Clone, Debug)]
pub struct Cluster {
    /// Instances at the start.
    pub instances: u32,
    /// How each schedules.
    pub replica: ReplicaConfig,
    /// How long its iterations take.
    pub model: IterModel,
    /// KV bytes of one token on one GPU of an instance (migration copies them).
    pub kv_bytes_per_token_per_gpu: f64,
    /// Automatic prefix caching over these block hashes of the requests' prompts;
    /// `None` prefills every prompt in full.
    pub prefix_cache: Option<Arc<Prefixes>>,
    /// With prefix caching: the cluster's host-memory tier below the instances' caches
    /// (Mooncake's DRAM pool).
    pub host_tier: Option<crate::prefix::HostTierConfig>,
}

#[derive(Clone, Copy, Debug)]
enum Ev {
    IterDone(u32),
    Tick,
    Scale,
    Ready(u32),
    Stage(u32),
    Commit(u32),
    Sample,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum MigState {
    Copying,
    LastPending,
    Last { frozen_at: Micros, tokens: u32 },
    Over,
}

#[derive(Clone, Copy, Debug)]
struct Migration {
    req: u32,
    started: Micros,
    src: u32,
    dst: u32,
    stage: u32,
    sent: u32,
    reserved: u32,
    state: MigState,
}

/// One sample of the cluster, once a simulated second.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Sample {
    /// Seconds.
    pub t: f64,
    /// Active instances (starting and draining ones included).
    pub instances: u32,
    /// Requests admitted.
    pub running: u32,
    /// Requests queued.
    pub waiting: u32,
    /// Share of KV blocks in use.
    pub kv_used: f64,
}

/// Why a migration was abandoned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AbortReason {
    /// The destination had no free blocks for the next stage.
    DestinationFull,
    /// The request finished before it moved.
    Finished,
    /// The request was preempted (or stopped decoding) on its source.
    Preempted,
    /// The copy did not converge within `max_stages`.
    Stages,
}

impl AbortReason {
    /// Every reason, in the order [`LlmOutcome::aborts`] counts them.
    pub const ALL: [AbortReason; 4] = [
        AbortReason::DestinationFull,
        AbortReason::Finished,
        AbortReason::Preempted,
        AbortReason::Stages,
    ];

    /// How summaries name it.
    pub fn name(self) -> &'static str {
        match self {
            AbortReason::DestinationFull => "destination_full",
            AbortReason::Finished => "finished",
            AbortReason::Preempted => "preempted",
            AbortReason::Stages => "max_stages",
        }
    }
}

/// What a run produced.
#[derive(Clone, Debug, Default)]
pub struct LlmOutcome {
    /// Per request, in trace order (refused ones have phase [`Phase::Refused`]).
    pub requests: Vec<Req>,
    /// Migrations completed.
    pub migrations: u64,
    /// Migrations abandoned.
    pub aborted_migrations: u64,
    /// Of them, by reason, in [`AbortReason::ALL`]'s order.
    pub aborts: [u64; 4],
    /// KV blocks the abandoned migrations had copied (or were copying): link traffic
    /// and destination blocks held for nothing.
    pub aborted_blocks: u64,
    /// Seconds from their first stage to the abort, summed: link time spent for nothing.
    pub aborted_secs: f64,
    /// Copy stages of the completed migrations, their stop-the-world stages included.
    pub migration_stages: u64,
    /// First stage to commit, summed over the completed migrations, seconds.
    pub migration_secs: f64,
    /// Instance-seconds provisioned (starting and draining time included).
    pub instance_secs: f64,
    /// Instance-seconds spent in iterations.
    pub busy_secs: f64,
    /// FLOPs and bytes over all iterations, and the peak FLOP/s and bandwidth of one
    /// instance, for the ceiling checks.
    pub flops: f64,
    /// Bytes read.
    pub bytes: f64,
    /// Peak FLOP/s of one instance.
    pub peak_flops: f64,
    /// Peak bytes/s of one instance.
    pub peak_bw: f64,
    /// Highest FLOP rate and byte rate any instance sustained over its busy time, as a
    /// share of its peak.
    pub max_flop_share: f64,
    /// The same for bandwidth.
    pub max_bw_share: f64,
    /// Iterations run.
    pub iterations: u64,
    /// Swapping to host memory, over all instances.
    pub swaps: crate::replica::Swaps,
    /// Disaggregated serving: KV caches sent from prefill to decode instances, and
    /// the seconds those copies took, summed.
    pub kv_transfers: u64,
    /// The seconds.
    pub kv_transfer_secs: f64,
    /// Seconds the copies waited for a link busy with an earlier copy, summed.
    pub kv_wait_secs: f64,
    /// Events handled.
    pub events: u64,
    /// First arrival to last completion, µs.
    pub span: Micros,
    /// Once-a-second samples.
    pub series: Vec<Sample>,
    /// Instances started and released by auto-scaling.
    pub scaled_up: u32,
    /// Instances released.
    pub scaled_down: u32,
    /// With prefix caching: prompt tokens the prefills covered, and those served from
    /// the cache.
    pub prefix: Option<PrefixStats>,
}

/// What the prefix caches did over a run.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PrefixStats {
    /// Prompt tokens (recomputations included) the prefills covered.
    pub prompt_tokens: u64,
    /// Of those, tokens whose KV was cached.
    pub hit_tokens: u64,
    /// Cached blocks evicted.
    pub evictions: u64,
    /// Of the cached tokens, those loaded from the host tier.
    pub host_hit_tokens: u64,
    /// Seconds of iterations spent loading them.
    pub host_load_secs: f64,
    /// Blocks the host tier evicted.
    pub host_evictions: u64,
}

impl PrefixStats {
    /// Adds one instance's cache counts.
    pub(crate) fn add_cache(&mut self, c: &crate::prefix::PrefixCache) {
        self.prompt_tokens += c.prompt_tokens;
        self.hit_tokens += c.hit_tokens;
        self.evictions += c.evictions;
    }

    /// Takes the counts of the host tier the instances shared.
    pub(crate) fn set_host(&mut self, t: &crate::prefix::HostTier) {
        self.host_hit_tokens = t.hit_tokens;
        self.host_load_secs = t.load_secs;
        self.host_evictions = t.evictions;
    }
}

struct Sim<'a> {
    cluster: &'a Cluster,
    replica: ReplicaConfig,
    policy: &'a mut dyn LlmPolicy,
    mig_cfg: Option<MigrationConfig>,
    reqs: Vec<Req>,
    insts: Vec<Instance>,
    state: Vec<InstanceState>,
    born: Vec<Micros>,
    gone: Vec<Option<Micros>>,
    mig_of: Vec<Option<u32>>,
    migs: Vec<Migration>,
    queue: EventQueue<Ev>,
    view: Vec<InstanceView>,
    pairs: Vec<(u32, u32)>,
    out: StepOut,
    now: Micros,
    done: usize,
    total: usize,
    outcome: LlmOutcome,
    /// The host tier every instance shares, if the cluster has one.
    host: Option<std::rc::Rc<std::cell::RefCell<crate::prefix::HostTier>>>,
}

/// Runs `requests` (sorted by arrival; `refused` marks those not to run) on `cluster`
/// under `policy`. `progress` is called with (done, total) now and then.
pub fn simulate(
    cluster: &Cluster,
    requests: &[Request],
    refused: &[bool],
    policy: &mut dyn LlmPolicy,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<LlmOutcome, LlmError> {
    if cluster.instances == 0 {
        return Err(LlmError::Invalid {
            what: "instances",
            message: "at least one instance is needed".into(),
        });
    }
    if requests.windows(2).any(|w| w[1].arrival < w[0].arrival) {
        return Err(LlmError::Invalid {
            what: "requests",
            message: "not sorted by arrival".into(),
        });
    }
    let mig_cfg = policy.migration();
    let replica = ReplicaConfig {
        priorities: policy.priorities(),
        ..cluster.replica
    };
    let mut sim = Sim {
        cluster,
        replica,
        policy,
        mig_cfg,
        reqs: requests.iter().map(|&r| Req::new(r)).collect(),
        insts: Vec::new(),
        state: Vec::new(),
        born: Vec::new(),
        gone: Vec::new(),
        mig_of: Vec::new(),
        migs: Vec::new(),
        queue: EventQueue::new(),
        view: Vec::new(),
        pairs: Vec::new(),
        out: StepOut::default(),
        now: 0,
        done: 0,
        total: 0,
        outcome: LlmOutcome::default(),
        host: cluster
            .prefix_cache
            .as_ref()
            .and(cluster.host_tier)
            .map(|c| {
                std::rc::Rc::new(std::cell::RefCell::new(crate::prefix::HostTier::new(
                    c.blocks,
                )))
            }),
    };
    for _ in 0..cluster.instances {
        sim.add_instance(InstanceState::Active);
    }
    // The cache must hold a whole request with the watermark free, else it could never
    // finish: such requests are refused up front.
    let fits = cluster.replica.fits_tokens();
    for (i, q) in sim.reqs.iter_mut().enumerate() {
        let len = u64::from(q.req.input) + u64::from(q.req.output);
        if refused.get(i).copied().unwrap_or(false) || len > fits || q.req.output == 0 {
            q.phase = Phase::Refused;
        }
    }
    sim.total = sim
        .reqs
        .iter()
        .filter(|q| q.phase != Phase::Refused)
        .count();
    sim.run(requests, progress);
    Ok(sim.finish())
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
        let pick = self
            .dispatch(r as u32)
            // A policy must pick an active instance; the first active one stands in.
            .or_else(|| {
                (0..self.insts.len())
                    .find(|&i| self.state[i] == InstanceState::Active)
                    .map(|i| i as u32)
            })
            .unwrap_or(0);
        let inst = &mut self.insts[pick as usize];
        inst.enqueue(r as u32, &mut self.reqs, pick);
        self.kick(pick);
    }
    fn handle(&mut self, ev: Ev) {
        self.event(ev);
    }
    fn progress(&self) -> (usize, usize) {
        (self.done, self.total)
    }
    #[cfg(debug_assertions)]
    fn audit(&self) {
        self.check();
    }
}

impl Sim<'_> {
    fn add_instance(&mut self, state: InstanceState) -> u32 {
        let id = self.insts.len() as u32;
        let mut inst = match &self.cluster.prefix_cache {
            Some(t) => Instance::with_prefix_cache(self.replica, Arc::clone(t)),
            None => Instance::new(self.replica),
        };
        if let (Some(t), Some(c)) = (&self.host, self.cluster.host_tier) {
            inst = inst.with_host_tier(std::rc::Rc::clone(t), c.ns_per_token);
        }
        self.insts.push(inst);
        self.state.push(state);
        self.born.push(self.now);
        self.gone.push(None);
        self.mig_of.push(None);
        id
    }

    fn refresh_view(&mut self) {
        self.view.clear();
        for (i, inst) in self.insts.iter().enumerate() {
            if self.gone[i].is_some() {
                continue;
            }
            self.view.push(InstanceView {
                id: i as u32,
                state: self.state[i],
                load: inst.load(&self.reqs),
                migrating: self.mig_of[i].is_some(),
                cached_tokens: 0,
            });
        }
    }

    fn run(&mut self, requests: &[Request], progress: &mut dyn FnMut(usize, usize)) {
        let first = requests.first().map_or(0, |r| r.arrival);
        self.now = first;
        if let Some(iv) = self.policy.interval() {
            self.queue.push(first + iv, Ev::Tick);
        }
        if let Some(sc) = self.policy.scaling() {
            self.queue.push(first + sc.interval, Ev::Scale);
        }
        self.queue.push(first, Ev::Sample);
        crate::serving::run(self, requests, progress);
        self.outcome.span = self.now.saturating_sub(first);
    }

    /// The policy's instance for request `r`, if it named an active one.
    fn dispatch(&mut self, r: u32) -> Option<u32> {
        self.refresh_view();
        let q = &self.reqs[r as usize];
        if self.cluster.prefix_cache.is_some() {
            let len = q.prefill_len();
            for v in &mut self.view {
                if let Some(c) = self.insts[v.id as usize].prefix_cache() {
                    v.cached_tokens = c.lookup(&q.req, len).1;
                }
            }
        }
        let req = q.req;
        self.policy.dispatch(&req, &self.view).filter(|&i| {
            (i as usize) < self.insts.len() && self.state[i as usize] == InstanceState::Active
        })
    }

    fn kick(&mut self, i: u32) {
        let inst = &mut self.insts[i as usize];
        if inst.busy() || self.state[i as usize] == InstanceState::Starting {
            return;
        }
        self.out.preempted.clear();
        if let Some(d) = inst.start(self.now, &mut self.reqs, &self.cluster.model, &mut self.out) {
            self.queue.push(self.now + d, Ev::IterDone(i));
        }
        // An abort kicks its destination, which may preempt in turn: that kick gets a
        // list of its own.
        let preempted = std::mem::take(&mut self.out.preempted);
        for &r in &preempted {
            if let Some(m) = self.reqs[r as usize].migration {
                self.abort(m, AbortReason::Preempted);
            }
        }
        self.out.preempted = preempted;
    }

    fn event(&mut self, ev: Ev) {
        match ev {
            Ev::IterDone(i) => {
                self.out.finished.clear();
                self.insts[i as usize].finish(self.now, &mut self.reqs, &mut self.out);
                for k in 0..self.out.finished.len() {
                    let r = self.out.finished[k];
                    self.done += 1;
                    if let Some(m) = self.reqs[r as usize].migration {
                        self.abort(m, AbortReason::Finished);
                    }
                }
                // The last stage of a migration out of `i` stops its request here.
                if let Some(m) = self.mig_of[i as usize] {
                    let mg = self.migs[m as usize];
                    if mg.src == i && mg.state == MigState::LastPending {
                        self.last_stage(m);
                    }
                }
                self.kick(i);
                self.maybe_release(i);
            }
            Ev::Tick => {
                if self.done < self.total {
                    self.rebalance();
                    if let Some(iv) = self.policy.interval() {
                        self.queue.push(self.now + iv, Ev::Tick);
                    }
                }
            }
            Ev::Scale => {
                if self.done < self.total {
                    self.scale();
                    if let Some(sc) = self.policy.scaling() {
                        self.queue.push(self.now + sc.interval, Ev::Scale);
                    }
                }
            }
            Ev::Ready(i) => {
                self.state[i as usize] = InstanceState::Active;
                self.kick(i);
            }
            Ev::Stage(m) => self.stage_done(m),
            Ev::Commit(m) => self.commit(m),
            Ev::Sample => {
                self.sample();
                if self.done < self.total {
                    self.queue.push(self.now + SEC, Ev::Sample);
                }
            }
        }
    }

    fn sample(&mut self) {
        let mut s = Sample {
            t: self.now as f64 / 1e6,
            ..Sample::default()
        };
        let (mut used, mut total) = (0u64, 0u64);
        for (i, inst) in self.insts.iter().enumerate() {
            if self.gone[i].is_some() {
                continue;
            }
            s.instances += 1;
            let l = inst.load(&self.reqs);
            s.running += l.running;
            s.waiting += l.waiting;
            used += u64::from(l.total_blocks - l.free_blocks);
            total += u64::from(l.total_blocks);
        }
        s.kv_used = used as f64 / total.max(1) as f64;
        self.outcome.series.push(s);
    }

    fn rebalance(&mut self) {
        let Some(cfg) = self.mig_cfg else { return };
        self.refresh_view();
        self.pairs.clear();
        self.policy.rebalance(&self.view, &mut self.pairs);
        for k in 0..self.pairs.len() {
            let (src, dst) = self.pairs[k];
            let ok = |i: u32| (i as usize) < self.insts.len() && self.gone[i as usize].is_none();
            if src == dst
                || !ok(src)
                || !ok(dst)
                || self.mig_of[src as usize].is_some()
                || self.mig_of[dst as usize].is_some()
            {
                continue;
            }
            if self.state[dst as usize] != InstanceState::Active {
                continue;
            }
            let inst = &self.insts[src as usize];
            let pick = match cfg.choice {
                MigrationChoice::Lcfs => inst.decoding_newest_first(&self.reqs).next(),
                MigrationChoice::ShortestRunning => inst
                    .decoding_newest_first(&self.reqs)
                    .min_by_key(|&r| (inst.progress(&self.reqs[r as usize]).0, r)),
            };
            let Some(r) = pick else { continue };
            let m = self.migs.len() as u32;
            self.migs.push(Migration {
                req: r,
                started: self.now,
                src,
                dst,
                stage: 0,
                sent: 0,
                reserved: 0,
                state: MigState::Copying,
            });
            self.mig_of[src as usize] = Some(m);
            self.mig_of[dst as usize] = Some(m);
            self.reqs[r as usize].migration = Some(m);
            self.next_stage(m, cfg);
        }
    }

    fn block_time(&self, cfg: &MigrationConfig, blocks: u32) -> Micros {
        let bytes = f64::from(blocks)
            * f64::from(self.cluster.replica.block_size)
            * self.cluster.kv_bytes_per_token_per_gpu;
        cfg.stage_overhead + (bytes / cfg.bandwidth * 1e6).ceil() as Micros
    }

    /// Starts the next copy stage, or schedules the last one.
    fn next_stage(&mut self, m: u32, cfg: MigrationConfig) {
        let mg = self.migs[m as usize];
        let q = &self.reqs[mg.req as usize];
        let stored = self.insts[mg.src as usize].progress(q).0;
        let blocks = self.cluster.replica.blocks(stored);
        let new = blocks.saturating_sub(mg.sent);
        if new <= cfg.last_stage_blocks {
            self.migs[m as usize].state = MigState::LastPending;
            return;
        }
        if mg.stage >= cfg.max_stages {
            self.abort(m, AbortReason::Stages);
            return;
        }
        // Everything but the block still being written.
        let copy = new - 1;
        if !self.insts[mg.dst as usize].reserve(copy) {
            self.abort(m, AbortReason::DestinationFull);
            return;
        }
        let mg = &mut self.migs[m as usize];
        mg.reserved += copy;
        mg.sent += copy;
        mg.stage += 1;
        let t = self.block_time(&cfg, copy);
        self.queue.push(self.now + t, Ev::Stage(m));
    }

    fn stage_done(&mut self, m: u32) {
        let Some(cfg) = self.mig_cfg else { return };
        if self.migs[m as usize].state != MigState::Copying {
            return;
        }
        self.next_stage(m, cfg);
    }

    /// Stops the request at its source's iteration boundary and copies the rest.
    fn last_stage(&mut self, m: u32) {
        let Some(cfg) = self.mig_cfg else { return };
        let mg = self.migs[m as usize];
        let q = &self.reqs[mg.req as usize];
        if q.phase != Phase::Decoding || q.inst != mg.src {
            self.abort(m, AbortReason::Preempted);
            return;
        }
        let stored = self.insts[mg.src as usize].freeze(mg.req, &mut self.reqs);
        let need = self.cluster.replica.blocks(stored);
        let more = need.saturating_sub(mg.reserved);
        if !self.insts[mg.dst as usize].reserve(more) {
            self.insts[mg.src as usize].unfreeze(mg.req, &mut self.reqs);
            self.abort(m, AbortReason::DestinationFull);
            self.kick(mg.src);
            return;
        }
        let copy = need.saturating_sub(mg.sent);
        let mg = &mut self.migs[m as usize];
        mg.reserved += more;
        mg.sent = need;
        mg.state = MigState::Last {
            frozen_at: self.now,
            tokens: stored,
        };
        let t = self.block_time(&cfg, copy);
        self.queue.push(self.now + t, Ev::Commit(m));
    }

    fn commit(&mut self, m: u32) {
        let mg = self.migs[m as usize];
        let MigState::Last { frozen_at, tokens } = mg.state else {
            return;
        };
        self.insts[mg.src as usize].release(tokens);
        // The reservation on the destination becomes the request's blocks; any excess
        // (blocks of the one partly written) goes back.
        let need = self.cluster.replica.blocks(tokens);
        self.insts[mg.dst as usize].unreserve(mg.reserved - need.min(mg.reserved));
        let q = &mut self.reqs[mg.req as usize];
        q.migration = None;
        q.migrations += 1;
        q.downtime += self.now - frozen_at;
        self.insts[mg.dst as usize].accept(mg.req, &mut self.reqs, mg.dst);
        self.migs[m as usize].state = MigState::Over;
        self.mig_of[mg.src as usize] = None;
        self.mig_of[mg.dst as usize] = None;
        self.outcome.migrations += 1;
        self.outcome.migration_stages += u64::from(mg.stage) + 1;
        self.outcome.migration_secs += (self.now - mg.started) as f64 / 1e6;
        self.kick(mg.dst);
        self.kick(mg.src);
        self.maybe_release(mg.src);
    }

    fn abort(&mut self, m: u32, why: AbortReason) {
        let mg = self.migs[m as usize];
        if mg.state == MigState::Over {
            return;
        }
        self.outcome.aborts[why as usize] += 1;
        self.outcome.aborted_blocks += u64::from(mg.sent);
        self.outcome.aborted_secs += self.now.saturating_sub(mg.started) as f64 / 1e6;
        self.insts[mg.dst as usize].unreserve(mg.reserved);
        self.reqs[mg.req as usize].migration = None;
        self.migs[m as usize].state = MigState::Over;
        self.mig_of[mg.src as usize] = None;
        self.mig_of[mg.dst as usize] = None;
        self.outcome.aborted_migrations += 1;
        // The blocks it held back may admit the destination's queue.
        self.kick(mg.dst);
    }

    fn scale(&mut self) {
        self.refresh_view();
        let max = match self.policy.scaling().map_or(0, |s| s.max) {
            0 => self.cluster.instances,
            m => m,
        };
        match self.policy.scale(&self.view, max) {
            Scale::Hold => {}
            Scale::Up(k) => {
                let startup = self.policy.scaling().map_or(0, |s| s.startup);
                for _ in 0..k {
                    let id = self.add_instance(InstanceState::Starting);
                    self.queue.push(self.now + startup, Ev::Ready(id));
                    self.outcome.scaled_up += 1;
                }
            }
            Scale::Down(i) => {
                let active = self
                    .state
                    .iter()
                    .zip(&self.gone)
                    .filter(|(s, g)| **s == InstanceState::Active && g.is_none())
                    .count();
                if (i as usize) < self.insts.len()
                    && self.state[i as usize] == InstanceState::Active
                    && self.gone[i as usize].is_none()
                    && active > 1
                {
                    self.state[i as usize] = InstanceState::Terminating;
                    self.maybe_release(i);
                }
            }
        }
    }

    /// Releases a drained terminating instance. Without migration its queue would never
    /// empty, so its queued requests go back through dispatch.
    fn maybe_release(&mut self, i: u32) {
        let iu = i as usize;
        if self.state[iu] != InstanceState::Terminating || self.gone[iu].is_some() {
            return;
        }
        if self.mig_cfg.is_none() || self.insts[iu].running() == 0 {
            // Requests that have not started go back to dispatch.
            let queued = self.insts[iu].take_waiting(&mut self.reqs);
            for r in queued {
                if let Some(d) = self.dispatch(r) {
                    self.insts[d as usize].enqueue(r, &mut self.reqs, d);
                    self.kick(d);
                } else {
                    self.insts[iu].enqueue(r, &mut self.reqs, i);
                }
            }
        }
        let inst = &self.insts[iu];
        if inst.is_empty() && !inst.busy() && self.mig_of[iu].is_none() {
            self.gone[iu] = Some(self.now);
            self.outcome.scaled_down += 1;
        }
    }

    /// Every block is free, held by a request, held by a migration's frozen source
    /// copy, or reserved for an incoming migration; none is counted twice.
    #[cfg(debug_assertions)]
    fn check(&self) {
        let mut extra = vec![0u64; self.insts.len()];
        for mg in &self.migs {
            match mg.state {
                MigState::Over => {}
                MigState::Last { tokens, .. } => {
                    extra[mg.src as usize] += u64::from(self.cluster.replica.blocks(tokens));
                    extra[mg.dst as usize] += u64::from(mg.reserved);
                }
                _ => extra[mg.dst as usize] += u64::from(mg.reserved),
            }
        }
        let mut high = vec![0u32; self.insts.len()];
        for q in &self.reqs {
            let on = match q.phase {
                Phase::Waiting | Phase::Prefilling | Phase::Decoding | Phase::Swapped => true,
                // Frozen on its source until the commit clears its migration.
                Phase::Frozen => q.migration.is_none(),
                _ => false,
            };
            if on && q.req.priority > 0 {
                high[q.inst as usize] += 1;
            }
        }
        for (i, inst) in self.insts.iter().enumerate() {
            assert_eq!(
                inst.load(&self.reqs).high,
                high[i],
                "instance {i} high count"
            );
            if let Some(c) = inst.prefix_cache() {
                assert!(
                    c.idle_blocks() <= u64::from(inst.free_blocks()),
                    "instance {i}: cached blocks beyond the free ones"
                );
            }
            let total = u64::from(inst.free_blocks()) + inst.held_blocks(&self.reqs) + extra[i];
            assert_eq!(
                total,
                u64::from(self.cluster.replica.total_blocks),
                "instance {i} at {} µs",
                self.now
            );
        }
    }

    fn finish(mut self) -> LlmOutcome {
        let end = self.now;
        let mut o = std::mem::take(&mut self.outcome);
        o.peak_flops = self.cluster.model.peak_flops();
        o.peak_bw = self.cluster.model.peak_bw();
        for (i, inst) in self.insts.iter().enumerate() {
            let until = self.gone[i].unwrap_or(end);
            o.instance_secs += until.saturating_sub(self.born[i]) as f64 / 1e6;
            o.busy_secs += inst.busy_us as f64 / 1e6;
            o.flops += inst.work.flops;
            o.bytes += inst.work.bytes;
            o.iterations += inst.iterations;
            o.swaps.add(&inst.swaps);
            if let Some(c) = inst.prefix_cache() {
                o.prefix
                    .get_or_insert_with(PrefixStats::default)
                    .add_cache(c);
            }
            let busy = inst.busy_us as f64 / 1e6;
            if busy > 0.0 {
                o.max_flop_share = o.max_flop_share.max(inst.work.flops / busy / o.peak_flops);
                o.max_bw_share = o.max_bw_share.max(inst.work.bytes / busy / o.peak_bw);
            }
        }
        if let (Some(p), Some(t)) = (&mut o.prefix, &self.host) {
            p.set_host(&t.borrow());
        }
        o.requests = self.reqs;
        o
    }
}
