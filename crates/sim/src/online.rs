//! The online model (`--online`): the first nodes' GPUs each serve an online inference
//! service whose SM demand changes by the minute ([`apiary_model::online`]), and an
//! offline job on such a GPU runs at the SM share it is given, slowed by interference:
//! `share × (1 − interference × demand)`, the slowest of its GPUs setting its pace.
//!
//! Who sets the share: a policy with the `online-sharing` capability (MuxFlow) sets one
//! per GPU; any other policy's jobs that land on a serving GPU get a fixed 80 %, as
//! sharing without MuxFlow's mechanisms gives. The model measures, minute by minute,
//! each GPU's SM activity and utilisation, and the minutes a service wanted more SMs
//! than its offline job left it (its SLO is broken then).

use crate::error::SimError;
use crate::resource::{Holders, Resource};
use apiary_model::online::{Demands, OnlineLoad, OnlineReport, STEP_MS};
use apiary_model::{RunOutcome, Time};
use apiary_policy::{JobIdx, Status, World};

/// The share a job on a serving GPU gets from a policy that sets none: MPS's
/// active-thread percentage set once and never changed, as sharing without MuxFlow's
/// mechanisms does (`muxflow`'s `naive_share`).
pub const NAIVE_SHARE: f64 = 0.8;
/// Kernel-active time per unit of SM demand for a service alone: MuxFlow's fleet showed
/// 26 % GPU utilisation at 16 % SM activity before sharing.
pub const UTIL_PER_SM: f64 = 26.0 / 16.0;

/// The online model over one run.
pub struct OnlineModel {
    load: OnlineLoad,
    /// The serving GPUs' demands, read a minute at a time.
    demands: Demands,
    managed: bool,
    host_nodes: usize,
    /// First cluster-wide GPU index of each node.
    offsets: Vec<u64>,
    /// Per job: its factor while held (NaN: just started, not yet priced).
    factor: Vec<f64>,
    /// Per job: held.
    held: Vec<bool>,
    on: Holders,
    gone: Vec<JobIdx>,
    /// GPU-ms of SM activity and of kernel time, all GPUs and serving ones; service-ms
    /// short of SMs; service-ms measured; GPU-ms measured.
    sm: (f64, f64),
    util: (f64, f64),
    short_ms: f64,
    service_ms: f64,
    gpu_ms: f64,
    report: OnlineReport,
}

impl OnlineModel {
    /// The model for `world`'s run (whose `resources.online` the backend set);
    /// `managed` when the policy sets shares.
    pub fn new(world: &World, load: OnlineLoad, managed: bool) -> OnlineModel {
        let offsets = apiary_model::online::gpu_offsets(world.cluster.nodes.iter().map(|n| n.gpus));
        let host_nodes = load.host_nodes(world.cluster.nodes.len());
        let host_gpus = world.cluster.nodes[..host_nodes]
            .iter()
            .map(|n| u64::from(n.gpus))
            .sum();
        OnlineModel {
            load,
            demands: Demands::new(load, host_gpus),
            managed,
            host_nodes,
            offsets,
            factor: vec![1.0; world.jobs.len()],
            held: vec![false; world.jobs.len()],
            on: Holders::default(),
            gone: Vec::new(),
            sm: (0.0, 0.0),
            util: (0.0, 0.0),
            short_ms: 0.0,
            service_ms: 0.0,
            gpu_ms: 0.0,
            report: OnlineReport {
                load: load.describe(),
                host_gpus,
                ..OnlineReport::default()
            },
        }
    }

    fn share(&self, world: &World, g: u64) -> f64 {
        if !self.managed {
            return NAIVE_SHARE;
        }
        world
            .resources
            .online_shares
            .get(g as usize)
            .copied()
            .filter(|s| !s.is_nan())
            .unwrap_or(NAIVE_SHARE)
    }

    /// Job `j`'s factor now: the slowest of its serving GPUs, 1 on none (the demands
    /// read for now).
    fn job_factor(&self, world: &World, j: JobIdx) -> f64 {
        let mut f: f64 = 1.0;
        for &(node, mask) in &world.rt[j as usize].placement.parts {
            if node as usize >= self.host_nodes {
                continue;
            }
            let mut m = mask;
            while m != 0 {
                let g = self.offsets[node as usize] + u64::from(m.trailing_zeros());
                m &= m - 1;
                let d = self.demands.current()[g as usize];
                f = f.min(self.load.offline_speed(self.share(world, g), d));
            }
        }
        f.max(1e-6)
    }

    fn on_host(&self, world: &World, j: JobIdx) -> bool {
        world.rt[j as usize]
            .placement
            .parts
            .iter()
            .any(|&(n, _)| (n as usize) < self.host_nodes)
    }

    /// One stretch `[from, to)` inside one minute.
    fn measure(&mut self, world: &World, from: Time, to: Time) {
        let dt = (to - from) as f64;
        self.demands.read(from);
        for (n, node) in world.cluster.nodes.iter().enumerate() {
            let free = world.state.free_mask(n as u32);
            for bit in 0..node.gpus {
                let busy = free & (1 << bit) == 0;
                self.gpu_ms += dt;
                if n >= self.host_nodes {
                    if busy {
                        self.sm.0 += dt;
                        self.util.0 += dt;
                    }
                    continue;
                }
                let g = self.offsets[n] + u64::from(bit);
                let d = self.demands.current()[g as usize];
                let share = if busy { self.share(world, g) } else { 0.0 };
                let sm = (d.min(1.0 - share) + share).min(1.0);
                let util = if busy {
                    1.0
                } else {
                    (d * UTIL_PER_SM).min(1.0)
                };
                self.sm.0 += sm * dt;
                self.sm.1 += sm * dt;
                self.util.0 += util * dt;
                self.util.1 += util * dt;
                self.service_ms += dt;
                if busy && d > 1.0 - share + 1e-9 {
                    self.short_ms += dt;
                }
            }
        }
    }
}

impl Resource for OnlineModel {
    fn settle(
        &mut self,
        world: &mut World,
        started: &[JobIdx],
        changed: &mut Vec<JobIdx>,
    ) -> Result<(), SimError> {
        let mut gone = std::mem::take(&mut self.gone);
        self.on.release_stopped(world, &mut gone);
        for &j in &gone {
            self.factor[j as usize] = 1.0;
            self.held[j as usize] = false;
        }
        gone.clear();
        self.gone = gone;
        for &j in started {
            if world.rt[j as usize].status == Status::Running
                && self.on_host(world, j)
                && !self.held[j as usize]
            {
                self.on.add(j);
                self.held[j as usize] = true;
                // Its rate was set without this model's factor.
                self.factor[j as usize] = f64::NAN;
            }
        }
        if !self.on.jobs().is_empty() {
            self.demands.read(world.now);
        }
        for k in 0..self.on.jobs().len() {
            let j = self.on.jobs()[k];
            let f = self.job_factor(world, j);
            if f != self.factor[j as usize] {
                self.factor[j as usize] = f;
                changed.push(j);
            }
        }
        Ok(())
    }

    fn factor(&self, j: JobIdx) -> f64 {
        let f = self.factor[j as usize];
        if f.is_nan() { 1.0 } else { f }
    }

    fn next_change(&self, world: &World) -> Option<Time> {
        (!self.on.jobs().is_empty()).then(|| (world.now / STEP_MS + 1) * STEP_MS)
    }

    fn interval(&mut self, world: &World, from: Time, to: Time) {
        self.report.evictions = world.resources.online_evictions;
        let mut t = from;
        while t < to {
            let end = ((t / STEP_MS + 1) * STEP_MS).min(to);
            self.measure(world, t, end);
            t = end;
        }
    }

    fn report(self: Box<Self>, outcome: &mut RunOutcome) {
        let mut r = self.report;
        let all = self.gpu_ms.max(1.0);
        let hosts = self.service_ms.max(1.0);
        r.sm_activity = self.sm.0 / all;
        r.gpu_util = self.util.0 / all;
        r.host_sm_activity = self.sm.1 / hosts;
        r.host_gpu_util = self.util.1 / hosts;
        r.slo_violation = self.short_ms / hosts;
        outcome.online = Some(r);
    }
}
