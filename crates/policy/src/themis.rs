//! Themis, as the Muri artifact's baseline defines it (`run_sim.py:themis_sim_jobs`):
//! finish-time fairness solved at every event, then a greedy placement.
//!
//! At each event every runnable job gets a time fraction `x ∈ [0, 1]` that minimises
//! the largest finish-time ratio
//! `ρ = (elapsed + remaining / (x · throughput)) / isolated`, subject to
//! `Σ GPUs · x ≤ cluster GPUs`. The artifact hands this to cvxpy; it is a min-max of
//! decreasing one-variable functions under one knapsack constraint, so apiary solves it
//! exactly by bisection on ρ (docs/policies/themis.md). Jobs are then ordered by `x`
//! over the time they have run, the ones that fit in that order are chosen, and the
//! chosen are placed largest first.

use crate::PolicyError;
use crate::ctx::Ctx;
use crate::placement::{self, PlacementStrategy};
use crate::runs::{by_gpus_descending, total_key};
use crate::spec::{Capabilities, Capability, ParamSpec, PolicySpec};
use crate::world::{JobIdx, Status};
use crate::{ParamError, Params, Policy};
use apiary_model::Time;
const THEMIS_PARAMS: &[ParamSpec] = &[ISOLATED, FACE];
const FACE: ParamSpec = ParamSpec {
    key: "face",
    default: "least",
    about: "which optimal shares when the optimum leaves GPUs spare: least (the smallest shares that reach it) | most (a diagnostic: the spare GPUs shared out towards whole shares, still optimal; the artifact's ECOS returns a point between)",
};
const ISOLATED: ParamSpec = ParamSpec {
    key: "isolated",
    default: "artifact",
    about: "isolated time in the ratio: artifact (counted in iterations, the artifact's bug) | time",
};

/// `themis`: its spec.
pub const THEMIS: PolicySpec = PolicySpec {
    name: "themis",
    about: "Themis as Muri's baseline: finish-time fairness solved at every event, then chosen by share over time run and placed largest first",
    capabilities: Capabilities::of(&[Capability::Durations, Capability::WholeCluster]),
    params: THEMIS_PARAMS,
    build: |p| Ok(Box::new(Themis::new(p)?)),
};

/// What the denominator's "isolated" time is measured in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isolated {
    /// The artifact: `get_isolated_throughputs` returns the equal-share fraction
    /// instead of the throughput, so the isolated time is counted in iterations.
    Artifact,
    /// Seconds, as intended: remaining iterations over the equal-share throughput.
    Time,
}

/// Fill `x` (optimal shares) towards whole shares until the GPUs are used: every ratio
/// falls as its share grows, so the worst ratio, and optimality, are kept.
pub fn fill_spare(g: &[f64], cap: f64, x: &mut [f64]) {
    let used: f64 = g.iter().zip(x.iter()).map(|(g, x)| g * x).sum();
    let room: f64 = g.iter().zip(x.iter()).map(|(g, x)| g * (1.0 - x)).sum();
    if used >= cap || room <= 0.0 {
        return;
    }
    let t = ((cap - used) / room).min(1.0);
    for xi in x.iter_mut() {
        *xi += t * (1.0 - *xi);
    }
}

/// Per-job state carried between events.
#[derive(Clone, Copy, Debug, Default)]
struct Acct {
    /// Isolated time accumulated so far (`cumulative_isolated_time`).
    cum_iso: f64,
    /// Remaining iterations and equal share at the previous event, once seen.
    prev: Option<(f64, f64)>,
    /// Time the allocation says the job should have received (s).
    should: f64,
}

/// The Themis baseline.
#[derive(Debug)]
pub struct Themis {
    isolated: Isolated,
    /// Fill spare GPUs into the shares (`face=most`).
    fill: bool,
    /// Runnable jobs in the artifact's list order: arrivals appended, and each pass
    /// leaves it sorted by GPU count, largest first (stable).
    order: Vec<JobIdx>,
    acct: Vec<Acct>,
    last_event: Time,
    refill: placement::Refill,
    // Per pass, by position in `order`.
    elapsed: Vec<f64>,
    left: Vec<f64>,
    iso: Vec<f64>,
    gpus: Vec<f64>,
    x: Vec<f64>,
    /// Per pass: each job's sort keys (rounds received, deficit, share) as integers in
    /// descending `total_cmp` order, compared without a float in the sort.
    keyed: Vec<(u64, u64, u64, JobIdx)>,
    chosen: Vec<bool>,
    /// Per job its GPU count, and the list the GPU-count order is built in.
    gpus_of: Vec<u32>,
    by_gpus: Vec<JobIdx>,
}

impl Themis {
    /// Parameters as [`THEMIS`] lists them.
    pub fn new(p: &Params) -> Result<Themis, ParamError> {
        let isolated = p.choice(
            &ISOLATED,
            &[("artifact", Isolated::Artifact), ("time", Isolated::Time)],
        )?;
        Ok(Themis {
            isolated,
            fill: p.choice(&FACE, &[("least", false), ("most", true)])?,
            order: Vec::new(),
            acct: Vec::new(),
            last_event: 0,
            refill: placement::Refill::default(),
            elapsed: Vec::new(),
            left: Vec::new(),
            iso: Vec::new(),
            gpus: Vec::new(),
            x: Vec::new(),
            keyed: Vec::new(),
            chosen: Vec::new(),
            gpus_of: Vec::new(),
            by_gpus: Vec::new(),
        })
    }
}

/// A job's iteration time in seconds: duration over iterations, or one second per
/// "iteration" for traces that give no iteration count.
fn iteration_s(ctx: &Ctx<'_>, j: JobIdx) -> f64 {
    let job = ctx.job(j);
    match job.iterations {
        Some(n) if n > 0 => job.duration as f64 / n as f64 / 1000.0,
        _ => 1.0,
    }
}

/// Minimises `max_i (e_i + s_i / x_i) / d_i` over `0 < x_i ≤ 1`, `Σ g_i x_i ≤ cap`,
/// writing the minimal `x` that reaches the optimum.
///
/// Each ratio falls as its `x_i` grows, so for a target ρ job i needs
/// `x_i(ρ) = s_i / (ρ d_i − e_i)`; ρ is feasible when every `x_i(ρ) ≤ 1` (ρ at least
/// `L = max_i (e_i + s_i) / d_i`) and the GPUs add up. The optimum is `L` if that fits,
/// else the ρ where `Σ g_i x_i(ρ) = cap`, found by bisection to float precision.
/// Where the optimum leaves slack (jobs below the bottleneck), the minimal allocation
/// is taken; cvxpy's interior point returns some point of that optimal face.
pub fn min_max_ratio(e: &[f64], s: &[f64], d: &[f64], g: &[f64], cap: f64, x: &mut Vec<f64>) {
    let n = e.len();
    x.clear();
    if n == 0 {
        return;
    }
    let need = |rho: f64, i: usize| -> f64 {
        let den = rho * d[i] - e[i];
        if den <= 0.0 {
            f64::INFINITY
        } else {
            (s[i] / den).min(1.0)
        }
    };
    let demand = |rho: f64| -> f64 { (0..n).map(|i| g[i] * need(rho, i)).sum() };
    let lo0 = (0..n)
        .map(|i| (e[i] + s[i]) / d[i])
        .fold(f64::NEG_INFINITY, f64::max);
    let rho = if demand(lo0) <= cap {
        lo0
    } else {
        let (mut lo, mut hi) = (lo0, lo0.abs().max(1e-12) * 2.0);
        while demand(hi) > cap {
            lo = hi;
            hi *= 2.0;
        }
        // Bisect until the interval stops shrinking in floating point.
        loop {
            let mid = lo + (hi - lo) / 2.0;
            if mid <= lo || mid >= hi {
                break;
            }
            if demand(mid) > cap {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        hi
    };
    x.extend((0..n).map(|i| need(rho, i)));
}

impl Policy for Themis {
    fn spec(&self) -> &'static PolicySpec {
        &THEMIS
    }

    fn admit(&mut self, ctx: &Ctx<'_>, j: JobIdx) -> Result<(), PolicyError> {
        if self.acct.len() <= j as usize {
            self.acct.resize(j as usize + 1, Acct::default());
            self.gpus_of.resize(j as usize + 1, 0);
        }
        self.acct[j as usize] = Acct::default();
        self.gpus_of[j as usize] = ctx.job(j).gpus;
        self.order.push(j);
        Ok(())
    }

    fn schedule(&mut self, ctx: &mut Ctx<'_>) -> Result<(), PolicyError> {
        self.order.retain(|&j| ctx.status(j) != Status::Finished);
        let now = ctx.now();
        let since = now.saturating_sub(self.last_event) as f64 / 1000.0;
        self.last_event = now;
        let n = self.order.len();
        if n == 0 {
            return Ok(());
        }
        let total = ctx.total_gpus();
        let share = total.div_ceil(n as u64) as f64;
        self.elapsed.clear();
        self.left.clear();
        self.iso.clear();
        self.gpus.clear();
        for &j in &self.order {
            let g = ctx.job(j).gpus as f64;
            // The equal share as a fraction of the job's own size, at most 1.
            let a = (share / g).min(1.0);
            let it = ctx.remaining(j) / 1000.0;
            let tau = iteration_s(ctx, j);
            let iters = it / tau;
            let acc = &mut self.acct[j as usize];
            let unit = match self.isolated {
                Isolated::Artifact => 1.0,
                Isolated::Time => tau,
            };
            if let Some((prev_iters, prev_a)) = acc.prev {
                acc.cum_iso += (prev_iters - iters) * unit / prev_a;
            }
            acc.prev = Some((iters, a));
            self.elapsed
                .push(now.saturating_sub(ctx.job(j).submit) as f64 / 1000.0);
            self.left.push(it);
            self.iso.push(acc.cum_iso + iters * unit / a);
            self.gpus.push(g);
        }
        min_max_ratio(
            &self.elapsed,
            &self.left,
            &self.iso,
            &self.gpus,
            total as f64,
            &mut self.x,
        );
        if self.fill {
            fill_spare(&self.gpus, total as f64, &mut self.x);
        }
        // Order by rounds received (x over time run), then deficit, then x; largest
        // first, stable over the list order.
        self.keyed.clear();
        for (k, &j) in self.order.iter().enumerate() {
            let x = self.x[k];
            let ran = ctx.executed(j) as f64 / 1000.0;
            let acc = &mut self.acct[j as usize];
            let val = if ran == 0.0 { x * 1e9 } else { x / ran };
            let deficit = acc.should - ran;
            acc.should += x * since;
            // Largest first: the complement of the ascending key.
            self.keyed
                .push((!total_key(val), !total_key(deficit), !total_key(x), j));
        }
        self.keyed.sort_by_key(|k| (k.0, k.1, k.2));
        // Choose, in that order, the jobs that fit on an emptied cluster.
        let cluster = ctx.cluster();
        if self.chosen.len() < ctx.job_count() {
            self.chosen.resize(ctx.job_count(), false);
        }
        for &(_, _, _, j) in &self.keyed {
            let g = ctx.job(j).gpus;
            if self.refill.fits(cluster, g) {
                self.chosen[j as usize] = true;
            }
        }
        self.refill.clear();
        self.order.clear();
        self.order.extend(self.keyed.iter().map(|k| k.3));
        by_gpus_descending(&self.order, &self.gpus_of, &mut self.by_gpus);
        std::mem::swap(&mut self.order, &mut self.by_gpus);
        // Running jobs not chosen give their GPUs back first; the chosen pending ones
        // then start largest first. A chosen job that no longer fits (fragmentation)
        // stays pending, as in the artifact's second placement pass.
        for k in 0..n {
            let j = self.order[k];
            if !self.chosen[j as usize] && ctx.status(j) == Status::Running {
                ctx.preempt(j);
            }
        }
        for k in 0..n {
            let j = self.order[k];
            if self.chosen[j as usize] {
                self.chosen[j as usize] = false;
                if ctx.status(j) == Status::Pending {
                    ctx.start_with(j, PlacementStrategy::Consolidated);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{fill_spare, min_max_ratio};

    #[test]
    fn spare_gpus_fill_towards_whole_shares_keeping_the_optimum() {
        // Three 1-GPU jobs on 2 GPUs; job 0 is the bottleneck at x = 1.
        let (e, s, d, g) = ([0.0; 3], [100.0, 10.0, 20.0], [50.0; 3], [1.0; 3]);
        let mut x = Vec::new();
        min_max_ratio(&e, &s, &d, &g, 2.0, &mut x);
        let before = worst(&e, &s, &d, &x);
        let least = x.clone();
        fill_spare(&g, 2.0, &mut x);
        // Capacity used exactly, no share above 1 or below the least optimal one.
        assert!((x.iter().sum::<f64>() - 2.0).abs() < 1e-12);
        assert!(x.iter().zip(&least).all(|(a, b)| *a <= 1.0 && *a >= *b));
        assert!(worst(&e, &s, &d, &x) <= before + 1e-12);
        // Room for everyone: every share becomes whole.
        let mut y = least.clone();
        fill_spare(&g, 8.0, &mut y);
        assert_eq!(y, [1.0; 3]);
    }

    fn worst(e: &[f64], s: &[f64], d: &[f64], x: &[f64]) -> f64 {
        (0..e.len())
            .map(|i| (e[i] + s[i] / x[i]) / d[i])
            .fold(f64::NEG_INFINITY, f64::max)
    }

    #[test]
    fn everything_fits_gives_whole_shares_to_the_bottleneck() {
        let mut x = Vec::new();
        // Two 1-GPU jobs on 4 GPUs: job 0 sets the optimum at x = 1.
        min_max_ratio(
            &[0.0, 0.0],
            &[100.0, 10.0],
            &[50.0, 50.0],
            &[1.0, 1.0],
            4.0,
            &mut x,
        );
        assert_eq!(x[0], 1.0);
        assert!((worst(&[0.0, 0.0], &[100.0, 10.0], &[50.0, 50.0], &x) - 2.0).abs() < 1e-12);
        // Job 1 needs only enough to reach ρ = 2: 10 / (2 · 50) = 0.1.
        assert!((x[1] - 0.1).abs() < 1e-12);
    }

    #[test]
    fn a_full_cluster_equalises_the_ratios() {
        // Two identical 1-GPU jobs on one GPU: each gets half, ρ = s / (0.5 d).
        let mut x = Vec::new();
        min_max_ratio(
            &[0.0, 0.0],
            &[10.0, 10.0],
            &[10.0, 10.0],
            &[1.0, 1.0],
            1.0,
            &mut x,
        );
        assert!((x[0] - 0.5).abs() < 1e-12 && (x[1] - 0.5).abs() < 1e-12);
        // Unequal work: ρ_0 = 30 / x_0 / 10 = ρ_1 = 10 / x_1 / 10, x_0 + x_1 = 1.
        min_max_ratio(
            &[0.0, 0.0],
            &[30.0, 10.0],
            &[10.0, 10.0],
            &[1.0, 1.0],
            1.0,
            &mut x,
        );
        assert!((x[0] - 0.75).abs() < 1e-12, "{x:?}");
        assert!((x[1] - 0.25).abs() < 1e-12, "{x:?}");
    }

    #[test]
    fn the_optimum_cannot_be_improved_by_moving_capacity() {
        // Mixed sizes and ages; compare with a grid search over the binding pair.
        let e = [5.0, 0.0, 20.0];
        let s = [40.0, 15.0, 8.0];
        let d = [30.0, 12.0, 25.0];
        let g = [2.0, 1.0, 4.0];
        let mut x = Vec::new();
        min_max_ratio(&e, &s, &d, &g, 4.0, &mut x);
        let best = worst(&e, &s, &d, &x);
        let used: f64 = (0..3).map(|i| g[i] * x[i]).sum();
        assert!(used <= 4.0 + 1e-9);
        let steps = 200;
        for a in 1..=steps {
            for b in 1..=steps {
                let x0 = a as f64 / steps as f64;
                let x1 = b as f64 / steps as f64;
                let x2 = ((4.0 - 2.0 * x0 - x1) / 4.0).min(1.0);
                if x2 <= 0.0 {
                    continue;
                }
                assert!(worst(&e, &s, &d, &[x0, x1, x2]) >= best - 1e-9);
            }
        }
    }
}
