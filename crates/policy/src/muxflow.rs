//! `muxflow`: MuxFlow (ByteDance; arXiv 2303.13803, Sci. China Inf. Sci. 2024), offline
//! training jobs space-sharing GPUs with online inference services.
//!
//! No code is public; this follows `../shared/specs/training-policies.md` §8 on the
//! driver's online model (`--online`, `apiary_model::online`):
//!
//! 1. **Offline GPUs first.** Pending jobs go in submission order to GPUs that serve no
//!    service (one node if it fits, else across nodes), skipping a job that does not
//!    fit for now.
//! 2. **Matching.** One-GPU jobs that found none are matched to free serving GPUs by a
//!    maximum-weight bipartite matching (the solver's blossom algorithm). An edge's
//!    weight is the job's predicted speed there: the SM share the service leaves
//!    (`1 − demand − headroom`) slowed by interference. A pair is an edge only where the
//!    share is at least `min_share` and the job's memory fits beside the service's
//!    (memory protection: the quota). A job of several GPUs then takes, in submission
//!    order, the free serving GPUs where it would run fastest, if it finds enough; it
//!    runs at the pace of the slowest.
//! 3. **Dynamic SM allocation.** Every minute each offline job on a serving GPU gets
//!    `1 − d − headroom` of the SMs, where `d` is the demand the service showed over
//!    the minute just ended.
//! 4. **Eviction.** A job is evicted, losing the progress since its last checkpoint
//!    (every `checkpoint` seconds), when its service wanted more than the job left it
//!    over the last minute (a spike: GPU-level protection), or would leave it less than
//!    `min_share`.
//!
//! `sharing=naive` is the baseline that shares without MuxFlow's mechanisms: first fit
//! onto serving GPUs at a fixed share (`naive_share`), no eviction. `sharing=none`
//! keeps offline jobs off serving GPUs.

use crate::ctx::{Ctx, Handles};
use crate::spec::{Capabilities, Capability, ParamSpec, PolicySpec};
use crate::world::{JobIdx, Status};
use crate::{ParamError, Params, Policy, PolicyError};
use apiary_model::online::{Loads, STEP_MS};
use apiary_model::{Placement, Time};
use apiary_solver::matching::{Blossom, max_weight_matching_with, scale};

const SHARING: ParamSpec = ParamSpec {
    key: "sharing",
    default: "dynamic",
    about: "dynamic (MuxFlow), naive (a fixed share, no eviction) or none (offline GPUs only)",
};
const HEADROOM: ParamSpec = ParamSpec {
    key: "headroom",
    default: "0.05",
    about: "SM share kept free above the service's demand",
};
const MIN_SHARE: ParamSpec = ParamSpec {
    key: "min_share",
    default: "0.1",
    about: "a job is not placed, or is evicted, where it would get less SM share",
};
const NAIVE_SHARE: ParamSpec = ParamSpec {
    key: "naive_share",
    default: "0.8",
    about: "the fixed SM share of sharing=naive (MPS's active-thread percentage, never changed)",
};
const CHECKPOINT: ParamSpec = ParamSpec {
    key: "checkpoint",
    default: "1800",
    about: "seconds between an offline job's checkpoints",
};

/// `muxflow`: its spec.
pub const MUXFLOW: PolicySpec = PolicySpec {
    name: "muxflow",
    about: "MuxFlow: offline jobs beside online services on their GPUs, matched by predicted speed, SM shares set every minute from the load, evicted on spikes (a reconstruction, no public code; --online)",
    capabilities: Capabilities::of(&[Capability::OnlineSharing, Capability::ChoosesGpus]),
    params: &[SHARING, HEADROOM, MIN_SHARE, NAIVE_SHARE, CHECKPOINT],
    build: |p| Ok(Box::new(MuxFlow::new(p)?)),
};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sharing {
    Dynamic,
    Naive,
    None,
}

/// MuxFlow's state.
#[derive(Debug)]
pub struct MuxFlow {
    sharing: Sharing,
    headroom: f64,
    min_share: f64,
    naive: f64,
    checkpoint: Time,
    /// Per job: the serving GPUs it runs on (none: empty).
    hosted: Vec<Vec<u64>>,
    /// The jobs on serving GPUs (their `hosted` lists are not empty), in no order.
    on_serving: Vec<JobIdx>,
    /// Per job: when it last checkpointed.
    last_checkpoint: Vec<Time>,
    /// First cluster-wide GPU index of each node.
    offsets: Vec<u64>,
    blossom: Blossom,
}

impl MuxFlow {
    fn new(p: &Params) -> Result<MuxFlow, ParamError> {
        let sharing = match p.text(&SHARING) {
            "dynamic" => Sharing::Dynamic,
            "naive" => Sharing::Naive,
            "none" => Sharing::None,
            v => {
                return Err(ParamError::Bad {
                    key: SHARING.key.into(),
                    value: v.into(),
                    message: "expected dynamic, naive or none".into(),
                });
            }
        };
        let share = |s: &ParamSpec| -> Result<f64, ParamError> {
            let v = p.f64(s)?;
            if (0.0..=1.0).contains(&v) {
                Ok(v)
            } else {
                Err(ParamError::Bad {
                    key: s.key.into(),
                    value: v.to_string(),
                    message: "a share from 0 to 1".into(),
                })
            }
        };
        Ok(MuxFlow {
            sharing,
            headroom: share(&HEADROOM)?,
            min_share: share(&MIN_SHARE)?,
            naive: share(&NAIVE_SHARE)?,
            checkpoint: p.secs(&CHECKPOINT, 1.0)?,
            hosted: Vec::new(),
            on_serving: Vec::new(),
            last_checkpoint: Vec::new(),
            offsets: Vec::new(),
            blossom: Blossom::new(),
        })
    }

    fn gpu_of(&self, node: u32, bit: u32) -> u64 {
        self.offsets[node as usize] + u64::from(bit)
    }

    /// The share a job would get beside demand `d`.
    fn share_for(&self, d: f64) -> f64 {
        match self.sharing {
            Sharing::Dynamic => (1.0 - d - self.headroom).clamp(0.0, 1.0),
            Sharing::Naive => self.naive,
            Sharing::None => 0.0,
        }
    }

    /// Step 3 and 4, and checkpoints, for the running jobs.
    fn tend_running(&mut self, ctx: &mut Ctx<'_>, load: &Loads) -> Result<(), PolicyError> {
        let now = ctx.now();
        // Only jobs on serving GPUs can be evicted, so only they checkpoint.
        let mut running: Vec<JobIdx> = self.on_serving.clone();
        running.sort_unstable();
        let mut on = ctx.online()?;
        for j in running {
            let k = j as usize;
            if now >= self.last_checkpoint[k] + self.checkpoint {
                on.checkpoint(j);
                self.last_checkpoint[k] = now;
            }
            if self.hosted[k].is_empty() || self.sharing != Sharing::Dynamic {
                continue;
            }
            // The load of the instant before now, as the node agent saw it.
            let prev: Vec<f64> = self.hosted[k]
                .iter()
                .map(|&g| load.demand(g, now.saturating_sub(1)))
                .collect();
            let evict = self.hosted[k].iter().zip(&prev).any(|(&g, &d)| {
                let had = on.share(g).unwrap_or(0.0);
                // A spike (the service wanted more than the job left it), or too little left.
                d > 1.0 - had + 1e-9 || self.share_for(d) < self.min_share
            });
            for (&g, &d) in self.hosted[k].iter().zip(&prev) {
                on.set_share(g, if evict { f64::NAN } else { self.share_for(d) });
            }
            if evict {
                on.evict(j);
                self.hosted[k].clear();
            }
        }
        // An evicted job leaves the list now: placed again in this pass, it joins once.
        let hosted = &self.hosted;
        self.on_serving.retain(|&j| !hosted[j as usize].is_empty());
        Ok(())
    }

    /// Step 1: a placement on GPUs serving no service, if one fits.
    fn offline_place(&self, ctx: &Ctx<'_>, hosts: usize, gpus: u32) -> Option<Placement> {
        let free = ctx.free();
        let nodes = ctx.cluster().nodes.len();
        let mut p = Placement::default();
        for n in hosts..nodes {
            let mask = free.free_mask(n as u32);
            if mask.count_ones() >= gpus {
                p.add(n as u32, lowest_bits(mask, gpus));
                return Some(p);
            }
        }
        let mut need = gpus;
        for n in hosts..nodes {
            let mask = free.free_mask(n as u32);
            let take = mask.count_ones().min(need);
            if take > 0 {
                p.add(n as u32, lowest_bits(mask, take));
                need -= take;
            }
            if need == 0 {
                return Some(p);
            }
        }
        None
    }

    /// The free serving GPUs with their services' demand now: (node, GPU bit, GPU,
    /// demand), least loaded first for MuxFlow, in GPU order for the naive baseline.
    fn free_serving(&self, ctx: &Ctx<'_>, load: &Loads, hosts: usize) -> Vec<Free> {
        let now = ctx.now();
        let mut gpus = Vec::new();
        for n in 0..hosts as u32 {
            let mut mask = ctx.free().free_mask(n);
            while mask != 0 {
                let bit = mask.trailing_zeros();
                mask &= mask - 1;
                let g = self.gpu_of(n, bit);
                gpus.push((n, bit, g, load.demand(g, now)));
            }
        }
        if self.sharing == Sharing::Dynamic {
            gpus.sort_by(|a, b| a.3.total_cmp(&b.3).then(a.2.cmp(&b.2)));
        }
        gpus
    }

    /// Step 2: one-GPU jobs onto free serving GPUs (taken out of `free`).
    fn share_place(
        &mut self,
        ctx: &mut Ctx<'_>,
        load: &Loads,
        jobs: &[JobIdx],
        free: &mut Vec<Free>,
    ) -> Result<(), PolicyError> {
        let gpus: Vec<Free> = free.iter().take(4 * jobs.len()).copied().collect();
        let fits = |j: JobIdx, g: u64| load.memory(g) + load.job_memory(u64::from(j)) <= 1.0;
        let mut chosen: Vec<(JobIdx, usize)> = Vec::new();
        match self.sharing {
            Sharing::None => return Ok(()),
            Sharing::Naive => {
                let mut used = vec![false; gpus.len()];
                for &j in jobs {
                    if let Some(k) = (0..gpus.len()).find(|&k| !used[k] && fits(j, gpus[k].2)) {
                        used[k] = true;
                        chosen.push((j, k));
                    }
                }
            }
            Sharing::Dynamic => {
                let nj = jobs.len();
                let mut edges = Vec::new();
                for (a, &j) in jobs.iter().enumerate() {
                    for (b, g) in gpus.iter().enumerate() {
                        let share = self.share_for(g.3);
                        if share >= self.min_share && fits(j, g.2) {
                            let w = scale(load.offline_speed(share, g.3));
                            if w > 0 {
                                edges.push((a, nj + b, w));
                            }
                        }
                    }
                }
                let m = max_weight_matching_with(&mut self.blossom, nj + gpus.len(), &edges)
                    .map_err(|e| PolicyError::Cluster {
                        policy: "muxflow",
                        reason: format!("matching: {e}"),
                    })?;
                for (a, &j) in jobs.iter().enumerate() {
                    if let Some(v) = m.mate[a] {
                        chosen.push((j, v - nj));
                    }
                }
            }
        }
        let mut taken = Vec::new();
        for (j, k) in chosen {
            let (n, bit, g, d) = gpus[k];
            taken.push(g);
            let mut p = Placement::default();
            p.add(n, 1 << bit);
            if ctx.gpus()?.start(j, p) {
                self.adopt(ctx, j, &[(n, bit, g, d)])?;
            }
        }
        free.retain(|f| !taken.contains(&f.2));
        Ok(())
    }
    /// Step 2 for jobs of several GPUs: each, in submission order, takes the GPUs
    /// where it would run fastest among the free offline GPUs (at full speed) and the
    /// free serving GPUs (out of `free`) that clear `min_share` and hold its memory, if
    /// there are enough. A job larger than the offline GPUs left runs across both.
    fn gang_place(
        &mut self,
        ctx: &mut Ctx<'_>,
        load: &Loads,
        hosts: usize,
        jobs: &[JobIdx],
        free: &mut Vec<Free>,
    ) -> Result<(), PolicyError> {
        let nodes = ctx.cluster().nodes.len() as u32;
        for &j in jobs {
            let need = ctx.job(j).gpus as usize;
            let mem = load.job_memory(u64::from(j));
            // Offline GPUs first (speed 1, no service: demand NaN), then serving ones.
            let mut fit: Vec<(f64, Free)> = Vec::new();
            for n in hosts as u32..nodes {
                let mut mask = ctx.free().free_mask(n);
                while mask != 0 {
                    let bit = mask.trailing_zeros();
                    mask &= mask - 1;
                    fit.push((1.0, (n, bit, self.gpu_of(n, bit), f64::NAN)));
                }
            }
            for f in free.iter().filter(|f| load.memory(f.2) + mem <= 1.0) {
                let share = self.share_for(f.3);
                if self.sharing == Sharing::Naive || share >= self.min_share {
                    fit.push((load.offline_speed(share, f.3), *f));
                }
            }
            if fit.len() < need {
                continue;
            }
            if self.sharing == Sharing::Dynamic {
                // Stable: equal speeds keep offline-then-serving, GPU order.
                fit.sort_by(|a, b| b.0.total_cmp(&a.0));
            }
            fit.truncate(need);
            let mut p = Placement::default();
            for &(_, (n, bit, _, _)) in &fit {
                p.add(n, 1 << bit);
            }
            if ctx.gpus()?.start(j, p) {
                let serving: Vec<Free> =
                    fit.iter().map(|x| x.1).filter(|f| !f.3.is_nan()).collect();
                if !serving.is_empty() {
                    self.adopt(ctx, j, &serving)?;
                    free.retain(|f| !serving.iter().any(|x| x.2 == f.2));
                }
            }
        }
        Ok(())
    }
    /// Job `j` just started on the serving GPUs `serving` (and maybe offline ones):
    /// their shares, its first checkpoint, and the lists that follow it.
    fn adopt(&mut self, ctx: &mut Ctx<'_>, j: JobIdx, serving: &[Free]) -> Result<(), PolicyError> {
        let now = ctx.now();
        let mut on = ctx.online()?;
        for &(_, _, g, d) in serving {
            on.set_share(g, self.share_for(d));
        }
        on.checkpoint(j);
        self.hosted[j as usize] = serving.iter().map(|x| x.2).collect();
        self.on_serving.push(j);
        self.last_checkpoint[j as usize] = now;
        Ok(())
    }
}

/// A free serving GPU: (node, GPU bit, cluster-wide GPU index, service demand now).
type Free = (u32, u32, u64, f64);

/// The lowest `k` set bits of `mask`.
fn lowest_bits(mut mask: u64, k: u32) -> u64 {
    let mut out = 0;
    for _ in 0..k {
        let b = mask & mask.wrapping_neg();
        out |= b;
        mask &= !b;
    }
    out
}

impl Policy for MuxFlow {
    fn spec(&self) -> &'static PolicySpec {
        &MUXFLOW
    }

    fn attach(&mut self, cluster: &apiary_model::Cluster) -> Result<(), PolicyError> {
        self.offsets = apiary_model::online::gpu_offsets(cluster.nodes.iter().map(|n| n.gpus));
        Ok(())
    }

    fn schedule(&mut self, ctx: &mut Ctx<'_>) -> Result<(), PolicyError> {
        let n = ctx.job_count();
        if self.hosted.len() < n {
            self.hosted.resize(n, Vec::new());
            self.last_checkpoint.resize(n, 0);
        }
        // Jobs that ended since the last pass leave their GPUs' shares unset.
        let mut k = 0;
        while k < self.on_serving.len() {
            let j = self.on_serving[k];
            if self.hosted[j as usize].is_empty() || ctx.status(j) != Status::Running {
                let gone = std::mem::take(&mut self.hosted[j as usize]);
                let mut on = ctx.online()?;
                for g in gone {
                    on.set_share(g, f64::NAN);
                }
                self.on_serving.swap_remove(k);
            } else {
                k += 1;
            }
        }
        let (load, hosts) = {
            let on = ctx.online()?;
            (on.loads(), on.host_nodes())
        };
        self.tend_running(ctx, &load)?;
        let mut pending: Vec<JobIdx> = ctx.pending_jobs().unwrap_or(&[]).to_vec();
        pending.sort_unstable();
        let (mut sharers, mut gangs) = (Vec::new(), Vec::new());
        let nodes = ctx.cluster().nodes.len() as u32;
        let mut offline_free: u32 = (hosts as u32..nodes).map(|n| ctx.free().free_on(n)).sum();
        for j in pending {
            let gpus = ctx.job(j).gpus;
            if gpus <= offline_free
                && let Some(p) = self.offline_place(ctx, hosts, gpus)
                && ctx.gpus()?.start(j, p)
            {
                offline_free -= gpus;
            } else if gpus == 1 && sharers.len() < 64 {
                sharers.push(j);
            } else if gpus > 1 && gangs.len() < 64 {
                gangs.push(j);
            } else if offline_free == 0 && sharers.len() >= 64 && gangs.len() >= 64 {
                break;
            }
        }
        let mut retry = false;
        if hosts > 0 && self.sharing != Sharing::None && !(sharers.is_empty() && gangs.is_empty()) {
            let mut free = self.free_serving(ctx, &load, hosts);
            if !sharers.is_empty() {
                self.share_place(ctx, &load, &sharers, &mut free)?;
            }
            if !gangs.is_empty() {
                self.gang_place(ctx, &load, hosts, &gangs, &mut free)?;
            }
            // A load that keeps a waiting job off a free serving GPU may drop next
            // minute (if its trough would let the job in); nothing else that could
            // place it comes by the minute.
            retry = free.iter().any(|f| {
                self.share_for(f.3) < self.min_share
                    && self.share_for(load.min_demand(f.2)) >= self.min_share
            });
        }
        let waiting = sharers
            .iter()
            .chain(&gangs)
            .any(|&j| ctx.status(j) == Status::Pending);
        // Loads change by the minute: MuxFlow re-sets shares, evicts, and retries the
        // jobs the loads kept off serving GPUs. The baselines set nothing by the minute.
        if self.sharing == Sharing::Dynamic && (!self.on_serving.is_empty() || (waiting && retry)) {
            ctx.wake_at((ctx.now() / STEP_MS + 1) * STEP_MS);
        }
        Ok(())
    }
}
