//! AntMan, as the Muri artifact's baseline defines it (`run_sim.py:antman_sim_jobs`,
//! `switch.py:antman_alloc_res`): resource-guaranteed jobs own their GPUs, and
//! opportunistic jobs run as guests on GPUs whose load leaves room, slowed by the
//! guaranteed job they share with.
//!
//! The pass is first-come first-served and never preempts: guaranteed jobs first, then
//! opportunistic ones, each by submission. A guaranteed job that does not fit reserves
//! what it can (the free GPUs of the emptiest node, or whole nodes and a partial last
//! node) and starts once it holds all it asked for. An opportunistic job takes the
//! least-loaded GPUs whose load is under 0.8, on any nodes, and its iteration time is
//! recomputed at every event from the stages of the guaranteed jobs under it
//! (docs/policies/antman.md gives the formula).

use crate::PolicyError;
use crate::ctx::{Ctx, Handles};
use crate::spec::{Capabilities, Capability, ParamSpec, PolicySpec};
use crate::world::{JobIdx, Status};
use crate::{ParamError, Params, Policy};
use apiary_model::Placement;
const ANTMAN_PARAMS: &[ParamSpec] = &[OPPORTUNISTIC];
const OPPORTUNISTIC: ParamSpec = ParamSpec {
    key: "opportunistic",
    default: "muri",
    about: "which jobs are opportunistic: muri (trace priority 1, Muri's traces) | negative (priority < 0)",
};

/// `antman`: its spec.
pub const ANTMAN: PolicySpec = PolicySpec {
    name: "antman",
    about: "AntMan as Muri's baseline: guaranteed jobs first-come first-served on their own GPUs, opportunistic jobs as guests on lightly loaded GPUs, slowed by the job under them",
    capabilities: Capabilities::of(&[
        Capability::ChoosesGpus,
        Capability::Guests,
        Capability::SpeedFactors,
        Capability::Profiles,
    ]),
    params: ANTMAN_PARAMS,
    build: |p| Ok(Box::new(AntMan::new(p)?)),
};

/// GPU load of a guaranteed job and of an opportunistic one (the artifact's defaults
/// when the trace gives none).
const GUARANTEED_UTIL: f64 = 0.1;
const GUEST_UTIL: f64 = 0.9;
/// A guest may use a GPU whose load is below this.
const UTIL_UPPER: f64 = 0.8;

/// Which trace jobs are opportunistic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Guests {
    /// Priority 1, as in Muri's traces (`0 - resource-guarantee job; 1 - opportunistic`).
    Muri,
    /// Negative priority, apiary's and HiveD's convention.
    Negative,
}

#[derive(Clone, Debug, Default)]
struct Reservation {
    /// GPUs reserved so far.
    gpus: Placement,
    /// GPUs still to reserve.
    remaining: u32,
    /// The node the job last reserved on.
    last_node: Option<u32>,
}

/// The AntMan baseline.
#[derive(Debug)]
pub struct AntMan {
    guests: Guests,
    /// Pending jobs in the artifact's order: guaranteed first, then by submission.
    queue: Vec<JobIdx>,
    /// Per node and GPU: the guaranteed job holding or reserving it, and the guest.
    holder: Vec<Vec<Option<JobIdx>>>,
    guest: Vec<Vec<Option<JobIdx>>>,
    /// Per node and GPU: load, kept with the artifact's own additions and subtractions,
    /// float residues included (they order the guests' choice among idle GPUs).
    util: Vec<Vec<f64>>,
    res: Vec<Reservation>,
    is_guest: Vec<bool>,
    /// Stage times (ms) and solo iteration time (ms) per job, when known.
    stages: Vec<Option<[f64; 3]>>,
    solo: Vec<f64>,
    running_guests: Vec<JobIdx>,
}

impl AntMan {
    /// Parameters as [`ANTMAN`] lists them.
    pub fn new(p: &Params) -> Result<AntMan, ParamError> {
        let guests = p.choice(
            &OPPORTUNISTIC,
            &[("muri", Guests::Muri), ("negative", Guests::Negative)],
        )?;
        Ok(AntMan {
            guests,
            queue: Vec::new(),
            holder: Vec::new(),
            guest: Vec::new(),
            util: Vec::new(),
            res: Vec::new(),
            is_guest: Vec::new(),
            stages: Vec::new(),
            solo: Vec::new(),
            running_guests: Vec::new(),
        })
    }

    fn ensure_nodes(&mut self, ctx: &Ctx<'_>) {
        if self.holder.is_empty() {
            for n in &ctx.cluster().nodes {
                let g = n.gpus as usize;
                self.holder.push(vec![None; g]);
                self.guest.push(vec![None; g]);
                self.util.push(vec![0.0; g]);
            }
        }
    }

    /// GPUs of node `n` no guaranteed job holds or reserves, in index order.
    fn free_on(&self, n: usize) -> impl Iterator<Item = usize> + '_ {
        self.holder[n]
            .iter()
            .enumerate()
            .filter(|(_, h)| h.is_none())
            .map(|(g, _)| g)
    }

    fn reserve(&mut self, j: JobIdx, n: usize, gpus: &[usize]) {
        let load = GUARANTEED_UTIL - 0.01;
        let mut mask = 0u64;
        for &g in gpus {
            self.holder[n][g] = Some(j);
            self.util[n][g] += load;
            mask |= 1 << g;
        }
        let r = &mut self.res[j as usize];
        r.gpus.add(n as u32, mask);
        r.remaining -= gpus.len() as u32;
    }

    /// One placement attempt for a guaranteed job; true once it holds every GPU.
    fn try_guaranteed(&mut self, ctx: &Ctx<'_>, j: JobIdx) -> bool {
        let per_node = ctx.cluster().nodes.first().map_or(1, |n| n.gpus);
        let asked = ctx.job(j).gpus;
        let nodes = self.holder.len();
        let mut pick: Vec<usize> = Vec::new();
        if asked <= per_node {
            let need = self.res[j as usize].remaining as usize;
            if need == asked as usize {
                let mut best: Option<(usize, usize)> = None;
                for n in 0..nodes {
                    let free = self.free_on(n).count();
                    if free >= need {
                        pick.extend(self.free_on(n).take(need));
                        self.reserve(j, n, &pick);
                        self.res[j as usize].last_node = Some(n as u32);
                        return true;
                    }
                    if free > best.map_or(0, |b| b.1) {
                        best = Some((n, free));
                    }
                }
                if let Some((n, _)) = best {
                    pick.extend(self.free_on(n));
                    self.reserve(j, n, &pick);
                    self.res[j as usize].last_node = Some(n as u32);
                }
                return false;
            }
            let Some(n) = self.res[j as usize].last_node.map(|n| n as usize) else {
                return false;
            };
            pick.extend(self.free_on(n).take(need));
            let done = pick.len() == need;
            self.reserve(j, n, &pick);
            return done;
        }
        // Across nodes: whole free nodes plus a partial last node.
        let need = self.res[j as usize].remaining;
        let full = (need / per_node) as usize;
        let last = (need % per_node) as usize;
        let mut full_nodes: Vec<usize> = Vec::new();
        if full > 0 {
            for n in 0..nodes {
                if self.free_on(n).count() >= per_node as usize {
                    full_nodes.push(n);
                    if full_nodes.len() == full {
                        break;
                    }
                }
            }
        }
        let mut enough = full_nodes.len() >= full;
        if last != 0 {
            let continuing = last < (asked % per_node) as usize;
            let mut last_node = None;
            if continuing {
                last_node = self.res[j as usize].last_node.map(|n| n as usize);
            } else {
                let mut best: Option<(usize, usize)> = None;
                for n in 0..nodes {
                    if full_nodes.contains(&n) {
                        continue;
                    }
                    let free = self.free_on(n).count();
                    if free >= last {
                        last_node = Some(n);
                        break;
                    }
                    if free > best.map_or(0, |b| b.1) {
                        best = Some((n, free));
                    }
                }
                if last_node.is_none() {
                    enough = false;
                    last_node = best.map(|b| b.0);
                }
            }
            if let Some(n) = last_node {
                pick.clear();
                pick.extend(self.free_on(n).take(last));
                if pick.len() < last {
                    // The artifact would start the job short of GPUs here; apiary
                    // waits until it has them all (docs/policies/antman.md).
                    enough = false;
                }
                if !continuing {
                    self.res[j as usize].last_node = Some(n as u32);
                }
                self.reserve(j, n, &pick);
            }
        }
        for n in full_nodes {
            pick.clear();
            pick.extend(0..per_node as usize);
            self.reserve(j, n, &pick);
        }
        enough && self.res[j as usize].remaining == 0
    }

    /// Places a guest on the least-loaded GPUs under the load limit, if enough.
    fn try_guest(&mut self, ctx: &mut Ctx<'_>, j: JobIdx) -> Result<bool, PolicyError> {
        let need = ctx.job(j).gpus as usize;
        let mut cand: Vec<(f64, usize, usize)> = Vec::new();
        for (n, loads) in self.util.iter().enumerate() {
            for (g, &u) in loads.iter().enumerate() {
                if u < UTIL_UPPER {
                    cand.push((u, n, g));
                }
            }
        }
        if cand.len() < need {
            return Ok(false);
        }
        // Stable by load over node and GPU order, as the artifact's sort.
        cand.sort_by(|a, b| a.0.total_cmp(&b.0));
        cand.truncate(need);
        let mut p = Placement::default();
        for &(_, n, g) in &cand {
            p.add(n as u32, 1 << g);
        }
        self.res[j as usize].gpus.clone_from(&p);
        if !ctx.guests()?.start_overlay(j, p) {
            return Ok(false);
        }
        for &(_, n, g) in &cand {
            self.util[n][g] += GUEST_UTIL;
            self.guest[n][g] = Some(j);
        }
        self.running_guests.push(j);
        Ok(true)
    }

    /// A guest's iteration time (ms) beside the jobs on its GPUs.
    fn guest_iteration(&self, ctx: &Ctx<'_>, j: JobIdx) -> f64 {
        let own = self.solo[j as usize];
        let mut t = own;
        let mut seen: Vec<JobIdx> = Vec::new();
        for &(n, m) in &self.res[j as usize].gpus.parts {
            for g in 0..64 {
                if m & (1 << g) == 0 {
                    continue;
                }
                let (n, g) = (n as usize, g as usize);
                for c in [self.holder[n][g], self.guest[n][g]].into_iter().flatten() {
                    if c != j && !seen.contains(&c) {
                        seen.push(c);
                    }
                }
            }
        }
        for c in seen {
            if !self.is_guest[c as usize] {
                if ctx.status(c) != Status::Running {
                    continue; // still reserving: it does not run yet
                }
                t = t.max(match (self.stages[j as usize], self.stages[c as usize]) {
                    (Some(a), Some(b)) => interleaved(a, b) * self.solo[c as usize],
                    _ => 2.0 * own,
                });
            } else {
                t = t.max(2.0 * own);
            }
        }
        t
    }

    /// Puts `j` in the queue: guaranteed before opportunistic, then by submission
    /// (stable).
    fn enqueue(&mut self, ctx: &Ctx<'_>, j: JobIdx) {
        let key = |a: &AntMan, x: JobIdx| (a.is_guest[x as usize], ctx.job(x).submit, x);
        let k = key(self, j);
        let pos = self.queue.partition_point(|&x| key(self, x) <= k);
        self.queue.insert(pos, j);
    }

    fn release(&mut self, j: JobIdx) {
        let guest = self.is_guest[j as usize];
        let parts = std::mem::take(&mut self.res[j as usize].gpus.parts);
        for &(n, m) in &parts {
            for g in 0..64 {
                if m & (1 << g) == 0 {
                    continue;
                }
                let (n, g) = (n as usize, g as usize);
                if guest {
                    self.guest[n][g] = None;
                    self.util[n][g] -= GUEST_UTIL;
                } else {
                    self.holder[n][g] = None;
                    self.util[n][g] -= GUARANTEED_UTIL;
                }
            }
        }
        if guest {
            self.running_guests.retain(|&x| x != j);
        }
    }
}

/// How many of the guaranteed job's iterations one guest iteration spans: the guest's
/// data stage runs in the other's GPU and network stages, its GPU stage in the other's
/// data and network stages, its network stage in the other's data and GPU stages
/// (`antman_calc_iter_time`, kept as written, rounding included).
pub fn interleaved(mine: [f64; 3], other: [f64; 3]) -> f64 {
    let [t0, mut t1, mut t2] = mine;
    let [c0, c1, c2] = other;
    let mut iters = (t0 / (c1 + c2)).floor();
    let data_extra = t0 % (c1 + c2);
    if data_extra > 0.0 {
        iters += 1.0;
        t1 -= t1.min(c2).min(c1 + c2 - data_extra);
    }
    iters += (t1 / (c0 + c2)).floor();
    let gpu_extra = t1 % (c0 + c2);
    if gpu_extra > 0.0 {
        iters += 1.0;
        if gpu_extra < c0 {
            t2 -= t2.min(c0 + c1 - gpu_extra);
        }
    }
    iters += (t2 / (c0 + c1)).floor();
    let net_extra = t2 % (c0 + c1);
    if net_extra > c0 {
        iters += 1.0;
    }
    iters
}

impl Policy for AntMan {
    fn spec(&self) -> &'static PolicySpec {
        &ANTMAN
    }

    fn admit(&mut self, ctx: &Ctx<'_>, j: JobIdx) -> Result<(), PolicyError> {
        let i = j as usize;
        if self.res.len() <= i {
            self.res.resize(i + 1, Reservation::default());
            self.is_guest.resize(i + 1, false);
            self.stages.resize(i + 1, None);
            self.solo.resize(i + 1, 0.0);
        }
        let job = ctx.job(j);
        self.is_guest[i] = match self.guests {
            Guests::Muri => job.priority == 1,
            Guests::Negative => job.priority < 0,
        };
        self.res[i] = Reservation {
            remaining: job.gpus,
            ..Reservation::default()
        };
        self.stages[i] = job.extras().stages.as_ref().map(|s| [s.data, s.gpu, s.net]);
        self.solo[i] = match job.iterations {
            Some(n) if n > 0 => job.duration as f64 / n as f64,
            _ => 1.0,
        };
        self.enqueue(ctx, j);
        Ok(())
    }

    fn on_finish(&mut self, _ctx: &Ctx<'_>, j: JobIdx) {
        self.release(j);
    }

    /// A job stopped from outside (a failure, a lost node): its GPUs go back, and it
    /// waits in the queue again to reserve anew.
    fn on_requeue(&mut self, ctx: &Ctx<'_>, j: JobIdx) {
        if j as usize >= self.res.len() || self.queue.contains(&j) {
            return;
        }
        self.release(j);
        self.res[j as usize] = Reservation {
            remaining: ctx.job(j).gpus,
            ..Reservation::default()
        };
        self.enqueue(ctx, j);
    }

    fn schedule(&mut self, ctx: &mut Ctx<'_>) -> Result<(), PolicyError> {
        self.ensure_nodes(ctx);
        let mut k = 0;
        while k < self.queue.len() {
            let j = self.queue[k];
            let started = if self.is_guest[j as usize] {
                self.try_guest(ctx, j)?
            } else if self.try_guaranteed(ctx, j) {
                let ok = ctx.gpus()?.start(j, self.res[j as usize].gpus.clone());
                if ok {
                    for &(n, m) in &self.res[j as usize].gpus.parts {
                        for g in 0..64 {
                            if m & (1 << g) != 0 {
                                self.util[n as usize][g] += 0.01;
                            }
                        }
                    }
                }
                ok
            } else {
                false
            };
            if started {
                self.queue.remove(k);
            } else {
                k += 1;
            }
        }
        let mut speeds = ctx.speeds()?;
        for idx in 0..self.running_guests.len() {
            let j = self.running_guests[idx];
            let t = self.guest_iteration(&speeds, j);
            speeds.set_speed(j, self.solo[j as usize] / t);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::interleaved;

    #[test]
    fn the_artifacts_interleaving_count() {
        // A data-heavy guest (100 ms loading) beside a GPU-bound job (10 + 80 + 0):
        // its load runs in the other's GPU + network stages (80 ms): one whole and one
        // partial iteration; its GPU stage (10) then fits once in the other's data +
        // network (10): 3 of the other's iterations per guest iteration.
        assert_eq!(interleaved([100.0, 10.0, 0.0], [10.0, 80.0, 0.0]), 3.0);
        // Identical GPU-bound jobs: the guest's GPU stage (80) fits once in the other's
        // data + network (10): 8 of its iterations.
        assert_eq!(interleaved([10.0, 80.0, 0.0], [10.0, 80.0, 0.0]), 9.0);
    }
}
