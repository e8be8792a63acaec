//! HiveD's algorithm: buddy cell allocation, lazy virtual-to-physical binding with the
//! safety check, priorities and stateful preemption, lazy preemption, bad hardware and
//! doomed cells, and recovery from bind info.
//!
//! The structure follows upstream `pkg/algorithm` call for call, because exact placements
//! depend on list orders (free lists swap-remove, node views re-sort stably with Go's
//! algorithm). Where upstream panics or corrupts state (hived.md §13) we keep the state
//! consistent instead; those places say so.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::cells::{Built, CellState, Chain, FREE, MAX_PRIORITY, OPPORTUNISTIC, PCell, VCell, Vc};
use crate::config::{Config, ConfigError};
use crate::types::*;

/// A group's lifecycle state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum GroupState {
    /// Bound and running.
    Allocated,
    /// Holds reservations, waits for its victims to go.
    Preempting,
    /// Some of its cells are reserved by a preemptor.
    BeingPreempted,
}

/// Per size class -> pod slot -> leaf.
pub(crate) type Placement = Vec<Vec<Vec<Option<usize>>>>;

#[derive(Debug, Clone)]
pub(crate) struct Group {
    pub name: String,
    pub vc: usize,
    pub priority: i32,
    pub lazy_enable: bool,
    pub ignore_suggested: bool,
    /// Pod sizes, ascending.
    pub sizes: Vec<usize>,
    pub phys: Placement,
    pub virt: Option<Placement>,
    /// Per size class -> slot -> (pod, node id).
    pub allocated: Vec<Vec<Option<(String, String)>>>,
    pub preempting: BTreeSet<String>,
    pub state: GroupState,
    pub lazy: Option<(String, i64)>,
}

impl Group {
    fn size_index(&self, size: usize) -> Option<usize> {
        self.sizes.iter().position(|&s| s == size)
    }
    pub(crate) fn leaves(&self) -> impl Iterator<Item = (usize, usize, usize, usize)> + '_ {
        self.phys.iter().enumerate().flat_map(|(si, pods)| {
            pods.iter().enumerate().flat_map(move |(pi, leaves)| {
                leaves
                    .iter()
                    .enumerate()
                    .filter_map(move |(li, l)| l.map(|l| (si, pi, li, l)))
            })
        })
    }
}

/// The scheduler state. See the crate docs for the calling contract.
#[derive(Debug, Clone)]
pub struct Hived {
    pub(crate) config: Config,
    pub(crate) chains: Vec<Chain>,
    pub(crate) p: Vec<PCell>,
    pub(crate) v: Vec<VCell>,
    pub(crate) vcs: Vec<Vc>,
    pub(crate) nodes: Vec<String>,
    pub(crate) node_ids: BTreeMap<String, usize>,
    pub(crate) node_leaves: Vec<Vec<usize>>,
    pub(crate) leaf_chains: BTreeMap<String, Vec<usize>>,
    pub(crate) chain_ids: BTreeMap<String, usize>,
    pub(crate) free: Vec<Vec<Vec<usize>>>,
    pub(crate) vc_free: Vec<Vec<Vec<i64>>>,
    pub(crate) all_vc_free: Vec<Vec<i64>>,
    pub(crate) total_left: Vec<Vec<i64>>,
    pub(crate) bad_free: Vec<Vec<Vec<usize>>>,
    pub(crate) vc_doomed: Vec<Vec<Vec<Vec<usize>>>>,
    pub(crate) all_vc_doomed: Vec<Vec<i64>>,
    pub(crate) bad_nodes: Vec<bool>,
    pub(crate) opp_views: Vec<Vec<usize>>,
    pub(crate) groups: Vec<Option<Group>>,
    pub(crate) group_ids: BTreeMap<String, usize>,
    pub(crate) now: i64,
    /// Set while a recovered group is allocated: no new doomed cells are forecast until
    /// all its leaves are in place (see `release_all_doomed`).
    pub(crate) forecast_paused: bool,
}

trait TreeCell {
    fn parent(&self) -> Option<usize>;
    fn children(&self) -> &[usize];
    fn prio(&self) -> i32;
    fn set_prio(&mut self, p: i32);
    fn used_mut(&mut self) -> &mut crate::cells::Used;
}

macro_rules! tree_cell {
    ($t:ty) => {
        impl TreeCell for $t {
            fn parent(&self) -> Option<usize> {
                self.parent
            }
            fn children(&self) -> &[usize] {
                &self.children
            }
            fn prio(&self) -> i32 {
                self.priority
            }
            fn set_prio(&mut self, p: i32) {
                self.priority = p;
            }
            fn used_mut(&mut self) -> &mut crate::cells::Used {
                &mut self.used
            }
        }
    };
}
tree_cell!(PCell);
tree_cell!(VCell);

/// Priority of a cell = max of its children's; propagates upward.
fn set_priority<T: TreeCell>(cells: &mut [T], mut c: usize, mut p: i32) {
    loop {
        let original = cells[c].prio();
        cells[c].set_prio(p);
        let Some(parent) = cells[c].parent() else {
            return;
        };
        let pp = cells[parent].prio();
        if p > pp {
            c = parent;
        } else if original == pp && p < original {
            let max = cells[parent]
                .children()
                .iter()
                .map(|&b| cells[b].prio())
                .max()
                .unwrap_or(FREE)
                .max(FREE);
            c = parent;
            p = max;
        } else {
            return;
        }
    }
}

fn update_used<T: TreeCell>(cells: &mut [T], c: usize, p: i32, delta: i64) {
    let mut cur = Some(c);
    while let Some(x) = cur {
        cells[x].used_mut().add(p, delta);
        cur = cells[x].parent();
    }
}

fn swap_remove(list: &mut Vec<usize>, c: usize) -> bool {
    if let Some(i) = list.iter().position(|&x| x == c) {
        list.swap_remove(i);
        true
    } else {
        false
    }
}

/// A vertex of a binding path: a virtual cell to bind and its children to bind.
#[derive(Debug, Clone)]
pub(crate) struct PathVertex {
    pub cell: usize,
    pub children: Vec<PathVertex>,
}

/// Where a candidate list for cell mapping lives.
#[derive(Clone, Copy)]
enum ListRef {
    /// The scratch free list at a level.
    Free(usize),
    /// Children of a physical cell.
    Children(usize),
}

pub(crate) struct Ctx<'a> {
    pub suggested: &'a [bool],
    pub ignore: bool,
}

impl Ctx<'_> {
    pub(crate) fn node_ok(&self, n: usize) -> bool {
        self.ignore || self.suggested.get(n).copied().unwrap_or(false)
    }
}

impl Hived {
    /// Builds the scheduler from a config. Every node starts bad, as upstream (Kubernetes
    /// then reports the healthy ones); use [`Hived::with_all_nodes_healthy`] to mark them
    /// healthy in config order.
    pub fn new(config: &Config) -> Result<Hived, ConfigError> {
        let b = Built::from_config(config)?;
        let nchains = b.chains.len();
        let nvcs = b.vcs.len();
        let levels = |c: &Chain| vec![0i64; c.top + 1];
        let mut h = Hived {
            config: config.clone(),
            free: b
                .chains
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    let mut l = vec![Vec::new(); c.top + 1];
                    l[c.top] = b.tops[i].clone();
                    l
                })
                .collect(),
            all_vc_free: b.chains.iter().map(levels).collect(),
            total_left: b.chains.iter().map(levels).collect(),
            bad_free: b
                .chains
                .iter()
                .map(|c| vec![Vec::new(); c.top + 1])
                .collect(),
            vc_doomed: (0..nvcs)
                .map(|_| {
                    b.chains
                        .iter()
                        .map(|c| vec![Vec::new(); c.top + 1])
                        .collect()
                })
                .collect(),
            all_vc_doomed: b.chains.iter().map(levels).collect(),
            bad_nodes: vec![false; b.nodes.len()],
            opp_views: Vec::new(),
            groups: Vec::new(),
            group_ids: BTreeMap::new(),
            now: 0,
            forecast_paused: false,
            vc_free: b.vc_free,
            chains: b.chains,
            p: b.pcells,
            v: b.vcells,
            vcs: b.vcs,
            nodes: b.nodes,
            node_ids: b.node_ids,
            node_leaves: b.node_leaves,
            leaf_chains: b.leaf_chains,
            chain_ids: b.chain_ids,
        };
        // The start-up safety check (hived.md §5.1) ran before the virtual cells were
        // built (cells.rs); here the VCs' needs are summed for the doomed-cell check.
        for vcf in &h.vc_free {
            for (c, levels) in vcf.iter().enumerate() {
                for (l, n) in levels.iter().enumerate() {
                    h.all_vc_free[c][l] += n;
                }
            }
        }
        for c in 0..nchains {
            let top = h.chains[c].top;
            h.total_left[c][top] = h.free[c][top].len() as i64;
            for l in (2..=top).rev() {
                h.total_left[c][l - 1] = h.total_left[c][l] * h.chains[c].level_fanout[l] as i64;
            }
        }
        // Views.
        h.opp_views = (0..nchains)
            .map(|c| {
                new_view(
                    &h.chains[c].full,
                    |x| h.p[x].parent,
                    |x| h.node_level_or_above_p(x),
                )
            })
            .collect();
        for vi in 0..h.vcs.len() {
            let chains: Vec<usize> = h.vcs[vi].chains.keys().copied().collect();
            for c in chains {
                let view = new_view(
                    &h.vcs[vi].chains[&c].full,
                    |x| h.v[x].parent,
                    |x| h.chains[h.v[x].chain].level_at_or_above_node[h.v[x].level],
                );
                h.vcs[vi].chains.get_mut(&c).expect("chain").view = view;
            }
            let pins: Vec<String> = h.vcs[vi].pinned.keys().cloned().collect();
            for pid in pins {
                let view = new_view(
                    &h.vcs[vi].pinned[&pid].0.full,
                    |x| h.v[x].parent,
                    |x| h.chains[h.v[x].chain].level_at_or_above_node[h.v[x].level],
                );
                h.vcs[vi].pinned.get_mut(&pid).expect("pin").0.view = view;
            }
        }
        // Pinned cells are bound statically.
        for (vc, _pid, pc, root) in b.pinned {
            let _ = h.allocate_preassigned(pc, vc, false);
            h.bind(pc, root);
        }
        for n in 0..h.nodes.len() {
            h.set_node_bad_id(n);
        }
        Ok(h)
    }

    /// [`Hived::new`], then every node reported healthy in config order.
    pub fn with_all_nodes_healthy(config: &Config) -> Result<Hived, ConfigError> {
        let mut h = Hived::new(config)?;
        for n in 0..h.nodes.len() {
            h.set_node_healthy_id(n);
        }
        Ok(h)
    }

    /// The config this state was built from.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Node names in config order.
    pub fn nodes(&self) -> &[String] {
        &self.nodes
    }

    /// Sets the clock used to stamp lazy preemptions (ms, simulated or wall).
    pub fn set_now(&mut self, now: i64) {
        self.now = now;
    }

    fn node_level_or_above_p(&self, x: usize) -> bool {
        self.chains[self.p[x].chain].level_at_or_above_node[self.p[x].level]
    }

    pub(crate) fn group(&self, g: usize) -> &Group {
        self.groups[g].as_ref().expect("live group")
    }
    pub(crate) fn group_mut(&mut self, g: usize) -> &mut Group {
        self.groups[g].as_mut().expect("live group")
    }

    // ----- health -------------------------------------------------------------------

    /// Marks a node bad (Kubernetes: not ready, unschedulable or deleted).
    pub fn set_node_bad(&mut self, node: &str) -> Result<(), HivedError> {
        let n = self.node_id(node)?;
        self.set_node_bad_id(n);
        Ok(())
    }

    /// Marks a node healthy again.
    pub fn set_node_healthy(&mut self, node: &str) -> Result<(), HivedError> {
        let n = self.node_id(node)?;
        self.set_node_healthy_id(n);
        Ok(())
    }

    fn node_id(&self, node: &str) -> Result<usize, HivedError> {
        self.node_ids
            .get(node)
            .copied()
            .ok_or_else(|| user(format!("node {node} is not in the physical cluster")))
    }

    /// Whether a node is currently bad.
    pub fn node_is_bad(&self, node: &str) -> bool {
        self.node_ids.get(node).is_some_and(|&n| self.bad_nodes[n])
    }

    fn set_node_bad_id(&mut self, n: usize) {
        if self.bad_nodes[n] {
            return;
        }
        self.bad_nodes[n] = true;
        for leaf in self.node_leaves[n].clone() {
            self.set_bad_cell(leaf);
        }
        self.settle_doomed();
    }

    fn set_node_healthy_id(&mut self, n: usize) {
        if !self.bad_nodes[n] {
            return;
        }
        self.bad_nodes[n] = false;
        for leaf in self.node_leaves[n].clone() {
            self.set_healthy_cell(leaf);
        }
        self.settle_doomed();
    }

    /// Re-evaluates the doomed bad cells at every level until none can be bound or
    /// unbound. Upstream re-checks only the levels a change touched; a doomed cell that
    /// turns healthy is released with `doomedBad` set, which skips the levels below it,
    /// so doomed cells below stayed bound although healthy cells had come back: the VC
    /// kept avoiding them, and the doomed set depended on the order nodes reported in.
    /// Binding or unbinding a doomed cell leaves its level's healthy count unchanged and
    /// moves the VC's free count towards it, so this terminates.
    fn settle_doomed(&mut self) {
        for chain in 0..self.chains.len() {
            loop {
                let before = self.all_vc_doomed[chain].clone();
                for l in (1..=self.chains[chain].top).rev() {
                    self.try_unbind_doomed(chain, l);
                    self.try_bind_doomed(chain, l);
                }
                if self.all_vc_doomed[chain] == before {
                    break;
                }
            }
        }
    }

    pub(crate) fn in_free_list(&self, mut c: usize) -> bool {
        loop {
            if self.p[c].virt.is_some() || self.p[c].split {
                return false;
            }
            match self.p[c].parent {
                None => return true,
                Some(p) if self.p[p].split => return true,
                Some(p) => c = p,
            }
        }
    }

    fn unbound_child(&self, virtual_parent: usize) -> Option<usize> {
        self.v[virtual_parent]
            .children
            .iter()
            .copied()
            .find(|&c| self.v[c].phys.is_none())
    }

    fn set_bad_cell(&mut self, c: usize) {
        if !self.p[c].healthy {
            return;
        }
        self.p[c].healthy = false;
        if let Some(parent) = self.p[c].parent {
            self.set_bad_cell(parent);
        }
        if self.in_free_list(c) {
            self.add_bad_free_cell(c);
        } else if self.p[c].virt.is_none() && !self.p[c].split {
            // An ancestor is bound: bind this cell too so the VC sees the failure.
            if let Some(pv) = self.p[c].parent.and_then(|p| self.p[p].virt)
                && let Some(vc) = self.unbound_child(pv)
            {
                self.p[c].virt = Some(vc);
                self.v[vc].phys = Some(c);
            }
        }
    }

    fn set_healthy_cell(&mut self, c: usize) {
        if self.p[c].healthy {
            return;
        }
        self.p[c].healthy = true;
        if self.in_free_list(c) {
            self.remove_bad_free_cell(c);
        } else if let Some(vc) = self.p[c].virt
            && self.p[c].pinned.is_none()
            && self.p[c].priority < 0
        {
            // Bound only because it was bad: unbind now it is healthy.
            if self.v[vc].parent.is_none() {
                self.release_doomed(c, self.v[vc].vc);
            } else {
                self.p[c].virt = None;
                self.v[vc].phys = None;
            }
        }
        let Some(parent) = self.p[c].parent else {
            return;
        };
        if self.p[parent].children.iter().all(|&b| self.p[b].healthy) {
            self.set_healthy_cell(parent);
        }
    }

    fn add_bad_free_cell(&mut self, c: usize) {
        let (chain, level) = (self.p[c].chain, self.p[c].level);
        self.bad_free[chain][level].push(c);
        if self.all_vc_free[chain][level]
            > self.total_left[chain][level] - self.bad_free[chain][level].len() as i64
        {
            self.try_bind_doomed(chain, level);
        }
    }

    fn remove_bad_free_cell(&mut self, c: usize) {
        let (chain, level) = (self.p[c].chain, self.p[c].level);
        swap_remove(&mut self.bad_free[chain][level], c);
        self.try_unbind_doomed(chain, level);
    }

    fn healthy_left(&self, c: usize, l: usize) -> i64 {
        self.total_left[c][l] - self.bad_free[c][l].len() as i64
    }

    fn try_bind_doomed(&mut self, c: usize, l: usize) {
        if self.forecast_paused {
            return;
        }
        for vi in 0..self.vcs.len() {
            while self.vc_free[vi][c][l] > self.healthy_left(c, l) {
                let Some(&pc) = self.bad_free[c][l].first() else {
                    break;
                };
                let candidates: Vec<usize> = self.vcs[vi]
                    .chains
                    .get(&c)
                    .map(|x| x.preassigned[l].clone())
                    .unwrap_or_default();
                let Some(vcell) = candidates.into_iter().find(|&x| self.v[x].phys.is_none()) else {
                    break;
                };
                self.p[pc].virt = Some(vcell);
                self.v[vcell].phys = Some(pc);
                self.vc_doomed[vi][c][l].push(pc);
                self.all_vc_doomed[c][l] += 1;
                let _ = self.allocate_preassigned(pc, vi, true);
            }
        }
    }

    fn try_unbind_doomed(&mut self, c: usize, l: usize) {
        for vi in 0..self.vcs.len() {
            while !self.vc_doomed[vi][c][l].is_empty()
                && self.vc_free[vi][c][l] < self.healthy_left(c, l)
            {
                let pc = self.vc_doomed[vi][c][l][0];
                self.release_doomed(pc, vi);
            }
        }
    }

    /// Unbinds a doomed bad cell of a VC and gives it back to the free lists.
    fn release_doomed(&mut self, pc: usize, owner: usize) {
        if let Some(vcell) = self.p[pc].virt.take() {
            self.v[vcell].phys = None;
        }
        let (chain, level) = (self.p[pc].chain, self.p[pc].level);
        if swap_remove(&mut self.vc_doomed[owner][chain][level], pc) {
            self.all_vc_doomed[chain][level] -= 1;
        }
        self.release_preassigned(pc, owner, true);
    }

    // ----- free lists and preassigned cells -----------------------------------------

    fn remove_from_free_list(&mut self, mut c: usize) -> usize {
        let chain = self.p[c].chain;
        loop {
            let l = self.p[c].level;
            let mut terminate = true;
            if let Some(parent) = self.p[c].parent
                && !self.p[parent].split
            {
                let children = self.p[parent].children.clone();
                self.free[chain][l].extend(children);
                self.p[parent].split = true;
                terminate = false;
            }
            swap_remove(&mut self.free[chain][l], c);
            if terminate {
                return l;
            }
            c = self.p[c].parent.expect("parent");
        }
    }

    fn add_to_free_list(&mut self, mut c: usize) -> usize {
        let chain = self.p[c].chain;
        loop {
            let l = self.p[c].level;
            let mut terminate = true;
            if let Some(parent) = self.p[c].parent {
                let buddies = self.p[parent].children.clone();
                if buddies
                    .iter()
                    .all(|&b| b == c || self.free[chain][l].contains(&b))
                {
                    for b in buddies {
                        if b != c {
                            swap_remove(&mut self.free[chain][l], b);
                        }
                    }
                    self.p[parent].split = false;
                    terminate = false;
                }
            }
            if terminate {
                self.free[chain][l].push(c);
                return l;
            }
            c = self.p[c].parent.expect("parent");
        }
    }

    /// Binds a physical cell to a VC's preassigned cell: takes it off the free list and
    /// keeps the counters; returns false if this breaks the safety inequality.
    fn allocate_preassigned(&mut self, c: usize, vc: usize, doomed_bad: bool) -> bool {
        let mut safety = true;
        let (chain, level) = (self.p[c].chain, self.p[c].level);
        self.vc_free[vc][chain][level] -= 1;
        self.all_vc_free[chain][level] -= 1;
        self.total_left[chain][level] -= 1;
        let up_to = self.remove_from_free_list(c);
        let mut parent = self.p[c].parent;
        for l in level + 1..=up_to {
            self.total_left[chain][l] -= 1;
            if self.total_left[chain][l] < self.all_vc_free[chain][l] {
                safety = false;
            }
            let pp = parent.expect("split ancestor");
            if !self.p[pp].healthy {
                swap_remove(&mut self.bad_free[chain][l], pp);
            } else {
                self.try_bind_doomed(chain, l);
            }
            parent = self.p[pp].parent;
        }
        if !self.p[c].healthy {
            self.allocate_bad_cell(c);
            if !doomed_bad {
                // This VC has one free cell fewer, healthy obtainable cells are unchanged.
                self.try_unbind_doomed(chain, level);
            }
        } else {
            self.try_bind_doomed(chain, level);
        }
        let mut reduce = self.p[c].children.len() as i64;
        for l in (1..level).rev() {
            self.total_left[chain][l] -= reduce;
            if self.total_left[chain][l] < self.all_vc_free[chain][l] {
                safety = false;
            }
            if !doomed_bad {
                self.try_bind_doomed(chain, l);
            }
            reduce *= self.chains[chain].level_fanout[l] as i64;
        }
        safety
    }

    fn allocate_bad_cell(&mut self, c: usize) {
        let (chain, level) = (self.p[c].chain, self.p[c].level);
        swap_remove(&mut self.bad_free[chain][level], c);
        if self.p[c].virt.is_none()
            && let Some(pv) = self.p[c].parent.and_then(|p| self.p[p].virt)
            && let Some(vc) = self.unbound_child(pv)
        {
            self.p[c].virt = Some(vc);
            self.v[vc].phys = Some(c);
        }
        for child in self.p[c].children.clone() {
            if !self.p[child].healthy {
                self.allocate_bad_cell(child);
            }
        }
    }

    fn release_preassigned(&mut self, c: usize, vc: usize, doomed_bad: bool) {
        let (chain, level) = (self.p[c].chain, self.p[c].level);
        self.vc_free[vc][chain][level] += 1;
        self.all_vc_free[chain][level] += 1;
        self.total_left[chain][level] += 1;
        let up_to = self.add_to_free_list(c);
        let mut parent = self.p[c].parent;
        for l in level + 1..=up_to {
            self.total_left[chain][l] += 1;
            let pp = parent.expect("merged ancestor");
            if !self.p[pp].healthy {
                self.bad_free[chain][l].push(pp);
            } else {
                self.try_unbind_doomed(chain, l);
            }
            parent = self.p[pp].parent;
        }
        if !self.p[c].healthy {
            self.release_bad_cell(c);
            if !doomed_bad {
                self.try_bind_doomed(chain, level);
            }
        } else {
            self.try_unbind_doomed(chain, level);
        }
        let mut add = self.p[c].children.len() as i64;
        for l in (1..level).rev() {
            self.total_left[chain][l] += add;
            if !doomed_bad {
                self.try_unbind_doomed(chain, l);
            }
            add *= self.chains[chain].level_fanout[l] as i64;
        }
    }

    /// Puts a released bad cell and its bad descendants back among the bad obtainable
    /// cells of their levels, unbinding them.
    fn release_bad_cell(&mut self, c: usize) {
        let (chain, level) = (self.p[c].chain, self.p[c].level);
        self.bad_free[chain][level].push(c);
        if let Some(vc) = self.p[c].virt.take() {
            self.v[vc].phys = None;
        }
        for child in self.p[c].children.clone() {
            if !self.p[child].healthy {
                self.release_bad_cell(child);
            }
        }
    }

    // ----- binding --------------------------------------------------------------------

    fn bind(&mut self, mut pc: usize, mut vc: usize) {
        while self.v[vc].phys.is_none() {
            self.p[pc].virt = Some(vc);
            self.v[vc].phys = Some(pc);
            match (self.v[vc].parent, self.p[pc].parent) {
                (Some(vp), Some(pp)) => {
                    vc = vp;
                    pc = pp;
                }
                _ => break,
            }
        }
    }

    fn unbind(&mut self, c: usize) {
        let Some(mut bv) = self.p[c].virt else {
            return;
        };
        loop {
            let Some(bp) = self.v[bv].phys else {
                return;
            };
            if self.p[bp].pinned.is_some() {
                return;
            }
            self.v[bv].phys = None;
            self.p[bp].virt = None;
            let Some(parent) = self.v[bv].parent else {
                return;
            };
            if self.v[parent]
                .children
                .iter()
                .any(|&ch| self.v[ch].phys.is_some())
            {
                return;
            }
            bv = parent;
        }
    }

    /// Uses a leaf at a priority, through a virtual leaf (guaranteed) or not
    /// (opportunistic). Returns false if binding a new preassigned cell broke safety.
    pub(crate) fn allocate_leaf(
        &mut self,
        p: usize,
        v: Option<usize>,
        prio: i32,
        vc: usize,
    ) -> bool {
        let mut safety = true;
        if let Some(v) = v {
            set_priority(&mut self.v, v, prio);
            update_used(&mut self.v, v, prio, 1);
            set_priority(&mut self.p, p, prio);
            update_used(&mut self.p, p, prio, 1);
            let pac = self.v[v].preassigned;
            let newly = self.v[pac].phys.is_none();
            if self.p[p].virt.is_none() {
                self.bind(p, v);
            }
            if let Some(pp) = self.v[pac].phys {
                if newly {
                    safety = self.allocate_preassigned(pp, vc, false);
                } else {
                    // A doomed bad cell now in real use is no longer "bound because bad":
                    // it must neither be unbound under the job when healthy cells come
                    // back nor stay doomed after the job leaves (upstream did both, §13
                    // bug 2). Its counters already count it as allocated.
                    let (chain, level, owner) =
                        (self.p[pp].chain, self.p[pp].level, self.v[pac].vc);
                    if swap_remove(&mut self.vc_doomed[owner][chain][level], pp) {
                        self.all_vc_doomed[chain][level] -= 1;
                    }
                }
            }
        } else {
            set_priority(&mut self.p, p, OPPORTUNISTIC);
            update_used(&mut self.p, p, OPPORTUNISTIC, 1);
            self.p[p].opp_vc = Some(vc);
        }
        safety
    }

    /// Stops using a leaf. A leaf in guaranteed use (priority >= 0) is released through
    /// its virtual cell and that cell's own VC; a leaf bound only because it is bad keeps
    /// its binding (upstream released it through the *user's* VC and crashed, §13).
    pub(crate) fn release_leaf(&mut self, p: usize) {
        if self.p[p].priority >= 0
            && let Some(v) = self.p[p].virt
        {
            let vp = self.v[v].priority;
            update_used(&mut self.v, v, vp, -1);
            set_priority(&mut self.v, v, FREE);
            let pac = self.v[v].preassigned;
            let owner = self.v[v].vc;
            let pre_phys = self.v[pac].phys;
            if self.p[p].healthy {
                self.unbind(p);
            }
            if let Some(pp) = pre_phys
                && self.p[pp].pinned.is_none()
                && self.v[pac].priority < 0
                && !self.vc_doomed[owner][self.p[pp].chain][self.p[pp].level].contains(&pp)
            {
                self.release_preassigned(pp, owner, false);
            }
        } else {
            self.p[p].opp_vc = None;
        }
        let pr = self.p[p].priority;
        update_used(&mut self.p, p, pr, -1);
        set_priority(&mut self.p, p, FREE);
    }

    pub(crate) fn set_state(&mut self, mut c: usize, s: CellState) {
        loop {
            self.p[c].state = s;
            let Some(parent) = self.p[c].parent else {
                return;
            };
            if s == CellState::Used
                || self.p[parent]
                    .children
                    .iter()
                    .all(|&ch| self.p[ch].state == s)
            {
                c = parent;
            } else {
                return;
            }
        }
    }

    pub(crate) fn suggested_vec(&self, s: &Suggested) -> Vec<bool> {
        match s {
            Suggested::All => vec![true; self.nodes.len()],
            Suggested::Only(list) => {
                let mut v = vec![false; self.nodes.len()];
                for n in list {
                    if let Some(&i) = self.node_ids.get(n) {
                        v[i] = true;
                    }
                }
                v
            }
            Suggested::AllExcept(list) => {
                let mut v = vec![true; self.nodes.len()];
                for n in list {
                    if let Some(&i) = self.node_ids.get(n) {
                        v[i] = false;
                    }
                }
                v
            }
        }
    }

    // ----- schedule -------------------------------------------------------------------

    /// One scheduling attempt for a pod (HiveD's `Schedule`). A `Bind` changes no state:
    /// the caller commits it with [`Hived::add_allocated_pod`]. In the `Preempting` phase a
    /// `Preempt` reserves the placement (stateful preemption). Errors change nothing.
    pub fn schedule(
        &mut self,
        pod: &str,
        spec: &PodSpec,
        suggested: &Suggested,
        phase: Phase,
    ) -> Result<Decision, HivedError> {
        let d = self.schedule_unsettled(pod, spec, suggested, phase);
        self.settle_doomed();
        d
    }

    fn schedule_unsettled(
        &mut self,
        pod: &str,
        spec: &PodSpec,
        suggested: &Suggested,
        phase: Phase,
    ) -> Result<Decision, HivedError> {
        let req = Request::new(pod, spec)?;
        let sugg = self.suggested_vec(suggested);
        if let Some(&g) = self.group_ids.get(&req.group) {
            let gr = self.group(g);
            let si = gr.size_index(req.size).ok_or_else(|| {
                user(format!(
                    "pod {pod} asks for {} leaf cells, which group {} does not declare",
                    req.size, req.group
                ))
            })?;
            let bad = self.bad_or_unsuggested(g, &sugg);
            if gr.state == GroupState::Allocated {
                let Some(slot) = gr.allocated[si].iter().position(|s| s.is_none()) else {
                    return Err(user(format!(
                        "requesting more pods than the configured number for {} leaf cells ({} pods) in affinity group {}",
                        req.size,
                        gr.allocated[si].len(),
                        req.group
                    )));
                };
                let gr = self.group(g);
                return Ok(Decision::Bind(self.bind_info(
                    &gr.phys,
                    gr.virt.as_ref(),
                    si,
                    slot,
                )));
            }
            if phase == Phase::Preempting && bad {
                self.delete_preempting_group(g);
            } else {
                let victims = self.victims(&self.group(g).phys).0;
                self.group_mut(g).preempting.insert(pod.to_string());
                if victims.is_empty() {
                    let gr = self.group(g);
                    return Ok(Decision::Bind(self.bind_info(
                        &gr.phys,
                        gr.virt.as_ref(),
                        si,
                        0,
                    )));
                }
                return Ok(Decision::Preempt(victims));
            }
        }
        // A new group.
        self.validate_request(&req)?;
        let found = self.schedule_new_group(&req, &sugg)?;
        let (phys, virt) = match found {
            Ok(x) => x,
            Err(reason) => return Ok(Decision::Wait(reason)),
        };
        let (victims, overlapping) = self.victims(&phys);
        if phase == Phase::Preempting {
            for g in overlapping {
                self.delete_preempting_group(g);
            }
            if !victims.is_empty() {
                self.create_preempting_group(&req, pod, phys, virt);
                return Ok(Decision::Preempt(victims));
            }
        }
        if !victims.is_empty() {
            return Ok(Decision::Preempt(victims));
        }
        let si = req
            .sizes
            .iter()
            .position(|&(s, _)| s == req.size)
            .unwrap_or(0);
        Ok(Decision::Bind(self.bind_info(&phys, virt.as_ref(), si, 0)))
    }

    fn bad_or_unsuggested(&self, g: usize, sugg: &[bool]) -> bool {
        let gr = self.group(g);
        gr.leaves().any(|(_, _, _, l)| {
            let n = self.p[l].nodes[0];
            !self.p[l].healthy || (!gr.ignore_suggested && !sugg[n])
        })
    }

    fn validate_request(&self, r: &Request) -> Result<(), HivedError> {
        let Some(vc) = self.vc_index(&r.vc) else {
            return Err(user(format!("VC {} does not exist", r.vc)));
        };
        if !r.pinned.is_empty() {
            if !self.vcs[vc].pinned.contains_key(&r.pinned) {
                return Err(user(format!(
                    "VC {} does not have pinned cell {}",
                    r.vc, r.pinned
                )));
            }
            if r.priority == OPPORTUNISTIC {
                return Err(user(format!(
                    "an opportunistic pod cannot use pinned cell {}",
                    r.pinned
                )));
            }
        }
        Ok(())
    }

    pub(crate) fn vc_index(&self, name: &str) -> Option<usize> {
        self.vcs.iter().position(|v| v.name == name)
    }

    #[allow(clippy::type_complexity)]
    fn schedule_new_group(
        &mut self,
        r: &Request,
        sugg: &[bool],
    ) -> Result<Result<(Placement, Option<Placement>), String>, HivedError> {
        let vc = self.vc_index(&r.vc).expect("validated");
        if !r.pinned.is_empty() {
            return Ok(self.process(r, vc, None, sugg));
        }
        let types: Vec<String> = if r.leaf_type.is_empty() {
            self.leaf_chains.keys().cloned().collect()
        } else {
            if !self.leaf_chains.contains_key(&r.leaf_type) {
                return Err(user(format!(
                    "leaf cell type {} does not exist in the cluster",
                    r.leaf_type
                )));
            }
            vec![r.leaf_type.clone()]
        };
        let mut reason = String::new();
        for t in &types {
            let mut vc_has = false;
            for c in self.leaf_chains[t].clone() {
                if r.priority < 0 || self.vcs[vc].chains.contains_key(&c) {
                    vc_has = true;
                    match self.process(r, vc, Some(c), sugg) {
                        Ok(x) => return Ok(Ok(x)),
                        Err(e) => reason = e,
                    }
                }
            }
            if !r.leaf_type.is_empty() && r.priority >= 0 && !vc_has {
                return Err(user(format!(
                    "leaf cell type {} is not in VC {}",
                    r.leaf_type, r.vc
                )));
            }
        }
        if reason.is_empty() {
            reason = format!("VC {} has no cells for this request", r.vc);
        }
        Ok(Err(reason))
    }

    fn process(
        &mut self,
        r: &Request,
        vc: usize,
        chain: Option<usize>,
        sugg: &[bool],
    ) -> Result<(Placement, Option<Placement>), String> {
        if r.priority >= 0 {
            self.schedule_guaranteed(r, vc, chain, sugg)
        } else {
            let chain = chain.expect("opportunistic requests name a chain");
            let ctx = Ctx {
                suggested: sugg,
                ignore: r.ignore_suggested,
            };
            let placement = self
                .topo_schedule(
                    crate::topo::ViewId::Opportunistic(chain),
                    &r.sizes,
                    OPPORTUNISTIC,
                    &ctx,
                )
                .map_err(|e| format!("{e} when scheduling in the physical cluster"))?;
            Ok((placement, None))
        }
    }

    fn schedule_guaranteed(
        &mut self,
        r: &Request,
        vc: usize,
        chain: Option<usize>,
        sugg: &[bool],
    ) -> Result<(Placement, Option<Placement>), String> {
        let ctx = Ctx {
            suggested: sugg,
            ignore: r.ignore_suggested,
        };
        let view = match chain {
            Some(c) => crate::topo::ViewId::Vc(vc, c),
            None => crate::topo::ViewId::Pinned(vc, r.pinned.clone()),
        };
        let vplace = self
            .topo_schedule(view, &r.sizes, r.priority, &ctx)
            .map_err(|e| format!("{e} when scheduling in VC {}", r.vc))?;
        let chain = self.v[vplace[0][0][0].expect("leaf")].chain;
        // Lazy preemption of groups on the chosen virtual leaves.
        let mut lazied: Vec<(usize, Placement)> = Vec::new();
        for pods in &vplace {
            for leaves in pods {
                for &vl in leaves.iter().flatten() {
                    let Some(pl) = self.v[vl].phys else { continue };
                    if self.p[pl].state != CellState::Used {
                        continue;
                    }
                    let Some(u) = self.p[pl].using else { continue };
                    let ug = self.group(u);
                    if ug.lazy_enable && ug.virt.is_some() {
                        let saved = self.lazy_preempt(u, &r.group);
                        lazied.push((u, saved));
                    }
                }
            }
        }
        let mut bindings: HashMap<usize, usize> = HashMap::new();
        let (pre, non_pre) = self.binding_paths(&vplace, &mut bindings);
        let mut free = self.free[chain].clone();
        let mut free_num = self.all_vc_free[chain].clone();
        if self.map_virtual_to_physical(
            &pre,
            &non_pre,
            &mut free,
            &mut free_num,
            &ctx,
            &mut bindings,
        ) {
            let phys: Placement = vplace
                .iter()
                .map(|pods| {
                    pods.iter()
                        .map(|leaves| {
                            leaves
                                .iter()
                                .map(|l| l.and_then(|l| bindings.get(&l).copied()))
                                .collect()
                        })
                        .collect()
                })
                .collect();
            return Ok((phys, Some(vplace)));
        }
        for (g, saved) in lazied.into_iter().rev() {
            self.revert_lazy_preempt(g, saved);
        }
        Err(
            "mapping the virtual placement would need at least one bad or non-suggested node"
                .into(),
        )
    }

    fn binding_paths(
        &self,
        vplace: &Placement,
        bindings: &mut HashMap<usize, usize>,
    ) -> (Vec<PathVertex>, Vec<Vec<PathVertex>>) {
        // Build the forest of unbound ancestors, then split it into preassigned roots and
        // groups of roots under a bound parent (in first-seen order).
        let mut in_forest: BTreeSet<usize> = BTreeSet::new();
        let mut children_of: HashMap<usize, Vec<usize>> = HashMap::new();
        let mut roots: Vec<usize> = Vec::new();
        for pods in vplace {
            for leaves in pods {
                for &leaf in leaves.iter().flatten() {
                    if let Some(p) = self.v[leaf].phys {
                        bindings.insert(leaf, p);
                        continue;
                    }
                    let mut path = Vec::new();
                    let mut c = Some(leaf);
                    while let Some(x) = c {
                        if self.v[x].phys.is_some() || in_forest.contains(&x) {
                            break;
                        }
                        path.push(x);
                        c = self.v[x].parent;
                    }
                    let root = *path.last().expect("unbound leaf");
                    in_forest.insert(root);
                    match self.v[root].parent {
                        Some(parent) if !in_forest.contains(&parent) => roots.push(root),
                        Some(parent) => children_of.entry(parent).or_default().push(root),
                        None => roots.push(root),
                    }
                    for i in (0..path.len().saturating_sub(1)).rev() {
                        let x = path[i];
                        children_of
                            .entry(self.v[x].parent.expect("parent"))
                            .or_default()
                            .push(x);
                        in_forest.insert(x);
                    }
                }
            }
        }
        fn build(c: usize, ch: &HashMap<usize, Vec<usize>>) -> PathVertex {
            PathVertex {
                cell: c,
                children: ch
                    .get(&c)
                    .map(|v| v.iter().map(|&x| build(x, ch)).collect())
                    .unwrap_or_default(),
            }
        }
        let mut pre = Vec::new();
        let mut non_pre: Vec<Vec<PathVertex>> = Vec::new();
        for r in roots {
            let vx = build(r, &children_of);
            match self.v[r].parent {
                None => pre.push(vx),
                Some(parent) => {
                    if let Some(gr) = non_pre
                        .iter_mut()
                        .find(|g| self.v[g[0].cell].parent == Some(parent))
                    {
                        gr.push(vx);
                    } else {
                        non_pre.push(vec![vx]);
                    }
                }
            }
        }
        (pre, non_pre)
    }

    fn map_virtual_to_physical(
        &mut self,
        pre: &[PathVertex],
        non_pre: &[Vec<PathVertex>],
        free: &mut [Vec<usize>],
        free_num: &mut [i64],
        ctx: &Ctx<'_>,
        bindings: &mut HashMap<usize, usize>,
    ) -> bool {
        for vx in pre {
            let level = self.v[vx.cell].level;
            let Some(lowest) = (level..free.len()).find(|&l| !free[l].is_empty()) else {
                return false;
            };
            if self.buddy_alloc(vx, free, lowest, ctx, bindings) {
                free_num[level] -= 1;
            } else if !self.safe_relaxed_buddy_alloc(vx, free, free_num, level, ctx, bindings) {
                return false;
            }
        }
        for group in non_pre {
            let parent = self.v[group[0].cell].parent.expect("parent");
            let Some(pp) = self.v[parent].phys else {
                return false;
            };
            if self
                .map_cells(group, ListRef::Children(pp), free, ctx, bindings)
                .is_none()
            {
                return false;
            }
        }
        true
    }

    fn buddy_alloc(
        &mut self,
        vx: &PathVertex,
        free: &mut [Vec<usize>],
        level: usize,
        ctx: &Ctx<'_>,
        bindings: &mut HashMap<usize, usize>,
    ) -> bool {
        if level == self.v[vx.cell].level {
            if let Some(picked) = self.map_cells(
                std::slice::from_ref(vx),
                ListRef::Free(level),
                free,
                ctx,
                bindings,
            ) {
                for c in picked {
                    swap_remove(&mut free[level], c);
                }
                return true;
            }
            return false;
        }
        let Some(cands) = self.usable(ListRef::Free(level), free, 1, ctx) else {
            return false;
        };
        for c in cands {
            let children = self.p[c].children.clone();
            free[level - 1].extend(children);
            if self.buddy_alloc(vx, free, level - 1, ctx, bindings) {
                swap_remove(&mut free[level], c);
                return true;
            }
            free[level - 1].clear();
        }
        false
    }

    fn safe_relaxed_buddy_alloc(
        &mut self,
        vx: &PathVertex,
        free: &mut [Vec<usize>],
        free_num: &[i64],
        level: usize,
        ctx: &Ctx<'_>,
        bindings: &mut HashMap<usize, usize>,
    ) -> bool {
        let top = free.len() - 1;
        let mut splittable = vec![0i64; top + 2];
        let mut cell: Option<usize> = None;
        for i in (1..=top).rev() {
            splittable[i] = free[i].len() as i64 - free_num[i];
            if i < top
                && let Some(c) = cell
            {
                splittable[i] += splittable[i + 1] * self.p[c].children.len() as i64;
            }
            if cell.is_none() && !free[i].is_empty() {
                cell = Some(free[i][0]);
            } else if let Some(c) = cell {
                cell = self.p[c].children.first().copied();
            }
            if splittable[i] < 0 {
                // Safety is already broken (upstream panics here).
                return false;
            }
        }
        for l in level + 1..=top {
            let n = (free[l].len() as i64).min(splittable[l]);
            if n <= 0 {
                continue;
            }
            let mut split: Vec<usize> = Vec::new();
            for _ in 0..n {
                let c = free[l][0];
                split.push(c);
                swap_remove(&mut free[l], c);
            }
            splittable[l] -= n;
            for _ in (level + 1..=l).rev() {
                split = split
                    .iter()
                    .flat_map(|&c| self.p[c].children.clone())
                    .collect();
            }
            split.extend(free[level].iter().copied());
            free[level] = split;
            if let Some(picked) = self.map_cells(
                std::slice::from_ref(vx),
                ListRef::Free(level),
                free,
                ctx,
                bindings,
            ) {
                for c in picked {
                    swap_remove(&mut free[level], c);
                }
                return true;
            }
        }
        false
    }

    /// HiveD's `getUsablePhysicalCells`: the usable candidates in list order, and — as
    /// upstream does — the underlying list re-sorted stably, in place, by opportunistic
    /// use (the usable list itself is *not* sorted; see docs/policies/hived.md).
    fn usable(
        &mut self,
        list: ListRef,
        free: &mut [Vec<usize>],
        needed: usize,
        ctx: &Ctx<'_>,
    ) -> Option<Vec<usize>> {
        let cands: &[usize] = match list {
            ListRef::Free(l) => &free[l],
            ListRef::Children(c) => &self.p[c].children,
        };
        let mut out = Vec::with_capacity(cands.len());
        for &c in cands {
            let pc = &self.p[c];
            if pc.virt.is_some() {
                continue;
            }
            if pc.nodes.len() == 1 && !pc.healthy {
                continue;
            }
            if !ctx.ignore && !pc.nodes.iter().any(|&n| ctx.node_ok(n)) {
                continue;
            }
            out.push(c);
        }
        if out.len() < needed {
            return None;
        }
        let key = |p: &Vec<PCell>, c: usize| p[c].used.get(OPPORTUNISTIC);
        match list {
            ListRef::Free(l) => {
                let p = &self.p;
                free[l].sort_by_key(|&c| key(p, c));
            }
            ListRef::Children(c) => {
                let mut ch = std::mem::take(&mut self.p[c].children);
                ch.sort_by_key(|&x| key(&self.p, x));
                self.p[c].children = ch;
            }
        }
        Some(out)
    }

    /// Backtracking assignment of virtual cells to distinct candidates, recursing into
    /// children; returns the picked cells.
    fn map_cells(
        &mut self,
        cells: &[PathVertex],
        list: ListRef,
        free: &mut [Vec<usize>],
        ctx: &Ctx<'_>,
        bindings: &mut HashMap<usize, usize>,
    ) -> Option<Vec<usize>> {
        let cands = self.usable(list, free, cells.len(), ctx)?;
        let mut picked_idx = vec![0usize; cells.len()];
        let mut used = vec![false; cands.len()];
        let mut ci: isize = 0;
        while ci >= 0 {
            let i = ci as usize;
            let mut k = picked_idx[i];
            let mut found = false;
            while k < cands.len() {
                if used[k] {
                    k += 1;
                    continue;
                }
                let cand = cands[k];
                let ok = if self.p[cand].level == 1 {
                    bindings.insert(cells[i].cell, cand);
                    true
                } else {
                    self.map_cells(
                        &cells[i].children,
                        ListRef::Children(cand),
                        free,
                        ctx,
                        bindings,
                    )
                    .is_some()
                };
                if ok {
                    picked_idx[i] = k;
                    used[k] = true;
                    found = true;
                    break;
                }
                k += 1;
            }
            if found {
                if i == cells.len() - 1 {
                    return Some(picked_idx.iter().map(|&k| cands[k]).collect());
                }
                ci += 1;
                // The next cell starts from its stored index (0 on first visit).
            } else {
                // Upstream leaves this cell's start index where it was, so a later pass
                // resumes from it rather than from 0; kept for parity.
                ci -= 1;
                if ci >= 0 {
                    let j = ci as usize;
                    used[picked_idx[j]] = false;
                    picked_idx[j] += 1;
                }
            }
        }
        None
    }

    /// Victim pods (whole groups) on a placement, and preemptors holding reservations
    /// there.
    pub(crate) fn victims(&self, phys: &Placement) -> (Vec<Victim>, Vec<usize>) {
        let mut groups: BTreeSet<usize> = BTreeSet::new();
        let mut preemptors: Vec<usize> = Vec::new();
        for pods in phys {
            for leaves in pods {
                for &l in leaves.iter().flatten() {
                    let st = self.p[l].state;
                    if matches!(st, CellState::Used | CellState::Reserving)
                        && let Some(u) = self.p[l].using
                    {
                        groups.insert(u);
                    }
                    if matches!(st, CellState::Reserving | CellState::Reserved)
                        && let Some(r) = self.p[l].reserving
                        && !preemptors.contains(&r)
                    {
                        preemptors.push(r);
                    }
                }
            }
        }
        let mut out = Vec::new();
        for g in groups {
            for slots in &self.group(g).allocated {
                for (pod, node) in slots.iter().flatten() {
                    out.push(Victim {
                        node: node.clone(),
                        pod: pod.clone(),
                    });
                }
            }
        }
        out.sort();
        (out, preemptors)
    }

    /// The bind record for pod `slot` of size class `si` of a placement.
    fn bind_info(
        &self,
        phys: &Placement,
        virt: Option<&Placement>,
        si: usize,
        slot: usize,
    ) -> BindInfo {
        let mut members = Vec::new();
        let mut chain = String::new();
        for (s, pods) in phys.iter().enumerate() {
            let mut placements = Vec::new();
            for (pi, leaves) in pods.iter().enumerate() {
                let mut node = String::new();
                let mut idx = Vec::new();
                let mut types = Vec::new();
                for (li, l) in leaves.iter().enumerate() {
                    let Some(l) = *l else { continue };
                    let pc = &self.p[l];
                    if node.is_empty() {
                        node = self.nodes[pc.nodes[0]].clone();
                    }
                    idx.push(pc.leaf_indices[0]);
                    let t = virt
                        .and_then(|v| v[s][pi][li])
                        .map(|vl| {
                            let pre = self.v[vl].preassigned;
                            self.chains[self.v[pre].chain].level_type[self.v[pre].level].clone()
                        })
                        .unwrap_or_default();
                    types.push(t);
                    if s == si && pi == slot && chain.is_empty() {
                        chain = self.chains[pc.chain].name.clone();
                    }
                }
                placements.push(PodPlacement {
                    physical_node: node,
                    physical_leaf_cell_indices: idx,
                    preassigned_cell_types: Some(types),
                });
            }
            members.push(MemberBindInfo {
                pod_placements: placements,
            });
        }
        let me = &members[si].pod_placements[slot];
        BindInfo {
            node: me.physical_node.clone(),
            leaf_cell_isolation: me.physical_leaf_cell_indices.clone(),
            cell_chain: chain,
            affinity_group_bind_info: members,
        }
    }

    // ----- groups -----------------------------------------------------------------------

    fn new_group(&self, r: &Request, vc: usize, state: GroupState) -> Group {
        Group {
            name: r.group.clone(),
            vc,
            priority: r.priority,
            lazy_enable: r.lazy,
            ignore_suggested: r.ignore_suggested,
            sizes: r.sizes.iter().map(|s| s.0).collect(),
            phys: r
                .sizes
                .iter()
                .map(|&(s, n)| vec![vec![None; s]; n])
                .collect(),
            virt: Some(
                r.sizes
                    .iter()
                    .map(|&(s, n)| vec![vec![None; s]; n])
                    .collect(),
            ),
            allocated: r.sizes.iter().map(|&(_, n)| vec![None; n]).collect(),
            preempting: BTreeSet::new(),
            state,
            lazy: None,
        }
    }

    fn insert_group(&mut self, g: Group) -> usize {
        let name = g.name.clone();
        let id = if let Some(i) = self.groups.iter().position(|x| x.is_none()) {
            self.groups[i] = Some(g);
            i
        } else {
            self.groups.push(Some(g));
            self.groups.len() - 1
        };
        self.group_ids.insert(name, id);
        id
    }

    fn remove_group(&mut self, g: usize) {
        if let Some(gr) = self.groups[g].take() {
            self.group_ids.remove(&gr.name);
        }
    }

    fn create_preempting_group(
        &mut self,
        r: &Request,
        pod: &str,
        phys: Placement,
        virt: Option<Placement>,
    ) {
        let vc = self.vc_index(&r.vc).expect("validated");
        let mut g = self.new_group(r, vc, GroupState::Preempting);
        g.phys = phys.clone();
        g.virt = virt.clone();
        g.preempting.insert(pod.to_string());
        let id = self.insert_group(g);
        for (si, pods) in phys.iter().enumerate() {
            for (pi, leaves) in pods.iter().enumerate() {
                for (li, l) in leaves.iter().enumerate() {
                    let Some(p) = *l else { continue };
                    let v = virt.as_ref().and_then(|v| v[si][pi][li]);
                    let was_used = self.p[p].state == CellState::Used;
                    if was_used {
                        self.release_leaf(p);
                        if let Some(u) = self.p[p].using {
                            self.group_mut(u).state = GroupState::BeingPreempted;
                        }
                    }
                    self.allocate_leaf(p, v, r.priority, vc);
                    self.p[p].reserving = Some(id);
                    self.set_state(
                        p,
                        if was_used {
                            CellState::Reserving
                        } else {
                            CellState::Reserved
                        },
                    );
                }
            }
        }
    }

    fn delete_preempting_group(&mut self, g: usize) {
        let leaves: Vec<usize> = self.group(g).leaves().map(|x| x.3).collect();
        for p in leaves {
            self.release_leaf(p);
            self.p[p].reserving = None;
            if self.p[p].state == CellState::Reserving {
                self.set_state(p, CellState::Used);
                let Some(u) = self.p[p].using else { continue };
                let ug = self.group(u);
                let v = ug.virt.as_ref().and_then(|virt| {
                    ug.leaves()
                        .find(|x| x.3 == p)
                        .and_then(|(si, pi, li, _)| virt[si][pi][li])
                });
                let (prio, vc) = (ug.priority, ug.vc);
                let prio = if v.is_some() { prio } else { OPPORTUNISTIC };
                self.allocate_leaf(p, v, prio, vc);
                // The victim keeps no reservation against it any more.
                let still = self.group(u).leaves().any(|x| {
                    self.p[x.3].state == CellState::Reserving && self.p[x.3].using == Some(u)
                });
                if !still {
                    self.group_mut(u).state = GroupState::Allocated;
                }
            } else {
                self.set_state(p, CellState::Free);
            }
        }
        self.remove_group(g);
        self.settle_doomed();
    }

    fn allocate_preempting_group(&mut self, g: usize) {
        let leaves: Vec<usize> = self.group(g).leaves().map(|x| x.3).collect();
        for p in leaves {
            self.p[p].reserving = None;
            self.p[p].using = Some(g);
            self.set_state(p, CellState::Used);
        }
        let gr = self.group_mut(g);
        gr.state = GroupState::Allocated;
        gr.preempting.clear();
    }

    pub(crate) fn lazy_preempt(&mut self, victim: usize, preemptor: &str) -> Placement {
        let now = self.now;
        let leaves: Vec<usize> = self
            .group(victim)
            .leaves()
            .map(|x| x.3)
            .filter(|&p| self.p[p].using == Some(victim) && self.p[p].state == CellState::Used)
            .collect();
        let vc = self.group(victim).vc;
        let saved = self.group(victim).virt.clone();
        if saved.is_some() {
            for p in leaves {
                self.release_leaf(p);
                self.allocate_leaf(p, None, OPPORTUNISTIC, vc);
            }
        }
        let gr = self.group_mut(victim);
        gr.virt = None;
        gr.lazy = Some((preemptor.to_string(), now));
        saved.unwrap_or_default()
    }

    fn revert_lazy_preempt(&mut self, g: usize, saved: Placement) {
        let gr = self.group(g);
        let (prio, vc) = (gr.priority, gr.vc);
        let items: Vec<(usize, Option<usize>)> = gr
            .leaves()
            .filter(|x| self.p[x.3].using == Some(g) && self.p[x.3].state == CellState::Used)
            .map(|(si, pi, li, p)| (p, saved.get(si).and_then(|s| s[pi][li])))
            .collect();
        for (p, v) in items {
            self.release_leaf(p);
            match v {
                Some(v) => self.allocate_leaf(p, Some(v), prio, vc),
                None => self.allocate_leaf(p, None, OPPORTUNISTIC, vc),
            };
        }
        let gr = self.group_mut(g);
        gr.virt = Some(saved);
        gr.lazy = None;
    }

    // ----- commit, delete, recovery -------------------------------------------------------

    /// Records a bound pod (HiveD's `AddAllocatedPod`): the commit after a `Bind`, and the
    /// recovery path after a restart (the virtual cells are re-derived from the record).
    pub fn add_allocated_pod(
        &mut self,
        pod: &str,
        spec: &PodSpec,
        info: &BindInfo,
    ) -> Result<(), HivedError> {
        let r = Request::new(pod, spec)?;
        if let Some(&g) = self.group_ids.get(&r.group) {
            let si = self.group(g).size_index(r.size).ok_or_else(|| {
                user(format!(
                    "group {} has no pods of {} leaf cells",
                    r.group, r.size
                ))
            })?;
            let slot = slot_in(info, r.size).ok_or_else(|| {
                user(format!(
                    "pod {pod}'s placement (node {}, leaves {:?}) is not in group {}",
                    info.node, info.leaf_cell_isolation, r.group
                ))
            })?;
            if slot >= self.group(g).allocated[si].len() {
                return Err(user(format!("pod {pod}: slot {slot} out of range")));
            }
            if self.group(g).state == GroupState::Preempting {
                self.allocate_preempting_group(g);
            }
            self.group_mut(g).allocated[si][slot] = Some((pod.to_string(), info.node.clone()));
            return Ok(());
        }
        self.check_bind_info(&r, info)?;
        let vc = self
            .vc_index(&r.vc)
            .ok_or_else(|| user(format!("VC {} does not exist", r.vc)))?;
        let g = self.create_allocated_group(&r, vc, info);
        self.settle_doomed();
        let si = self.group(g).size_index(r.size).unwrap_or(0);
        let slot = slot_in(info, r.size).unwrap_or(0);
        if slot < self.group(g).allocated[si].len() {
            self.group_mut(g).allocated[si][slot] = Some((pod.to_string(), info.node.clone()));
        }
        Ok(())
    }

    fn check_bind_info(&self, r: &Request, info: &BindInfo) -> Result<(), HivedError> {
        for m in &info.affinity_group_bind_info {
            let Some(first) = m.pod_placements.first() else {
                return Err(user("bind info has a member with no pod placements"));
            };
            let size = first.physical_leaf_cell_indices.len();
            let Some(&(_, n)) = r.sizes.iter().find(|s| s.0 == size) else {
                return Err(user(format!(
                    "bind info places pods of {size} leaf cells, which group {} does not declare",
                    r.group
                )));
            };
            if m.pod_placements.len() != n
                || m.pod_placements.iter().any(|p| {
                    p.physical_leaf_cell_indices.len() != size
                        || p.preassigned_cell_types
                            .as_ref()
                            .is_some_and(|t| t.len() != size)
                })
            {
                return Err(user(format!(
                    "bind info for group {} does not match its member spec",
                    r.group
                )));
            }
        }
        Ok(())
    }

    fn create_allocated_group(&mut self, r: &Request, vc: usize, info: &BindInfo) -> usize {
        let g0 = self.new_group(r, vc, GroupState::Allocated);
        let g = self.insert_group(g0);
        let mut should_lazy = false;
        // Forecasting doomed cells between two leaves of one group could doom the very
        // cells the next leaf runs in, or fragment the chain so that the safety check
        // fails for a placement that is in fact safe.
        self.forecast_paused = true;
        let chain = self.chain_ids.get(&info.cell_chain).copied();
        for m in &info.affinity_group_bind_info {
            let size = m.pod_placements[0].physical_leaf_cell_indices.len();
            let si = self.group(g).size_index(size).expect("checked");
            for (pi, pp) in m.pod_placements.iter().enumerate() {
                for (li, &idx) in pp.physical_leaf_cell_indices.iter().enumerate() {
                    let Some(p) = self.find_leaf(chain, &pp.physical_node, idx) else {
                        continue;
                    };
                    if self.p[p].using.is_some() && self.p[p].using != Some(g) {
                        // Two records claim one device: keep the first, ignore this leaf.
                        continue;
                    }
                    self.group_mut(g).phys[si][pi][li] = Some(p);
                    let mut v = None;
                    let has_virt = self.group(g).virt.is_some();
                    if has_virt
                        && !should_lazy
                        && pp
                            .preassigned_cell_types
                            .as_ref()
                            .is_some_and(|t| !t[li].is_empty())
                    {
                        self.release_all_doomed(self.p[p].chain);
                    }
                    match &pp.preassigned_cell_types {
                        None => should_lazy = true,
                        Some(_) if !has_virt || should_lazy => {}
                        Some(types) if types[li].is_empty() => {
                            self.group_mut(g).virt = None;
                        }
                        Some(types) => match self.map_physical_to_virtual(p, &types[li], r, vc) {
                            None => should_lazy = true,
                            Some(vl) => {
                                if let Some(other) = self.v[vl].phys.and_then(|x| self.p[x].using)
                                    && other != g
                                {
                                    let name = self.group(g).name.clone();
                                    self.lazy_preempt(other, &name);
                                }
                                if let Some(virt) = self.group_mut(g).virt.as_mut() {
                                    virt[si][pi][li] = Some(vl);
                                }
                                v = Some(vl);
                            }
                        },
                    }
                    // A virtual cell still bound elsewhere, or a physical cell whose
                    // preassigned-level ancestor is neither free nor bound to this VC cell
                    // (records that predate a lazy preemption or a reconfiguration), cannot
                    // be used: the group runs lazily preempted instead of corrupting the
                    // free lists.
                    if let Some(vl) = v
                        && !self.can_bind(p, vl)
                    {
                        v = None;
                        should_lazy = true;
                    }
                    let prio = if v.is_some() {
                        r.priority
                    } else {
                        OPPORTUNISTIC
                    };
                    let safe = self.allocate_leaf(p, v, prio, vc);
                    self.p[p].using = Some(g);
                    self.set_state(p, CellState::Used);
                    if !safe {
                        should_lazy = true;
                    }
                }
            }
        }
        self.forecast_paused = false;
        if should_lazy {
            let name = self.group(g).name.clone();
            self.lazy_preempt(g, &name);
        }
        g
    }

    /// Doomed bindings are a forecast, not a use, so before a recovered leaf is mapped
    /// every doomed binding of its chain is released; the settle after the pod is added
    /// forecasts again around what really runs. Upstream mapped recovered pods around the
    /// forecast made while nodes were still reporting in: a pod in a cell doomed to
    /// another VC, or whose VC's preassigned cell was doomed elsewhere, was lazily
    /// preempted, and the outcome of a restart depended on the order nodes reported in.
    fn release_all_doomed(&mut self, chain: usize) {
        if self.all_vc_doomed[chain].iter().all(|&n| n == 0) {
            return;
        }
        for vi in 0..self.vcs.len() {
            for l in (1..=self.chains[chain].top).rev() {
                while let Some(&pc) = self.vc_doomed[vi][chain][l].first() {
                    self.release_doomed(pc, vi);
                }
            }
        }
    }

    fn can_bind(&self, p: usize, vl: usize) -> bool {
        if self.v[vl].phys.is_some_and(|x| x != p) {
            return false;
        }
        let pre = self.v[vl].preassigned;
        let mut anc = p;
        while self.p[anc].level < self.v[pre].level {
            match self.p[anc].parent {
                Some(x) => anc = x,
                None => return false,
            }
        }
        match (self.p[anc].virt, self.v[pre].phys) {
            (Some(bound), Some(pp)) => bound == pre && pp == anc,
            (None, None) => self.in_free_list(anc),
            _ => false,
        }
    }

    fn find_leaf(&self, chain: Option<usize>, node: &str, idx: i32) -> Option<usize> {
        let n = *self.node_ids.get(node)?;
        let hit = |c: usize| {
            self.node_leaves[n]
                .iter()
                .copied()
                .find(|&l| self.p[l].chain == c && self.p[l].leaf_indices[0] == idx)
        };
        if let Some(c) = chain
            && let Some(l) = hit(c)
        {
            return Some(l);
        }
        (0..self.chains.len())
            .filter(|&c| Some(c) != chain)
            .find_map(hit)
    }

    fn map_physical_to_virtual(
        &self,
        p: usize,
        pre_type: &str,
        r: &Request,
        vc: usize,
    ) -> Option<usize> {
        let chain = self.p[p].chain;
        let level =
            (1..=self.chains[chain].top).find(|&l| self.chains[chain].level_type[l] == pre_type)?;
        let cells = if r.pinned.is_empty() {
            self.vcs[vc].chains.get(&chain)?
        } else {
            &self.vcs[vc].pinned.get(&r.pinned)?.0
        };
        self.phys_to_virt(p, &cells.preassigned, level, r.priority, vc)
    }

    fn phys_to_virt(
        &self,
        c: usize,
        pre: &[Vec<usize>],
        level: usize,
        prio: i32,
        vc: usize,
    ) -> Option<usize> {
        if let Some(v) = self.p[c].virt {
            // Bound to another VC (a record from before a lazy preemption, or a
            // reconfiguration): the pod cannot be guaranteed here; upstream returned the
            // foreign cell and mixed two VCs' bindings.
            return (self.v[v].vc == vc).then_some(v);
        }
        if self.p[c].level == level {
            return self.lowest_priority_virtual(pre.get(level)?, prio);
        }
        let parent = self.p[c].parent?;
        let pv = self.phys_to_virt(parent, pre, level, prio, vc)?;
        self.lowest_priority_virtual(&self.v[pv].children.clone(), prio)
    }

    fn lowest_priority_virtual(&self, list: &[usize], prio: i32) -> Option<usize> {
        let mut lowest = MAX_PRIORITY;
        let mut best = None;
        for &c in list {
            let pr = self.v[c].priority;
            if pr == FREE {
                if self.v[c].phys.is_none() {
                    return Some(c);
                }
            } else if pr < prio && pr < lowest {
                lowest = pr;
                best = Some(c);
            }
        }
        best
    }

    /// A bound pod ended (HiveD's `DeleteAllocatedPod`); the group's cells are released
    /// when its last pod goes.
    pub fn delete_allocated_pod(
        &mut self,
        pod: &str,
        spec: &PodSpec,
        info: &BindInfo,
    ) -> Result<(), HivedError> {
        let r = Request::new(pod, spec)?;
        let Some(&g) = self.group_ids.get(&r.group) else {
            return Err(user(format!(
                "group {} not found when deleting pod {pod}",
                r.group
            )));
        };
        let si = self.group(g).size_index(r.size).ok_or_else(|| {
            user(format!(
                "group {} has no pods of {} leaf cells",
                r.group, r.size
            ))
        })?;
        let slot = slot_in(info, r.size)
            .filter(|&s| s < self.group(g).allocated[si].len())
            .ok_or_else(|| {
                user(format!(
                    "pod {pod}'s placement not found in group {}",
                    r.group
                ))
            })?;
        self.group_mut(g).allocated[si][slot] = None;
        if self
            .group(g)
            .allocated
            .iter()
            .flatten()
            .all(|s| s.is_none())
            && self.group(g).state != GroupState::Preempting
        {
            self.delete_allocated_group(g);
        }
        Ok(())
    }

    fn delete_allocated_group(&mut self, g: usize) {
        let leaves: Vec<usize> = self.group(g).leaves().map(|x| x.3).collect();
        for p in leaves {
            if self.p[p].using != Some(g) {
                continue;
            }
            self.p[p].using = None;
            if self.p[p].state == CellState::Used {
                self.release_leaf(p);
                self.set_state(p, CellState::Free);
            } else {
                self.set_state(p, CellState::Reserved);
            }
        }
        self.remove_group(g);
        self.settle_doomed();
    }

    /// A pod that was never bound went away (HiveD's `DeleteUnallocatedPod`): a preempting
    /// group whose waiting pods are all gone cancels its preemption.
    pub fn delete_unallocated_pod(&mut self, pod: &str, spec: &PodSpec) -> Result<(), HivedError> {
        let r = Request::new(pod, spec)?;
        if let Some(&g) = self.group_ids.get(&r.group)
            && self.group(g).state == GroupState::Preempting
        {
            self.group_mut(g).preempting.remove(pod);
            if self.group(g).preempting.is_empty() {
                self.delete_preempting_group(g);
            }
        }
        Ok(())
    }

    /// Names of groups (allocated or preempting), sorted.
    pub fn group_names(&self) -> Vec<String> {
        self.group_ids.keys().cloned().collect()
    }

    /// A group's state, if it exists.
    pub fn group_state(&self, name: &str) -> Option<GroupState> {
        self.group_ids.get(name).map(|&g| self.group(g).state)
    }

    /// Whether a group currently has no virtual placement (opportunistic or lazily
    /// preempted).
    pub fn group_is_lazy_or_opportunistic(&self, name: &str) -> Option<bool> {
        self.group_ids
            .get(name)
            .map(|&g| self.group(g).virt.is_none())
    }
}

fn slot_in(info: &BindInfo, size: usize) -> Option<usize> {
    let first = *info.leaf_cell_isolation.first()?;
    for m in &info.affinity_group_bind_info {
        if m.pod_placements.first()?.physical_leaf_cell_indices.len() == size {
            return m.pod_placements.iter().position(|p| {
                p.physical_node == info.node && p.physical_leaf_cell_indices.contains(&first)
            });
        }
    }
    None
}

/// A validated pod request.
#[derive(Debug, Clone)]
pub(crate) struct Request {
    pub vc: String,
    pub priority: i32,
    pub pinned: String,
    pub leaf_type: String,
    pub size: usize,
    pub group: String,
    /// (size, pod count), ascending by size.
    pub sizes: Vec<(usize, usize)>,
    pub lazy: bool,
    pub ignore_suggested: bool,
}

impl Request {
    pub fn new(pod: &str, s: &PodSpec) -> Result<Request, HivedError> {
        if s.virtual_cluster.is_empty() {
            return Err(user(format!("pod {pod}: virtualCluster is empty")));
        }
        if !(-1..=1000).contains(&s.priority) {
            return Err(user(format!(
                "pod {pod}: priority {} is not in [-1, 1000]",
                s.priority
            )));
        }
        if s.leaf_cell_number <= 0 || s.leaf_cell_number > 1 << 20 {
            return Err(user(format!(
                "pod {pod}: leafCellNumber {} must be positive",
                s.leaf_cell_number
            )));
        }
        let size = s.leaf_cell_number as usize;
        let (group, members) = match &s.affinity_group {
            None => (pod.to_string(), vec![(size, 1usize)]),
            Some(g) => {
                if g.name.is_empty() {
                    return Err(user(format!("pod {pod}: affinityGroup.name is empty")));
                }
                let mut m = Vec::new();
                for (i, x) in g.members.iter().enumerate() {
                    if x.pod_number <= 0 || x.pod_number > 1 << 16 {
                        return Err(user(format!(
                            "pod {pod}: affinityGroup.members[{i}].podNumber {} must be positive",
                            x.pod_number
                        )));
                    }
                    if x.leaf_cell_number <= 0 || x.leaf_cell_number > 1 << 20 {
                        return Err(user(format!(
                            "pod {pod}: affinityGroup.members[{i}].leafCellNumber {} must be positive",
                            x.leaf_cell_number
                        )));
                    }
                    m.push((x.leaf_cell_number as usize, x.pod_number as usize));
                }
                (g.name.clone(), m)
            }
        };
        let mut sizes: BTreeMap<usize, usize> = BTreeMap::new();
        for (s, n) in members {
            *sizes.entry(s).or_default() += n;
        }
        if !sizes.contains_key(&size) {
            return Err(user(format!(
                "pod {pod}: leafCellNumber {size} matches no member of affinity group {group}"
            )));
        }
        Ok(Request {
            vc: s.virtual_cluster.clone(),
            priority: s.priority as i32,
            pinned: s.pinned_cell_id.clone(),
            leaf_type: s.leaf_cell_type.clone(),
            size,
            group,
            sizes: sizes.into_iter().collect(),
            lazy: s.lazy_preemption_enable,
            ignore_suggested: s.ignore_k8s_suggested_nodes,
        })
    }
}

/// A node view over per-level cell lists: the node-level cells, then top-level cells
/// below node level (each treated as a node), in list order.
fn new_view(
    full: &[Vec<usize>],
    parent: impl Fn(usize) -> Option<usize>,
    at_or_above: impl Fn(usize) -> bool,
) -> Vec<usize> {
    let top = full.len() - 1;
    let mut l = 1;
    while l <= top {
        if let Some(&c) = full[l].first()
            && at_or_above(c)
        {
            break;
        }
        l += 1;
    }
    let mut view: Vec<usize> = Vec::new();
    let mut seen: BTreeSet<usize> = BTreeSet::new();
    let ancestor = |mut c: usize| loop {
        if at_or_above(c) {
            return c;
        }
        match parent(c) {
            None => return c,
            Some(p) => c = p,
        }
    };
    let mut lv = l.min(top);
    loop {
        if lv <= top {
            for &c in &full[lv] {
                if !seen.contains(&ancestor(c)) {
                    seen.insert(c);
                    view.push(c);
                }
            }
        }
        if lv == 1 {
            break;
        }
        lv -= 1;
    }
    view
}
