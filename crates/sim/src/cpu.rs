//! The CPU model (`--cpu`): each job's input pipeline runs on CPUs, and the job runs at
//! the fraction of its GPU-bound speed its CPUs per GPU give ([`apiary_model::cpu`],
//! Synergy's measurements).
//!
//! Who decides the CPUs: a policy with the `cpu-workers` capability (GoldMiner) gives
//! each job a share of the cluster's pool, and the model checks the shares fit; any
//! other policy's jobs get their GPUs' share of their nodes' CPUs, fixed, as a job
//! whose preprocessing runs inside its training processes does.

use crate::error::SimError;
use crate::resource::{Holders, Resource};
use apiary_model::cpu::{self, CpuPool, CpuReport};
use apiary_model::io;
use apiary_model::{RunOutcome, Time};
use apiary_policy::{JobIdx, Status, World};

/// A job's CPUs while it runs.
#[derive(Clone, Copy, Debug, Default)]
struct Pipeline {
    on: bool,
    gpus: u32,
    model: usize,
    cpus: f64,
    factor: f64,
    /// (Re)started since the last settle: its rate was set without this model's factor.
    retime: bool,
    /// What it adds to the sums: CPUs, GPUs stalled.
    counted: (f64, f64),
}

/// The CPU model over one run.
pub struct CpuModel {
    pool: CpuPool,
    /// The policy allocates (it declares `cpu-workers`).
    managed: bool,
    policy: &'static str,
    total: f64,
    jobs: Vec<Pipeline>,
    on: Holders,
    /// Σ the policy's shares over the jobs on.
    given: f64,
    /// Σ CPUs and Σ GPUs × (1 − factor) over the jobs on.
    sums: (f64, f64),
    touched: Vec<JobIdx>,
    report: CpuReport,
}

impl CpuModel {
    /// The model for `world`'s run on `pool`: jobs without a model get one
    /// ([`io::assign`], seeded by `seed`); `managed` when the policy allocates.
    pub fn new(
        world: &mut World,
        pool: CpuPool,
        managed: bool,
        policy: &'static str,
        seed: u64,
    ) -> CpuModel {
        let drawn = world
            .jobs
            .iter()
            .filter(|j| j.model.as_deref().and_then(io::model).is_none())
            .count();
        io::assign(&mut world.jobs, seed);
        CpuModel {
            pool,
            managed,
            policy,
            total: pool.cpus_per_gpu * world.cluster.total_gpus as f64,
            jobs: vec![Pipeline::default(); world.jobs.len()],
            on: Holders::default(),
            given: 0.0,
            sums: (0.0, 0.0),
            touched: Vec::new(),
            report: CpuReport {
                pool: pool.describe(),
                allocated_by: if managed { "policy" } else { "fixed" }.into(),
                drawn_models: drawn,
                ..CpuReport::default()
            },
        }
    }

    fn share(world: &World, j: JobIdx) -> f64 {
        world
            .resources
            .cpu_shares
            .get(j as usize)
            .copied()
            .unwrap_or(0.0)
    }

    /// Sets job `j`'s CPUs, keeping the sum of the policy's shares.
    fn give(&mut self, j: JobIdx, cpus: f64) {
        let s = &mut self.jobs[j as usize];
        if self.managed {
            self.given += cpus - s.cpus;
        }
        s.cpus = cpus;
        self.touched.push(j);
    }

    /// Job `j`'s factor from its CPUs, keeping the sums; notes it for re-timing if it
    /// changed.
    fn refactor(&mut self, j: JobIdx, changed: &mut Vec<JobIdx>) {
        let s = &mut self.jobs[j as usize];
        let f = cpu::speed(s.model, s.cpus / s.gpus.max(1) as f64);
        if f != s.factor || s.retime {
            s.factor = f;
            s.retime = false;
            changed.push(j);
        }
        let now = (s.cpus, s.gpus as f64 * (1.0 - f));
        self.sums.0 += now.0 - s.counted.0;
        self.sums.1 += now.1 - s.counted.1;
        s.counted = now;
    }
}

impl Resource for CpuModel {
    fn settle(
        &mut self,
        world: &mut World,
        started: &[JobIdx],
        changed: &mut Vec<JobIdx>,
    ) -> Result<(), SimError> {
        self.touched.clear();
        let mut gone = std::mem::take(&mut self.touched);
        self.on.release_stopped(world, &mut gone);
        for &j in &gone {
            let s = self.jobs[j as usize];
            if self.managed {
                self.given -= s.cpus;
            }
            self.sums.0 -= s.counted.0;
            self.sums.1 -= s.counted.1;
            self.jobs[j as usize] = Pipeline::default();
        }
        gone.clear();
        self.touched = gone;
        for &j in started {
            let rt = &world.rt[j as usize];
            if rt.status != Status::Running {
                continue;
            }
            let Some(d) = world.jobs[j as usize].extras().data else {
                continue;
            };
            let gpus = rt.placement.gpus();
            let s = &mut self.jobs[j as usize];
            if !s.on {
                s.on = true;
                self.on.add(j);
            }
            s.gpus = gpus;
            s.model = d.model;
            s.retime = true;
            let cpus = if self.managed {
                CpuModel::share(world, j)
            } else {
                self.pool.cpus_per_gpu * gpus as f64
            };
            self.give(j, cpus);
        }
        if self.managed {
            let dirty = std::mem::take(&mut world.resources.cpu_dirty);
            for &j in &dirty {
                if self.jobs[j as usize].on {
                    self.give(j, CpuModel::share(world, j));
                }
            }
            let mut dirty = dirty;
            dirty.clear();
            world.resources.cpu_dirty = dirty;
            if self.given > self.total * (1.0 + 1e-9) + 1e-6 {
                return Err(SimError::OverAllocated {
                    policy: self.policy,
                    resource: "CPUs",
                    given: self.given,
                    has: self.total,
                    unit: "CPUs",
                });
            }
        }
        for k in 0..self.touched.len() {
            self.refactor(self.touched[k], changed);
        }
        Ok(())
    }

    fn factor(&self, j: JobIdx) -> f64 {
        let s = &self.jobs[j as usize];
        if s.on { s.factor } else { 1.0 }
    }

    fn next_change(&self, _world: &World) -> Option<Time> {
        None
    }

    fn interval(&mut self, _world: &World, from: Time, to: Time) {
        if to <= from {
            return;
        }
        let secs = (to - from) as f64 / 1000.0;
        self.report.capacity_s += self.total * secs;
        self.report.cpu_s += self.sums.0.max(0.0) * secs;
        self.report.stalled_gpu_s += self.sums.1.max(0.0) * secs;
    }

    fn report(self: Box<Self>, outcome: &mut RunOutcome) {
        outcome.cpu = Some(self.report);
    }
}
