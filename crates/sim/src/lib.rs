//! The discrete-event simulator: replays a trace on a cluster under a policy.
//!
//! Determinism by construction: time is an integer (ms), completions sit in a binary
//! heap keyed by `(time, seq)` so equal times pop in insertion order, arrivals come from
//! the time-sorted job list, and every event at one time stamp is applied before the
//! policy is asked once. Completions made stale by a preemption or a speed change are
//! skipped by a per-job generation number rather than removed from the heap.
//!
//! The engine owns no decision logic: it advances time, applies the policy's starts and
//! preemptions to the [`World`], asks the [`Throughput`] model how fast each started job
//! runs, and records what happened.

pub mod comm;
pub mod experiment;
mod overhead;
pub mod throughput;

pub use comm::CommModel;
pub use overhead::muri_restart_overhead;
pub use throughput::{DurationModel, SpreadModel, Throughput};

use apiary_model::adaptive::Agent;
use apiary_model::{Cluster, Job, JobOutcome, RunOutcome, Time, UtilSeries};
use apiary_policy::{Action, Capability, Ctx, JobIdx, Policy, PolicyError, Status, World};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// When the policy is consulted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// After every batch of simultaneous events (Tiresias, Muri).
    EventDriven,
    /// Only at multiples of the slot length (ElasticFlow 60/240 s, Gavel 360 s rounds).
    Slotted(Time),
}

/// Engine settings beyond the policy.
#[derive(Clone, Debug)]
pub struct Config {
    /// Scheduling mode.
    pub mode: Mode,
    /// Time a job makes no progress after resuming from a preemption.
    pub restart_overhead: Time,
    /// Artifact quirk (Muri and its Tiresias/SRTF baselines): at every event, every
    /// running job loses its model's restart overhead from the interval just ended,
    /// whether or not it was touched. See `docs/fidelity.md`.
    pub per_event_overhead: bool,
    /// Seed for any randomness (recorded in the outcome).
    pub seed: u64,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            mode: Mode::EventDriven,
            restart_overhead: 0,
            per_event_overhead: false,
            seed: 0,
        }
    }
}

/// How far a run has got, for progress bars.
#[derive(Clone, Copy, Debug)]
pub struct Progress {
    /// Simulated time.
    pub now: Time,
    /// Events so far.
    pub events: u64,
    /// Jobs finished.
    pub finished: usize,
    /// Jobs in the trace.
    pub total: usize,
}

/// Why a run could not be carried out.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The jobs were not sorted by submission time.
    #[error("jobs must be sorted by submit time (job {id} at {submit} ms comes after {prev} ms)")]
    Unsorted {
        /// The offending job.
        id: String,
        /// Its submit time.
        submit: Time,
        /// The previous job's submit time.
        prev: Time,
    },
    /// A slot length of zero.
    #[error("slot length must be positive")]
    ZeroSlot,
    /// The policy cannot work on this cluster and trace, or broke its contract.
    #[error("policy {0}")]
    Policy(#[from] PolicyError),
    /// A job lacks data the policy's spec declares it reads.
    #[error("policy {policy} reads {what} ({capability}), which job {job} lacks{hint}")]
    Missing {
        /// The policy.
        policy: &'static str,
        /// The capability.
        capability: Capability,
        /// What the job lacks.
        what: &'static str,
        /// The first job without it.
        job: String,
        /// Where such jobs come from.
        hint: &'static str,
    },
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Completion {
    time: Time,
    seq: u64,
    job: JobIdx,
    generation: u32,
}

/// Pushes the completion of running job `j` as things stand now; an earlier entry for it
/// stays in the heap and is skipped later by its stale generation.
fn schedule_completion(
    world: &World,
    j: JobIdx,
    heap: &mut BinaryHeap<Reverse<Completion>>,
    seq: &mut u64,
) {
    let generation = world.rt[j as usize].generation;
    heap.push(Reverse(Completion {
        time: world.finish_time(j),
        seq: *seq,
        job: j,
        generation,
    }));
    *seq += 1;
}

/// Runs `jobs` (sorted by submit time) on `cluster` under `policy`.
///
/// Jobs that need more GPUs than the cluster has are not given to the policy; they
/// appear in the outcome with `rejected` set, never silently dropped.
pub fn run(
    cluster: Cluster,
    jobs: Vec<Job>,
    policy: &mut dyn Policy,
    throughput: &dyn Throughput,
    cfg: &Config,
    progress: &mut dyn FnMut(Progress),
) -> Result<RunOutcome, SimError> {
    if let Mode::Slotted(0) = cfg.mode {
        return Err(SimError::ZeroSlot);
    }
    for w in jobs.windows(2) {
        if w[1].submit < w[0].submit {
            return Err(SimError::Unsorted {
                id: w[1].id.clone(),
                submit: w[1].submit,
                prev: w[0].submit,
            });
        }
    }
    check_job_data(policy, &jobs)?;
    if let Some(t) = policy.tenancy() {
        let table = t.plan(&cluster, &jobs)?;
        t.set_table(table);
    }
    policy.attach(&cluster)?;
    let spec = policy.spec();
    let total_gpus = cluster.total_gpus;
    let cluster_name = cluster.name.clone();
    let start_time = jobs.first().map_or(0, |j| j.submit);
    let n = jobs.len();
    let mut world = World::new(cluster, jobs);
    world.restart_overhead = cfg.restart_overhead;
    world.seed = cfg.seed;
    world.now = start_time;
    let oh: Vec<Time> = if cfg.per_event_overhead {
        world
            .jobs
            .iter()
            .map(|j| muri_restart_overhead(j.model.as_deref(), j.gpus))
            .collect()
    } else {
        Vec::new()
    };
    let mut group_oh: Vec<Time> = vec![0; if cfg.per_event_overhead { n } else { 0 }];
    // Adaptive jobs advance in whole steps (the slot, else Pollux's 60 s), as Pollux's
    // simulator steps them; `agent_clock` is where each one's last step ended.
    let adaptive_batch = policy.adaptive_batch();
    let mut agent_clock: Vec<Time> = Vec::new();
    let mut ended: Vec<(JobIdx, Time)> = Vec::new();
    let adaptive_step = policy.adaptive_step().unwrap_or(match cfg.mode {
        Mode::Slotted(s) => s,
        Mode::EventDriven => 60 * apiary_model::SECOND,
    });
    if world.jobs.iter().any(|j| j.adaptive.is_some()) {
        agent_clock = vec![0; n];
        for k in 0..n {
            let job = &world.jobs[k];
            if let Some(a) = &job.adaptive {
                let target = if adaptive_batch {
                    a.app.fixed_batch
                } else {
                    job.batch_size
                };
                world.rt[k].agent = Some(Box::new(Agent::new(target)));
            }
        }
    }
    let mut adaptive_running = 0usize;
    let mut rejected: Vec<Option<String>> = vec![None; n];
    let mut heap: BinaryHeap<Reverse<Completion>> = BinaryHeap::new();
    let mut seq = 0u64;
    let mut cursor = 0usize;
    let mut actions: Vec<Action> = Vec::new();
    let mut wake: Option<Time> = None;
    let mut util = UtilSeries::new(start_time, total_gpus);
    let mut ce = world
        .jobs
        .iter()
        .any(|j| j.scaling.is_some())
        .then(|| UtilSeries::new(start_time, total_gpus));
    let mut last_util_t = start_time;
    let mut events = 0u64;
    let mut passes = 0u64;
    let mut finished = 0usize;
    let mut dirty = false;
    let mut next_progress = 1u64 << 16;

    loop {
        // The next time anything happens.
        while let Some(Reverse(c)) = heap.peek() {
            if world.rt[c.job as usize].generation != c.generation
                || world.rt[c.job as usize].status != Status::Running
            {
                heap.pop();
            } else {
                break;
            }
        }
        let mut next = Time::MAX;
        if cursor < n {
            next = next.min(world.jobs[cursor].submit);
        }
        if let Some(Reverse(c)) = heap.peek() {
            next = next.min(c.time);
        }
        if let Some(w) = wake {
            next = next.min(w);
        }
        if let Mode::Slotted(slot) = cfg.mode {
            // Something changed since the last pass: decide at the next boundary.
            if dirty {
                next = next.min((world.now / slot + 1) * slot);
            }
        }
        if adaptive_running > 0 {
            next = next.min((world.now / adaptive_step + 1) * adaptive_step);
        }
        if next == Time::MAX {
            break;
        }
        let busy = world.busy_gpus();
        util.add(last_util_t, next, busy);
        if let Some(ce) = ce.as_mut() {
            ce.add_weight(last_util_t, next, useful_gpus(&world));
        }
        last_util_t = next;
        let prev_now = world.now;
        world.now = next;
        let now = next;

        // Completions first, then arrivals, as the Tiresias-family loops do.
        while let Some(Reverse(c)) = heap.peek().copied() {
            if c.time != now {
                break;
            }
            heap.pop();
            let rt = &world.rt[c.job as usize];
            if rt.generation != c.generation || rt.status != Status::Running {
                continue;
            }
            world.finish(c.job);
            finished += 1;
            events += 1;
            dirty = true;
            let ctx = Ctx::new(&mut world, &mut actions, spec);
            policy.on_finish(&ctx, c.job);
        }
        if adaptive_running > 0 && now % adaptive_step == 0 {
            let mut k = 0;
            while k < world.running().len() {
                let j = world.running()[k];
                k += 1;
                if world.rt[j as usize].agent.is_none() {
                    continue;
                }
                if let Some(t) = advance_agent(&mut world, j, &mut agent_clock) {
                    end_agent(&mut world, policy, &mut actions, j, t);
                    adaptive_running -= 1;
                    k -= 1;
                    finished += 1;
                    events += 1;
                    dirty = true;
                }
            }
        }
        while cursor < n && world.jobs[cursor].submit == now {
            let j = cursor as JobIdx;
            cursor += 1;
            events += 1;
            if world.jobs[j as usize].gpus > total_gpus || world.jobs[j as usize].gpus == 0 {
                rejected[j as usize] = Some(format!(
                    "needs {} GPUs; the cluster has {}",
                    world.jobs[j as usize].gpus, total_gpus
                ));
                continue;
            }
            world.submit(j);
            dirty = true;
            let ctx = Ctx::new(&mut world, &mut actions, spec);
            if let Err(e) = policy.admit(&ctx, j) {
                world.decline(j, e.to_string());
            }
        }
        if wake == Some(now) {
            wake = None;
            dirty = true;
        }

        if cfg.per_event_overhead && now > prev_now {
            // Every running job loses up to its overhead from the interval just ended;
            // a member of a group sharing GPUs loses the sum of its members' overheads
            // (Muri's simulator charges the group's restart as one).
            for &j in world.running() {
                if let Some(g) = world.share_group(j) {
                    group_oh[g as usize] += oh[j as usize];
                }
            }
            for k in 0..world.running().len() {
                let j = world.running()[k];
                let before = world.rt[j as usize].last_update;
                world.sync(j);
                let own = match world.share_group(j) {
                    Some(g) => group_oh[g as usize],
                    None => oh[j as usize],
                };
                let rt = &mut world.rt[j as usize];
                let lost = own.min(now - before);
                if lost > 0 {
                    rt.remaining += lost as f64 * rt.rate;
                    rt.generation += 1;
                    schedule_completion(&world, j, &mut heap, &mut seq);
                }
            }
            for &j in world.running() {
                if let Some(g) = world.share_group(j) {
                    group_oh[g as usize] = 0;
                }
            }
        }

        let consult = match cfg.mode {
            Mode::EventDriven => dirty,
            Mode::Slotted(slot) => dirty && now % slot == 0,
        };
        if consult {
            dirty = false;
            passes += 1;
            let mut ctx = Ctx::new(&mut world, &mut actions, spec);
            policy.schedule(&mut ctx);
            if let Some(e) = ctx.take_error() {
                return Err(e.into());
            }
            wake = match (ctx.wake(), cfg.mode) {
                (Some(w), Mode::Slotted(slot)) => Some(w.div_ceil(slot) * slot),
                (w, _) => w,
            };
            for a in actions.drain(..) {
                let j = match a {
                    Action::Start(j) if world.rt[j as usize].agent.is_some() => {
                        // Progress up to now on the old allocation, then the new one.
                        if world.rt[j as usize]
                            .agent
                            .as_ref()
                            .is_some_and(|a| !a.placement.is_empty())
                        {
                            if let Some(t) = advance_agent(&mut world, j, &mut agent_clock) {
                                ended.push((j, t));
                                continue;
                            }
                        } else {
                            adaptive_running += 1;
                        }
                        let counts = node_counts(&world.rt[j as usize].placement);
                        reallocate_agent(&mut world, j, counts);
                        agent_clock[j as usize] = now;
                        world.rt[j as usize].rate = 0.0;
                        continue;
                    }
                    Action::Preempt(j) if world.rt[j as usize].agent.is_some() => {
                        if let Some(t) = advance_agent(&mut world, j, &mut agent_clock) {
                            ended.push((j, t));
                            continue;
                        }
                        reallocate_agent(&mut world, j, Vec::new());
                        agent_clock[j as usize] = 0;
                        adaptive_running -= 1;
                        continue;
                    }
                    Action::Start(j) => j,
                    Action::Speed(j) if world.rt[j as usize].status == Status::Running => {
                        // Progress so far at the old rate, then the new one.
                        world.sync(j);
                        world.rt[j as usize].generation += 1;
                        j
                    }
                    _ => continue,
                };
                let rate = throughput.rate(
                    &world.jobs[j as usize],
                    &world.rt[j as usize].placement,
                    &world.cluster,
                );
                let typed = type_factor(
                    &world.jobs[j as usize],
                    &world.rt[j as usize].placement,
                    &world.cluster,
                );
                let scaled = {
                    let job = &world.jobs[j as usize];
                    let n = world.rt[j as usize].placement.gpus();
                    job.scaling.as_ref().map_or(1.0, |s| s.speedup(n, job.gpus))
                };
                world.rt[j as usize].rate = rate * typed * scaled * world.rt[j as usize].speed;
                schedule_completion(&world, j, &mut heap, &mut seq);
            }
            // Adaptive jobs that trained their last epoch before the decision moved or
            // stopped them (an event-driven policy decides between steps): they end
            // when they finished, not where the decision put them.
            for (j, t) in ended.drain(..) {
                end_agent(&mut world, policy, &mut actions, j, t);
                adaptive_running -= 1;
                finished += 1;
                events += 1;
                dirty = true;
            }
            // Preemption-heavy policies leave many stale entries; drop them once they
            // outnumber the live ones so pops stay cheap.
            if heap.len() > 4 * world.running().len() + 4096 {
                heap.retain(|Reverse(c)| {
                    let rt = &world.rt[c.job as usize];
                    rt.generation == c.generation && rt.status == Status::Running
                });
            }
        }
        if events >= next_progress {
            next_progress = events + (1 << 16);
            progress(Progress {
                now,
                events,
                finished,
                total: n,
            });
        }
    }
    progress(Progress {
        now: world.now,
        events,
        finished,
        total: n,
    });

    let jobs_out = world
        .jobs
        .iter()
        .zip(world.rt.iter())
        .zip(rejected)
        .map(|((j, rt), rej)| JobOutcome {
            id: j.id.clone(),
            submit: j.submit,
            gpus: j.gpus,
            duration: j.duration,
            vc: j.vc.clone(),
            first_start: rt.first_start,
            finish: rt.finish,
            preemptions: rt.preemptions,
            executed: rt.executed,
            gpu_time: rt.attained,
            rejected: rej.or_else(|| rt.declined.clone()),
            deadline: j.deadline,
        })
        .collect();
    Ok(RunOutcome {
        policy: policy.name().to_string(),
        params: Vec::new(),
        cluster: cluster_name,
        total_gpus,
        jobs: jobs_out,
        util,
        cluster_efficiency: ce,
        events,
        passes,
        seed: cfg.seed,
    })
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
            |j| j.adaptive.is_some(),
            ": read a Pollux workload (name,time,application,num_replicas,batch_size)",
        ),
        (
            Capability::Scaling,
            "a throughput table",
            |j| j.scaling.is_some(),
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
                job: j.id.clone(),
                hint,
            });
        }
    }
    Ok(())
}

/// GPUs per node of a placement, in node order (an adaptive job's view of it).
fn node_counts(p: &apiary_model::Placement) -> Vec<u32> {
    p.parts.iter().map(|&(_, m)| m.count_ones()).collect()
}

/// Tells an adaptive job its new allocation (GPUs per node; empty when stopped).
fn reallocate_agent(world: &mut World, j: JobIdx, counts: Vec<u32>) {
    let job = &world.jobs[j as usize];
    if let (Some(a), Some(agent)) = (&job.adaptive, world.rt[j as usize].agent.as_mut()) {
        agent.reallocate(&a.app, counts);
    }
}

/// Ends an adaptive job that trained its last epoch at `t`: a running job finishes; one
/// a decision has just preempted finishes instead (that preemption did not happen).
fn end_agent(
    world: &mut World,
    policy: &mut dyn Policy,
    actions: &mut Vec<Action>,
    j: JobIdx,
    t: Time,
) {
    if world.rt[j as usize].status == Status::Running {
        world.finish(j);
    } else {
        world.withdraw(j);
        world.rt[j as usize].preemptions -= 1;
    }
    world.rt[j as usize].finish = Some(t);
    let ctx = Ctx::new(world, actions, policy.spec());
    policy.on_finish(&ctx, j);
}

/// Trains an adaptive job from its last step to now; the completion time if it
/// finished its last epoch on the way.
fn advance_agent(world: &mut World, j: JobIdx, clock: &mut [Time]) -> Option<Time> {
    let now = world.now;
    let from = clock[j as usize];
    if now <= from {
        return None;
    }
    clock[j as usize] = now;
    let app = world.jobs[j as usize].adaptive.as_ref()?.app.clone();
    let agent = world.rt[j as usize].agent.as_mut()?;
    let secs = ((now - from) / apiary_model::SECOND) as u32;
    agent
        .step(&app, secs)
        .map(|s| from + s as Time * apiary_model::SECOND)
}

/// ElasticFlow's `get_efficiency` numerator: the running jobs' speed-ups over one GPU.
fn useful_gpus(world: &World) -> f64 {
    world
        .running()
        .iter()
        .map(|&j| {
            let n = world.rt[j as usize].placement.gpus();
            match &world.jobs[j as usize].scaling {
                Some(s) => {
                    let (g0, t0) = s.levels[0];
                    s.tput(n).map_or(n as f64, |t| t / t0 * g0 as f64)
                }
                None => n as f64,
            }
        })
        .sum()
}

/// A job's speed on the GPU types of its placement: the slowest type it spans (a gang
/// waits for its slowest member), 1.0 for jobs without per-type speeds.
fn type_factor(job: &Job, p: &apiary_model::Placement, cluster: &Cluster) -> f64 {
    if job.type_speeds.is_none() {
        return 1.0;
    }
    p.parts
        .iter()
        .map(|&(node, _)| job.type_speed(&cluster.nodes[node as usize].gpu_type))
        .fold(f64::INFINITY, f64::min)
        .clamp(1e-9, 1e9)
}
