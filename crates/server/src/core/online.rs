//! Offline jobs beside online services, live (MuxFlow's `online-sharing`). The first
//! `online_nodes` nodes' GPUs serve inference services that run outside apiary. Their
//! agents measure what the services use (the processes on a GPU that are not apiary's,
//! read with `nvidia-smi`) and report it with their heartbeats; the policy reads those
//! loads where the simulator reads its model's, and the SM share it sets for a job on
//! a serving GPU goes back to the job's agent. An eviction is a preemption: the job is
//! stopped with its grace to checkpoint, and queued again.

use super::Core;
use crate::types::{ServiceLoad, SmShare};
use apiary_model::online::{GpuLoad, OnlineLoad};
use apiary_policy::{Capability, JobIdx};
use std::sync::Arc;

impl Core {
    /// Sets the world up for online services where the policy shares GPUs with them:
    /// the serving nodes, and no load measured yet (an idle service).
    pub(super) fn serve_online(&mut self) {
        let Some(k) = self.cfg.online_nodes else {
            return;
        };
        if !self.shares_online() {
            return;
        }
        let nodes = self.nodes.len().max(1) as f64;
        // `host_nodes` rounds this back to exactly k.
        self.world.resources.online = Some(OnlineLoad {
            hosts: f64::from(k) / nodes,
            ..OnlineLoad::default()
        });
        let gpus = self.world.cluster.total_gpus as usize;
        self.world.resources.online_measured = Some(Arc::new(vec![GpuLoad::default(); gpus]));
    }

    fn shares_online(&self) -> bool {
        self.policy.capabilities().has(Capability::OnlineSharing)
    }

    /// Whether node `n`'s GPUs serve online services the policy shares them with.
    pub(super) fn serves_online(&self, n: u32) -> bool {
        self.world.resources.online_measured.is_some()
            && self.cfg.online_nodes.is_some_and(|k| n < k)
    }

    /// Takes what node `n`'s agent measured of its services. Reports of nodes that
    /// serve none, of GPUs the node lacks, or out of 0 to 1 are dropped.
    pub(super) fn take_service_loads(&mut self, n: u32, loads: &[ServiceLoad]) {
        if loads.is_empty() || !self.serves_online(n) {
            return;
        }
        let first = self.gpu_offsets[n as usize];
        let gpus = self.nodes[n as usize].gpus;
        let Some(measured) = &mut self.world.resources.online_measured else {
            return;
        };
        let measured = Arc::make_mut(measured);
        let share = |x: f64| x.is_finite().then(|| x.clamp(0.0, 1.0));
        for l in loads.iter().filter(|l| l.gpu < gpus) {
            if let (Some(sm), Some(memory)) = (share(l.sm), share(l.memory)) {
                measured[(first + u64::from(l.gpu)) as usize] = GpuLoad { sm, memory };
            }
        }
    }

    /// What node `n`'s services use, as last measured (none for a node that serves
    /// none).
    pub(super) fn service_loads(&self, n: u32) -> Vec<ServiceLoad> {
        let Some(measured) = self.world.resources.online_measured.as_ref() else {
            return Vec::new();
        };
        if !self.serves_online(n) {
            return Vec::new();
        }
        let first = self.gpu_offsets[n as usize] as usize;
        (0..self.nodes[n as usize].gpus)
            .map(|gpu| {
                let l = measured[first + gpu as usize];
                ServiceLoad {
                    gpu,
                    sm: l.sm,
                    memory: l.memory,
                }
            })
            .collect()
    }

    /// Job `j`'s SM share: the least the policy set over its GPUs that serve.
    pub(super) fn sm_share_of(&self, j: JobIdx) -> Option<f64> {
        let shares = &self.world.resources.online_shares;
        let mut least: Option<f64> = None;
        self.serving_gpus(j, |g| {
            let s = shares[g];
            least = Some(least.map_or(s, |l: f64| l.min(s)));
        });
        least
    }

    /// The GPU memory the services leave job `j`: the least over its GPUs that serve.
    fn memory_left(&self, j: JobIdx) -> f64 {
        let Some(measured) = &self.world.resources.online_measured else {
            return 1.0;
        };
        let mut left: f64 = 1.0;
        self.serving_gpus(j, |g| {
            left = left.min(1.0 - measured.get(g).map_or(0.0, |l| l.memory));
        });
        left
    }

    /// Calls `f` with each of job `j`'s GPUs that serve (cluster-wide index).
    fn serving_gpus(&self, j: JobIdx, mut f: impl FnMut(usize)) {
        let shares = &self.world.resources.online_shares;
        for &(node, mask) in &self.world.rt[j as usize].placement.parts {
            let mut m = mask;
            while m != 0 {
                let bit = m.trailing_zeros();
                m &= m - 1;
                let g = (self.gpu_offsets[node as usize] + u64::from(bit)) as usize;
                if shares.get(g).is_some_and(|s| !s.is_nan()) {
                    f(g);
                }
            }
        }
    }

    /// The SM shares of `jobs`, the attempts node `n` runs in id order.
    pub(super) fn sm_shares_on(&self, n: u32, jobs: &[JobIdx]) -> Vec<SmShare> {
        if self.world.resources.online_measured.is_none() {
            return Vec::new();
        }
        jobs.iter()
            .filter_map(|&j| {
                let r = &self.jobs[j as usize];
                self.part_on(n, j)?;
                Some(SmShare {
                    job: r.id,
                    attempt: r.attempt,
                    share: r.sm_share?,
                    memory: self.memory_left(j),
                })
            })
            .collect()
    }
}
