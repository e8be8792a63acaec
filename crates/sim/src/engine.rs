//! The simulator's engine, in parts: a typed event queue of completions, the trace's
//! arrivals, the policy's wake-ups and slot boundaries as timers, hooks for artifact
//! quirks, observers for metric series, and a stack of throughput models for rates.
//!
//! [`Engine::step`] handles one time stamp: completions first, then adaptive steps,
//! then arrivals (as the Tiresias-family loops do), then the hooks, then one policy
//! pass if anything changed. A driver or a test can step it and look at the world in
//! between; [`run`](crate::run) steps it to the end.

use crate::adaptive::Agents;
use crate::config::{Config, Mode, Progress};
use crate::error::SimError;
use crate::hooks::{Hook, MuriOverhead};
use crate::observe::{self, Observer};
use crate::queue::EventQueue;
use crate::throughput::{Stack, Throughput};
use apiary_model::{Cluster, Job, JobOutcome, RunOutcome, Time, UtilSeries};
use apiary_policy::spec::PolicySpec;
use apiary_policy::{Action, Capability, Ctx, JobIdx, Policy, PolicyError, Status, World};

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

/// A run in progress: the world, the policy and everything that moves time on.
pub struct Engine<'a> {
    world: World,
    policy: &'a mut dyn Policy,
    spec: &'static PolicySpec,
    rates: Stack<'a>,
    mode: Mode,
    seed: u64,
    cluster_name: String,
    queue: EventQueue<Finish>,
    hooks: Vec<Box<dyn Hook + 'a>>,
    observers: Vec<Box<dyn Observer + 'a>>,
    agents: Agents,
    /// Next trace job to arrive.
    cursor: usize,
    /// When the policy asked to be woken.
    wake: Option<Time>,
    /// Where the observers' last interval ended.
    observed: Time,
    /// Jobs refused before the policy saw them (too big for the cluster), in trace
    /// order: few, so a list of them rather than a slot per job.
    rejected: Vec<(JobIdx, Box<str>)>,
    /// Something changed since the policy's last pass.
    dirty: bool,
    actions: Vec<Action>,
    touched: Vec<JobIdx>,
    events: u64,
    passes: u64,
    finished: usize,
}

impl<'a> Engine<'a> {
    /// Sets up a run of `jobs` (sorted by submit time) on `cluster` under `policy`, at
    /// the speeds `rates` gives: the policy's tenancy is planned and it is attached,
    /// the standard observers record utilisation (and cluster efficiency for elastic
    /// traces), and `cfg.per_event_overhead` installs Muri's hook.
    pub fn new(
        cluster: Cluster,
        jobs: Vec<Job>,
        policy: &'a mut dyn Policy,
        rates: Stack<'a>,
        cfg: &Config,
    ) -> Result<Engine<'a>, SimError> {
        if let Mode::Slotted(0) = cfg.mode {
            return Err(SimError::ZeroSlot);
        }
        // One walk over the jobs checks their order and whether any carries rare
        // fields: on a million-job trace each further walk costs milliseconds, and
        // most traces carry none, so the walks that look for them are skipped.
        let mut any_extras = false;
        let mut prev = 0;
        for j in &jobs {
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
        check_job_data(policy, &jobs)?;
        if let Some(t) = policy.tenancy() {
            let table = t.plan(&cluster, &jobs)?;
            t.set_table(table);
        }
        policy.attach(&cluster)?;
        let start = jobs.first().map_or(0, |j| j.submit);
        let with_extras = if any_extras { &jobs[..] } else { &[] };
        let observers = observe::standard(with_extras, start, cluster.total_gpus)
            .into_iter()
            .map(|o| o as Box<dyn Observer + 'a>)
            .collect();
        let cluster_name = cluster.name.clone();
        let mut world = World::new(cluster, jobs);
        world.restart_overhead = cfg.restart_overhead;
        world.seed = cfg.seed;
        world.now = start;
        let mut hooks: Vec<Box<dyn Hook + 'a>> = Vec::new();
        if cfg.per_event_overhead {
            hooks.push(Box::new(MuriOverhead::new(&world)));
        }
        let hosting = policy.adaptive();
        if hosting.is_some() && !policy.spec().has(Capability::Adaptive) {
            return Err(PolicyError::Undeclared {
                policy: policy.spec().name,
                capability: Capability::Adaptive,
            }
            .into());
        }
        let step = hosting.and_then(|h| h.step).unwrap_or(match cfg.mode {
            Mode::Slotted(s) => s,
            Mode::EventDriven => 60 * apiary_model::SECOND,
        });
        let agents = Agents::new(
            &mut world,
            any_extras,
            hosting.is_some_and(|h| h.tunes_batch),
            step,
        );
        Ok(Engine {
            world,
            spec: policy.spec(),
            policy,
            rates,
            mode: cfg.mode,
            seed: cfg.seed,
            cluster_name,
            queue: EventQueue::new(),
            hooks,
            observers,
            agents,
            cursor: 0,
            wake: None,
            observed: start,
            rejected: Vec::new(),
            dirty: false,
            actions: Vec::new(),
            touched: Vec::new(),
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
        &self.world
    }

    /// How far the run has got.
    pub fn progress(&self) -> Progress {
        Progress {
            now: self.world.now,
            events: self.events,
            finished: self.finished,
            total: self.world.jobs.len(),
        }
    }

    /// The next time anything happens, after dropping stale completions; `None` when
    /// nothing will.
    fn next_time(&mut self) -> Option<Time> {
        let world = &self.world;
        self.queue.skip(|f| !f.is_live(world));
        let now = self.world.now;
        let mut next = self
            .world
            .jobs
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
        (next != Time::MAX).then_some(next)
    }

    /// Handles the next time stamp: its events, the hooks, and a policy pass if
    /// anything changed. Returns the time handled, or `None` when the run is over.
    pub fn step(&mut self) -> Result<Option<Time>, SimError> {
        let Some(now) = self.next_time() else {
            return Ok(None);
        };
        for o in &mut self.observers {
            o.interval(&self.world, self.observed, now);
        }
        self.observed = now;
        let prev = self.world.now;
        self.world.now = now;

        self.complete(now);
        if self.agents.any() {
            let ended = self
                .agents
                .advance_due(&mut self.world, self.policy, &mut self.actions);
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
            self.pass()?;
        }
        Ok(Some(now))
    }

    /// Lets the hooks change running jobs' work, and reschedules the jobs they name.
    fn run_hooks(&mut self, prev: Time, now: Time) {
        for h in &mut self.hooks {
            h.advanced(&mut self.world, prev, now, &mut self.touched);
        }
        for k in 0..self.touched.len() {
            let j = self.touched[k];
            self.world.rt[j as usize].generation += 1;
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
            if !f.is_live(&self.world) {
                continue;
            }
            self.world.finish(f.job);
            self.ended(1);
            let ctx = Ctx::new(&mut self.world, &mut self.actions, self.spec);
            self.policy.on_finish(&ctx, f.job);
        }
    }

    /// Counts `n` jobs that ended.
    fn ended(&mut self, n: usize) {
        if n > 0 {
            self.finished += n;
            self.events += n as u64;
            self.dirty = true;
        }
    }

    /// Trace jobs submitted at `now` are admitted, or refused if the cluster is too
    /// small for them.
    fn arrive(&mut self, now: Time) {
        let total = self.world.cluster.total_gpus;
        while self.cursor < self.world.jobs.len() && self.world.jobs[self.cursor].submit == now {
            let j = self.cursor as JobIdx;
            self.cursor += 1;
            self.events += 1;
            let gpus = self.world.jobs[j as usize].gpus;
            if gpus > total || gpus == 0 {
                self.rejected.push((
                    j,
                    format!("needs {gpus} GPUs; the cluster has {total}").into_boxed_str(),
                ));
                continue;
            }
            self.world.submit(j);
            self.dirty = true;
            let ctx = Ctx::new(&mut self.world, &mut self.actions, self.spec);
            if let Err(e) = self.policy.admit(&ctx, j) {
                self.world.decline(j, e.to_string().into_boxed_str());
            }
        }
    }

    /// Asks the policy, applies its decisions, and sets the rates of the jobs they
    /// started or sped up.
    fn pass(&mut self) -> Result<(), SimError> {
        self.dirty = false;
        self.passes += 1;
        let mut ctx = Ctx::new(&mut self.world, &mut self.actions, self.spec);
        self.policy.schedule(&mut ctx);
        if let Some(e) = ctx.take_error() {
            return Err(e.into());
        }
        self.wake = match (ctx.wake(), self.mode) {
            (Some(w), Mode::Slotted(slot)) => Some(w.div_ceil(slot) * slot),
            (w, _) => w,
        };
        for k in 0..self.actions.len() {
            let a = self.actions[k];
            if self.agents.any() && self.agents.apply(&mut self.world, a) {
                continue;
            }
            let j = match a {
                Action::Start(j) => j,
                Action::Speed(j) if self.world.rt[j as usize].status == Status::Running => {
                    // Progress so far at the old rate, then the new one.
                    self.world.sync(j);
                    self.world.rt[j as usize].generation += 1;
                    j
                }
                _ => continue,
            };
            let rt = &self.world.rt[j as usize];
            let job = &self.world.jobs[j as usize];
            let rate = self
                .rates
                .rate(job, &rt.placement, &self.world.cluster)
                .map_err(|source| SimError::Rate {
                    job: job.id.to_string(),
                    source,
                })?
                * self.world.speed(j);
            self.world.rt[j as usize].rate = rate;
            self.schedule_completion(j);
        }
        self.actions.clear();
        if self.agents.any() {
            let ended = self
                .agents
                .end_overtaken(&mut self.world, self.policy, &mut self.actions);
            self.ended(ended);
        }
        // Preemption-heavy policies leave many stale entries; drop them once they
        // outnumber the live ones so pops stay cheap.
        if self.queue.len() > 4 * self.world.running().len() + 4096 {
            let world = &self.world;
            self.queue.retain(|f| f.is_live(world));
        }
        Ok(())
    }

    /// Schedules the completion of running job `j` as things stand now.
    fn schedule_completion(&mut self, j: JobIdx) {
        let generation = self.world.rt[j as usize].generation;
        self.queue
            .push(self.world.finish_time(j), Finish { job: j, generation });
    }

    /// The run's outcome: each trace job's fate, in trace order, and the observers'
    /// series.
    pub fn outcome(mut self) -> RunOutcome {
        let total_gpus = self.world.cluster.total_gpus;
        // The run is over: ids and VCs move into the outcome (cloning them was a
        // tenth of the end of a million-job run).
        let trace = std::mem::take(&mut self.world.jobs);
        let rts = std::mem::take(&mut self.world.rt);
        let mut declined = self.world.take_declined().into_iter().peekable();
        let world = &self.world;
        let mut refused = std::mem::take(&mut self.rejected).into_iter().peekable();
        let jobs = trace
            .into_iter()
            .zip(rts)
            .enumerate()
            .map(|(k, (j, rt))| JobOutcome {
                id: j.id,
                submit: j.submit,
                gpus: j.gpus,
                duration: j.duration,
                vc: j.vc,
                first_start: rt.first_start,
                finish: rt.finish,
                preemptions: rt.preemptions,
                executed: rt.executed,
                gpu_time: rt.attained,
                rejected: refused
                    .next_if(|r| r.0 as usize == k)
                    .or_else(|| declined.next_if(|r| r.0 as usize == k))
                    .map(|(_, why)| why),
                deadline: j.deadline,
                judged: world.plan_end(k as JobIdx).judged,
            })
            .collect();
        let mut out = RunOutcome {
            policy: self.policy.name().to_string(),
            params: Vec::new(),
            cluster: self.cluster_name,
            total_gpus,
            jobs,
            util: UtilSeries::new(self.observed, total_gpus),
            cluster_efficiency: None,
            occupancy: None,
            events: self.events,
            passes: self.passes,
            seed: self.seed,
        };
        for o in self.observers {
            o.report(&mut out);
        }
        out
    }
}

/// Refuses a run whose jobs lack data the policy's spec declares it reads: a trace
/// of the wrong kind fails at once, naming a job, instead of every job being turned away.
fn check_job_data(policy: &dyn Policy, jobs: &[Job]) -> Result<(), SimError> {
    let spec = policy.spec();
    /// A capability, the data it reads, whether a job has it, where such jobs come from.
    type Need = (Capability, &'static str, fn(&Job) -> bool, &'static str);
    let needs: [Need; 2] = [
        (
            Capability::Adaptive,
            "a goodput model",
            |j| j.extras().adaptive.is_some(),
            ": read a Pollux workload (name,time,application,num_replicas,batch_size)",
        ),
        (
            Capability::Scaling,
            "a throughput table",
            |j| j.extras().scaling.is_some(),
            ": the itp-elasticflow and elasticflow trace formats attach one from each job's \
             model, batch_size and iterations",
        ),
    ];
    for (capability, what, has, hint) in needs {
        if spec.has(capability)
            && let Some(j) = jobs.iter().find(|j| !has(j))
        {
            return Err(SimError::Missing {
                policy: spec.name,
                capability,
                what,
                job: j.id.to_string(),
                hint,
            });
        }
    }
    Ok(())
}
