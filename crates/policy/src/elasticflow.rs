//! ElasticFlow (Gu et al., ASPLOS'23): deadline-aware elastic training with admission
//! control, as its artifact's simulator (`ElasticFlow/scheduler/scheduler.py`) runs it.
//!
//! Jobs state a deadline and an iteration count; the scheduler picks their GPU counts
//! from power-of-two levels of a measured throughput table ([`apiary_model::Scaling`]).
//! Time is cut into slots, and a timeline of future free GPUs ([`Timeline`]) records
//! the plans already promised. Each admitted job is planned with its *minimum
//! satisfactory share* ([`plan`]): the smallest level that, walked backwards from the
//! deadline over the free GPUs, finishes its iterations in time. On every arrival all
//! admitted jobs and the newcomers are re-planned in deadline order on an empty
//! timeline; if any plan misses, the newcomers are declined (best-effort ones wait with
//! no deadline). GPUs no plan uses now go out greedily, one level at a time, by a
//! marginal score, and every allocation is placed with buddy placement ([`buddy`]).
//! Every running job pays the artifact's per-round scaling overhead.
//!
//! The planner follows the artifact's `ef_sim_allocation` step by step (change points,
//! the partial last slot before the deadline, the as-late-as-possible start at one
//! GPU), quirks included; `docs/policies/elasticflow.md` lists them.

use crate::{Ctx, JobIdx, ParamError, Params, Policy, Status};
use apiary_model::{Placement, Scaling, Time};
use std::collections::{BTreeMap, BTreeSet};

/// Free GPUs over future time: each point's value holds until the next point, the last
/// one for ever. Times in seconds.
pub type Timeline = BTreeMap<i64, u32>;

/// A job's committed plan: GPUs from each change point on, until `end`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// `time → GPUs`, consecutive equal values merged.
    pub allocs: BTreeMap<i64, u32>,
    /// Planned end, aligned up to a slot.
    pub end: i64,
    /// Planned end to the second.
    pub real_end: i64,
    /// The timeline with this plan taken out of it.
    pub timeline: Timeline,
    /// Whether the plan meets the deadline.
    pub meets: bool,
}

/// What the planner needs to know about one job.
#[derive(Clone, Copy, Debug)]
pub struct PlanJob<'a> {
    /// Throughput per level.
    pub scaling: &'a Scaling,
    /// Iterations left.
    pub iters: f64,
    /// Deadline, seconds (`i64::MAX / 4` for none).
    pub ddl: i64,
}

/// `align_to_time_slot`: the first slot boundary at or after `t`, slots starting at
/// `start`.
pub fn align(start: i64, t: i64, slot: i64) -> i64 {
    start
        + (t - start).div_euclid(slot) * slot
        + if (t - start).rem_euclid(slot) > 0 {
            slot
        } else {
            0
        }
}

fn value_before(tl: &Timeline, t: i64) -> Option<u32> {
    tl.range(..t).next_back().map(|(_, &v)| v)
}

/// `merge_dict`: drops points that repeat the value before them.
pub fn merge(tl: &BTreeMap<i64, u32>) -> BTreeMap<i64, u32> {
    // Built from sorted pairs in one go (BTreeMap's bulk build), not point by point.
    let mut last: Option<u32> = None;
    tl.iter()
        .filter(|&(_, &v)| {
            let keep = last != Some(v);
            last = Some(v);
            keep
        })
        .map(|(&t, &v)| (t, v))
        .collect()
}

fn tput(s: &Scaling, n: u32) -> f64 {
    // The planner only picks counts from the table (`next_level`, `floor_level`) and
    // the readers check the trace's own count, so this fallback never decides a plan.
    s.tput(n).unwrap_or(s.levels[0].1)
}

fn ceil_s(x: f64) -> i64 {
    if x.is_finite() {
        x.ceil() as i64
    } else {
        i64::MAX / 4
    }
}

fn sub(tl: &mut Timeline, t: i64, n: u32) {
    if let Some(v) = tl.get_mut(&t) {
        *v = v.saturating_sub(n);
    }
}

/// `ef_sim_allocation`: plans `job` from `start` on timeline `fut`, with the minimum
/// satisfactory share, or (with `assign`) at that many GPUs for the first stretch of
/// the timeline and the minimum share after it. `total` is the cluster's GPU count.
pub fn plan(
    job: PlanJob<'_>,
    start: i64,
    fut: &Timeline,
    slot: i64,
    total: u32,
    assign: Option<u32>,
) -> Plan {
    let s = job.scaling;
    let ddl = job.ddl;
    let mut iter_left = job.iters;
    let mut event_time = start;
    let mut allocs: BTreeMap<i64, u32> = BTreeMap::from([(start, 0)]);
    let mut new = fut.clone();
    let aligned_ddl = align(start, ddl, slot);
    let mut last_event_gpu = total;
    if !new.contains_key(&aligned_ddl) && aligned_ddl >= start {
        last_event_gpu = value_before(&new, aligned_ddl).unwrap_or(total);
        new.insert(aligned_ddl, last_event_gpu);
    }
    let finish = |allocs: BTreeMap<i64, u32>, end: i64, real_end: i64, new: Timeline| Plan {
        allocs: merge(&allocs),
        end,
        real_end,
        timeline: merge(&new),
        meets: real_end <= ddl,
    };

    if let Some(quota) = assign {
        let mut available = fut.get(&start).copied().unwrap_or(total);
        let mut future_event_time = None;
        for (&t, &v) in fut {
            if t < event_time {
                available = v;
                new.remove(&t);
                continue;
            } else if t == event_time {
                available = v;
                continue;
            }
            future_event_time = Some(t);
            break;
        }
        let future_event_time = future_event_time.unwrap_or(aligned_ddl);
        allocs.insert(event_time, quota);
        let real_end = ceil_s(event_time as f64 + iter_left / tput(s, quota));
        let end = align(start, real_end, slot);
        if future_event_time >= end && ddl >= real_end {
            let keys: Vec<i64> = fut.range(event_time..end).map(|(&t, _)| t).collect();
            for t in keys {
                last_event_gpu = new.get(&t).copied().unwrap_or(last_event_gpu);
                sub(&mut new, t, quota);
            }
            if event_time != end {
                new.insert(event_time, available.saturating_sub(quota));
            }
            if !fut.contains_key(&end) {
                new.insert(end, last_event_gpu);
            }
            return finish(allocs, end, real_end, new);
        }
        let mut duration = future_event_time - event_time;
        if future_event_time == aligned_ddl {
            duration = ddl - event_time;
        }
        iter_left -= duration as f64 * tput(s, quota);
        sub(&mut new, event_time, quota);
        if iter_left <= 0.0 {
            // The assigned stretch alone finishes the job, but past its deadline.
            let mut tl = new;
            tl.entry(end).or_insert(last_event_gpu);
            return finish(allocs, end, real_end, tl);
        }
        event_time = future_event_time;
        allocs.insert(event_time, 0);
    }

    let mut quota = s.next_level(0);
    let mut last_q = 0u32;
    while quota <= total && quota <= s.max_gpus && quota > 0 {
        let mut period_end = aligned_ddl;
        let mut tmp = 0.0;
        for &p in new.range(..aligned_ddl).map(|(t, _)| t) {
            allocs.entry(p).or_insert(0);
        }
        let back: Vec<(i64, u32)> = new
            .range(event_time..aligned_ddl.max(event_time))
            .rev()
            .map(|(&t, &v)| (t, v))
            .collect();
        let mut found = None;
        for (p, free) in back {
            let a = if free >= quota {
                quota
            } else {
                quota.min(s.floor_level(free))
            };
            if a == 0 {
                period_end = p;
                continue;
            }
            let mut dur = period_end - p;
            if period_end == aligned_ddl {
                dur = ddl - p;
            }
            tmp += dur as f64 * tput(s, a);
            if tmp >= iter_left {
                found = Some(p);
                break;
            }
            period_end = p;
        }
        if let Some(p) = found {
            let walk = Walk {
                s,
                event_time,
                aligned_ddl,
                ddl,
                slot,
                share_from: p,
                q: quota,
                lq: last_q,
                iter_left,
            };
            return forward(walk, allocs, new, fut, total);
        }
        last_q = quota;
        quota = s.next_level(quota);
        if quota == last_q {
            break;
        }
    }

    // No level meets the deadline: the largest level tried until the deadline (the
    // artifact's "point" is then before the start, so no stretch counts as the
    // share's)…
    let mut walk = Walk {
        s,
        event_time,
        aligned_ddl,
        ddl,
        slot,
        share_from: i64::MAX,
        q: last_q,
        lq: last_q,
        iter_left,
    };
    walk.run(&mut allocs, &mut new);
    iter_left = walk.iter_left;
    // …then whatever fits after it…
    let mut lat = aligned_ddl.max(event_time);
    let keys: Vec<i64> = new.range(aligned_ddl + 1..).map(|(&t, _)| t).collect();
    for t in keys {
        let free = new.get(&lat).copied().unwrap_or(total);
        let q = s.floor_level(free).min(s.max_gpus);
        if q == 0 {
            allocs.insert(lat, 0);
            lat = t;
            continue;
        }
        allocs.insert(lat, q);
        let its = (t - lat) as f64 * tput(s, q);
        if its >= iter_left {
            let real_end = ceil_s(lat as f64 + iter_left / tput(s, q));
            let end = align(start, real_end, slot);
            let span: Vec<i64> = new.range(aligned_ddl..end).map(|(&k, _)| k).collect();
            for k in span {
                if let Some(&v) = fut.get(&k) {
                    last_event_gpu = v;
                }
                if k >= lat {
                    sub(&mut new, k, q);
                }
            }
            if lat != end {
                new.insert(lat, last_event_gpu.saturating_sub(q));
            }
            if !fut.contains_key(&end) {
                new.insert(end, last_event_gpu);
            }
            return finish(allocs, end, real_end, new);
        }
        iter_left -= its;
        let span: Vec<i64> = new.range(lat..t).map(|(&k, _)| k).collect();
        for k in span {
            sub(&mut new, k, q);
        }
        lat = t;
    }
    // …and the whole cluster once every promise has ended.
    // The artifact takes min(cluster, max_gpu), which is a level on every cluster it
    // ships; the largest level that fits says the same and stays one elsewhere.
    let q = assign.unwrap_or_else(|| s.floor_level(total).max(1));
    allocs.insert(lat, q);
    let real_end = ceil_s(lat as f64 + iter_left.max(0.0) / tput(s, q));
    let end = align(start, real_end, slot);
    new.insert(lat, total.saturating_sub(q));
    new.insert(end, total);
    finish(allocs, end, real_end, new)
}

/// The share's plan once the minimum share and the stretch it starts in are known
/// (`walk`): the walk, then the end if the iterations outlast it, and the timeline
/// with the job's GPUs given back at its end.
fn forward(
    mut walk: Walk<'_>,
    mut allocs: BTreeMap<i64, u32>,
    mut new: Timeline,
    fut: &Timeline,
    total: u32,
) -> Plan {
    let (lat, ends) = walk.run(&mut allocs, &mut new);
    let Walk {
        s,
        event_time,
        ddl,
        slot,
        q,
        iter_left,
        ..
    } = walk;
    let (end, real_end) = match ends {
        Some(e) => e,
        None => {
            let (lt, la) = lat.unwrap_or((event_time, q));
            let la = if la == 0 { q } else { la };
            allocs.insert(lt, la);
            sub(&mut new, lt, la);
            let real_left = ceil_s(iter_left.max(0.0) / tput(s, la));
            (lt + align(0, real_left, slot), lt + real_left)
        }
    };
    let mut last_event_gpu = total;
    if let Some((_, &v)) = fut.range(event_time..end).next_back() {
        last_event_gpu = v;
    }
    if !fut.contains_key(&end) {
        new.insert(end, last_event_gpu);
    }
    Plan {
        allocs: merge(&allocs),
        end,
        real_end,
        timeline: merge(&new),
        meets: real_end <= ddl,
    }
}

/// A stretch of a plan: its start and its GPUs.
type Stretch = (i64, u32);
/// A plan's end aligned to a slot, and to the second.
type Ends = (i64, i64);

/// The forward walk over the timeline's points from `event_time` to the (aligned)
/// deadline that both the share's plan and the missed-deadline plan take: each stretch
/// gets `q` from `share_from` on and `lq` before it, capped by its free GPUs, which
/// the walk takes out of the timeline.
struct Walk<'a> {
    s: &'a Scaling,
    event_time: i64,
    aligned_ddl: i64,
    ddl: i64,
    slot: i64,
    share_from: i64,
    q: u32,
    lq: u32,
    iter_left: f64,
}

impl Walk<'_> {
    /// Walks until the deadline or until the iterations run out in a stretch at or
    /// after `share_from`, returning the last stretch reached (not yet taken out of
    /// the timeline) and, if they ran out, the aligned and exact end.
    fn run(
        &mut self,
        allocs: &mut BTreeMap<i64, u32>,
        new: &mut Timeline,
    ) -> (Option<Stretch>, Option<Ends>) {
        let (s, p, q, lq) = (self.s, self.share_from, self.q, self.lq);
        let level = |t: i64, free: u32| (if t >= p { q } else { lq }).min(s.floor_level(free));
        let keys: Vec<i64> = new
            .range(self.event_time..=self.aligned_ddl.max(self.event_time))
            .map(|(&t, _)| t)
            .filter(|&t| t <= self.aligned_ddl)
            .collect();
        let mut lat: Option<Stretch> = None;
        for t in keys {
            let Some((lt, la)) = lat else {
                lat = Some((t, level(t, new[&t])));
                continue;
            };
            allocs.insert(lt, la);
            sub(new, lt, la);
            if la == 0 {
                lat = Some((t, level(t, new[&t])));
                continue;
            }
            let mut dur = t - lt;
            if t == self.aligned_ddl {
                dur = self.ddl - lt;
            }
            let its = dur as f64 * tput(s, la);
            if lt < p || its < self.iter_left {
                self.iter_left -= its;
            } else {
                let real_left = ceil_s(self.iter_left / tput(s, la));
                return (
                    lat,
                    Some((lt + align(0, real_left, self.slot), lt + real_left)),
                );
            }
            lat = Some((t, level(t, new[&t])));
        }
        (lat, None)
    }
}

/// `get_allocation_time`: GPU-seconds of a plan up to `end`.
pub fn gpu_time(allocs: &BTreeMap<i64, u32>, end: i64) -> f64 {
    let mut total = 0.0;
    let mut it = allocs.iter().peekable();
    while let Some((&t, &n)) = it.next() {
        let next = it.peek().map_or(end, |(u, _)| **u);
        total += n as f64 * (next - t) as f64;
    }
    total
}

/// Buddy placement: power-of-two jobs, largest first; a job of a node or more takes
/// whole free nodes, a smaller one the aligned block of its size in the fullest node
/// that has one. With sizes placed in decreasing order a node's free GPUs are always
/// one aligned run, so any set whose sizes sum to at most the cluster fits. `free`
/// holds each node's GPU count (all equal, a power of two); returns per job its
/// placement, or `None` if the set does not fit.
pub fn buddy(
    node_gpus: u32,
    nodes: usize,
    jobs: &[(JobIdx, u32)],
) -> Option<Vec<(JobIdx, Placement)>> {
    let mut order: Vec<usize> = (0..jobs.len()).collect();
    order.sort_by_key(|&k| std::cmp::Reverse(jobs[k].1));
    let mut used = vec![0u32; nodes];
    let mut out = vec![(0, Placement::default()); jobs.len()];
    let full = if node_gpus >= 64 {
        u64::MAX
    } else {
        (1u64 << node_gpus) - 1
    };
    let mut next_free_node = 0usize;
    for k in order {
        let (j, n) = jobs[k];
        let mut p = Placement::default();
        if n >= node_gpus {
            let need = n.div_ceil(node_gpus) as usize;
            let mut got = 0;
            while got < need {
                while next_free_node < nodes && used[next_free_node] != 0 {
                    next_free_node += 1;
                }
                if next_free_node >= nodes {
                    return None;
                }
                used[next_free_node] = node_gpus;
                p.add(next_free_node as u32, full);
                got += 1;
            }
        } else if n > 0 {
            // The fullest node with room; whole free nodes only when none is partly used.
            let best = (0..nodes)
                .filter(|&x| used[x] > 0 && node_gpus - used[x] >= n)
                .max_by_key(|&x| (used[x], std::cmp::Reverse(x)))
                .or_else(|| (0..nodes).find(|&x| used[x] == 0))?;
            let off = used[best];
            let mask = ((1u64 << n) - 1) << off;
            used[best] += n;
            p.add(best as u32, mask);
        }
        out[k] = (j, p);
    }
    Some(out)
}

/// How the leftover GPUs are handed out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Greedy {
    /// The artifact's `marginal_gputime`: change in planned GPU-seconds per added GPU,
    /// largest first.
    Artifact,
    /// The paper's reading: throughput gained per added GPU, largest first.
    Throughput,
}

#[derive(Clone, Debug)]
struct EfJob {
    ddl: i64,
    best_effort: bool,
    plan: Plan,
    num_gpu: u32,
    next_level: u32,
    marginal: f64,
    next: Option<Plan>,
}

/// The ElasticFlow policy (with or without admission control).
pub struct ElasticFlow {
    name: &'static str,
    admission: bool,
    slot: i64,
    greedy: Greedy,
    overhead: bool,
    jobs: Vec<Option<EfJob>>,
    runnable: Vec<JobIdx>,
    arrived: Vec<JobIdx>,
    next_pass: Time,
    schedule_count: u64,
    cache: BTreeSet<Vec<(u32, u64)>>,
    timeline: Timeline,
    node_gpus: u32,
    nodes: usize,
}

/// No deadline (best-effort jobs): far enough that no plan reaches it.
const NO_DEADLINE: i64 = i64::MAX / 4;

impl ElasticFlow {
    /// `admission`: ElasticFlow proper (`ef-accessctrl`) or its ablation without
    /// admission control (`ef`).
    pub fn new(admission: bool, p: &Params) -> Result<ElasticFlow, ParamError> {
        let slot = p.u64("slot", 60)?;
        if slot == 0 {
            return Err(ParamError::Bad {
                key: "slot".into(),
                value: "0".into(),
                message: "the slot must be at least one second".into(),
            });
        }
        let greedy = p.choice(
            "greedy",
            Greedy::Artifact,
            &[
                ("artifact", Greedy::Artifact),
                ("throughput", Greedy::Throughput),
            ],
        )?;
        Ok(ElasticFlow {
            name: "elasticflow",
            admission: p.bool("admission", admission)?,
            slot: slot as i64,
            greedy,
            overhead: p.bool("overhead", true)?,
            jobs: Vec::new(),
            runnable: Vec::new(),
            arrived: Vec::new(),
            next_pass: 0,
            schedule_count: 0,
            cache: BTreeSet::new(),
            timeline: Timeline::new(),
            node_gpus: 0,
            nodes: 0,
        })
    }

    fn pj<'a>(&self, ctx: &'a Ctx<'_>, j: JobIdx) -> PlanJob<'a> {
        let job = ctx.job(j);
        let s = job.scaling.as_ref().expect("checked in prepare");
        let ref_tput = s.tput(job.gpus).unwrap_or(s.levels[0].1);
        let iters = ctx.remaining(j) / 1000.0 * ref_tput;
        PlanJob {
            scaling: s,
            iters: iters.max(1e-9),
            ddl: self.jobs[j as usize]
                .as_ref()
                .map_or(NO_DEADLINE, |e| e.ddl),
        }
    }

    /// `estimate_all_jobs`: plans `list` in deadline order on an empty timeline.
    fn estimate_all(&mut self, ctx: &Ctx<'_>, list: &mut [JobIdx], now: i64) -> bool {
        let total = ctx.total_gpus() as u32;
        let mut tl = Timeline::from([(now, total)]);
        list.sort_by_key(|&j| {
            self.jobs[j as usize]
                .as_ref()
                .map_or(NO_DEADLINE, |e| e.ddl)
        });
        let mut ok = true;
        for &j in list.iter() {
            let p = plan(self.pj(ctx, j), now, &tl, self.slot, total, None);
            ok &= p.meets;
            tl = p.timeline.clone();
            if let Some(e) = self.jobs[j as usize].as_mut() {
                e.plan = p;
            }
        }
        self.timeline = tl;
        ok
    }

    /// `get_marginal`: re-plans `j` at its next level on the timeline without its own
    /// plan, and scores the step.
    fn marginal(&mut self, ctx: &Ctx<'_>, j: JobIdx, allocatable: u32, now: i64) {
        let total = ctx.total_gpus() as u32;
        let e = self.jobs[j as usize].as_ref().expect("runnable job");
        if e.next_level - e.num_gpu > allocatable || e.next_level == e.num_gpu {
            let e = self.jobs[j as usize].as_mut().expect("runnable job");
            e.marginal = f64::NEG_INFINITY;
            e.next = None;
            return;
        }
        let mut tmp = self.timeline.clone();
        let end = e.plan.end;
        if !tmp.contains_key(&end) {
            let v = value_before(&tmp, end).unwrap_or(total);
            tmp.insert(end, v);
        }
        let mut last = 0i64;
        for (&at, &n) in &e.plan.allocs {
            if !tmp.contains_key(&at) {
                let v = tmp.range(..=at).next_back().map_or(total, |(_, &v)| v);
                tmp.insert(at, v);
            }
            let delta = n as i64 - last;
            for (_, v) in tmp.range_mut(at..end.max(at)) {
                *v = (*v as i64 + delta).clamp(0, total as i64) as u32;
            }
            last = n as i64;
        }
        let tmp = merge(&tmp);
        let (next_level, num_gpu) = (e.next_level, e.num_gpu);
        let cur_time = gpu_time(&e.plan.allocs, e.plan.end);
        let p = plan(
            self.pj(ctx, j),
            now,
            &tmp,
            self.slot,
            total,
            Some(next_level),
        );
        let s = ctx.job(j).scaling.as_ref().expect("checked in prepare");
        let mut m = match self.greedy {
            Greedy::Artifact => {
                (gpu_time(&p.allocs, p.end) - cur_time) / (next_level - num_gpu) as f64
            }
            Greedy::Throughput => {
                let before = if num_gpu == 0 { 0.0 } else { tput(s, num_gpu) };
                (tput(s, next_level) - before) / (next_level - num_gpu) as f64
            }
        };
        if num_gpu == 0 {
            m = f64::INFINITY;
        }
        let e = self.jobs[j as usize].as_mut().expect("runnable job");
        e.marginal = m;
        e.next = Some(p);
    }

    fn sort_by_marginal(&mut self) {
        let jobs = &self.jobs;
        self.runnable.sort_by(|a, b| {
            let (x, y) = (
                jobs[*a as usize]
                    .as_ref()
                    .map_or(f64::NEG_INFINITY, |e| e.marginal),
                jobs[*b as usize]
                    .as_ref()
                    .map_or(f64::NEG_INFINITY, |e| e.marginal),
            );
            y.total_cmp(&x)
        });
    }

    /// `allocate_free_gpus`: hands GPUs no plan uses now to the job with the best
    /// marginal score, one level at a time, re-scoring after each.
    fn allocate_free(&mut self, ctx: &Ctx<'_>, now: i64) {
        let total = ctx.total_gpus() as u32;
        let mut used = 0u32;
        for &j in &self.runnable {
            let s = ctx.job(j).scaling.as_ref().expect("checked in prepare");
            let e = self.jobs[j as usize].as_mut().expect("runnable job");
            e.next_level = s.next_level(e.num_gpu);
            used += e.num_gpu;
        }
        let mut allocatable = total.saturating_sub(used);
        if allocatable == 0 {
            return;
        }
        let list = self.runnable.clone();
        for &j in &list {
            self.marginal(ctx, j, allocatable, now);
        }
        self.sort_by_marginal();
        let mut allocated = true;
        while allocatable > 0 && allocated {
            allocated = false;
            for k in 0..self.runnable.len() {
                let j = self.runnable[k];
                let s = ctx.job(j).scaling.as_ref().expect("checked in prepare");
                let e = self.jobs[j as usize].as_mut().expect("runnable job");
                if e.next_level - e.num_gpu > allocatable || e.next_level == e.num_gpu {
                    continue;
                }
                let Some(p) = e.next.take() else { continue };
                allocatable -= e.next_level - e.num_gpu;
                self.timeline = p.timeline.clone();
                e.num_gpu = e.next_level;
                e.plan = p;
                e.next_level = s.next_level(e.num_gpu);
                allocated = true;
                break;
            }
            let list = self.runnable.clone();
            for &j in &list {
                let e = self.jobs[j as usize].as_ref().expect("runnable job");
                if e.next_level > e.num_gpu {
                    self.marginal(ctx, j, allocatable, now);
                }
            }
            self.sort_by_marginal();
        }
    }

    /// `estimate_overhead`: seconds a running job loses this round.
    fn overhead(&self, total: u32, gpus: u32, restart: bool, cached: bool) -> i64 {
        let mut o = if total >= 256 { 7.0 } else { 2.0 };
        if cached {
            return o as i64 * 1000;
        }
        if restart {
            o += 27.0;
            if total >= 256 {
                o += 20.0;
            }
        }
        o += ((gpus as f64).log2() + 1.0) * 2.0;
        (o * 1000.0).round() as i64
    }
}

impl Policy for ElasticFlow {
    fn name(&self) -> &'static str {
        self.name
    }

    fn prepare(&mut self, w: &crate::World) -> Result<(), String> {
        let g = w.cluster.nodes.first().map_or(0, |n| n.gpus);
        if g == 0 || !g.is_power_of_two() || w.cluster.nodes.iter().any(|n| n.gpus != g) {
            return Err("buddy placement needs nodes with equal power-of-two GPU counts".into());
        }
        if let Some(j) = w.jobs.iter().find(|j| j.scaling.is_none()) {
            return Err(format!(
                "job {} has no throughput table (ElasticFlow needs model, batch_size and iterations, \
                 as ElasticFlow's traces give them)",
                j.id
            ));
        }
        self.node_gpus = g;
        self.nodes = w.cluster.nodes.len();
        self.jobs = vec![None; w.jobs.len()];
        Ok(())
    }

    fn on_submit(&mut self, ctx: &Ctx<'_>, j: JobIdx) {
        if self.jobs.len() <= j as usize {
            self.jobs.resize(j as usize + 1, None);
        }
        let job = ctx.job(j);
        let ddl = job.deadline.map_or(NO_DEADLINE, |d| (d / 1000) as i64);
        self.jobs[j as usize] = Some(EfJob {
            ddl,
            best_effort: job.deadline.is_none(),
            plan: Plan::default(),
            num_gpu: 0,
            next_level: 0,
            marginal: 0.0,
            next: None,
        });
        self.arrived.push(j);
    }

    fn on_finish(&mut self, _ctx: &Ctx<'_>, j: JobIdx) {
        self.runnable.retain(|&x| x != j);
        self.jobs[j as usize] = None;
    }

    fn schedule(&mut self, ctx: &mut Ctx<'_>) {
        let now_ms = ctx.now();
        if now_ms < self.next_pass {
            ctx.wake_at(self.next_pass);
            return;
        }
        let now = (now_ms / 1000) as i64;
        let total = ctx.total_gpus() as u32;
        self.runnable
            .retain(|&j| matches!(ctx.status(j), Status::Running | Status::Pending));

        // Admission control: the newcomers together, as the artifact batches a slot's
        // arrivals into one event.
        let arrived = std::mem::take(&mut self.arrived);
        let mut replan = true;
        if !arrived.is_empty() {
            if self.admission {
                let mut all: Vec<JobIdx> = self.runnable.iter().chain(&arrived).copied().collect();
                if self.estimate_all(ctx, &mut all, now) {
                    self.runnable.extend(&arrived);
                    replan = false;
                } else {
                    for &j in &arrived {
                        if self.jobs[j as usize]
                            .as_ref()
                            .is_some_and(|e| e.best_effort)
                        {
                            self.runnable.push(j);
                        } else {
                            ctx.decline(j, "declined: its deadline cannot be met without breaking an admitted job's");
                            self.jobs[j as usize] = None;
                        }
                    }
                }
            } else {
                self.runnable.extend(&arrived);
            }
        }
        if replan {
            let mut list = std::mem::take(&mut self.runnable);
            self.estimate_all(ctx, &mut list, now);
            self.runnable = list;
        }
        // The artifact now sorts the runnable jobs by deadline and plans them once more
        // on a fresh timeline; that repeats the estimate just made (the same jobs in
        // the same stable order from the same state), so its plans stand.
        let jobs = &self.jobs;
        self.runnable
            .sort_by_key(|&j| jobs[j as usize].as_ref().map_or(NO_DEADLINE, |e| e.ddl));
        for &j in &self.runnable {
            let e = self.jobs[j as usize].as_mut().expect("runnable job");
            e.num_gpu = e.plan.allocs.get(&now).copied().unwrap_or(0);
        }
        self.allocate_free(ctx, now);

        // Place everything from scratch, largest first (buddy).
        let jobs = &self.jobs;
        self.runnable.sort_by_key(|&j| {
            std::cmp::Reverse(jobs[j as usize].as_ref().map_or(0, |e| e.num_gpu))
        });
        let mut want: Vec<(JobIdx, u32)> = self
            .runnable
            .iter()
            .map(|&j| (j, self.jobs[j as usize].as_ref().map_or(0, |e| e.num_gpu)))
            .collect();
        // A plan the artifact's timeline over-promised cannot exceed the cluster here.
        let mut sum: u32 = 0;
        for w in want.iter_mut() {
            if sum + w.1 > total {
                w.1 = 0;
            }
            sum += w.1;
        }
        let placed = buddy(self.node_gpus, self.nodes, &want).unwrap_or_default();
        ctx.reassign(&placed);

        // The per-round rescaling overhead every running job pays.
        if self.overhead {
            let restart =
                self.schedule_count > 0 && self.schedule_count.is_multiple_of(self.slot as u64);
            self.schedule_count += 1;
            if restart {
                self.cache.clear();
            }
            for (j, p) in &placed {
                if p.gpus() == 0 || ctx.status(*j) != Status::Running {
                    continue;
                }
                let key: Vec<(u32, u64)> = p.parts.clone();
                let cached = !self.cache.insert(key);
                let o = self.overhead(total, p.gpus(), restart, cached);
                ctx.stall(*j, o as Time);
            }
        }

        // Next decision: a slot from now, or when a plan next changes if later.
        self.next_pass = now_ms + self.slot as Time * 1000;
        let first_change = self
            .runnable
            .iter()
            .filter_map(|&j| {
                self.jobs[j as usize]
                    .as_ref()
                    .and_then(|e| e.plan.allocs.range(now + 1..).next().map(|(&t, _)| t))
            })
            .min();
        if let Some(t) = first_change {
            ctx.wake_at(((t.max(0)) as Time * 1000).max(self.next_pass));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn linear(max: u32) -> Scaling {
        // 1 iteration/s per GPU: easy arithmetic.
        Scaling::new(vec![(1, 1.0), (2, 2.0), (4, 4.0), (8, 8.0)], max).unwrap()
    }

    #[test]
    fn align_rounds_up_to_slots_from_start() {
        assert_eq!(align(0, 0, 60), 0);
        assert_eq!(align(0, 1, 60), 60);
        assert_eq!(align(10, 70, 60), 70);
        assert_eq!(align(10, 71, 60), 130);
        assert_eq!(
            align(100, 70, 60),
            100,
            "a past deadline aligns to the slot holding it"
        );
        assert_eq!(align(100, 30, 60), 40);
    }

    #[test]
    fn mss_starts_as_late_as_the_change_points_allow_at_one_gpu() {
        // 600 iterations, deadline 1200 s, 4 GPUs free until 600 and 8 after: one GPU
        // over [600, 1200) is enough, so the plan idles until 600.
        let s = linear(8);
        let tl = Timeline::from([(0, 4), (600, 8)]);
        let p = plan(
            PlanJob {
                scaling: &s,
                iters: 600.0,
                ddl: 1200,
            },
            0,
            &tl,
            60,
            8,
            None,
        );
        assert!(p.meets);
        assert_eq!(p.allocs, BTreeMap::from([(0, 0), (600, 1)]));
        assert_eq!((p.end, p.real_end), (1200, 1200));
        assert_eq!(p.timeline, BTreeMap::from([(0, 4), (600, 7), (1200, 8)]));
        // With no change point before the deadline the walk stops at the start: the
        // artifact's granularity is its timeline's points, not slots.
        let p = plan(
            PlanJob {
                scaling: &s,
                iters: 600.0,
                ddl: 1200,
            },
            0,
            &Timeline::from([(0, 8)]),
            60,
            8,
            None,
        );
        assert_eq!(p.allocs, BTreeMap::from([(0, 1)]));
        assert_eq!((p.end, p.real_end), (600, 600));
        assert_eq!(p.timeline, BTreeMap::from([(0, 7), (600, 8)]));
    }

    #[test]
    fn mss_takes_the_smallest_level_that_meets_the_deadline() {
        // 1500 iterations by 600 s: 1 GPU gives 600, 2 give 1200, 4 give 2400. The
        // backward walk at 4 GPUs reaches 1500 only from the start, where the forward
        // pass runs at 4 until the work is done.
        let s = linear(8);
        let tl = Timeline::from([(0, 8)]);
        let p = plan(
            PlanJob {
                scaling: &s,
                iters: 1500.0,
                ddl: 600,
            },
            0,
            &tl,
            60,
            8,
            None,
        );
        assert!(p.meets);
        assert_eq!(p.allocs, BTreeMap::from([(0, 4)]));
        assert_eq!(p.real_end, 375);
        assert_eq!(p.end, 420, "end aligned up to the slot");
        assert_eq!(p.timeline, BTreeMap::from([(0, 4), (420, 8)]));
    }

    #[test]
    fn mss_plans_around_promised_gpus() {
        // 6 of 8 GPUs are promised until 300 s; 1200 iterations by 600 s. At 1 GPU the
        // job falls short (600); at 2 GPUs the backward walk covers [300, 600) at 2
        // (600 it) and [0, 300) at 2 (the 2 free): 1200, reached at 0.
        let s = linear(8);
        let tl = Timeline::from([(0, 2), (300, 8)]);
        let p = plan(
            PlanJob {
                scaling: &s,
                iters: 1200.0,
                ddl: 600,
            },
            0,
            &tl,
            60,
            8,
            None,
        );
        assert!(p.meets);
        assert_eq!(p.allocs, BTreeMap::from([(0, 2)]));
        assert_eq!(p.real_end, 600);
        assert_eq!(p.timeline, BTreeMap::from([(0, 0), (300, 6), (600, 8)]));
    }

    #[test]
    fn a_missed_deadline_runs_at_the_largest_level_then_the_whole_cluster() {
        // 10,000 iterations by 100 s on 8 GPUs with a cap of 8: impossible.
        let s = linear(8);
        let tl = Timeline::from([(0, 8)]);
        let p = plan(
            PlanJob {
                scaling: &s,
                iters: 10_000.0,
                ddl: 120,
            },
            0,
            &tl,
            60,
            8,
            None,
        );
        assert!(!p.meets);
        // 8 GPUs until the deadline (960 it), then 8 GPUs until done: 10,000 / 8 = 1250 s.
        assert_eq!(p.real_end, 1250);
        assert_eq!(p.end, 1260);
        assert_eq!(*p.allocs.values().next_back().unwrap(), 8);
    }

    #[test]
    fn assigned_levels_hold_until_the_timeline_changes() {
        // Give the job 4 GPUs now: it finishes 1200 iterations in 300 s, before the next
        // change point at 600.
        let s = linear(8);
        let tl = Timeline::from([(0, 8), (600, 8)]);
        let p = plan(
            PlanJob {
                scaling: &s,
                iters: 1200.0,
                ddl: 1200,
            },
            0,
            &tl,
            60,
            8,
            Some(4),
        );
        assert!(p.meets);
        assert_eq!(p.allocs, BTreeMap::from([(0, 4)]));
        assert_eq!((p.end, p.real_end), (300, 300));
        assert_eq!(p.timeline, BTreeMap::from([(0, 4), (300, 8)]));
    }

    #[test]
    fn buddy_fits_any_feasible_power_of_two_set() {
        let jobs = [(0, 2), (1, 8), (2, 1), (3, 4), (4, 1)];
        let out = buddy(8, 2, &jobs).unwrap();
        let mut state = [0u64; 2];
        for (j, p) in &out {
            let want = jobs.iter().find(|x| x.0 == *j).unwrap().1;
            assert_eq!(p.gpus(), want);
            for &(n, m) in &p.parts {
                assert_eq!(state[n as usize] & m, 0, "GPUs overlap");
                state[n as usize] |= m;
            }
        }
        assert!(buddy(8, 2, &[(0, 8), (1, 8), (2, 1)]).is_none());
    }

    #[test]
    fn gpu_time_sums_each_stretch() {
        let a = BTreeMap::from([(0, 2), (100, 4)]);
        assert_eq!(gpu_time(&a, 150), 400.0);
    }
}
