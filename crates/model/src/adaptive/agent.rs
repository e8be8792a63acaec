//! The job side of an adaptive job (the `Job` class of Pollux's `simulator.py`): what
//! AdaptDL does inside a training job between scheduler decisions.

use super::app::Application;
use super::goodput::{Goodput, GradParams, PerfParams, Sample, fit_perf_params};
use std::collections::BTreeMap;

/// Seconds a job makes no progress after its allocation changes.
pub const RESCALE_SECONDS: u32 = 30;

/// One adaptive job's state.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Agent {
    /// The total batch the job must use, or `None` to let it tune its own (Pollux).
    pub target_batch: Option<u32>,
    /// Epochs completed.
    pub epoch: u32,
    /// Training progress.
    pub progress: f64,
    /// Per-GPU batch of one pass.
    pub atomic_bsz: u32,
    /// Accumulation passes per optimizer step.
    pub accum_steps: u32,
    /// GPUs on each node it holds (non-zero counts, in node order); empty when none.
    pub placement: Vec<u32>,
    /// Seconds of re-scaling left.
    pub rescale: u32,
    /// Allocation changes after the first start; `None` before it.
    pub restarts: Option<u32>,
    /// Observed `(nodes, replicas, per-GPU batch)` → `(step, sync)` seconds.
    profile: BTreeMap<(u32, u32, u32), (f64, f64)>,
    /// The step-time model fitted to `profile`.
    pub perf: Option<PerfParams>,
    /// The latest gradient statistics.
    pub grad: Option<GradParams>,
    /// Set when the job has trained its last epoch.
    pub done: bool,
    /// The most replicas a live job reports having profiled (AdaptDL's
    /// `maxProfiledReplicas`), whose profile the scheduler does not see.
    reported_replicas: u32,
}

impl Agent {
    /// A job that has not run yet.
    pub fn new(target_batch: Option<u32>) -> Agent {
        Agent {
            target_batch,
            ..Agent::default()
        }
    }

    /// The most replicas observed so far.
    pub fn max_profiled_replicas(&self) -> u32 {
        let profiled = self.profile.keys().map(|k| k.1).max().unwrap_or(0);
        profiled.max(self.reported_replicas)
    }

    /// A live job's report (AdaptDL's hints): its fitted step-time model, gradient
    /// statistics and the most replicas it has profiled.
    pub fn report(&mut self, perf: PerfParams, grad: Option<GradParams>, profiled_replicas: u32) {
        self.perf = Some(perf);
        self.grad = grad;
        self.reported_replicas = profiled_replicas;
    }

    /// The goodput model the job reports to the scheduler, once it has one.
    pub fn goodput(&self, app: &Application) -> Option<Goodput> {
        self.goodput_from(app.init_batch)
    }

    /// The goodput model, for a job whose initial batch is `init_batch`.
    pub fn goodput_from(&self, init_batch: u32) -> Option<Goodput> {
        Some(Goodput {
            perf: self.perf?,
            grad: self.grad?,
            init_batch: init_batch as f64,
        })
    }

    /// The job's allocation changed (an empty one: it was stopped).
    pub fn reallocate(&mut self, app: &Application, placement: Vec<u32>) {
        if placement.is_empty() {
            self.placement.clear();
            self.atomic_bsz = 0;
            return;
        }
        self.placement = placement;
        self.update_local_bsz(app);
        self.rescale = RESCALE_SECONDS;
        self.restarts = Some(self.restarts.map_or(0, |r| r + 1));
    }

    fn update_local_bsz(&mut self, app: &Application) {
        let nodes = self.placement.len() as u32;
        let replicas: u32 = self.placement.iter().sum();
        let mut batch = self.target_batch;
        if batch.is_none() && self.perf.is_none() {
            batch = Some(app.init_batch.max(app.min_local * replicas));
        }
        const EPS: f64 = 1e-8;
        match (batch, self.goodput(app)) {
            (None, Some(g)) => {
                let c = g.optimize(
                    nodes,
                    replicas,
                    app.max_batch as f64,
                    (app.min_local, app.max_local),
                    true,
                );
                self.atomic_bsz = c.atomic_bsz;
                self.accum_steps = c.accum_steps;
            }
            (b, _) => {
                let b = b.unwrap_or(app.init_batch) as f64;
                let local = (b / replicas as f64 - EPS).ceil();
                let mut accum = (local / app.max_local as f64 - EPS).ceil() - 1.0;
                if replicas == 1 && b > app.init_batch as f64 {
                    accum = accum.max(1.0);
                }
                self.accum_steps = accum.max(0.0) as u32;
                self.atomic_bsz = (local / (accum + 1.0) - EPS).ceil() as u32;
            }
        }
        let count = replicas * (self.accum_steps + 1);
        self.atomic_bsz = self.atomic_bsz.min(app.max_batch / count.max(1));
    }

    fn observe(&mut self, nodes: u32, replicas: u32, step: f64, sync: f64, grad: GradParams) {
        self.grad = Some(grad);
        let key = (nodes, replicas, self.atomic_bsz);
        if self.profile.contains_key(&key) {
            return;
        }
        self.profile.insert(key, (step, sync));
        let samples: Vec<Sample> = self
            .profile
            .iter()
            .map(|(&(n, r, b), &(s, y))| Sample {
                nodes: n,
                replicas: r,
                atomic_bsz: b,
                accum_time: s - y,
                optim_time: s,
            })
            .collect();
        self.perf = Some(fit_perf_params(&samples));
    }

    /// Trains for `seconds` on the current placement. Returns the second within the
    /// interval at which the job finished its last epoch, if it did.
    pub fn step(&mut self, app: &Application, seconds: u32) -> Option<u32> {
        if self.placement.is_empty() || self.done {
            return None;
        }
        let mut left = seconds;
        let delay = self.rescale.min(left);
        self.rescale -= delay;
        left -= delay;
        let mut elapsed = delay;
        while left > 0 && !self.done {
            let nodes = self.placement.len() as u32;
            let replicas: u32 = self.placement.iter().sum();
            let batch = replicas as f64 * self.atomic_bsz as f64 * (self.accum_steps as f64 + 1.0);
            let scale = batch / app.init_batch as f64;
            let (step, sync) = app.step_time(&self.placement, self.atomic_bsz);
            let accum_time = step - sync;
            let (sqr, var) = app.grad_stats(batch, self.epoch);
            let gain = (var + sqr) / (var / scale + sqr);
            self.observe(nodes, replicas, step, sync, GradParams { sqr, var });
            let total = step + accum_time * self.accum_steps as f64;
            let goodput = gain / total;
            let next = app.progress_at(self.epoch + 1);
            if self.progress + goodput * (left as f64) < next {
                self.progress += goodput * left as f64;
                elapsed += left;
                left = 0;
            } else {
                self.epoch += 1;
                // Python's round(): half to even.
                let delta = ((next - self.progress) / goodput)
                    .round_ties_even()
                    .max(0.0) as u32;
                let delta = delta.min(left);
                if self.epoch >= app.max_epochs {
                    self.done = true;
                }
                self.progress = next;
                elapsed += delta;
                left -= delta;
                if self.done {
                    return Some(elapsed);
                }
            }
            self.update_local_bsz(app);
        }
        None
    }
}
