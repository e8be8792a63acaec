//! Affinity groups: creation, stateful preemption and lazy preemption.

use super::{Group, GroupState, Hived, Placement, Request};
use crate::cells::{CellState, OPPORTUNISTIC};
use std::collections::BTreeSet;

/// Removed groups kept for their vectors.
const GROUP_POOL: usize = 64;

/// Empties `p` into `sizes`' shape: per size class `(leaves, pods)`, `pods` slots of
/// `leaves` unset leaves, reusing the vectors already there.
fn empty_placement(p: &mut Placement, sizes: &[(usize, usize)]) {
    p.truncate(sizes.len());
    p.resize_with(sizes.len(), Vec::new);
    for (pods, &(s, n)) in p.iter_mut().zip(sizes) {
        pods.truncate(n);
        for leaves in pods.iter_mut() {
            leaves.clear();
            leaves.resize(s, None);
        }
        pods.resize_with(n, || vec![None; s]);
    }
}

impl Hived {
    /// A group for request `r`, built in the vectors of a removed group when one is
    /// kept (a placement makes and drops one group, a dozen vectors).
    pub(super) fn new_group(&mut self, r: &Request, vc: usize, state: GroupState) -> Group {
        let Some(mut g) = self.group_pool.pop() else {
            return Group {
                name: r.group.to_string(),
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
            };
        };
        g.name.clear();
        g.name.push_str(r.group);
        g.vc = vc;
        g.priority = r.priority;
        g.lazy_enable = r.lazy;
        g.ignore_suggested = r.ignore_suggested;
        g.sizes.clear();
        g.sizes.extend(r.sizes.iter().map(|s| s.0));
        empty_placement(&mut g.phys, &r.sizes);
        let mut virt = g.virt.take().unwrap_or_default();
        empty_placement(&mut virt, &r.sizes);
        g.virt = Some(virt);
        g.allocated.truncate(r.sizes.len());
        g.allocated.resize_with(r.sizes.len(), Vec::new);
        for (slots, &(_, n)) in g.allocated.iter_mut().zip(&r.sizes) {
            slots.clear();
            slots.resize(n, None);
        }
        g.preempting.clear();
        g.state = state;
        g.lazy = None;
        g
    }

    pub(super) fn insert_group(&mut self, g: Group) -> usize {
        let name = g.name.clone();
        let id = if let Some(i) = self.free_groups.pop_first() {
            self.groups[i] = Some(g);
            i
        } else {
            self.groups.push(Some(g));
            self.groups.len() - 1
        };
        self.group_ids.insert(name, id);
        id
    }

    pub(super) fn remove_group(&mut self, g: usize) {
        if let Some(gr) = self.groups[g].take() {
            self.group_ids.remove(&gr.name);
            self.free_groups.insert(g);
            if self.group_pool.len() < GROUP_POOL {
                self.group_pool.push(gr);
            }
        }
    }

    pub(super) fn create_preempting_group(
        &mut self,
        r: &Request,
        pod: &str,
        phys: Placement,
        virt: Option<Placement>,
    ) {
        let vc = self.vc_index(r.vc).expect("validated");
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
                    let was_used = self.pcells[p].state == CellState::Used;
                    if was_used {
                        self.release_leaf(p);
                        if let Some(u) = self.pcells[p].using {
                            self.group_mut(u).state = GroupState::BeingPreempted;
                        }
                    }
                    self.allocate_leaf(p, v, r.priority, vc);
                    self.pcells[p].reserving = Some(id);
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

    pub(super) fn delete_preempting_group(&mut self, g: usize) {
        let leaves: Vec<usize> = self.group(g).leaves().map(|x| x.3).collect();
        for p in leaves {
            self.release_leaf(p);
            self.pcells[p].reserving = None;
            if self.pcells[p].state == CellState::Reserving {
                self.set_state(p, CellState::Used);
                let Some(u) = self.pcells[p].using else {
                    continue;
                };
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
                    self.pcells[x.3].state == CellState::Reserving
                        && self.pcells[x.3].using == Some(u)
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

    pub(super) fn allocate_preempting_group(&mut self, g: usize) {
        let leaves: Vec<usize> = self.group(g).leaves().map(|x| x.3).collect();
        for p in leaves {
            self.pcells[p].reserving = None;
            self.pcells[p].using = Some(g);
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
            .filter(|&p| {
                self.pcells[p].using == Some(victim) && self.pcells[p].state == CellState::Used
            })
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

    pub(super) fn revert_lazy_preempt(&mut self, g: usize, saved: Placement) {
        let gr = self.group(g);
        let (prio, vc) = (gr.priority, gr.vc);
        let items: Vec<(usize, Option<usize>)> = gr
            .leaves()
            .filter(|x| {
                self.pcells[x.3].using == Some(g) && self.pcells[x.3].state == CellState::Used
            })
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
}
