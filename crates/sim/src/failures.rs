//! Failures during a run (`--failures`): the failure model's classes strike GPUs, nodes
//! or jobs as seeded Poisson processes; a job hit loses the work since its last
//! checkpoint that survives the failure, restores and restarts, and waits in the queue
//! again with its attained service kept; a node failure ends every job on the node
//! (gangs fail together) and takes the node down for its repair time; a correlated one
//! takes the node's whole switch.
//!
//! Each job checkpoints as `apiary checkpoint plan` plans a job of its size
//! ([`apiary_model::failures::checkpoint`]), its checkpoint sized by the model's
//! `checkpoint_gb_per_gpu`: level ℓ saves every `τ_ℓ` of work since the job last
//! started (a start restores a checkpoint or begins afresh, so it counts as one at
//! every level), and the saves' stalls slow the job by `1 / (1 + Σ c_ℓ/τ_ℓ)`.

use apiary_core::Rng;
use apiary_model::failures::checkpoint::{self, Level, Plan, Rule};
use apiary_model::failures::{FailureModel, FailureReport, Kind, Per};
use apiary_model::{Placement, Time};
use apiary_policy::{JobIdx, Status, World};
use std::collections::{BTreeMap, BTreeSet};

/// Failures a job may take; past them it ends unfinished.
pub const MAX_FAILURES_PER_JOB: u32 = 1000;

/// A job a failure ended, for the engine to requeue (or, past
/// [`MAX_FAILURES_PER_JOB`], to give up).
#[derive(Clone, Copy, Debug)]
pub struct Struck {
    /// The job.
    pub job: JobIdx,
    /// Work lost back to its last surviving checkpoint, ms at rate 1.
    pub lost: f64,
    /// Restore and restart after its next start, ms.
    pub recovery: Time,
    /// Why it ends unfinished instead of restarting, if it does: struck too often, or
    /// by a fatal failure (its own error).
    pub give_up: Option<&'static str>,
}

/// Why a job struck more than [`MAX_FAILURES_PER_JOB`] times ends.
const TOO_OFTEN: &str =
    "struck by more failures than a job is requeued for (1,000); never finished";
/// Why a job struck by a fatal failure ends.
const FATAL: &str = "failed: a fatal failure (the job's own error) ended it";

/// What a run is given: the failure model, the checkpoint levels and the interval rule.
#[derive(Clone, Debug)]
pub struct Setting {
    /// The classes and costs.
    pub model: FailureModel,
    /// The levels every job checkpoints to.
    pub levels: Vec<Level>,
    /// How their intervals are set.
    pub rule: Rule,
}

impl Setting {
    /// The setting a model's file gives: its levels (the built-in ones when it names
    /// none) and its rule (`risk` when it names none).
    pub fn of(model: FailureModel) -> Result<Setting, String> {
        let levels = if model.levels.is_empty() {
            checkpoint::default_levels()
        } else {
            model.levels.clone()
        };
        let rule = match &model.rule {
            Some(r) => r.parse()?,
            None => Rule::Risk,
        };
        Ok(Setting {
            model,
            levels,
            rule,
        })
    }
}

/// A job size's plan, as the failure path reads it.
#[derive(Clone, Debug)]
struct SizePlan {
    /// Work between saves per level, ms (infinite: never).
    interval_ms: Vec<f64>,
    /// Per class: the level it recovers from.
    recovery: Vec<usize>,
    /// Per level: restore plus restart, ms.
    down_ms: Vec<Time>,
    /// Speed left after the saves' stalls.
    factor: f64,
}

/// The failures of one run.
pub struct Failures {
    setting: Setting,
    rng: Rng,
    /// Per class, when it strikes next.
    next: Vec<Time>,
    /// Per class, strikes per ms over the whole cluster (a bound for per-job classes).
    rate_ms: Vec<f64>,
    plans: BTreeMap<u32, SizePlan>,
    /// Per job: the work it had done when it last started.
    origin: Vec<f64>,
    /// Per job: failures that struck it.
    struck: Vec<u32>,
    /// Down nodes: (back at, node), and the GPUs held for each.
    repairs: BTreeSet<(Time, u32)>,
    down: BTreeMap<u32, u64>,
    /// Down GPU-ms counted up to `measured`.
    measured: Time,
    report: FailureReport,
    /// Per node, its switch's nodes (for correlated failures).
    switch_of: Vec<u32>,
    /// Failures to replay, in time order (then no failure is drawn).
    replay: std::collections::VecDeque<Logged>,
    /// Nodes that went down (false) or came back (true) since the engine last took
    /// them, for policies that track node health (HiveD's doomed cells).
    health: Vec<(u32, bool)>,
    /// The shaped (Weibull) classes, struck per job rather than drawn over the cluster.
    shaped: Vec<usize>,
    /// Armed strikes of shaped classes: (when, job, class, the job's start count then;
    /// a strike armed at an earlier start is stale).
    armed: BTreeSet<(Time, JobIdx, usize, u32)>,
    /// Per job: its starts so far.
    starts: Vec<u32>,
    /// The seed of every job's own ages, so that a job draws the same age under every
    /// policy, whatever order they start jobs in.
    ages_seed: u64,
}

/// Seconds as ms, a span past any run's horizon as "never" (`Time::MAX / 2`, which
/// later sums cannot overflow).
fn ms(s: f64) -> Time {
    let v = (s * 1000.0).round();
    if v < 1e15 {
        v.max(0.0) as Time
    } else {
        Time::MAX / 2
    }
}

/// A failure to replay: when, its class, the node, the GPU on the node (where one is
/// named), and how long the node stays down (where the log says).
type Logged = (Time, usize, u32, Option<u32>, Option<Time>);

impl Failures {
    /// The failures of a run on `world`'s cluster, seeded by `seed`.
    pub fn new(world: &World, setting: Setting, seed: u64) -> Result<Failures, String> {
        let cluster = &world.cluster;
        let gpus = f64::from(cluster.total_gpus);
        let nodes = cluster.nodes.len() as f64;
        // A shaped class strikes each job at a drawn age instead ([`Failures::started`]).
        let rate_ms = setting
            .model
            .classes
            .iter()
            .map(|c| {
                if c.shape.is_some() {
                    return 0.0;
                }
                c.rate_per_hour
                    * match c.per {
                        Per::Gpu | Per::Job => gpus,
                        Per::Node => nodes,
                    }
                    / 3.6e6
            })
            .collect();
        // Every class needs a level that survives it: plan the smallest job to find out.
        checkpoint::plan(&setting.model, &setting.levels, 1, 1e9, setting.rule)
            .map_err(|e| e.to_string())?;
        let start = world.now;
        let mut replay = std::collections::VecDeque::new();
        for e in &setting.model.events {
            let k = setting
                .model
                .classes
                .iter()
                .position(|c| c.name == e.class)
                .ok_or_else(|| format!("an event names no class '{}'", e.class))?;
            let at = start.saturating_add(ms(e.at_s));
            let repair = e.repair_s.map(ms);
            let (node, gpu) = match (e.node, e.gpu) {
                (Some(n), _) if (n as usize) < cluster.nodes.len() => (n, None),
                (_, Some(g)) if g < cluster.total_gpus => {
                    let (n, local) = locate(world, g);
                    (n, Some(local))
                }
                _ => {
                    return Err(format!(
                        "an event at {} s strikes a node or GPU the cluster lacks ({} nodes, {} GPUs)",
                        e.at_s,
                        cluster.nodes.len(),
                        cluster.total_gpus
                    ));
                }
            };
            replay.push_back((at, k, node, gpu, repair));
        }
        let mut f = Failures {
            rng: Rng::stream(seed, "failures"),
            next: Vec::new(),
            rate_ms,
            plans: BTreeMap::new(),
            origin: vec![0.0; world.jobs.len()],
            struck: vec![0; world.jobs.len()],
            repairs: BTreeSet::new(),
            down: BTreeMap::new(),
            measured: world.now,
            report: FailureReport {
                model: setting.model.name.clone(),
                start: world.now,
                by_class: setting
                    .model
                    .classes
                    .iter()
                    .map(|c| (c.name.clone(), 0))
                    .collect(),
                ..FailureReport::default()
            },
            switch_of: cluster.nodes.iter().map(|n| n.switch).collect(),
            shaped: (setting.model.classes.iter().enumerate())
                .filter(|(_, c)| c.shape.is_some())
                .map(|(k, _)| k)
                .collect(),
            setting,
            health: Vec::new(),
            armed: BTreeSet::new(),
            starts: vec![0; world.jobs.len()],
            ages_seed: Rng::stream(seed, "failure-ages").next_u64(),
            replay,
        };
        if !f.replay.is_empty() {
            f.shaped.clear(); // a replayed log stands for every class
        }
        // A replayed log stands for the rates.
        f.next = if f.replay.is_empty() {
            (0..f.rate_ms.len())
                .map(|k| world.now.saturating_add(f.draw(k)))
                .collect()
        } else {
            Vec::new()
        };
        Ok(f)
    }

    fn draw(&mut self, k: usize) -> Time {
        let r = self.rate_ms[k];
        if r > 0.0 {
            let dt = self.rng.exp(1.0 / r).ceil();
            if dt < 1e15 { dt as Time } else { Time::MAX / 2 }
        } else {
            Time::MAX / 2
        }
    }

    fn plan_for(&mut self, gpus: u32) -> &SizePlan {
        let s = &self.setting;
        self.plans.entry(gpus).or_insert_with(|| {
            let bytes = f64::from(gpus) * s.model.checkpoint_gb_per_gpu * 1e9;
            let p: Plan = checkpoint::plan(&s.model, &s.levels, gpus.max(1), bytes, s.rule)
                .expect("checked at the start: every class has a surviving level");
            let stalls: f64 = p.levels.iter().map(|l| l.overhead()).sum();
            SizePlan {
                interval_ms: p.levels.iter().map(|l| l.interval_s * 1000.0).collect(),
                recovery: p.recovery.clone(),
                down_ms: p
                    .levels
                    .iter()
                    .map(|l| ms(l.restore_s + s.model.restart_s))
                    .collect(),
                factor: 1.0 / (1.0 + stalls),
            }
        })
    }

    /// Job `j`'s speed after its checkpoints' stalls.
    pub fn factor(&mut self, world: &World, j: JobIdx) -> f64 {
        let gpus = world.rt[j as usize].placement.gpus().max(1);
        self.plan_for(gpus).factor
    }

    /// Job `j` (re)started now: its checkpoints count from here, and each shaped class
    /// is armed to strike when the job's running time reaches the age drawn for it.
    pub fn started(&mut self, world: &World, j: JobIdx) {
        let i = j as usize;
        if i >= self.origin.len() {
            self.origin.resize(world.jobs.len(), 0.0);
        }
        self.origin[i] = world.jobs[i].duration as f64 - world.rt[i].remaining;
        if self.shaped.is_empty() {
            return;
        }
        if i >= self.starts.len() {
            self.starts.resize(world.jobs.len(), 0);
        }
        self.starts[i] += 1;
        for n in 0..self.shaped.len() {
            let k = self.shaped[n];
            // The job's own stream gives the same age at every start.
            let age = self.draw_age(j, k);
            let left = age.saturating_sub(world.rt[i].executed);
            self.armed
                .insert((world.now.saturating_add(left), j, k, self.starts[i]));
        }
    }

    /// Job `j`'s age, ms of running, at which shaped class `k` strikes it: Weibull with
    /// the class's shape and a scale of 1/rate hours, from the job's own stream.
    fn draw_age(&self, j: JobIdx, k: usize) -> Time {
        let c = &self.setting.model.classes[k];
        let shape = c.shape.unwrap_or(1.0);
        if c.rate_per_hour <= 0.0 {
            return Time::MAX / 2;
        }
        let scale_ms = 3.6e6 / c.rate_per_hour;
        let mut rng = Rng::new(
            self.ages_seed ^ (u64::from(j) << 16 | k as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15),
        );
        let age = scale_ms * (-(1.0 - rng.f64()).ln()).powf(1.0 / shape);
        if age < 1e15 {
            (age.ceil() as Time).max(1)
        } else {
            Time::MAX / 2
        }
    }

    /// When the next failure strikes.
    pub fn next_failure(&self) -> Option<Time> {
        let armed = self.armed.first().map(|e| e.0);
        let drawn = self.next.iter().copied().chain(armed).min();
        let logged = self.replay.front().map(|e| e.0);
        match (drawn, logged) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// When the next down node comes back.
    pub fn next_repair(&self) -> Option<Time> {
        self.repairs.first().map(|&(t, _)| t)
    }

    /// Counts down GPU-time up to `now`.
    pub fn measure(&mut self, now: Time) {
        if now > self.measured {
            let gpus: u64 = self.down.values().map(|m| u64::from(m.count_ones())).sum();
            self.report.down_gpu_ms += (now - self.measured) as f64 * gpus as f64;
            self.measured = now;
        }
    }

    /// Handles the failures and repairs due at `now`: jobs to fail go to `fail`, for the
    /// backend to apply; down nodes' GPUs come back. Returns whether anything happened.
    pub fn due(&mut self, world: &mut World, now: Time, fail: &mut Vec<Struck>) -> bool {
        self.measure(now);
        let mut any = false;
        while let Some(&(t, n)) = self.repairs.first() {
            if t > now {
                break;
            }
            self.repairs.pop_first();
            if let Some(mask) = self.down.remove(&n) {
                let _ = world.state.release(&Placement {
                    parts: vec![(n, mask)],
                });
                any = true;
                self.health.push((n, true));
                self.mark(now);
            }
        }
        for k in 0..self.next.len() {
            while self.next[k] <= now {
                self.next[k] = self.next[k].saturating_add(self.draw(k));
                let cluster = &world.cluster;
                let (node, gpu) = match self.setting.model.classes[k].per {
                    Per::Node => (self.rng.below(cluster.nodes.len() as u64) as u32, None),
                    Per::Gpu | Per::Job => {
                        let g = self.rng.below(u64::from(cluster.total_gpus)) as u32;
                        let (n, local) = locate(world, g);
                        (n, Some(local))
                    }
                };
                any |= self.strike(world, k, node, gpu, None, now, fail);
            }
        }
        while self.replay.front().is_some_and(|e| e.0 <= now) {
            let (_, k, node, gpu, repair) = self.replay.pop_front().expect("checked");
            any |= self.strike(world, k, node, gpu, repair, now, fail);
        }
        while let Some(&(t, j, k, start)) = self.armed.first() {
            if t > now {
                break;
            }
            self.armed.pop_first();
            let i = j as usize;
            if self.starts[i] == start && world.rt[i].status == Status::Running {
                self.report.by_class[k].1 += 1;
                self.hit(world, k, j, fail);
                any = true;
            }
        }
        any
    }

    /// One failure of class `k` on `node` (on its GPU `gpu`, where the class counts
    /// GPUs or jobs) now; a node it takes down stays down `repair` ms (drawn when
    /// `None`).
    #[allow(clippy::too_many_arguments)]
    fn strike(
        &mut self,
        world: &mut World,
        k: usize,
        node: u32,
        gpu: Option<u32>,
        repair: Option<Time>,
        now: Time,
        fail: &mut Vec<Struck>,
    ) -> bool {
        let class = self.setting.model.classes[k].clone();
        if self.down.contains_key(&node) {
            return false; // already down: nothing there to strike
        }
        // The nodes it strikes: the node, or its whole switch.
        let nodes: Vec<u32> = if class.kind == Kind::Correlated {
            let sw = self.switch_of[node as usize];
            (0..self.switch_of.len() as u32)
                .filter(|&n| self.switch_of[n as usize] == sw)
                .collect()
        } else {
            vec![node]
        };
        let hit: Vec<JobIdx> = match (class.kind, class.per, gpu) {
            (Kind::Process | Kind::Fatal, Per::Job, Some(g)) => {
                // Per job: a uniform GPU stands for a uniform job, kept with
                // probability 1/its GPUs, so each job is struck at the class's rate.
                let mut on = on_gpu(world, node, g);
                on.retain(|&j| true_with(&mut self.rng, world.jobs[j as usize].gpus));
                on
            }
            (Kind::Process | Kind::Fatal, Per::Gpu, Some(g)) => on_gpu(world, node, g),
            _ => on_nodes(world, &nodes),
        };
        let repair = repair.unwrap_or_else(|| {
            if class.repair_hours > 0.0 {
                ms(self.rng.exp(class.repair_hours * 3.6e3)).max(1)
            } else {
                0
            }
        });
        let takes_down = matches!(class.kind, Kind::Node | Kind::Correlated) && repair > 0;
        if hit.is_empty() && !takes_down {
            return false;
        }
        self.report.by_class[k].1 += 1;
        for j in hit {
            self.hit(world, k, j, fail);
        }
        if takes_down {
            for n in nodes {
                if let std::collections::btree_map::Entry::Vacant(e) = self.down.entry(n) {
                    e.insert(0);
                    self.repairs.insert((now.saturating_add(repair), n));
                    self.health.push((n, false));
                }
            }
        }
        true
    }

    /// Class `k` strikes running job `j`: a fatal class ends it; any other rolls it
    /// back to its last checkpoint that survives the class.
    fn hit(&mut self, world: &mut World, k: usize, j: JobIdx, fail: &mut Vec<Struck>) {
        world.sync(j);
        let i = j as usize;
        self.report.job_failures += 1;
        if self.setting.model.classes[k].kind == Kind::Fatal {
            self.report.fatal_jobs += 1;
            self.report.fatal_gpu_ms += world.rt[i].attained as f64;
            fail.push(Struck {
                job: j,
                lost: 0.0,
                recovery: 0,
                give_up: Some(FATAL),
            });
            return;
        }
        let gpus = world.rt[i].placement.gpus().max(1);
        let done = world.jobs[i].duration as f64 - world.rt[i].remaining;
        let origin = self.origin.get(i).copied().unwrap_or(0.0).min(done);
        let plan = self.plan_for(gpus);
        let level = plan.recovery[k];
        let (tau, down) = (plan.interval_ms[level], plan.down_ms[level]);
        let since = done - origin;
        let lost = if tau.is_finite() && tau > 0.0 {
            since % tau
        } else {
            since
        };
        if i >= self.struck.len() {
            self.struck.resize(world.jobs.len(), 0);
        }
        self.struck[i] = self.struck[i].saturating_add(1);
        self.report.rework_gpu_ms += lost * f64::from(gpus);
        self.report.recovery_gpu_ms += down as f64 * f64::from(gpus);
        fail.push(Struck {
            job: j,
            lost,
            recovery: down,
            give_up: (self.struck[i] > MAX_FAILURES_PER_JOB).then_some(TOO_OFTEN),
        });
    }

    /// Nodes that went down (false) or came back (true) since the last call.
    pub fn take_health(&mut self) -> Vec<(u32, bool)> {
        std::mem::take(&mut self.health)
    }

    /// Adds the timeline's point for now (one per time stamp: the last word wins).
    fn mark(&mut self, now: Time) {
        let failures = self.report.total();
        let down = self.down.values().map(|m| u64::from(m.count_ones())).sum();
        match self.report.timeline.last_mut() {
            Some(p) if p.0 == now => *p = (now, failures, down),
            _ => self.report.timeline.push((now, failures, down)),
        }
    }

    /// Holds the free GPUs of down nodes (after the jobs there failed).
    pub fn hold_down(&mut self, world: &mut World) {
        for (&n, mask) in self.down.iter_mut() {
            let free = world.state.free_mask(n);
            if free != 0
                && world
                    .state
                    .allocate(&Placement {
                        parts: vec![(n, free)],
                    })
                    .is_ok()
            {
                *mask |= free;
            }
        }
        let now = world.now;
        self.mark(now);
    }

    /// The report, with the run's useful and allocated GPU time and checkpoint stalls.
    pub fn report(mut self, world: &World) -> FailureReport {
        self.measure(world.now);
        for (i, rt) in world.rt.iter().enumerate() {
            let job = &world.jobs[i];
            let done = (job.duration as f64 - rt.remaining).max(0.0);
            let gpus = f64::from(job.gpus);
            self.report.allocated_gpu_ms += rt.attained as f64;
            if rt.status != Status::Future {
                self.report.useful_gpu_ms += done * gpus;
            }
            if rt.attained > 0 {
                let f = self.plan_for(job.gpus.max(1)).factor;
                self.report.checkpoint_gpu_ms += rt.attained as f64 * (1.0 - f);
            }
        }
        self.report
    }
}

/// The node of cluster-wide GPU `g`, and its index there.
fn locate(world: &World, mut g: u32) -> (u32, u32) {
    for (n, node) in world.cluster.nodes.iter().enumerate() {
        if g < node.gpus {
            return (n as u32, g);
        }
        g -= node.gpus;
    }
    (0, 0)
}

/// Whether a draw with probability 1/`n` comes up.
fn true_with(rng: &mut Rng, n: u32) -> bool {
    rng.below(u64::from(n.max(1))) == 0
}

/// The running jobs on GPU `g` of node `n` (several where jobs share it), in index
/// order.
fn on_gpu(world: &World, n: u32, g: u32) -> Vec<JobIdx> {
    running_where(world, |&(pn, mask)| {
        pn == n && g < 64 && mask & (1 << g) != 0
    })
}

/// The running jobs with a part on any of `nodes`, in index order.
fn on_nodes(world: &World, nodes: &[u32]) -> Vec<JobIdx> {
    running_where(world, |(n, _)| nodes.contains(n))
}

/// The running jobs with a part (node, GPU mask) that `hit` picks, in index order.
fn running_where(world: &World, hit: impl Fn(&(u32, u64)) -> bool) -> Vec<JobIdx> {
    let mut v: Vec<JobIdx> = world
        .running()
        .iter()
        .copied()
        .filter(|&j| world.rt[j as usize].placement.parts.iter().any(&hit))
        .collect();
    v.sort_unstable();
    v
}
