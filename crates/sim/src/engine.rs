//! The engine, in parts: a typed event queue of completions, the trace's arrivals, the
//! policy's wake-ups and slot boundaries as timers, hooks for artifact quirks,
//! observers for metric series, and a stack of throughput models for rates, all over a
//! [`Backend`] that holds the world and the policy.
//!
//! [`Engine::step`] handles one time stamp: completions first, then adaptive steps,
//! then arrivals (as the Tiresias-family loops do), then the hooks, then one policy
//! pass if anything changed. A driver or a test can step it and look at the world in
//! between; [`run`](crate::run) steps it to the end. Both drivers run this loop: the
//! simulator over [`SimBackend`], `simulate --driver live` over the live service.

use crate::adaptive::Agents;
use crate::backend::{Backend, SimBackend};
use crate::config::{Config, Mode, Progress};
use crate::error::SimError;
use crate::hooks::{Hook, MuriOverhead};
use crate::observe::{self, Observer};
use crate::resource::Resource;
use crate::throughput::{Stack, Throughput};
use apiary_core::EventQueue;
use apiary_model::{Cluster, Job, JobOutcome, RunOutcome, Time, UtilSeries};
use apiary_policy::{Action, JobIdx, Pass, Policy, Status, World};

/// A running job's completion as scheduled when its rate last changed; stale once the
/// job's generation has moved on (it was preempted, resumed or sped up since).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Finish {
    /// The job.
    pub job: JobIdx,
    /// Its generation when this completion was scheduled.
    pub generation: u32,
}

impl Finish {
    /// Whether the job still runs as it did when this was scheduled.
    pub fn is_live(&self, world: &World) -> bool {
        let rt = &world.rt[self.job as usize];
        rt.generation == self.generation && rt.status == Status::Running
    }
}

/// A run in progress: the backend's world and policy, and everything that moves time
/// on.
pub struct Engine<'a, B: Backend = SimBackend<'a>> {
    b: B,
    rates: Stack<'a>,
    mode: Mode,
    seed: u64,
    cluster_name: String,
    queue: EventQueue<Finish>,
    hooks: Vec<Box<dyn Hook + 'a>>,
    observers: Vec<Box<dyn Observer + 'a>>,
    /// Resources besides GPUs that running jobs share; a job's rate is multiplied by
    /// the smallest of their factors.
    resources: Vec<Box<dyn Resource + 'a>>,
    /// When a resource's factors next change by themselves, as of the last look.
    resource_next: Option<Time>,
    /// Jobs started, restarted or resized since the resources last settled.
    started: Vec<JobIdx>,
    agents: Agents,
    pass: Pass,
    /// Next trace job to arrive.
    cursor: usize,
    /// When the policy asked to be woken.
    wake: Option<Time>,
    /// Where the observers' last interval ended.
    observed: Time,
    /// Trace jobs refused before the policy saw them (too big for the cluster, or
    /// refused by the backend), in trace order: few, so a list of them rather than a
    /// slot per job.
    rejected: Vec<(usize, Box<str>)>,
    /// Something changed since the policy's last pass.
    dirty: bool,
    touched: Vec<JobIdx>,
    /// Failures and repairs, when the run models them.
    failures: Option<crate::failures::Failures>,
    /// Jobs the failures due now end.
    failed: Vec<crate::failures::Struck>,
    events: u64,
    passes: u64,
    finished: usize,
}

impl<'a> Engine<'a> {
    /// The simulator: a run of `jobs` (sorted by submit time) on `cluster` under
    /// `policy`, at the speeds `rates` gives ([`SimBackend`]).
    pub fn sim(
        cluster: Cluster,
        jobs: Vec<Job>,
        policy: &'a mut dyn Policy,
        rates: Stack<'a>,
        cfg: &Config,
    ) -> Result<Engine<'a>, SimError> {
        Engine::new(SimBackend::new(cluster, jobs, policy, cfg)?, rates, cfg)
    }
}

impl<'a, B: Backend> Engine<'a, B> {
    /// Sets up a run over `backend`, at the speeds `rates` gives: the standard
    /// observers record utilisation, job counts (and cluster efficiency for elastic
    /// traces), `cfg.per_event_overhead` installs Muri's hook, and adaptive jobs get
    /// their agents.
    pub fn new(mut b: B, rates: Stack<'a>, cfg: &Config) -> Result<Engine<'a, B>, SimError> {
        if let Mode::Slotted(0) = cfg.mode {
            return Err(SimError::ZeroSlot);
        }
        // One walk over the jobs checks their order and whether any carries rare
        // fields: on a million-job trace each further walk costs milliseconds, and
        // most traces carry none, so the walks that look for them are skipped.
        let mut any_extras = false;
        let mut prev = 0;
        for j in b.trace() {
            if j.submit < prev {
                return Err(SimError::Unsorted {
                    id: j.id.to_string(),
                    submit: j.submit,
                    prev,
                });
            }
            prev = j.submit;
            any_extras |= j.has_extras();
        }
        let start = b.trace().first().map_or(0, |j| j.submit);
        // A policy that caps jobs itself runs under the cap model, uncapped by default.
        let power_limit = cfg.power_limit.or_else(|| {
            b.declares(apiary_policy::Capability::PowerLimits)
                .then_some(1.0)
        });
        let total_gpus = b.world().cluster.total_gpus;
        let with_extras = if any_extras && b.carries_trace_data() {
            b.trace()
        } else {
            &[]
        };
        let observers = observe::standard(
            with_extras,
            start,
            total_gpus,
            cfg.carbon.clone(),
            cfg.pue,
            power_limit,
        )
        .into_iter()
        .map(|o| o as Box<dyn Observer + 'a>)
        .collect();
        let cluster_name = b.world().cluster.name.clone();
        let mut hooks: Vec<Box<dyn Hook + 'a>> = Vec::new();
        if cfg.per_event_overhead {
            hooks.push(Box::new(MuriOverhead::new(b.world())));
        }
        let hosting = b.adaptive();
        let step = hosting.and_then(|h| h.step).unwrap_or(match cfg.mode {
            Mode::Slotted(s) => s,
            Mode::EventDriven => 60 * apiary_model::SECOND,
        });
        let agents = Agents::new(
            b.world_mut(),
            any_extras,
            hosting.is_some_and(|h| h.tunes_batch),
            step,
        );
        let mut resources: Vec<Box<dyn Resource + 'a>> = Vec::new();
        let managed = b.declares(apiary_policy::Capability::Io);
        if let Some(storage) = crate::backend::storage_for(cfg, managed) {
            let policy = b.policy_name();
            let io = crate::io::IoModel::new(b.world_mut(), storage, managed, policy, cfg.seed);
            resources.push(Box::new(io));
        }
        if let Some(f) = power_limit {
            resources.push(Box::new(crate::power::PowerCap::new(
                f,
                b.world().jobs.len(),
            )));
        }
        let managed = b.declares(apiary_policy::Capability::CpuWorkers);
        if let Some(pool) = crate::backend::cpus_for(cfg, managed) {
            let policy = b.policy_name();
            let cpu = crate::cpu::CpuModel::new(b.world_mut(), pool, managed, policy, cfg.seed);
            resources.push(Box::new(cpu));
        }
        let managed = b.declares(apiary_policy::Capability::OnlineSharing);
        if let Some(load) = b.world().resources.online {
            let online = crate::online::OnlineModel::new(b.world(), load, managed);
            resources.push(Box::new(online));
        }
        b.world_mut().now = start;
        let failures = match &cfg.failures {
            None => None,
            Some(_) if !b.models_failures() => {
                return Err(SimError::Failures(
                    "this driver does not model failures yet (the simulator's does)".into(),
                ));
            }
            Some(setting) => Some(
                crate::failures::Failures::new(b.world(), setting.clone(), cfg.seed)
                    .map_err(SimError::Failures)?,
            ),
        };
        Ok(Engine {
            b,
            rates,
            mode: cfg.mode,
            seed: cfg.seed,
            cluster_name,
            queue: EventQueue::new(),
            hooks,
            observers,
            resources,
            resource_next: None,
            started: Vec::new(),
            agents,
            pass: Pass::default(),
            cursor: 0,
            wake: None,
            observed: start,
            rejected: Vec::new(),
            dirty: false,
            touched: Vec::new(),
            failures,
            failed: Vec::new(),
            events: 0,
            passes: 0,
            finished: 0,
        })
    }

    /// Adds a hook, run after the standard ones.
    pub fn hook(&mut self, hook: Box<dyn Hook + 'a>) -> &mut Self {
        self.hooks.push(hook);
        self
    }

    /// Adds an observer; it reports into the outcome after the standard ones.
    pub fn observe(&mut self, observer: Box<dyn Observer + 'a>) -> &mut Self {
        self.observers.push(observer);
        self
    }

    /// The cluster and its jobs as they stand.
    pub fn world(&self) -> &World {
        self.b.world()
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.b
    }

    /// How far the run has got.
    pub fn progress(&self) -> Progress {
        Progress {
            now: self.b.world().now,
            events: self.events,
            finished: self.finished,
            total: self.b.trace().len(),
        }
    }

    /// The next time anything happens, after dropping stale completions; `None` when
    /// nothing will.
    fn next_time(&mut self) -> Option<Time> {
        let world = self.b.world();
        self.queue.skip(|f| !f.is_live(world));
        let now = world.now;
        let mut next = self
            .b
            .trace()
            .get(self.cursor)
            .map_or(Time::MAX, |j| j.submit);
        if let Some((t, _)) = self.queue.peek() {
            next = next.min(t);
        }
        if let Some(w) = self.wake {
            next = next.min(w);
        }
        if let Mode::Slotted(slot) = self.mode
            && self.dirty
        {
            // Something changed since the last pass: decide at the next boundary.
            next = next.min((now / slot + 1) * slot);
        }
        if let Some(t) = self.agents.next_step(now) {
            next = next.min(t);
        }
        self.resource_next = self
            .resources
            .iter()
            .filter_map(|r| r.next_change(world))
            .min();
        if let Some(t) = self.resource_next {
            next = next.min(t);
        }
        // Failures go on as long as anything else happens; a repair also happens while
        // jobs wait, since they may wait for its GPUs.
        if let Some(f) = &self.failures {
            let waiting = next != Time::MAX || world.pending_count() > 0;
            if next != Time::MAX
                && let Some(t) = f.next_failure()
            {
                next = next.min(t);
            }
            if waiting && let Some(t) = f.next_repair() {
                next = next.min(t);
            }
        }
        (next != Time::MAX).then_some(next)
    }

    /// Handles the next time stamp: its events, the hooks, and a policy pass if
    /// anything changed. Returns the time handled, or `None` when the run is over.
    pub fn step(&mut self) -> Result<Option<Time>, SimError> {
        let Some(now) = self.next_time() else {
            return Ok(None);
        };
        for o in &mut self.observers {
            o.interval(self.b.world(), self.observed, now);
        }
        for r in &mut self.resources {
            r.interval(self.b.world(), self.observed, now);
        }
        let resource_due = self.resource_next == Some(now);
        let finished = self.finished;
        self.observed = now;
        let prev = self.b.world().now;
        self.b.world_mut().now = now;

        self.complete(now);
        self.fail_due(now);
        if self.agents.any() {
            let ended = self.agents.advance_due(&mut self.b, &mut self.pass);
            self.ended(ended);
        }
        self.arrive(now);
        if self.wake == Some(now) {
            self.wake = None;
            self.dirty = true;
        }
        if !self.hooks.is_empty() {
            self.run_hooks(prev, now);
        }

        let consult = match self.mode {
            Mode::EventDriven => self.dirty,
            Mode::Slotted(slot) => self.dirty && now % slot == 0,
        };
        if consult {
            self.pass(now)?;
        }
        if !self.resources.is_empty() && (consult || resource_due || self.finished != finished) {
            self.settle()?;
        }
        Ok(Some(now))
    }

    /// Lets the shared resources recompute their shares, and re-times the jobs whose
    /// factors changed.
    fn settle(&mut self) -> Result<(), SimError> {
        for r in &mut self.resources {
            r.settle(self.b.world_mut(), &self.started, &mut self.touched)?;
        }
        self.started.clear();
        for k in 0..self.touched.len() {
            let j = self.touched[k];
            let world = self.b.world_mut();
            world.sync(j);
            world.rt[j as usize].generation += 1;
            self.set_rate(j)?;
        }
        self.touched.clear();
        Ok(())
    }

    /// Sets running job `j`'s rate from the throughput models, the policy's speed
    /// factor and the shared resources, and schedules its completion.
    fn set_rate(&mut self, j: JobIdx) -> Result<(), SimError> {
        let world = self.b.world_mut();
        let rt = &world.rt[j as usize];
        let job = &world.jobs[j as usize];
        let mut rate = self
            .rates
            .rate(job, &rt.placement, &world.cluster)
            .map_err(|source| SimError::Rate {
                job: job.id.to_string(),
                source,
            })?
            * world.speed(j);
        // Each resource's factor is the share of its GPU-bound speed the job reaches
        // for want of that resource alone; the scarcest one sets the pace.
        rate *= self
            .resources
            .iter()
            .map(|r| r.factor(j))
            .fold(1.0, f64::min);
        if let Some(f) = &mut self.failures {
            rate *= f.factor(world, j);
        }
        world.rt[j as usize].rate = rate;
        self.schedule_completion(j);
        Ok(())
    }

    /// Lets the hooks change running jobs' work, and reschedules the jobs they name.
    fn run_hooks(&mut self, prev: Time, now: Time) {
        for h in &mut self.hooks {
            h.advanced(self.b.world_mut(), prev, now, &mut self.touched);
        }
        for k in 0..self.touched.len() {
            let j = self.touched[k];
            self.b.world_mut().rt[j as usize].generation += 1;
            self.schedule_completion(j);
        }
        self.touched.clear();
    }

    /// Steps to the end, reporting progress every 1,024 steps (often enough for a
    /// front end to redraw every second even when each step is a long policy pass, as
    /// Gandiva's are), and returns the outcome.
    pub fn run(mut self, progress: &mut dyn FnMut(Progress)) -> Result<RunOutcome, SimError> {
        let mut steps = 0u32;
        while self.step()?.is_some() {
            steps = steps.wrapping_add(1);
            if steps.is_multiple_of(1024) {
                progress(self.progress());
            }
        }
        progress(self.progress());
        Ok(self.outcome())
    }

    /// Running jobs whose work is done at `now` finish.
    fn complete(&mut self, now: Time) {
        while let Some((_, f)) = self.queue.pop_due(now) {
            if !f.is_live(self.b.world()) {
                continue;
            }
            self.b.complete(f.job, now, &mut self.pass);
            self.ended(1);
        }
    }

    /// Failures and repairs due at `now`: struck jobs go back to the queue, and down
    /// nodes' GPUs are held until their repair.
    fn fail_due(&mut self, now: Time) {
        let Some(f) = &mut self.failures else {
            return;
        };
        if !f.due(self.b.world_mut(), now, &mut self.failed) {
            return;
        }
        let mut gave_up = 0;
        for k in 0..self.failed.len() {
            let s = self.failed[k];
            // A job struck too often ends unfinished, as Slurm stops requeueing a job
            // past its limit, so no run goes on for ever; a fatal failure ends it too.
            self.b
                .fail(s.job, s.lost, s.recovery, s.give_up, &mut self.pass);
            gave_up += usize::from(s.give_up.is_some());
            self.events += 1;
        }
        self.failed.clear();
        f.hold_down(self.b.world_mut());
        for (n, healthy) in f.take_health() {
            self.b.node_health(n, healthy);
        }
        self.dirty = true;
        self.finished += gave_up;
    }

    /// Counts `n` jobs that ended.
    fn ended(&mut self, n: usize) {
        if n > 0 {
            self.finished += n;
            self.events += n as u64;
            self.dirty = true;
        }
    }

    /// Trace jobs submitted at `now` arrive, or are refused if the cluster is too small
    /// for them.
    fn arrive(&mut self, now: Time) {
        let total = self.b.world().cluster.total_gpus;
        while self.cursor < self.b.trace().len() && self.b.trace()[self.cursor].submit == now {
            let k = self.cursor;
            self.cursor += 1;
            self.events += 1;
            let gpus = self.b.trace()[k].gpus;
            if gpus > total || gpus == 0 {
                self.rejected.push((
                    k,
                    format!("needs {gpus} GPUs; the cluster has {total}").into_boxed_str(),
                ));
                continue;
            }
            match self.b.arrive(k, now, &mut self.pass) {
                Ok(_) => self.dirty = true,
                Err(why) => self.rejected.push((k, why)),
            }
        }
    }

    /// Asks the policy, applies its decisions, and sets the rates of the jobs they
    /// started or sped up.
    fn pass(&mut self, now: Time) -> Result<(), SimError> {
        self.dirty = false;
        self.passes += 1;
        self.b.schedule(now, &mut self.pass)?;
        self.wake = match (self.pass.wake, self.mode) {
            (Some(w), Mode::Slotted(slot)) => Some(w.div_ceil(slot) * slot),
            (w, _) => w,
        };
        for k in 0..self.pass.actions.len() {
            let a = self.pass.actions[k];
            if self.agents.any() && self.agents.apply(self.b.world_mut(), a) {
                continue;
            }
            let world = self.b.world_mut();
            let j = match a {
                Action::Start(j) | Action::Resize(j) => {
                    if !self.resources.is_empty() {
                        self.started.push(j);
                    }
                    if let (Action::Start(_), Some(f)) = (a, &mut self.failures) {
                        f.started(world, j);
                    }
                    j
                }
                a if a.retimes() && world.rt[a.job() as usize].status == Status::Running => {
                    // Progress so far at the old rate, then the new one.
                    let j = a.job();
                    world.sync(j);
                    world.rt[j as usize].generation += 1;
                    j
                }
                _ => continue,
            };
            self.set_rate(j)?;
        }
        self.pass.actions.clear();
        if self.agents.any() {
            let ended = self.agents.end_overtaken(&mut self.b, &mut self.pass);
            self.ended(ended);
        }
        // Preemption-heavy policies leave many stale entries; drop them once they
        // outnumber the live ones so pops stay cheap.
        if self.queue.len() > 4 * self.b.world().running().len() + 4096 {
            let world = self.b.world();
            self.queue.retain(|f| f.is_live(world));
        }
        Ok(())
    }

    /// Schedules the completion of running job `j` as things stand now.
    fn schedule_completion(&mut self, j: JobIdx) {
        let world = self.b.world();
        let generation = world.rt[j as usize].generation;
        self.queue
            .push(world.finish_time(j), Finish { job: j, generation });
    }

    /// The run's outcome: each trace job's fate, in trace order, and the observers'
    /// series.
    pub fn outcome(mut self) -> RunOutcome {
        let total_gpus = self.b.world().cluster.total_gpus;
        let failures = self.failures.take().map(|f| f.report(self.b.world()));
        // The run is over: ids and VCs move into the outcome (cloning them was a
        // tenth of the end of a million-job run).
        let trace = self.b.take_trace();
        let b = &self.b;
        let world = b.world();
        let mut refused = std::mem::take(&mut self.rejected).into_iter().peekable();
        let jobs = trace
            .into_iter()
            .enumerate()
            .map(|(k, j)| {
                let i = b.index(k);
                let rt = i.map(|i| &world.rt[i as usize]);
                JobOutcome {
                    id: j.id,
                    submit: j.submit,
                    gpus: j.gpus,
                    duration: j.duration,
                    vc: j.vc,
                    first_start: rt.and_then(|r| r.first_start),
                    finish: rt.and_then(|r| r.finish),
                    preemptions: rt.map_or(0, |r| r.preemptions),
                    executed: rt.map_or(0, |r| r.executed),
                    gpu_time: rt.map_or(0, |r| r.attained),
                    rejected: refused
                        .next_if(|r| r.0 == k)
                        .map(|(_, why)| why)
                        .or_else(|| i.and_then(|i| world.declined(i)).map(Box::from)),
                    deadline: j.deadline,
                    judged: i.and_then(|i| world.plan_end(i).judged),
                }
            })
            .collect();
        let mut out = RunOutcome {
            policy: b.policy_name().to_string(),
            params: Vec::new(),
            cluster: self.cluster_name,
            total_gpus,
            jobs,
            util: UtilSeries::new(self.observed, total_gpus),
            cluster_efficiency: None,
            occupancy: None,
            energy: None,
            io: None,
            cpu: None,
            online: None,
            failures,
            events: self.events,
            passes: self.passes,
            seed: self.seed,
        };
        for o in self.observers {
            o.report(&mut out);
        }
        for r in self.resources {
            r.report(&mut out);
        }
        out
    }
}
