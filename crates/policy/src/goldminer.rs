//! `goldminer`: GoldMiner (SIGMOD '23), input pipelines as elastic data workers.
//!
//! GoldMiner moves a job's stateless preprocessing (decoding, augmentation) out of its
//! training processes into data workers that run on CPUs anywhere in the cluster, and
//! sizes them elastically, so that CPUs idle beside free GPUs feed the busy ones. No
//! code is public. Here (on the CPU model of `docs/io.md`):
//!
//! 1. The host policy (`fifo`, `sjf`, `tiresias` or `themis`) decides which jobs hold
//!    GPUs.
//! 2. The cluster's CPUs are one pool. They go to running jobs greedily by marginal
//!    progress per CPU: along each job's speed curve by CPUs per GPU (Synergy's
//!    measurements, linear between points), the job whose next stretch gains most
//!    speed per CPU takes it, until the pool is spent or no job gains. Gaining `Δs` of
//!    speed over `Δx` CPUs per GPU costs a job of `g` GPUs `g·Δx` CPUs for `g·Δs`
//!    GPUs' worth of progress, so the order is by slope alone.
//!
//! It re-runs when the running set changes; the driver's CPU model checks the shares
//! fit the pool.

use crate::ctx::{Ctx, Handles};
use crate::hosted::{Allocator, Hosted};
use crate::spec::{Capabilities, Capability, ParamSpec, PolicySpec};
use crate::world::JobIdx;
use crate::{PolicyError, fifo, themis, tiresias};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

const HOST: ParamSpec = ParamSpec {
    key: "host",
    default: "fifo",
    about: "the policy that decides GPUs: fifo, sjf, tiresias or themis",
};

/// `goldminer`: its spec.
pub const GOLDMINER: PolicySpec = PolicySpec {
    name: "goldminer",
    about: "GoldMiner: a host policy's GPUs, with input pipelines as data workers on the cluster's CPU pool, by marginal progress per CPU (the CPU model: --cpu, or its defaults)",
    // Its own, and every host's: an instance declares its host's and `cpu-workers`.
    capabilities: Capabilities::of(&[
        Capability::CpuWorkers,
        Capability::Durations,
        Capability::WholeCluster,
        Capability::Lookahead,
    ]),
    params: &[
        HOST,
        ParamSpec {
            key: "host.*",
            default: "-",
            about: "a parameter of the host policy, e.g. host.backfill=true",
        },
    ],
    build: |p| {
        Ok(Box::new(Hosted::new(
            p,
            &HOST,
            &HOSTS,
            GoldMiner::default(),
        )?))
    },
};

const HOSTS: [&PolicySpec; 4] = [
    &fifo::FIFO,
    &fifo::SJF,
    &tiresias::TIRESIAS,
    &themis::THEMIS,
];

/// GoldMiner's allocation: what the last one knew, and buffers it reuses.
#[derive(Debug)]
pub struct GoldMiner {
    /// The running set's version at the last allocation.
    version: Option<u64>,
    /// (slope, front job, stretch, model) of each non-empty queue of jobs waiting at
    /// a model's stretch; reused.
    queues: BinaryHeap<(u64, Reverse<JobIdx>, usize, usize)>,
    /// The running jobs with a model: (model, job, place in `running`), sorted; reused.
    by_model: Vec<(usize, JobIdx, usize)>,
    /// Where each model's jobs start in `by_model`; reused.
    model_at: Vec<usize>,
    /// Per model: how many of its jobs have taken each stretch; reused.
    taken: Vec<[usize; STRETCHES + 1]>,
    /// The running jobs with their models and GPUs; reused.
    running: Vec<Running>,
    /// CPUs given so far this allocation, by job; reused.
    given: Vec<f64>,
    /// Each model's stretches of curve: (slope, width), from [`stretch`].
    stretches: Vec<[(f64, f64); STRETCHES]>,
    /// Each model's widths up to its first stretch without gain: what it takes when
    /// the pool outlasts every job's gains. `None` if some slope is not a plain
    /// non-negative number (then the heap decides every allocation).
    rising: Option<Vec<Vec<f64>>>,
}

/// A running job, its model (none: it takes no CPUs) and its GPUs.
type Running = (JobIdx, Option<usize>, f64);

/// Stretches of a speed curve: from none to each of Synergy's points.
const STRETCHES: usize = apiary_model::cpu::CPUS_PER_GPU.len();

impl Default for GoldMiner {
    /// Nothing allocated yet.
    fn default() -> GoldMiner {
        let stretches: Vec<[(f64, f64); STRETCHES]> = (0..apiary_model::io::MODELS.len())
            .map(|m| std::array::from_fn(|k| stretch(m, k + 1)))
            .collect();
        let plain = stretches
            .iter()
            .flatten()
            .all(|&(slope, _)| slope.is_finite() && slope.is_sign_positive());
        let rising = plain.then(|| {
            stretches
                .iter()
                .map(|s| {
                    s.iter()
                        .take_while(|&&(slope, _)| slope > 0.0)
                        .map(|&(_, width)| width)
                        .collect()
                })
                .collect()
        });
        GoldMiner {
            version: None,
            queues: BinaryHeap::new(),
            by_model: Vec::new(),
            model_at: Vec::new(),
            taken: Vec::new(),
            running: Vec::new(),
            given: Vec::new(),
            stretches,
            rising,
        }
    }
}

/// The stretch of model `m`'s speed curve ending at its `point`th point: its slope
/// (speed per CPU per GPU, at least 0) and its width in CPUs per GPU.
fn stretch(m: usize, point: usize) -> (f64, f64) {
    let pts: [(f64, f64); 10] = {
        let mut a = [(0.0, 0.0); 10];
        for (k, p) in apiary_model::cpu::curve(m).enumerate() {
            a[k] = p;
        }
        a
    };
    let (x0, s0) = pts[point - 1];
    let (x1, s1) = pts[point.min(9)];
    let width = x1 - x0;
    if width <= 0.0 {
        (0.0, 0.0)
    } else {
        (((s1 - s0) / width).max(0.0), width)
    }
}

impl Allocator for GoldMiner {
    const SPEC: &'static PolicySpec = &GOLDMINER;
    const OWN: Capability = Capability::CpuWorkers;

    /// Step 2: the pool by marginal progress per CPU.
    fn allocate(&mut self, ctx: &mut Ctx<'_>) -> Result<(), PolicyError> {
        let n = ctx.job_count();
        let mut cpus = ctx.cpus()?;
        if self.version == Some(cpus.version()) {
            return Ok(());
        }
        self.version = Some(cpus.version());
        if self.given.len() < n {
            self.given.resize(n, 0.0);
        }
        let mut running = std::mem::take(&mut self.running);
        running.clear();
        running.extend(
            cpus.running_jobs()
                .iter()
                .map(|&j| (j, cpus.model(j), cpus.gpus(j) as f64)),
        );
        let total = cpus.total();
        if !self.allocate_unbound(&running, total) {
            self.allocate_by_heap(&running, total);
        }
        self.running = running;
        let running: Vec<JobIdx> = cpus.running_jobs().to_vec();
        for j in running {
            cpus.set(j, self.given[j as usize]);
        }
        Ok(())
    }
}

impl GoldMiner {
    /// The allocation when the pool outlasts every running job's gains: each job
    /// takes every stretch of its curve up to the first without gain, whatever order
    /// the heap would pop them in, as the same sums in the same order per job. Not
    /// taken (`false`) unless the pool exceeds the demand by more than the rounding
    /// of the heap's running subtraction could cover. On Philly the pool always
    /// does, and the heap's walk was nine tenths of a run.
    fn allocate_unbound(&mut self, running: &[Running], total: f64) -> bool {
        let Some(rising) = &self.rising else {
            return false;
        };
        let (mut demand, mut pops) = (0.0, 0usize);
        for &(_, model, g) in running {
            if let Some(m) = model {
                for &w in &rising[m] {
                    demand += g * w;
                }
                pops += rising[m].len();
            }
        }
        let rounding = 2.0 * (pops as f64 + 2.0) * f64::EPSILON * (total + demand);
        if (total - demand).partial_cmp(&(1e-9 + rounding)) != Some(std::cmp::Ordering::Greater) {
            return false;
        }
        for &(j, model, g) in running {
            let given = &mut self.given[j as usize];
            *given = 0.0;
            if let Some(m) = model {
                for &w in &rising[m] {
                    *given += g * w;
                }
            }
        }
        true
    }

    /// The allocation step by step: the steepest next stretch of any job first, ties
    /// to the lowest job.
    ///
    /// Jobs of one model have the same curve, so the jobs waiting at one of its
    /// stretches form a queue in job order: they reach it in the order they leave the
    /// stretch before, which is that order from the first stretch on. The heap holds
    /// each non-empty queue once, by its front job, instead of every job (on Philly
    /// with a tight pool, the per-job heap was most of a run); it pops the same
    /// stretches in the same order.
    fn allocate_by_heap(&mut self, running: &[Running], total: f64) {
        self.by_model.clear();
        for (at, &(j, model, _)) in running.iter().enumerate() {
            self.given[j as usize] = 0.0;
            if let Some(m) = model {
                self.by_model.push((m, j, at));
            }
        }
        // By model, then job (each job once).
        self.by_model.sort_unstable();
        let models = self.stretches.len();
        self.model_at.clear();
        self.model_at.resize(models + 1, 0);
        for &(m, _, _) in &self.by_model {
            self.model_at[m + 1] += 1;
        }
        for m in 0..models {
            self.model_at[m + 1] += self.model_at[m];
        }
        // `taken[m][p]`: how many of model `m`'s jobs have taken stretch `p` (1-based);
        // `taken[m][0]` is all of them. Queue `p` is those that took `p − 1`, not `p`.
        self.taken.clear();
        self.taken.resize(models, [0; STRETCHES + 1]);
        self.queues.clear();
        for m in 0..models {
            let (from, to) = (self.model_at[m], self.model_at[m + 1]);
            self.taken[m][0] = to - from;
            if to > from {
                let (slope, _) = self.stretches[m][0];
                self.queues
                    .push((slope.to_bits(), Reverse(self.by_model[from].1), 1, m));
            }
        }
        let mut left = total;
        // Slopes are finite and non-negative, so their bits order as they do.
        while left > 1e-9 {
            let Some((bits, Reverse(j), point, m)) = self.queues.pop() else {
                break;
            };
            if f64::from_bits(bits) <= 0.0 {
                break;
            }
            let from = self.model_at[m];
            let k = self.taken[m][point];
            let (_, _, at) = self.by_model[from + k];
            let (_, width) = self.stretches[m][point - 1];
            let take = (running[at].2 * width).min(left);
            self.given[j as usize] += take;
            left -= take;
            self.taken[m][point] = k + 1;
            // The job joins the next stretch's queue, at its back; it is the front of
            // a queue that was empty.
            if point < STRETCHES && self.taken[m][point + 1] == k {
                let (slope, _) = self.stretches[m][point];
                self.queues
                    .push((slope.to_bits(), Reverse(j), point + 1, m));
            }
            if k + 1 < self.taken[m][point - 1] {
                let next = self.by_model[from + k + 1].1;
                self.queues.push((bits, Reverse(next), point, m));
            }
        }
    }

    /// The per-job heap [`GoldMiner::allocate_by_heap`] replaces, which it must match.
    #[cfg(test)]
    fn allocate_by_job_heap(&mut self, running: &[Running], total: f64) {
        let mut heap = BinaryHeap::new();
        let mut left = total;
        for (at, &(j, model, _)) in running.iter().enumerate() {
            self.given[j as usize] = 0.0;
            if let Some(m) = model {
                let (slope, _) = self.stretches[m][0];
                heap.push((slope.to_bits(), Reverse(j), 1, at));
            }
        }
        while left > 1e-9 {
            let Some((bits, Reverse(j), point, at)) = heap.pop() else {
                break;
            };
            if f64::from_bits(bits) <= 0.0 {
                break;
            }
            let (_, model, g) = running[at];
            let m = model.unwrap_or(0);
            let (_, width) = self.stretches[m][point - 1];
            let take = (g * width).min(left);
            self.given[j as usize] += take;
            left -= take;
            if point < STRETCHES {
                let (slope, _) = self.stretches[m][point];
                heap.push((slope.to_bits(), Reverse(j), point + 1, at));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use apiary_model::io::MODELS;

    /// The queue heap's shares are the per-job heap's to the bit. With a pool that
    /// outlasts every job's gains, the sums taken directly are too; with a tight one,
    /// the direct path declines.
    #[test]
    fn unbound_allocation_is_the_heaps() {
        let mut rng = apiary_model::rng::Rng::new(9);
        let models = MODELS.len() as u64;
        let (mut unbound, mut declined) = (0, 0);
        for case in 0..300 {
            let n = rng.below(300) as usize;
            let running: Vec<Running> = (0..n)
                .map(|i| {
                    let model = (rng.below(8) > 0).then(|| rng.below(models) as usize);
                    (i as JobIdx * 3, model, (1 << rng.below(4)) as f64)
                })
                .collect();
            let fresh = || GoldMiner {
                given: vec![-1.0; 3 * n + 1],
                ..GoldMiner::default()
            };
            let (mut direct, mut heap, mut per_job) = (fresh(), fresh(), fresh());
            // Pools from far too small to ample.
            let total = (n as f64 + 1.0) * [0.5, 4.0, 8.0, 12.0, 40.0][case % 5];
            heap.allocate_by_heap(&running, total);
            per_job.allocate_by_job_heap(&running, total);
            let bits = |g: &[f64]| g.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(
                bits(&heap.given),
                bits(&per_job.given),
                "case {case}: queues"
            );
            if direct.allocate_unbound(&running, total) {
                unbound += 1;
                assert_eq!(bits(&direct.given), bits(&heap.given), "case {case}");
            } else {
                declined += 1;
            }
        }
        assert!(
            unbound > 50 && declined > 50,
            "{unbound} unbound, {declined} declined"
        );
    }

    #[test]
    fn stretches_walk_the_curve() {
        let res18 = MODELS.iter().position(|m| m.name == "res18").unwrap();
        let (s, w) = stretch(res18, 1);
        assert_eq!(w, 1.0);
        assert!((s - 0.37 / 2.4).abs() < 1e-12);
        // 6 to 9 CPUs per GPU: 1.75 to 2.4.
        let (s, w) = stretch(res18, 7);
        assert_eq!(w, 3.0);
        assert!((s - 0.65 / 2.4 / 3.0).abs() < 1e-12);
        // Flat beyond 9.
        assert_eq!(stretch(res18, 8).0, 0.0);
        let bert = MODELS.iter().position(|m| m.name == "bert").unwrap();
        assert_eq!(stretch(bert, 1), (1.0, 1.0));
        assert_eq!(stretch(bert, 2).0, 0.0);
    }
}
