//! The IO model (`--io`): jobs read their datasets through a cache and the remote
//! store's shared bandwidth, and run at SiloD's closed-form speed,
//! `min(1, B / (X·s·(1 − h)))` of their GPU-bound rate ([`apiary_model::io`]).
//!
//! Who decides `h` and `B`: a policy with the `io` capability (SiloD) gives each job
//! cache from the cluster's pool and bandwidth, and the model checks they fit; any
//! other policy's jobs cache in their GPUs' share of their nodes' caches as the cache
//! mode keeps them (LRU by default) and share the bandwidth max-min fairly. Either way
//! a cache starts cold when a job starts and fills over one epoch: until the job has
//! run an epoch's work since its cache grew, it hits at the old level (warm-up is
//! extra remote IO, SiloD §6.2).

use crate::error::SimError;
use crate::resource::{Holders, Resource};
use apiary_model::io::{self, CacheMode, DataProfile, IoReport, Storage};
use apiary_model::{RunOutcome, Time};
use apiary_policy::{JobIdx, Status, World};

/// A job's data-loading state while it runs.
#[derive(Clone, Copy, Debug, Default)]
struct Loading {
    /// Running at the last settle.
    on: bool,
    /// Its preemption count then: a restart empties its cache.
    preemptions: u32,
    /// Its GPUs then: a resize re-places its cache.
    gpus: u32,
    /// The hit ratio its cache reaches once warm.
    target: f64,
    /// The hit ratio in effect now.
    hit: f64,
    /// Warm once its remaining work is down to this.
    warm_at: f64,
    /// Bytes per second it reads at full speed.
    full: f64,
    /// Bytes per second it needs from remote storage at full speed.
    need: f64,
    /// Its remote bandwidth, bytes/s.
    bandwidth: f64,
    /// Its speed factor.
    factor: f64,
    /// (Re)started since the last settle: its rate was set without this model's factor.
    retime: bool,
    /// In the warming list.
    warming: bool,
    /// What it adds to the model's sums: cache and remote bytes/s, GPUs stalled.
    counted: (f64, f64, f64),
    /// The cache and bandwidth the policy gave it (when the policy allocates).
    share: (f64, f64),
    /// What it adds to the lending sums: bandwidth of its share it uses, and whether
    /// it needs more than its share.
    lending: (f64, bool),
}

impl Loading {
    /// Bytes per second it reads from its cache and from remote storage, as it runs.
    fn reads(&self) -> (f64, f64) {
        let r = self.full * self.factor;
        (r * self.hit, r * (1.0 - self.hit))
    }
}

/// The IO model over one run.
///
/// Settling runs after every pass, so it costs what changed, not what runs: the jobs
/// that started, stopped or finished warming are found from the running list with a
/// few comparisons each, and while the remote demand fits the bandwidth every job has
/// what it needs and no share is recomputed. Only a congested link is water-filled over
/// every job; the reads it measures are running sums.
pub struct IoModel {
    storage: Storage,
    /// The policy allocates (it declares `io`).
    managed: bool,
    policy: &'static str,
    total_cache: f64,
    total_bandwidth: f64,
    jobs: Vec<Loading>,
    /// Jobs on at the last settle.
    on: Holders,
    /// Jobs whose cache is warming.
    warming: Vec<JobIdx>,
    /// Σ `need` over the jobs on.
    need: f64,
    /// The last settle water-filled a congested link.
    congested: bool,
    /// Σ cache and remote reads, bytes/s, over the jobs on.
    reading: (f64, f64),
    /// Σ GPUs × (1 − factor) over the jobs on: GPUs waiting for data.
    stalled: f64,
    /// Σ the policy's shares over the jobs on (cache bytes, bandwidth bytes/s).
    given: (f64, f64),
    /// Σ over the jobs on of the share bandwidth each uses, and how many need more
    /// than their share (when the policy allocates).
    used: f64,
    short: usize,
    /// (remote need, job) for water-filling, and jobs changed this settle; reused.
    demands: Vec<(f64, JobIdx)>,
    touched: Vec<JobIdx>,
    report: IoReport,
}

impl IoModel {
    /// The model for `world`'s run on `storage`: jobs without a data profile get one
    /// ([`io::assign`], seeded by `seed`); `managed` when the policy allocates.
    pub fn new(
        world: &mut World,
        storage: Storage,
        managed: bool,
        policy: &'static str,
        seed: u64,
    ) -> IoModel {
        let assigned = io::assign(&mut world.jobs, seed);
        let gpus = world.cluster.total_gpus as f64;
        IoModel {
            storage,
            managed,
            policy,
            total_cache: storage.cache_per_gpu * gpus,
            total_bandwidth: storage.bandwidth_per_gpu * gpus,
            jobs: vec![Loading::default(); world.jobs.len()],
            on: Holders::default(),
            warming: Vec::new(),
            need: 0.0,
            congested: false,
            reading: (0.0, 0.0),
            stalled: 0.0,
            given: (0.0, 0.0),
            used: 0.0,
            short: 0,
            demands: Vec::new(),
            touched: Vec::new(),
            report: IoReport {
                storage: storage.describe(),
                allocated_by: if managed {
                    "policy".into()
                } else {
                    storage.cache.name().into()
                },
                assigned,
                ..IoReport::default()
            },
        }
    }

    /// The hit ratio job `j`'s cache reaches once warm.
    fn target(&self, world: &World, j: JobIdx, p: &DataProfile) -> f64 {
        if self.managed {
            let cache = world
                .resources
                .io_shares
                .get(j as usize)
                .map_or(0.0, |s| s.0);
            return CacheMode::Uniform.hit(cache, p.dataset);
        }
        let placement = &world.rt[j as usize].placement;
        let gpus = placement.gpus().max(1) as f64;
        let per_gpu = self.storage.cache_per_gpu;
        match self.storage.cache {
            CacheMode::Coordl => CacheMode::Coordl.hit(per_gpu * gpus, p.dataset),
            mode => placement
                .parts
                .iter()
                .map(|&(_, mask)| {
                    let g = mask.count_ones() as f64;
                    g / gpus * mode.hit(per_gpu * g, p.dataset)
                })
                .sum(),
        }
    }

    /// Job `j`'s remaining work now, at the rate it runs at.
    fn remaining_now(world: &World, j: JobIdx) -> f64 {
        let rt = &world.rt[j as usize];
        let from = rt.last_update.max(rt.overhead_until);
        let run = world.now.saturating_sub(from) as f64;
        rt.remaining - run * rt.rate
    }

    /// Moves job `j`'s cache toward `target`: down at once (eviction), up after an
    /// epoch of work at the level it had (warm-up). Returns whether it is warming.
    fn warm(&mut self, world: &World, j: JobIdx, p: &DataProfile, target: f64) -> bool {
        let gpus = world.rt[j as usize].placement.gpus();
        let s = &mut self.jobs[j as usize];
        if target <= s.hit {
            s.hit = target;
            s.target = target;
            return false;
        }
        let left = IoModel::remaining_now(world, j);
        if target != s.target {
            s.target = target;
            s.warm_at = left - p.epoch_ms(gpus);
        }
        if left <= s.warm_at + 1e-6 {
            s.hit = s.target;
            false
        } else {
            true
        }
    }

    /// Job `j`'s need from remote storage changed to what its hit ratio gives.
    fn renew(&mut self, j: JobIdx) {
        let s = &mut self.jobs[j as usize];
        let need = s.full * (1.0 - s.hit.clamp(0.0, 1.0));
        self.need += need - s.need;
        s.need = need;
        if self.managed {
            self.account(j);
        }
    }

    /// Job `j`'s need or share changed: keep the lending sums.
    fn account(&mut self, j: JobIdx) {
        let s = &mut self.jobs[j as usize];
        let (u0, short0) = s.lending;
        let lending = (s.share.1.min(s.need), s.need > s.share.1 + 1e-6);
        s.lending = lending;
        self.used += lending.0 - u0;
        self.short = self.short + lending.1 as usize - short0 as usize;
    }

    /// Sets job `j`'s factor from its bandwidth, keeping the read sums, and notes it
    /// for re-timing if it changed.
    fn refactor(&mut self, j: JobIdx, changed: &mut Vec<JobIdx>) {
        let s = &mut self.jobs[j as usize];
        let (c0, r0, st0) = s.counted;
        let f = if s.need <= 0.0 {
            1.0
        } else {
            (s.bandwidth / s.need).clamp(1e-6, 1.0)
        };
        if f != s.factor || s.retime {
            s.factor = f;
            s.retime = false;
            changed.push(j);
        }
        let (c1, r1) = s.reads();
        let st1 = s.gpus as f64 * (1.0 - s.factor);
        s.counted = (c1, r1, st1);
        self.reading.0 += c1 - c0;
        self.reading.1 += r1 - r0;
        self.stalled += st1 - st0;
    }

    /// Jobs that stopped since the last settle give their cache and bandwidth back.
    fn stopped(&mut self, world: &mut World) {
        let mut gone = std::mem::take(&mut self.touched);
        self.on.release_stopped(world, &mut gone);
        for &j in &gone {
            let s = &mut self.jobs[j as usize];
            let (c, r, st) = s.counted;
            self.reading.0 -= c;
            self.reading.1 -= r;
            self.stalled -= st;
            self.need -= s.need;
            self.given.0 -= s.share.0;
            self.given.1 -= s.share.1;
            self.used -= s.lending.0;
            self.short -= s.lending.1 as usize;
            *s = Loading::default();
            if world.resources.io_hits[j as usize].0 != 0.0 {
                world.resources.io_hits[j as usize].0 = 0.0;
                world.resources.io_changes += 1;
            }
        }
        gone.clear();
        self.touched = gone;
    }

    /// Jobs the engine started, restarted or resized since the last settle: their
    /// caches start cold. Pushes them onto `self.touched`.
    fn started(&mut self, world: &World, started: &[JobIdx]) {
        for &j in started {
            let rt = &world.rt[j as usize];
            if rt.status != Status::Running {
                continue;
            }
            let Some(p) = world.jobs[j as usize].extras().data else {
                continue;
            };
            let gpus = rt.placement.gpus();
            let s = &mut self.jobs[j as usize];
            if !s.on {
                s.on = true;
                self.on.add(j);
            }
            s.preemptions = rt.preemptions;
            s.gpus = gpus;
            s.hit = 0.0;
            s.target = 0.0;
            s.full = p.demand(gpus);
            s.retime = true;
            self.retarget(world, j, &p);
        }
    }

    /// Job `j`'s cache moves toward what its placement or share now gives.
    fn retarget(&mut self, world: &World, j: JobIdx, p: &DataProfile) {
        let target = self.target(world, j, p);
        if self.warm(world, j, p, target) && !self.jobs[j as usize].warming {
            self.jobs[j as usize].warming = true;
            self.warming.push(j);
        }
        self.renew(j);
        self.touched.push(j);
    }

    /// Jobs whose shares the policy changed since the last settle take them up.
    fn reshared(&mut self, world: &mut World) {
        let dirty = std::mem::take(&mut world.resources.io_dirty);
        for &j in &dirty {
            let share = world
                .resources
                .io_shares
                .get(j as usize)
                .copied()
                .unwrap_or_default();
            let s = &mut self.jobs[j as usize];
            if !s.on || share == s.share {
                continue;
            }
            self.given.0 += share.0 - s.share.0;
            self.given.1 += share.1 - s.share.1;
            s.share = share;
            s.bandwidth = share.1;
            self.account(j);
            if let Some(p) = world.jobs[j as usize].extras().data {
                self.retarget(world, j, &p);
            }
        }
        let mut dirty = dirty;
        dirty.clear();
        world.resources.io_dirty = dirty;
    }

    /// The policy's shares are guarantees, and the link is work-conserving: bandwidth
    /// no share claims, or that a share claims beyond its job's need (a cache warmed
    /// since the policy last looked), is water-filled over the jobs that need more
    /// than their share, until the policy decides again.
    fn lend_spare(&mut self, changed: &mut Vec<JobIdx>) {
        let spare = self.total_bandwidth - self.used;
        let lend = self.short > 0 && spare > 1e-9;
        if lend || self.congested {
            self.demands.clear();
            for &j in self.on.jobs() {
                let s = &self.jobs[j as usize];
                if s.need > s.share.1 {
                    self.demands.push((s.need - s.share.1, j));
                }
            }
            self.demands
                .sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            for k in 0..self.on.jobs().len() {
                let j = self.on.jobs()[k];
                self.jobs[j as usize].bandwidth = self.jobs[j as usize].share.1;
            }
            if lend {
                let jobs = &mut self.jobs;
                water_fill(&self.demands, spare, |j, g| {
                    let s = &mut jobs[j as usize];
                    s.bandwidth = s.share.1 + g;
                });
            }
            for k in 0..self.on.jobs().len() {
                self.refactor(self.on.jobs()[k], changed);
            }
        } else {
            for k in 0..self.touched.len() {
                self.refactor(self.touched[k], changed);
            }
        }
        // Lent now: the next settle takes it back or lends it afresh.
        self.congested = lend;
    }

    /// Warming jobs whose epoch of warm-up is done now hit at their target.
    fn warmed(&mut self, world: &World) {
        let mut k = 0;
        while k < self.warming.len() {
            let j = self.warming[k];
            let s = self.jobs[j as usize];
            let done = !s.on || s.hit >= s.target;
            if !done && IoModel::remaining_now(world, j) > s.warm_at + 1e-6 {
                k += 1;
                continue;
            }
            self.warming.swap_remove(k);
            self.jobs[j as usize].warming = false;
            if !done {
                self.jobs[j as usize].hit = s.target;
                self.renew(j);
                self.touched.push(j);
            }
        }
    }
}

/// Water-fills `total` over `demands` (sorted ascending): each gets its demand or an
/// equal share of what is left, whichever is less.
fn water_fill(demands: &[(f64, JobIdx)], total: f64, mut give: impl FnMut(JobIdx, f64)) {
    let mut left = total;
    for (k, &(d, j)) in demands.iter().enumerate() {
        let fair = left / (demands.len() - k) as f64;
        let g = d.min(fair).max(0.0);
        give(j, g);
        left -= g;
    }
}

impl Resource for IoModel {
    fn settle(
        &mut self,
        world: &mut World,
        started: &[JobIdx],
        changed: &mut Vec<JobIdx>,
    ) -> Result<(), SimError> {
        if world.resources.io_hits.len() < world.jobs.len() {
            world.resources.io_hits.resize(world.jobs.len(), (0.0, 0));
        }
        self.touched.clear();
        self.stopped(world);
        if self.managed {
            // A job (re)started takes its share afresh.
            for &j in started {
                let s = &mut self.jobs[j as usize];
                self.given.0 -= s.share.0;
                self.given.1 -= s.share.1;
                s.share = (0.0, 0.0);
                s.bandwidth = 0.0;
                if s.on {
                    self.account(j);
                }
                if world.rt[j as usize].status == Status::Running {
                    world.resources.io_dirty.push(j);
                }
            }
        }
        self.started(world, started);
        if self.managed {
            self.reshared(world);
        }
        self.warmed(world);
        if self.managed {
            for (resource, given, has, unit) in [
                ("cache", self.given.0, self.total_cache, "bytes"),
                (
                    "remote bandwidth",
                    self.given.1,
                    self.total_bandwidth,
                    "bytes/s",
                ),
            ] {
                if given > has * (1.0 + 1e-9) + 1e-6 {
                    return Err(SimError::OverAllocated {
                        policy: self.policy,
                        resource,
                        given,
                        has,
                        unit,
                    });
                }
            }
            self.lend_spare(changed);
        } else if self.need > self.total_bandwidth * (1.0 + 1e-12) || self.congested {
            // A congested link (or one that just stopped being): water-fill every job,
            // and take the sums afresh so rounding does not accumulate.
            self.demands.clear();
            self.need = 0.0;
            for &j in self.on.jobs() {
                let n = self.jobs[j as usize].need;
                self.need += n;
                self.demands.push((n, j));
            }
            self.demands
                .sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            let jobs = &mut self.jobs;
            water_fill(&self.demands, self.total_bandwidth, |j, g| {
                jobs[j as usize].bandwidth = g;
            });
            self.congested = self.need > self.total_bandwidth * (1.0 + 1e-12);
            self.reading = (0.0, 0.0);
            self.stalled = 0.0;
            for k in 0..self.on.jobs().len() {
                let j = self.on.jobs()[k];
                self.jobs[j as usize].counted = (0.0, 0.0, 0.0);
                self.refactor(j, changed);
            }
        } else {
            // Every job has what it needs: only those that changed move.
            for k in 0..self.touched.len() {
                let j = self.touched[k];
                self.jobs[j as usize].bandwidth = self.jobs[j as usize].need;
                self.refactor(j, changed);
            }
        }
        for k in 0..self.touched.len() {
            let j = self.touched[k];
            let stamped = (self.jobs[j as usize].hit, world.rt[j as usize].preemptions);
            if world.resources.io_hits[j as usize] != stamped {
                world.resources.io_hits[j as usize] = stamped;
                world.resources.io_changes += 1;
            }
        }
        Ok(())
    }

    fn factor(&self, j: JobIdx) -> f64 {
        let s = &self.jobs[j as usize];
        if s.on { s.factor } else { 1.0 }
    }

    fn next_change(&self, world: &World) -> Option<Time> {
        self.warming
            .iter()
            .filter_map(|&j| {
                let rt = &world.rt[j as usize];
                if rt.status != Status::Running || rt.rate <= 0.0 {
                    return None;
                }
                let left = rt.remaining - self.jobs[j as usize].warm_at;
                let from = rt.last_update.max(rt.overhead_until);
                let t = from.saturating_add((left / rt.rate).ceil().max(0.0) as Time);
                Some(t.max(world.now + 1))
            })
            .min()
    }

    fn interval(&mut self, _world: &World, from: Time, to: Time) {
        if to <= from {
            return;
        }
        let secs = (to - from) as f64 / 1000.0;
        self.report.remote_capacity += self.total_bandwidth * secs;
        self.report.cache_bytes += self.reading.0.max(0.0) * secs;
        self.report.remote_bytes += self.reading.1.max(0.0) * secs;
        self.report.stalled_gpu_s += self.stalled.max(0.0) * secs;
    }

    fn report(self: Box<Self>, outcome: &mut RunOutcome) {
        outcome.io = Some(self.report);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn water_filling_gives_small_demands_theirs_and_splits_the_rest() {
        let d = [(1.0, 0), (5.0, 1), (10.0, 2)];
        let mut got = [0.0; 3];
        water_fill(&d, 9.0, |j, g| got[j as usize] = g);
        assert_eq!(got, [1.0, 4.0, 4.0]);
        water_fill(&d, 100.0, |j, g| got[j as usize] = g);
        assert_eq!(got, [1.0, 5.0, 10.0]);
    }
}
