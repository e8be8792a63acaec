//! ElasticFlow's minimum-satisfactory-share planner (`ef_sim_allocation`) over a
//! timeline of future free GPUs.
//!
//! The greedy pass scores every job by re-planning it after each GPU level it hands
//! out, so on a 1,024-GPU cluster one decision can plan thousands of times. Timelines
//! are therefore sorted vectors ([`Steps`]) that the planner fills in place
//! ([`plan_into`]): copying one is a `memcpy`, and a planned job allocates nothing.

use super::timeline::Steps;
use apiary_model::Scaling;

/// A job's committed plan: GPUs from each change point on, until `end`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// GPUs from each change point on, consecutive equal values merged.
    pub allocs: Steps,
    /// Planned end, aligned up to a slot.
    pub end: i64,
    /// Planned end to the second.
    pub real_end: i64,
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
#[inline]
pub fn align(start: i64, t: i64, slot: i64) -> i64 {
    debug_assert!(slot > 0);
    // One division (the greedy score aligns several times per plan): the quotient
    // rounded towards zero, moved up unless `t` is on a boundary.
    let d = t - start;
    let q = d / slot;
    start + if d % slot > 0 { q + 1 } else { q } * slot
}

fn tput(s: &Scaling, n: u32) -> f64 {
    // The planner only picks counts from the table (`next_level`, `floor_level`) and
    // the readers check the trace's own count, so this fallback never decides a plan.
    s.tput(n).unwrap_or(s.levels[0].1)
}

/// The level a stretch with `free` GPUs gives a job asking for level `cap`:
/// `min(cap, floor_level(free))`, without the table walk when `free` covers `cap`.
#[inline]
fn fit(s: &Scaling, cap: u32, free: u32) -> u32 {
    if free >= cap {
        cap
    } else {
        cap.min(s.floor_level(free))
    }
}

/// [`tput`] remembering the last count asked for: walks ask for the same one
/// stretch after stretch.
struct Tput<'a> {
    s: &'a Scaling,
    n: u32,
    v: f64,
}

impl<'a> Tput<'a> {
    fn new(s: &'a Scaling) -> Self {
        Tput {
            s,
            n: u32::MAX,
            v: 0.0,
        }
    }

    #[inline]
    fn of(&mut self, n: u32) -> f64 {
        if n != self.n {
            self.n = n;
            self.v = tput(self.s, n);
        }
        self.v
    }
}

fn ceil_s(x: f64) -> i64 {
    if x.is_finite() {
        x.ceil() as i64
    } else {
        i64::MAX / 4
    }
}

/// [`plan_into`] with fresh buffers: the plan and the timeline with it taken out.
pub fn plan(
    job: PlanJob<'_>,
    start: i64,
    fut: &Steps,
    slot: i64,
    total: u32,
    assign: Option<u32>,
) -> (Plan, Steps) {
    let mut out = Plan::default();
    let mut timeline = Steps::default();
    plan_into(
        job,
        start,
        fut,
        slot,
        total,
        assign,
        &mut out,
        &mut timeline,
        &mut Vec::new(),
    );
    (out, timeline)
}

/// `ef_sim_allocation`: plans `job` from `start` on timeline `fut`, with the minimum
/// satisfactory share, or (with `assign`) at that many GPUs for the first stretch of
/// the timeline and the minimum share after it. `total` is the cluster's GPU count.
/// Writes the plan to `out` and `fut` less the plan to `new`, reusing their buffers
/// (and `spare`'s).
#[allow(clippy::too_many_arguments)]
pub fn plan_into(
    job: PlanJob<'_>,
    start: i64,
    fut: &Steps,
    slot: i64,
    total: u32,
    assign: Option<u32>,
    out: &mut Plan,
    new: &mut Steps,
    spare: &mut Vec<(i64, u32)>,
) {
    let s = job.scaling;
    let ddl = job.ddl;
    let mut iter_left = job.iters;
    let mut event_time = start;
    let allocs = &mut out.allocs;
    allocs.clear();
    allocs.0.push((start, 0));
    new.0.clone_from(&fut.0);
    let aligned_ddl = align(start, ddl, slot);
    let mut last_event_gpu = total;
    if !new.contains(aligned_ddl) && aligned_ddl >= start {
        last_event_gpu = new.value_before(aligned_ddl).unwrap_or(total);
        new.insert(aligned_ddl, last_event_gpu);
    }
    let mut finish = |allocs: &mut Steps, new: &mut Steps, end: i64, real_end: i64| {
        allocs.merge();
        new.merge();
        out.end = end;
        out.real_end = real_end;
        out.meets = real_end <= ddl;
    };

    if let Some(quota) = assign {
        // The first stretch: the value in force at the start, up to the next point.
        let first_after = fut.lower(event_time + 1);
        let available = match first_after.checked_sub(1) {
            Some(i) => fut.0[i].1,
            None => total,
        };
        let before = new.lower(event_time);
        new.0.drain(..before);
        let future_event_time = fut.0.get(first_after).map_or(aligned_ddl, |p| p.0);
        allocs.insert(event_time, quota);
        let real_end = ceil_s(event_time as f64 + iter_left / tput(s, quota));
        let end = align(start, real_end, slot);
        if future_event_time >= end && ddl >= real_end {
            for &(t, _) in fut.range(event_time, end) {
                last_event_gpu = new.get(t).unwrap_or(last_event_gpu);
                new.sub(t, quota);
            }
            if event_time != end {
                new.insert(event_time, available.saturating_sub(quota));
            }
            if !fut.contains(end) {
                new.insert(end, last_event_gpu);
            }
            finish(allocs, new, end, real_end);
            return;
        }
        let mut duration = future_event_time - event_time;
        if future_event_time == aligned_ddl {
            duration = ddl - event_time;
        }
        iter_left -= duration as f64 * tput(s, quota);
        new.sub(event_time, quota);
        if iter_left <= 0.0 {
            // The assigned stretch alone finishes the job, but past its deadline.
            new.insert_absent(end, last_event_gpu);
            finish(allocs, new, end, real_end);
            return;
        }
        event_time = future_event_time;
        allocs.insert(event_time, 0);
    }

    let mut quota = s.next_level(0);
    let mut last_q = 0u32;
    if quota <= total && quota <= s.max_gpus && quota > 0 {
        // The artifact zero-fills the plan at every point before the deadline.
        let hi = new.lower(aligned_ddl);
        allocs.fill_zeros(&new.0[..hi], spare);
    }
    while quota <= total && quota <= s.max_gpus && quota > 0 {
        let mut period_end = aligned_ddl;
        let mut tmp = 0.0;
        let mut found = None;
        let mut speed = Tput::new(s);
        for &(p, free) in new
            .range(event_time, aligned_ddl.max(event_time))
            .iter()
            .rev()
        {
            let a = fit(s, quota, free);
            if a == 0 {
                period_end = p;
                continue;
            }
            let mut dur = period_end - p;
            if period_end == aligned_ddl {
                dur = ddl - p;
            }
            tmp += dur as f64 * speed.of(a);
            if tmp >= iter_left {
                found = Some(p);
                break;
            }
            period_end = p;
        }
        if let Some(p) = found {
            let mut walk = Walk {
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
            let (lat, ends) = walk.run(allocs, new);
            let (end, real_end) = match ends {
                Some(e) => e,
                None => {
                    let (lt, la) = lat.unwrap_or((event_time, quota));
                    let la = if la == 0 { quota } else { la };
                    allocs.insert(lt, la);
                    new.sub(lt, la);
                    let real_left = ceil_s(walk.iter_left.max(0.0) / tput(s, la));
                    (lt + align(0, real_left, slot), lt + real_left)
                }
            };
            let last_event_gpu = fut.range(event_time, end).last().map_or(total, |p| p.1);
            if !fut.contains(end) {
                new.insert(end, last_event_gpu);
            }
            finish(allocs, new, end, real_end);
            return;
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
    walk.run(allocs, new);
    iter_left = walk.iter_left;
    // …then whatever fits after it…
    let mut lat = aligned_ddl.max(event_time);
    let mut k = new.lower(aligned_ddl + 1);
    while k < new.0.len() {
        let t = new.0[k].0;
        k += 1;
        let free = new.get(lat).unwrap_or(total);
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
            let (lo, hi) = (new.lower(aligned_ddl), new.lower(end));
            for i in lo..hi.max(lo) {
                let key = new.0[i].0;
                if let Some(v) = fut.get(key) {
                    last_event_gpu = v;
                }
                if key >= lat {
                    new.0[i].1 = new.0[i].1.saturating_sub(q);
                }
            }
            if lat != end {
                new.insert(lat, last_event_gpu.saturating_sub(q));
            }
            if !fut.contains(end) {
                new.insert(end, last_event_gpu);
            }
            finish(allocs, new, end, real_end);
            return;
        }
        iter_left -= its;
        let (lo, hi) = (new.lower(lat), new.lower(t));
        for p in &mut new.0[lo..hi.max(lo)] {
            p.1 = p.1.saturating_sub(q);
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
    finish(allocs, new, end, real_end);
}

/// What the artifact's greedy score reads of a plan: its GPU-seconds as [`gpu_time`]
/// counts them, and its end.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Scored {
    /// [`gpu_time`] of the plan up to its aligned end.
    pub gpu_time: f64,
    /// Planned end, aligned up to a slot.
    pub end: i64,
    /// Whether the plan meets the deadline.
    pub meets: bool,
    /// The stretch of the timeline the score read past its first point after the
    /// start, `[from, to]`: the free GPUs there (and so which points are there, and
    /// at `from` whether it stays one) decided it. `from` is that first point when
    /// the score read nothing else (`to` equal to it).
    pub reads: (i64, i64),
}

/// [`plan_into`] with `assign` = `quota`, reduced to what the greedy score reads, on the
/// common paths: the assigned stretch finishing the job, or a minimum share found
/// before the deadline. It reads `fut` without copying it (the timeline `plan_into`
/// builds is not needed to score) and only up to its first point after the aligned
/// deadline, so a caller may pass a timeline cut there. `None` where the plan takes
/// another path (no level meets the deadline, a deadline already past): plan it in
/// full then. A test checks it against [`plan_into`] and [`gpu_time`].
pub fn score_assigned(
    job: PlanJob<'_>,
    start: i64,
    fut: &Steps,
    slot: i64,
    total: u32,
    quota: u32,
) -> Option<Scored> {
    let (s, ddl, pts) = (job.scaling, job.ddl, fut.points());
    let aligned_ddl = align(start, ddl, slot);
    if aligned_ddl < start || quota == 0 {
        return None;
    }
    let first_after = fut.lower(start + 1);
    let fet = pts.get(first_after).map_or(aligned_ddl, |p| p.0);
    let tq = tput(s, quota);
    let real_end = ceil_s(start as f64 + job.iters / tq);
    let end = align(start, real_end, slot);
    let assigned_only = Scored {
        gpu_time: quota as f64 * (end - start) as f64,
        end,
        meets: real_end <= ddl,
        reads: (fet, fet),
    };
    if fet >= end && ddl >= real_end {
        return Some(assigned_only);
    }
    let duration = if fet == aligned_ddl {
        ddl - start
    } else {
        fet - start
    };
    let mut iter_left = job.iters - duration as f64 * tq;
    if iter_left <= 0.0 {
        return Some(assigned_only);
    }
    // The share's stretches: the points in [fet, aligned_ddl), then the deadline's
    // (`plan_into` adds it with the value before it when it is not a point).
    let hi = fut.lower(aligned_ddl);
    if hi <= first_after {
        return None;
    }
    let window = &pts[first_after..hi];
    let at_ddl = fut
        .get(aligned_ddl)
        .or_else(|| fut.value_before(aligned_ddl))
        .unwrap_or(total);
    let mut q = s.next_level(0);
    let mut last_q = 0u32;
    while q <= total && q <= s.max_gpus && q > 0 {
        let mut period_end = aligned_ddl;
        let mut tmp = 0.0;
        let mut found = None;
        let mut speed = Tput::new(s);
        for (k, &(p, free)) in window.iter().enumerate().rev() {
            let a = fit(s, q, free);
            if a == 0 {
                period_end = p;
                continue;
            }
            let dur = if period_end == aligned_ddl {
                ddl - p
            } else {
                period_end - p
            };
            tmp += dur as f64 * speed.of(a);
            if tmp >= iter_left {
                found = Some(k);
                break;
            }
            period_end = p;
        }
        if let Some(k) = found {
            // `Walk::run` over the same points, summing what `gpu_time` will: each
            // stretch of the plan holds until the next point (every point before the
            // deadline is one of the plan's, zero-filled), the last to the end.
            let share_from = window[k].0;
            let level = |t: i64, free: u32| fit(s, if t >= share_from { q } else { last_q }, free);
            let mut gt = quota as f64 * (fet - start) as f64;
            let mut speed = Tput::new(s);
            // Before the share a job found at the first level gets nothing (level 0):
            // the walk may start at the share.
            let from = if last_q == 0 { k } else { 0 };
            let reads = (window[from].0, aligned_ddl);
            let (mut lt, mut la) = (window[from].0, level(window[from].0, window[from].1));
            let rest = window[from + 1..]
                .iter()
                .copied()
                .chain(std::iter::once((aligned_ddl, at_ddl)));
            for (t, free) in rest {
                if la > 0 {
                    let dur = if t == aligned_ddl { ddl - lt } else { t - lt };
                    let its = dur as f64 * speed.of(la);
                    if lt < share_from || its < iter_left {
                        iter_left -= its;
                        gt += la as f64 * (t - lt) as f64;
                    } else {
                        let real_left = ceil_s(iter_left / speed.of(la));
                        let end = lt + align(0, real_left, slot);
                        let next = if t < aligned_ddl { t } else { end };
                        gt += la as f64 * (next - lt) as f64;
                        return Some(Scored {
                            gpu_time: gt,
                            end,
                            meets: lt + real_left <= ddl,
                            reads,
                        });
                    }
                }
                (lt, la) = (t, level(t, free));
            }
            // The deadline reached with iterations left: its level (the share's if
            // none is free) until they are done.
            let la = if la == 0 { q } else { la };
            let real_left = ceil_s(iter_left.max(0.0) / tput(s, la));
            let end = lt + align(0, real_left, slot);
            gt += la as f64 * (end - lt) as f64;
            return Some(Scored {
                gpu_time: gt,
                end,
                meets: lt + real_left <= ddl,
                reads,
            });
        }
        last_q = q;
        q = s.next_level(q);
        if q == last_q {
            break;
        }
    }
    None
}

/// `edf_sim_allocation`: EDF's plan for `job` from `start` on timeline `fut`, without
/// elasticity. The job asks for its largest level within the cluster (the artifact's
/// `min(max_gpu, cluster)`, where its baselines' `max_gpu` is
/// [`Scaling::baseline_max`], not ElasticFlow's cap); going forward over the timeline's points it takes that
/// many wherever they are free, else the largest level that is free, else nothing,
/// until its iterations are done; after the last point the cluster is taken to be
/// free. Writes the plan to `out` (its `real_end` the second the job ends, as the
/// artifact's EDF keeps it) and `fut` less the plan to `new`.
pub fn edf_plan_into(
    job: PlanJob<'_>,
    start: i64,
    fut: &Steps,
    slot: i64,
    total: u32,
    out: &mut Plan,
    new: &mut Steps,
) {
    let s = job.scaling;
    let base = s.floor_measured(s.baseline_max().min(total));
    let mut iter_left = job.iters;
    let mut event_time = start;
    let allocs = &mut out.allocs;
    allocs.clear();
    allocs.0.push((start, 0));
    new.0.clone_from(&fut.0);
    let mut available = fut.value_at(start).unwrap_or(total);
    let mut finish = |allocs: &mut Steps, new: &mut Steps, real_end: i64| {
        allocs.merge();
        new.merge();
        out.end = align(start, real_end, slot);
        out.real_end = real_end;
        out.meets = real_end <= job.ddl;
    };
    let before = new.lower(event_time);
    new.0.drain(..before);
    for k in fut.lower(event_time)..fut.len() {
        let fet = fut.0[k].0;
        if fet == event_time {
            available = fut.0[k].1;
            continue;
        }
        let duration = fet - event_time;
        if available > 0 && base > 0 {
            // The base level where it is free, else the largest level that is.
            let a = if available >= base {
                base
            } else {
                s.floor_measured(available)
            };
            allocs.insert(event_time, a);
            let real_end = ceil_s(event_time as f64 + iter_left / tput(s, a));
            if fet >= real_end {
                let mut last_event_gpu = total;
                for &(t, _) in fut.range(event_time, real_end) {
                    last_event_gpu = new.get(t).unwrap_or(last_event_gpu);
                    new.sub(t, a);
                }
                // The artifact skips this when the job ends where it starts, and only
                // at the base level.
                if event_time != real_end || a != base {
                    new.insert(event_time, available.saturating_sub(a));
                }
                // It asks whether the exact end is a point, and adds the aligned one.
                if !fut.contains(real_end) {
                    new.insert(align(start, real_end, slot), last_event_gpu);
                }
                finish(allocs, new, real_end);
                return;
            }
            iter_left -= duration as f64 * tput(s, a);
            new.sub(event_time, a);
        } else if available == 0 {
            allocs.insert(event_time, 0);
        }
        available = new.get(fet).unwrap_or(total);
        event_time = fet;
    }
    // Past the last point every promise has ended: the base level on a free cluster.
    allocs.insert(event_time, base);
    let real_end = ceil_s(event_time as f64 + iter_left / tput(s, base.max(1)));
    new.insert(event_time, total.saturating_sub(base));
    new.insert(align(start, real_end, slot), total);
    finish(allocs, new, real_end);
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
    fn run(&mut self, allocs: &mut Steps, new: &mut Steps) -> (Option<Stretch>, Option<Ends>) {
        let (s, p, q, lq) = (self.s, self.share_from, self.q, self.lq);
        let level = |t: i64, free: u32| fit(s, if t >= p { q } else { lq }, free);
        let mut speed = Tput::new(s);
        let lo = new.lower(self.event_time);
        let hi = new.lower(self.aligned_ddl.max(self.event_time).saturating_add(1));
        // The last stretch reached, with its index in `new`; and where in `allocs` the
        // walk has got to (both only move forward, and the walk never inserts into
        // `new`, so the indices hold).
        let mut lat: Option<(i64, u32, usize)> = None;
        let mut at = 0usize;
        for i in lo..hi.max(lo) {
            let t = new.0[i].0;
            if t > self.aligned_ddl {
                break;
            }
            let Some((lt, la, li)) = lat else {
                lat = Some((t, level(t, new.0[i].1), i));
                continue;
            };
            while at < allocs.0.len() && allocs.0[at].0 < lt {
                at += 1;
            }
            match allocs.0.get_mut(at) {
                Some(x) if x.0 == lt => x.1 = la,
                _ => allocs.0.insert(at, (lt, la)),
            }
            new.0[li].1 = new.0[li].1.saturating_sub(la);
            if la == 0 {
                lat = Some((t, level(t, new.0[i].1), i));
                continue;
            }
            let mut dur = t - lt;
            if t == self.aligned_ddl {
                dur = self.ddl - lt;
            }
            let its = dur as f64 * speed.of(la);
            if lt < p || its < self.iter_left {
                self.iter_left -= its;
            } else {
                let real_left = ceil_s(self.iter_left / speed.of(la));
                return (
                    Some((lt, la)),
                    Some((lt + align(0, real_left, self.slot), lt + real_left)),
                );
            }
            lat = Some((t, level(t, new.0[i].1), i));
        }
        (lat.map(|(t, a, _)| (t, a)), None)
    }
}

/// `get_allocation_time`: GPU-seconds of a plan up to `end`.
pub fn gpu_time(allocs: &Steps, end: i64) -> f64 {
    let mut total = 0.0;
    let mut it = allocs.0.iter().peekable();
    while let Some(&(t, n)) = it.next() {
        let next = it.peek().map_or(end, |p| p.0);
        total += n as f64 * (next - t) as f64;
    }
    total
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
        let tl = Steps::from([(0, 4), (600, 8)]);
        let (p, tl_out) = plan(
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
        assert_eq!(p.allocs, Steps::from([(0, 0), (600, 1)]));
        assert_eq!((p.end, p.real_end), (1200, 1200));
        assert_eq!(tl_out, Steps::from([(0, 4), (600, 7), (1200, 8)]));
        // With no change point before the deadline the walk stops at the start: the
        // artifact's granularity is its timeline's points, not slots.
        let (p, tl_out) = plan(
            PlanJob {
                scaling: &s,
                iters: 600.0,
                ddl: 1200,
            },
            0,
            &Steps::from([(0, 8)]),
            60,
            8,
            None,
        );
        assert_eq!(p.allocs, Steps::from([(0, 1)]));
        assert_eq!((p.end, p.real_end), (600, 600));
        assert_eq!(tl_out, Steps::from([(0, 7), (600, 8)]));
    }

    #[test]
    fn mss_takes_the_smallest_level_that_meets_the_deadline() {
        // 1500 iterations by 600 s: 1 GPU gives 600, 2 give 1200, 4 give 2400. The
        // backward walk at 4 GPUs reaches 1500 only from the start, where the forward
        // pass runs at 4 until the work is done.
        let s = linear(8);
        let tl = Steps::from([(0, 8)]);
        let (p, tl_out) = plan(
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
        assert_eq!(p.allocs, Steps::from([(0, 4)]));
        assert_eq!(p.real_end, 375);
        assert_eq!(p.end, 420, "end aligned up to the slot");
        assert_eq!(tl_out, Steps::from([(0, 4), (420, 8)]));
    }

    #[test]
    fn mss_plans_around_promised_gpus() {
        // 6 of 8 GPUs are promised until 300 s; 1200 iterations by 600 s. At 1 GPU the
        // job falls short (600); at 2 GPUs the backward walk covers [300, 600) at 2
        // (600 it) and [0, 300) at 2 (the 2 free): 1200, reached at 0.
        let s = linear(8);
        let tl = Steps::from([(0, 2), (300, 8)]);
        let (p, tl_out) = plan(
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
        assert_eq!(p.allocs, Steps::from([(0, 2)]));
        assert_eq!(p.real_end, 600);
        assert_eq!(tl_out, Steps::from([(0, 0), (300, 6), (600, 8)]));
    }

    #[test]
    fn a_missed_deadline_runs_at_the_largest_level_then_the_whole_cluster() {
        // 10,000 iterations by 100 s on 8 GPUs with a cap of 8: impossible.
        let s = linear(8);
        let tl = Steps::from([(0, 8)]);
        let (p, tl_out) = plan(
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
        assert_eq!(p.allocs.points().last().unwrap().1, 8);
        assert_eq!(tl_out, Steps::from([(0, 0), (1260, 8)]));
    }

    #[test]
    fn assigned_levels_hold_until_the_timeline_changes() {
        // Give the job 4 GPUs now: it finishes 1200 iterations in 300 s, before the next
        // change point at 600.
        let s = linear(8);
        let tl = Steps::from([(0, 8), (600, 8)]);
        let (p, tl_out) = plan(
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
        assert_eq!(p.allocs, Steps::from([(0, 4)]));
        assert_eq!((p.end, p.real_end), (300, 300));
        assert_eq!(tl_out, Steps::from([(0, 4), (300, 8)]));
    }

    #[test]
    fn gpu_time_sums_each_stretch() {
        let a = Steps::from([(0, 2), (100, 4)]);
        assert_eq!(gpu_time(&a, 150), 400.0);
    }

    fn edf(s: &Scaling, iters: f64, ddl: i64, fut: &Steps, total: u32) -> (Plan, Steps) {
        let (mut out, mut tl) = (Plan::default(), Steps::default());
        let job = PlanJob {
            scaling: s,
            iters,
            ddl,
        };
        edf_plan_into(job, 0, fut, 60, total, &mut out, &mut tl);
        (out, tl)
    }

    #[test]
    fn edf_takes_the_largest_level_on_a_free_cluster() {
        // 800 iterations at 8 GPUs (8/s): 100 s, the plan's end aligned to 120.
        let (p, tl) = edf(&linear(8), 800.0, 1000, &Steps::from([(0, 8)]), 8);
        assert_eq!(p.allocs, Steps::from([(0, 8)]));
        assert_eq!((p.real_end, p.end, p.meets), (100, 120, true));
        assert_eq!(tl, Steps::from([(0, 0), (120, 8)]));
    }

    #[test]
    fn edf_takes_the_largest_free_level_until_its_own_is_free() {
        // 2 GPUs free until 300 s: 600 iterations there, the other 600 at 8 GPUs from
        // 300 s: done at 375 s, after a 300 s deadline.
        let (p, tl) = edf(&linear(8), 1200.0, 300, &Steps::from([(0, 2), (300, 8)]), 8);
        assert_eq!(p.allocs, Steps::from([(0, 2), (300, 8)]));
        assert_eq!((p.real_end, p.end, p.meets), (375, 420, false));
        assert_eq!(tl, Steps::from([(0, 0), (420, 8)]));
    }

    #[test]
    fn edf_caps_a_job_at_its_batch_not_elasticflows_cap() {
        // ElasticFlow would give this job at most 2 GPUs; EDF's cap is the largest
        // measured count within the batch (4 here), whatever `max_gpus` says.
        let s = linear(2).with_batch(4);
        assert_eq!(s.baseline_max(), 4);
        let (p, _) = edf(&s, 400.0, 1000, &Steps::from([(0, 8)]), 8);
        assert_eq!(p.allocs, Steps::from([(0, 4)]));
        assert_eq!(p.real_end, 100);
        assert_eq!(
            linear(2).baseline_max(),
            8,
            "no batch: the table's largest count"
        );
    }

    /// The greedy score's short path gives what the full plan gives, on random
    /// timelines, tables, deadlines and assigned levels, on the whole timeline and on
    /// one cut after the deadline's first later point.
    #[test]
    fn score_assigned_agrees_with_the_full_plan() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut r = |m: u64| {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            (x >> 33) % m
        };
        let (mut scored, mut declined) = (0, 0);
        for _ in 0..50_000 {
            let total = [4u32, 8, 16, 32][r(4) as usize];
            let mut levels = Vec::new();
            let mut speed = 0.5 + r(4) as f64;
            let mut g = 1;
            while g <= 16 {
                levels.push((g, speed));
                speed *= 1.0 + r(100) as f64 / 100.0;
                g *= 2;
            }
            let s = Scaling::new(levels, 1 << r(5)).unwrap();
            let slot = [1i64, 60, 240][r(3) as usize];
            let start = r(3) as i64 * 60;
            let mut fut = Steps::default();
            let mut t = start - r(2) as i64 * 60;
            for _ in 0..1 + r(10) {
                fut.insert(t, r(total as u64 + 1) as u32);
                t += 1 + r(8) as i64 * 60;
            }
            fut.merge();
            let job = PlanJob {
                scaling: &s,
                iters: 1.0 + r(5000) as f64,
                ddl: start + r(4000) as i64,
            };
            let quota = s.next_level(r(16) as u32);
            let (p, _) = plan(job, start, &fut, slot, total, Some(quota));
            let want = (gpu_time(&p.allocs, p.end), p.end, p.meets);
            let aligned = align(start, job.ddl, slot);
            let keep = fut.points().partition_point(|p| p.0 <= aligned) + 1;
            let cut = Steps(fut.points()[..keep.min(fut.len())].to_vec());
            match score_assigned(job, start, &fut, slot, total, quota) {
                Some(got) => {
                    scored += 1;
                    assert_eq!(
                        (got.gpu_time, got.end, got.meets),
                        want,
                        "{fut:?} {job:?} {quota} slot {slot} from {start}"
                    );
                    assert_eq!(
                        score_assigned(job, start, &cut, slot, total, quota),
                        Some(got)
                    );
                }
                None => declined += 1,
            }
        }
        // Both paths are exercised.
        assert!(
            scored > 25_000 && declined > 1000,
            "{scored} scored, {declined} declined"
        );
    }
}
