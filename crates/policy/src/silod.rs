//! `silod`: SiloD (EuroSys '23), cache and remote IO scheduled together with GPUs.
//!
//! SiloD's point is that a scheduler which knows how data loading limits a job can
//! allocate the storage cluster's cache and bandwidth as resources beside GPUs, keeping
//! its host policy's objective. No code is public; this is the greedy form of §6.2 of
//! the training-policies notes, on the closed-form estimator
//! `X(g, C, B) = min(X_gpu(g), B / (s·(1 − C/D)))` ([`apiary_model::io`]):
//!
//! 1. The host policy (`sjf`, `gavel` or `themis`) decides which jobs hold GPUs.
//! 2. Cache, pooled over the cluster and kept uniformly (a pinned subset, so a job
//!    hits exactly `C/D` however it shuffles), goes to running jobs in decreasing cache
//!    efficiency, the remote bytes a cached byte saves at full speed (`X·s/D`), each
//!    up to its whole dataset. Per byte each job saves a constant amount, so this order
//!    minimises the remote bytes the running jobs need.
//! 3. Remote bandwidth is water-filled over what the jobs still need from remote
//!    storage: each gets its need or an equal share of what is left.
//!
//! It re-runs at every pass; the driver's IO model charges a cache that grows an epoch
//! of reads at its old hit ratio (warm-up) and checks the shares fit the cluster.

use crate::ctx::{Ctx, Handles};
use crate::hosted::{Allocator, Hosted};
use crate::spec::{Capabilities, Capability, ParamSpec, PolicySpec};
use crate::world::JobIdx;
use crate::{PolicyError, fifo, gavel, themis};

const HOST: ParamSpec = ParamSpec {
    key: "host",
    default: "sjf",
    about: "the policy that decides GPUs: sjf, gavel or themis",
};

/// `silod`: its spec.
pub const SILOD: PolicySpec = PolicySpec {
    name: "silod",
    about: "SiloD: a host policy's GPUs, with pooled uniform cache by cache efficiency and water-filled remote bandwidth (the IO model: --io, or its defaults)",
    // Its own, and every host's: an instance declares its host's and `io`.
    capabilities: Capabilities::of(&[
        Capability::Io,
        Capability::Durations,
        Capability::WholeCluster,
        Capability::ChoosesGpus,
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
    build: |p| Ok(Box::new(Hosted::new(p, &HOST, &HOSTS, Silod::default())?)),
};

/// The hosts SiloD enhances in its evaluation.
const HOSTS: [&PolicySpec; 3] = [&fifo::SJF, &gavel::GAVEL, &themis::THEMIS];

/// SiloD's allocation: what the last one knew, and buffers it reuses.
#[derive(Debug, Default)]
pub struct Silod {
    /// (efficiency, job, GPUs) for the cache order; (need, job, cache) for
    /// water-filling. Reused.
    order: Vec<(f64, JobIdx, u32)>,
    needs: Vec<(f64, JobIdx, f64)>,
    /// Per job: whether it was running at the last allocation, its cache's hit ratio
    /// then, and its dataset and remote need with its whole dataset cached.
    held: Vec<Held>,
    /// The jobs running at the last allocation.
    members: Vec<JobIdx>,
    /// Σ datasets and Σ needs (whole datasets cached) over `members`.
    sums: (f64, f64),
    /// The last allocation cached every dataset whole and met every need.
    roomy: bool,
    /// Jobs that joined or whose caches warmed since the last allocation; reused.
    moved: Vec<JobIdx>,
    stamp: u32,
    /// The IO handle's version at the last allocation.
    version: Option<(u64, u64)>,
}

/// What the last allocation knew of a job.
#[derive(Clone, Copy, Debug, Default)]
struct Held {
    member: bool,
    seen: u32,
    hit: f64,
    dataset: f64,
    need: f64,
}

impl Silod {
    /// The greedy order over every running job.
    fn greedy(&mut self, io: &mut crate::ctx::Handle<'_, '_, crate::ctx::Io>) {
        self.order.clear();
        for &j in &self.members {
            let g = io.gpus(j);
            match io.profile(j) {
                Some(p) if p.dataset > 0.0 => self.order.push((p.demand(g) / p.dataset, j, g)),
                _ => io.set(j, 0.0, 0.0),
            }
        }
        // Most efficient first; ties by job index so the order is the same every run.
        self.order
            .sort_unstable_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        let mut cache_left = io.total_cache();
        self.needs.clear();
        for &(_, j, g) in &self.order {
            let Some(p) = io.profile(j) else { continue };
            let cache = p.dataset.min(cache_left);
            cache_left -= cache;
            // A cache that has not filled yet hits less than its share gives: plan
            // for the reads its warm-up costs.
            let hit = io.hit(j).min(cache / p.dataset);
            self.needs.push((p.remote_demand(g, hit), j, cache));
        }
        self.needs
            .sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let mut left = io.total_bandwidth();
        let n = self.needs.len();
        for (k, &(need, j, cache)) in self.needs.iter().enumerate() {
            let give = need.min(left / (n - k) as f64).max(0.0);
            left -= give;
            io.set(j, cache, give);
        }
    }
}

impl Allocator for Silod {
    const SPEC: &'static PolicySpec = &SILOD;
    const OWN: Capability = Capability::Io;

    /// Steps 2 and 3: cache by efficiency, then bandwidth by water-filling.
    ///
    /// Shares follow from the running jobs and their caches' warmth alone, so only
    /// what changed is looked at: while every running dataset fits the cache whole and
    /// every need fits the bandwidth, each job's share is its own (its dataset and its
    /// need) and only jobs that joined or warmed are given theirs; otherwise the
    /// greedy order is run over every job.
    fn allocate(&mut self, ctx: &mut Ctx<'_>) -> Result<(), PolicyError> {
        // A stamp per allocation marks the members seen running (never 0, which a
        // job not yet seen has).
        self.stamp = self.stamp.wrapping_add(1).max(1);
        let stamp = self.stamp;
        let n = ctx.job_count();
        if self.held.len() < n {
            self.held.resize(n, Held::default());
        }
        self.moved.clear();
        let mut io = ctx.io()?;
        if self.version == Some(io.version()) {
            return Ok(());
        }
        self.version = Some(io.version());
        let mut left_or_joined = false;
        let running = io.running_jobs();
        for &j in running {
            let h = &mut self.held[j as usize];
            let hit = io.hit(j);
            if !h.member {
                let (dataset, need) = match io.profile(j) {
                    Some(p) => (p.dataset, p.remote_demand(io.gpus(j), hit)),
                    None => (0.0, 0.0),
                };
                *h = Held {
                    member: true,
                    seen: stamp,
                    hit,
                    dataset,
                    need,
                };
                self.sums.0 += dataset;
                self.sums.1 += need;
                self.members.push(j);
                self.moved.push(j);
                left_or_joined = true;
            } else {
                h.seen = stamp;
                if hit != h.hit {
                    let need = io
                        .profile(j)
                        .map_or(0.0, |p| p.remote_demand(io.gpus(j), hit));
                    self.sums.1 += need - h.need;
                    h.hit = hit;
                    h.need = need;
                    self.moved.push(j);
                }
            }
        }
        let mut k = 0;
        while k < self.members.len() {
            let j = self.members[k];
            let h = &mut self.held[j as usize];
            if h.seen == stamp {
                k += 1;
                continue;
            }
            self.sums.0 -= h.dataset;
            self.sums.1 -= h.need;
            *h = Held::default();
            self.members.swap_remove(k);
            left_or_joined = true;
        }
        if self.moved.is_empty() && !left_or_joined {
            return Ok(());
        }
        let fits = self.sums.0 <= io.total_cache() && self.sums.1 <= io.total_bandwidth();
        if fits && self.roomy {
            for &j in &self.moved {
                let h = self.held[j as usize];
                io.set(j, h.dataset, h.need);
            }
            return Ok(());
        }
        self.roomy = fits;
        self.greedy(&mut io);
        Ok(())
    }
}
