//! Offline jobs beside online services (`online-sharing`: MuxFlow). The first nodes'
//! GPUs each serve an online inference service whose SM demand changes by the minute
//! (`apiary_model::online`); a policy with the capability may run offline jobs there,
//! sets the SM share each such GPU gives its offline job (MPS's active-thread
//! percentage), and evicts a job when its service needs the GPU back. The driver's
//! online model runs the job at what its share and the service leave, and counts the
//! minutes a service wanted more than the job left it.

use super::{Handle, Mechanism};
use crate::spec::Capability;
use crate::world::JobIdx;
use apiary_model::Time;
use apiary_model::online::{Loads, OnlineLoad};

/// The `online-sharing` mechanism.
pub enum Online {}

impl Mechanism for Online {
    const CAPABILITY: Capability = Capability::OnlineSharing;
}

impl Handle<'_, '_, Online> {
    /// The services, where the driver models them (it gives a policy with the
    /// capability the defaults when the run set none).
    pub fn load(&self) -> Option<OnlineLoad> {
        self.ctx.w.resources.online
    }

    /// The services' loads to decide by: the model's, or the measured ones where the
    /// driver measures them (live).
    pub fn loads(&self) -> Loads {
        let r = &self.ctx.w.resources;
        let load = r.online.unwrap_or_default();
        match &r.online_measured {
            Some(gpus) => Loads::Measured {
                gpus: gpus.clone(),
                interference: load.interference,
            },
            None => Loads::Model(load),
        }
    }

    /// Nodes `0..host_nodes()` serve.
    pub fn host_nodes(&self) -> usize {
        self.load()
            .map_or(0, |o| o.host_nodes(self.ctx.w.cluster.nodes.len()))
    }

    /// The SM demand of the service on GPU `gpu` (cluster-wide index) during the
    /// minute holding `t`; 0 for a GPU that serves none.
    pub fn demand(&self, gpu: u64, t: Time) -> f64 {
        match &self.ctx.w.resources.online_measured {
            Some(gpus) => gpus.get(gpu as usize).map_or(0.0, |g| g.sm),
            None => self.load().map_or(0.0, |o| o.demand(gpu, t)),
        }
    }

    /// Sets the SM share GPU `gpu` gives its offline job (NaN: none set).
    pub fn set_share(&mut self, gpu: u64, share: f64) {
        let w = &mut *self.ctx.w;
        let g = gpu as usize;
        if w.resources.online_shares.len() <= g {
            w.resources.online_shares.resize(g + 1, f64::NAN);
        }
        w.resources.online_shares[g] = share;
    }

    /// The share set on GPU `gpu`, if any.
    pub fn share(&self, gpu: u64) -> Option<f64> {
        self.ctx
            .w
            .resources
            .online_shares
            .get(gpu as usize)
            .copied()
            .filter(|s| !s.is_nan())
    }

    /// Job `i` saves a checkpoint now: an eviction takes it back to the progress it
    /// has now, not further. The policy decides when; it never sees the work itself.
    pub fn checkpoint(&mut self, i: JobIdx) {
        let left = self.ctx.remaining(i);
        let w = &mut *self.ctx.w;
        let n = w.jobs.len();
        if w.resources.online_checkpoints.len() < n {
            w.resources.online_checkpoints.resize(n, f64::NAN);
        }
        w.resources.online_checkpoints[i as usize] = left;
    }

    /// Evicts running job `i` for a service's load: it is preempted and loses the
    /// progress since its last checkpoint (all of it, without one). Returns false,
    /// changing nothing, if it was not running.
    pub fn evict(&mut self, i: JobIdx) -> bool {
        if !self.ctx.preempt(i) {
            return false;
        }
        let w = &mut *self.ctx.w;
        let saved = w
            .resources
            .online_checkpoints
            .get(i as usize)
            .copied()
            .filter(|r| !r.is_nan())
            .unwrap_or(w.jobs[i as usize].duration as f64);
        let rt = &mut w.rt[i as usize];
        rt.remaining = rt.remaining.max(saved);
        w.resources.online_evictions += 1;
        true
    }
}
