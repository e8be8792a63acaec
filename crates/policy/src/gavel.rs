//! Gavel (OSDI'20), as its artifact's simulator defines it (`scheduler/scheduler.py`,
//! `scheduler/policies/{max_min_fairness,min_total_duration,proportional}.py`):
//! heterogeneity-aware allocation programs realised by a round-based mechanism.
//!
//! * **Allocation.** When the job set has changed and at least `reset` seconds have
//!   passed since the last recomputation (or none happened at a time after 0), an LP
//!   gives every active job a time fraction `X[j][t]` on each GPU type `t`, with
//!   `Σ_t X ≤ 1` per job and `Σ_j GPUs·X ≤ GPUs of t` per type. Max-min fairness
//!   maximises the smallest `Σ_t T[j][t]·GPUs·X / (weight · T_prop[j])`, where
//!   `T_prop` is the job's throughput under an equal split of every type; minimum
//!   total duration maximises `1/M` with `Σ_t T[j][t]·X ≥ remaining_j / M`. The
//!   heterogeneity-agnostic variants (`perf=false`) give the program the same
//!   throughput on every type (1 for max-min fairness, the V100's for min total
//!   duration); the jobs still run at their real speed.
//! * **Rounds.** Every `round` seconds each type's jobs are ranked by allocation over
//!   the share of the type's time they received since the last recomputation
//!   (`X / (time_j / time_type)`, both starting at half a round), ties broken by
//!   deficit, then allocation; the types are walked V100, P100, K80 (shuffled each
//!   round with CPython's generator for the agnostic variants) and jobs taken while
//!   GPUs of the type remain. Chosen jobs keep last round's GPUs when those are still
//!   free, and the rest are placed strided over the type's servers in order.
//!
//! Artifact quirks kept: a job that arrived after the last recomputation has no
//! allocation; it can be chosen (priority 0) but is then never placed, so its GPUs
//! stay idle for that round. The LP is solved by an interior-point method, as ECOS
//! does in the artifact, because the optimum is degenerate and the choice among
//! optimal allocations shapes the schedule (see `apiary_solver::lp`).

use crate::PolicyError;
use crate::ctx::{Ctx, Handles};
use crate::spec::{Capabilities, Capability, ParamSpec, PolicySpec};
use crate::world::{JobIdx, Status};
use crate::{ParamError, Params, Policy};
use apiary_model::{Cluster, Placement, PyRandom, Time};
use apiary_solver::lp::LinearProgram;
/// `gavel`: its spec.
pub const GAVEL: PolicySpec = PolicySpec {
    name: "gavel",
    about: "Gavel's max-min fairness (LAS): heterogeneity-aware time shares from an LP, realised in 360 s rounds (`perf=false`: Gavel's agnostic baseline)",
    capabilities: Capabilities::of(&[Capability::ChoosesGpus, Capability::Lookahead]),
    params: GAVEL_PARAMS,
    build: |p| Ok(Box::new(Gavel::new(Objective::MaxMinFairness, p)?)),
};

/// `gavel-makespan`: its spec.
pub const GAVEL_MAKESPAN: PolicySpec = PolicySpec {
    name: "gavel-makespan",
    about: "Gavel's minimum total duration: time shares that finish the active jobs soonest, realised in 360 s rounds (oracle; `perf=false`: agnostic)",
    capabilities: Capabilities::of(&[
        Capability::ChoosesGpus,
        Capability::Durations,
        Capability::Lookahead,
    ]),
    params: GAVEL_PARAMS,
    build: |p| Ok(Box::new(Gavel::new(Objective::MinTotalDuration, p)?)),
};

const GAVEL_PARAMS: &[ParamSpec] = &[PERF, ROUND, RESET, SEED, FACE];

const PERF: ParamSpec = ParamSpec {
    key: "perf",
    default: "true",
    about: "give the allocation program each job's throughput per GPU type (false: the same on every type, Gavel's agnostic baseline)",
};

const ROUND: ParamSpec = ParamSpec {
    key: "round",
    default: "360",
    about: "round length, seconds",
};

const RESET: ParamSpec = ParamSpec {
    key: "reset",
    default: "1920",
    about: "least time between allocation recomputations, seconds (the artifact's minimum_time_between_allocation_resets)",
};

const SEED: ParamSpec = ParamSpec {
    key: "seed",
    default: "0",
    about: "the artifact's --seed: the agnostic variants shuffle GPU types each round with CPython's random.Random(seed + 5)",
};

const FACE: ParamSpec = ParamSpec {
    key: "face",
    default: "centre",
    about: "which optimal allocation the program returns when many are optimal: centre (an interior-point answer, as the artifact's ECOS gives) | fast | slow (a diagnostic: the optimal point that puts the most share on the fastest or the slowest types)",
};

/// Which point of the allocation program's optimal face to return.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Face {
    /// The interior-point method's answer, near the face's analytic centre.
    Centre,
    /// Tilted towards the types Gavel walks first (V100, then P100).
    Fast,
    /// Tilted towards the types it walks last (K80).
    Slow,
}

/// The tilt's weight against the objective: small enough to leave the optimum's value
/// unchanged at the solver's tolerance, large enough to choose among optimal points.
const TILT: f64 = 1e-6;

/// What the allocation program optimises.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Objective {
    /// `max_min_fairness[_perf]`: Gavel's LAS.
    MaxMinFairness,
    /// `min_total_duration[_perf]`: finish the active jobs as early as possible.
    MinTotalDuration,
}

/// Gavel's worker types in the order its mechanism walks them.
const GAVEL_ORDER: [&str; 3] = ["v100", "p100", "k80"];

/// One GPU type of the cluster.
#[derive(Clone, Debug)]
struct GpuType {
    name: String,
    gpus: u32,
    /// Nodes of this type, in cluster order (Gavel's servers).
    nodes: Vec<u32>,
}

/// A round's assignment: job, GPU type index, and its GPUs.
type Plan = Vec<(JobIdx, usize, Placement)>;

/// Per-job mechanism state (times in seconds, per GPU type).
#[derive(Clone, Debug, Default)]
struct JobState {
    active: bool,
    time_so_far: Vec<f64>,
    deficit: Vec<f64>,
    /// Allocation per type, when the job was active at the last recomputation.
    alloc: Option<Vec<f64>>,
    priority: Vec<f64>,
    /// Type index and GPUs held this round.
    held: Option<(usize, Placement)>,
    /// Speed on each GPU type (the job's `type_speed`, looked up once).
    speeds: Vec<f64>,
}

/// The Gavel round-based scheduler.
#[derive(Debug)]
pub struct Gavel {
    objective: Objective,
    perf: bool,
    face: Face,
    round: Time,
    reset_gap: Time,
    shuffler: PyRandom,
    types: Vec<GpuType>,
    st: Vec<JobState>,
    /// Active jobs in arrival order (the artifact's dict order).
    active: Vec<JobIdx>,
    submitted: usize,
    worker_time: Vec<f64>,
    last_reset: Time,
    need_update: bool,
    round_start: Option<Time>,
    round_end: Option<Time>,
}

impl Gavel {
    /// Parameters as [`GAVEL`] lists them.
    pub fn new(objective: Objective, p: &Params) -> Result<Gavel, ParamError> {
        let round = p.secs(&ROUND, 0.001)?;
        let reset_gap = p.secs(&RESET, 0.0)?;
        let seed = p.u64(&SEED)?;
        Ok(Gavel {
            objective,
            perf: p.bool(&PERF)?,
            face: p.choice(
                &FACE,
                &[
                    ("centre", Face::Centre),
                    ("fast", Face::Fast),
                    ("slow", Face::Slow),
                ],
            )?,
            round,
            reset_gap,
            shuffler: PyRandom::new((seed as u32).wrapping_add(5) as u64),
            types: Vec::new(),
            st: Vec::new(),
            active: Vec::new(),
            submitted: 0,
            worker_time: Vec::new(),
            last_reset: 0,
            need_update: false,
            round_start: None,
            round_end: None,
        })
    }

    fn half_round(&self) -> f64 {
        self.round as f64 / 2000.0
    }

    fn learn_cluster(&mut self, cluster: &Cluster) {
        if !self.types.is_empty() {
            return;
        }
        let mut names: Vec<String> = cluster
            .nodes
            .iter()
            .map(|n| n.gpu_type.to_lowercase())
            .collect();
        names.sort();
        names.dedup();
        // Gavel's order first, then any other types by name.
        names.sort_by_key(|n| GAVEL_ORDER.iter().position(|g| g == n).unwrap_or(3));
        self.types = names
            .into_iter()
            .map(|name| GpuType {
                name,
                gpus: 0,
                nodes: Vec::new(),
            })
            .collect();
        for (i, n) in cluster.nodes.iter().enumerate() {
            let name = n.gpu_type.to_lowercase();
            let t = self.types.iter().position(|g| g.name == name).unwrap_or(0);
            self.types[t].gpus += n.gpus;
            self.types[t].nodes.push(i as u32);
        }
        self.worker_time = vec![0.0; self.types.len()];
    }

    fn speed(&self, j: JobIdx, t: usize) -> f64 {
        self.st[j as usize].speeds[t]
    }

    /// `_reset_time_run_so_far`: deficits take in what each job should have had since
    /// the last reset, and every clock restarts at half a round.
    fn reset_time(&mut self, now: Time) {
        let elapsed = now.saturating_sub(self.last_reset) as f64 / 1000.0;
        let half = self.half_round();
        for t in 0..self.types.len() {
            self.worker_time[t] = 0.0;
            for &j in &self.active {
                let s = &mut self.st[j as usize];
                let received = s.time_so_far[t] - half;
                let should = s.alloc.as_ref().map_or(0.0, |a| a[t] * elapsed);
                s.deficit[t] += should - received;
                s.time_so_far[t] = half;
                self.worker_time[t] += half;
            }
        }
        self.last_reset = now;
    }

    /// Solves the allocation program over the active jobs.
    fn compute_allocation(&mut self, ctx: &Ctx<'_>) {
        let nt = self.types.len();
        let n = self.active.len();
        if n == 0 {
            return;
        }
        let total: f64 = self.types.iter().map(|t| t.gpus as f64).sum();
        // Throughput each type gives each job, as the program sees it.
        let tput = |j: JobIdx, t: usize| -> f64 {
            if self.perf {
                self.speed(j, t)
            } else {
                match self.objective {
                    Objective::MaxMinFairness => 1.0,
                    // The artifact copies the V100 throughput to every type.
                    Objective::MinTotalDuration => ctx.job(j).type_speed("v100"),
                }
            }
        };
        let var = |i: usize, t: usize| i * nt + t;
        let obj = n * nt;
        let mut lp = LinearProgram::new(n * nt + 1);
        lp.objective(obj, 1.0);
        if self.face != Face::Centre {
            for i in 0..n {
                for t in 0..nt {
                    let rank = if self.face == Face::Fast {
                        nt - 1 - t
                    } else {
                        t
                    };
                    lp.objective(var(i, t), TILT * rank as f64);
                }
            }
        }
        let mut row: Vec<(usize, f64)> = Vec::with_capacity(n + 1);
        for (t, ty) in self.types.iter().enumerate() {
            row.clear();
            for (i, &j) in self.active.iter().enumerate() {
                row.push((var(i, t), ctx.job(j).gpus as f64));
            }
            lp.add_le(&row, ty.gpus as f64);
        }
        for i in 0..n {
            row.clear();
            row.extend((0..nt).map(|t| (var(i, t), 1.0)));
            lp.add_le(&row, 1.0);
        }
        match self.objective {
            Objective::MaxMinFairness => {
                for (i, &j) in self.active.iter().enumerate() {
                    let job = ctx.job(j);
                    let weight = job.priority.max(1) as f64;
                    // `ProportionalPolicy`: every type split evenly over the jobs.
                    let prop: f64 = (0..nt)
                        .map(|t| tput(j, t) * self.types[t].gpus as f64 / total)
                        .sum();
                    let scale = job.gpus as f64 / (weight * prop.max(1e-12));
                    row.clear();
                    row.push((obj, 1.0));
                    row.extend((0..nt).map(|t| (var(i, t), -tput(j, t) * scale)));
                    lp.add_le(&row, 0.0);
                }
            }
            Objective::MinTotalDuration => {
                // `Σ_t T·X ≥ remaining · (1/M)`, with remaining in units of the largest so
                // the program is well scaled (the optimum's X is unchanged).
                let rem: Vec<f64> = self.active.iter().map(|&j| ctx.remaining(j)).collect();
                let big = rem.iter().fold(0.0f64, |a, &r| a.max(r)).max(1.0);
                for (i, &j) in self.active.iter().enumerate() {
                    row.clear();
                    row.push((obj, rem[i] / big));
                    row.extend((0..nt).map(|t| (var(i, t), -tput(j, t))));
                    lp.add_le(&row, 0.0);
                }
            }
        }
        let x = match lp.maximize() {
            Ok(s) => s.x,
            // Never expected (x = 0 is feasible and every share is bounded); keep the
            // previous allocation rather than stop scheduling.
            Err(_) => return,
        };
        for (i, &j) in self.active.iter().enumerate() {
            let a: Vec<f64> = (0..nt).map(|t| x[var(i, t)].clamp(0.0, 1.0)).collect();
            self.st[j as usize].alloc = Some(a);
        }
    }

    /// `_update_priorities`.
    fn update_priorities(&mut self, ctx: &Ctx<'_>) {
        let now = ctx.now();
        if self.need_update
            && (now.saturating_sub(self.last_reset) >= self.reset_gap || self.last_reset == 0)
        {
            self.reset_time(now);
            self.compute_allocation(ctx);
            self.need_update = false;
        }
        for t in 0..self.types.len() {
            let wt = self.worker_time[t];
            for &j in &self.active {
                let speed = self.speed(j, t);
                let s = &mut self.st[j as usize];
                let frac = if wt == 0.0 {
                    0.0
                } else {
                    s.time_so_far[t] / wt
                };
                s.priority[t] = match &s.alloc {
                    None => 0.0,
                    Some(a) if a[t] == 0.0 || speed <= 0.0 => 0.0,
                    Some(a) if frac > 0.0 => a[t] / frac,
                    Some(a) => a[t] * 1e9,
                };
            }
        }
    }

    /// `_schedule_jobs_on_workers`: which jobs run on which GPUs this round.
    fn assign(&mut self, ctx: &Ctx<'_>) -> Plan {
        self.update_priorities(ctx);
        let nt = self.types.len();
        let mut order: Vec<usize> = (0..nt).collect();
        if !self.perf {
            self.shuffler.shuffle(&mut order);
        }
        // The helper: per type, jobs by (priority, deficit, allocation) descending,
        // stable in arrival order; the types' lists walked one after another.
        let mut left: Vec<u32> = self.types.iter().map(|t| t.gpus).collect();
        let mut chosen: Vec<Vec<JobIdx>> = vec![Vec::new(); nt];
        let mut taken = vec![false; self.active.len()];
        let mut queue: Vec<(usize, JobIdx)> = (0..self.active.len())
            .map(|i| (i, self.active[i]))
            .collect();
        for &t in &order {
            let key = |j: JobIdx| {
                let s = &self.st[j as usize];
                let a = s.alloc.as_ref().map_or(0.0, |a| a[t]);
                (s.priority[t], s.deficit[t], a)
            };
            queue.sort_by(|&(ia, a), &(ib, b)| {
                let (ka, kb) = (key(a), key(b));
                kb.0.total_cmp(&ka.0)
                    .then(kb.1.total_cmp(&ka.1))
                    .then(kb.2.total_cmp(&ka.2))
                    .then(ia.cmp(&ib))
            });
            for &(i, j) in &queue {
                if left[t] == 0 {
                    break;
                }
                let g = ctx.job(j).gpus;
                if taken[i] || self.speed(j, t) <= 0.0 || g > left[t] {
                    continue;
                }
                left[t] -= g;
                taken[i] = true;
                chosen[t].push(j);
            }
        }
        // Placement: largest first; keep last round's GPUs where still free, then
        // strided over the type's servers.
        let mut out = Vec::new();
        for &t in &order {
            let mut jobs = std::mem::take(&mut chosen[t]);
            jobs.sort_by_key(|&j| std::cmp::Reverse(ctx.job(j).gpus));
            let mut used: Vec<u64> = vec![0; ctx.cluster().nodes.len()];
            let mut server = 0usize;
            let mut next_gpu: Vec<u32> = vec![0; self.types[t].nodes.len()];
            let mut placed: Vec<Option<Placement>> = vec![None; jobs.len()];
            let mut k = 0;
            while k < jobs.len() {
                let g = ctx.job(jobs[k]).gpus;
                let end = k + jobs[k..]
                    .iter()
                    .take_while(|&&j| ctx.job(j).gpus == g)
                    .count();
                for (slot, &j) in placed[k..end].iter_mut().zip(&jobs[k..end]) {
                    if let Some((pt, gpus)) = &self.st[j as usize].held
                        && *pt == t
                        && gpus.parts.iter().all(|&(n, m)| used[n as usize] & m == 0)
                    {
                        for &(n, m) in &gpus.parts {
                            used[n as usize] |= m;
                        }
                        *slot = Some(gpus.clone());
                    }
                }
                for (slot, &j) in placed[k..end].iter_mut().zip(&jobs[k..end]) {
                    if slot.is_some() || self.st[j as usize].alloc.is_none() {
                        continue;
                    }
                    let mut gpus = Placement::default();
                    let mut got = 0;
                    let nodes = &self.types[t].nodes;
                    while got < g && server < nodes.len() {
                        let node = nodes[server];
                        let cap = ctx.cluster().nodes[node as usize].gpus;
                        if next_gpu[server] >= cap {
                            server += 1;
                            continue;
                        }
                        let i = next_gpu[server];
                        if used[node as usize] & (1u64 << i) == 0 {
                            used[node as usize] |= 1u64 << i;
                            gpus.add(node, 1u64 << i);
                            got += 1;
                        }
                        next_gpu[server] += 1;
                    }
                    if got == g {
                        *slot = Some(gpus);
                    }
                }
                k = end;
            }
            for (j, p) in jobs.into_iter().zip(placed) {
                if let Some(p) = p {
                    out.push((j, t, p));
                }
            }
        }
        out
    }

    /// A round boundary: account the round that ended, choose and place the next one.
    fn boundary(&mut self, ctx: &mut Ctx<'_>) -> Result<(), PolicyError> {
        let now = ctx.now();
        if let Some(start) = self.round_start.take() {
            let dt = now.saturating_sub(start) as f64 / 1000.0;
            for &j in &self.active {
                if let Some((t, _)) = self.st[j as usize].held {
                    self.st[j as usize].time_so_far[t] += dt;
                    self.worker_time[t] += dt;
                }
            }
        }
        let mut plan = self.assign(ctx);
        if plan.is_empty()
            && !self.active.is_empty()
            && self.submitted >= ctx.lookahead()?.all_jobs().len()
        {
            // The artifact forces a recomputation when nothing runs and no job is
            // still to arrive.
            self.last_reset = 0;
            plan = self.assign(ctx);
        }
        // Stop what does not continue on the same GPUs, then start the rest.
        let mut keep = vec![false; plan.len()];
        for &j in &self.active {
            let Some((t, gpus)) = self.st[j as usize].held.take() else {
                continue;
            };
            match plan.iter().position(|(planned, _, _)| *planned == j) {
                Some(k) if plan[k].1 == t && plan[k].2 == gpus => {
                    keep[k] = true;
                    self.st[j as usize].held = Some((t, gpus));
                }
                _ => {
                    ctx.preempt(j);
                }
            }
        }
        let mut end = now;
        for (k, (j, t, gpus)) in plan.into_iter().enumerate() {
            let speed = self.speed(j, t);
            if !keep[k] {
                if !ctx.gpus()?.start(j, gpus.clone()) {
                    continue;
                }
                self.st[j as usize].held = Some((t, gpus));
            }
            let rt = ctx.rt(j);
            let from = now.max(rt.overhead_until);
            let fin =
                from.saturating_add((ctx.remaining(j) / speed - 1e-6).ceil().max(0.0) as Time);
            end = end.max(fin.min(now + self.round));
        }
        if end > now {
            self.round_start = Some(now);
            self.round_end = Some(end);
            ctx.wake_at(end);
        } else {
            self.round_end = None;
        }
        Ok(())
    }
}

impl Policy for Gavel {
    fn spec(&self) -> &'static PolicySpec {
        match self.objective {
            Objective::MaxMinFairness => &GAVEL,
            Objective::MinTotalDuration => &GAVEL_MAKESPAN,
        }
    }

    fn attach(&mut self, cluster: &Cluster) -> Result<(), PolicyError> {
        self.learn_cluster(cluster);
        Ok(())
    }

    fn admit(&mut self, ctx: &Ctx<'_>, j: JobIdx) -> Result<(), PolicyError> {
        self.learn_cluster(ctx.cluster());
        if self.st.len() <= j as usize {
            self.st.resize(j as usize + 1, JobState::default());
        }
        let nt = self.types.len();
        let half = self.half_round();
        self.st[j as usize] = JobState {
            active: true,
            time_so_far: vec![half; nt],
            deficit: vec![0.0; nt],
            alloc: None,
            priority: vec![0.0; nt],
            held: None,
            speeds: self
                .types
                .iter()
                .map(|t| ctx.job(j).type_speed(&t.name))
                .collect(),
        };
        self.active.push(j);
        self.submitted += 1;
        self.need_update = true;
        Ok(())
    }

    fn on_finish(&mut self, ctx: &Ctx<'_>, j: JobIdx) {
        let Some(s) = self.st.get_mut(j as usize) else {
            return;
        };
        if !s.active {
            return;
        }
        s.active = false;
        if let (Some((t, _)), Some(start)) = (s.held.take(), self.round_start) {
            self.worker_time[t] += ctx.now().saturating_sub(start) as f64 / 1000.0;
        }
        s.alloc = None;
        self.active.retain(|&a| a != j);
        self.need_update = true;
    }

    fn on_requeue(&mut self, _ctx: &Ctx<'_>, j: JobIdx) {
        if let Some(s) = self.st.get_mut(j as usize) {
            s.held = None;
        }
    }

    fn schedule(&mut self, ctx: &mut Ctx<'_>) -> Result<(), PolicyError> {
        if let Some(end) = self.round_end
            && ctx.now() < end
        {
            // Mid-round: arrivals and completions wait for the boundary (the driver
            // keeps only the latest wake request, so it is renewed).
            ctx.wake_at(end);
            return Ok(());
        }
        self.boundary(ctx)?;
        debug_assert!(
            self.active
                .iter()
                .all(|&j| self.st[j as usize].held.is_none() || ctx.status(j) == Status::Running)
        );
        Ok(())
    }
}
