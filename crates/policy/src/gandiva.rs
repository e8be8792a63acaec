//! Gandiva (OSDI'18) as the Tiresias and ElasticFlow artifacts emulate it for their
//! baselines (`SymbioticLab/Tiresias:simulator/cluster.py`, the same code in
//! `pkusys/ElasticFlow`): no job knowledge, nodes grouped into node-sets per job size,
//! and round-robin time slicing inside an oversubscribed node-set.
//!
//! * A node-set of class `g` (jobs of `g` GPUs) is the fewest free nodes that hold `g`
//!   GPUs; its capacity is how many `g`-GPU jobs fit on them at once.
//! * An arriving job joins the least-loaded node-set of its class if it has room, else it
//!   takes a new node-set from the free nodes, else it joins the least-loaded node-set
//!   anyway (oversubscription, time slicing). With no node-set of its class and no free
//!   node it waits, and is retried when a node-set is released.
//! * In every node-set the first `capacity` jobs run; every `quantum` (60 s) those jobs
//!   move to the back of the set's list (round robin).
//! * Every tick (10 s, the Tiresias artifact's step) node-sets of each class grow or shrink
//!   towards a share of the cluster proportional to the class's GPU demand; shrinking
//!   moves the jobs of the released sets into the remaining ones.
//!
//! Both artifacts give every model a memory footprint of one GPU (`m_mem = [1, …]`), so
//! concurrency is never above capacity and packing never shares a GPU. Jobs do not run
//! faster or slower for being time-sliced; a job moved to another node-set restarts
//! (restart overhead, if configured).
//!
//! `clock=elasticflow` runs the ElasticFlow artifact's loop around the same node-sets
//! (`gandiva_sim_jobs`): decisions happen at arrivals only, an arrival within a `slot` of
//! the last decision waiting for the slot's end, and every `slot` once no arrival is left;
//! round robin happens only at a decision that falls on a multiple of `quantum` (the
//! artifact's `cur_time % 60 == 0`), so between arrivals a node-set runs its first jobs
//! to completion; and while arrivals remain, every running job loses ElasticFlow's
//! per-round overhead at each decision.
//!
//! `quirks=true` (default) keeps three artifact behaviours that change results: a job
//! joins an existing node-set only while `load + 1 < capacity` (strictly below), the
//! load counter of a node-set counts every job ever added and is not lowered when a job
//! finishes (only a rearrangement resets it), and growing a class whose node-sets fit on
//! one node rearranges its jobs only when the last attempt to take free nodes failed (a
//! reused loop variable in `gandiva_node_set_expand`); the retry of waiting jobs skips
//! the job after each one it places (a list mutated while iterated); and node-sets grow
//! and shrink by `ceil(GPUs / g)` sets although a set of jobs smaller than a node holds
//! the whole node ([`IDLE_QUEUEING`]). `quirks=false` gives the evident intent:
//! `load ≤ capacity`, live loads, rearrange after every growth, every waiting job
//! retried, and sets counted by the GPUs they hold.

use crate::PolicyError;
use crate::ctx::{Ctx, Handles};
use crate::spec::{Capabilities, Capability, ParamSpec, PolicySpec};
use crate::world::{JobIdx, Status};
use crate::{ParamError, Params, Policy};
use apiary_model::{Placement, SECOND, Time};
use foldhash::fast::FixedState;
use std::collections::{BTreeMap, HashMap, VecDeque};
/// `gandiva`: its spec.
pub const GANDIVA: PolicySpec = PolicySpec {
    name: "gandiva",
    about: "Gandiva as the Tiresias/ElasticFlow artifacts emulate it: node-sets per job size, 60 s time slicing",
    // `stalls` and `lookahead` with `clock=elasticflow` only (`Policy::capabilities`).
    capabilities: Capabilities::of(&[
        Capability::ChoosesGpus,
        Capability::Stalls,
        Capability::Lookahead,
    ]),
    params: GANDIVA_PARAMS,
    build: |p| Ok(Box::new(Gandiva::new(p)?)),
};

/// Why Gandiva with the artifacts' quirks keeps jobs waiting on a cluster with idle
/// nodes, for the output to say where that shows (pending time at low utilisation).
pub const IDLE_QUEUEING: &str = "the artifacts' node-set adjustment counts a node-set \
     of g-GPU jobs as g GPUs although it holds a whole node, so it shrinks classes of jobs \
     smaller than a node onto too few nodes, where they time-slice while other nodes idle; \
     --set quirks=false counts the GPUs a set holds \
     (docs/policies/gandiva.md, quirk 5)";

/// Whether the quirk [`IDLE_QUEUEING`] explains is on with `p`.
pub fn idle_queueing_quirk(p: &Params) -> bool {
    p.bool(&QUIRKS).unwrap_or(true)
}

const GANDIVA_PARAMS: &[ParamSpec] = &[QUANTUM, TICK, QUIRKS, CLOCK, SLOT];

const QUANTUM: ParamSpec = ParamSpec {
    key: "quantum",
    default: "60",
    about: "time-slice length in seconds (round robin inside a node-set)",
};

const TICK: ParamSpec = ParamSpec {
    key: "tick",
    default: "10",
    about: "seconds between node-set adjustments (the Tiresias artifact's step)",
};

const QUIRKS: ParamSpec = ParamSpec {
    key: "quirks",
    default: "true",
    about: "keep the artifact's strict join, stale loads, skipped growth rearrangement and retry skip",
};

const CLOCK: ParamSpec = ParamSpec {
    key: "clock",
    default: "tiresias",
    about: "whose loop: tiresias (adjust every tick, rotate every quantum) | elasticflow (decide at slot-merged arrivals, rotate only on a quantum multiple, ElasticFlow's per-round overheads)",
};

const SLOT: ParamSpec = ParamSpec {
    key: "slot",
    default: "60",
    about: "with clock=elasticflow: the scheduling slot, seconds (240 in ElasticFlow's Figs. 9-11)",
};

const NONE: u32 = u32::MAX;

#[derive(Debug)]
struct NodeSet {
    nodes: Vec<u32>,
    gpus: u32,
    capacity: u32,
    load: u32,
    jobs: Vec<JobIdx>,
}

impl NodeSet {
    fn concurrency(&self) -> usize {
        self.jobs.len().min(self.capacity as usize)
    }
}

/// Whose loop drives the node-sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Clock {
    /// The Tiresias artifact: adjust every `tick`, rotate every `quantum`.
    Tiresias,
    /// The ElasticFlow artifact: decide at (slot-merged) arrivals, with overheads.
    ElasticFlow,
}

/// The Gandiva emulation.
#[derive(Debug)]
pub struct Gandiva {
    quantum: Time,
    tick: Time,
    quirks: bool,
    clock: Clock,
    slot: Time,
    /// ElasticFlow clock: no decision before this time.
    next_decision: Time,
    /// ElasticFlow clock: the wake-up it asked for once no arrival is left.
    tick_at: Option<Time>,
    submitted: usize,
    decisions: u64,
    ready: bool,
    free_nodes: VecDeque<u32>,
    classes: BTreeMap<u32, Vec<u32>>,
    /// Live node-sets by id. Ids are never reused (a job's `run_on` names the set it
    /// ran on), and nothing walks this map in an order that shows.
    sets: HashMap<u32, NodeSet, FixedState>,
    next_id: u32,
    arrivals: Vec<JobIdx>,
    waiting: Vec<JobIdx>,
    set_of: Vec<u32>,
    run_on: Vec<(u32, u32)>,
    mark: Vec<u32>,
    epoch: u32,
    released: bool,
    maybe_empty: bool,
    slot_used: Vec<bool>,
    running: Vec<JobIdx>,
}

impl Gandiva {
    /// Parameters as [`GANDIVA`] lists them.
    pub fn new(p: &Params) -> Result<Gandiva, ParamError> {
        let secs = |spec: &ParamSpec| p.secs(spec, 0.001);
        Ok(Gandiva {
            quantum: secs(&QUANTUM)?,
            tick: secs(&TICK)?,
            quirks: p.bool(&QUIRKS)?,
            clock: p.choice(
                &CLOCK,
                &[
                    ("tiresias", Clock::Tiresias),
                    ("elasticflow", Clock::ElasticFlow),
                ],
            )?,
            slot: secs(&SLOT)?,
            next_decision: 0,
            tick_at: None,
            submitted: 0,
            decisions: 0,
            ready: false,
            free_nodes: VecDeque::new(),
            classes: BTreeMap::new(),
            sets: HashMap::default(),
            next_id: 0,
            arrivals: Vec::new(),
            waiting: Vec::new(),
            set_of: Vec::new(),
            run_on: Vec::new(),
            mark: Vec::new(),
            epoch: 0,
            released: false,
            maybe_empty: false,
            slot_used: Vec::new(),
            running: Vec::new(),
        })
    }

    fn sort_class(&mut self, g: u32) {
        let sets = &self.sets;
        if let Some(list) = self.classes.get_mut(&g) {
            list.sort_by_key(|id| sets[id].load);
        }
    }

    /// Takes the first free nodes that together hold `g` GPUs, if there are enough.
    fn take_free(&mut self, ctx: &Ctx<'_>, g: u32) -> Option<(Vec<u32>, u32)> {
        let state = ctx.free();
        let mut sum = 0;
        let mut k = 0;
        while sum < g {
            let &n = self.free_nodes.get(k)?;
            sum += state.capacity_of(n);
            k += 1;
        }
        Some((self.free_nodes.drain(..k).collect(), sum))
    }

    fn new_set(&mut self, g: u32, nodes: Vec<u32>, gpus: u32) -> u32 {
        let id = self.next_id;
        self.next_id += 1;
        self.sets.insert(
            id,
            NodeSet {
                nodes,
                gpus,
                capacity: gpus / g,
                load: 0,
                jobs: Vec::new(),
            },
        );
        self.classes.entry(g).or_default().push(id);
        self.maybe_empty = true;
        id
    }

    fn add_to(&mut self, id: u32, j: JobIdx) {
        let s = self.sets.get_mut(&id).expect("live node-set");
        s.load += 1;
        s.jobs.push(j);
        self.set_of[j as usize] = id;
    }

    /// `gandiva_placement`: join, new node-set, or oversubscribe; false if none.
    fn place(&mut self, ctx: &Ctx<'_>, j: JobIdx) -> bool {
        let g = ctx.job(j).gpus;
        let list = self.classes.entry(g).or_default();
        if !list.is_empty() {
            let id = list.remove(0);
            let s = &self.sets[&id];
            let room = if self.quirks {
                s.load + 1 < s.capacity
            } else {
                s.load < s.capacity
            };
            self.classes.get_mut(&g).expect("class").push(id);
            if room {
                self.add_to(id, j);
                self.sort_class(g);
                return true;
            }
            if !self.quirks {
                self.sort_class(g);
            }
        }
        if let Some((nodes, gpus)) = self.take_free(ctx, g) {
            let id = self.new_set(g, nodes, gpus);
            self.add_to(id, j);
            self.sort_class(g);
            return true;
        }
        let list = self.classes.get_mut(&g).expect("class");
        if list.is_empty() {
            return false;
        }
        let id = list.remove(0);
        list.push(id);
        self.add_to(id, j);
        self.sort_class(g);
        true
    }

    /// Moves every job of class `g` into the class's node-sets again, least loaded first.
    ///
    /// The artifact re-sorts the list (stably, by load) after every job. Once sorted, that
    /// sort only moves the head past the sets whose load equals its old load, which is
    /// what the loop below does without sorting.
    fn redistribute(&mut self, g: u32, jobs: Vec<JobIdx>) {
        let mut sorted = false;
        for j in jobs {
            let id = self.classes[&g][0];
            self.add_to(id, j);
            if !sorted {
                self.sort_class(g);
                sorted = true;
                continue;
            }
            let load = self.sets[&id].load;
            let list = self.classes.get_mut(&g).expect("class");
            let p = list[1..]
                .iter()
                .position(|x| self.sets[x].load >= load)
                .map_or(list.len(), |i| i + 1);
            list[..p].rotate_left(1);
        }
    }

    fn expand(&mut self, ctx: &Ctx<'_>, g: u32, count: u64) {
        let mut created = 0;
        let mut last_created_nodes = 0;
        let mut last_ok = false;
        for _ in 0..count {
            match self.take_free(ctx, g) {
                Some((nodes, gpus)) => {
                    last_created_nodes = nodes.len();
                    self.new_set(g, nodes, gpus);
                    created += 1;
                    last_ok = true;
                }
                None => last_ok = false,
            }
        }
        let rearrange = if self.quirks {
            !last_ok || last_created_nodes > 1
        } else {
            created > 0
        };
        if !rearrange {
            return;
        }
        let mut jobs = Vec::new();
        for id in &self.classes[&g] {
            let s = self.sets.get_mut(id).expect("live node-set");
            if !s.jobs.is_empty() {
                jobs.append(&mut s.jobs);
                s.load = 0;
            }
        }
        self.redistribute(g, jobs);
    }

    fn shrink(&mut self, g: u32, count: u64) {
        let list = self.classes.get_mut(&g).expect("class");
        let n = if list.len() as u64 <= count {
            list.len().saturating_sub(1)
        } else {
            count as usize
        };
        if n == 0 {
            return;
        }
        let mut jobs = Vec::new();
        for id in list.drain(..n).collect::<Vec<_>>() {
            let s = self.sets.remove(&id).expect("live node-set");
            jobs.extend(s.jobs);
            self.free_nodes.extend(s.nodes);
        }
        self.redistribute(g, jobs);
    }

    /// `gandiva_node_set_adjust`: each class towards its demand share of the cluster.
    fn adjust(&mut self, ctx: &Ctx<'_>) {
        let mut demand = Vec::new();
        let mut total: u64 = 0;
        for (&g, list) in &self.classes {
            let jobs: u64 = list.iter().map(|id| self.sets[id].jobs.len() as u64).sum();
            let held: u64 = list.iter().map(|id| self.sets[id].gpus as u64).sum();
            demand.push((g, jobs * g as u64, held));
            total += jobs * g as u64;
        }
        if total == 0 {
            return;
        }
        let cluster = ctx.total_gpus() as f64;
        for (g, d, held) in demand {
            if d == 0 {
                continue;
            }
            let plan = ((d as f64 / total as f64) * cluster).floor() as u64;
            let target = plan.min(d) as i64;
            let diff = target - held as i64;
            // The artifact counts node-sets of `g` GPUs, but a set of jobs smaller than
            // a node holds the whole node: with the quirk it grows and shrinks by up to
            // node/g times too many sets (shrinking a class of nine 1-GPU jobs on two
            // 8-GPU nodes to one node, to time-slice on an idle cluster). Without it, a
            // set counts the GPUs it holds, and a class shrinks only by sets its excess
            // covers whole.
            let per_set = if self.quirks {
                g as u64
            } else {
                let n = ctx.cluster().max_gpus_per_node.max(1) as u64;
                (g as u64).div_ceil(n) * n
            };
            if diff > 0 {
                self.expand(ctx, g, (diff as u64).div_ceil(per_set));
            } else if diff < 0 {
                let n = if self.quirks {
                    diff.unsigned_abs().div_ceil(per_set)
                } else {
                    diff.unsigned_abs() / per_set
                };
                self.shrink(g, n);
            }
        }
    }

    fn release_empty(&mut self) {
        if !std::mem::take(&mut self.maybe_empty) {
            return;
        }
        for list in self.classes.values_mut() {
            let sets = &mut self.sets;
            let free = &mut self.free_nodes;
            let released = &mut self.released;
            list.retain(|id| {
                if sets[id].jobs.is_empty() {
                    let s = sets.remove(id).expect("live node-set");
                    free.extend(s.nodes);
                    *released = true;
                    false
                } else {
                    true
                }
            });
        }
    }

    fn rotate(&mut self) {
        for s in self.sets.values_mut() {
            let c = s.concurrency();
            if s.jobs.len() > c {
                s.jobs.rotate_left(c);
            }
        }
    }

    fn retry_waiting(&mut self, ctx: &Ctx<'_>) {
        let mut i = 0;
        while i < self.waiting.len() {
            let j = self.waiting[i];
            if self.place(ctx, j) {
                self.waiting.remove(i);
                if self.quirks {
                    i += 1;
                }
            } else {
                i += 1;
            }
        }
    }

    /// GPUs of slot `k` of a node-set (its GPUs in node order, `g` per slot).
    fn slot_placement(ctx: &Ctx<'_>, s: &NodeSet, g: u32, k: u32, out: &mut Placement) {
        out.clear();
        let (lo, hi) = (k * g, (k + 1) * g);
        let mut off = 0;
        for &n in &s.nodes {
            let c = ctx.free().capacity_of(n);
            let (a, b) = (lo.max(off), hi.min(off + c));
            if a < b {
                let mut mask = 0u64;
                for i in a - off..b - off {
                    mask |= 1u64 << i;
                }
                out.parts.push((n, mask));
            }
            off += c;
        }
    }

    /// Runs the first `capacity` jobs of every node-set, where they belong.
    fn materialize(&mut self, ctx: &mut Ctx<'_>) -> Result<(), PolicyError> {
        let mut ctx = ctx.gpus()?;
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            self.mark.iter_mut().for_each(|m| *m = 0);
            self.epoch = 1;
        }
        for s in self.sets.values() {
            for &j in &s.jobs[..s.concurrency()] {
                self.mark[j as usize] = self.epoch;
            }
        }
        let mut running = std::mem::take(&mut self.running);
        running.clear();
        running.extend_from_slice(ctx.running());
        for &j in &running {
            let keep = self.mark[j as usize] == self.epoch
                && self.set_of[j as usize] == self.run_on[j as usize].0;
            if !keep {
                ctx.preempt(j);
                self.run_on[j as usize] = (NONE, 0);
            }
        }
        self.running = running;
        let mut p = Placement::default();
        for (&g, list) in &self.classes {
            for id in list {
                let s = &self.sets[id];
                let c = s.concurrency();
                self.slot_used.clear();
                self.slot_used.resize(s.capacity as usize, false);
                for &j in &s.jobs[..c] {
                    if ctx.status(j) == Status::Running {
                        self.slot_used[self.run_on[j as usize].1 as usize] = true;
                    }
                }
                for &j in &s.jobs[..c] {
                    if ctx.status(j) != Status::Pending {
                        continue;
                    }
                    let Some(k) = self.slot_used.iter().position(|u| !u) else {
                        break;
                    };
                    Self::slot_placement(&ctx, s, g, k as u32, &mut p);
                    if ctx.start(j, std::mem::take(&mut p)) {
                        self.slot_used[k] = true;
                        self.run_on[j as usize] = (*id, k as u32);
                    }
                }
            }
        }
        Ok(())
    }
}

impl Policy for Gandiva {
    fn spec(&self) -> &'static PolicySpec {
        &GANDIVA
    }

    /// Node-sets choose their GPUs; only ElasticFlow's clock charges the round's
    /// rescaling stalls and asks whether arrivals remain.
    fn capabilities(&self) -> Capabilities {
        match self.clock {
            Clock::ElasticFlow => GANDIVA.capabilities,
            Clock::Tiresias => Capabilities::of(&[Capability::ChoosesGpus]),
        }
    }

    fn admit(&mut self, ctx: &Ctx<'_>, j: JobIdx) -> Result<(), PolicyError> {
        let n = ctx.job_count();
        if self.set_of.len() < n {
            self.set_of.resize(n, NONE);
            self.run_on.resize(n, (NONE, 0));
            self.mark.resize(n, 0);
        }
        self.arrivals.push(j);
        self.submitted += 1;
        Ok(())
    }

    fn on_finish(&mut self, _ctx: &Ctx<'_>, j: JobIdx) {
        let id = std::mem::replace(&mut self.set_of[j as usize], NONE);
        self.run_on[j as usize] = (NONE, 0);
        if let Some(s) = self.sets.get_mut(&id)
            && let Some(i) = s.jobs.iter().position(|&x| x == j)
        {
            s.jobs.remove(i);
            self.maybe_empty |= s.jobs.is_empty();
            if !self.quirks {
                s.load -= 1;
            }
        }
    }

    fn schedule(&mut self, ctx: &mut Ctx<'_>) -> Result<(), PolicyError> {
        if !self.ready {
            self.free_nodes = (0..ctx.free().node_count() as u32).collect();
            self.ready = true;
        }
        let now = ctx.now();
        if self.clock == Clock::ElasticFlow {
            // Completions wait for the next decision; arrivals for the slot's end.
            let due = now >= self.next_decision
                && (!self.arrivals.is_empty() || self.tick_at == Some(now));
            if !due {
                // A pass asks for its wake-up afresh: keep the one already due.
                if !self.arrivals.is_empty() {
                    ctx.wake_at(self.next_decision);
                } else if let Some(t) = self.tick_at {
                    ctx.wake_at(t);
                }
                return Ok(());
            }
            self.tick_at = None;
        }
        self.release_empty();
        self.adjust(ctx);
        self.release_empty();
        if now.is_multiple_of(self.quantum) {
            self.rotate();
        }
        for j in std::mem::take(&mut self.arrivals) {
            if !self.place(ctx, j) {
                self.waiting.push(j);
            }
        }
        if std::mem::take(&mut self.released) && !self.waiting.is_empty() {
            self.retry_waiting(ctx);
        }
        self.materialize(ctx)?;
        if self.clock == Clock::ElasticFlow {
            self.next_decision = now + self.slot;
            if self.submitted < ctx.lookahead()?.all_jobs().len() {
                // The artifact charges ElasticFlow's per-round overhead while arrivals
                // remain, and restarts every `slot`-th round (it counts rounds).
                let slot_rounds = (self.slot / SECOND).max(1);
                let restart = self.decisions > 0 && self.decisions.is_multiple_of(slot_rounds);
                self.decisions += 1;
                let total = ctx.total_gpus() as u32;
                let mut running = std::mem::take(&mut self.running);
                running.clear();
                running.extend_from_slice(ctx.running());
                for &j in &running {
                    let o =
                        crate::elasticflow::round_overhead(total, ctx.job(j).gpus, restart, false);
                    ctx.stalls()?.stall(j, o as Time);
                }
                self.running = running;
            } else if !self.sets.is_empty() || !self.waiting.is_empty() {
                self.tick_at = Some(self.next_decision);
                ctx.wake_at(self.next_decision);
            }
            return Ok(());
        }
        // The artifact adjusts node-sets every tick while any job is in the system.
        if !self.sets.is_empty() || !self.waiting.is_empty() {
            let next_tick = (now / self.tick + 1) * self.tick;
            let next_quantum = (now / self.quantum + 1) * self.quantum;
            ctx.wake_at(next_tick.min(next_quantum));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_bad_quantum() {
        let p = Params::from_pairs(["quantum=0"]).unwrap();
        assert!(Gandiva::new(&p).is_err());
    }
}
