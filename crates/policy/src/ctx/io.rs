//! Cache and remote-storage bandwidth as resources a policy allocates (`io`: SiloD).
//! The driver's IO model (`--io`) runs each job at the closed-form speed of what the
//! policy gave it; a policy without the capability leaves caches to the configured
//! cache mode and bandwidth to max-min sharing.

use super::{Handle, Mechanism};
use crate::spec::Capability;
use crate::world::JobIdx;
use apiary_model::io::{DataProfile, Storage};

/// The `io` mechanism.
pub enum Io {}

impl Mechanism for Io {
    const CAPABILITY: Capability = Capability::Io;
}

impl Handle<'_, '_, Io> {
    /// The cluster's storage (the driver refuses an `io` policy without one).
    pub fn storage(&self) -> Option<&Storage> {
        self.ctx.w.resources.storage.as_ref()
    }

    /// The cluster's cache, bytes: every GPU's share pooled.
    pub fn total_cache(&self) -> f64 {
        self.storage().map_or(0.0, |s| {
            s.cache_per_gpu * self.ctx.w.cluster.total_gpus as f64
        })
    }

    /// The remote-storage bandwidth every job shares, bytes/s.
    pub fn total_bandwidth(&self) -> f64 {
        self.storage().map_or(0.0, |s| {
            s.bandwidth_per_gpu * self.ctx.w.cluster.total_gpus as f64
        })
    }

    /// A count that moves whenever the running set or any cache's hit ratio changes:
    /// while it stands still, shares set from them still hold.
    pub fn version(&self) -> (u64, u64) {
        (
            self.ctx.w.running_changes(),
            self.ctx.w.resources.io_changes,
        )
    }

    /// The running jobs.
    pub fn running_jobs(&self) -> &[JobIdx] {
        self.ctx.running()
    }

    /// GPUs job `i` holds.
    pub fn gpus(&self, i: JobIdx) -> u32 {
        self.ctx.w.rt[i as usize].placement.gpus()
    }

    /// What job `i` reads, once the driver gave it a profile.
    pub fn profile(&self, i: JobIdx) -> Option<DataProfile> {
        self.ctx.w.jobs[i as usize].extras().data
    }

    /// Gives job `i` `cache` bytes of the pooled cache and `bandwidth` bytes/s of the
    /// remote bandwidth (negative or non-finite values count as 0). The driver checks
    /// that the running jobs' shares fit the cluster's.
    pub fn set(&mut self, i: JobIdx, cache: f64, bandwidth: f64) {
        let w = &mut *self.ctx.w;
        let n = w.jobs.len();
        if w.resources.io_shares.len() < n {
            w.resources.io_shares.resize(n, (0.0, 0.0));
        }
        let clean = |x: f64| if x.is_finite() { x.max(0.0) } else { 0.0 };
        let share = (clean(cache), clean(bandwidth));
        if w.resources.io_shares[i as usize] != share {
            w.resources.io_shares[i as usize] = share;
            w.resources.io_dirty.push(i);
        }
    }

    /// The hit ratio job `i`'s cache gives now: below what its share of cache gives
    /// until the cache has filled (an epoch of reads), 0 when it has just started.
    pub fn hit(&self, i: JobIdx) -> f64 {
        let w = &*self.ctx.w;
        match w.resources.io_hits.get(i as usize) {
            // A job restarted since the model last looked starts cold.
            Some(&(hit, preemptions)) if preemptions == w.rt[i as usize].preemptions => hit,
            _ => 0.0,
        }
    }

    /// What job `i` was given: cache bytes, bandwidth bytes/s.
    pub fn share(&self, i: JobIdx) -> (f64, f64) {
        self.ctx
            .w
            .resources
            .io_shares
            .get(i as usize)
            .copied()
            .unwrap_or((0.0, 0.0))
    }
}
