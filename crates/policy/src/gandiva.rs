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
use std::collections::{BTreeMap, VecDeque};
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

/// A node-set's name: its slot in [`Gandiva::slots`] (low half) and how many sets the
/// slot held before it (high half). Slots are reused, so the artifact's churn of sets
/// made and released every tick allocates nothing, while an id still names one set for
/// ever: a job's `run_on` tells by its id whether the job moved to another set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct SetId(u64);

impl SetId {
    const NONE: SetId = SetId(u64::MAX);

    fn new(slot: usize, generation: u32) -> SetId {
        SetId((generation as u64) << 32 | slot as u64)
    }

    fn slot(self) -> usize {
        (self.0 & 0xffff_ffff) as usize
    }
}

#[derive(Debug, Default)]
struct NodeSet {
    nodes: Vec<u32>,
    gpus: u32,
    capacity: u32,
    load: u32,
    jobs: Vec<JobIdx>,
    /// Its class: the GPUs each of its jobs asks for.
    class: u32,
    /// Its first `capacity` jobs may not all run: jobs joined, left or rotated since it
    /// was last materialized, one was requeued, or a start failed.
    dirty: bool,
}

impl NodeSet {
    fn concurrency(&self) -> usize {
        self.jobs.len().min(self.capacity as usize)
    }
}

/// The node-sets of one job size.
#[derive(Debug, Default)]
struct Class {
    /// Its sets, least loaded first once sorted (the artifact's list order).
    sets: Vec<SetId>,
    /// Jobs in its sets and GPUs its sets hold, kept as they change: the adjustment
    /// reads them at every tick.
    jobs: u64,
    held: u64,
}

/// A slot of [`Gandiva::slots`]: the set it holds (when live) and its generation.
#[derive(Debug, Default)]
struct Slot {
    generation: u32,
    live: bool,
    set: NodeSet,
}

/// The adjustment's shares of the cluster, kept while the demand that gave them holds:
/// between arrivals and completions every tick would compute the same ones.
#[derive(Debug, Default)]
struct Shares {
    /// The cluster GPUs they were computed for (the total demand follows from the
    /// per-class demands).
    cluster: u64,
    /// Per class: its GPUs, its demand, its share of the cluster.
    per_class: Vec<(u32, u64, u64)>,
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
    classes: BTreeMap<u32, Class>,
    /// The adjustment's per-class demand, kept to reuse its allocation.
    demand: Vec<(u32, u64, u64)>,
    /// The last adjustment's shares of the cluster.
    shares: Shares,
    /// Node-sets by slot ([`SetId`]); the live ones are those the class lists name.
    slots: Vec<Slot>,
    free_slots: Vec<u32>,
    live_sets: usize,
    /// Live sets with no job: while there are none, a release only gives back the
    /// unbuilt sets' nodes.
    empty_sets: usize,
    /// The nodes of the sets [`Gandiva::expand`] did not build, in the order it took
    /// them, and per such expansion its class and node count (classes ascending).
    churn_nodes: Vec<u32>,
    churn: Vec<(u32, usize)>,
    arrivals: Vec<JobIdx>,
    waiting: Vec<JobIdx>,
    set_of: Vec<SetId>,
    run_on: Vec<(SetId, u32)>,
    mark: Vec<u32>,
    epoch: u32,
    released: bool,
    maybe_empty: bool,
    /// A running job may have left its set's first `capacity` (rotation) or its set
    /// (redistribution): the next materialization reads every running job.
    reshuffled: bool,
    /// Some set was marked dirty since the last materialization, which otherwise has no
    /// set to read: most passes on a busy trace are adjustment ticks that change none.
    any_dirty: bool,
    /// The running set's change count after the last materialization: any other change to
    /// the running jobs also makes it read them all.
    seen_changes: u64,
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
            demand: Vec::new(),
            shares: Shares::default(),
            slots: Vec::new(),
            free_slots: Vec::new(),
            live_sets: 0,
            empty_sets: 0,
            churn_nodes: Vec::new(),
            churn: Vec::new(),
            arrivals: Vec::new(),
            waiting: Vec::new(),
            set_of: Vec::new(),
            run_on: Vec::new(),
            mark: Vec::new(),
            epoch: 0,
            released: false,
            maybe_empty: false,
            reshuffled: false,
            any_dirty: false,
            seen_changes: u64::MAX,
            slot_used: Vec::new(),
            running: Vec::new(),
        })
    }

    fn set(&self, id: SetId) -> &NodeSet {
        let slot = &self.slots[id.slot()];
        debug_assert!(slot.live && SetId::new(id.slot(), slot.generation) == id);
        &slot.set
    }

    /// The set `id` names, if it is still in service.
    fn live_set_mut(&mut self, id: SetId) -> Option<&mut NodeSet> {
        let slot = self.slots.get_mut(id.slot())?;
        (slot.live && SetId::new(id.slot(), slot.generation) == id).then_some(&mut slot.set)
    }

    fn set_mut(&mut self, id: SetId) -> &mut NodeSet {
        let slot = &mut self.slots[id.slot()];
        debug_assert!(slot.live && SetId::new(id.slot(), slot.generation) == id);
        &mut slot.set
    }

    fn sort_class(&mut self, g: u32) {
        let slots = &self.slots;
        if let Some(class) = self.classes.get_mut(&g) {
            class.sets.sort_by_key(|id| slots[id.slot()].set.load);
        }
    }

    /// A new node-set of class `g` on the first free nodes that together hold `g`
    /// GPUs: its id, or `None` (taking nothing) if the free nodes hold fewer.
    fn new_set(&mut self, ctx: &Ctx<'_>, g: u32) -> Option<SetId> {
        let (k, sum) = self.free_run(ctx, 0, g)?;
        let slot = match self.free_slots.pop() {
            Some(slot) => slot as usize,
            None => {
                self.slots.push(Slot::default());
                self.slots.len() - 1
            }
        };
        let entry = &mut self.slots[slot];
        entry.live = true;
        let s = &mut entry.set;
        s.nodes.clear();
        s.nodes.extend(self.free_nodes.drain(..k));
        s.gpus = sum;
        s.capacity = sum / g;
        s.load = 0;
        s.class = g;
        s.dirty = false;
        debug_assert!(s.jobs.is_empty());
        let id = SetId::new(slot, entry.generation);
        self.live_sets += 1;
        self.empty_sets += 1;
        let class = self.classes.entry(g).or_default();
        class.sets.push(id);
        class.held += sum as u64;
        self.maybe_empty = true;
        Some(id)
    }

    /// How many free nodes from position `from` of the free list first hold `g` GPUs
    /// together, and how many GPUs they hold; `None` if the rest hold fewer.
    fn free_run(&self, ctx: &Ctx<'_>, from: usize, g: u32) -> Option<(usize, u32)> {
        let state = ctx.free();
        let mut sum = 0;
        let mut k = 0;
        while sum < g {
            let &n = self.free_nodes.get(from + k)?;
            sum += state.capacity_of(n);
            k += 1;
        }
        Some((k, sum))
    }

    /// Takes a set out of service: its nodes go to the back of the free list and its
    /// jobs onto `jobs`. The caller takes it off its class's list and totals.
    fn remove_set(
        slots: &mut [Slot],
        free_slots: &mut Vec<u32>,
        free_nodes: &mut VecDeque<u32>,
        id: SetId,
        jobs: &mut Vec<JobIdx>,
    ) {
        let entry = &mut slots[id.slot()];
        debug_assert!(entry.live && SetId::new(id.slot(), entry.generation) == id);
        entry.live = false;
        entry.generation = entry.generation.wrapping_add(1);
        free_nodes.extend(entry.set.nodes.drain(..));
        jobs.append(&mut entry.set.jobs);
        free_slots.push(id.slot() as u32);
    }

    fn add_to(&mut self, id: SetId, j: JobIdx) {
        let s = self.set_mut(id);
        let was_empty = s.jobs.is_empty();
        s.load += 1;
        s.jobs.push(j);
        s.dirty = true;
        let g = s.class;
        self.any_dirty = true;
        self.classes.get_mut(&g).expect("class").jobs += 1;
        self.empty_sets -= was_empty as usize;
        self.set_of[j as usize] = id;
    }

    /// `gandiva_placement`: join, new node-set, or oversubscribe; false if none.
    fn place(&mut self, ctx: &Ctx<'_>, j: JobIdx) -> bool {
        let g = ctx.job(j).gpus;
        let list = &mut self.classes.entry(g).or_default().sets;
        if !list.is_empty() {
            let id = list.remove(0);
            let s = self.set(id);
            let room = if self.quirks {
                s.load + 1 < s.capacity
            } else {
                s.load < s.capacity
            };
            self.classes.get_mut(&g).expect("class").sets.push(id);
            if room {
                self.add_to(id, j);
                self.sort_class(g);
                return true;
            }
            if !self.quirks {
                self.sort_class(g);
            }
        }
        if let Some(id) = self.new_set(ctx, g) {
            self.add_to(id, j);
            self.sort_class(g);
            return true;
        }
        let list = &mut self.classes.get_mut(&g).expect("class").sets;
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
        self.reshuffled = true;
        let mut sorted = false;
        for j in jobs {
            let id = self.classes[&g].sets[0];
            self.add_to(id, j);
            if !sorted {
                self.sort_class(g);
                sorted = true;
                continue;
            }
            let load = self.set(id).load;
            let slots = &self.slots;
            let list = &mut self.classes.get_mut(&g).expect("class").sets;
            let p = list[1..]
                .iter()
                .position(|x| slots[x.slot()].set.load >= load)
                .map_or(list.len(), |i| i + 1);
            list[..p].rotate_left(1);
        }
    }

    /// `gandiva_node_set_expand`: up to `count` new sets of class `g` from the free
    /// nodes, then the class's jobs dealt over all its sets again.
    ///
    /// Without that rearrangement (the quirk) the new sets stay empty until
    /// [`Gandiva::release_empty`] gives their nodes back later in the same pass, which
    /// under load happens at nearly every tick. Such sets are not built: their nodes
    /// wait in `churn_nodes` and go back where the sets' would have gone.
    fn expand(&mut self, ctx: &Ctx<'_>, g: u32, count: u64) {
        let mut created = 0;
        let mut taken = 0;
        let mut last_created_nodes = 0;
        let mut last_ok = false;
        for _ in 0..count {
            // A failed attempt takes nothing, so every later one fails too.
            let Some((k, _)) = self.free_run(ctx, taken, g) else {
                last_ok = false;
                break;
            };
            taken += k;
            last_created_nodes = k;
            created += 1;
            last_ok = true;
        }
        let rearrange = if self.quirks {
            !last_ok || last_created_nodes > 1
        } else {
            created > 0
        };
        if !rearrange {
            if taken > 0 {
                let (a, b) = self.free_nodes.as_slices();
                let in_a = taken.min(a.len());
                self.churn_nodes.extend_from_slice(&a[..in_a]);
                self.churn_nodes.extend_from_slice(&b[..taken - in_a]);
                self.free_nodes.drain(..taken);
                self.churn.push((g, taken));
                self.maybe_empty = true;
            }
            return;
        }
        for _ in 0..created {
            self.new_set(ctx, g);
        }
        let mut jobs = Vec::new();
        let class = self.classes.get_mut(&g).expect("class");
        for id in &class.sets {
            let s = &mut self.slots[id.slot()].set;
            if !s.jobs.is_empty() {
                jobs.append(&mut s.jobs);
                s.load = 0;
                self.empty_sets += 1;
            }
        }
        class.jobs -= jobs.len() as u64;
        self.redistribute(g, jobs);
    }

    fn shrink(&mut self, g: u32, count: u64) {
        let class = self.classes.get_mut(&g).expect("class");
        let n = if class.sets.len() as u64 <= count {
            class.sets.len().saturating_sub(1)
        } else {
            count as usize
        };
        if n == 0 {
            return;
        }
        let mut jobs = Vec::new();
        for id in class.sets.drain(..n) {
            let s = &self.slots[id.slot()].set;
            class.held -= s.gpus as u64;
            self.empty_sets -= s.jobs.is_empty() as usize;
            Self::remove_set(
                &mut self.slots,
                &mut self.free_slots,
                &mut self.free_nodes,
                id,
                &mut jobs,
            );
            self.live_sets -= 1;
        }
        class.jobs -= jobs.len() as u64;
        self.redistribute(g, jobs);
    }

    /// `gandiva_node_set_adjust`: each class towards its demand share of the cluster.
    fn adjust(&mut self, ctx: &Ctx<'_>) {
        let mut demand = std::mem::take(&mut self.demand);
        demand.clear();
        let mut total: u64 = 0;
        for (&g, class) in &self.classes {
            debug_assert_eq!(
                (class.jobs, class.held),
                class.sets.iter().fold((0, 0), |(j, h), id| {
                    let s = &self.slots[id.slot()].set;
                    (j + s.jobs.len() as u64, h + s.gpus as u64)
                }),
                "class {g}'s totals"
            );
            demand.push((g, class.jobs * g as u64, class.held));
            total += class.jobs * g as u64;
        }
        if total == 0 {
            self.demand = demand;
            return;
        }
        let cluster = ctx.total_gpus();
        let Shares {
            cluster: last,
            per_class: shares,
        } = &mut self.shares;
        let same = *last == cluster
            && shares.len() == demand.len()
            && (shares.iter().zip(&demand)).all(|(a, b)| (a.0, a.1) == (b.0, b.1));
        if !same {
            *last = cluster;
            shares.clear();
            shares.extend(demand.iter().map(|&(g, d, _)| {
                (
                    g,
                    d,
                    ((d as f64 / total as f64) * cluster as f64).floor() as u64,
                )
            }));
        }
        let shares = std::mem::take(shares);
        for (&(g, d, held), &(_, _, plan)) in demand.iter().zip(&shares) {
            if d == 0 {
                continue;
            }
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
        self.shares.per_class = shares;
        self.demand = demand;
    }

    fn release_empty(&mut self) {
        if !std::mem::take(&mut self.maybe_empty) {
            debug_assert!(self.churn.is_empty());
            return;
        }
        debug_assert_eq!(
            self.empty_sets,
            (self.classes.values())
                .flat_map(|c| &c.sets)
                .filter(|id| self.slots[id.slot()].set.jobs.is_empty())
                .count()
        );
        if self.empty_sets == 0 {
            // Only unbuilt sets to give back, in the order they were made.
            if !self.churn.is_empty() {
                self.free_nodes.extend(self.churn_nodes.iter().copied());
                self.released = true;
            }
            self.churn.clear();
            self.churn_nodes.clear();
            return;
        }
        let mut none = Vec::new();
        let mut classes = std::mem::take(&mut self.classes);
        let mut churned = 0;
        let mut churn = std::mem::take(&mut self.churn);
        let mut next = churn.iter().peekable();
        for (&g, class) in classes.iter_mut() {
            let Class { sets, held, .. } = class;
            sets.retain(|&id| {
                let s = &self.slots[id.slot()].set;
                if s.jobs.is_empty() {
                    *held -= s.gpus as u64;
                    Self::remove_set(
                        &mut self.slots,
                        &mut self.free_slots,
                        &mut self.free_nodes,
                        id,
                        &mut none,
                    );
                    self.live_sets -= 1;
                    self.empty_sets -= 1;
                    self.released = true;
                    false
                } else {
                    true
                }
            });
            // The unbuilt sets of this class were the last on its list.
            while let Some(&(_, k)) = next.next_if(|&&(c, _)| c == g) {
                self.free_nodes
                    .extend(self.churn_nodes[churned..churned + k].iter().copied());
                churned += k;
                self.released = true;
            }
        }
        debug_assert!(
            next.next().is_none(),
            "unbuilt sets of a class with no list"
        );
        churn.clear();
        self.churn = churn;
        self.churn_nodes.clear();
        self.classes = classes;
    }

    fn rotate(&mut self) {
        for class in self.classes.values() {
            for id in &class.sets {
                let s = &mut self.slots[id.slot()].set;
                let c = s.concurrency();
                if s.jobs.len() > c {
                    s.jobs.rotate_left(c);
                    s.dirty = true;
                    self.any_dirty = true;
                    self.reshuffled = true;
                }
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
    ///
    /// Only what can have changed is read: the running jobs when one may have left its
    /// place (a rotation, a redistribution, or any change to the running set since the
    /// last time), and the sets marked dirty, whose list is not walked at all when none
    /// was marked since the last time. Between passes a set's first `capacity`
    /// only gains jobs otherwise (a job that finishes moves the rest up), so every
    /// running job keeps its place and every other set has all its first jobs running:
    /// reading them all would change nothing.
    fn materialize(&mut self, ctx: &mut Ctx<'_>) -> Result<(), PolicyError> {
        let mut ctx = ctx.gpus()?;
        if std::mem::take(&mut self.reshuffled) || ctx.running_changes() != self.seen_changes {
            self.preempt_displaced(&mut ctx);
        } else {
            #[cfg(debug_assertions)]
            self.check_in_place(&ctx);
        }
        #[cfg(debug_assertions)]
        self.check_clean(&ctx);
        if !std::mem::take(&mut self.any_dirty) {
            self.seen_changes = ctx.running_changes();
            return Ok(());
        }
        let mut p = Placement::default();
        for (&g, class) in &self.classes {
            for &id in &class.sets {
                let s = &self.slots[id.slot()].set;
                if !s.dirty {
                    continue;
                }
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
                    if p.parts.capacity() == 0 {
                        p = ctx.empty_placement();
                    }
                    Self::slot_placement(&ctx, s, g, k as u32, &mut p);
                    if ctx.start(j, std::mem::take(&mut p)) {
                        self.slot_used[k] = true;
                        self.run_on[j as usize] = (id, k as u32);
                    }
                }
                // A first job still pending (its start failed) is tried again next time.
                let waiting = s.jobs[..c]
                    .iter()
                    .any(|&j| ctx.status(j) == Status::Pending);
                self.slots[id.slot()].set.dirty = waiting;
                self.any_dirty |= waiting;
            }
        }
        self.seen_changes = ctx.running_changes();
        Ok(())
    }

    #[cfg(debug_assertions)]
    fn check_in_place(&self, ctx: &Ctx<'_>) {
        for &j in ctx.running() {
            let id = self.set_of[j as usize];
            assert_eq!(
                id, self.run_on[j as usize].0,
                "job {j} moved without a rescan"
            );
            let s = self.set(id);
            assert!(
                s.jobs[..s.concurrency()].contains(&j),
                "job {j} left its set's first jobs without a rescan"
            );
        }
    }

    #[cfg(debug_assertions)]
    fn check_clean(&self, ctx: &Ctx<'_>) {
        for class in self.classes.values() {
            for &id in &class.sets {
                let s = self.set(id);
                if !s.dirty {
                    for &j in &s.jobs[..s.concurrency()] {
                        assert_ne!(
                            ctx.status(j),
                            Status::Pending,
                            "job {j} waits in a clean set at {}",
                            ctx.now()
                        );
                    }
                }
            }
        }
    }

    /// Preempts every running job that is no longer among its set's first `capacity`,
    /// or whose set changed.
    fn preempt_displaced(&mut self, ctx: &mut Ctx<'_>) {
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            self.mark.iter_mut().for_each(|m| *m = 0);
            self.epoch = 1;
        }
        for class in self.classes.values() {
            for id in &class.sets {
                let s = &self.slots[id.slot()].set;
                for &j in &s.jobs[..s.concurrency()] {
                    self.mark[j as usize] = self.epoch;
                }
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
                self.run_on[j as usize] = (SetId::NONE, 0);
            }
        }
        self.running = running;
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
            self.set_of.resize(n, SetId::NONE);
            self.run_on.resize(n, (SetId::NONE, 0));
            self.mark.resize(n, 0);
        }
        self.arrivals.push(j);
        self.submitted += 1;
        Ok(())
    }

    fn on_finish(&mut self, _ctx: &Ctx<'_>, j: JobIdx) {
        let id = std::mem::replace(&mut self.set_of[j as usize], SetId::NONE);
        self.run_on[j as usize] = (SetId::NONE, 0);
        let quirks = self.quirks;
        if let Some(s) = self.live_set_mut(id)
            && let Some(i) = s.jobs.iter().position(|&x| x == j)
        {
            s.jobs.remove(i);
            s.dirty = true;
            let (empty, g) = (s.jobs.is_empty(), s.class);
            if !quirks {
                s.load -= 1;
            }
            self.any_dirty = true;
            self.maybe_empty |= empty;
            self.empty_sets += empty as usize;
            self.classes.get_mut(&g).expect("class").jobs -= 1;
        }
    }

    /// Its set starts it again (it stays among the set's first jobs).
    fn on_requeue(&mut self, _ctx: &Ctx<'_>, j: JobIdx) {
        let id = self.set_of.get(j as usize).copied().unwrap_or(SetId::NONE);
        if let Some(s) = self.live_set_mut(id) {
            s.dirty = true;
            self.any_dirty = true;
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
            } else if self.live_sets > 0 || !self.waiting.is_empty() {
                self.tick_at = Some(self.next_decision);
                ctx.wake_at(self.next_decision);
            }
            return Ok(());
        }
        // The artifact adjusts node-sets every tick while any job is in the system.
        if self.live_sets > 0 || !self.waiting.is_empty() {
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
