//! Buddy cell allocation and the safety-relaxed variant, and the mapping of virtual
//! cells to physical ones.

use super::{Ctx, Hived, ListRef, Map, PathVertex, Placement, UsableOrder, swap_remove};
use crate::cells::{CellState, OPPORTUNISTIC, PCell};
use crate::types::{BindInfo, MemberBindInfo, PodPlacement, Victim};
use std::collections::BTreeSet;

impl Hived {
    pub(super) fn buddy_alloc(
        &mut self,
        vx: &PathVertex,
        free: &mut [Vec<usize>],
        level: usize,
        ctx: &Ctx<'_>,
        bindings: &mut Map<usize, usize>,
    ) -> bool {
        if level == self.vcells[vx.cell].level {
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
            let children = self.pcells[c].children.clone();
            free[level - 1].extend(children);
            if self.buddy_alloc(vx, free, level - 1, ctx, bindings) {
                swap_remove(&mut free[level], c);
                return true;
            }
            free[level - 1].clear();
        }
        false
    }

    pub(super) fn safe_relaxed_buddy_alloc(
        &mut self,
        vx: &PathVertex,
        free: &mut [Vec<usize>],
        free_num: &[i64],
        level: usize,
        ctx: &Ctx<'_>,
        bindings: &mut Map<usize, usize>,
    ) -> bool {
        let top = free.len() - 1;
        let mut splittable = vec![0i64; top + 2];
        let mut cell: Option<usize> = None;
        for i in (1..=top).rev() {
            splittable[i] = free[i].len() as i64 - free_num[i];
            if i < top
                && let Some(c) = cell
            {
                splittable[i] += splittable[i + 1] * self.pcells[c].children.len() as i64;
            }
            if cell.is_none() && !free[i].is_empty() {
                cell = Some(free[i][0]);
            } else if let Some(c) = cell {
                cell = self.pcells[c].children.first().copied();
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
                    .flat_map(|&c| self.pcells[c].children.clone())
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

    /// HiveD's `getUsablePhysicalCells`: the usable candidates, fewer opportunistic pods
    /// first unless [`UsableOrder::ListOrder`] keeps upstream's list order; either way the
    /// underlying list is re-sorted stably, in place, as upstream does.
    pub(super) fn usable(
        &mut self,
        list: ListRef,
        free: &mut [Vec<usize>],
        needed: usize,
        ctx: &Ctx<'_>,
    ) -> Option<Vec<usize>> {
        let cands: &[usize] = match list {
            ListRef::Free(l) => &free[l],
            ListRef::Children(c) => &self.pcells[c].children,
        };
        let mut out = Vec::with_capacity(cands.len());
        for &c in cands {
            let pc = &self.pcells[c];
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
        // With no leaf in opportunistic use every key is 0, and the stable sorts below
        // leave both lists as they are.
        if self.opportunistic_leaves == 0 {
            return Some(out);
        }
        let key = |p: &Vec<PCell>, c: usize| p[c].used.get(OPPORTUNISTIC);
        match list {
            ListRef::Free(l) => {
                let p = &self.pcells;
                free[l].sort_by_key(|&c| key(p, c));
            }
            ListRef::Children(c) => {
                let mut ch = std::mem::take(&mut self.pcells[c].children);
                ch.sort_by_key(|&x| key(&self.pcells, x));
                self.pcells[c].children = ch;
            }
        }
        if self.usable_order == UsableOrder::FewerOpportunistic {
            let p = &self.pcells;
            out.sort_by_key(|&c| key(p, c));
        }
        Some(out)
    }

    /// Backtracking assignment of virtual cells to distinct candidates, recursing into
    /// children; returns the picked cells.
    pub(super) fn map_cells(
        &mut self,
        cells: &[PathVertex],
        list: ListRef,
        free: &mut [Vec<usize>],
        ctx: &Ctx<'_>,
        bindings: &mut Map<usize, usize>,
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
                let ok = if self.pcells[cand].level == 1 {
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
                    let st = self.pcells[l].state;
                    if matches!(st, CellState::Used | CellState::Reserving)
                        && let Some(u) = self.pcells[l].using
                    {
                        groups.insert(u);
                    }
                    if matches!(st, CellState::Reserving | CellState::Reserved)
                        && let Some(r) = self.pcells[l].reserving
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
    pub(super) fn bind_info(
        &self,
        phys: &Placement,
        virt: Option<&Placement>,
        si: usize,
        slot: usize,
    ) -> BindInfo {
        let mut members = Vec::with_capacity(phys.len());
        let mut chain = String::new();
        for (s, pods) in phys.iter().enumerate() {
            let mut placements = Vec::with_capacity(pods.len());
            for (pi, leaves) in pods.iter().enumerate() {
                let mut node = String::new();
                let mut idx = Vec::with_capacity(leaves.len());
                let mut types = Vec::with_capacity(leaves.len());
                for (li, l) in leaves.iter().enumerate() {
                    let Some(l) = *l else { continue };
                    let pc = &self.pcells[l];
                    if node.is_empty() {
                        node = self.nodes[pc.nodes[0]].clone();
                    }
                    idx.push(pc.leaf_indices[0]);
                    let t = virt
                        .and_then(|v| v[s][pi][li])
                        .map(|vl| {
                            let pre = self.vcells[vl].preassigned;
                            self.chains[self.vcells[pre].chain].level_type[self.vcells[pre].level]
                                .clone()
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
}
