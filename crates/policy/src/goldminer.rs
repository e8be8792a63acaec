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
    /// (slope, job, next point) of each job's next stretch of curve; reused.
    heap: BinaryHeap<(u64, Reverse<JobIdx>, usize)>,
    /// CPUs given so far this allocation, by job; reused.
    given: Vec<f64>,
    /// Each model's stretches of curve: (slope, width), from [`stretch`].
    stretches: Vec<[(f64, f64); STRETCHES]>,
}

/// Stretches of a speed curve: from none to each of Synergy's points.
const STRETCHES: usize = apiary_model::cpu::CPUS_PER_GPU.len();

impl Default for GoldMiner {
    /// Nothing allocated yet.
    fn default() -> GoldMiner {
        GoldMiner {
            version: None,
            heap: BinaryHeap::new(),
            given: Vec::new(),
            stretches: (0..apiary_model::io::MODELS.len())
                .map(|m| std::array::from_fn(|k| stretch(m, k + 1)))
                .collect(),
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
        self.heap.clear();
        let mut left = cpus.total();
        for &j in cpus.running_jobs() {
            self.given[j as usize] = 0.0;
            if let Some(m) = cpus.model(j) {
                let (slope, _) = self.stretches[m][0];
                self.heap.push((slope.to_bits(), Reverse(j), 1));
            }
        }
        // Slopes are finite and non-negative, so their bits order as they do.
        while left > 1e-9 {
            let Some((bits, Reverse(j), point)) = self.heap.pop() else {
                break;
            };
            if f64::from_bits(bits) <= 0.0 {
                break;
            }
            let m = cpus.model(j).unwrap_or(0);
            let g = cpus.gpus(j) as f64;
            let (_, width) = self.stretches[m][point - 1];
            let take = (g * width).min(left);
            self.given[j as usize] += take;
            left -= take;
            if point < STRETCHES {
                let (slope, _) = self.stretches[m][point];
                self.heap.push((slope.to_bits(), Reverse(j), point + 1));
            }
        }
        let running: Vec<JobIdx> = cpus.running_jobs().to_vec();
        for j in running {
            cpus.set(j, self.given[j as usize]);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use apiary_model::io::MODELS;

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
