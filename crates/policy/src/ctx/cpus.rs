//! CPUs for jobs' input pipelines as a pool a policy allocates (`cpu-workers`:
//! GoldMiner's elastic data workers, which run a job's stateless preprocessing on CPUs
//! anywhere in the cluster). The driver's CPU model (`--cpu`) runs each job at the
//! speed its share gives; a policy without the capability leaves every job its GPUs'
//! share of its nodes' CPUs.

use super::{Handle, Mechanism};
use crate::spec::Capability;
use crate::world::JobIdx;

/// The `cpu-workers` mechanism.
pub enum Cpus {}

impl Mechanism for Cpus {
    const CAPABILITY: Capability = Capability::CpuWorkers;
}

impl Handle<'_, '_, Cpus> {
    /// The cluster's CPUs for input pipelines (the driver gives a policy with the
    /// capability one).
    pub fn total(&self) -> f64 {
        self.ctx.w.resources.cpu_pool.map_or(0.0, |p| {
            p.cpus_per_gpu * self.ctx.w.cluster.total_gpus as f64
        })
    }

    /// The running jobs.
    pub fn running_jobs(&self) -> &[JobIdx] {
        self.ctx.running()
    }

    /// A count that moves whenever the running set changes.
    pub fn version(&self) -> u64 {
        self.ctx.w.running_changes()
    }

    /// GPUs job `i` holds.
    pub fn gpus(&self, i: JobIdx) -> u32 {
        self.ctx.w.rt[i as usize].placement.gpus()
    }

    /// Job `i`'s model (an index into `apiary_model::io::MODELS`), once the driver gave
    /// it a profile: its speed by CPUs is `apiary_model::cpu::speed`.
    pub fn model(&self, i: JobIdx) -> Option<usize> {
        self.ctx.w.jobs[i as usize].extras().data.map(|d| d.model)
    }

    /// Gives job `i` `cpus` CPUs of the pool (negative or non-finite counts as 0). The
    /// driver checks that the running jobs' shares fit the pool.
    pub fn set(&mut self, i: JobIdx, cpus: f64) {
        let w = &mut *self.ctx.w;
        let n = w.jobs.len();
        if w.resources.cpu_shares.len() < n {
            w.resources.cpu_shares.resize(n, 0.0);
        }
        let cpus = if cpus.is_finite() { cpus.max(0.0) } else { 0.0 };
        if w.resources.cpu_shares[i as usize] != cpus {
            w.resources.cpu_shares[i as usize] = cpus;
            w.resources.cpu_dirty.push(i);
        }
    }
}
