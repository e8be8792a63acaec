//! `greenflow`: GreenFlow (Gu et al., IEEE TPDS 36(2), 2025) as reconstructed from its
//! abstract: minimise the mean JCT under a carbon budget, by giving elastic jobs GPU
//! counts that follow the grid's carbon intensity. GreenFlow has no public code and its
//! full text was not available; `../shared/specs/training-policies.md` §7 marks the
//! algorithm below as an inference, and `docs/policies/greenflow.md` says what each
//! choice is.
//!
//! * **The budget, as a price.** At each decision the budget left, over the work left
//!   (every arrived job's and, through `lookahead`, the trace's jobs to come, in
//!   GPU-seconds at each job's smallest level), is the carbon a unit of work may cost:
//!   κ grams per GPU-second. Spending less than planned raises κ, more lowers it.
//! * **Allocation by marginal progress per gram.** Jobs in order of least work left
//!   (the mean-JCT order) each grow level by level (1, 2, 4, … GPUs, up to the job's
//!   largest) while the next level's extra emission per extra work stays within κ and
//!   GPUs remain. At the current intensity a dirty hour makes even one GPU too dear, so
//!   jobs shrink or pause there and grow in clean hours. A budget below what the
//!   cleanest hours allow (the `floor` percentile) still runs jobs in those hours
//!   rather than never.
//! * **Placement** by buddy allocation of the power-of-two counts (ElasticFlow's), and
//!   each change of a job's GPUs costs ElasticFlow's restart overhead.
//! * It decides at every arrival and finish and on every hour, when the intensity
//!   changes.

use crate::ctx::{Ctx, Handles};
use crate::elasticflow::{InService, round_overhead};
use crate::spec::{Capabilities, Capability, ParamSpec, PolicySpec};
use crate::world::{JobIdx, Status};
use crate::{ParamError, Params, Policy, PolicyError};
use apiary_model::energy::{DEFAULT_INTENSITY, gpu_power};
use apiary_model::{Cluster, HOUR, Job, Placement, Scaling, Time};
use std::collections::BTreeMap;

const BUDGET: ParamSpec = ParamSpec {
    key: "budget_kg",
    default: "none",
    about: "the jobs' carbon budget for the run, kg CO2eq (`none`: no budget, carbon-agnostic)",
};
const FLOOR: ParamSpec = ParamSpec {
    key: "floor",
    default: "10",
    about: "percentile of the intensity series whose hours run jobs however small the budget left",
};
const OVERHEAD: ParamSpec = ParamSpec {
    key: "overhead",
    default: "true",
    about: "charge ElasticFlow's restart overhead each time a job's GPUs change",
};
const LIMITS: ParamSpec = ParamSpec {
    key: "power_limits",
    default: "1",
    about: "GPU power limits a job may run at, fractions of the top limit (e.g. 1,0.8,0.6): the GPU-level knob, by Zeus's time and power per network",
};

/// `greenflow`: its spec.
pub const GREENFLOW: PolicySpec = PolicySpec {
    name: "greenflow",
    about: "GreenFlow as reconstructed: mean JCT under a carbon budget; elastic GPU counts by marginal progress per gram as the intensity changes",
    capabilities: Capabilities::of(&[
        Capability::Elastic,
        Capability::Scaling,
        Capability::Durations,
        Capability::Carbon,
        Capability::Lookahead,
        Capability::Stalls,
        Capability::PowerLimits,
    ]),
    params: &[BUDGET, FLOOR, OVERHEAD, LIMITS],
    build: |p| Ok(Box::new(GreenFlow::new(p)?)),
};

/// Joules per kWh.
const J_PER_KWH: f64 = 3.6e6;

/// The policy.
#[derive(Debug)]
pub struct GreenFlow {
    budget_g: Option<f64>,
    floor: f64,
    overhead: bool,
    /// Power limits a job may run at, fractions of the top limit, the first 1.
    limits: Vec<f64>,
    /// Set at the first pass.
    run: Option<Run>,
    /// GPUs each job holds by the last decision, and their power there relative to the
    /// top limit.
    alloc: BTreeMap<JobIdx, (u32, f64)>,
    /// Carbon the allocations have emitted up to `settled`, grams.
    spent_g: f64,
    settled: Time,
    /// GPU-seconds of work of the trace's jobs not yet arrived.
    future: f64,
    /// Jobs arrived and not finished.
    active: Vec<JobIdx>,
}

/// What the run fixes: the cluster's shape and power, the intensity's floor.
#[derive(Debug)]
struct Run {
    node_gpus: u32,
    nodes: usize,
    total: u32,
    /// Busy power per GPU times the PUE, watts.
    watts: f64,
    /// The intensity of the `floor` percentile's hours, g/kWh.
    floor_ci: f64,
}

/// A job's table and its work left in GPU-seconds at its smallest level.
fn work<'c>(ctx: &'c Ctx<'_>, j: JobIdx) -> Option<(&'c Scaling, f64)> {
    let job = ctx.job(j);
    let s = job.extras().scaling.as_ref()?;
    let (g0, t0) = s.levels[0];
    let ref_tput = s.tput(job.gpus).unwrap_or(t0);
    let iters = ctx.remaining(j) / 1000.0 * ref_tput;
    Some((s, iters * g0 as f64 / t0))
}

/// The GPU-seconds of work of `job` whole, at its smallest level.
fn whole_work(job: &Job) -> f64 {
    job.extras().scaling.as_ref().map_or(0.0, |s| {
        let (g0, t0) = s.levels[0];
        let iters = job.duration as f64 / 1000.0 * s.tput(job.gpus).unwrap_or(t0);
        iters * g0 as f64 / t0
    })
}

impl GreenFlow {
    /// From `budget_kg`, `floor` and `overhead`.
    pub fn new(p: &Params) -> Result<GreenFlow, ParamError> {
        let text = p.text(&BUDGET);
        let budget_g = if text == "none" {
            None
        } else {
            Some(p.f64(&BUDGET)? * 1000.0)
        };
        let floor = p.f64(&FLOOR)?;
        if floor > 100.0 {
            return Err(ParamError::Bad {
                key: FLOOR.key.into(),
                value: p.text(&FLOOR).into(),
                message: "a percentile, 0 to 100".into(),
            });
        }
        let mut limits = p.f64_list(&LIMITS)?;
        if limits.iter().any(|f| !(0.3..=1.0).contains(f)) {
            return Err(ParamError::Bad {
                key: LIMITS.key.into(),
                value: p.text(&LIMITS).into(),
                message: "fractions of the top power limit, 0.3 to 1".into(),
            });
        }
        // The top limit is always an option, and tried first.
        limits.retain(|&f| f < 1.0);
        limits.insert(0, 1.0);
        Ok(GreenFlow {
            budget_g,
            floor,
            overhead: p.bool(&OVERHEAD)?,
            limits,
            run: None,
            alloc: BTreeMap::new(),
            spent_g: 0.0,
            settled: 0,
            future: 0.0,
            active: Vec::new(),
        })
    }

    /// Charges the allocations' carbon up to `now`.
    fn settle(&mut self, ctx: &mut Ctx<'_>, now: Time) -> Result<(), PolicyError> {
        let Some(run) = &self.run else {
            self.settled = now;
            return Ok(());
        };
        if now > self.settled {
            let gpus: f64 = self.alloc.values().map(|&(n, p)| n as f64 * p).sum();
            let c = ctx.carbon()?;
            let integral = c.series().map_or_else(
                || DEFAULT_INTENSITY * (now - self.settled) as f64 / HOUR as f64,
                |s| s.integral(self.settled, now),
            );
            // kW x (g/kWh)·h = g.
            self.spent_g += gpus * run.watts / 1000.0 * integral;
        }
        self.settled = now;
        Ok(())
    }

    fn start_run(&mut self, ctx: &mut Ctx<'_>) -> Result<(), PolicyError> {
        let c = ctx.cluster();
        let node_gpus = c.nodes.first().map_or(0, |n| n.gpus);
        if node_gpus == 0
            || !node_gpus.is_power_of_two()
            || c.nodes.iter().any(|n| n.gpus != node_gpus)
        {
            return Err(PolicyError::Cluster {
                policy: "greenflow",
                reason: "buddy placement needs nodes of one power-of-two GPU count".into(),
            });
        }
        let (nodes, total) = (c.nodes.len(), c.total_gpus);
        let busy = gpu_power(&c.nodes[0].gpu_type).busy_w;
        let future: f64 = ctx.lookahead()?.all_jobs().iter().map(whole_work).sum();
        let carbon = ctx.carbon()?;
        let pue = carbon.pue();
        let floor_ci = carbon
            .series()
            .map_or(DEFAULT_INTENSITY, |s| s.percentile(self.floor));
        // Jobs already admitted leave the jobs to come.
        let arrived: f64 = self.active.iter().map(|&j| whole_work(ctx.job(j))).sum();
        self.future = future - arrived;
        self.run = Some(Run {
            node_gpus,
            nodes,
            total,
            watts: busy * pue,
            floor_ci,
        });
        Ok(())
    }

    /// Each active job's GPU count and power limit: least work left first, each growing
    /// level by level while the marginal carbon per marginal work is within the price
    /// and GPUs remain. At each level the job runs at the power limit whose step from
    /// where it stands costs least carbon per work (Zeus's time and power for its
    /// network); with only the top limit, level by level as the counts alone.
    fn counts(
        &self,
        ctx: &mut Ctx<'_>,
        now: Time,
    ) -> Result<Vec<(JobIdx, u32, f64, f64)>, PolicyError> {
        // Time and power ratios of each limit below the top, per active job (Zeus's
        // for its network), looked up before the jobs' tables are borrowed.
        let mut ratios: BTreeMap<JobIdx, Vec<(f64, f64, f64)>> = BTreeMap::new();
        if self.limits.len() > 1 {
            let power = ctx.power()?;
            for &j in &self.active {
                let r = self.limits[1..]
                    .iter()
                    .map(|&f| {
                        let (t, p) = power.scaling(j, f);
                        (f, t, p)
                    })
                    .collect();
                ratios.insert(j, r);
            }
        }
        let run = self.run.as_ref().expect("started");
        let ci = ctx.carbon()?.at(now);
        // Grams per GPU-second now, and at the floor's hours.
        let cost = run.watts * ci / J_PER_KWH;
        let floor_cost = run.watts * run.floor_ci / J_PER_KWH;
        let mut jobs: Vec<(f64, JobIdx, &Scaling)> = Vec::with_capacity(self.active.len());
        let mut left = self.future;
        for &j in &self.active {
            let (s, w) = work(ctx, j).ok_or_else(|| no_table(ctx, j))?;
            left += w;
            jobs.push((w, j, s));
        }
        let price = match self.budget_g {
            None => f64::INFINITY,
            Some(b) if left > 0.0 => ((b - self.spent_g) / left).max(floor_cost),
            Some(_) => floor_cost,
        };
        jobs.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        // Sized to the nodes in service: while one is down, the jobs go on without it.
        let mut free = run.total - ctx.free().down_gpus();
        let mut out = Vec::with_capacity(jobs.len());
        let top = [(1.0, 1.0, 1.0)];
        for (_, j, s) in jobs {
            let below = ratios.get(&j).map_or(&[][..], Vec::as_slice);
            let (g0, t0) = s.levels[0];
            // Where the job stands: GPUs, iterations/s, grams/s, limit, power ratio.
            let (mut n, mut tput, mut grams) = (0u32, 0.0f64, 0.0f64);
            let (mut limit, mut pw) = (1.0, 1.0);
            for &(g, t) in &s.levels {
                if !g.is_power_of_two() || g > s.max_gpus.max(g0) || g > free {
                    continue;
                }
                // The limit whose step from here costs least per work: extra grams per
                // second over extra work per second (GPU-seconds at the smallest level).
                let mut best: Option<(f64, f64, f64, f64, f64, f64)> = None;
                for &(f, time, p) in top.iter().chain(below) {
                    let rate = t / time;
                    if rate <= tput {
                        continue;
                    }
                    let g_s = g as f64 * cost * p;
                    // At the top limit from the top limit, as the counts alone price it.
                    let extra_g = if p == 1.0 && pw == 1.0 {
                        (g - n) as f64 * cost
                    } else {
                        g_s - grams
                    };
                    let extra_work = (rate - tput) * g0 as f64 / t0;
                    if best.is_none_or(|b| extra_g * b.1 < b.0 * extra_work) {
                        best = Some((extra_g, extra_work, rate, g_s, f, p));
                    }
                }
                let Some((extra_g, extra_work, rate, g_s, f, p)) = best else {
                    continue;
                };
                if extra_g > price * extra_work {
                    break;
                }
                (n, tput, grams, limit, pw) = (g, rate, g_s, f, p);
            }
            free -= n;
            out.push((j, n, limit, pw));
        }
        Ok(out)
    }
}

fn no_table(ctx: &Ctx<'_>, j: JobIdx) -> PolicyError {
    PolicyError::Job {
        policy: "greenflow",
        job: ctx.job(j).id.to_string(),
        reason: "it has no throughput table (GreenFlow resizes jobs along ElasticFlow's tables)"
            .into(),
    }
}

impl Policy for GreenFlow {
    fn spec(&self) -> &'static PolicySpec {
        &GREENFLOW
    }
    fn capabilities(&self) -> Capabilities {
        // Power limits only when it may set some below the top.
        if self.limits.len() > 1 {
            GREENFLOW.capabilities
        } else {
            GREENFLOW
                .capabilities
                .minus(Capabilities::of(&[Capability::PowerLimits]))
        }
    }
    fn attach(&mut self, _cluster: &Cluster) -> Result<(), PolicyError> {
        Ok(())
    }
    fn admit(&mut self, ctx: &Ctx<'_>, j: JobIdx) -> Result<(), PolicyError> {
        if ctx.job(j).extras().scaling.is_none() {
            return Err(no_table(ctx, j));
        }
        if self.run.is_some() {
            self.future -= whole_work(ctx.job(j));
        }
        self.active.push(j);
        Ok(())
    }
    fn on_finish(&mut self, _ctx: &Ctx<'_>, _j: JobIdx) {
        // Its carbon up to now is settled at the pass that follows, from `alloc`.
    }
    fn schedule(&mut self, ctx: &mut Ctx<'_>) -> Result<(), PolicyError> {
        let now = ctx.now();
        if self.run.is_none() {
            self.start_run(ctx)?;
        }
        self.settle(ctx, now)?;
        self.active.retain(|&j| ctx.status(j) != Status::Finished);
        self.alloc.retain(|&j, _| ctx.status(j) == Status::Running);
        let counts = self.counts(ctx, now)?;
        if self.limits.len() > 1 {
            let mut power = ctx.power()?;
            for &(j, n, f, _) in &counts {
                if n > 0 {
                    power.set(j, f);
                }
            }
        }
        let run = self.run.as_ref().expect("started");
        // Stable order, so an unchanged set keeps its GPUs.
        let mut sized: Vec<(JobIdx, u32)> = counts
            .iter()
            .filter(|c| c.1 > 0)
            .map(|c| (c.0, c.1))
            .collect();
        sized.sort_by_key(|c| c.0);
        let placed = InService::of(ctx.free(), run.nodes, run.node_gpus)
            .buddy(&sized, false)
            .ok_or_else(|| PolicyError::Cluster {
                policy: "greenflow",
                reason: "buddy placement failed for counts within the cluster".into(),
            })?;
        let mut changes: Vec<(JobIdx, Placement)> = placed;
        for &(j, n, _, _) in &counts {
            if n == 0 && ctx.status(j) == Status::Running {
                changes.push((j, Placement::default()));
            }
        }
        let moved: Vec<(JobIdx, u32)> = changes
            .iter()
            .filter(|(j, p)| p.gpus() > 0 && ctx.rt(*j).placement != *p)
            .map(|(j, p)| (*j, p.gpus()))
            .collect();
        if !ctx.elastic()?.reassign(&changes) {
            // Its plans fit the nodes in service, so this one needs GPUs held outside
            // its jobs otherwise (a stopping job's, live): the jobs keep what they
            // hold, and the next hour plans again.
            if !self.active.is_empty() {
                ctx.wake_at((now / HOUR + 1) * HOUR);
            }
            return Ok(());
        }
        if self.overhead {
            let total = run.total;
            let mut stalls = ctx.stalls()?;
            for &(j, n) in &moved {
                stalls.stall(j, round_overhead(total, n, true, false) as Time);
            }
        }
        self.alloc = counts
            .into_iter()
            .filter(|c| c.1 > 0)
            .map(|(j, n, _, p)| (j, (n, p)))
            .collect();
        if !self.active.is_empty() {
            ctx.wake_at((now / HOUR + 1) * HOUR);
        }
        Ok(())
    }
}
