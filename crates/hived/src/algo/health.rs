//! Bad hardware: node health, bad cells, and doomed cells (virtual cells bound to bad
//! physical cells because the VC's guarantee can no longer be met from healthy ones).

use super::{Hived, swap_remove};
use crate::types::{HivedError, user};

impl Hived {
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

    pub(super) fn node_id(&self, node: &str) -> Result<usize, HivedError> {
        self.node_ids
            .get(node)
            .copied()
            .ok_or_else(|| user(format!("node {node} is not in the physical cluster")))
    }

    /// Whether a node is currently bad.
    pub fn node_is_bad(&self, node: &str) -> bool {
        self.node_ids.get(node).is_some_and(|&n| self.bad_nodes[n])
    }

    pub(super) fn set_node_bad_id(&mut self, n: usize) {
        if self.bad_nodes[n] {
            return;
        }
        self.bad_nodes[n] = true;
        for leaf in self.node_leaves[n].clone() {
            self.set_bad_cell(leaf);
        }
        self.settle_doomed();
    }

    pub(super) fn set_node_healthy_id(&mut self, n: usize) {
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
    pub(super) fn settle_doomed(&mut self) {
        for chain in 0..self.chains.len() {
            // Without bad free cells nothing can be doomed, and without doomed cells
            // nothing can be released: the common case of a healthy cluster.
            if self.bad_free[chain].iter().all(Vec::is_empty)
                && self.all_vc_doomed[chain].iter().all(|&n| n == 0)
            {
                continue;
            }
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
            if self.pcells[c].virt.is_some() || self.pcells[c].split {
                return false;
            }
            match self.pcells[c].parent {
                None => return true,
                Some(p) if self.pcells[p].split => return true,
                Some(p) => c = p,
            }
        }
    }

    pub(super) fn unbound_child(&self, virtual_parent: usize) -> Option<usize> {
        self.vcells[virtual_parent]
            .children
            .iter()
            .copied()
            .find(|&c| self.vcells[c].phys.is_none())
    }

    pub(super) fn set_bad_cell(&mut self, c: usize) {
        if !self.pcells[c].healthy {
            return;
        }
        self.pcells[c].healthy = false;
        if let Some(parent) = self.pcells[c].parent {
            self.set_bad_cell(parent);
        }
        if self.in_free_list(c) {
            self.add_bad_free_cell(c);
        } else if self.pcells[c].virt.is_none() && !self.pcells[c].split {
            // An ancestor is bound: bind this cell too so the VC sees the failure.
            if let Some(pv) = self.pcells[c].parent.and_then(|p| self.pcells[p].virt)
                && let Some(vc) = self.unbound_child(pv)
            {
                self.pcells[c].virt = Some(vc);
                self.vcells[vc].phys = Some(c);
            }
        }
    }

    pub(super) fn set_healthy_cell(&mut self, c: usize) {
        if self.pcells[c].healthy {
            return;
        }
        self.pcells[c].healthy = true;
        if self.in_free_list(c) {
            self.remove_bad_free_cell(c);
        } else if let Some(vc) = self.pcells[c].virt
            && self.pcells[c].pinned.is_none()
            && self.pcells[c].priority < 0
        {
            // Bound only because it was bad: unbind now it is healthy.
            if self.vcells[vc].parent.is_none() {
                self.release_doomed(c, self.vcells[vc].vc);
            } else {
                self.pcells[c].virt = None;
                self.vcells[vc].phys = None;
            }
        }
        let Some(parent) = self.pcells[c].parent else {
            return;
        };
        if self.pcells[parent]
            .children
            .iter()
            .all(|&b| self.pcells[b].healthy)
        {
            self.set_healthy_cell(parent);
        }
    }

    pub(super) fn add_bad_free_cell(&mut self, c: usize) {
        let (chain, level) = (self.pcells[c].chain, self.pcells[c].level);
        self.bad_free[chain][level].push(c);
        if self.all_vc_free[chain][level]
            > self.total_left[chain][level] - self.bad_free[chain][level].len() as i64
        {
            self.try_bind_doomed(chain, level);
        }
    }

    pub(super) fn remove_bad_free_cell(&mut self, c: usize) {
        let (chain, level) = (self.pcells[c].chain, self.pcells[c].level);
        swap_remove(&mut self.bad_free[chain][level], c);
        self.try_unbind_doomed(chain, level);
    }

    pub(super) fn healthy_left(&self, c: usize, l: usize) -> i64 {
        self.total_left[c][l] - self.bad_free[c][l].len() as i64
    }

    pub(super) fn try_bind_doomed(&mut self, c: usize, l: usize) {
        // Only a bad free cell can be doomed.
        if self.forecast_paused || self.bad_free[c][l].is_empty() {
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
                let Some(vcell) = candidates
                    .into_iter()
                    .find(|&x| self.vcells[x].phys.is_none())
                else {
                    break;
                };
                self.pcells[pc].virt = Some(vcell);
                self.vcells[vcell].phys = Some(pc);
                self.vc_doomed[vi][c][l].push(pc);
                self.all_vc_doomed[c][l] += 1;
                let _ = self.allocate_preassigned(pc, vi, true);
            }
        }
    }

    pub(super) fn try_unbind_doomed(&mut self, c: usize, l: usize) {
        debug_assert_eq!(
            self.all_vc_doomed[c][l],
            self.vc_doomed
                .iter()
                .map(|v| v[c][l].len() as i64)
                .sum::<i64>()
        );
        if self.all_vc_doomed[c][l] == 0 {
            return;
        }
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
    pub(super) fn release_doomed(&mut self, pc: usize, owner: usize) {
        if let Some(vcell) = self.pcells[pc].virt.take() {
            self.vcells[vcell].phys = None;
        }
        let (chain, level) = (self.pcells[pc].chain, self.pcells[pc].level);
        if swap_remove(&mut self.vc_doomed[owner][chain][level], pc) {
            self.all_vc_doomed[chain][level] -= 1;
        }
        self.release_preassigned(pc, owner, true);
    }
}
