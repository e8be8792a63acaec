//! ElasticFlow (Gu et al., ASPLOS'23): deadline-aware elastic training with admission
//! control, as its artifact's simulator (`ElasticFlow/scheduler/scheduler.py`) runs it.
//!
//! Jobs state a deadline and an iteration count; the scheduler picks their GPU counts
//! from power-of-two levels of a measured throughput table ([`apiary_model::Scaling`]).
//! Time is cut into slots, and a timeline of future free GPUs ([`Steps`]) records
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

mod buddy;
mod events;
mod nodesets;
mod pass;
mod planner;
mod timeline;

pub use buddy::{InService, buddy, buddy_ordered};
use events::Events;
use nodesets::NodeSets;

pub use planner::{
    Plan, PlanJob, Scored, align, edf_plan_into, gpu_time, plan, plan_into, score_assigned,
};
pub use timeline::Steps;
use timeline::{Fold, differences, without};

use crate::PolicyError;
use crate::spec::{Capabilities, Capability, ParamSpec, PolicySpec};
use crate::{Ctx, JobIdx, ParamError, Params, Policy, Status};
use apiary_model::Time;
use std::collections::BTreeSet;
/// ElasticFlow's and EDF's: one loop, one set of mechanisms.
const CAPABILITIES: Capabilities = Capabilities::of(&[
    Capability::Elastic,
    Capability::Stalls,
    Capability::Holds,
    Capability::Declines,
    Capability::Durations,
    Capability::Scaling,
]);

/// `elasticflow`: its spec.
pub const ELASTICFLOW: PolicySpec = PolicySpec {
    name: "elasticflow",
    about: "ElasticFlow: deadline jobs admitted only if every promise still holds (minimum satisfactory shares), spare GPUs by marginal return, buddy placement",
    capabilities: CAPABILITIES,
    params: ELASTICFLOW_PARAMS,
    build: |p| Ok(Box::new(ElasticFlow::new(p)?)),
};

/// `edf`: its spec.
pub const EDF: PolicySpec = PolicySpec {
    name: "edf",
    about: "EDF, ElasticFlow's baseline: deadline order, each job at its largest GPU level; `admission=true` is its EDF + admission control",
    capabilities: CAPABILITIES,
    params: EDF_PARAMS,
    build: |p| Ok(Box::new(ElasticFlow::edf(p)?)),
};

const ELASTICFLOW_PARAMS: &[ParamSpec] =
    &[EF_ADMISSION, EF_SLOT, GREEDY, EF_OVERHEAD, HOLD, PROGRESS];
const EDF_PARAMS: &[ParamSpec] = &[EDF_ADMISSION, EDF_SLOT, EDF_OVERHEAD];

const EF_ADMISSION: ParamSpec = ParamSpec {
    key: "admission",
    default: "true",
    about: "decline arrivals whose deadline cannot be met (false: the artifact's `ef` ablation, admit all)",
};
const EF_SLOT: ParamSpec = ParamSpec {
    key: "slot",
    default: "60",
    about: "scheduling slot, seconds (the artifact's --scheduling_slot: 60 in the large simulations, 240 on the testbed)",
};
const GREEDY: ParamSpec = ParamSpec {
    key: "greedy",
    default: "artifact",
    about: "leftover GPUs by: artifact (change in planned GPU-seconds per added GPU, largest first) | throughput (iterations/s gained per added GPU)",
};
const EF_OVERHEAD: ParamSpec = ParamSpec {
    key: "overhead",
    default: "true",
    about: "charge the artifact's per-round scaling and restart overheads",
};
const HOLD: ParamSpec = ParamSpec {
    key: "hold",
    default: "true without admission",
    about: "end each job at its plan's slot-aligned end, holding its GPUs until then (the artifact's `ef` loop, whose deadline check uses that end)",
};
const PROGRESS: ParamSpec = ParamSpec {
    key: "progress",
    default: "exact",
    about: "a round's work: exact (all work done counts; a job ends when its work is done) | artifact (the artifact's run_all_jobs and end events: work counts only up to the plan's exact end, and a job ends at its plan's end event with what is left undone; with admission, ef-accessctrl's loop, judged on that exact end; without, ef_sim_jobs' loop and event list, judged at its end)",
};
const EDF_ADMISSION: ParamSpec = ParamSpec {
    key: "admission",
    default: "false",
    about: "admit an arrival only if every job's EDF plan still meets its deadline (the artifact's `edf-accessctrl`)",
};
const EDF_SLOT: ParamSpec = ParamSpec {
    key: "slot",
    default: "60",
    about: "scheduling slot, seconds (the artifact's --scheduling_slot)",
};
const EDF_OVERHEAD: ParamSpec = ParamSpec {
    key: "overhead",
    default: "same as admission",
    about: "charge ElasticFlow's per-round scaling and restart overheads (the artifact charges them under `edf-accessctrl`, not under `edf`)",
};

/// What a job's last greedy score read, to tell whether a later timeline would give it
/// again. [`score_assigned`] reads the timeline without the job's plan at its first
/// point after now (`fet`) and over [`Scored::reads`]. Those read the same while the
/// free GPUs at `fet` and there are the same (checked after each level handed out; a
/// change just before `from` counts when `from` is past `fet`, as it may merge `from`
/// away),
/// and `fet` stays the first point after now while the timeline has no point before
/// it and the value at now, given the plan back, still differs from the one at `fet`
/// (checked when re-scoring).
#[derive(Clone, Copy, Debug)]
struct Memo {
    fet: i64,
    at_fet: u32,
    from: i64,
    to: i64,
    /// The plan's steps up to now, or `None` when it has ended by now.
    fold: Option<Fold>,
    gpu_time: f64,
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

/// Which of the artifact's deadline schedulers runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// ElasticFlow (`ef-accessctrl`, and `ef` without admission control): minimum
    /// satisfactory shares and the greedy hand-out of leftover GPUs.
    Elastic,
    /// The EDF baselines (`edf`, and `edf-accessctrl` with admission control): each job
    /// at its largest level, in deadline order, no elasticity.
    Edf,
}

#[derive(Clone, Debug)]
struct EfJob {
    ddl: i64,
    best_effort: bool,
    plan: Plan,
    num_gpu: u32,
    next_level: u32,
    marginal: f64,
    /// Iterations left, as of the decision being made ([`ElasticFlow::plan_job`]).
    iters: f64,
    /// The last greedy score and what it read, while it still holds.
    memo: Option<Memo>,
    /// [`gpu_time`] of `plan`, kept through a decision's greedy pass.
    gpu_time: f64,
    /// Under `ef_sim_jobs`' loop, when it first started (its place in the artifact's
    /// running list, which orders placement); 0 before.
    seq: u64,
    /// Under `ef_sim_jobs`' loop: the last decision that ran it, its iterations left
    /// then and its GPUs, from which the artifact dates a job that finishes early.
    round: (i64, f64, u32),
    /// The exact end of its plan (the artifact's `real_end_time`: the minimum-share
    /// plan's, moved to the new plan's when the greedy pass scales the job up): under
    /// `progress=artifact`, where its work stops counting and where its deadline is
    /// judged.
    cap_end: i64,
}

/// The ElasticFlow policy (with or without admission control), and the EDF baselines
/// of its evaluation, which share its loop, placement and overheads.
pub struct ElasticFlow {
    name: &'static str,
    kind: Kind,
    admission: bool,
    slot: i64,
    greedy: Greedy,
    overhead: bool,
    /// End a job at its plan's slot-aligned end (the artifact's `ef` loop).
    hold: bool,
    /// Credit work as the artifact's `run_all_jobs` does ([`PROGRESS`]).
    artifact_progress: bool,
    /// Under `progress=artifact` without admission, the artifact's `ef_sim_jobs` event
    /// list ([`Events`]).
    events: Option<Events>,
    /// The last [`EfJob::seq`] given.
    last_seq: u64,
    jobs: Vec<Option<EfJob>>,
    runnable: Vec<JobIdx>,
    arrived: Vec<JobIdx>,
    next_pass: Time,
    /// The time the last deferred pass asked to be woken at.
    waited_for: Option<Time>,
    schedule_count: u64,
    /// The GPU sets placed since the last restart round, by first GPU and count.
    cache: BTreeSet<(u32, u32)>,
    /// Under `progress=artifact`, the artifact's own placement ([`NodeSets`]).
    node_sets: Option<NodeSets>,
    /// Free GPUs after every plan.
    timeline: Steps,
    /// Buffers the greedy pass plans in, reused so that scoring a job allocates
    /// nothing: the timeline without one job's plan, a candidate plan and the timeline
    /// after it, the next timeline while estimating, and the planner's spare.
    without: Steps,
    cand: Plan,
    cand_tl: Steps,
    next_tl: Steps,
    spare: Vec<(i64, u32)>,
    /// Where the last level handed out changed the timeline.
    diffs: Vec<(i64, i64)>,
    node_gpus: u32,
    nodes: usize,
}

/// The scheduling slot in seconds: at least one, and within the 10^12 s every input
/// time obeys.
/// A job's throughput table (admission refuses jobs without one).
fn table<'c>(ctx: &'c Ctx<'_>, j: JobIdx) -> &'c apiary_model::Scaling {
    ctx.job(j)
        .extras()
        .scaling
        .as_ref()
        .expect("admit refuses jobs without one")
}

fn slot(p: &Params, spec: &ParamSpec) -> Result<u64, ParamError> {
    p.u64_in(spec, 1..=1_000_000_000_000)
}

/// No deadline (best-effort jobs): far enough that no plan reaches it.
const NO_DEADLINE: i64 = i64::MAX / 4;

impl ElasticFlow {
    /// ElasticFlow proper (`ef-accessctrl`) or, with `admission=false`, its ablation
    /// without admission control (`ef`); parameters as [`ELASTICFLOW`] lists them.
    pub fn new(p: &Params) -> Result<ElasticFlow, ParamError> {
        let admission = p.bool(&EF_ADMISSION)?;
        let greedy = p.choice(
            &GREEDY,
            &[
                ("artifact", Greedy::Artifact),
                ("throughput", Greedy::Throughput),
            ],
        )?;
        let artifact_progress = p.choice(&PROGRESS, &[("exact", false), ("artifact", true)])?;
        Ok(ElasticFlow {
            greedy,
            overhead: p.bool(&EF_OVERHEAD)?,
            hold: p.bool_given(&HOLD)?.unwrap_or(!admission),
            artifact_progress,
            events: (artifact_progress && !admission).then(Events::default),
            ..ElasticFlow::common(admission, slot(p, &EF_SLOT)?)
        })
    }

    /// The state every variant starts from.
    fn common(admission: bool, slot: u64) -> ElasticFlow {
        ElasticFlow {
            name: "elasticflow",
            kind: Kind::Elastic,
            admission,
            slot: slot as i64,
            greedy: Greedy::Artifact,
            overhead: true,
            hold: false,
            artifact_progress: false,
            events: None,
            last_seq: 0,
            jobs: Vec::new(),
            runnable: Vec::new(),
            arrived: Vec::new(),
            next_pass: 0,
            waited_for: None,
            schedule_count: 0,
            cache: BTreeSet::new(),
            node_sets: None,
            timeline: Steps::default(),
            without: Steps::default(),
            cand: Plan::default(),
            cand_tl: Steps::default(),
            next_tl: Steps::default(),
            spare: Vec::new(),
            diffs: Vec::new(),
            node_gpus: 0,
            nodes: 0,
        }
    }

    /// The EDF baselines: `edf` (the artifact's `edf`: every job admitted, no
    /// overheads) and, with `admission`, `edf-accessctrl` (each arrival admitted only
    /// if every job's EDF plan still meets its deadline; the per-round overheads on).
    pub fn edf(p: &Params) -> Result<ElasticFlow, ParamError> {
        let admission = p.bool(&EDF_ADMISSION)?;
        Ok(ElasticFlow {
            name: "edf",
            kind: Kind::Edf,
            overhead: p.bool_given(&EDF_OVERHEAD)?.unwrap_or(admission),
            // The artifact's EDF ends a job at its plan's exact end.
            hold: false,
            ..ElasticFlow::common(admission, slot(p, &EDF_SLOT)?)
        })
    }

    fn plan_job<'a>(&self, ctx: &'a Ctx<'_>, j: JobIdx) -> PlanJob<'a> {
        let job = ctx.job(j);
        let s = table(ctx, j);
        let ref_tput = s.tput(job.gpus).unwrap_or(s.levels[0].1);
        // The trace reader rounds a job's run time up to whole seconds (the artifact's
        // baselines run that long); the planner counts the trace's iterations, as
        // `iter_left` does, so the rounding's extra work is left out. It is under a
        // second's worth, and decides admission when a deadline is that tight.
        let excess = job.iterations.map_or(0.0, |n| {
            (job.duration as f64 / 1000.0 * ref_tput - n as f64).max(0.0)
        });
        let iters = ctx.remaining(j) / 1000.0 * ref_tput - excess;
        PlanJob {
            scaling: s,
            iters: iters.max(1e-9),
            ddl: self.jobs[j as usize]
                .as_ref()
                .map_or(NO_DEADLINE, |e| e.ddl),
        }
    }

    /// GPUs on the nodes in service: a node down (a failure's repair) or cordoned is
    /// left out of the plans until it is back.
    fn usable(&self, ctx: &Ctx<'_>) -> u32 {
        ctx.total_gpus() as u32 - ctx.free().down_gpus()
    }

    fn in_service(&self, ctx: &Ctx<'_>) -> InService {
        InService::of(ctx.free(), self.nodes, self.node_gpus)
    }

    /// `estimate_all_jobs`: plans `list` in deadline order on an empty timeline.
    fn estimate_all(&mut self, ctx: &Ctx<'_>, list: &mut [JobIdx], now: i64) -> bool {
        let total = self.usable(ctx);
        let mut tl = std::mem::take(&mut self.timeline);
        tl.clear();
        tl.insert(now, total);
        list.sort_by_key(|&j| {
            self.jobs[j as usize]
                .as_ref()
                .map_or(NO_DEADLINE, |e| e.ddl)
        });
        let mut ok = true;
        for &j in list.iter() {
            let job = self.plan_job(ctx, j);
            let out = match self.jobs[j as usize].as_mut() {
                Some(e) => &mut e.plan,
                None => &mut self.cand,
            };
            match self.kind {
                Kind::Elastic => plan_into(
                    job,
                    now,
                    &tl,
                    self.slot,
                    total,
                    None,
                    out,
                    &mut self.next_tl,
                    &mut self.spare,
                ),
                Kind::Edf => edf_plan_into(job, now, &tl, self.slot, total, out, &mut self.next_tl),
            }
            ok &= out.meets;
            std::mem::swap(&mut tl, &mut self.next_tl);
        }
        self.timeline = tl;
        ok
    }

    /// `get_marginal`: scores `j`'s next level. Only the artifact's score needs the
    /// re-planned job, and not for a job holding no GPUs (which always comes first);
    /// the job that wins is planned again by [`Self::replan_next`] on the same
    /// timeline, which gives the same plan.
    fn marginal(&mut self, ctx: &Ctx<'_>, j: JobIdx, allocatable: u32, now: i64) {
        let e = self.jobs[j as usize].as_ref().expect("runnable job");
        let (next_level, num_gpu) = (e.next_level, e.num_gpu);
        let m = if next_level - num_gpu > allocatable || next_level == num_gpu {
            f64::NEG_INFINITY
        } else if num_gpu == 0 {
            f64::INFINITY
        } else {
            match self.greedy {
                Greedy::Artifact => {
                    let cur_time = e.gpu_time;
                    (self.next_gpu_time(ctx, j, now) - cur_time) / (next_level - num_gpu) as f64
                }
                Greedy::Throughput => {
                    let s = table(ctx, j);
                    // As the planner reads the table (`num_gpu` is above 0 here).
                    let tput = |n: u32| s.tput(n).unwrap_or(s.levels[0].1);
                    (tput(next_level) - tput(num_gpu)) / (next_level - num_gpu) as f64
                }
            }
        };
        self.jobs[j as usize]
            .as_mut()
            .expect("runnable job")
            .marginal = m;
    }

    /// GPU-seconds of `j`'s plan at its next level for the first stretch, on the
    /// timeline without its own plan: [`score_assigned`] on that timeline cut after
    /// the deadline, or the full plan where it declines. Nearly all the time of a
    /// decision on a large cluster goes here (every level handed out re-scores every
    /// job), and the short path does not copy the timeline.
    fn next_gpu_time(&mut self, ctx: &Ctx<'_>, j: JobIdx, now: i64) -> f64 {
        let total = self.usable(ctx);
        let e = self.jobs[j as usize].as_ref().expect("runnable job");
        let held = e.memo.filter(|m| {
            let at_now = self.timeline.value_at(now).unwrap_or(total);
            let at_now = m.fold.map_or(at_now, |f| f.apply(at_now));
            self.timeline.range(now + 1, m.fet).is_empty() && at_now != m.at_fet
        });
        // Debug builds score again and check the held score against it.
        if let Some(m) = held
            && !cfg!(debug_assertions)
        {
            return m.gpu_time;
        }
        without(
            &self.timeline,
            &e.plan.allocs,
            e.plan.end,
            total,
            align(now, e.ddl, self.slot),
            &mut self.without,
        );
        let job = PlanJob {
            scaling: table(ctx, j),
            iters: e.iters,
            ddl: e.ddl,
        };
        let fast = score_assigned(job, now, &self.without, self.slot, total, e.next_level);
        let memo = fast.and_then(|sc| self.memo(j, now, total, sc));
        if let Some(sc) = fast {
            if cfg!(debug_assertions) {
                if let Some(m) = held {
                    debug_assert_eq!(m.gpu_time, sc.gpu_time, "a held score changed");
                }
                self.replan_next(ctx, j, now);
                debug_assert_eq!(sc.gpu_time, gpu_time(&self.cand.allocs, self.cand.end));
                debug_assert_eq!((sc.end, sc.meets), (self.cand.end, self.cand.meets));
            }
            self.jobs[j as usize].as_mut().expect("runnable job").memo = memo;
            return sc.gpu_time;
        }
        debug_assert!(held.is_none(), "a held score now needs the full plan");
        self.replan_next(ctx, j, now);
        gpu_time(&self.cand.allocs, self.cand.end)
    }

    /// What [`Self::next_gpu_time`] keeps of a score just made on `self.without`, or
    /// `None` when the plan itself changes before the first point after now (then
    /// that point is not the timeline's alone).
    fn memo(&self, j: JobIdx, now: i64, total: u32, sc: Scored) -> Option<Memo> {
        let e = self.jobs[j as usize].as_ref().expect("runnable job");
        let w = self.without.points();
        let (fet, at_fet) = *w.get(1)?;
        if w[0].0 != now
            || !e.plan.allocs.range(now + 1, fet).is_empty()
            || (now < e.plan.end && e.plan.end < fet)
        {
            return None;
        }
        let fold = (now < e.plan.end).then(|| {
            let mut f = Fold::new(total);
            for &(_, n) in e.plan.allocs.range(i64::MIN, now + 1) {
                f.push(n);
            }
            f
        });
        debug_assert!(sc.reads.0 >= fet && sc.reads.1 >= sc.reads.0);
        Some(Memo {
            fet,
            at_fet,
            from: sc.reads.0,
            to: sc.reads.1,
            fold,
            gpu_time: sc.gpu_time,
        })
    }

    /// Plans `j` at its next level for the first stretch, on the timeline without its
    /// own plan, into `cand` and `cand_tl`.
    fn replan_next(&mut self, ctx: &Ctx<'_>, j: JobIdx, now: i64) {
        let total = self.usable(ctx);
        let e = self.jobs[j as usize].as_ref().expect("runnable job");
        without(
            &self.timeline,
            &e.plan.allocs,
            e.plan.end,
            total,
            i64::MAX,
            &mut self.without,
        );
        let next_level = e.next_level;
        plan_into(
            self.plan_job(ctx, j),
            now,
            &self.without,
            self.slot,
            total,
            Some(next_level),
            &mut self.cand,
            &mut self.cand_tl,
            &mut self.spare,
        );
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
        let total = self.usable(ctx);
        let mut used = 0u32;
        for &j in &self.runnable {
            let s = table(ctx, j);
            let iters = self.plan_job(ctx, j).iters;
            let e = self.jobs[j as usize].as_mut().expect("runnable job");
            e.iters = iters;
            e.memo = None;
            e.gpu_time = gpu_time(&e.plan.allocs, e.plan.end);
            e.next_level = s.next_level(e.num_gpu);
            used += e.num_gpu;
        }
        let mut allocatable = total.saturating_sub(used);
        if allocatable == 0 {
            return;
        }
        for k in 0..self.runnable.len() {
            self.marginal(ctx, self.runnable[k], allocatable, now);
        }
        self.sort_by_marginal();
        let mut allocated = true;
        while allocatable > 0 && allocated {
            allocated = false;
            for k in 0..self.runnable.len() {
                let j = self.runnable[k];
                let e = self.jobs[j as usize].as_ref().expect("runnable job");
                if e.next_level - e.num_gpu > allocatable || e.next_level == e.num_gpu {
                    continue;
                }
                // Scored on this timeline with this plan: the same plan again.
                self.replan_next(ctx, j, now);
                let s = table(ctx, j);
                let e = self.jobs[j as usize].as_mut().expect("runnable job");
                allocatable -= e.next_level - e.num_gpu;
                std::mem::swap(&mut self.timeline, &mut self.cand_tl);
                std::mem::swap(&mut e.plan, &mut self.cand);
                if let Some(ev) = self.events.as_mut() {
                    ev.move_end(j, e.plan.end);
                    if e.seq == 0 {
                        self.last_seq += 1;
                        e.seq = self.last_seq;
                    }
                }
                e.num_gpu = e.next_level;
                e.next_level = s.next_level(e.num_gpu);
                e.memo = None;
                e.gpu_time = gpu_time(&e.plan.allocs, e.plan.end);
                // The artifact's `allocate_free_gpus` moves `real_end_time` to the new
                // plan's (`next_level_realendtime`): the cap and the verdict follow it.
                e.cap_end = e.plan.real_end;
                allocated = true;
                // Scores that read where the timeline changed are made again.
                differences(&self.cand_tl, &self.timeline, &mut self.diffs);
                for &k in &self.runnable {
                    let e = self.jobs[k as usize].as_mut().expect("runnable job");
                    if let Some(m) = e.memo
                        && self.diffs.iter().any(|&(a, b)| {
                            (a <= m.fet && b > m.fet)
                                || (a <= m.to && (b > m.from || (b == m.from && m.from > m.fet)))
                        })
                    {
                        e.memo = None;
                    }
                }
                break;
            }
            for k in 0..self.runnable.len() {
                let j = self.runnable[k];
                let e = self.jobs[j as usize].as_ref().expect("runnable job");
                if e.next_level > e.num_gpu {
                    self.marginal(ctx, j, allocatable, now);
                }
            }
            self.sort_by_marginal();
        }
    }
}

/// ElasticFlow's `utils.estimate_overhead`: milliseconds a job running on `gpus` of a
/// `total`-GPU cluster loses in a scheduling round: 2 s (7 s from 256 GPUs); unless its
/// GPUs are cached, plus 2·(log₂ gpus + 1) s, and on restart rounds 27 s (47 s).
pub fn round_overhead(total: u32, gpus: u32, restart: bool, cached: bool) -> i64 {
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

impl Policy for ElasticFlow {
    fn spec(&self) -> &'static PolicySpec {
        if self.name == "edf" {
            &EDF
        } else {
            &ELASTICFLOW
        }
    }

    fn attach(&mut self, cluster: &apiary_model::Cluster) -> Result<(), PolicyError> {
        let g = cluster.nodes.first().map_or(0, |n| n.gpus);
        if g == 0 || !g.is_power_of_two() || cluster.nodes.iter().any(|n| n.gpus != g) {
            return Err(PolicyError::Cluster {
                policy: self.name,
                reason: format!(
                    "{} places with buddy allocation, which needs nodes with equal power-of-two \
                     GPU counts (try a preset such as n16g8)",
                    self.name
                ),
            });
        }
        self.node_gpus = g;
        self.nodes = cluster.nodes.len();
        if self.artifact_progress && self.kind == Kind::Elastic {
            let switch_of: Vec<u32> = cluster.nodes.iter().map(|n| n.switch).collect();
            self.node_sets = Some(NodeSets::new(g, &switch_of));
        }
        Ok(())
    }

    fn admit(&mut self, ctx: &Ctx<'_>, j: JobIdx) -> Result<(), PolicyError> {
        if ctx.job(j).extras().scaling.is_none() {
            return Err(PolicyError::Job {
                policy: self.name,
                job: ctx.job(j).id.to_string(),
                reason: format!(
                    "it has no throughput table: {} picks GPU counts from ElasticFlow's tables, \
                     which the itp-elasticflow and elasticflow trace formats attach from each \
                     job's model, batch_size and iterations",
                    self.name
                ),
            });
        }
        if let Some(&(g, _)) = table(ctx, j)
            .levels
            .iter()
            .find(|(g, _)| !g.is_power_of_two())
        {
            return Err(PolicyError::Job {
                policy: self.name,
                job: ctx.job(j).id.to_string(),
                reason: format!(
                    "it may run on {g} GPUs: {}'s buddy placement runs power-of-two GPU counts",
                    self.name
                ),
            });
        }
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
            iters: 0.0,
            memo: None,
            gpu_time: 0.0,
            seq: 0,
            round: (0, 0.0, 0),
            cap_end: 0,
        });
        self.arrived.push(j);
        Ok(())
    }

    fn on_finish(&mut self, _ctx: &Ctx<'_>, j: JobIdx) {
        if let Some(ns) = self.node_sets.as_mut() {
            ns.release(j);
        }
        if let Some(ev) = self.events.as_mut() {
            ev.forget(j);
        }
        self.runnable.retain(|&x| x != j);
        self.jobs[j as usize] = None;
    }

    fn schedule(&mut self, ctx: &mut Ctx<'_>) -> Result<(), PolicyError> {
        let now_ms = ctx.now();
        // The planner counts whole seconds, so a decision waits for the next one (after
        // a completion mid-second): planning from a rounded time would either promise
        // work in the past (a start the plan makes late by the fraction) or hide work
        // done (a job pushed to a larger share it does not need).
        let whole = now_ms.next_multiple_of(1000);
        // A live pass never falls on a whole second, or exactly on the wake it asked
        // for: one at or past that wake decides then, as the simulator's would have
        // (at most a pass interval late).
        let due = self.waited_for.is_some_and(|w| now_ms >= w);
        if now_ms < self.next_pass || (whole != now_ms && !due) {
            let w = self.next_pass.max(whole);
            self.waited_for = Some(w);
            ctx.wake_at(w);
            return Ok(());
        }
        self.waited_for = None;
        let now = (now_ms / 1000) as i64;
        self.runnable
            .retain(|&j| matches!(ctx.status(j), Status::Running | Status::Pending));
        if self.end_finished(ctx, now_ms, now)? {
            return Ok(());
        }
        let replan = self.admit_arrived(ctx, now)?;
        self.plan_round(ctx, now, replan);
        let placed = self.place_round(ctx, now)?;
        self.next_decision(ctx, now_ms, now, &placed);
        Ok(())
    }
}
