//! What the [`Engine`](crate::Engine) drives: a world, the policy behind it, and the
//! jobs' life cycle. The engine owns time (the completion queue, the arrival cursor,
//! wake-ups, slots, adaptive steps), rates, hooks and observers; a backend owns the
//! state and says how a job arrives, completes and is scheduled.
//!
//! Two implement it: [`SimBackend`], the simulated world (the trace's jobs, the policy
//! called directly), and the live service's `Core` behind simulated agents
//! (`apiary-server`), where a job arrives through the API's checks and completes when
//! its agents report its processes' exits. One loop, two backends: what `simulate
//! --driver live` compares is the live state machine, never a second loop.

use crate::config::Config;
use crate::error::SimError;
use apiary_model::{Cluster, Job, Time};
use apiary_policy::{
    AdaptiveHosting, Capability, Declared, JobIdx, Pass, Policy, PolicyError, World,
};

/// The state a run's engine moves on.
pub trait Backend {
    /// The world the policy sees.
    fn world(&self) -> &World;
    /// The world, for the engine to move jobs' progress on (rates, generations of
    /// scheduled completions, hooks' charges).
    fn world_mut(&mut self) -> &mut World;
    /// The run's jobs, in submission order.
    fn trace(&self) -> &[Job];
    /// Takes the run's jobs out, at its end (their ids and VCs move into the outcome).
    fn take_trace(&mut self) -> Vec<Job>;
    /// Where trace job `k` is in the world, once it arrived and was taken in.
    fn index(&self, k: usize) -> Option<JobIdx>;
    /// Trace job `k` is submitted at `now` (the world's clock): the backend takes it in
    /// and the policy learns it, or it is refused, with why. `Ok` means the world
    /// changed and a pass is due.
    fn arrive(&mut self, k: usize, now: Time, pass: &mut Pass) -> Result<JobIdx, Box<str>>;
    /// Running job `j`'s work is done at `now`: it finishes and the policy learns it.
    fn complete(&mut self, j: JobIdx, now: Time, pass: &mut Pass);
    /// Job `j` ended outside [`Backend::complete`] (an adaptive job's agent trained its
    /// last epoch; the world already says so): the policy learns it.
    fn ended(&mut self, j: JobIdx, pass: &mut Pass);
    /// One scheduling pass at `now`: the policy's actions are appended to
    /// `pass.actions` and its wake-up request is in `pass.wake`.
    fn schedule(&mut self, now: Time, pass: &mut Pass) -> Result<(), PolicyError>;
    /// The policy's registry name.
    fn policy_name(&self) -> &'static str;
    /// Whether the policy declares `capability`.
    fn declares(&self, _capability: Capability) -> bool {
        false
    }
    /// How the policy hosts adaptive jobs, if it declares `adaptive`.
    fn adaptive(&self) -> Option<AdaptiveHosting> {
        None
    }
    /// Whether the world's jobs carry the trace's own data (throughput tables, stage
    /// profiles), so that series reading them mean something. The live service's jobs
    /// come through its API, which carries none.
    fn carries_trace_data(&self) -> bool {
        true
    }
    /// Node `node` went down (`healthy` false) or came back: a policy that tracks
    /// node health (HiveD's doomed cells) is told.
    fn node_health(&mut self, _node: u32, _healthy: bool) {}
    /// Whether it can fail jobs ([`Backend::fail`]).
    fn models_failures(&self) -> bool {
        false
    }
    /// Running job `j` failed: it goes back to the queue, `lost` ms of work poorer, and
    /// waits `recovery` ms after its next start; the policy is told it was requeued.
    /// With `give_up` it ends instead, unfinished, with that reason.
    fn fail(
        &mut self,
        _j: JobIdx,
        _lost: f64,
        _recovery: Time,
        _give_up: Option<&str>,
        _pass: &mut Pass,
    ) {
    }
}

/// The simulated world: every trace job is in it from the start (in the future until
/// it arrives), and the policy is called directly.
pub struct SimBackend<'a> {
    world: World,
    policy: &'a mut dyn Policy,
    who: Declared,
}

impl<'a> SimBackend<'a> {
    /// A world of `jobs` (sorted by submit time) on `cluster` under `policy`: the
    /// policy's tenancy is planned from the whole trace, it is attached, and its
    /// declared data needs are checked against the jobs.
    pub fn new(
        cluster: Cluster,
        jobs: Vec<Job>,
        policy: &'a mut dyn Policy,
        cfg: &Config,
    ) -> Result<SimBackend<'a>, SimError> {
        preflight(&cluster, &jobs, policy)?;
        // The engine sets the clock to the first submission.
        let mut world = World::new(cluster, jobs);
        world.restart_overhead = cfg.restart_overhead;
        world.carbon = cfg.carbon.clone();
        world.pue = cfg.pue;
        world.resources.storage = storage_for(cfg, policy.capabilities().has(Capability::Io));
        world.resources.cpu_pool = cpus_for(cfg, policy.capabilities().has(Capability::CpuWorkers));
        world.resources.online =
            online_for(cfg, policy.capabilities().has(Capability::OnlineSharing));
        world.seed = cfg.seed;
        world.set_scorer(Box::new(crate::comm::AllreduceScorer::default()));
        Ok(SimBackend {
            world,
            who: Declared::of(policy),
            policy,
        })
    }
}

impl Backend for SimBackend<'_> {
    #[inline]
    fn world(&self) -> &World {
        &self.world
    }
    #[inline]
    fn world_mut(&mut self) -> &mut World {
        &mut self.world
    }
    #[inline]
    fn trace(&self) -> &[Job] {
        &self.world.jobs
    }
    fn take_trace(&mut self) -> Vec<Job> {
        std::mem::take(&mut self.world.jobs)
    }
    #[inline]
    fn index(&self, k: usize) -> Option<JobIdx> {
        Some(k as JobIdx)
    }
    fn arrive(&mut self, k: usize, _now: Time, pass: &mut Pass) -> Result<JobIdx, Box<str>> {
        let j = k as JobIdx;
        self.world.submit(j);
        let ctx = pass.ctx(&mut self.world, self.who);
        if let Err(e) = self.policy.admit(&ctx, j) {
            // Turned away by the policy: the world keeps it, declined, with why.
            self.world.decline(j, e.to_string().into_boxed_str());
        }
        Ok(j)
    }
    fn complete(&mut self, j: JobIdx, _now: Time, pass: &mut Pass) {
        self.world.finish(j);
        self.ended(j, pass);
    }
    fn ended(&mut self, j: JobIdx, pass: &mut Pass) {
        let ctx = pass.ctx(&mut self.world, self.who);
        self.policy.on_finish(&ctx, j);
    }
    fn schedule(&mut self, _now: Time, pass: &mut Pass) -> Result<(), PolicyError> {
        pass.schedule(&mut self.world, self.policy, self.who)
    }
    fn policy_name(&self) -> &'static str {
        self.policy.name()
    }
    fn declares(&self, capability: Capability) -> bool {
        self.who.capabilities.has(capability)
    }
    fn adaptive(&self) -> Option<AdaptiveHosting> {
        self.policy.adaptive()
    }
    fn models_failures(&self) -> bool {
        true
    }
    fn node_health(&mut self, node: u32, healthy: bool) {
        self.world.state.set_down(node, !healthy);
        if let Some(t) = self.policy.tenancy() {
            let name = &self.world.cluster.nodes[node as usize].name;
            t.node_health(name, healthy);
        }
    }
    fn fail(
        &mut self,
        j: JobIdx,
        lost: f64,
        recovery: Time,
        give_up: Option<&str>,
        pass: &mut Pass,
    ) {
        if !self.world.fail(j, lost, recovery) {
            return;
        }
        match give_up {
            None => {
                let ctx = pass.ctx(&mut self.world, self.who);
                self.policy.on_requeue(&ctx, j);
            }
            Some(why) => {
                self.world.decline(j, why.into());
                let ctx = pass.ctx(&mut self.world, self.who);
                self.policy.on_finish(&ctx, j);
            }
        }
    }
}

/// The storage a run models: `cfg.io`, or the defaults for a policy that allocates
/// cache and bandwidth (`io`) when none was given, so that it runs anywhere.
pub fn storage_for(cfg: &Config, allocates: bool) -> Option<apiary_model::io::Storage> {
    cfg.io
        .or_else(|| allocates.then(apiary_model::io::Storage::default))
}

/// The CPU pool a run models: `cfg.cpu`, or the defaults for a policy that allocates
/// CPUs (`cpu-workers`) when none was given.
pub fn cpus_for(cfg: &Config, allocates: bool) -> Option<apiary_model::cpu::CpuPool> {
    cfg.cpu
        .or_else(|| allocates.then(apiary_model::cpu::CpuPool::default))
}

/// The online services a run models: `cfg.online`, or the defaults for a policy that
/// shares GPUs with them (`online-sharing`) when none was given; their loads drawn
/// from the run's seed.
pub fn online_for(cfg: &Config, shares: bool) -> Option<apiary_model::online::OnlineLoad> {
    cfg.online
        .or_else(|| shares.then(apiary_model::online::OnlineLoad::default))
        .map(|o| apiary_model::online::OnlineLoad {
            seed: cfg.seed,
            ..o
        })
}

/// Readies `policy` for a run of `jobs` on `cluster`, or says why it cannot run them:
/// its declared data needs are checked against the jobs, its tenancy is planned from
/// the whole trace, and it is attached to the cluster. A front end that runs several
/// policies calls it on each before the first run, so a setting that cannot run fails
/// before any other has spent time.
pub fn preflight(cluster: &Cluster, jobs: &[Job], policy: &mut dyn Policy) -> Result<(), SimError> {
    check_job_data(policy, jobs)?;
    if let Some(t) = policy.tenancy() {
        let table = t.plan(cluster, jobs)?;
        t.set_table(table);
    }
    policy.attach(cluster)?;
    if policy.adaptive().is_some() && !policy.capabilities().has(Capability::Adaptive) {
        return Err(PolicyError::Undeclared {
            policy: policy.name(),
            capability: Capability::Adaptive,
        }
        .into());
    }
    Ok(())
}

/// Refuses a run whose jobs lack data the policy declares it reads: a trace of the
/// wrong kind fails at once, naming a job, instead of every job being turned away.
fn check_job_data(policy: &dyn Policy, jobs: &[Job]) -> Result<(), SimError> {
    let declared = policy.capabilities();
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
        if declared.has(capability)
            && let Some(j) = jobs.iter().find(|j| !has(j))
        {
            return Err(SimError::Missing {
                policy: policy.name(),
                capability,
                what,
                job: j.id.to_string(),
                hint,
            });
        }
    }
    Ok(())
}
