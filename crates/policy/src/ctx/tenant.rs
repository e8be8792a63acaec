//! A tenant's share as a hosted policy sees it ([`Tenant`]), and who places its jobs
//! ([`Placer`]): the pieces a VC-sharing policy hosts another policy with
//! ([`crate::ctx::Hosting`]).

use crate::placement::PlacementStrategy;
use crate::world::{JobIdx, World};
use apiary_model::Placement;

/// Decides where a tenant's job runs when a policy is hosted inside a tenant's share of
/// the cluster (see [`crate::vc`]): HiveD's cells, a quota, or a private partition.
pub trait Placer {
    /// Chooses GPUs for pending job `j` (they are free in `w.state`), writing them to
    /// `out`; false if the job cannot start now. `strategy` is the hosted policy's
    /// preference, which a placer with its own placement logic may ignore.
    fn place(
        &mut self,
        w: &World,
        j: JobIdx,
        strategy: PlacementStrategy,
        out: &mut Placement,
    ) -> bool;
    /// Job `j` left the GPUs `place` gave it (preempted, finished, or its start failed).
    fn release(&mut self, j: JobIdx);
}

/// One tenant's share as a hosted policy sees it: its capacity, its running jobs and
/// its pending demand.
#[derive(Debug, Default, Clone)]
pub struct Tenant {
    /// GPUs the tenant is entitled to.
    pub capacity: u64,
    /// GPUs its running jobs hold.
    pub used: u64,
    pub(crate) running: Vec<JobIdx>,
    pub(crate) pending: usize,
    pub(crate) pending_gpus: crate::demands::Demands,
}

impl Tenant {
    /// A tenant with `capacity` GPUs and no jobs.
    pub fn new(capacity: u64) -> Tenant {
        Tenant {
            capacity,
            ..Tenant::default()
        }
    }
    /// A job of `gpus` GPUs became pending.
    pub fn add_pending(&mut self, gpus: u32) {
        self.pending += 1;
        self.pending_gpus.add(gpus);
    }
    /// A pending job of `gpus` GPUs left the queue without running.
    pub fn withdraw(&mut self, gpus: u32) {
        self.remove_pending(gpus);
    }
    fn remove_pending(&mut self, gpus: u32) {
        self.pending -= 1;
        self.pending_gpus.remove(gpus);
    }
    /// Pending job `j` of `gpus` GPUs started.
    pub fn started(&mut self, j: JobIdx, gpus: u32) {
        self.remove_pending(gpus);
        self.running.push(j);
        self.used += gpus as u64;
    }
    /// Running job `j` of `gpus` GPUs stopped; `pending` says whether it waits again.
    pub fn stopped(&mut self, j: JobIdx, gpus: u32, pending: bool) {
        if let Some(i) = self.running.iter().position(|&x| x == j) {
            self.running.swap_remove(i);
            self.used -= gpus as u64;
        }
        if pending {
            self.add_pending(gpus);
        }
    }
    /// Its running jobs (unordered).
    pub fn running(&self) -> &[JobIdx] {
        &self.running
    }
    /// Its pending jobs.
    pub fn pending_count(&self) -> usize {
        self.pending
    }
}
