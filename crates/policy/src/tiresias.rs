//! Tiresias (NSDI'19): discretized two-dimensional least-attained-service (2D-LAS) and
//! discretized 2D-Gittins, as the Tiresias, Muri and ElasticFlow simulators implement
//! `dlas-gpu` and `dlas-gpu-gittins`.
//!
//! Attained service is GPUs × time held (GPU-ms). Jobs enter queue 0 and move down one
//! queue when their attained service crosses the queue's threshold (3,250 and 7,200
//! GPU-seconds by default: three queues). Each pass walks the queues from the top;
//! within a queue the order is the artifact's: the list as of the previous pass
//! stably partitioned into running then pending jobs, with jobs that arrived or were
//! demoted since appended at the end. GPUs are counted from the full cluster, jobs that
//! fit are kept or started, running jobs that do not fit are preempted (first-fit
//! skipping). The starvation guard (off by default, as in the artifacts) sends a job back
//! to queue 0 once it has waited `starvation` × its executed time since its last
//! promotion. With `gittins=true`, jobs inside each queue are ordered by their Gittins
//! index at their attained service (highest first; ties: later submission first, as
//! the artifact's reversed sort does), computed from the GPU-time distribution of the
//! run's own jobs.

use crate::PolicyError;
use crate::ctx::{Ctx, Handles};
use crate::fifo::placement_param;
use crate::greedy::{self, Opts, Scratch};
use crate::spec::{BACKFILL_ON, Capabilities, Capability, PLACE_COUNT, ParamSpec, PolicySpec};
use crate::table::JobTable;
use crate::world::{JobIdx, Status};
use crate::{ParamError, Params, Policy};
use apiary_model::{Job, Time};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
/// `tiresias`: its spec.
pub const TIRESIAS: PolicySpec = PolicySpec {
    name: "tiresias",
    about: "Tiresias discretized 2D-LAS: multi-level queues on attained GPU-time; no job knowledge",
    // `lookahead` only with `gittins=true` (`Policy::capabilities`).
    capabilities: Capabilities::of(&[Capability::Lookahead]),
    params: TIRESIAS_PARAMS,
    build: |p| Ok(Box::new(Tiresias::new(p, false)?)),
};

/// `tiresias-gittins`: its spec.
pub const TIRESIAS_GITTINS: PolicySpec = PolicySpec {
    name: "tiresias-gittins",
    about: "Tiresias discretized 2D-Gittins: queues ordered by Gittins index of the GPU-time distribution",
    // The artifact learns the distribution from the whole trace at the first pass.
    capabilities: Capabilities::of(&[Capability::Lookahead]),
    params: TIRESIAS_GITTINS_PARAMS,
    build: |p| Ok(Box::new(Tiresias::new(p, true)?)),
};

const TIRESIAS_PARAMS: &[ParamSpec] = &[
    THRESHOLDS,
    STARVATION,
    GITTINS_OFF,
    GITTINS_DELTA,
    BACKFILL_ON,
    PLACE_COUNT,
];
const TIRESIAS_GITTINS_PARAMS: &[ParamSpec] = &[
    THRESHOLDS,
    STARVATION,
    GITTINS_ON,
    GITTINS_DELTA,
    BACKFILL_ON,
    PLACE_COUNT,
];

const THRESHOLDS: ParamSpec = ParamSpec {
    key: "thresholds",
    default: "3250,7200",
    about: "queue thresholds in GPU-seconds (Pollux's baseline uses 57600)",
};

const STARVATION: ParamSpec = ParamSpec {
    key: "starvation",
    default: "0",
    about: "promote a job to queue 0 after waiting this many times its executed time (0 = off)",
};

const GITTINS_OFF: ParamSpec = ParamSpec {
    key: "gittins",
    default: "false",
    about: "order each queue by Gittins index instead of arrival",
};
const GITTINS_ON: ParamSpec = ParamSpec {
    default: "true",
    ..GITTINS_OFF
};

const GITTINS_DELTA: ParamSpec = ParamSpec {
    key: "gittins_delta",
    default: "3250",
    about: "Gittins quantum, GPU-seconds",
};

#[derive(Debug, Default)]
struct Level {
    running: Segment,
    pending: Segment,
    tail: Vec<(u64, JobIdx)>,
}

/// One segment of a queue: (position, job) in position order. Positions come from two
/// counters that move apart (started jobs take the next back position, preempted ones
/// the next front one), so nearly every insert is at an end; the pass walks segments
/// every event, and a deque walks several times faster than a B-tree.
#[derive(Debug, Default)]
struct Segment(VecDeque<(u64, JobIdx)>);

impl Segment {
    fn insert(&mut self, key: (u64, JobIdx)) {
        match (self.0.front(), self.0.back()) {
            (_, Some(&b)) if key > b => self.0.push_back(key),
            (Some(&f), _) if key < f => self.0.push_front(key),
            (None, None) => self.0.push_back(key),
            _ => {
                if let Err(i) = self.0.binary_search(&key) {
                    self.0.insert(i, key);
                }
            }
        }
    }

    fn remove(&mut self, key: &(u64, JobIdx)) -> bool {
        match self.0.binary_search(key) {
            Ok(i) => {
                self.0.remove(i);
                true
            }
            Err(_) => false,
        }
    }

    fn iter(&self) -> std::collections::vec_deque::Iter<'_, (u64, JobIdx)> {
        self.0.iter()
    }
}

/// What Tiresias keeps per job, in one record so a pass touches one place per job (its
/// queue, one byte, in a table of its own: in the record it would pad 40 bytes to 48).
#[derive(Clone, Copy, Debug)]
struct PerJob {
    /// Its position in its queue.
    pos: u64,
    /// Attained GPU-time when it was last promoted to the top queue.
    attained_base: u64,
    /// Run time when it was last promoted.
    executed_base: Time,
    /// Time it had waited (since its first start) when it was last promoted.
    pending_base: Time,
    /// When it leaves its queue for the next one (`Time::MAX`: never).
    demote_at: Time,
}

impl Default for PerJob {
    fn default() -> Self {
        PerJob {
            pos: 0,
            attained_base: 0,
            executed_base: 0,
            pending_base: 0,
            demote_at: Time::MAX,
        }
    }
}

/// Discretized 2D-LAS / 2D-Gittins.
#[derive(Debug)]
pub struct Tiresias {
    /// The spec it was built from: its name, whatever `gittins` says.
    spec: &'static PolicySpec,
    limits: Vec<u64>,
    starvation: f64,
    gittins: Option<Gittins>,
    opts: Opts,
    levels: Vec<Level>,
    /// Per job: the counters it is judged by.
    per: JobTable<PerJob>,
    /// Per job: its queue.
    level: JobTable<u8>,
    /// Demotions to come, earliest (then lowest job) first. A cleared demotion stays
    /// until it reaches the front (or a sweep), where it no longer matches its job's
    /// `demote_at` and is dropped: clearing is a store, not a search, and a start,
    /// preemption or finish clears one.
    demote: BinaryHeap<Reverse<(Time, JobIdx)>>,
    /// Jobs with a demotion set (the entries of `demote` still live).
    demote_live: usize,
    next_pos: u64,
    back: u64,
    front: u64,
    order: Vec<JobIdx>,
    keyed: Vec<(u64, u64, JobIdx)>,
    scratch: Scratch,
    /// Jobs that ran from a queue's tail in the last pass, kept to reuse its allocation.
    demote_new: Vec<JobIdx>,
}

impl Tiresias {
    /// Parameters as [`TIRESIAS`] lists them; `gittins_policy` picks the `gittins`
    /// default of `tiresias-gittins` ([`TIRESIAS_GITTINS`]).
    pub fn new(p: &Params, gittins_policy: bool) -> Result<Tiresias, ParamError> {
        let limits: Vec<u64> = p.secs_list(&THRESHOLDS)?;
        if limits.windows(2).any(|w| w[0] >= w[1]) || limits.len() > 250 {
            return Err(ParamError::Bad {
                key: "thresholds".into(),
                value: p.str("thresholds").unwrap_or("").into(),
                message: "thresholds must increase".into(),
            });
        }
        let gittins = if p.bool(if gittins_policy {
            &GITTINS_ON
        } else {
            &GITTINS_OFF
        })? {
            Some(Gittins::new(p.secs(&GITTINS_DELTA, 0.0)?))
        } else {
            None
        };
        Ok(Tiresias {
            spec: if gittins_policy {
                &TIRESIAS_GITTINS
            } else {
                &TIRESIAS
            },
            levels: (0..=limits.len()).map(|_| Level::default()).collect(),
            limits,
            starvation: p.f64(&STARVATION)?,
            gittins,
            opts: Opts {
                preemptive: true,
                backfill: p.bool(&BACKFILL_ON)?,
                placement: placement_param(p, &PLACE_COUNT)?,
            },
            per: JobTable::new(),
            level: JobTable::new(),
            demote: BinaryHeap::new(),
            demote_live: 0,
            next_pos: 0,
            back: 1 << 62,
            front: 1 << 62,
            order: Vec::new(),
            keyed: Vec::new(),
            scratch: Scratch::default(),
            demote_new: Vec::new(),
        })
    }

    fn ensure(&mut self, n: usize) {
        self.per.ensure(n, PerJob::default());
        self.level.ensure(n, 0);
    }

    /// Moves running job `j` to the front of its queue's pending segment (a preempted
    /// or requeued job), and drops its demotion timer.
    fn requeue_front(&mut self, j: JobIdx) {
        let key = (self.per[j].pos, j);
        let l = &mut self.levels[self.level[j] as usize];
        if l.running.remove(&key) {
            self.front -= 1;
            let p = self.front;
            self.per[j].pos = p;
            l.pending.insert((p, j));
        }
        self.clear_demotion(j);
    }

    fn remove_from_level(&mut self, j: JobIdx) {
        let l = &mut self.levels[self.level[j] as usize];
        let key = (self.per[j].pos, j);
        if !l.running.remove(&key)
            && !l.pending.remove(&key)
            && let Some(i) = l.tail.iter().position(|&k| k == key)
        {
            l.tail.remove(i);
        }
    }

    fn append(&mut self, j: JobIdx, level: usize) {
        self.level[j] = level as u8;
        self.per[j].pos = self.next_pos;
        self.levels[level].tail.push((self.next_pos, j));
        self.next_pos += 1;
    }

    fn clear_demotion(&mut self, j: JobIdx) {
        if self.per[j].demote_at != Time::MAX {
            self.per[j].demote_at = Time::MAX;
            self.demote_live -= 1;
        }
    }

    /// The earliest live demotion, dropping cleared ones from the front.
    fn next_demotion(&mut self) -> Option<(Time, JobIdx)> {
        while let Some(&Reverse((t, j))) = self.demote.peek() {
            if self.per[j].demote_at == t {
                return Some((t, j));
            }
            self.demote.pop();
        }
        None
    }

    fn set_demotion(&mut self, ctx: &Ctx<'_>, j: JobIdx) {
        self.clear_demotion(j);
        let l = self.level[j] as usize;
        if l < self.limits.len() {
            let att = ctx.attained(j) - self.per[j].attained_base;
            let g = ctx.job(j).gpus as u64;
            let t = ctx.now() + self.limits[l].saturating_sub(att).div_ceil(g);
            self.per[j].demote_at = t;
            self.demote_live += 1;
            self.demote.push(Reverse((t, j)));
            // Cleared entries pile up behind the front: sweep them once they outnumber
            // the live ones.
            if self.demote.len() > 2 * self.demote_live + 1024 {
                let per = &self.per;
                self.demote
                    .retain(|Reverse((t, j))| per[*j].demote_at == *t);
            }
        }
    }

    /// Demotions due now (one queue per event, as the artifact checks once per event).
    fn demote_due(&mut self, ctx: &Ctx<'_>, now: Time) {
        while let Some((t, j)) = self.next_demotion() {
            if t > now {
                break;
            }
            self.demote.pop();
            self.clear_demotion(j);
            if ctx.status(j) != Status::Running {
                continue;
            }
            let l = self.level[j] as usize;
            self.remove_from_level(j);
            self.append(j, (l + 1).min(self.limits.len()));
        }
    }

    /// The starvation guard: a pending job that has waited `starvation` times what it
    /// ran since its last promotion goes back to the top queue.
    fn promote_starved(&mut self, ctx: &mut Ctx<'_>, now: Time) {
        let mut promote = Vec::new();
        for l in 1..self.levels.len() {
            let lv = &self.levels[l];
            for &(_, j) in lv.pending.iter().chain(lv.tail.iter()) {
                let exec = ctx.executed(j) - self.per[j].executed_base;
                if ctx.status(j) == Status::Pending && exec > 0 {
                    let waited = self.waited_since_promotion(ctx, j);
                    // Capped at the longest input time so the wake-up never
                    // overflows the clock, whatever `starvation` is.
                    let due = (exec as f64 * self.starvation)
                        .min(apiary_model::time::MAX_INPUT as f64)
                        as Time;
                    if waited >= due {
                        promote.push(j);
                    } else {
                        ctx.wake_at(now + (due - waited));
                    }
                }
            }
        }
        for j in promote {
            self.remove_from_level(j);
            self.append(j, 0);
            self.per[j].attained_base = ctx.attained(j);
            self.per[j].executed_base = ctx.executed(j);
            let first = ctx.rt(j).first_start.unwrap_or(now);
            self.per[j].pending_base = (now - first).saturating_sub(ctx.executed(j));
        }
    }

    fn waited_since_promotion(&self, ctx: &Ctx<'_>, j: JobIdx) -> Time {
        let rt = ctx.rt(j);
        let first = rt.first_start.unwrap_or(ctx.now());
        (ctx.now() - first)
            .saturating_sub(ctx.executed(j))
            .saturating_sub(self.per[j].pending_base)
    }
}

impl Policy for Tiresias {
    fn spec(&self) -> &'static PolicySpec {
        self.spec
    }

    /// The Gittins index learns the trace's GPU-time distribution from the jobs to
    /// come, as the artifact does: `lookahead` whenever it is on.
    fn capabilities(&self) -> Capabilities {
        match self.gittins {
            Some(_) => Capabilities::of(&[Capability::Lookahead]),
            None => Capabilities::CORE,
        }
    }

    fn admit(&mut self, ctx: &Ctx<'_>, j: JobIdx) -> Result<(), PolicyError> {
        self.ensure(ctx.job_count());
        self.append(j, 0);
        Ok(())
    }

    fn on_finish(&mut self, _ctx: &Ctx<'_>, j: JobIdx) {
        self.remove_from_level(j);
        self.clear_demotion(j);
    }

    /// A job stopped from outside (a failure, a lost node): back to the front of its
    /// queue's pending segment, as the passes put the jobs they preempt.
    fn on_requeue(&mut self, _ctx: &Ctx<'_>, j: JobIdx) {
        if (j as usize) < self.per.len() {
            self.requeue_front(j);
        }
    }

    fn schedule(&mut self, ctx: &mut Ctx<'_>) -> Result<(), PolicyError> {
        let now = ctx.now();
        self.demote_due(ctx, now);
        if self.starvation > 0.0 {
            self.promote_starved(ctx, now);
        }

        if let Some(g) = &mut self.gittins {
            self.order.clear();
            // With nothing waiting the pass starts and stops nothing, whatever the
            // order; with every waiting job fitting it keeps every running job and
            // starts every waiting one, so only the waiting jobs' order (their
            // placement order) matters, and the running jobs' indices (most of a
            // pass's on Philly) are not needed.
            let waiting = ctx.min_pending_gpus().is_some();
            let only_waiting = waiting && greedy::everything_fits(ctx);
            for lv in self.levels.iter().filter(|_| waiting) {
                self.keyed.clear();
                for &(_, j) in lv
                    .running
                    .iter()
                    .chain(lv.pending.iter())
                    .chain(lv.tail.iter())
                {
                    if only_waiting && ctx.status(j) != Status::Pending {
                        continue;
                    }
                    // Highest index first, then later submission first.
                    let key = g.key(j, ctx.attained(j));
                    self.keyed.push((key, u64::MAX - ctx.job(j).submit, j));
                }
                self.keyed.sort_unstable();
                self.order.extend(self.keyed.iter().map(|k| k.2));
            }
            // Learned after the first pass's order is built, so that pass ranks every
            // job at index 0, as it always has here.
            if let Some(g) = &mut self.gittins
                && !g.ready
            {
                g.learn(ctx.lookahead()?.all_jobs());
            }
            greedy::pass(
                ctx,
                self.order.iter().copied(),
                self.opts,
                &mut self.scratch,
            );
        } else if self.opts.preemptive && greedy::everything_fits(ctx) {
            // Only the pending jobs, in queue order, decide anything (`everything_fits`).
            self.order.clear();
            for lv in &self.levels {
                self.order.extend(lv.pending.iter().map(|k| k.1));
                for &(_, j) in &lv.tail {
                    if ctx.status(j) == Status::Pending {
                        self.order.push(j);
                    }
                }
            }
            greedy::pass(
                ctx,
                self.order.iter().copied(),
                self.opts,
                &mut self.scratch,
            );
        } else {
            // Walked lazily: the pass stops once every running job is seen and nothing
            // more fits, so a long queue's tail is never visited (building the whole
            // order each pass was half of a Philly run).
            let order = self.levels.iter().flat_map(|lv| {
                lv.running
                    .iter()
                    .chain(lv.pending.iter())
                    .chain(lv.tail.iter())
                    .map(|k| k.1)
            });
            greedy::pass(ctx, order, self.opts, &mut self.scratch);
        }

        // Re-partition each queue as the artifact does after every pass: jobs started from
        // the pending segment move to the end of the running segment (then those from the
        // tail, in tail order), preempted jobs move to the front of the pending segment
        // (keeping their order), and the tail splits into the two segments' ends.
        let started = std::mem::take(&mut self.scratch.started);
        let preempted = std::mem::take(&mut self.scratch.preempted);
        for &j in &started {
            let key = (self.per[j].pos, j);
            let l = &mut self.levels[self.level[j] as usize];
            if l.pending.remove(&key) {
                let p = self.back;
                self.back += 1;
                self.per[j].pos = p;
                l.running.insert((p, j));
            }
            self.set_demotion(ctx, j);
        }
        for &j in preempted.iter().rev() {
            self.requeue_front(j);
        }
        self.scratch.started = started;
        self.scratch.preempted = preempted;
        let mut demote_new = std::mem::take(&mut self.demote_new);
        demote_new.clear();
        for lv in &mut self.levels {
            for (_, j) in lv.tail.drain(..) {
                let p = self.back;
                self.back += 1;
                self.per[j].pos = p;
                if ctx.status(j) == Status::Running {
                    lv.running.insert((p, j));
                    demote_new.push(j);
                } else {
                    lv.pending.insert((p, j));
                }
            }
        }
        for &j in &demote_new {
            if self.per[j].demote_at == Time::MAX {
                self.set_demotion(ctx, j);
            }
        }
        self.demote_new = demote_new;
        if let Some((t, _)) = self.next_demotion() {
            ctx.wake_at(t);
        }
        Ok(())
    }
}

/// Gittins index over an empirical GPU-time distribution (GPU-ms).
#[derive(Debug)]
struct Gittins {
    delta: u64,
    samples: Vec<u64>,
    prefix: Vec<u128>,
    /// `prefix` in 64 bits, when the samples' total fits: the index's sum then
    /// converts to a double in hardware (the `u128` conversion is a software routine,
    /// and was a tenth of a Philly run). The same integer rounds to the same double.
    prefix64: Option<Vec<u64>>,
    ready: bool,
    /// Per job: where its key was last found. A waiting job's attained time does not
    /// change, so it reuses its key; a running one's grows by a pass's worth, so its
    /// two positions in the samples move a few places from where they were, instead
    /// of two binary searches of the whole list (on Philly those searches were most of
    /// a run).
    keys: Vec<Option<Found>>,
}

/// A job's key at one attained GPU-time, and the two sample positions it came from.
#[derive(Clone, Copy, Debug)]
struct Found {
    attained: u64,
    key: u64,
    /// The first sample past `attained`, and the first past `attained + delta`.
    lo: usize,
    hi: usize,
}

impl Gittins {
    fn new(delta: u64) -> Gittins {
        Gittins {
            delta: delta.max(1),
            samples: Vec::new(),
            prefix: vec![0],
            prefix64: None,
            ready: false,
            keys: Vec::new(),
        }
    }

    /// Job `j`'s sort key at attained GPU-time `a`: its index's bits, complemented so
    /// that the highest index sorts first.
    fn key(&mut self, j: JobIdx, a: u64) -> u64 {
        if !self.ready {
            return u64::MAX - 0f64.to_bits();
        }
        let j = j as usize;
        if j >= self.keys.len() {
            self.keys.resize(j + 1, None);
        }
        let top = a.saturating_add(self.delta);
        let (lo, hi) = match self.keys[j] {
            Some(f) if f.attained == a => return f.key,
            // Attained time only grows while a job runs: search on from the last
            // positions.
            Some(f) if f.attained < a => (
                after(&self.samples, f.lo, a),
                after(&self.samples, f.hi, top),
            ),
            _ => (after(&self.samples, 0, a), after(&self.samples, 0, top)),
        };
        let key = u64::MAX - self.index_at(a, lo, hi).to_bits();
        self.keys[j] = Some(Found {
            attained: a,
            key,
            lo,
            hi,
        });
        key
    }

    fn learn(&mut self, jobs: &[Job]) {
        self.samples = jobs
            .iter()
            .map(|j| (j.gpu_time()).min(u64::MAX as u128) as u64)
            .collect();
        self.samples.sort_unstable();
        self.prefix = std::iter::once(0u128)
            .chain(self.samples.iter().scan(0u128, |acc, &s| {
                *acc += s as u128;
                Some(*acc)
            }))
            .collect();
        self.prefix64 = self.prefix.iter().map(|&p| u64::try_from(p).ok()).collect();
        self.ready = true;
        self.keys.clear();
    }

    /// G(a) = P(S − a ≤ Δ | S > a) / E[min(S − a, Δ) | S > a]; 0 past the largest
    /// sample. Passes go through [`Gittins::key`]; this is the plain search it matches.
    #[cfg(test)]
    fn index(&self, a: u64) -> f64 {
        if !self.ready {
            return 0.0;
        }
        let lo = after(&self.samples, 0, a);
        let hi = after(&self.samples, 0, a.saturating_add(self.delta));
        self.index_at(a, lo, hi)
    }

    /// The index at `a`, given the first sample past `a` (`lo`) and past `a + delta`
    /// (`hi`).
    fn index_at(&self, a: u64, lo: usize, hi: usize) -> f64 {
        let n = self.samples.len() - lo;
        if n == 0 {
            return 0.0;
        }
        let k = hi - lo;
        // The samples counted are each past `a`, so their sum is at least `k·a`.
        let within = match &self.prefix64 {
            Some(p) => (p[hi] - p[lo] - k as u64 * a) as f64,
            None => (self.prefix[hi] - self.prefix[lo] - k as u128 * a as u128) as f64,
        };
        let expect = within + (n - k) as f64 * self.delta as f64;
        if expect <= 0.0 {
            0.0
        } else {
            (k as f64) / expect
        }
    }
}

/// The first position at or past `from` whose sample is greater than `a`, in sorted
/// `samples` where every sample before `from` is at most `a`. The search gallops from
/// `from` (steps of 1, 2, 4, …) and then halves the last step, so a position that
/// moved by `d` costs about 2·log₂ d probes, all near the old one.
fn after(samples: &[u64], from: usize, a: u64) -> usize {
    let mut lo = from;
    let mut step = 1;
    loop {
        match samples.get(lo + step - 1) {
            Some(&s) if s <= a => {
                lo += step;
                step *= 2;
            }
            Some(_) => break,
            None => {
                return lo + samples[lo..].partition_point(|&s| s <= a);
            }
        }
    }
    // Every sample before `lo` is at most `a`, and `samples[lo + step - 1]` is past it.
    lo + samples[lo..lo + step - 1].partition_point(|&s| s <= a)
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn gittins_index_by_hand() {
        let mut g = Gittins::new(10);
        g.samples = vec![5, 20, 100];
        g.prefix = vec![0, 5, 25, 125];
        g.prefix64 = Some(vec![0, 5, 25, 125]);
        g.ready = true;
        // a = 0: S > 0 all three; within Δ=10: {5}; E[min] = (5 + 10 + 10)/3.
        assert!((g.index(0) - 1.0 / 25.0).abs() < 1e-12);
        // a = 15: {20, 100}; within (15, 25]: {20} contributes 5; 100 contributes 10.
        assert!((g.index(15) - 1.0 / 15.0).abs() < 1e-12);
        assert_eq!(g.index(100), 0.0);
    }

    /// Keys found from a job's last positions, as its attained time grows by small and
    /// large steps (or goes back, after a restart), are the keys a fresh search finds.
    #[test]
    fn gittins_keys_searched_on_match_fresh_searches() {
        let mut rng = apiary_model::rng::Rng::new(5);
        for case in 0..40 {
            let n = 1 + rng.below(300) as usize;
            let jobs: Vec<Job> = (0..n)
                .map(|i| {
                    // Small, large, and totals past 64 bits (the 128-bit sums).
                    let ms = rng.below(match case % 3 {
                        0 => 50,
                        1 => 1 << 40,
                        _ => 1 << 62,
                    });
                    Job::new(i.to_string(), 0, 1 + rng.below(4) as u32, ms)
                })
                .collect();
            let mut g = Gittins::new(1 + rng.below(100));
            g.learn(&jobs);
            assert_eq!(g.prefix64.is_none(), case % 3 == 2 && n > 4, "case {case}");
            for j in 0..8u32 {
                let mut a = 0u64;
                for _ in 0..200 {
                    a = match rng.below(10) {
                        0 => rng.below(1 << 42),
                        1 => a / 2,
                        2 => a,
                        _ => {
                            let scale = 1u64 << rng.below(40);
                            a + rng.below(1 + scale)
                        }
                    };
                    let want = u64::MAX - g.index(a).to_bits();
                    assert_eq!(g.key(j, a), want, "case {case}, job {j}, attained {a}");
                }
            }
        }
    }
}
