//! A policy's window on the [`World`] during one call ([`Ctx`]), and the tenant scope a
//! VC-sharing policy narrows it to ([`Tenant`], [`Placer`]).

use crate::PolicyError;
use crate::placement::PlacementStrategy;
use crate::spec::{Capability, PolicySpec};
use crate::world::{Action, JobIdx, JobRt, Status, World};
use apiary_model::{Job, Placement, Time};

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
    fn release(&mut self, w: &World, j: JobIdx);
    /// The hosted policy preempted running job `j`, which held `gpus` (already free in
    /// `w.state`). A placer whose jobs take time to stop may hold the GPUs here.
    fn preempted(&mut self, w: &mut World, j: JobIdx, gpus: &Placement) {
        let _ = gpus;
        self.release(w, j);
    }
}

/// One tenant's share as a hosted policy sees it: its capacity, its running jobs and
/// its pending demand.
#[derive(Debug, Default, Clone)]
pub struct Tenant {
    /// GPUs the tenant is entitled to.
    pub capacity: u64,
    /// GPUs its running jobs hold.
    pub used: u64,
    running: Vec<JobIdx>,
    pending: usize,
    pending_gpus: crate::demands::Demands,
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

struct Scope<'a> {
    tenant: &'a mut Tenant,
    placer: &'a mut dyn Placer,
}

/// A policy's window on the [`World`] during one call.
///
/// A scoped context ([`Ctx::scoped`]) narrows it to one tenant: capacity, free GPUs,
/// running and pending jobs are the tenant's, and starts go through the tenant's
/// [`Placer`]. Policies cannot tell the difference, which is how one intra-tenant
/// policy (FIFO, Tiresias, ...) runs unchanged inside HiveD's virtual clusters.
pub struct Ctx<'a> {
    w: &'a mut World,
    actions: &'a mut Vec<Action>,
    wake: Option<Time>,
    scope: Option<Scope<'a>>,
    spec: &'static PolicySpec,
    error: Option<PolicyError>,
}

impl<'a> Ctx<'a> {
    /// Wraps a world for one call of the policy `spec` declares; actions are appended
    /// to `actions`. Mechanisms the spec does not declare are refused, and the refusal
    /// is kept for the driver ([`Ctx::take_error`]).
    pub fn new(
        w: &'a mut World,
        actions: &'a mut Vec<Action>,
        spec: &'static PolicySpec,
    ) -> Ctx<'a> {
        Ctx {
            w,
            actions,
            wake: None,
            scope: None,
            spec,
            error: None,
        }
    }
    /// A context narrowed to one tenant, for hosting the policy `spec` declares inside
    /// it. Its wake-up request is read with [`Ctx::wake`] and its error with
    /// [`Ctx::take_error`]; neither is merged into `self`.
    pub fn scoped<'b>(
        &'b mut self,
        tenant: &'b mut Tenant,
        placer: &'b mut dyn Placer,
        spec: &'static PolicySpec,
    ) -> Ctx<'b> {
        Ctx {
            w: &mut *self.w,
            actions: &mut *self.actions,
            wake: None,
            scope: Some(Scope { tenant, placer }),
            spec,
            error: None,
        }
    }
    /// Why the policy's last call broke the contract (it used a capability its spec
    /// does not declare), if it did; the driver stops on it.
    pub fn take_error(&mut self) -> Option<PolicyError> {
        self.error.take()
    }
    /// Records a contract violation for the driver (a hosting policy passes on its
    /// hosted policy's).
    pub fn fail(&mut self, e: PolicyError) {
        self.error.get_or_insert(e);
    }
    /// Whether the acting policy may use `c` here: declared, and (for mechanisms beyond
    /// placement-driven starts) not inside a tenant's share. Records the violation if not.
    fn allow(&mut self, c: Capability) -> bool {
        if self.spec.has(c) && self.scope.is_none() {
            return true;
        }
        self.fail(PolicyError::Undeclared {
            policy: self.spec.name,
            capability: c,
        });
        false
    }
    /// The earliest wake-up the policy asked for.
    pub fn wake(&self) -> Option<Time> {
        self.wake
    }
    /// Current time.
    pub fn now(&self) -> Time {
        self.w.now
    }
    /// The whole world, read-only.
    pub fn world(&self) -> &World {
        self.w
    }
    /// Every job of the run, those not yet submitted included: the whole trace in the
    /// simulator, the jobs submitted so far live. Needs [`Capability::Lookahead`]; used
    /// undeclared, the violation is recorded (the driver stops on it) and the slice is
    /// empty.
    pub fn all_jobs(&mut self) -> &[Job] {
        if !self.spec.has(Capability::Lookahead) {
            self.fail(PolicyError::Undeclared {
                policy: self.spec.name,
                capability: Capability::Lookahead,
            });
            return &[];
        }
        &self.w.jobs
    }
    /// A job's description.
    pub fn job(&self, i: JobIdx) -> &Job {
        &self.w.jobs[i as usize]
    }
    /// A job's runtime record (counters as of its last update; use the accessors below
    /// for live values).
    pub fn rt(&self, i: JobIdx) -> &JobRt {
        &self.w.rt[i as usize]
    }
    /// A job's status.
    pub fn status(&self, i: JobIdx) -> Status {
        self.w.rt[i as usize].status
    }
    /// Attained service (GPU-ms) up to now.
    pub fn attained(&self, i: JobIdx) -> u64 {
        let rt = &self.w.rt[i as usize];
        if rt.status == Status::Running {
            rt.attained + (self.w.now - rt.last_update) * self.w.jobs[i as usize].gpus as u64
        } else {
            rt.attained
        }
    }
    /// Time run so far (ms) up to now.
    pub fn executed(&self, i: JobIdx) -> Time {
        let rt = &self.w.rt[i as usize];
        if rt.status == Status::Running {
            rt.executed + (self.w.now - rt.last_update)
        } else {
            rt.executed
        }
    }
    /// Reference work left (ms at rate 1) as of now. Only policies that are allowed to
    /// know job durations (SJF, SRTF, SRSF) should call this.
    pub fn remaining(&self, i: JobIdx) -> f64 {
        let rt = &self.w.rt[i as usize];
        if rt.status != Status::Running {
            return rt.remaining;
        }
        let from = rt.last_update.max(rt.overhead_until);
        let to = crate::world::progress_end(self.w.now, self.w.plan_end(i).work_until);
        if to > from {
            (rt.remaining - (to - from) as f64 * rt.rate).max(0.0)
        } else {
            rt.remaining
        }
    }
    /// Free GPUs.
    pub fn free_gpus(&self) -> u64 {
        match &self.scope {
            Some(s) => s.tenant.capacity.saturating_sub(s.tenant.used),
            None => self.w.state.free_gpus(),
        }
    }
    /// Total GPUs.
    pub fn total_gpus(&self) -> u64 {
        match &self.scope {
            Some(s) => s.tenant.capacity,
            None => self.w.cluster.total_gpus as u64,
        }
    }
    /// Running jobs (unordered).
    pub fn running(&self) -> &[JobIdx] {
        match &self.scope {
            Some(s) => &s.tenant.running,
            None => self.w.running(),
        }
    }
    /// Pending jobs (unordered), where the view keeps them: the whole cluster does, a
    /// tenant's scope only counts them (`None`).
    pub fn pending_jobs(&self) -> Option<&[JobIdx]> {
        match &self.scope {
            Some(_) => None,
            None => Some(self.w.pending()),
        }
    }
    /// Number of pending jobs.
    pub fn pending_count(&self) -> usize {
        match &self.scope {
            Some(s) => s.tenant.pending,
            None => self.w.pending_count(),
        }
    }
    /// GPUs wanted by all pending jobs together.
    pub fn pending_gpu_sum(&self) -> u64 {
        match &self.scope {
            Some(s) => s.tenant.pending_gpus.sum(),
            None => self.w.pending_gpu_sum(),
        }
    }
    /// Smallest GPU demand among pending jobs.
    pub fn min_pending_gpus(&self) -> Option<u32> {
        match &self.scope {
            Some(s) => s.tenant.pending_gpus.min(),
            None => self.w.min_pending_gpus(),
        }
    }
    /// Finds GPUs for a job with a strategy, without taking them.
    pub fn find_placement(
        &self,
        i: JobIdx,
        strategy: PlacementStrategy,
        out: &mut Placement,
    ) -> bool {
        self.w.place(i, strategy, out)
    }
    /// Starts a job on GPUs chosen by `strategy` (in a scoped context, by the tenant's
    /// placer). Returns false if none fit.
    pub fn start_with(&mut self, i: JobIdx, strategy: PlacementStrategy) -> bool {
        if self.w.rt[i as usize].status != Status::Pending {
            return false;
        }
        let mut p = std::mem::take(&mut self.w.rt[i as usize].placement);
        if p.parts.capacity() == 0 {
            p = self.w.spare_placement();
        }
        p.clear();
        if let Some(s) = &mut self.scope {
            let g = self.w.jobs[i as usize].gpus;
            if !s.placer.place(self.w, i, strategy, &mut p) {
                self.w.rt[i as usize].placement = p;
                return false;
            }
            if !self.w.start(i, p) {
                s.placer.release(self.w, i);
                return false;
            }
            s.tenant.started(i, g);
            self.actions.push(Action::Start(i));
            return true;
        }
        if !self.w.place(i, strategy, &mut p) {
            self.w.rt[i as usize].placement = p;
            return false;
        }
        self.start_on(i, p)
    }
    /// Starts a job on the given GPUs. Returns false (changing nothing) if the job is not
    /// pending, the GPU count is wrong, or a GPU is taken.
    /// Needs [`Capability::ChoosesGpus`]; in a tenant's share GPUs come from its placer.
    pub fn start(&mut self, i: JobIdx, p: Placement) -> bool {
        if !self.allow(Capability::ChoosesGpus) {
            return false;
        }
        self.start_on(i, p)
    }
    fn start_on(&mut self, i: JobIdx, p: Placement) -> bool {
        let ok = self.w.start(i, p);
        if ok {
            self.actions.push(Action::Start(i));
        }
        ok
    }
    /// Preempts a running job; its GPUs are free at once.
    pub fn preempt(&mut self, i: JobIdx) -> bool {
        let held = if self.scope.is_some() {
            self.w.rt[i as usize].placement.clone()
        } else {
            Placement::default()
        };
        let ok = self.w.preempt_by_policy(i);
        if ok {
            if let Some(s) = &mut self.scope {
                s.placer.preempted(self.w, i, &held);
                s.tenant.stopped(i, self.w.jobs[i as usize].gpus, true);
            }
            self.actions.push(Action::Preempt(i));
        }
        ok
    }
    /// Starts a job as a guest on the given GPUs, without taking them
    /// ([`World::start_overlay`]). Needs [`Capability::Guests`].
    pub fn start_overlay(&mut self, i: JobIdx, p: Placement) -> bool {
        if !self.allow(Capability::Guests) {
            return false;
        }
        let ok = self.w.start_overlay(i, p);
        if ok {
            self.actions.push(Action::Start(i));
        }
        ok
    }

    /// Starts `members` (pending, same GPU count) as one group on one placement chosen
    /// by `strategy` for the first: they share the GPUs. All or none start. A scoped
    /// context refuses groups.
    pub fn start_group(&mut self, members: &[JobIdx], strategy: PlacementStrategy) -> bool {
        let Some((&first, rest)) = members.split_first() else {
            return false;
        };
        if !self.allow(Capability::SharedGpus)
            || rest.iter().any(|&j| {
                self.w.rt[j as usize].status != Status::Pending
                    || self.w.jobs[j as usize].gpus != self.w.jobs[first as usize].gpus
            })
        {
            return false;
        }
        if !self.start_with(first, strategy) {
            return false;
        }
        for &j in rest {
            if self.w.start_shared(j, first) {
                self.actions.push(Action::Start(j));
            }
        }
        true
    }

    /// Sets a running or pending job's speed factor (1 = the throughput model's rate);
    /// a running job's completion is rescheduled.
    pub fn set_speed(&mut self, i: JobIdx, factor: f64) {
        if !self.allow(Capability::SpeedFactors) {
            return;
        }
        if factor.is_finite() && factor > 0.0 && self.w.speed(i) != factor {
            self.w.set_speed(i, factor);
            if self.w.rt[i as usize].status == Status::Running {
                self.actions.push(Action::Speed(i));
            }
        }
    }

    /// Gives elastic jobs new placements at once ([`World::reassign`]): any GPU count,
    /// an empty placement pauses a running job. False (changing nothing) if the set is
    /// not feasible. Needs [`Capability::Elastic`].
    pub fn reassign(&mut self, changes: &[(JobIdx, Placement)]) -> bool {
        if !self.allow(Capability::Elastic) {
            return false;
        }
        match self.w.reassign(changes) {
            Some(done) => {
                self.actions.extend(done);
                true
            }
            None => false,
        }
    }

    /// Declines a pending job ([`World::decline`]); false if it was not pending.
    pub fn decline(&mut self, i: JobIdx, reason: impl Into<String>) -> bool {
        if !self.allow(Capability::Declines) {
            return false;
        }
        self.w.decline(i, reason.into().into_boxed_str())
    }

    /// A running job makes no progress for `dur` from now (or from the end of a stall
    /// it is already in): the cost of rescaling or restarting it.
    pub fn stall(&mut self, i: JobIdx, dur: Time) {
        if !self.allow(Capability::Stalls) {
            return;
        }
        if dur == 0 || self.w.rt[i as usize].status != Status::Running {
            return;
        }
        self.w.sync(i);
        let now = self.w.now;
        let rt = &mut self.w.rt[i as usize];
        rt.overhead_until = rt.overhead_until.max(now) + dur;
        self.actions.push(Action::Speed(i));
    }

    /// A running job whose work ends before `t` keeps its GPUs and completes at `t`
    /// (replacing any earlier hold; a time not after now clears it). Models simulators
    /// that end a job only at its plan's slot-aligned end.
    pub fn hold_until(&mut self, i: JobIdx, t: Time) {
        if !self.allow(Capability::Holds) {
            return;
        }
        if self.w.rt[i as usize].status != Status::Running {
            return;
        }
        let t = if t > self.w.now { t } else { 0 };
        if self.w.plan_end(i).hold_until != t {
            self.w.sync(i);
            self.w.plan_end_mut(i).hold_until = t;
            self.actions.push(Action::Speed(i));
        }
    }

    /// A running job makes no progress after `t` until this is called again (0 or a
    /// time not after now: no cap). Models the ElasticFlow artifact, which credits a
    /// round's work only up to its plan's exact end.
    pub fn cap_work(&mut self, i: JobIdx, t: Time) {
        if !self.allow(Capability::Stalls) || self.w.rt[i as usize].status != Status::Running {
            return;
        }
        self.w.sync(i);
        let t = if t > self.w.now { t } else { 0 };
        if self.w.plan_end(i).work_until != t {
            self.w.plan_end_mut(i).work_until = t;
            self.actions.push(Action::Speed(i));
        }
    }

    /// A running job completes at `t` at the latest, with whatever work it has left
    /// (now, for a time not after now; 0 clears it). Models the ElasticFlow artifact,
    /// whose end event completes a job at its plan's end.
    pub fn end_by(&mut self, i: JobIdx, t: Time) {
        if !self.allow(Capability::Holds) || self.w.rt[i as usize].status != Status::Running {
            return;
        }
        let t = if t == 0 { 0 } else { t.max(self.w.now) };
        if self.w.plan_end(i).end_by != t {
            self.w.sync(i);
            self.w.plan_end_mut(i).end_by = t;
            self.actions.push(Action::Speed(i));
        }
    }

    /// Judges the job's deadline at `t` rather than at its completion (the ElasticFlow
    /// artifact judges on its plan's exact end).
    pub fn judge_deadline_at(&mut self, i: JobIdx, t: Time) {
        if self.allow(Capability::Holds) {
            self.w.plan_end_mut(i).judged = Some(t);
        }
    }

    /// Asks to be called again at `t` (the earliest request wins).
    pub fn wake_at(&mut self, t: Time) {
        if t > self.w.now {
            self.wake = Some(self.wake.map_or(t, |w| w.min(t)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement;
    use apiary_model::ClusterSpec;
    use apiary_model::Job;

    #[test]
    fn the_jobs_to_come_need_lookahead_declared() {
        let c = ClusterSpec::preset("n1g4").unwrap().build().unwrap();
        let jobs = vec![Job::new("a", 0, 1, 1_000), Job::new("b", 5_000, 1, 1_000)];
        let mut w = World::new(c, jobs);
        w.submit(0);
        let mut actions = Vec::new();
        let mut ctx = Ctx::new(&mut w, &mut actions, &crate::tiresias::TIRESIAS_GITTINS);
        assert_eq!(ctx.all_jobs().len(), 2, "declared: the job to come is seen");
        assert!(ctx.take_error().is_none());
        let mut ctx = Ctx::new(&mut w, &mut actions, &crate::tiresias::TIRESIAS);
        assert!(ctx.all_jobs().is_empty());
        match ctx.take_error() {
            Some(PolicyError::Undeclared { policy, capability }) => {
                assert_eq!((policy, capability), ("tiresias", Capability::Lookahead));
            }
            e => panic!("expected an undeclared lookahead, got {e:?}"),
        }
    }

    /// A 4-GPU node running one job of 10 s at rate 1 on the GPUs of `mask`.
    fn one_running(mask: u64) -> World {
        let c = ClusterSpec::preset("n1g4").unwrap().build().unwrap();
        let gpus = mask.count_ones();
        let mut w = World::new(c, vec![Job::new("a", 0, gpus, 10_000)]);
        w.submit(0);
        restart(&mut w, mask);
        w.rt[0].rate = 1.0;
        w
    }

    /// Starts the (pending) job on the GPUs of `mask`.
    fn restart(w: &mut World, mask: u64) {
        let mut p = Placement::default();
        p.add(0, mask);
        assert!(w.start(0, p));
    }

    #[test]
    fn a_held_job_keeps_its_gpus_until_its_hold() {
        let mut w = one_running(0b11);
        assert_eq!(w.finish_time(0), 10_000);
        let mut actions = Vec::new();
        let mut ctx = Ctx::new(&mut w, &mut actions, &crate::elasticflow::ELASTICFLOW);
        ctx.hold_until(0, 15_000);
        ctx.hold_until(0, 15_000);
        assert_eq!(
            ctx.world().finish_time(0),
            15_000,
            "work done at 10 s, held to 15 s"
        );
        ctx.hold_until(0, 5_000);
        assert_eq!(
            ctx.world().finish_time(0),
            10_000,
            "a hold before the work ends changes nothing"
        );
        ctx.hold_until(0, 0);
        assert_eq!(
            ctx.world().plan_end(0).hold_until,
            0,
            "a past time clears it"
        );
        assert_eq!(
            actions.len(),
            3,
            "each change reschedules the completion once"
        );
        w.plan_end_mut(0).hold_until = 20_000;
        assert!(w.preempt(0));
        restart(&mut w, 0b11);
        assert_eq!(
            w.plan_end(0).hold_until,
            0,
            "a restart starts without a hold"
        );
    }

    #[test]
    fn a_capped_job_stops_progress_and_ends_by_its_end_event() {
        let mut w = one_running(0b1);
        let mut actions = Vec::new();
        let mut ctx = Ctx::new(&mut w, &mut actions, &crate::elasticflow::ELASTICFLOW);
        // Each step, then when the job completes, and why.
        type Step = (fn(&mut Ctx<'_>), Time, &'static str);
        let steps: [Step; 5] = [
            (
                |c| {
                    c.stall(0, 2_000);
                    c.cap_work(0, 10_000);
                },
                Time::MAX,
                "2 s stalled, capped at 10 s: 2 s of work is left at the cap",
            ),
            (|c| c.end_by(0, 12_000), 12_000, "its end event ends it"),
            (
                |c| {
                    c.w.now = 11_000;
                    assert_eq!(c.remaining(0), 2_000.0, "no progress past the cap");
                    c.cap_work(0, 0);
                },
                12_000,
                "uncapped, the end event still ends it",
            ),
            (
                |c| c.end_by(0, 0),
                13_000,
                "no end either: done 2 s after 11 s",
            ),
            (
                |c| c.end_by(0, 5_000),
                11_000,
                "an end already past ends it now",
            ),
        ];
        for (act, finish, why) in steps {
            act(&mut ctx);
            assert_eq!(ctx.world().finish_time(0), finish, "{why}");
        }
        ctx.judge_deadline_at(0, 9_000);
        assert_eq!(ctx.world().plan_end(0).judged, Some(9_000));
        w.plan_end_mut(0).work_until = 20_000;
        w.plan_end_mut(0).end_by = 20_000;
        assert!(w.preempt(0));
        restart(&mut w, 0b1);
        assert_eq!(
            w.plan_end(0),
            crate::world::PlanEnd::default(),
            "a restart starts uncapped and unjudged"
        );
    }

    #[test]
    fn a_group_holds_its_gpus_until_its_last_member_leaves() {
        let c = ClusterSpec::preset("n1g8").unwrap().build().unwrap();
        let jobs = vec![
            Job::new("a", 0, 4, 10),
            Job::new("b", 0, 4, 10),
            Job::new("c", 0, 4, 10),
            Job::new("d", 0, 2, 10),
        ];
        let mut w = World::new(c, jobs);
        for j in 0..4 {
            w.submit(j);
        }
        let four = |w: &World| {
            let mut p = Placement::default();
            assert!(placement::place(
                &w.cluster,
                &w.state,
                4,
                PlacementStrategy::Consolidated,
                &mut p
            ));
            p
        };
        assert!(w.start(0, four(&w)));
        assert!(!w.start_shared(3, 0), "different GPU counts");
        assert!(!w.start_shared(0, 0));
        assert!(w.start_shared(1, 0));
        assert!(w.start_shared(2, 1), "joining through any member");
        assert_eq!(w.state.free_gpus(), 4);
        assert_eq!(w.sharing(2), vec![0, 1, 2]);
        assert_eq!(w.rt[2].placement, w.rt[0].placement);
        w.finish(0);
        assert_eq!(w.state.free_gpus(), 4, "b and c still hold them");
        assert!(w.preempt(1));
        assert_eq!(w.state.free_gpus(), 4);
        assert_eq!(w.sharing(2), vec![2]);
        w.finish(2);
        assert_eq!(w.state.free_gpus(), 8);
        // b, preempted, starts again on its own.
        assert!(w.start(1, four(&w)));
        assert_eq!(w.sharing(1), vec![1]);
        w.finish(1);
        assert_eq!(w.state.free_gpus(), 8);
    }
}
