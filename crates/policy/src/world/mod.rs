//! The state a driver keeps about jobs and GPUs; a policy reads it and acts on it
//! through a [`Ctx`](crate::Ctx).
//!
//! Progress accounting lives here too ([`World::sync`]), so both drivers charge
//! service, restarts and remaining work by one definition.

use crate::placement::{self, PlacementStrategy};
use apiary_model::adaptive::Agent;
use apiary_model::{Cluster, ClusterState, Job, Placement, Time};
use std::collections::BTreeMap;

mod reassign;

/// Dense index of a job within one run (its position in [`World::jobs`]).
pub type JobIdx = u32;

/// Where a job is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Status {
    /// Not submitted yet.
    Future,
    /// Submitted, waiting for GPUs (never started, or preempted).
    Pending,
    /// Holding GPUs.
    Running,
    /// Done.
    Finished,
}

/// Per-job runtime state.
#[derive(Clone, Debug)]
pub struct JobRt {
    /// Life-cycle state.
    pub status: Status,
    /// GPUs held while running (kept, cleared, while not, to reuse its allocation).
    pub placement: Placement,
    /// Reference work left, in ms of run time at rate 1, as of `last_update`.
    pub remaining: f64,
    /// Work done per ms while running and past the restart overhead.
    pub rate: f64,
    /// A (re)started job makes no progress before this time.
    pub overhead_until: Time,
    /// Attained service in GPU-ms (GPUs × time held), as of `last_update`.
    pub attained: u64,
    /// Time held GPUs, ms, as of `last_update`.
    pub executed: Time,
    /// When the counters above were last brought up to date.
    pub last_update: Time,
    /// First start.
    pub first_start: Option<Time>,
    /// Completion time.
    pub finish: Option<Time>,
    /// Times preempted.
    pub preemptions: u32,
    /// Bumped whenever a scheduled completion becomes stale.
    pub generation: u32,
    /// Its index in the world's pending list while pending, in the running list while
    /// running (kept here, in the record's padding, rather than in two lists of their
    /// own the trace's length).
    slot: u32,
}

impl JobRt {
    fn future(j: &Job) -> JobRt {
        JobRt {
            status: Status::Future,
            placement: Placement::default(),
            remaining: j.duration as f64,
            rate: 1.0,
            overhead_until: 0,
            attained: 0,
            executed: 0,
            last_update: 0,
            first_start: None,
            finish: None,
            preemptions: 0,
            generation: 0,
            slot: 0,
        }
    }
}

/// A job's plan-end limits, which only ElasticFlow sets (a hold, and with
/// `progress=artifact` a work cap, an end and where its deadline is judged:
/// [`crate::ctx::Holds`], [`crate::ctx::Stalls`]). The world keeps them beside the runtime records,
/// and only once a policy sets one, so no other run carries them (a million-job trace
/// would carry 40 MB).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PlanEnd {
    /// A running job makes no progress after this time (0: none): the ElasticFlow
    /// artifact credits a round's work only up to its plan's exact end.
    pub work_until: Time,
    /// A running job completes by this time even with work left (0: none): the
    /// ElasticFlow artifact ends a job at its plan's end event.
    pub end_by: Time,
    /// When its deadline is judged, where not at its completion
    /// ([`apiary_model::JobOutcome::judged`]).
    pub judged: Option<Time>,
    /// A running job whose work is done before this time keeps its GPUs and completes
    /// then (0: none): simulators that end jobs only at their plan's slot-aligned end.
    pub hold_until: Time,
}

/// Where a running job's progress up to `now` stops: at its work cap, if it has one
/// (0: none) and it comes first.
pub(crate) fn progress_end(now: Time, work_until: Time) -> Time {
    if work_until > 0 {
        now.min(work_until)
    } else {
        now
    }
}

/// What a policy did, for the driver to act on (schedule completions, count, log).
/// Each mechanism's action is its own, so a driver that cannot honour one says which.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// The job started on its `placement`.
    Start(JobIdx),
    /// The job was preempted; it is pending again.
    Preempt(JobIdx),
    /// A running elastic job moved to another placement, of any size, keeping its
    /// progress ([`crate::ctx::Elastic`]).
    Resize(JobIdx),
    /// The policy changed a running job's speed factor ([`crate::ctx::Speeds`]).
    Speed(JobIdx),
    /// A running job pauses for a while ([`crate::ctx::Stalls`]).
    Stall(JobIdx),
    /// A running job's progress is capped at a time ([`crate::ctx::Stalls`]).
    Cap(JobIdx),
    /// A running job keeps its GPUs to its plan's end ([`crate::ctx::Holds`]).
    Hold(JobIdx),
    /// A running job ends by a time with whatever work it has left
    /// ([`crate::ctx::Holds`]).
    End(JobIdx),
}

impl Action {
    /// The job it concerns.
    pub fn job(self) -> JobIdx {
        match self {
            Action::Start(j)
            | Action::Preempt(j)
            | Action::Resize(j)
            | Action::Speed(j)
            | Action::Stall(j)
            | Action::Cap(j)
            | Action::Hold(j)
            | Action::End(j) => j,
        }
    }

    /// Whether it changes when a running job completes without moving it: a new speed,
    /// a stall, a cap, a hold or an end.
    pub fn retimes(self) -> bool {
        matches!(
            self,
            Action::Speed(_) | Action::Stall(_) | Action::Cap(_) | Action::Hold(_) | Action::End(_)
        )
    }
}

/// Resources besides GPUs, as a run's drivers and policies share them: the cluster's
/// storage and CPU pool where they are modelled, the shares policies give jobs (read
/// through the `io`, `cpu-workers` and `power-limits` mechanisms), and what the
/// driver's models report back. Each `*_dirty` list names the jobs whose share changed
/// since the model last read it.
#[derive(Clone, Debug, Default)]
pub struct Resources {
    /// The cluster's cache and remote-storage bandwidth, where the driver models data
    /// loading (`--io`; the `io` mechanism reads it).
    pub storage: Option<apiary_model::io::Storage>,
    /// Cache bytes and remote bandwidth (bytes/s) a policy with the `io` capability
    /// gave each job, by job index; what the driver's IO model runs them at.
    pub io_shares: Vec<(f64, f64)>,
    /// Jobs whose `io_shares` changed since the driver's IO model last read them.
    pub io_dirty: Vec<JobIdx>,
    /// The hit ratio each job's cache gives now (a cache fills over an epoch), as the
    /// driver's IO model last settled it, with the job's preemption count then (a
    /// restart empties the cache); 0 for a job not running.
    pub io_hits: Vec<(f64, u32)>,
    /// The IO model's hit ratios changed this many times (see `io_hits`).
    pub io_changes: u64,
    /// The cluster's CPUs for input pipelines, where the driver models them (`--cpu`;
    /// the `cpu-workers` mechanism reads it).
    pub cpu_pool: Option<apiary_model::cpu::CpuPool>,
    /// CPUs a policy with the `cpu-workers` capability gave each job, by job index.
    pub cpu_shares: Vec<f64>,
    /// Jobs whose `cpu_shares` changed since the driver's CPU model last read them.
    pub cpu_dirty: Vec<JobIdx>,
    /// Each job's power limit as a fraction of its GPUs' top limit, where a policy with
    /// the `power-limits` capability set one (0: the run's own, `--power-limit`).
    pub power_caps: Vec<f64>,
    /// Jobs whose `power_caps` changed since the driver last read them.
    pub power_dirty: Vec<JobIdx>,
    /// Online inference services on the first nodes' GPUs, where the driver models
    /// them (`--online`; the `online-sharing` mechanism reads it).
    pub online: Option<apiary_model::online::OnlineLoad>,
    /// The serving GPUs' loads as measured on a live cluster (by cluster-wide GPU
    /// index), which the mechanism reads instead of `online`'s model.
    pub online_measured: Option<std::sync::Arc<Vec<apiary_model::online::GpuLoad>>>,
    /// The SM share of each GPU (cluster-wide index) a policy with `online-sharing`
    /// gave the offline job on it; NaN where it set none.
    pub online_shares: Vec<f64>,
    /// Offline jobs that policy evicted for a service's load.
    pub online_evictions: u64,
    /// Each job's work left at its last checkpoint (NaN: none), which an eviction
    /// takes it back to.
    pub online_checkpoints: Vec<f64>,
}

/// Jobs, GPUs and time: everything a policy may look at.
#[derive(Debug)]
pub struct World {
    /// The topology.
    pub cluster: Cluster,
    /// Free GPUs.
    pub state: ClusterState,
    /// Every job of the run, in submission order.
    pub jobs: Vec<Job>,
    /// Runtime state, parallel to `jobs`.
    pub rt: Vec<JobRt>,
    /// Current time.
    pub now: Time,
    /// Time lost by a job each time it resumes after a preemption.
    pub restart_overhead: Time,
    /// The run's seed (random placement draws from it).
    pub seed: u64,
    /// The grid's carbon intensity, where the driver has a series (the `carbon`
    /// mechanism reads it).
    pub carbon: Option<std::sync::Arc<apiary_model::energy::Intensity>>,
    /// The facility's power usage effectiveness the driver charges energy with.
    pub pue: f64,
    /// Resources besides GPUs: what the driver's resource models and the policies that
    /// allocate them exchange (`--io`, `--cpu`, power limits).
    pub resources: Resources,
    /// What prices placements for the topology strategy, if the driver injected one
    /// ([`World::set_scorer`]); kept for the run.
    scorer: placement::ScorerSlot,
    /// Jobs holding GPUs (each one's index here is its record's `slot`).
    running: Vec<JobIdx>,
    /// Joins and leaves of `running` so far.
    running_changes: u64,
    /// Pending jobs, unordered (each one's index here is its record's `slot`).
    pending: Vec<JobIdx>,
    pending_gpus: crate::demands::Demands,
    /// The per-job tables below stay empty until a policy or the service first sets an
    /// entry (most runs never do), so a large trace carries none of them.
    ///
    /// Per job: the group whose GPUs it shares (its first member's index), if any.
    share: Vec<u32>,
    /// Per group: members still holding its GPUs.
    share_refs: Vec<u32>,
    /// Per job: runs on GPUs it does not hold (an opportunistic guest, AntMan).
    overlay: Vec<bool>,
    /// Per job: may not start (the live service: its last attempt is still stopping).
    blocked: Vec<bool>,
    /// Per job: the policy's factor on the throughput model's rate ([`World::speed`]).
    speeds: Vec<f64>,
    /// Per job: an adaptive job's own state ([`World::agent`]).
    agents: Vec<Option<Box<Agent>>>,
    /// Jobs admission control turned away, and why.
    declined: BTreeMap<JobIdx, Box<str>>,
    /// One past the highest job index submitted: the jobs a policy has been told of.
    arrived: usize,
    /// Whether GPUs a policy's preemption frees stay held, for the driver to give back
    /// once the job's processes have ended (the live service); see [`World::take_fenced`].
    pub fence_preemptions: bool,
    /// Whether a job's GPU type ([`Job::gpu_type`]) limits where it is placed. The live
    /// service honours it; the simulator's placements do not (yet): trace types such as
    /// Alibaba's rarely match a simulated cluster's.
    pub honour_gpu_types: bool,
    fenced: Vec<(JobIdx, Placement)>,
    /// Each job's [`PlanEnd`]; empty until a policy sets one.
    plan_ends: Vec<PlanEnd>,
    /// Time each job makes no progress after its next start, besides the restart
    /// overhead: restoring and restarting after a failure (empty until one).
    recovery: Vec<Time>,
    /// Finished jobs' placements, emptied, for the next starts to fill: most jobs start
    /// once, and each would otherwise allocate its list and free it at its finish.
    spare: Vec<Placement>,
}

const NOT_SHARED: u32 = u32::MAX;
/// Emptied placements kept for reuse at most (a burst of finishes keeps no more).
const MAX_SPARE: usize = 1024;

/// A per-job table that exists only once something sets an entry: made here, as long
/// as the job list, on first use.
fn made<T: Clone>(table: &mut Vec<T>, jobs: usize, fill: T) -> &mut Vec<T> {
    if table.is_empty() {
        table.resize(jobs, fill);
    }
    table
}

/// Keeps a per-job table that exists as long as the job list (appended jobs take
/// `fill`; a taken-back job's entry goes).
fn fit<T: Clone>(table: &mut Vec<T>, jobs: usize, fill: T) {
    if !table.is_empty() {
        table.resize(jobs, fill);
    }
}

/// Takes job `i` out of `list` (the pending or the running jobs), where its record's
/// slot says it is, moving the last job into its place. False if it is not there.
fn take_out(list: &mut Vec<JobIdx>, rt: &mut [JobRt], i: JobIdx) -> bool {
    let p = rt[i as usize].slot as usize;
    if list.get(p) != Some(&i) {
        return false;
    }
    list.swap_remove(p);
    if let Some(&moved) = list.get(p) {
        rt[moved as usize].slot = p as u32;
    }
    true
}

impl World {
    /// A world with every job in the future. `jobs` must be sorted by submit time.
    pub fn new(cluster: Cluster, jobs: Vec<Job>) -> World {
        let state = ClusterState::new(&cluster);
        let rt = jobs.iter().map(JobRt::future).collect();
        World {
            cluster,
            state,
            jobs,
            rt,
            now: 0,
            restart_overhead: 0,
            seed: 0,
            carbon: None,
            pue: 1.0,
            running_changes: 0,
            resources: Resources::default(),
            scorer: Default::default(),
            running: Vec::new(),
            share: Vec::new(),
            share_refs: Vec::new(),
            overlay: Vec::new(),
            blocked: Vec::new(),
            speeds: Vec::new(),
            agents: Vec::new(),
            declined: BTreeMap::new(),
            arrived: 0,
            fence_preemptions: false,
            honour_gpu_types: false,
            fenced: Vec::new(),
            plan_ends: Vec::new(),
            recovery: Vec::new(),
            spare: Vec::new(),
            pending: Vec::new(),
            pending_gpus: crate::demands::Demands::default(),
        }
    }

    /// Appends a job, in the future until [`World::submit`]: the live service's jobs
    /// arrive one at a time. Jobs must still be appended in submission order.
    pub fn push_job(&mut self, job: Job) -> JobIdx {
        let i = self.jobs.len() as JobIdx;
        self.rt.push(JobRt::future(&job));
        self.jobs.push(job);
        self.fit_tables();
        i
    }

    /// Takes back the job [`World::push_job`] appended last, if it is still pending or
    /// in the future (the live service: the policy refused it at admission). Returns
    /// false, changing nothing, otherwise.
    pub fn pop_job(&mut self, i: JobIdx) -> bool {
        let last = self.jobs.len().checked_sub(1);
        if last != Some(i as usize)
            || !matches!(self.rt[i as usize].status, Status::Future | Status::Pending)
        {
            return false;
        }
        if self.rt[i as usize].status == Status::Pending {
            self.leave_pending(i);
        }
        self.jobs.pop();
        self.rt.pop();
        self.arrived = self.arrived.min(self.jobs.len());
        self.fit_tables();
        true
    }

    /// Sets what prices placements for the topology strategy (which finds no GPUs
    /// without one): the driver's network model.
    pub fn set_scorer(&mut self, scorer: Box<dyn placement::Scorer>) {
        *self.scorer.get_mut().unwrap_or_else(|e| e.into_inner()) = Some(scorer);
    }

    /// Keeps a pending job from starting (`true`) or lets it start again.
    pub fn set_blocked(&mut self, i: JobIdx, blocked: bool) {
        let table = if blocked {
            made(&mut self.blocked, self.jobs.len(), false)
        } else {
            &mut self.blocked
        };
        if let Some(b) = table.get_mut(i as usize) {
            *b = blocked;
        }
    }

    fn is_blocked(&self, i: JobIdx) -> bool {
        self.blocked.get(i as usize).copied().unwrap_or(false)
    }

    /// Whether a job may start now: pending and not blocked.
    fn startable(&self, i: JobIdx) -> bool {
        self.rt[i as usize].status == Status::Pending && !self.is_blocked(i)
    }

    /// Keeps each per-job table that exists as long as the job list, as jobs are
    /// appended and taken back.
    fn fit_tables(&mut self) {
        let n = self.jobs.len();
        fit(&mut self.share, n, NOT_SHARED);
        fit(&mut self.share_refs, n, 0);
        fit(&mut self.overlay, n, false);
        fit(&mut self.blocked, n, false);
        fit(&mut self.speeds, n, 1.0);
        fit(&mut self.agents, n, None);
        fit(&mut self.plan_ends, n, PlanEnd::default());
        fit(&mut self.recovery, n, 0);
    }

    /// Job `i`'s factor on the throughput model's rate, 1 unless a policy set one
    /// (Muri: a job interleaved in a group runs at its solo iteration time over the
    /// group's).
    pub fn speed(&self, i: JobIdx) -> f64 {
        self.speeds.get(i as usize).copied().unwrap_or(1.0)
    }

    pub(crate) fn set_speed(&mut self, i: JobIdx, factor: f64) {
        made(&mut self.speeds, self.jobs.len(), 1.0)[i as usize] = factor;
    }

    /// An adaptive job's own state (Pollux's jobs): its batch, epoch and what it reports
    /// to the scheduler. The driver creates and advances it.
    pub fn agent(&self, i: JobIdx) -> Option<&Agent> {
        self.agents.get(i as usize)?.as_deref()
    }

    /// Job `i` and its agent, to advance or tell it something.
    pub fn job_and_agent(&mut self, i: JobIdx) -> (&Job, Option<&mut Agent>) {
        let agent = self
            .agents
            .get_mut(i as usize)
            .and_then(|a| a.as_deref_mut());
        (&self.jobs[i as usize], agent)
    }

    /// Gives job `i` an agent (the driver, for an adaptive job).
    pub fn set_agent(&mut self, i: JobIdx, agent: Agent) {
        made(&mut self.agents, self.jobs.len(), None)[i as usize] = Some(Box::new(agent));
    }

    /// Why admission control turned job `i` away, if it did.
    pub fn declined(&self, i: JobIdx) -> Option<&str> {
        self.declined.get(&i).map(|r| &**r)
    }

    /// Every job admission control turned away, and why, in job order (the driver, at
    /// the end of a run).
    pub fn take_declined(&mut self) -> BTreeMap<JobIdx, Box<str>> {
        std::mem::take(&mut self.declined)
    }

    /// GPUs held back from preempted jobs since the last call (with
    /// [`World::fence_preemptions`]): still allocated, to be released by the driver.
    pub fn take_fenced(&mut self) -> Vec<(JobIdx, Placement)> {
        std::mem::take(&mut self.fenced)
    }

    /// Job `i`'s [`PlanEnd`] (none set: the default).
    pub fn plan_end(&self, i: JobIdx) -> PlanEnd {
        self.plan_ends.get(i as usize).copied().unwrap_or_default()
    }

    /// Job `i`'s [`PlanEnd`] to set, making the table on first use.
    pub(crate) fn plan_end_mut(&mut self, i: JobIdx) -> &mut PlanEnd {
        &mut made(&mut self.plan_ends, self.jobs.len(), PlanEnd::default())[i as usize]
    }

    /// Brings a running job's counters up to `now`.
    pub fn sync(&mut self, i: JobIdx) {
        let now = self.now;
        let work_until = self.plan_end(i).work_until;
        let rt = &mut self.rt[i as usize];
        if rt.status != Status::Running || rt.last_update >= now {
            return;
        }
        // Elastic jobs hold other counts than they asked for; charge what they hold.
        let gpus = rt.placement.gpus() as u64;
        let from = rt.last_update.max(rt.overhead_until);
        let to = progress_end(now, work_until);
        if to > from {
            rt.remaining = (rt.remaining - (to - from) as f64 * rt.rate).max(0.0);
        }
        let dt = now - rt.last_update;
        // Saturating: a job slowed to a crawl (a checkpoint that takes ages to save) can
        // end near the end of time.
        rt.executed = rt.executed.saturating_add(dt);
        rt.attained = rt.attained.saturating_add(dt.saturating_mul(gpus));
        rt.last_update = now;
    }

    /// When a running job will complete if nothing changes.
    pub fn finish_time(&self, i: JobIdx) -> Time {
        let rt = &self.rt[i as usize];
        let end = self.plan_end(i);
        let from = rt.last_update.max(rt.overhead_until);
        let done = if rt.rate <= 0.0 {
            Time::MAX
        } else {
            // The small slack absorbs float residue so an exact duration is not rounded up.
            let t = (rt.remaining / rt.rate - 1e-6).ceil().max(0.0);
            let at = from.saturating_add(t as Time);
            if end.work_until > 0 && at > end.work_until.max(from) {
                Time::MAX
            } else {
                at.max(end.hold_until)
            }
        };
        if end.end_by > 0 {
            done.min(end.end_by)
        } else {
            done
        }
    }

    /// Marks a job submitted.
    pub fn submit(&mut self, i: JobIdx) {
        let rt = &mut self.rt[i as usize];
        debug_assert_eq!(rt.status, Status::Future);
        rt.status = Status::Pending;
        self.enter_pending(i);
        self.arrived = self.arrived.max(i as usize + 1);
    }

    /// One past the highest job index submitted so far: the jobs a policy has been told
    /// of (the rest of [`World::jobs`] is the trace still to come, in the simulator).
    pub fn arrived(&self) -> usize {
        self.arrived
    }

    fn leave_pending(&mut self, i: JobIdx) {
        if take_out(&mut self.pending, &mut self.rt, i) {
            self.pending_gpus.remove(self.jobs[i as usize].gpus);
        }
    }

    fn enter_pending(&mut self, i: JobIdx) {
        self.rt[i as usize].slot = self.pending.len() as u32;
        self.pending.push(i);
        self.pending_gpus.add(self.jobs[i as usize].gpus);
    }

    fn add_running(&mut self, i: JobIdx) {
        self.rt[i as usize].slot = self.running.len() as u32;
        self.running.push(i);
        self.running_changes += 1;
    }

    fn remove_running(&mut self, i: JobIdx) {
        take_out(&mut self.running, &mut self.rt, i);
        self.running_changes += 1;
    }

    /// How many times a job joined or left the running set: equal counts mean the
    /// same running set (a policy that keeps per-running-job state skips its rescan).
    pub fn running_changes(&self) -> u64 {
        self.running_changes
    }

    /// Starts a pending job on `p`. Returns false (and changes nothing) if the job is
    /// not pending, `p` has the wrong GPU count, or a GPU of `p` is taken.
    pub fn start(&mut self, i: JobIdx, p: Placement) -> bool {
        let idx = i as usize;
        if !self.startable(i) || p.gpus() != self.jobs[idx].gpus {
            return false;
        }
        if self.state.allocate(&p).is_err() {
            return false;
        }
        self.mark_running(i, p);
        true
    }

    /// A pending job now runs on `p` (its GPUs already accounted for).
    fn mark_running(&mut self, i: JobIdx, p: Placement) {
        self.leave_pending(i);
        self.add_running(i);
        let now = self.now;
        let idx = i as usize;
        let overhead = if self.rt[idx].preemptions > 0 {
            self.restart_overhead
        } else {
            0
        }
        .saturating_add(self.recovery.get_mut(idx).map_or(0, std::mem::take));
        let rt = &mut self.rt[idx];
        rt.status = Status::Running;
        // A preempted job keeps its (cleared) list: it serves the next placement.
        let mut old = std::mem::replace(&mut rt.placement, p);
        if old.parts.capacity() > 0 && self.spare.len() < MAX_SPARE {
            old.clear();
            self.spare.push(old);
        }
        rt.last_update = now;
        rt.overhead_until = now.saturating_add(overhead);
        rt.first_start.get_or_insert(now);
        if let Some(end) = self.plan_ends.get_mut(idx) {
            *end = PlanEnd::default();
        }
    }

    /// Starts pending job `i` on the GPUs of running job `with`, sharing them (a Muri
    /// group): no GPU is allocated, and the GPUs go back only when the last job of the
    /// group leaves them. Returns false (changing nothing) unless `with` runs, `i` is
    /// pending, and both ask for as many GPUs.
    pub fn start_shared(&mut self, i: JobIdx, with: JobIdx) -> bool {
        let (iu, wu) = (i as usize, with as usize);
        if i == with
            || !self.startable(i)
            || self.rt[wu].status != Status::Running
            || self.jobs[iu].gpus != self.jobs[wu].gpus
        {
            return false;
        }
        made(&mut self.share, self.jobs.len(), NOT_SHARED);
        made(&mut self.share_refs, self.jobs.len(), 0);
        let g = if self.share[wu] == NOT_SHARED {
            self.share[wu] = with;
            self.share_refs[wu] = 1;
            with
        } else {
            self.share[wu]
        };
        self.share[iu] = g;
        self.share_refs[g as usize] += 1;
        let p = self.rt[wu].placement.clone();
        self.mark_running(i, p);
        true
    }

    /// Starts pending job `i` on `p` as a guest: it runs there without holding the
    /// GPUs, which stay free to every other start (AntMan's opportunistic jobs sit on
    /// GPUs that guaranteed jobs may take; the policy decides who shares what). Returns
    /// false (changing nothing) unless `i` is pending and `p` names existing GPUs, as
    /// many as it asks for.
    pub fn start_overlay(&mut self, i: JobIdx, p: Placement) -> bool {
        let idx = i as usize;
        if !self.startable(i) || p.gpus() != self.jobs[idx].gpus {
            return false;
        }
        let valid = p.parts.iter().all(|&(n, m)| {
            self.cluster.nodes.get(n as usize).is_some_and(|node| {
                let all = if node.gpus >= 64 {
                    u64::MAX
                } else {
                    (1u64 << node.gpus) - 1
                };
                m & !all == 0
            })
        });
        if !valid {
            return false;
        }
        made(&mut self.overlay, self.jobs.len(), false)[idx] = true;
        self.mark_running(i, p);
        true
    }

    /// Whether running job `i` is a guest on GPUs it does not hold.
    pub fn is_overlay(&self, i: JobIdx) -> bool {
        self.overlay.get(i as usize).copied().unwrap_or(false)
    }

    fn share_of(&self, i: JobIdx) -> u32 {
        self.share.get(i as usize).copied().unwrap_or(NOT_SHARED)
    }

    /// The group whose GPUs job `i` shares (named by its first member), if any.
    pub fn share_group(&self, i: JobIdx) -> Option<JobIdx> {
        let g = self.share_of(i);
        (g != NOT_SHARED).then_some(g)
    }

    /// How many running jobs hold job `i`'s GPUs, `i` included (1 when it shares none).
    pub fn sharing_count(&self, i: JobIdx) -> u32 {
        match self.share_of(i) {
            NOT_SHARED => 1,
            g => self.share_refs[g as usize],
        }
    }

    /// The jobs sharing job `i`'s GPUs, `i` included (just `i` when it shares none).
    pub fn sharing(&self, i: JobIdx) -> Vec<JobIdx> {
        let g = self.share_of(i);
        if g == NOT_SHARED {
            return vec![i];
        }
        self.running
            .iter()
            .copied()
            .filter(|&j| self.share_of(j) == g)
            .collect()
    }

    /// Gives back a stopping job's GPUs, unless other jobs of its group still use them;
    /// with `fence`, they stay held and are listed for [`World::take_fenced`].
    fn release_gpus(&mut self, i: JobIdx, p: &Placement, fence: bool) {
        if self.overlay.get_mut(i as usize).is_some_and(std::mem::take) {
            return;
        }
        let g = self.share_of(i);
        if g != NOT_SHARED {
            self.share[i as usize] = NOT_SHARED;
            self.share_refs[g as usize] -= 1;
            if self.share_refs[g as usize] > 0 {
                return;
            }
        }
        if fence {
            self.fenced.push((i, p.clone()));
            return;
        }
        // The placement came from a successful allocate, so release cannot fail.
        let _ = self.state.release(p);
    }

    /// A running job fails: it stops as a preempted one does (its GPUs free at once),
    /// loses `lost` ms of the work it had done (back to its last surviving checkpoint),
    /// and after its next start makes no progress for `recovery` ms (restore and
    /// restart). Returns false, changing nothing, if it was not running.
    pub fn fail(&mut self, i: JobIdx, lost: f64, recovery: Time) -> bool {
        if !self.stop(i, false) {
            return false;
        }
        let idx = i as usize;
        let duration = self.jobs[idx].duration as f64;
        let rt = &mut self.rt[idx];
        rt.remaining = (rt.remaining + lost.max(0.0)).min(duration);
        let slot = &mut made(&mut self.recovery, self.jobs.len(), 0)[idx];
        *slot = slot.saturating_add(recovery);
        true
    }

    /// Preempts a running job. Returns false if it was not running.
    pub fn preempt(&mut self, i: JobIdx) -> bool {
        self.stop(i, false)
    }

    /// A policy's preemption: fenced when the driver asks for it.
    pub(crate) fn preempt_by_policy(&mut self, i: JobIdx) -> bool {
        self.stop(i, self.fence_preemptions)
    }

    fn stop(&mut self, i: JobIdx, fence: bool) -> bool {
        if self.rt[i as usize].status != Status::Running {
            return false;
        }
        self.sync(i);
        let p = std::mem::take(&mut self.rt[i as usize].placement);
        self.release_gpus(i, &p, fence);
        self.remove_running(i);
        self.enter_pending(i);
        let rt = &mut self.rt[i as usize];
        rt.placement = p;
        rt.placement.clear();
        rt.status = Status::Pending;
        rt.preemptions += 1;
        rt.generation += 1;
        if fence {
            // Its processes still run: it must not start again in the same pass (the
            // driver unblocks it once they have ended).
            self.set_blocked(i, true);
        }
        true
    }

    /// Takes a pending job out of the queue for good (a cancelled submission). Returns
    /// false if it was not pending.
    pub fn withdraw(&mut self, i: JobIdx) -> bool {
        if self.rt[i as usize].status != Status::Pending {
            return false;
        }
        self.leave_pending(i);
        let now = self.now;
        let rt = &mut self.rt[i as usize];
        rt.status = Status::Finished;
        rt.finish = Some(now);
        rt.generation += 1;
        true
    }

    /// Turns a pending job away for good (admission control): it never runs, and the
    /// outcome records `reason`. Returns false if it was not pending.
    pub fn decline(&mut self, i: JobIdx, reason: Box<str>) -> bool {
        if self.rt[i as usize].status != Status::Pending {
            return false;
        }
        self.leave_pending(i);
        let rt = &mut self.rt[i as usize];
        rt.status = Status::Finished;
        rt.generation += 1;
        self.declined.insert(i, reason);
        true
    }

    /// Completes a running job.
    pub fn finish(&mut self, i: JobIdx) {
        self.sync(i);
        let mut p = std::mem::take(&mut self.rt[i as usize].placement);
        self.release_gpus(i, &p, false);
        if self.spare.len() < MAX_SPARE {
            p.clear();
            self.spare.push(p);
        }
        self.remove_running(i);
        let now = self.now;
        let rt = &mut self.rt[i as usize];
        rt.status = Status::Finished;
        rt.remaining = 0.0;
        rt.finish = Some(now);
        rt.generation += 1;
        rt.placement = Placement { parts: Vec::new() };
    }

    /// An empty placement to fill, reusing a finished job's list when there is one.
    pub(crate) fn spare_placement(&mut self) -> Placement {
        self.spare.pop().unwrap_or_default()
    }

    /// Jobs holding GPUs (in no particular order).
    pub fn running(&self) -> &[JobIdx] {
        &self.running
    }
    /// Number of pending jobs.
    pub fn pending_count(&self) -> usize {
        self.pending.len()
    }

    /// Pending jobs (unordered).
    pub fn pending(&self) -> &[JobIdx] {
        &self.pending
    }
    /// Smallest GPU demand of any pending job.
    pub fn min_pending_gpus(&self) -> Option<u32> {
        self.pending_gpus.min()
    }
    /// GPUs wanted by all pending jobs together.
    pub fn pending_gpu_sum(&self) -> u64 {
        self.pending_gpus.sum()
    }
    /// GPUs held by running jobs.
    pub fn busy_gpus(&self) -> u64 {
        self.cluster.total_gpus as u64 - self.state.free_gpus()
    }
    /// Finds GPUs for job `j` on the free GPUs by `strategy` (random draws and
    /// topology prices come from this run's seed and cache).
    /// With [`World::honour_gpu_types`], a job that names a GPU type is placed on nodes
    /// of that type only.
    pub fn place(&self, j: JobIdx, strategy: PlacementStrategy, out: &mut Placement) -> bool {
        let aux = placement::Aux {
            seed: self.seed,
            job: &self.jobs[j as usize].id,
            now: self.now,
            scorer: &self.scorer,
        };
        let typed = match &self.jobs[j as usize].gpu_type {
            Some(t) if self.honour_gpu_types => {
                match placement::of_type(&self.cluster, &self.state, t) {
                    Some(view) => Some(view),
                    None => {
                        out.clear();
                        return false;
                    }
                }
            }
            _ => None,
        };
        placement::place_with(
            &self.cluster,
            typed.as_ref().unwrap_or(&self.state),
            self.jobs[j as usize].gpus,
            strategy,
            Some(aux),
            out,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runtime_record_stays_small() {
        // Every trace job has one from the start of a run: on a million-job trace each
        // byte is a megabyte of fresh pages, which bounded the event rate.
        assert!(
            std::mem::size_of::<JobRt>() <= 120,
            "JobRt grew to {} bytes: keep fields only some policies set in a table of their own",
            std::mem::size_of::<JobRt>()
        );
    }

    #[test]
    fn tables_made_on_first_use_cover_jobs_appended_later() {
        let cluster = apiary_model::ClusterSpec::preset("n1g4")
            .unwrap()
            .build()
            .unwrap();
        let mut w = World::new(cluster, vec![Job::new("a", 0, 1, 100)]);
        w.plan_end_mut(0).hold_until = 50;
        w.set_speed(0, 0.5);
        w.set_blocked(0, true);
        let b = w.push_job(Job::new("b", 0, 1, 100));
        assert_eq!(w.plan_end(b), PlanEnd::default());
        w.plan_end_mut(b).hold_until = 70;
        assert_eq!(w.plan_end(b).hold_until, 70);
        assert_eq!(w.speed(b), 1.0);
        w.submit(b);
        assert!(w.startable(b), "an appended job is not blocked");
        assert!(w.pop_job(b));
        assert_eq!((w.plan_end(0).hold_until, w.speed(0)), (50, 0.5));
        assert_eq!(
            w.plan_end(b),
            PlanEnd::default(),
            "the taken-back job's entry went"
        );
    }

    #[test]
    fn jobs_leave_and_enter_the_pending_and_running_lists_by_their_slots() {
        let cluster = apiary_model::ClusterSpec::preset("n1g4")
            .unwrap()
            .build()
            .unwrap();
        let jobs = (0..4)
            .map(|k| Job::new(format!("{k}"), 0, 1, 100))
            .collect();
        let mut w = World::new(cluster, jobs);
        for i in 0..4 {
            w.submit(i);
        }
        assert_eq!(w.pending(), [0, 1, 2, 3]);
        let mut p = Placement::default();
        assert!(w.place(1, PlacementStrategy::Consolidated, &mut p));
        assert!(w.start(1, p));
        assert_eq!(
            w.pending(),
            [0, 3, 2],
            "the last pending job took 1's place"
        );
        assert_eq!(w.running(), [1]);
        let mut p = Placement::default();
        assert!(w.place(0, PlacementStrategy::Consolidated, &mut p));
        assert!(w.start(0, p));
        assert_eq!(w.pending(), [2, 3]);
        assert!(w.preempt(1));
        assert_eq!(w.running(), [0]);
        assert_eq!(w.pending(), [2, 3, 1]);
        assert!(w.decline(3, "no".into()));
        assert_eq!(w.pending(), [2, 1]);
        assert_eq!(w.declined(3), Some("no"));
        assert!(!w.decline(3, "again".into()), "not pending any more");
        w.finish(0);
        assert!(w.running().is_empty());
        assert_eq!(w.pending_count(), 2);
    }
}
