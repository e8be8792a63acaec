//! Free lists, preassigned cells, virtual-to-physical binding, and the use of leaves.

use super::{Hived, set_priority, swap_remove, update_used};
use crate::cells::{CellState, FREE, OPPORTUNISTIC};
use crate::types::Suggested;

impl Hived {
    pub(super) fn remove_from_free_list(&mut self, mut c: usize) -> usize {
        let chain = self.pcells[c].chain;
        loop {
            let l = self.pcells[c].level;
            let mut terminate = true;
            if let Some(parent) = self.pcells[c].parent
                && !self.pcells[parent].split
            {
                let children = self.pcells[parent].children.clone();
                self.free[chain][l].extend(children);
                self.pcells[parent].split = true;
                terminate = false;
            }
            swap_remove(&mut self.free[chain][l], c);
            if terminate {
                return l;
            }
            c = self.pcells[c].parent.expect("parent");
        }
    }

    pub(super) fn add_to_free_list(&mut self, mut c: usize) -> usize {
        let chain = self.pcells[c].chain;
        loop {
            let l = self.pcells[c].level;
            let mut terminate = true;
            if let Some(parent) = self.pcells[c].parent {
                let buddies = self.pcells[parent].children.clone();
                if buddies
                    .iter()
                    .all(|&b| b == c || self.free[chain][l].contains(&b))
                {
                    for b in buddies {
                        if b != c {
                            swap_remove(&mut self.free[chain][l], b);
                        }
                    }
                    self.pcells[parent].split = false;
                    terminate = false;
                }
            }
            if terminate {
                self.free[chain][l].push(c);
                return l;
            }
            c = self.pcells[c].parent.expect("parent");
        }
    }

    /// Binds a physical cell to a VC's preassigned cell: takes it off the free list and
    /// keeps the counters; returns false if this breaks the safety inequality.
    pub(super) fn allocate_preassigned(&mut self, c: usize, vc: usize, doomed_bad: bool) -> bool {
        let mut safety = true;
        let (chain, level) = (self.pcells[c].chain, self.pcells[c].level);
        self.vc_free[vc][chain][level] -= 1;
        self.all_vc_free[chain][level] -= 1;
        self.total_left[chain][level] -= 1;
        let up_to = self.remove_from_free_list(c);
        let mut parent = self.pcells[c].parent;
        for l in level + 1..=up_to {
            self.total_left[chain][l] -= 1;
            if self.total_left[chain][l] < self.all_vc_free[chain][l] {
                safety = false;
            }
            let pp = parent.expect("split ancestor");
            if !self.pcells[pp].healthy {
                swap_remove(&mut self.bad_free[chain][l], pp);
            } else {
                self.try_bind_doomed(chain, l);
            }
            parent = self.pcells[pp].parent;
        }
        if !self.pcells[c].healthy {
            self.allocate_bad_cell(c);
            if !doomed_bad {
                // This VC has one free cell fewer, healthy obtainable cells are unchanged.
                self.try_unbind_doomed(chain, level);
            }
        } else {
            self.try_bind_doomed(chain, level);
        }
        let mut reduce = self.pcells[c].children.len() as i64;
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

    pub(super) fn allocate_bad_cell(&mut self, c: usize) {
        let (chain, level) = (self.pcells[c].chain, self.pcells[c].level);
        swap_remove(&mut self.bad_free[chain][level], c);
        if self.pcells[c].virt.is_none()
            && let Some(pv) = self.pcells[c].parent.and_then(|p| self.pcells[p].virt)
            && let Some(vc) = self.unbound_child(pv)
        {
            self.pcells[c].virt = Some(vc);
            self.vcells[vc].phys = Some(c);
        }
        for child in self.pcells[c].children.clone() {
            if !self.pcells[child].healthy {
                self.allocate_bad_cell(child);
            }
        }
    }

    pub(super) fn release_preassigned(&mut self, c: usize, vc: usize, doomed_bad: bool) {
        let (chain, level) = (self.pcells[c].chain, self.pcells[c].level);
        self.vc_free[vc][chain][level] += 1;
        self.all_vc_free[chain][level] += 1;
        self.total_left[chain][level] += 1;
        let up_to = self.add_to_free_list(c);
        let mut parent = self.pcells[c].parent;
        for l in level + 1..=up_to {
            self.total_left[chain][l] += 1;
            let pp = parent.expect("merged ancestor");
            if !self.pcells[pp].healthy {
                self.bad_free[chain][l].push(pp);
            } else {
                self.try_unbind_doomed(chain, l);
            }
            parent = self.pcells[pp].parent;
        }
        if !self.pcells[c].healthy {
            self.release_bad_cell(c);
            if !doomed_bad {
                self.try_bind_doomed(chain, level);
            }
        } else {
            self.try_unbind_doomed(chain, level);
        }
        let mut add = self.pcells[c].children.len() as i64;
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
    pub(super) fn release_bad_cell(&mut self, c: usize) {
        let (chain, level) = (self.pcells[c].chain, self.pcells[c].level);
        self.bad_free[chain][level].push(c);
        if let Some(vc) = self.pcells[c].virt.take() {
            self.vcells[vc].phys = None;
        }
        for child in self.pcells[c].children.clone() {
            if !self.pcells[child].healthy {
                self.release_bad_cell(child);
            }
        }
    }

    // ----- binding --------------------------------------------------------------------

    pub(super) fn bind(&mut self, mut pc: usize, mut vc: usize) {
        while self.vcells[vc].phys.is_none() {
            self.pcells[pc].virt = Some(vc);
            self.vcells[vc].phys = Some(pc);
            match (self.vcells[vc].parent, self.pcells[pc].parent) {
                (Some(vp), Some(pp)) => {
                    vc = vp;
                    pc = pp;
                }
                _ => break,
            }
        }
    }

    pub(super) fn unbind(&mut self, c: usize) {
        let Some(mut bv) = self.pcells[c].virt else {
            return;
        };
        loop {
            let Some(bp) = self.vcells[bv].phys else {
                return;
            };
            if self.pcells[bp].pinned.is_some() {
                return;
            }
            self.vcells[bv].phys = None;
            self.pcells[bp].virt = None;
            let Some(parent) = self.vcells[bv].parent else {
                return;
            };
            if self.vcells[parent]
                .children
                .iter()
                .any(|&ch| self.vcells[ch].phys.is_some())
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
            set_priority(&mut self.vcells, v, prio);
            update_used(&mut self.vcells, v, prio, 1);
            set_priority(&mut self.pcells, p, prio);
            update_used(&mut self.pcells, p, prio, 1);
            self.count_opportunistic(prio, 1);
            let pac = self.vcells[v].preassigned;
            let newly = self.vcells[pac].phys.is_none();
            if self.pcells[p].virt.is_none() {
                self.bind(p, v);
            }
            if let Some(pp) = self.vcells[pac].phys {
                if newly {
                    safety = self.allocate_preassigned(pp, vc, false);
                } else {
                    // A doomed bad cell now in real use is no longer "bound because bad":
                    // it must neither be unbound under the job when healthy cells come
                    // back nor stay doomed after the job leaves (upstream did both, §13
                    // bug 2). Its counters already count it as allocated.
                    let (chain, level, owner) = (
                        self.pcells[pp].chain,
                        self.pcells[pp].level,
                        self.vcells[pac].vc,
                    );
                    if swap_remove(&mut self.vc_doomed[owner][chain][level], pp) {
                        self.all_vc_doomed[chain][level] -= 1;
                    }
                }
            }
        } else {
            set_priority(&mut self.pcells, p, OPPORTUNISTIC);
            update_used(&mut self.pcells, p, OPPORTUNISTIC, 1);
            self.count_opportunistic(OPPORTUNISTIC, 1);
            self.pcells[p].opp_vc = Some(vc);
        }
        safety
    }

    /// Stops using a leaf. A leaf in guaranteed use (priority >= 0) is released through
    /// its virtual cell and that cell's own VC; a leaf bound only because it is bad keeps
    /// its binding (upstream released it through the *user's* VC and crashed, §13).
    pub(crate) fn release_leaf(&mut self, p: usize) {
        if self.pcells[p].priority >= 0
            && let Some(v) = self.pcells[p].virt
        {
            let vp = self.vcells[v].priority;
            update_used(&mut self.vcells, v, vp, -1);
            set_priority(&mut self.vcells, v, FREE);
            let pac = self.vcells[v].preassigned;
            let owner = self.vcells[v].vc;
            let pre_phys = self.vcells[pac].phys;
            if self.pcells[p].healthy {
                self.unbind(p);
            }
            if let Some(pp) = pre_phys
                && self.pcells[pp].pinned.is_none()
                && self.vcells[pac].priority < 0
                && !self.vc_doomed[owner][self.pcells[pp].chain][self.pcells[pp].level]
                    .contains(&pp)
            {
                self.release_preassigned(pp, owner, false);
            }
        } else {
            self.pcells[p].opp_vc = None;
        }
        let pr = self.pcells[p].priority;
        update_used(&mut self.pcells, p, pr, -1);
        self.count_opportunistic(pr, -1);
        set_priority(&mut self.pcells, p, FREE);
    }

    /// Keeps the count of leaves in opportunistic use, by which `usable` knows every
    /// cell's opportunistic count is 0 without reading the cells.
    fn count_opportunistic(&mut self, prio: i32, delta: i64) {
        if prio == OPPORTUNISTIC {
            self.opportunistic_leaves += delta;
        }
    }

    pub(crate) fn set_state(&mut self, mut c: usize, s: CellState) {
        loop {
            self.pcells[c].state = s;
            let Some(parent) = self.pcells[c].parent else {
                return;
            };
            if s == CellState::Used
                || self.pcells[parent]
                    .children
                    .iter()
                    .all(|&ch| self.pcells[ch].state == s)
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
                    if let Some(&i) = self.node_ids.get(n.as_str()) {
                        v[i] = true;
                    }
                }
                v
            }
            Suggested::AllExcept(list) => {
                let mut v = vec![true; self.nodes.len()];
                for n in list {
                    if let Some(&i) = self.node_ids.get(n.as_str()) {
                        v[i] = false;
                    }
                }
                v
            }
        }
    }
}
