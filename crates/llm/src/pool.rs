//! A pool of GPU groups shared by several LLM services (SeaLLM's setting), simulated on
//! one event queue.
//!
//! Each group is `tp` GPUs holding the weights of the services placed on it and one KV
//! cache. Every service on a group is a vLLM-style [`Instance`] of its own model; the
//! group runs one of them per iteration (models do not batch together), chosen by the
//! pool policy at each boundary. With a unified KV cache the instances draw from the
//! group's free memory: before an instance's iteration it is granted whatever the
//! others do not hold, in blocks of its own model's size; without, each keeps a fixed
//! share. Requests go to the freest group hosting their service.
//!
//! Services are sized from their traces before the run (the "history" placement
//! reads): each one's load is the GPU time its requests need on an idle group at a
//! typical batch, and its budget (SeaLLM's doubling-budget start) is what a median
//! request of it takes alone.
//!
//! A policy that re-places is offered each service's load since its last look: the
//! GPU time of its arrivals per second (each costed at its service's mean output,
//! since outputs are not known on arrival) plus what it still owes (its queued and
//! running requests at their mean cost) spread over the next interval.
//! On a group whose set changes, a service that leaves takes no new work: its queue
//! goes to its other groups and what it admitted runs to the end before its weights
//! are dropped. A service that joins queues work at once but runs only once its
//! weights are in: they load from host memory at `load_bw` when the group's free
//! memory holds them, and once no service is still leaving the others are granted no
//! KV beyond what leaves the incoming weights room, so that room comes free.

use crate::LlmError;
use crate::engine::{LlmOutcome, Sample};
use crate::hardware::{GpuSpec, MemoryPlan, ModelSpec};
use crate::latency::{Batch, IterModel};
use crate::metrics::{Group, LlmSummary, Slo};
use crate::policy::pool::{PoolPolicy, ServiceDemand, SubView};
use crate::replica::{Instance, Phase, ReplicaConfig, Req, StepOut};
use crate::serving::Serving;
use crate::workload::{Clipped, Micros, Request, SEC};
use apiary_core::EventQueue;

/// One service: a model and how its instances run.
#[derive(Clone, Debug)]
pub struct Service {
    /// Its name.
    pub name: String,
    /// The model it serves.
    pub model: ModelSpec,
    /// Iteration times of that model on one group.
    pub iter: IterModel,
    /// Longest request it admits in one prefill, tokens.
    pub max_len: u32,
    /// Chunked-prefill budget, if any.
    pub chunk: Option<u32>,
}

impl Service {
    /// An instance of this service with `blocks` of KV cache: vLLM's defaults, its
    /// chunk budget, and its model's sliding window.
    fn replica(&self, blocks: u32) -> ReplicaConfig {
        ReplicaConfig {
            chunk: self.chunk,
            window: self.model.sliding_window,
            ..ReplicaConfig::vllm(blocks, self.max_len)
        }
    }
}

/// The GPUs.
#[derive(Clone, Debug)]
pub struct Pool {
    /// Groups of `tp` GPUs.
    pub groups: u32,
    /// The GPU.
    pub gpu: GpuSpec,
    /// GPUs per group (tensor parallelism of every model on it).
    pub tp: u32,
    /// How much of each GPU the engine may use.
    pub mem: MemoryPlan,
    /// Host-to-GPU bandwidth for loading a model's weights when re-placed, bytes/s per
    /// GPU.
    pub load_bw: f64,
}

impl Pool {
    /// Effective PCIe 4.0 x16 host-to-device copy rate from pinned memory, bytes/s.
    pub const PCIE4_LOAD_BW: f64 = 25e9;

    /// Bytes of one group the engines may use for weights and KV.
    pub fn usable_bytes(&self) -> f64 {
        f64::from(self.tp)
            * (self.gpu.mem_bytes * self.mem.utilisation - self.mem.activation_reserve)
    }
}

/// Typical decode batch for load estimates.
const TYPICAL_BATCH: u64 = 16;

fn prefill_secs(iter: &IterModel, tokens: u32) -> f64 {
    let n = u64::from(tokens.max(1));
    iter.cost(&Batch {
        prefill_tokens: n,
        prefill_pairs: n as f64 * (n as f64 + 1.0) / 2.0,
        logits: 1,
        ..Batch::default()
    })
    .secs
}

fn decode_secs(iter: &IterModel, seqs: u64, ctx: u32) -> f64 {
    iter.cost(&Batch {
        decode_seqs: seqs,
        decode_ctx: seqs * u64::from(ctx.max(1)),
        logits: seqs,
        ..Batch::default()
    })
    .secs
}

/// What a request of `input` and `output` tokens takes alone on an idle group, seconds.
pub fn unloaded_secs(iter: &IterModel, input: u32, output: u32) -> f64 {
    prefill_secs(iter, input)
        + f64::from(output.saturating_sub(1)) * decode_secs(iter, 1, input + output / 2)
}

/// Bytes of a group's `usable` memory the weights of `set` leave for KV (negative: they
/// do not fit).
fn kv_bytes_beside(services: &[Service], usable: f64, set: &[u16]) -> f64 {
    usable
        - set
            .iter()
            .map(|&s| services[s as usize].model.weight_bytes)
            .sum::<f64>()
}

fn median(mut v: Vec<u32>) -> u32 {
    if v.is_empty() {
        return 1;
    }
    v.sort_unstable();
    v[(v.len() - 1) / 2]
}

/// What the history of each service's requests says about it.
struct Profile {
    demand: Vec<ServiceDemand>,
    budgets: Vec<Micros>,
    /// GPU seconds per output token at a typical batch.
    per_token: Vec<f64>,
    mean_out: Vec<f64>,
    /// GPU seconds of a mean request.
    mean_secs: Vec<f64>,
}

/// Each service's load and budget, from its requests.
fn profile(services: &[Service], requests: &[Request], service_of: &[u16]) -> Profile {
    let mut demand = Vec::with_capacity(services.len());
    let mut budgets = Vec::with_capacity(services.len());
    let mut per_tokens = Vec::with_capacity(services.len());
    let mut mean_outs = Vec::with_capacity(services.len());
    let mut mean_secs = Vec::with_capacity(services.len());
    for (s, svc) in services.iter().enumerate() {
        let mine = || {
            requests
                .iter()
                .zip(service_of)
                .filter(move |&(_, &o)| o as usize == s)
                .map(|(r, _)| r)
        };
        let n = mine().count().max(1) as f64;
        let first = mine().map(|r| r.arrival).min().unwrap_or(0);
        let last = mine().map(|r| r.arrival).max().unwrap_or(0);
        let span = ((last - first) as f64 / 1e6).max(1.0);
        let mean_in = mine().map(|r| f64::from(r.input)).sum::<f64>() / n;
        let mean_out = mine().map(|r| f64::from(r.output)).sum::<f64>() / n;
        let per_token = decode_secs(
            &svc.iter,
            TYPICAL_BATCH,
            (mean_in + mean_out / 2.0).round() as u32,
        ) / TYPICAL_BATCH as f64;
        let work = mine()
            .map(|r| prefill_secs(&svc.iter, r.input) + f64::from(r.output) * per_token)
            .sum::<f64>();
        demand.push(ServiceDemand {
            name: svc.name.clone(),
            load: work / span,
        });
        let med_in = median(mine().map(|r| r.input).collect());
        let med_out = median(mine().map(|r| r.output).collect());
        budgets.push((unloaded_secs(&svc.iter, med_in, med_out) * 1e6).ceil() as Micros);
        per_tokens.push(per_token);
        mean_outs.push(mean_out);
        mean_secs.push(work / n);
    }
    Profile {
        demand,
        budgets,
        per_token: per_tokens,
        mean_out: mean_outs,
        mean_secs,
    }
}

/// Where a service stands on a group as placements change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Life {
    /// Its weights are in memory and it runs.
    Active,
    /// Placed elsewhere: it runs what it admitted until empty, then drops its weights.
    Leaving,
    /// Its weights are not in memory.
    Gone,
    /// Placed here, waiting for memory for its weights; requests may queue.
    Joining,
    /// Loading its weights until then.
    Loading(Micros),
}

impl Life {
    fn holds_weights(self) -> bool {
        matches!(self, Life::Active | Life::Leaving | Life::Loading(_))
    }

    fn hosts(self) -> bool {
        matches!(self, Life::Active | Life::Joining | Life::Loading(_))
    }
}

struct Sub {
    service: u16,
    inst: Instance,
    life: Life,
    weight_bytes: f64,
    block_bytes: f64,
    /// GPU time of its iterations on this group, µs.
    served: Micros,
    /// `served` when it last admitted a request.
    admit_mark: Micros,
    /// When its last iteration ended (or it last got work after being empty).
    last_end: Micros,
}

struct GroupRt {
    subs: Vec<Sub>,
    /// Usable memory less the weights it holds.
    kv_bytes: f64,
    /// KV memory not granted, kept for weights about to load.
    reserve: f64,
    /// Whether a service is leaving, joining or loading.
    changing: bool,
    busy: Option<usize>,
}

impl GroupRt {
    fn used_bytes(&self) -> f64 {
        self.subs
            .iter()
            .map(|s| f64::from(s.inst.used_blocks()) * s.block_bytes)
            .sum()
    }

    /// KV bytes its instances may be granted in all.
    fn kv_limit(&self) -> f64 {
        self.kv_bytes - self.reserve
    }
}

/// What a pool run produced.
#[derive(Debug)]
pub struct PoolOutcome {
    /// Requests, instances (groups), iterations and samples, as a single-model run
    /// reports them.
    pub outcome: LlmOutcome,
    /// The services each group hosted at the start.
    pub placement: Vec<Vec<u16>>,
    /// Each service's estimated load and name.
    pub demand: Vec<ServiceDemand>,
    /// Each re-placement: when, and the new sets.
    pub replans: Vec<(Micros, Vec<Vec<u16>>)>,
    /// Model weights loaded onto groups by re-placement.
    pub model_loads: u32,
}

struct Sim<'a> {
    services: &'a [Service],
    service_of: &'a [u16],
    policy: &'a mut dyn PoolPolicy,
    unified: bool,
    budgets: Vec<Micros>,
    per_token: Vec<f64>,
    mean_out: Vec<f64>,
    mean_secs: Vec<f64>,
    /// Per service, the longest request accepted, tokens.
    longest: Vec<u64>,
    usable: f64,
    /// Host-to-group weight loading, bytes/s.
    group_load_bw: f64,
    replan_every: Option<Micros>,
    /// The sets the policy last placed.
    placement: Vec<Vec<u16>>,
    /// Per service, GPU seconds of the arrivals since the last look.
    window: Vec<f64>,
    window_start: Micros,
    replans: Vec<(Micros, Vec<Vec<u16>>)>,
    model_loads: u32,
    moved: Vec<u32>,
    groups: Vec<GroupRt>,
    /// Per service, the (group, sub) pairs hosting it.
    hosts: Vec<Vec<(u32, usize)>>,
    reqs: Vec<Req>,
    queue: EventQueue<Ev>,
    cands: Vec<usize>,
    views: Vec<SubView>,
    out: StepOut,
    now: Micros,
    done: usize,
    total: usize,
    events: u64,
    series: Vec<Sample>,
}

#[derive(Clone, Copy, Debug)]
enum Ev {
    IterDone(u32),
    Sample,
    Replan,
    Ready(u32),
}

/// Runs `requests` (sorted by arrival; request `i` belongs to service `service_of[i]`;
/// `refused` marks those not to run) on `pool` under `policy`.
pub fn simulate_pool(
    pool: &Pool,
    services: &[Service],
    requests: &[Request],
    service_of: &[u16],
    refused: &[bool],
    policy: &mut dyn PoolPolicy,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<PoolOutcome, LlmError> {
    check_inputs(pool, services, requests, service_of)?;
    let usable = pool.usable_bytes();
    let room = |set: &[u16]| kv_bytes_beside(services, usable, set) / usable;
    for svc in services {
        if svc.model.weight_bytes >= usable {
            return Err(LlmError::DoesNotFit {
                model: svc.model.name.clone(),
                gpu: pool.gpu.name.clone(),
                tp: pool.tp,
                weights_gb: svc.model.weight_bytes / 1e9,
                usable_gb: usable / 1e9,
            });
        }
    }
    let Profile {
        demand,
        budgets,
        per_token,
        mean_out,
        mean_secs,
    } = profile(services, requests, service_of);
    let placement = policy.place(&demand, pool.groups, &room);
    if placement.len() != pool.groups as usize {
        return invalid(
            "placement",
            format!("{} groups placed of {}", placement.len(), pool.groups),
        );
    }
    let unified = policy.unified_kv();
    let (groups, hosts) = build_groups(services, &placement, &demand, usable, unified)?;
    let (reqs, total, longest) = requests_to_run(requests, service_of, refused, &groups, &hosts);
    let replan_every = if unified {
        policy.replan_every().filter(|&e| e > 0)
    } else {
        None
    };
    let mut sim = Sim {
        services,
        service_of,
        policy,
        unified,
        budgets,
        per_token,
        mean_out,
        mean_secs,
        longest,
        usable,
        group_load_bw: pool.load_bw.max(1.0) * f64::from(pool.tp),
        replan_every,
        placement: placement.clone(),
        window: vec![0.0; services.len()],
        window_start: 0,
        replans: Vec::new(),
        model_loads: 0,
        moved: Vec::new(),
        groups,
        hosts,
        reqs,
        queue: EventQueue::new(),
        cands: Vec::new(),
        views: Vec::new(),
        out: StepOut::default(),
        now: 0,
        done: 0,
        total,
        events: 0,
        series: Vec::new(),
    };
    let first = requests.first().map_or(0, |r| r.arrival);
    sim.now = first;
    sim.queue.push(first, Ev::Sample);
    sim.window_start = first;
    if let Some(every) = replan_every {
        sim.queue.push(first + every, Ev::Replan);
    }
    crate::serving::run(&mut sim, requests, progress);
    Ok(sim.finish(first, placement, demand))
}

/// Refuses a run whose inputs do not make one.
fn check_inputs(
    pool: &Pool,
    services: &[Service],
    requests: &[Request],
    service_of: &[u16],
) -> Result<(), LlmError> {
    if services.is_empty() || services.len() > usize::from(u16::MAX) {
        return invalid(
            "services",
            format!("{} services; expected 1 to 65535", services.len()),
        );
    }
    if pool.groups == 0 {
        return invalid("groups", "the pool needs at least one GPU group".into());
    }
    if service_of.len() != requests.len()
        || service_of.iter().any(|&s| s as usize >= services.len())
    {
        return invalid(
            "requests",
            "every request needs a service of the run".into(),
        );
    }
    if requests.windows(2).any(|w| w[1].arrival < w[0].arrival) {
        return invalid("requests", "not sorted by arrival".into());
    }
    Ok(())
}

/// `what` is wrong, as `message` says.
fn invalid<T>(what: &'static str, message: String) -> Result<T, LlmError> {
    Err(LlmError::Invalid { what, message })
}

/// The groups `placement` makes, each service an instance on the groups hosting it,
/// and the (group, instance) pairs hosting each service.
#[allow(clippy::type_complexity)]
fn build_groups(
    services: &[Service],
    placement: &[Vec<u16>],
    demand: &[ServiceDemand],
    usable: f64,
    unified: bool,
) -> Result<(Vec<GroupRt>, Vec<Vec<(u32, usize)>>), LlmError> {
    let room = |set: &[u16]| kv_bytes_beside(services, usable, set) / usable;
    let mut groups = Vec::with_capacity(placement.len());
    let mut hosts = vec![Vec::new(); services.len()];
    for (g, set) in placement.iter().enumerate() {
        let r = room(set);
        if set.is_empty() || r <= 0.0 || set.iter().any(|&s| s as usize >= services.len()) {
            return invalid(
                "placement",
                format!("group {g} holds services {set:?}, whose weights do not fit"),
            );
        }
        let kv_bytes = r * usable;
        let load_here: f64 = set.iter().map(|&s| demand[s as usize].load).sum();
        let mut subs = Vec::with_capacity(set.len());
        for &s in set {
            let svc = &services[s as usize];
            let block_bytes = svc.model.kv_bytes_per_token * 16.0;
            let share = if unified || set.len() == 1 || load_here <= 0.0 {
                1.0
            } else {
                demand[s as usize].load / load_here
            };
            let blocks = (kv_bytes * share / block_bytes)
                .floor()
                .min(f64::from(u32::MAX)) as u32;
            let cfg = svc.replica(blocks);
            hosts[s as usize].push((g as u32, subs.len()));
            subs.push(Sub {
                service: s,
                inst: Instance::new(cfg),
                life: Life::Active,
                weight_bytes: svc.model.weight_bytes,
                block_bytes,
                served: 0,
                admit_mark: 0,
                last_end: 0,
            });
        }
        groups.push(GroupRt {
            subs,
            kv_bytes,
            reserve: 0.0,
            changing: false,
            busy: None,
        });
    }
    if let Some(s) = hosts.iter().position(Vec::is_empty) {
        return invalid(
            "placement",
            format!(
                "service '{}' is on no group (more services than groups?)",
                services[s].name
            ),
        );
    }
    Ok((groups, hosts))
}

/// The requests as the run tracks them, those that cannot fit every instance of their
/// service with the watermark free (or are refused) marked so; how many run; and per
/// service, the longest request accepted, tokens.
fn requests_to_run(
    requests: &[Request],
    service_of: &[u16],
    refused: &[bool],
    groups: &[GroupRt],
    hosts: &[Vec<(u32, usize)>],
) -> (Vec<Req>, usize, Vec<u64>) {
    let mut reqs: Vec<Req> = requests.iter().map(|&r| Req::new(r)).collect();
    // A request must fit every instance of its service with the watermark free.
    for (i, q) in reqs.iter_mut().enumerate() {
        let s = service_of[i] as usize;
        let fits = hosts[s]
            .iter()
            .map(|&(g, k)| groups[g as usize].subs[k].inst.config().fits_tokens())
            .min()
            .unwrap_or(0);
        let len = u64::from(q.req.input) + u64::from(q.req.output);
        if refused.get(i).copied().unwrap_or(false) || len > fits || q.req.output == 0 {
            q.phase = Phase::Refused;
        }
    }
    let total = reqs.iter().filter(|q| q.phase != Phase::Refused).count();
    let mut longest = vec![0u64; hosts.len()];
    for (q, &s) in reqs.iter().zip(service_of) {
        if q.phase != Phase::Refused {
            let l = &mut longest[s as usize];
            *l = (*l).max(u64::from(q.req.input) + u64::from(q.req.output));
        }
    }
    (reqs, total, longest)
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
        self.events += 1;
    }
    fn arrive(&mut self, r: usize) {
        self.arrive_at(r as u32);
    }
    fn handle(&mut self, ev: Ev) {
        let t = self.now;
        match ev {
            Ev::IterDone(g) => self.iter_done(g),
            Ev::Sample => {
                self.sample();
                if self.done < self.total {
                    self.queue.push(t + SEC, Ev::Sample);
                }
            }
            Ev::Replan => {
                self.replan();
                if let (Some(every), true) = (self.replan_every, self.done < self.total) {
                    self.queue.push(t + every, Ev::Replan);
                }
            }
            Ev::Ready(g) => self.ready(g),
        }
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
    fn free_blocks(&self, g: usize, k: usize) -> f64 {
        let grp = &self.groups[g];
        let sub = &grp.subs[k];
        if self.unified {
            ((grp.kv_limit() - grp.used_bytes()) / sub.block_bytes).floor()
        } else {
            f64::from(sub.inst.free_blocks())
        }
    }

    fn arrive_at(&mut self, r: u32) {
        if self.replan_every.is_some() {
            let s = self.service_of[r as usize] as usize;
            let q = &self.reqs[r as usize].req;
            self.window[s] += prefill_secs(&self.services[s].iter, q.input)
                + self.mean_out[s] * self.per_token[s];
        }
        self.dispatch(r);
    }

    /// Queues `r` on the freest group hosting its service whose model is in memory
    /// (one still loading it only if none is).
    fn dispatch(&mut self, r: u32) {
        let s = self.service_of[r as usize] as usize;
        // The freest instance of the service: KV room per request, as Llumnix's
        // dispatch, counting every request on the group, since co-located services
        // share its GPU time.
        let mut best: Option<(bool, f64, u32, usize)> = None;
        for &(g, k) in &self.hosts[s] {
            let grp = &self.groups[g as usize];
            let active = grp.subs[k].life == Life::Active;
            let l = grp.subs[k].inst.load(&self.reqs);
            let n: u32 = grp
                .subs
                .iter()
                .map(|o| o.inst.running() + o.inst.load(&self.reqs).waiting)
                .sum();
            let f = if n == 0 {
                f64::INFINITY
            } else {
                (self.free_blocks(g as usize, k) - f64::from(l.watermark) - l.waiting_blocks as f64)
                    / f64::from(n)
            };
            if best.is_none_or(|(ba, b, _, _)| (active, f) > (ba, b)) {
                best = Some((active, f, g, k));
            }
        }
        let Some((_, _, g, k)) = best else { return };
        let sub = &mut self.groups[g as usize].subs[k];
        if sub.inst.is_empty() {
            sub.last_end = sub.last_end.max(self.now);
        }
        sub.inst.enqueue(r, &mut self.reqs, g);
        self.try_start(g);
    }

    fn iter_done(&mut self, g: u32) {
        let grp = &mut self.groups[g as usize];
        let Some(k) = grp.busy.take() else { return };
        self.out.finished.clear();
        let sub = &mut grp.subs[k];
        sub.inst.finish(self.now, &mut self.reqs, &mut self.out);
        sub.last_end = self.now;
        self.done += self.out.finished.len();
        self.settle(g);
        self.try_start(g);
    }

    /// Starts the next iteration on an idle group: the policy picks among the services
    /// with work; one that cannot run (its queue head does not fit) is passed over.
    fn try_start(&mut self, g: u32) {
        let gi = g as usize;
        if self.groups[gi].busy.is_some() {
            return;
        }
        self.cands.clear();
        self.cands
            .extend((0..self.groups[gi].subs.len()).filter(|&k| {
                let sub = &self.groups[gi].subs[k];
                matches!(sub.life, Life::Active | Life::Leaving) && !sub.inst.is_empty()
            }));
        while !self.cands.is_empty() {
            self.views.clear();
            for &k in &self.cands {
                let sub = &self.groups[gi].subs[k];
                let running = sub.inst.running();
                let l = sub.inst.load(&self.reqs);
                self.views.push(SubView {
                    service: sub.service,
                    waiting: l.waiting,
                    running,
                    newest_attained: (running > 0).then(|| sub.served - sub.admit_mark),
                    budget: self.budgets[sub.service as usize],
                    idle_for: self.now.saturating_sub(sub.last_end),
                });
            }
            let pick = if self.cands.len() == 1 {
                0
            } else {
                self.policy.pick(g, &self.views).min(self.cands.len() - 1)
            };
            let k = self.cands[pick];
            if self.unified {
                let grp = &self.groups[gi];
                let free = ((grp.kv_limit() - grp.used_bytes()) / grp.subs[k].block_bytes)
                    .floor()
                    .max(0.0);
                let inst = &mut self.groups[gi].subs[k].inst;
                let cap = f64::from(inst.used_blocks()) + free;
                inst.set_capacity(cap.min(f64::from(u32::MAX)) as u32);
            }
            let sub = &mut self.groups[gi].subs[k];
            let before = sub.inst.admissions();
            let iter = &self.services[sub.service as usize].iter;
            self.out.preempted.clear();
            if let Some(d) = sub
                .inst
                .start(self.now, &mut self.reqs, iter, &mut self.out)
            {
                if sub.inst.admissions() != before {
                    sub.admit_mark = sub.served;
                }
                sub.served += d;
                self.groups[gi].busy = Some(k);
                self.queue.push(self.now + d, Ev::IterDone(g));
                return;
            }
            self.cands.remove(pick);
        }
        // Idle: a leaving service may just have emptied, or preemption freed memory
        // for weights waiting to load.
        self.settle(g);
    }

    /// Moves a changing group along: empty leaving services drop their weights,
    /// joining ones start loading where the memory holds them, and once none is
    /// leaving, KV is held back for the weights still to come.
    fn settle(&mut self, g: u32) {
        let gi = g as usize;
        if !self.groups[gi].changing {
            return;
        }
        let now = self.now;
        let grp = &mut self.groups[gi];
        for sub in &mut grp.subs {
            if sub.life == Life::Leaving && sub.inst.is_empty() {
                sub.life = Life::Gone;
            }
        }
        let mut held: f64 = grp
            .subs
            .iter()
            .filter(|s| s.life.holds_weights())
            .map(|s| s.weight_bytes)
            .sum();
        let used = grp.used_bytes();
        for k in 0..grp.subs.len() {
            let sub = &mut grp.subs[k];
            if sub.life == Life::Joining && used + held + sub.weight_bytes <= self.usable {
                let secs = sub.weight_bytes / self.group_load_bw;
                let at = now + (secs * 1e6).ceil() as Micros;
                sub.life = Life::Loading(at);
                held += sub.weight_bytes;
                self.model_loads += 1;
                self.queue.push(at, Ev::Ready(g));
            }
        }
        grp.kv_bytes = self.usable - held;
        let leaving = grp.subs.iter().any(|s| s.life == Life::Leaving);
        grp.reserve = if leaving {
            0.0
        } else {
            grp.subs
                .iter()
                .filter(|s| s.life == Life::Joining)
                .map(|s| s.weight_bytes)
                .sum()
        };
        grp.changing = grp
            .subs
            .iter()
            .any(|s| !matches!(s.life, Life::Active | Life::Gone));
    }

    /// Weights that finished loading: their services run.
    fn ready(&mut self, g: u32) {
        let now = self.now;
        for sub in &mut self.groups[g as usize].subs {
            if matches!(sub.life, Life::Loading(at) if at <= now) {
                sub.life = Life::Active;
                sub.last_end = sub.last_end.max(now);
            }
        }
        self.settle(g);
        self.try_start(g);
    }

    /// Offers the policy the load since its last look, and carries out a new
    /// placement if it makes one.
    fn replan(&mut self) {
        let secs = (self.now.saturating_sub(self.window_start) as f64 / 1e6).max(1e-6);
        let every = self.replan_every.unwrap_or(SEC) as f64 / 1e6;
        let mut owed = vec![0.0; self.services.len()];
        for sub in self.groups.iter().flat_map(|g| &g.subs) {
            let s = sub.service as usize;
            let l = sub.inst.load(&self.reqs);
            owed[s] += f64::from(l.waiting) * self.mean_secs[s]
                + f64::from(l.running) * self.mean_out[s] / 2.0 * self.per_token[s];
        }
        let demand: Vec<ServiceDemand> = self
            .services
            .iter()
            .enumerate()
            .map(|(s, svc)| ServiceDemand {
                name: svc.name.clone(),
                load: self.window[s] / secs + owed[s] / every,
            })
            .collect();
        self.window.iter_mut().for_each(|w| *w = 0.0);
        self.window_start = self.now;
        let (services, longest, usable) = (self.services, &self.longest, self.usable);
        // Room as for the first placement, but a set whose KV cannot hold a member's
        // longest accepted request does not fit.
        let room = |set: &[u16]| {
            let kv = kv_bytes_beside(services, usable, set);
            let holds = set.iter().all(|&s| {
                let svc = &services[s as usize];
                let blocks = (kv / (svc.model.kv_bytes_per_token * 16.0)).max(0.0) as u32;
                svc.replica(blocks).fits_tokens() >= longest[s as usize]
            });
            if holds { kv / usable } else { -1.0 }
        };
        let Some(new) = self
            .policy
            .replan(self.now, &demand, &self.placement, &room)
        else {
            return;
        };
        let valid = new.len() == self.groups.len()
            && new.iter().all(|set| {
                !set.is_empty()
                    && set.iter().all(|&s| (s as usize) < services.len())
                    && room(set) > 0.0
            })
            && (0..services.len() as u16).all(|s| new.iter().any(|set| set.contains(&s)));
        if valid && new != self.placement {
            self.apply(new);
        }
    }

    fn apply(&mut self, new: Vec<Vec<u16>>) {
        let mut moved = std::mem::take(&mut self.moved);
        moved.clear();
        for (g, set) in new.iter().enumerate() {
            if *set == self.placement[g] {
                continue;
            }
            let grp = &mut self.groups[g];
            grp.changing = true;
            for sub in &mut grp.subs {
                let inside = set.contains(&sub.service);
                sub.life = match (sub.life, inside) {
                    (Life::Leaving, true) => Life::Active,
                    (Life::Gone, true) => Life::Joining,
                    (Life::Active, false) => {
                        moved.extend(sub.inst.take_waiting(&mut self.reqs));
                        Life::Leaving
                    }
                    (Life::Joining | Life::Loading(_), false) => {
                        moved.extend(sub.inst.take_waiting(&mut self.reqs));
                        Life::Gone
                    }
                    (life, _) => life,
                };
            }
            for &s in set {
                if grp.subs.iter().any(|o| o.service == s) {
                    continue;
                }
                let svc = &self.services[s as usize];
                let block_bytes = svc.model.kv_bytes_per_token * 16.0;
                let kv = kv_bytes_beside(self.services, self.usable, set);
                let blocks = (kv / block_bytes).floor().clamp(0.0, f64::from(u32::MAX)) as u32;
                let cfg = svc.replica(blocks);
                grp.subs.push(Sub {
                    service: s,
                    inst: Instance::new(cfg),
                    life: Life::Joining,
                    weight_bytes: svc.model.weight_bytes,
                    block_bytes,
                    served: 0,
                    admit_mark: 0,
                    last_end: self.now,
                });
            }
        }
        self.replans.push((self.now, new.clone()));
        self.placement = new;
        for h in &mut self.hosts {
            h.clear();
        }
        for (g, grp) in self.groups.iter().enumerate() {
            for (k, sub) in grp.subs.iter().enumerate() {
                if sub.life.hosts() {
                    self.hosts[sub.service as usize].push((g as u32, k));
                }
            }
        }
        for g in 0..self.groups.len() as u32 {
            self.settle(g);
        }
        moved.sort_unstable();
        for &r in &moved {
            self.dispatch(r);
        }
        self.moved = moved;
        for g in 0..self.groups.len() as u32 {
            self.try_start(g);
        }
    }

    fn sample(&mut self) {
        let mut s = Sample {
            t: self.now as f64 / 1e6,
            instances: self.groups.len() as u32,
            ..Sample::default()
        };
        let (mut used, mut total) = (0.0, 0.0);
        for grp in &self.groups {
            for sub in &grp.subs {
                let l = sub.inst.load(&self.reqs);
                s.running += l.running;
                s.waiting += l.waiting;
            }
            used += grp.used_bytes();
            total += grp.kv_bytes;
        }
        s.kv_used = used / total.max(1.0);
        self.series.push(s);
    }

    /// Every instance's blocks add up, and a group's instances together hold no more
    /// than its KV memory.
    #[cfg(debug_assertions)]
    fn check(&self) {
        for (g, grp) in self.groups.iter().enumerate() {
            for sub in &grp.subs {
                assert_eq!(
                    u64::from(sub.inst.free_blocks()) + sub.inst.held_blocks(&self.reqs),
                    u64::from(sub.inst.config().total_blocks),
                    "group {g} service {} at {} µs",
                    sub.service,
                    self.now
                );
            }
            assert!(
                grp.used_bytes() <= grp.kv_bytes * (1.0 + 1e-9),
                "group {g} holds {} of {} KV bytes at {} µs",
                grp.used_bytes(),
                grp.kv_bytes,
                self.now
            );
        }
    }

    fn finish(
        self,
        first: Micros,
        placement: Vec<Vec<u16>>,
        demand: Vec<ServiceDemand>,
    ) -> PoolOutcome {
        let span = self.now.saturating_sub(first);
        let mut o = LlmOutcome {
            events: self.events,
            span,
            series: self.series,
            instance_secs: self.groups.len() as f64 * span as f64 / 1e6,
            peak_flops: self.services[0].iter.peak_flops(),
            peak_bw: self.services[0].iter.peak_bw(),
            ..LlmOutcome::default()
        };
        for grp in &self.groups {
            let (mut busy, mut flops, mut bytes) = (0.0, 0.0, 0.0);
            for sub in &grp.subs {
                busy += sub.inst.busy_us as f64 / 1e6;
                flops += sub.inst.work.flops;
                bytes += sub.inst.work.bytes;
                o.iterations += sub.inst.iterations;
            }
            o.busy_secs += busy;
            o.flops += flops;
            o.bytes += bytes;
            if busy > 0.0 {
                o.max_flop_share = o.max_flop_share.max(flops / busy / o.peak_flops);
                o.max_bw_share = o.max_bw_share.max(bytes / busy / o.peak_bw);
            }
        }
        o.requests = self.reqs;
        PoolOutcome {
            outcome: o,
            placement,
            demand,
            replans: self.replans,
            model_loads: self.model_loads,
        }
    }
}

/// The summary of a pool run: latency figures overall and per service (its `groups`),
/// with SLO attainment per request against `slo_scale` times what the request takes
/// alone on an idle group (SeaLLM's and vLLM's normalisation).
pub fn summary(
    policy: &str,
    run: &PoolOutcome,
    services: &[Service],
    service_of: &[u16],
    clipped: Clipped,
    slo_scale: f64,
) -> LlmSummary {
    let o = &run.outcome;
    let mut sum = LlmSummary::of(policy, o, clipped, Slo::default());
    let meets = |i: usize, q: &Req| {
        let iter = &services[service_of[i] as usize].iter;
        q.e2e_s() <= slo_scale * unloaded_secs(iter, q.req.input, q.req.output)
    };
    let done = || {
        o.requests
            .iter()
            .enumerate()
            .filter(|(_, q)| q.phase == Phase::Done)
    };
    let n = done().count().max(1) as f64;
    sum.slo_attainment = done().filter(|&(i, q)| meets(i, q)).count() as f64 / n;
    sum.slo_ttft_s = 0.0;
    sum.slo_tpot_s = 0.0;
    sum.slo_scale = slo_scale;
    sum.groups = services
        .iter()
        .enumerate()
        .map(|(s, svc)| {
            let mine = || done().filter(move |&(i, _)| service_of[i] as usize == s);
            let mut g = Group::of(&svc.name, mine().map(|(_, q)| q), Slo::default());
            let k = mine().count().max(1) as f64;
            g.slo_attainment = mine().filter(|&(i, q)| meets(i, q)).count() as f64 / k;
            g
        })
        .collect();
    sum
}
