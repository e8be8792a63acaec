//! Adaptive jobs (Pollux's) as the engine drives them: each has an agent that picks its
//! batch and trains in whole steps (the slot, else Pollux's 60 s), as Pollux's simulator
//! steps them, so its progress is its agent's, not a rate times time.

use crate::backend::Backend;
use apiary_model::Time;
use apiary_model::adaptive::Agent;
use apiary_policy::{Action, JobIdx, Pass, Status, World};

/// The adaptive jobs of a run and where each one's last step ended.
pub(crate) struct Agents {
    /// Per job: where its last step ended; empty when the trace has no adaptive job.
    clock: Vec<Time>,
    /// Adaptive jobs holding GPUs.
    running: usize,
    /// Step length.
    step: Time,
    /// Jobs that trained their last epoch before a decision moved or stopped them, and
    /// when.
    ended: Vec<(JobIdx, Time)>,
}

impl Agents {
    /// Gives each adaptive job of `world` an agent; with `tunes_batch` (Pollux) it starts
    /// at its application's fixed batch and tunes it, else it keeps its trace row's.
    /// `any_extras`: whether any job carries rare fields (none: no job is adaptive).
    pub(crate) fn new(
        world: &mut World,
        any_extras: bool,
        tunes_batch: bool,
        step: Time,
    ) -> Agents {
        let mut clock = Vec::new();
        if any_extras && world.jobs.iter().any(|j| j.extras().adaptive.is_some()) {
            clock = vec![0; world.jobs.len()];
            for j in 0..world.jobs.len() {
                let job = &world.jobs[j];
                if let Some(a) = &job.extras().adaptive {
                    let target = if tunes_batch {
                        a.app.as_ref().and_then(|app| app.fixed_batch)
                    } else {
                        job.batch_size
                    };
                    world.set_agent(j as JobIdx, Agent::new(target));
                }
            }
        }
        Agents {
            clock,
            running: 0,
            step,
            ended: Vec::new(),
        }
    }

    /// Whether the run has adaptive jobs at all (most traces have none).
    #[inline]
    pub(crate) fn any(&self) -> bool {
        !self.clock.is_empty()
    }

    /// The next step boundary after `now`, while any adaptive job runs.
    pub(crate) fn next_step(&self, now: Time) -> Option<Time> {
        (self.running > 0).then(|| (now / self.step + 1) * self.step)
    }

    /// At a step boundary, trains every running adaptive job up to now and ends those
    /// that finished; returns how many did.
    pub(crate) fn advance_due(&mut self, b: &mut impl Backend, pass: &mut Pass) -> usize {
        if self.running == 0 || !b.world().now.is_multiple_of(self.step) {
            return 0;
        }
        let mut ended = 0;
        let mut k = 0;
        while k < b.world().running().len() {
            let j = b.world().running()[k];
            k += 1;
            if b.world().agent(j).is_none() {
                continue;
            }
            if let Some(t) = self.advance(b.world_mut(), j) {
                end(b, pass, j, t);
                self.running -= 1;
                // `finish` took `j` out of the running list.
                k -= 1;
                ended += 1;
            }
        }
        ended
    }

    /// Applies the policy's `action` if it concerns an adaptive job; false when the
    /// job is not adaptive and the engine applies it as usual.
    pub(crate) fn apply(&mut self, world: &mut World, action: Action) -> bool {
        let j = match action {
            Action::Start(j) | Action::Resize(j) | Action::Preempt(j) => j,
            _ => return false,
        };
        let Some(agent) = world.agent(j) else {
            return false;
        };
        let had_gpus = !agent.placement.is_empty();
        if let Action::Preempt(_) = action {
            if let Some(t) = self.advance(world, j) {
                self.ended.push((j, t));
                return true;
            }
            reallocate(world, j, Vec::new());
            self.clock[j as usize] = 0;
            self.running -= 1;
            return true;
        }
        // A start: progress up to now on the old allocation, then the new one.
        if had_gpus {
            if let Some(t) = self.advance(world, j) {
                self.ended.push((j, t));
                return true;
            }
        } else {
            self.running += 1;
        }
        let counts = world.rt[j as usize]
            .placement
            .parts
            .iter()
            .map(|&(_, m)| m.count_ones())
            .collect();
        reallocate(world, j, counts);
        self.clock[j as usize] = world.now;
        world.rt[j as usize].rate = 0.0;
        true
    }

    /// Ends the jobs that trained their last epoch before the decision moved or stopped
    /// them (an event-driven policy decides between steps): they end when they
    /// finished, not where the decision put them. Returns how many.
    pub(crate) fn end_overtaken(&mut self, b: &mut impl Backend, pass: &mut Pass) -> usize {
        let n = self.ended.len();
        for (j, t) in self.ended.drain(..) {
            end(b, pass, j, t);
            self.running -= 1;
        }
        n
    }

    /// Trains adaptive job `j` from its last step to now; the completion time if it
    /// finished its last epoch on the way.
    fn advance(&mut self, world: &mut World, j: JobIdx) -> Option<Time> {
        let now = world.now;
        let from = self.clock[j as usize];
        if now <= from {
            return None;
        }
        self.clock[j as usize] = now;
        let (job, agent) = world.job_and_agent(j);
        let app = job.extras().adaptive.as_ref()?.app.as_ref()?;
        let agent = agent?;
        let secs = ((now - from) / apiary_model::SECOND) as u32;
        agent
            .step(app, secs)
            .map(|s| from + s as Time * apiary_model::SECOND)
    }
}

/// Tells an adaptive job its new allocation (GPUs per node; empty when stopped).
fn reallocate(world: &mut World, j: JobIdx, counts: Vec<u32>) {
    if let (job, Some(agent)) = world.job_and_agent(j)
        && let Some(app) = job.extras().adaptive.as_ref().and_then(|a| a.app.as_ref())
    {
        agent.reallocate(app, counts);
    }
}

/// Ends an adaptive job that trained its last epoch at `t`: a running job finishes; one
/// a decision has just preempted finishes instead (that preemption did not happen).
fn end(b: &mut impl Backend, pass: &mut Pass, j: JobIdx, t: Time) {
    let world = b.world_mut();
    if world.rt[j as usize].status == Status::Running {
        world.finish(j);
    } else {
        world.withdraw(j);
        world.rt[j as usize].preemptions -= 1;
    }
    world.rt[j as usize].finish = Some(t);
    b.ended(j, pass);
}
