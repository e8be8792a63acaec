//! CPUs for input pipelines live (GoldMiner's data workers, `cpu-workers`). The pool is
//! the nodes' CPUs (`cpus` in the config), spread over their GPUs as the simulator's
//! `--cpu` pool is; the policy gives each running job a share along the speed curve of
//! the model it trains (`model` in its submission), and each node's agent pins its part
//! of the job to its GPUs' share of that, rounded up. Shares change as the running set
//! does, and reach agents with every heartbeat reply, so a running job is re-pinned
//! without a restart.

use super::{ApiError, Core};
use crate::types::{CpuShare, JobSpec};
use apiary_model::Job;
use apiary_model::cpu::CpuPool;
use apiary_model::io::MODELS;
use apiary_policy::{Capability, JobIdx};

impl Core {
    /// The CPU pool of a config whose every node declares its `cpus` (the config check
    /// refuses a `cpu-workers` policy otherwise): its CPUs per GPU.
    pub(super) fn cpu_pool(&self) -> Option<CpuPool> {
        let cpus: Option<u64> = self.cfg.nodes.iter().map(|n| n.cpus.map(u64::from)).sum();
        let gpus: u64 = self.cfg.nodes.iter().map(|n| u64::from(n.gpus)).sum();
        Some(CpuPool {
            cpus_per_gpu: cpus? as f64 / gpus.max(1) as f64,
        })
    }

    /// Checks a submission's model: one Synergy measured, and given whenever the policy
    /// sizes input pipelines by it (a job sharing a GPU is outside the policy).
    pub(super) fn validate_model(&self, s: &JobSpec) -> Result<(), ApiError> {
        let names = || MODELS.iter().map(|m| m.name).collect::<Vec<_>>().join(", ");
        match &s.model {
            Some(m) if apiary_model::io::model(m).is_none() => Err(ApiError::bad(
                "model",
                format!("unknown model '{m}' (one of {})", names()),
            )),
            None if s.gpu_milli.is_none()
                && self.policy.capabilities().has(Capability::CpuWorkers) =>
            {
                Err(ApiError::bad(
                    "model",
                    format!(
                        "policy {} gives input pipelines CPUs by the speed curve of the model \
                         a job trains: submit with --model NAME (one of {})",
                        self.policy.name(),
                        names()
                    ),
                ))
            }
            _ => Ok(()),
        }
    }

    /// Gives job `j` its model's data profile, which a `cpu-workers` policy reads.
    pub(super) fn give_model(&self, spec: &JobSpec, j: &mut Job) {
        if spec.model.is_some() && self.policy.capabilities().has(Capability::CpuWorkers) {
            j.model = spec.model.clone();
            apiary_model::io::assign(std::slice::from_mut(j), 0);
        }
    }

    /// Brings the running jobs' records to the shares the last pass left. Every running
    /// job has one, zero included (its agent then pins it to one CPU rather than leave
    /// it all of them).
    pub(super) fn take_cpu_shares(&mut self) {
        self.world.resources.cpu_dirty.clear();
        if self.world.resources.cpu_pool.is_none() {
            return;
        }
        let shares = &self.world.resources.cpu_shares;
        for &j in self.world.running() {
            let cpus = Some(shares.get(j as usize).copied().unwrap_or(0.0));
            let r = &mut self.jobs[j as usize];
            if r.cpus != cpus {
                r.cpus = cpus;
                self.dirty.insert(j);
            }
        }
    }

    /// Forgets job `j`'s share when its attempt stops.
    pub(super) fn drop_cpu_share(&mut self, j: JobIdx) {
        self.jobs[j as usize].cpus = None;
    }

    /// The shares of `jobs`, the attempts node `n` runs in id order: each job's share
    /// split over its nodes by their GPUs.
    pub(super) fn cpu_shares_on(&self, n: u32, jobs: &[JobIdx]) -> Vec<CpuShare> {
        if self.world.resources.cpu_pool.is_none() {
            return Vec::new();
        }
        let name = &self.nodes[n as usize].name;
        jobs.iter()
            .filter_map(|&j| {
                let r = &self.jobs[j as usize];
                let cpus = r.cpus?;
                let all: usize = r.parts.iter().map(|p| p.gpus.len()).sum();
                let here = r.parts.iter().find(|p| &p.node == name)?.gpus.len();
                Some(CpuShare {
                    job: r.id,
                    attempt: r.attempt,
                    cpus: cpus * here as f64 / all.max(1) as f64,
                })
            })
            .collect()
    }
}
