//! Committing a decision, deleting pods, and rebuilding state from bind info after a
//! restart.

use super::{GroupState, Hived, Request};
use crate::cells::{CellState, Chain, FREE, MAX_PRIORITY, OPPORTUNISTIC, Vc};
use crate::types::{BindInfo, HivedError, PodSpec, user};
use std::collections::BTreeMap;

impl Hived {
    /// Records a bound pod (HiveD's `AddAllocatedPod`): the commit after a `Bind`, and the
    /// recovery path after a restart (the virtual cells are re-derived from the record).
    pub fn add_allocated_pod(
        &mut self,
        pod: &str,
        spec: &PodSpec,
        info: &BindInfo,
    ) -> Result<(), HivedError> {
        let r = Request::new(pod, spec)?;
        if let Some(&g) = self.group_ids.get(r.group) {
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
        // A pod of a VC that a reconfiguration deleted still runs: upstream keeps it as a
        // lazily preempted group ("VC not found" maps no virtual cell), and forgetting it
        // would let the next group be bound onto its devices.
        let vc = match self.vc_index(r.vc) {
            Some(vc) => vc,
            None => self.retired_vc(r.vc),
        };
        let g = self.create_allocated_group(&r, vc, info);
        self.settle_doomed();
        let si = self.group(g).size_index(r.size).unwrap_or(0);
        let slot = slot_in(info, r.size).unwrap_or(0);
        if slot < self.group(g).allocated[si].len() {
            self.group_mut(g).allocated[si][slot] = Some((pod.to_string(), info.node.clone()));
        }
        Ok(())
    }

    pub(super) fn check_bind_info(&self, r: &Request, info: &BindInfo) -> Result<(), HivedError> {
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

    /// Adds a VC without cells under a name the config no longer has.
    fn retired_vc(&mut self, name: &str) -> usize {
        self.vcs.push(Vc {
            name: name.to_string(),
            chains: BTreeMap::new(),
            pinned: BTreeMap::new(),
            retired: true,
        });
        let levels = |c: &Chain| vec![0i64; c.top + 1];
        self.vc_free.push(self.chains.iter().map(levels).collect());
        self.vc_doomed.push(
            self.chains
                .iter()
                .map(|c| vec![Vec::new(); c.top + 1])
                .collect(),
        );
        self.vcs.len() - 1
    }

    pub(super) fn create_allocated_group(
        &mut self,
        r: &Request,
        vc: usize,
        info: &BindInfo,
    ) -> usize {
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
                    if self.pcells[p].using.is_some() && self.pcells[p].using != Some(g) {
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
                        self.release_all_doomed(self.pcells[p].chain);
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
                                if let Some(other) =
                                    self.vcells[vl].phys.and_then(|x| self.pcells[x].using)
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
                    self.pcells[p].using = Some(g);
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
    pub(super) fn release_all_doomed(&mut self, chain: usize) {
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

    pub(super) fn can_bind(&self, p: usize, vl: usize) -> bool {
        if self.vcells[vl].phys.is_some_and(|x| x != p) {
            return false;
        }
        let pre = self.vcells[vl].preassigned;
        let mut anc = p;
        while self.pcells[anc].level < self.vcells[pre].level {
            match self.pcells[anc].parent {
                Some(x) => anc = x,
                None => return false,
            }
        }
        match (self.pcells[anc].virt, self.vcells[pre].phys) {
            (Some(bound), Some(pp)) => bound == pre && pp == anc,
            (None, None) => self.in_free_list(anc),
            _ => false,
        }
    }

    pub(super) fn find_leaf(&self, chain: Option<usize>, node: &str, idx: i32) -> Option<usize> {
        let n = *self.node_ids.get(node)?;
        let hit = |c: usize| {
            self.node_leaves[n]
                .iter()
                .copied()
                .find(|&l| self.pcells[l].chain == c && self.pcells[l].leaf_indices[0] == idx)
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

    pub(super) fn map_physical_to_virtual(
        &self,
        p: usize,
        pre_type: &str,
        r: &Request,
        vc: usize,
    ) -> Option<usize> {
        let chain = self.pcells[p].chain;
        let level =
            (1..=self.chains[chain].top).find(|&l| self.chains[chain].level_type[l] == pre_type)?;
        let cells = if r.pinned.is_empty() {
            self.vcs[vc].chains.get(&chain)?
        } else {
            &self.vcs[vc].pinned.get(r.pinned)?.0
        };
        self.phys_to_virt(p, &cells.preassigned, level, r.priority, vc)
    }

    pub(super) fn phys_to_virt(
        &self,
        c: usize,
        pre: &[Vec<usize>],
        level: usize,
        prio: i32,
        vc: usize,
    ) -> Option<usize> {
        if let Some(v) = self.pcells[c].virt {
            // Bound to another VC (a record from before a lazy preemption, or a
            // reconfiguration): the pod cannot be guaranteed here; upstream returned the
            // foreign cell and mixed two VCs' bindings.
            return (self.vcells[v].vc == vc).then_some(v);
        }
        if self.pcells[c].level == level {
            return self.lowest_priority_virtual(pre.get(level)?, prio);
        }
        let parent = self.pcells[c].parent?;
        let pv = self.phys_to_virt(parent, pre, level, prio, vc)?;
        self.lowest_priority_virtual(&self.vcells[pv].children, prio)
    }

    pub(super) fn lowest_priority_virtual(&self, list: &[usize], prio: i32) -> Option<usize> {
        let mut lowest = MAX_PRIORITY;
        let mut best = None;
        for &c in list {
            let pr = self.vcells[c].priority;
            if pr == FREE {
                if self.vcells[c].phys.is_none() {
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
        let Some(&g) = self.group_ids.get(r.group) else {
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

    pub(super) fn delete_allocated_group(&mut self, g: usize) {
        let leaves: Vec<usize> = self.group(g).leaves().map(|x| x.3).collect();
        for p in leaves {
            if self.pcells[p].using != Some(g) {
                continue;
            }
            self.pcells[p].using = None;
            if self.pcells[p].state == CellState::Used {
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
        if let Some(&g) = self.group_ids.get(r.group)
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
        let mut names: Vec<String> = self.group_ids.keys().cloned().collect();
        names.sort_unstable();
        names
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

pub(super) fn slot_in(info: &BindInfo, size: usize) -> Option<usize> {
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
