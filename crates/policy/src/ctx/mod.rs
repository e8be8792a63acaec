//! A policy's window on the [`World`] during one call: the core [`Ctx`] (read the
//! cluster and the jobs, start, preempt, ask to be woken) and every other mechanism as
//! a [`Handle`] that opens only when the policy declared its capability.
//!
//! The core is what every policy needs and both drivers can honour. A mechanism a
//! paper needed beyond it (shared GPUs, guests, elastic resizing, stalls and holds,
//! admission control, the jobs to come, hosting other policies in tenants' shares) is
//! a module of its own here: a marker type implementing [`Mechanism`], naming its
//! [`Capability`], and the methods of its [`Handle`]. `ctx.open::<M>()` (or the
//! shortcut [`Handles`] names) gives the handle when the acting policy declared the
//! capability, and the typed refusal [`PolicyError::Undeclared`] otherwise, which the
//! policy passes on with `?`: the simulator stops on it, the live service refuses the
//! pass. There is no path from a `Ctx` to the whole `World`.

mod adaptive;
mod admission;
mod carbon;
mod cpus;
mod elastic;
mod gpus;
mod groups;
mod guests;
mod handles;
mod holds;
mod hosting;
mod io;
mod lookahead;
mod online;
mod power;
mod speeds;
mod stalls;
mod tenant;

pub use adaptive::Adaptive;
pub use admission::Admission;
pub use carbon::Carbon;
pub use cpus::Cpus;
pub use elastic::Elastic;
pub use gpus::Gpus;
pub use groups::Groups;
pub use guests::Guests;
pub use handles::Handles;
pub use holds::Holds;
pub use hosting::Hosting;
pub use io::Io;
pub use lookahead::Lookahead;
pub use online::Online;
pub use power::Power;
pub use speeds::Speeds;
pub use stalls::Stalls;
pub use tenant::{Placer, Tenant};

use crate::placement::PlacementStrategy;
use crate::spec::{Capabilities, Capability};
use crate::world::{Action, JobIdx, JobRt, Status, World};
use crate::{Policy, PolicyError};
use apiary_model::{Cluster, ClusterState, Job, Placement, Time};
use std::marker::PhantomData;

/// Who acts through a context: the name its errors carry and the capabilities the
/// policy instance declares ([`Policy::capabilities`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Declared {
    /// The policy's registry name.
    pub policy: &'static str,
    /// What it may use beyond the core.
    pub capabilities: Capabilities,
}

impl Declared {
    /// What `policy` declares.
    pub fn of(policy: &dyn Policy) -> Declared {
        Declared {
            policy: policy.name(),
            capabilities: policy.capabilities(),
        }
    }
}

/// What a driver keeps across its calls into a policy: the actions the policy took
/// (for the driver to act on, then clear) and the wake-up its last pass asked for.
/// Kept by the driver so that the action list is allocated once per run.
#[derive(Debug, Default)]
pub struct Pass {
    /// What the policy did, in order.
    pub actions: Vec<Action>,
    /// The earliest time the last [`Pass::schedule`] asked to be called again.
    pub wake: Option<Time>,
}

impl Pass {
    /// A context on `w` for one call of the policy `who` describes (admission, a
    /// finish, a requeue).
    pub fn ctx<'a>(&'a mut self, w: &'a mut World, who: Declared) -> Ctx<'a> {
        Ctx {
            w,
            actions: &mut self.actions,
            wake: &mut self.wake,
            scope: None,
            who,
        }
    }

    /// One scheduling pass of `policy` (which `who` describes) on `w`: its actions are
    /// appended, its wake-up request replaces the last one, and a use of a mechanism it
    /// did not declare is the error.
    pub fn schedule(
        &mut self,
        w: &mut World,
        policy: &mut dyn Policy,
        who: Declared,
    ) -> Result<(), PolicyError> {
        self.wake = None;
        policy.schedule(&mut self.ctx(w, who))
    }
}

struct Scope<'a> {
    tenant: &'a mut Tenant,
    placer: &'a mut dyn Placer,
}

/// A policy's window on the [`World`] during one call.
///
/// A context the [`Hosting`] mechanism opens narrows it to one tenant: capacity, free
/// GPUs, running and pending jobs are the tenant's, and starts go through the tenant's
/// [`Placer`]. Policies cannot tell the difference, which is how one intra-tenant
/// policy (FIFO, Tiresias, ...) runs unchanged inside HiveD's virtual clusters.
pub struct Ctx<'a> {
    w: &'a mut World,
    actions: &'a mut Vec<Action>,
    wake: &'a mut Option<Time>,
    scope: Option<Scope<'a>>,
    who: Declared,
}

/// A mechanism beyond the core contract: the capability a policy declares to use it.
/// Its methods are those of [`Handle<M>`](Handle), defined in its module.
pub trait Mechanism {
    /// What a policy must declare.
    const CAPABILITY: Capability;
}

/// A mechanism `M`, opened on a context for a policy that declared it.
pub struct Handle<'c, 'a, M> {
    ctx: &'c mut Ctx<'a>,
    mechanism: PhantomData<M>,
}

// A handle extends the context it was opened on: the core stays in reach.
impl<'a, M> std::ops::Deref for Handle<'_, 'a, M> {
    type Target = Ctx<'a>;
    fn deref(&self) -> &Ctx<'a> {
        self.ctx
    }
}
impl<'a, M> std::ops::DerefMut for Handle<'_, 'a, M> {
    fn deref_mut(&mut self) -> &mut Ctx<'a> {
        self.ctx
    }
}

impl<'a> Ctx<'a> {
    /// Opens mechanism `M`: refused, naming the policy and the capability, unless the
    /// acting policy declares it; inside a tenant's share only mechanisms that read
    /// and never act ([`Capability::in_tenant`]) open.
    pub fn open<M: Mechanism>(&mut self) -> Result<Handle<'_, 'a, M>, PolicyError> {
        let c = M::CAPABILITY;
        if self.who.capabilities.has(c) && (self.scope.is_none() || c.in_tenant()) {
            Ok(Handle {
                ctx: self,
                mechanism: PhantomData,
            })
        } else {
            Err(PolicyError::Undeclared {
                policy: self.who.policy,
                capability: c,
            })
        }
    }
    /// Current time.
    pub fn now(&self) -> Time {
        self.w.now
    }
    /// The cluster's layout.
    pub fn cluster(&self) -> &Cluster {
        &self.w.cluster
    }
    /// The whole cluster's free GPUs, node by node (a tenant's share has no layout of
    /// its own: its policy places through the share's placer).
    pub fn free(&self) -> &ClusterState {
        &self.w.state
    }
    /// How many jobs the policy has been told of: every job index it may see is below
    /// this (the jobs to come are the [`Lookahead`] mechanism's).
    pub fn job_count(&self) -> usize {
        self.w.arrived()
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
    /// Reference work left (ms at rate 1) as of now. Only policies that declare
    /// [`Capability::Durations`] (SJF, SRTF, SRSF) should call this.
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
    /// Starts a job on GPUs chosen by `strategy` (in a tenant's share, by the tenant's
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
                s.placer.release(i);
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
    /// Preempts a running job; its GPUs are free at once.
    pub fn preempt(&mut self, i: JobIdx) -> bool {
        let ok = self.w.preempt_by_policy(i);
        if ok {
            if let Some(s) = &mut self.scope {
                s.placer.release(i);
                s.tenant.stopped(i, self.w.jobs[i as usize].gpus, true);
            }
            self.actions.push(Action::Preempt(i));
        }
        ok
    }
    /// Asks to be called again at `t` (the earliest request wins).
    pub fn wake_at(&mut self, t: Time) {
        if t > self.w.now {
            *self.wake = Some(self.wake.map_or(t, |w| w.min(t)));
        }
    }

    /// Starts a job on `p` as it is; the mechanisms that choose GPUs call it.
    fn start_on(&mut self, i: JobIdx, p: Placement) -> bool {
        let ok = self.w.start(i, p);
        if ok {
            self.actions.push(Action::Start(i));
        }
        ok
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement;
    use apiary_model::ClusterSpec;
    use apiary_model::Job;

    /// What a policy of `caps` declares.
    fn who(policy: &'static str, caps: &[Capability]) -> Declared {
        Declared {
            policy,
            capabilities: Capabilities::of(caps),
        }
    }

    #[test]
    fn the_jobs_to_come_need_lookahead_declared() {
        let c = ClusterSpec::preset("n1g4").unwrap().build().unwrap();
        let jobs = vec![Job::new("a", 0, 1, 1_000), Job::new("b", 5_000, 1, 1_000)];
        let mut w = World::new(c, jobs);
        w.submit(0);
        let mut pass = Pass::default();
        let mut ctx = pass.ctx(&mut w, who("gittins", &[Capability::Lookahead]));
        assert_eq!(ctx.job_count(), 1, "the core sees the jobs submitted");
        assert_eq!(
            ctx.lookahead().unwrap().all_jobs().len(),
            2,
            "declared: the job to come is seen"
        );
        let mut ctx = pass.ctx(&mut w, who("tiresias", &[]));
        match ctx.lookahead().err() {
            Some(PolicyError::Undeclared { policy, capability }) => {
                assert_eq!((policy, capability), ("tiresias", Capability::Lookahead));
            }
            e => panic!("expected an undeclared lookahead, got {e:?}"),
        }
    }

    #[test]
    fn a_tenants_share_opens_only_the_mechanisms_that_read() {
        let c = ClusterSpec::preset("n1g4").unwrap().build().unwrap();
        let mut w = World::new(c, vec![Job::new("a", 0, 1, 1_000)]);
        w.submit(0);
        let mut pass = Pass::default();
        let host = who("quota", &[Capability::Tenants]);
        let mut ctx = pass.ctx(&mut w, host);
        let mut hosting = ctx.hosting().unwrap();
        let (mut tenant, mut placer) = (Tenant::new(2), crate::vc::QuotaPlacer);
        tenant.add_pending(1);
        let mut woken = None;
        let inner = who("inner", &[Capability::Lookahead, Capability::ChoosesGpus]);
        let mut sub = hosting.host(&mut tenant, &mut placer, inner, &mut woken);
        assert_eq!((sub.total_gpus(), sub.free_gpus()), (2, 2));
        assert!(
            sub.lookahead().is_ok(),
            "reading the jobs to come is allowed"
        );
        assert_eq!(
            sub.gpus().err(),
            Some(PolicyError::Undeclared {
                policy: "inner",
                capability: Capability::ChoosesGpus
            }),
            "GPUs come from the tenant's placer"
        );
        sub.wake_at(7_000);
        assert!(sub.start_with(0, PlacementStrategy::Consolidated));
        assert_eq!(
            woken,
            Some(7_000),
            "the hosted policy's wake-up is the host's to merge"
        );
        assert_eq!(tenant.used, 1);
        assert_eq!(pass.actions, [Action::Start(0)]);
        assert_eq!(pass.wake, None);
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

    const ELASTICFLOW: &[Capability] = &[Capability::Stalls, Capability::Holds];

    #[test]
    fn a_held_job_keeps_its_gpus_until_its_hold() {
        let mut w = one_running(0b11);
        assert_eq!(w.finish_time(0), 10_000);
        let mut pass = Pass::default();
        let mut ctx = pass.ctx(&mut w, who("elasticflow", ELASTICFLOW));
        let mut holds = ctx.holds().unwrap();
        holds.hold_until(0, 15_000);
        holds.hold_until(0, 15_000);
        assert_eq!(
            holds.w.finish_time(0),
            15_000,
            "work done at 10 s, held to 15 s"
        );
        holds.hold_until(0, 5_000);
        assert_eq!(
            holds.w.finish_time(0),
            10_000,
            "a hold before the work ends changes nothing"
        );
        holds.hold_until(0, 0);
        assert_eq!(holds.w.plan_end(0).hold_until, 0, "a past time clears it");
        assert_eq!(
            pass.actions,
            [Action::Hold(0); 3],
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
        let mut pass = Pass::default();
        let mut ctx = pass.ctx(&mut w, who("elasticflow", ELASTICFLOW));
        // Each step, then when the job completes, and why.
        type Step = (fn(&mut Ctx<'_>), Time, &'static str);
        let steps: [Step; 5] = [
            (
                |c| {
                    let mut stalls = c.stalls().unwrap();
                    stalls.stall(0, 2_000);
                    stalls.cap_work(0, 10_000);
                },
                Time::MAX,
                "2 s stalled, capped at 10 s: 2 s of work is left at the cap",
            ),
            (
                |c| c.holds().unwrap().end_by(0, 12_000),
                12_000,
                "its end event ends it",
            ),
            (
                |c| {
                    c.w.now = 11_000;
                    assert_eq!(c.remaining(0), 2_000.0, "no progress past the cap");
                    c.stalls().unwrap().cap_work(0, 0);
                },
                12_000,
                "uncapped, the end event still ends it",
            ),
            (
                |c| c.holds().unwrap().end_by(0, 0),
                13_000,
                "no end either: done 2 s after 11 s",
            ),
            (
                |c| c.holds().unwrap().end_by(0, 5_000),
                11_000,
                "an end already past ends it now",
            ),
        ];
        for (act, finish, why) in steps {
            act(&mut ctx);
            assert_eq!(ctx.w.finish_time(0), finish, "{why}");
        }
        ctx.holds().unwrap().judge_deadline_at(0, 9_000);
        assert_eq!(ctx.w.plan_end(0).judged, Some(9_000));
        assert_eq!(
            pass.actions,
            [
                Action::Stall(0),
                Action::Cap(0),
                Action::End(0),
                Action::Cap(0),
                Action::End(0),
                Action::End(0)
            ],
            "each mechanism's action is its own"
        );
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
