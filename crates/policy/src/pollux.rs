//! Pollux (OSDI'21), as its artifact's simulator defines it (`petuum/adaptdl`,
//! branch `osdi21-artifact`, `simulator/pollux.py`): every interval, a genetic search
//! over replica-to-node assignments for all active jobs maximises the power mean
//! (p = -1) of the jobs' goodput speed-ups, while each job (AdaptDL, simulated by the
//! driver as [`apiary_model::adaptive::Agent`]) tunes its own batch size.
//!
//! * **Speed-up.** A job that has run reports its fitted goodput model; its speed-up on
//!   `n` nodes with `r` replicas is its best goodput there over its best goodput on one
//!   node with the fair share `ceil(GPUs / jobs)` of replicas. A job that has not run
//!   yet gets `r / fair share`. Speed-ups are scaled so that one node's worth of GPUs
//!   counts 1, and a job whose allocation changes is penalised by
//!   `max(age - 30·restarts, 0) / (age + 30)`.
//! * **Search.** NSGA-II on two objectives (that fitness, and cluster utility: summed
//!   speed-ups over the GPUs of nodes in use) with the artifact's operators: one-point
//!   crossover over jobs in 90 % of matings (pymoo's default); mutation that resets a
//!   job's row to its current allocation (10 %), zeroes entries, and adds replicas
//!   where GPUs are free; repair that allows one distributed job per node, caps
//!   replicas per job (twice the most it has run on, at most 64) and per node (jobs
//!   ordered by attained service then arrival keep theirs). Population 100, 100
//!   generations, seeded from the last interval's Pareto front; the front's fittest
//!   member is applied.
//!
//! The artifact draws from NumPy's global generator unseeded, so its runs differ from
//! each other; ours draw from a stream of the run's seed and repeat exactly.

use crate::PolicyError;
use crate::ctx::{Ctx, Handles};
use crate::runs::total_key;
use crate::spec::{Capabilities, Capability, ParamSpec, PolicySpec};
use crate::world::{JobIdx, Status};
use crate::{ParamError, Params, Policy};
use apiary_model::adaptive::Goodput;
use apiary_model::{Chance, Placement, Rng, SECOND, Time};
use std::collections::BTreeMap;
/// `pollux`: its spec.
pub const POLLUX: PolicySpec = PolicySpec {
    name: "pollux",
    about: "Pollux: genetic search over replica placements maximising the power mean of goodput speed-ups; jobs tune their own batch (Pollux workloads; live, --adaptive jobs that report AdaptDL's hints)",
    capabilities: Capabilities::of(&[Capability::Elastic, Capability::Adaptive]),
    params: POLLUX_PARAMS,
    build: |p| Ok(Box::new(Pollux::new(p)?)),
};

const POLLUX_PARAMS: &[ParamSpec] = &[INTERVAL, POPULATION, GENERATIONS, SEED, RESTART_PENALTY];

const INTERVAL: ParamSpec = ParamSpec {
    key: "interval",
    default: "60",
    about: "seconds between reallocations (the artifact's --interval); jobs also advance in steps of it",
};

const POPULATION: ParamSpec = ParamSpec {
    key: "population",
    default: "100",
    about: "NSGA-II population (the artifact's pop_size)",
};

const GENERATIONS: ParamSpec = ParamSpec {
    key: "generations",
    default: "100",
    about: "NSGA-II generations per interval (the artifact's n_gen)",
};

const RESTART_PENALTY: ParamSpec = ParamSpec {
    key: "restart_penalty",
    default: "30",
    about: "seconds each restart is charged in the speed-up penalty max(age - this·restarts, 0) / (age + this) (the artifact's 30)",
};

const SEED: ParamSpec = ParamSpec {
    key: "seed",
    default: "0",
    about: "seed of the search's random stream (the artifact's NumPy draws are unseeded)",
};

/// The Pollux policy.
pub struct Pollux {
    interval: Time,
    pop: usize,
    gens: usize,
    rng: Rng,
    /// Last interval's Pareto front, by job.
    prev: Vec<(Vec<JobIdx>, Vec<u8>)>,
    /// The interval's end the last pass asked to be woken at.
    waited_for: Option<Time>,
    /// Seconds a restart is charged.
    restart_penalty: f64,
}

impl Pollux {
    /// Parameters as [`POLLUX`] lists them.
    pub fn new(p: &Params) -> Result<Pollux, ParamError> {
        let interval = p.secs(&INTERVAL, 1.0)?;
        // The genetic search's cost grows with both; the artifact uses 100 each.
        let pop = p.u64_in(&POPULATION, 2..=100_000)? as usize;
        let gens = p.u64_in(&GENERATIONS, 1..=100_000)? as usize;
        Ok(Pollux {
            interval,
            pop,
            gens,
            rng: Rng::stream(p.u64(&SEED)?, "pollux"),
            prev: Vec::new(),
            waited_for: None,
            restart_penalty: p.secs(&RESTART_PENALTY, 0.0)? as f64 / SECOND as f64,
        })
    }
}

/// pymoo's default crossover probability (`Crossover(prob=0.9)` in the 0.4 series the
/// artifact imports from `pymoo.model`).
const CROSSOVER_PROB: f64 = 0.9;

/// A job's reported goodput model: the model, its largest batch, its per-GPU batch
/// range and its goodput at the fair share (the speed-up's denominator).
type Model = (Goodput, f64, (u32, u32), f64);

/// One round's problem: jobs × nodes.
struct Problem {
    jobs: usize,
    nodes: usize,
    cap: Vec<u8>,
    base: Vec<u8>,
    max_replicas: Vec<u32>,
    /// Scaled-speed-up factor: nodes / GPUs.
    scale: f64,
    penalty: Vec<f64>,
    fair: f64,
    models: Vec<Option<Model>>,
    /// Lazily filled speed-ups, `[job][nodes * stride + replicas]`; NaN when unknown.
    memo: Vec<Vec<f64>>,
    stride: usize,
    /// Per-node buffers the operators reuse rather than allocate per candidate.
    scratch: Scratch,
}

/// Per-node working space of one problem's operators.
#[derive(Default)]
struct Scratch {
    used: Vec<bool>,
    load: Vec<u32>,
    holding: Vec<u32>,
    /// 0xFF where an earlier distributed job holds the node, else 0.
    held: Vec<u8>,
    order: Vec<usize>,
}

impl Scratch {
    /// `v` cleared to `n` copies of `x`.
    fn fill<T: Copy>(v: &mut Vec<T>, n: usize, x: T) -> &mut Vec<T> {
        v.clear();
        v.resize(n, x);
        v
    }
}

impl Problem {
    fn speedup(&mut self, j: usize, n: usize, r: usize) -> f64 {
        if r == 0 {
            return 0.0;
        }
        let k = n * self.stride + r;
        let v = self.memo[j][k];
        if !v.is_nan() {
            return v;
        }
        let v = match &self.models[j] {
            None => r as f64 / self.fair,
            Some((g, max_batch, range, base)) => {
                g.optimize(n as u32, r as u32, *max_batch, *range, true)
                    .goodput
                    / base
            }
        };
        self.memo[j][k] = v;
        v
    }

    /// (negated fitness, negated utility), both minimised.
    fn evaluate(&mut self, x: &[u8]) -> [f64; 2] {
        let (jn, nn) = (self.jobs, self.nodes);
        let mut inv = 0.0;
        let mut sum_speedup = 0.0;
        let mut sc = std::mem::take(&mut self.scratch);
        let used = Scratch::fill(&mut sc.used, nn, false);
        for j in 0..jn {
            let row = &x[j * nn..(j + 1) * nn];
            let base = &self.base[j * nn..(j + 1) * nn];
            let (mut r, mut n, mut diff) = (0u32, 0u32, 0u8);
            // Without branches: which entries are non-zero is as good as random.
            for ((u, &c), &b) in used.iter_mut().zip(row).zip(base) {
                r += c as u32;
                n += u32::from(c > 0);
                *u |= c > 0;
                diff |= c ^ b;
            }
            let sp = self.speedup(j, n as usize, r as usize);
            sum_speedup += sp;
            let mut s = sp * self.scale;
            if diff != 0 {
                s *= self.penalty[j];
            }
            inv += 1.0 / (s + 1e-3);
        }
        let mean = 1.0 / (inv / jn as f64);
        let total: f64 = (0..nn)
            .filter(|&k| used[k])
            .map(|k| self.cap[k] as f64)
            .sum();
        self.scratch = sc;
        let util = if total > 0.0 {
            sum_speedup / total
        } else {
            0.0
        };
        [-mean, -util]
    }

    fn mutate(&mut self, x: &mut [u8], rng: &mut Rng) {
        let (jn, nn) = (self.jobs, self.nodes);
        let tenth = Chance::new(0.1);
        for (row, base) in x.chunks_exact_mut(nn).zip(self.base.chunks_exact(nn)) {
            if rng.hits(tenth) {
                row.copy_from_slice(base);
            }
        }
        for row in x.chunks_exact_mut(nn) {
            if rng.hits(tenth) {
                for c in row {
                    let zero = rng.hits(tenth);
                    *c = if zero { 0 } else { *c };
                }
            } else {
                // Probability 0: the draws are made (the stream stays the artifact's
                // order) but cannot change anything.
                rng.skip(nn);
            }
        }
        // The per-node probabilities, computed once per node: p1 for every job, and
        // p1 + p2 - p1 p2 for a job already on the node (the same expression as
        // per job, so the same bits).
        let p1 = 1.0 / jn as f64;
        let p1_chance = Chance::new(p1);
        // Each node's load and holders, in one pass over the rows: walking node k
        // below changes column k only, so the later columns' counts stay true.
        let mut sc = std::mem::take(&mut self.scratch);
        let used = Scratch::fill(&mut sc.load, nn, 0);
        let holding = Scratch::fill(&mut sc.holding, nn, 0);
        for row in x.chunks_exact(nn) {
            for ((u, h), &c) in used.iter_mut().zip(holding.iter_mut()).zip(row) {
                *u += c as u32;
                *h += u32::from(c > 0);
            }
        }
        for k in 0..nn {
            let holders = holding[k] as usize;
            if used[k] >= self.cap[k] as u32 {
                // Neither probability applies: one draw per job, none can hit.
                rng.skip(jn);
                continue;
            }
            let p2 = 1.0 / holders.max(1) as f64;
            let held = Chance::new(p1 + p2 - p1 * p2);
            let hi = self.cap[k] as u64;
            for j in 0..jn {
                let c = &mut x[j * nn + k];
                let p = if *c > 0 { held } else { p1_chance };
                if rng.hits(p) {
                    let lo = *c as u64;
                    if hi >= lo {
                        *c = (lo + rng.below(hi - lo + 1)) as u8;
                    }
                }
            }
        }
        self.scratch = sc;
    }

    fn repair(&mut self, x: &mut [u8], rng: &mut Rng) {
        let (jn, nn) = (self.jobs, self.nodes);
        // Per job, in order: one distributed job per node (later jobs lose their
        // replicas there), then at most max_replicas and 16 nodes, trimmed in a random
        // node order. A job's trimming touches its own row only, so doing both for a
        // job before the next is what doing each for every job in turn gives.
        let mut sc = std::mem::take(&mut self.scratch);
        let (held, order) = (Scratch::fill(&mut sc.held, nn, 0), &mut sc.order);
        let nonzero = |row: &[u8]| row.iter().map(|&c| u32::from(c > 0)).sum::<u32>();
        for j in 0..jn {
            let row = &mut x[j * nn..(j + 1) * nn];
            let mut on = nonzero(row);
            if on > 1 {
                // Without branches: a held node's entry is zeroed (zero stays zero),
                // and a non-zero entry holds its node for the jobs after.
                for (h, c) in held.iter_mut().zip(row.iter_mut()) {
                    let holds = if *c > 0 { 0xFF } else { 0 };
                    *c &= !*h;
                    *h |= holds;
                }
                on = nonzero(row);
            }
            let total: u32 = row.iter().map(|&c| c as u32).sum();
            if total <= self.max_replicas[j] && on <= 16 {
                // Nothing to trim: the order's draws are still made.
                rng.skip(nn.saturating_sub(1));
                continue;
            }
            order.clear();
            order.extend(0..nn);
            rng.shuffle(order.as_mut_slice());
            let mut left = self.max_replicas[j];
            let mut nodes_left = 16u32;
            for &k in order.iter() {
                let c = &mut row[k];
                let keep = (*c as u32).min(left);
                let keep = if keep > 0 && nodes_left == 0 { 0 } else { keep };
                if keep > 0 {
                    nodes_left -= 1;
                }
                left -= keep;
                *c = keep as u8;
            }
        }
        // Node capacity: jobs earlier in order keep theirs. A node within its capacity
        // keeps everything, so only the others are walked job by job.
        let load = Scratch::fill(&mut sc.load, nn, 0);
        for row in x.chunks_exact(nn) {
            for (l, &c) in load.iter_mut().zip(row) {
                *l += c as u32;
            }
        }
        for k in 0..nn {
            if load[k] <= self.cap[k] as u32 {
                continue;
            }
            let mut left = self.cap[k];
            for j in 0..jn {
                let c = &mut x[j * nn + k];
                let keep = (*c).min(left);
                left -= keep;
                *c = keep;
            }
        }
        self.scratch = sc;
    }
}

struct Ind {
    x: Vec<u8>,
    f: [f64; 2],
    rank: usize,
    crowd: f64,
}

fn dominates(a: &[f64; 2], b: &[f64; 2]) -> bool {
    a[0] <= b[0] && a[1] <= b[1] && (a[0] < b[0] || a[1] < b[1])
}

/// Fronts of a two-objective minimisation, best first (sort by the first objective,
/// then place each point in the first front none of whose members dominate it).
fn fronts(pop: &[Ind]) -> Vec<Vec<usize>> {
    let mut idx: Vec<(u64, u64, usize)> = pop
        .iter()
        .enumerate()
        .map(|(i, p)| (total_key(p.f[0]), total_key(p.f[1]), i))
        .collect();
    idx.sort_unstable();
    let mut out: Vec<Vec<usize>> = Vec::new();
    // Per front, its least second objective and the least first objective among the
    // members that have it: in this order every member's first objective is at most
    // the point's, so a front dominates the point exactly when one of its members is
    // below it in the second objective, or level with it there and below it in the
    // first (a member equal to the point does not dominate it).
    let mut best: Vec<(f64, f64)> = Vec::new();
    for (_, _, i) in idx {
        let [f0, f1] = pop[i].f;
        let k = best
            .iter()
            .position(|&(b1, b0)| !(b1 < f1 || (b1 == f1 && b0 < f0)))
            .unwrap_or(out.len());
        if k == out.len() {
            out.push(Vec::new());
            best.push((f1, f0));
        } else if f1 < best[k].0 {
            best[k] = (f1, f0);
        }
        out[k].push(i);
    }
    out
}

/// NSGA-II crowding distance within a front (boundary points infinite, duplicates 0).
fn crowding(pop: &[Ind], front: &[usize]) -> Vec<f64> {
    let n = front.len();
    if n <= 2 {
        return vec![f64::INFINITY; n];
    }
    let mut cd = vec![0.0; n];
    // Duplicated objective vectors count once (the artifact's pymoo drops them): the
    // first of each in front order stands for it, and the rest keep 0.
    let mut by_f: Vec<(u64, u64, usize)> = front
        .iter()
        .enumerate()
        .map(|(a, &i)| (total_key(pop[i].f[0]), total_key(pop[i].f[1]), a))
        .collect();
    by_f.sort_unstable();
    let mut uniq: Vec<usize> = Vec::with_capacity(n);
    for (i, &(_, _, a)) in by_f.iter().enumerate() {
        if i == 0 || pop[front[by_f[i - 1].2]].f != pop[front[a]].f {
            uniq.push(a);
        }
    }
    uniq.sort_unstable();
    let mut keyed: Vec<(u64, usize)> = Vec::with_capacity(uniq.len());
    let mut s: Vec<usize> = Vec::with_capacity(uniq.len());
    for m in 0..2 {
        // By the objective, ties in front order (what a stable sort of `uniq` gives).
        keyed.clear();
        keyed.extend(uniq.iter().map(|&a| (total_key(pop[front[a]].f[m]), a)));
        keyed.sort_unstable();
        s.clear();
        s.extend(keyed.iter().map(|k| k.1));
        let lo = pop[front[s[0]]].f[m];
        let hi = pop[front[s[s.len() - 1]]].f[m];
        let norm = hi - lo;
        for (i, &a) in s.iter().enumerate() {
            if i == 0 || i == s.len() - 1 {
                cd[a] = f64::INFINITY;
            } else if norm > 0.0 {
                let d = pop[front[s[i + 1]]].f[m] - pop[front[s[i - 1]]].f[m];
                cd[a] += d / norm / 2.0;
            }
        }
    }
    cd
}

/// Keeps the best `n` by rank, then crowding (random among equal crowding); the
/// others' candidates go to `dropped`.
fn survive(pop: Vec<Ind>, n: usize, rng: &mut Rng, dropped: &mut Vec<Vec<u8>>) -> Vec<Ind> {
    let fr = fronts(&pop);
    let mut keep: Vec<(usize, usize, f64)> = Vec::with_capacity(n);
    for (rank, front) in fr.iter().enumerate() {
        if keep.len() >= n {
            break;
        }
        let cd = crowding(&pop, front);
        let mut order: Vec<usize> = (0..front.len()).collect();
        if keep.len() + front.len() > n {
            rng.shuffle(&mut order);
            // Largest crowding first, ties in the shuffled order.
            let mut keyed: Vec<(u64, usize, usize)> = order
                .iter()
                .enumerate()
                .map(|(k, &o)| (u64::MAX - total_key(cd[o]), k, o))
                .collect();
            keyed.sort_unstable();
            order.clear();
            order.extend(keyed.iter().take(n - keep.len()).map(|k| k.2));
        }
        for o in order {
            keep.push((front[o], rank, cd[o]));
        }
    }
    let mut slots: Vec<Option<Ind>> = pop.into_iter().map(Some).collect();
    let kept = keep
        .into_iter()
        .filter_map(|(i, rank, crowd)| {
            slots[i].take().map(|mut ind| {
                ind.rank = rank;
                ind.crowd = crowd;
                ind
            })
        })
        .collect();
    dropped.extend(slots.into_iter().flatten().map(|ind| ind.x));
    kept
}

/// pymoo's one-point crossover over jobs (rows of `nodes` entries): the children swap
/// the rows before a random job, in [`CROSSOVER_PROB`] of matings; otherwise they are
/// the parents, passed on to mutation unchanged.
fn crossover(
    a: &[u8],
    b: &[u8],
    jobs: usize,
    rng: &mut Rng,
    spare: &mut Vec<Vec<u8>>,
) -> [Vec<u8>; 2] {
    let point = rng.below(jobs as u64) as usize * (a.len() / jobs.max(1));
    let mut c1 = copy_of(a, spare);
    let mut c2 = copy_of(b, spare);
    if rng.f64() < CROSSOVER_PROB {
        c1[..point].copy_from_slice(&b[..point]);
        c2[..point].copy_from_slice(&a[..point]);
    }
    [c1, c2]
}

/// `x` in a spare buffer, so that candidates are not allocated one by one.
fn copy_of(x: &[u8], spare: &mut Vec<Vec<u8>>) -> Vec<u8> {
    let mut v = spare.pop().unwrap_or_default();
    v.clear();
    v.extend_from_slice(x);
    v
}

fn tournament(pop: &[Ind], a: usize, b: usize, rng: &mut Rng) -> usize {
    if dominates(&pop[a].f, &pop[b].f) {
        return a;
    }
    if dominates(&pop[b].f, &pop[a].f) {
        return b;
    }
    match pop[a].crowd.total_cmp(&pop[b].crowd) {
        std::cmp::Ordering::Greater => a,
        std::cmp::Ordering::Less => b,
        std::cmp::Ordering::Equal => {
            if rng.below(2) == 0 {
                a
            } else {
                b
            }
        }
    }
}

impl Pollux {
    fn search(&mut self, pb: &mut Problem, init: Vec<Vec<u8>>) -> Vec<Ind> {
        let rng = &mut self.rng;
        let mut pop: Vec<Ind> = Vec::new();
        // Membership only, so the hasher cannot change a result.
        let mut seen: std::collections::HashSet<Vec<u8>, foldhash::fast::FixedState> =
            std::collections::HashSet::default();
        for mut x in init {
            pb.repair(&mut x, rng);
            if seen.insert(x.clone()) {
                let f = pb.evaluate(&x);
                pop.push(Ind {
                    x,
                    f,
                    rank: 0,
                    crowd: 0.0,
                });
            }
        }
        let len = pop.len();
        let mut dropped = Vec::new();
        pop = survive(pop, len, rng, &mut dropped);
        let jn = pb.jobs;
        // Buffers of candidates that were dropped or not kept, for the next ones.
        let mut spare: Vec<Vec<u8>> = Vec::new();
        let mut off: Vec<Ind> = Vec::with_capacity(self.pop);
        let mut perm: Vec<usize> = Vec::new();
        for _ in 1..self.gens {
            for _ in 0..100 {
                if off.len() >= self.pop {
                    break;
                }
                let matings = (self.pop - off.len()).div_ceil(2);
                // Binary tournaments over shuffled copies of the population.
                let need = matings * 4;
                perm.clear();
                while perm.len() < need {
                    let start = perm.len();
                    perm.extend(0..pop.len());
                    rng.shuffle(&mut perm[start..]);
                }
                for m in 0..matings {
                    let p1 = tournament(&pop, perm[4 * m], perm[4 * m + 1], rng);
                    let p2 = tournament(&pop, perm[4 * m + 2], perm[4 * m + 3], rng);
                    for mut c in crossover(&pop[p1].x, &pop[p2].x, jn, rng, &mut spare) {
                        pb.mutate(&mut c, rng);
                        pb.repair(&mut c, rng);
                        if off.len() < self.pop && !seen.contains(&c) {
                            seen.insert(copy_of(&c, &mut spare));
                            let f = pb.evaluate(&c);
                            off.push(Ind {
                                x: c,
                                f,
                                rank: 0,
                                crowd: 0.0,
                            });
                        } else {
                            spare.push(c);
                        }
                    }
                }
            }
            pop.append(&mut off);
            // `seen` held the population and its offspring; it keeps the survivors.
            pop = survive(pop, self.pop, rng, &mut dropped);
            for x in dropped.drain(..) {
                spare.extend(seen.take(&x));
                spare.push(x);
            }
        }
        pop.retain(|i| i.rank == 0);
        pop
    }
}

impl Policy for Pollux {
    fn spec(&self) -> &'static PolicySpec {
        &POLLUX
    }

    fn adaptive(&self) -> Option<crate::AdaptiveHosting> {
        Some(crate::AdaptiveHosting {
            tunes_batch: true,
            step: Some(self.interval),
        })
    }

    fn attach(&mut self, cluster: &apiary_model::Cluster) -> Result<(), PolicyError> {
        if cluster.max_gpus_per_node > 255 {
            return Err(PolicyError::Cluster {
                policy: "pollux",
                reason: "nodes with more than 255 GPUs are not supported".into(),
            });
        }
        Ok(())
    }

    fn admit(&mut self, ctx: &Ctx<'_>, j: JobIdx) -> Result<(), PolicyError> {
        if ctx.job(j).extras().adaptive.is_none() {
            return Err(PolicyError::Job {
                policy: "pollux",
                job: ctx.job(j).id.to_string(),
                reason: "it has no goodput model: Pollux schedules adaptive jobs, read from a \
                         Pollux workload (name,time,application,num_replicas,batch_size) or \
                         submitted live with `apiary submit --adaptive`"
                    .into(),
            });
        }
        Ok(())
    }

    fn schedule(&mut self, ctx: &mut Ctx<'_>) -> Result<(), PolicyError> {
        let now = ctx.now();
        let mut jobs: Vec<JobIdx> = (0..ctx.job_count() as JobIdx)
            .filter(|&j| matches!(ctx.status(j), Status::Pending | Status::Running))
            // Only adaptive jobs report goodput; `admit` refuses others, and
            // a live job without one is left waiting rather than guessed at.
            .filter(|&j| ctx.job(j).extras().adaptive.is_some())
            .collect();
        if jobs.is_empty() {
            self.waited_for = None;
            return Ok(());
        }
        // A live pass never falls exactly on an interval's end: one at or past the wake
        // it asked for decides then, as the simulator's would have.
        let due = self.waited_for.is_some_and(|w| now >= w);
        if !now.is_multiple_of(self.interval) && !due {
            let w = now.div_ceil(self.interval) * self.interval;
            self.waited_for = Some(w);
            ctx.wake_at(w);
            return Ok(());
        }
        jobs.sort_by_key(|&j| (ctx.attained(j), ctx.job(j).submit, j));
        let nn = ctx.cluster().nodes.len();
        let jn = jobs.len();
        let cap: Vec<u8> = ctx.cluster().nodes.iter().map(|n| n.gpus as u8).collect();
        let total: u32 = ctx.cluster().total_gpus;
        let mut base = vec![0u8; jn * nn];
        for (r, &j) in jobs.iter().enumerate() {
            if ctx.status(j) == Status::Running {
                for &(node, mask) in &ctx.rt(j).placement.parts {
                    base[r * nn + node as usize] = mask.count_ones() as u8;
                }
            }
        }
        let fair = (total as f64 / jn as f64).ceil();
        let mut models = Vec::with_capacity(jn);
        let mut max_replicas = Vec::with_capacity(jn);
        let mut penalty = Vec::with_capacity(jn);
        let adaptive_jobs = ctx.adaptive()?;
        for &j in &jobs {
            let job = adaptive_jobs.job(j);
            let Some(adaptive) = job.extras().adaptive.as_ref() else {
                continue;
            };
            let app = adaptive.limits;
            let agent = adaptive_jobs.agent(j);
            let profiled = agent.map_or(0, |a| a.max_profiled_replicas());
            // The artifact: min(max(2 · profiled, 1), 64, max batch // min per-GPU batch).
            let limit = (app.max_batch / app.min_local.max(1)).min(64);
            let m = app
                .max_replicas
                .unwrap_or_else(|| (2 * profiled).max(1).min(limit));
            max_replicas.push(m);
            let restarts = agent.and_then(|a| a.restarts).unwrap_or(0) as f64;
            let age = now.saturating_sub(job.submit) as f64 / SECOND as f64;
            let charge = self.restart_penalty;
            penalty.push(if age + charge > 0.0 {
                (age - restarts * charge).max(0.0) / (age + charge)
            } else {
                1.0
            });
            let range = (app.min_local, app.max_local);
            models.push(agent.and_then(|a| a.goodput_from(app.init_batch)).map(|g| {
                let base = g
                    .optimize(1, fair as u32, app.max_batch as f64, range, true)
                    .goodput;
                (g, app.max_batch as f64, range, base)
            }));
        }
        let stride = 65.max(cap.iter().map(|&c| c as usize).sum::<usize>() + 1);
        let mut pb = Problem {
            jobs: jn,
            nodes: nn,
            cap,
            base: base.clone(),
            max_replicas,
            scale: nn as f64 / total as f64,
            penalty,
            fair,
            models,
            memo: vec![vec![f64::NAN; (nn.min(64) + 1) * stride]; jn],
            scratch: Scratch::default(),
            stride,
        };
        // Seed with last interval's front, rows moved to the jobs' new positions.
        let init: Vec<Vec<u8>> = if self.prev.is_empty() {
            vec![base.clone()]
        } else {
            let pos: BTreeMap<JobIdx, usize> =
                jobs.iter().enumerate().map(|(r, &j)| (j, r)).collect();
            self.prev
                .iter()
                .map(|(prev_jobs, prev_x)| {
                    let mut x = vec![0u8; jn * nn];
                    for (r, j) in prev_jobs.iter().enumerate() {
                        if let Some(&to) = pos.get(j) {
                            x[to * nn..(to + 1) * nn]
                                .copy_from_slice(&prev_x[r * nn..(r + 1) * nn]);
                        }
                    }
                    x
                })
                .collect()
        };
        let front = self.search(&mut pb, init);
        let best = front
            .iter()
            .min_by(|a, b| a.f[0].total_cmp(&b.f[0]))
            .map(|i| i.x.clone())
            .unwrap_or(base.clone());
        self.prev = front.into_iter().map(|i| (jobs.clone(), i.x)).collect();

        // Apply: unchanged jobs keep their GPUs; the others get free ones per node.
        let mut taken: Vec<u64> = vec![0; nn];
        for (r, &j) in jobs.iter().enumerate() {
            if best[r * nn..(r + 1) * nn] == base[r * nn..(r + 1) * nn] {
                for &(node, mask) in &ctx.rt(j).placement.parts {
                    taken[node as usize] |= mask;
                }
            }
        }
        let mut changes: Vec<(JobIdx, Placement)> = Vec::new();
        for (r, &j) in jobs.iter().enumerate() {
            let row = &best[r * nn..(r + 1) * nn];
            if row == &base[r * nn..(r + 1) * nn] {
                continue;
            }
            let mut p = Placement::default();
            for (k, &c) in row.iter().enumerate() {
                let mut need = c as u32;
                let mut mask = 0u64;
                for g in 0..pb.cap[k] as u32 {
                    if need == 0 {
                        break;
                    }
                    if taken[k] & (1 << g) == 0 {
                        mask |= 1 << g;
                        need -= 1;
                    }
                }
                if mask != 0 {
                    taken[k] |= mask;
                    p.add(k as u32, mask);
                }
            }
            changes.push((j, p));
        }
        if !changes.is_empty() {
            ctx.elastic()?.reassign(&changes);
        }
        let next = (now / self.interval + 1) * self.interval;
        self.waited_for = Some(next);
        ctx.wake_at(next);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crossover_swaps_leading_jobs_in_nine_matings_of_ten() {
        let (a, b) = (vec![1u8; 12], vec![2u8; 12]);
        let mut rng = Rng::stream(7, "test");
        let mut copied = 0;
        for _ in 0..10_000 {
            let [c1, c2] = crossover(&a, &b, 4, &mut rng, &mut Vec::new());
            // Each child is a prefix of whole rows from one parent, the rest from the other.
            let k = c1.iter().take_while(|&&v| v == 2).count();
            assert_eq!(k % 3, 0);
            assert!(c1[k..].iter().all(|&v| v == 1));
            assert!(c2[..k].iter().all(|&v| v == 1) && c2[k..].iter().all(|&v| v == 2));
            if c1 == a && c2 == b {
                copied += 1;
            }
        }
        // A cut before the first job swaps nothing, so copies are 10 % plus 90 % / 4.
        let expect = 10_000.0 * (0.1 + 0.9 / 4.0);
        assert!((copied as f64 - expect).abs() < 300.0, "copied {copied}");
    }
}
