//! Invariants of hived.md §9, checked against the live state: leaf states agree with
//! their users, bindings are symmetric and topology-preserving, free lists partition the
//! cells and are maximally merged, the counters equal their recomputation, priorities and
//! usage sums propagate, and (all nodes healthy) the safety inequality holds.

use std::collections::BTreeSet;

use crate::algo::{GroupState, Hived};
use crate::cells::{CellState, FREE};

impl Hived {
    /// Every violated invariant, described; empty when the state is consistent.
    pub fn check_invariants(&self) -> Vec<String> {
        let mut bad = Vec::new();
        self.check_cells(&mut bad);
        self.check_free_lists(&mut bad);
        self.check_groups(&mut bad);
        self.check_bad_cells(&mut bad);
        bad
    }

    fn check_cells(&self, bad: &mut Vec<String>) {
        let opportunistic: i64 = (self.pcells.iter())
            .filter(|c| c.level == 1)
            .map(|c| i64::from(c.used.get(crate::cells::OPPORTUNISTIC)))
            .sum();
        if opportunistic != self.opportunistic_leaves {
            bad.push(format!(
                "{opportunistic} leaves in opportunistic use, counted {}",
                self.opportunistic_leaves
            ));
        }
        for (i, c) in self.pcells.iter().enumerate() {
            if c.level == 1 {
                let ok = matches!(
                    (c.state, c.using.is_some(), c.reserving.is_some()),
                    (CellState::Free, false, false)
                        | (CellState::Used, true, false)
                        | (CellState::Reserving, true, true)
                        | (CellState::Reserved, false, true)
                );
                if !ok {
                    bad.push(format!(
                        "leaf {} state {:?} using {:?} reserving {:?}",
                        c.address, c.state, c.using, c.reserving
                    ));
                }
                if c.state == CellState::Free && c.priority != FREE {
                    bad.push(format!(
                        "free leaf {} has priority {}",
                        c.address, c.priority
                    ));
                }
                let used: u32 = c.used.0.iter().map(|e| e.1).sum();
                if used > 1 {
                    bad.push(format!("leaf {} counted {used} times in use", c.address));
                }
            } else {
                let max = c
                    .children
                    .iter()
                    .map(|&x| self.pcells[x].priority)
                    .max()
                    .unwrap_or(FREE);
                if c.priority != max {
                    bad.push(format!(
                        "cell {} priority {} != max of children {max}",
                        c.address, c.priority
                    ));
                }
                let mut sum = crate::cells::Used::default();
                for &ch in &c.children {
                    for &(p, n) in &self.pcells[ch].used.0 {
                        sum.add(p, n as i64);
                    }
                }
                if sum != c.used {
                    bad.push(format!(
                        "cell {} usage {:?} != children {:?}",
                        c.address, c.used, sum
                    ));
                }
            }
            if let Some(v) = c.virt {
                if self.vcells[v].phys != Some(i) {
                    bad.push(format!(
                        "{} -> {} is not mirrored",
                        c.address, self.vcells[v].address
                    ));
                }
                if self.vcells[v].level != c.level || self.vcells[v].chain != c.chain {
                    bad.push(format!(
                        "{} bound to {} at another level",
                        c.address, self.vcells[v].address
                    ));
                }
                if let (Some(vp), Some(pp)) = (self.vcells[v].parent, c.parent)
                    && let Some(bp) = self.vcells[vp].phys
                    && bp != pp
                {
                    bad.push(format!("binding of {} breaks topology", c.address));
                }
            }
        }
        for (i, v) in self.vcells.iter().enumerate() {
            if let Some(p) = v.phys
                && self.pcells[p].virt != Some(i)
            {
                bad.push(format!(
                    "{} -> {} is not mirrored",
                    v.address, self.pcells[p].address
                ));
            }
            if v.level > 1 {
                let max = v
                    .children
                    .iter()
                    .map(|&x| self.vcells[x].priority)
                    .max()
                    .unwrap_or(FREE);
                if v.priority != max {
                    bad.push(format!(
                        "virtual {} priority {} != max {max}",
                        v.address, v.priority
                    ));
                }
            }
        }
    }

    fn check_free_lists(&self, bad: &mut Vec<String>) {
        for (ci, ch) in self.chains.iter().enumerate() {
            let mut seen = BTreeSet::new();
            for l in 1..=ch.top {
                for &c in &self.free[ci][l] {
                    let pc = &self.pcells[c];
                    if !seen.insert(c) {
                        bad.push(format!("{} twice in the free lists", pc.address));
                    }
                    if pc.level != l || pc.virt.is_some() || pc.split {
                        bad.push(format!(
                            "free-list entry {} is bound, split or misplaced",
                            pc.address
                        ));
                    }
                }
            }
            // Partition: each top cell and each child of a split cell is free, bound or split.
            let mut stack: Vec<usize> = ch.full[ch.top].clone();
            while let Some(c) = stack.pop() {
                let pc = &self.pcells[c];
                let n = [seen.contains(&c), pc.virt.is_some(), pc.split]
                    .iter()
                    .filter(|&&x| x)
                    .count();
                if n != 1 {
                    bad.push(format!(
                        "cell {} is in {n} of (free list, bound, split)",
                        pc.address
                    ));
                }
                if pc.split {
                    if pc.children.iter().all(|ch| seen.contains(ch)) {
                        bad.push(format!(
                            "split cell {} has all children free (not merged)",
                            pc.address
                        ));
                    }
                    stack.extend(pc.children.iter().copied());
                }
            }
            // Counters.
            for l in 1..=ch.top {
                let mut left = 0i64;
                for k in l..=ch.top {
                    let per = (ch.level_leaves[k] / ch.level_leaves[l]) as i64;
                    left += self.free[ci][k].len() as i64 * per;
                }
                if left != self.total_left[ci][l] {
                    bad.push(format!(
                        "chain {} level {l}: totalLeft {} but free lists give {left}",
                        ch.name, self.total_left[ci][l]
                    ));
                }
                let mut all = 0;
                for (vi, vc) in self.vcs.iter().enumerate() {
                    let mut unbound = 0i64;
                    if let Some(cells) = vc.chains.get(&ci) {
                        unbound += cells.preassigned[l]
                            .iter()
                            .filter(|&&x| self.vcells[x].phys.is_none())
                            .count() as i64;
                    }
                    for (cells, pid) in vc.pinned.values() {
                        if self.pcells[*pid].chain == ci {
                            unbound += cells.preassigned[l]
                                .iter()
                                .filter(|&&x| self.vcells[x].phys.is_none())
                                .count() as i64;
                        }
                    }
                    if unbound != self.vc_free[vi][ci][l] {
                        bad.push(format!(
                            "VC {} chain {} level {l}: vcFree {} but {unbound} unbound cells",
                            vc.name, ch.name, self.vc_free[vi][ci][l]
                        ));
                    }
                    all += self.vc_free[vi][ci][l];
                }
                if all != self.all_vc_free[ci][l] {
                    bad.push(format!("chain {} level {l}: allVCFree mismatch", ch.name));
                }
                if !self.bad_nodes.iter().any(|&b| b)
                    && self.total_left[ci][l] < self.all_vc_free[ci][l]
                {
                    bad.push(format!(
                        "safety broken: chain {} level {l}: {} left < {} unbound VC cells",
                        ch.name, self.total_left[ci][l], self.all_vc_free[ci][l]
                    ));
                }
            }
        }
    }

    /// Bad obtainable cells are exactly the bad-free lists; every binding not in real use
    /// exists because its cell is bad (a doomed preassigned cell or a bad descendant of a
    /// bound cell); and the doomed cells are settled: no VC keeps a doomed cell while
    /// healthy cells could replace it, nor lacks one while it has more free cells than
    /// healthy ones are left.
    fn check_bad_cells(&self, bad: &mut Vec<String>) {
        for (ci, ch) in self.chains.iter().enumerate() {
            for l in 1..=ch.top {
                let want: BTreeSet<usize> = ch.full[l]
                    .iter()
                    .copied()
                    .filter(|&c| !self.pcells[c].healthy && self.in_free_list(c))
                    .collect();
                let have: BTreeSet<usize> = self.bad_free[ci][l].iter().copied().collect();
                if want != have || have.len() != self.bad_free[ci][l].len() {
                    bad.push(format!(
                        "chain {} level {l}: bad free cells {:?}, expected {:?}",
                        ch.name, have, want
                    ));
                }
                let mut all = 0;
                for (vi, vc) in self.vcs.iter().enumerate() {
                    let doomed = &self.vc_doomed[vi][ci][l];
                    all += doomed.len() as i64;
                    for &c in doomed {
                        let pc = &self.pcells[c];
                        let ok = !pc.healthy
                            && pc.priority < 0
                            && pc.virt.is_some_and(|v| {
                                self.vcells[v].vc == vi && self.vcells[v].parent.is_none()
                            });
                        if !ok {
                            bad.push(format!(
                                "doomed cell {} of VC {} is healthy, in use or not bound to a preassigned cell of it",
                                pc.address, vc.name
                            ));
                        }
                    }
                    let healthy = self.total_left[ci][l] - self.bad_free[ci][l].len() as i64;
                    let free = self.vc_free[vi][ci][l];
                    if !doomed.is_empty() && free < healthy {
                        bad.push(format!(
                            "VC {} chain {} level {l}: keeps {} doomed cells with {free} free and {healthy} healthy left",
                            vc.name,
                            ch.name,
                            doomed.len()
                        ));
                    }
                    if free > healthy && !self.bad_free[ci][l].is_empty() {
                        bad.push(format!(
                            "VC {} chain {} level {l}: {free} free cells but {healthy} healthy left and bad cells not doomed",
                            vc.name, ch.name
                        ));
                    }
                }
                if all != self.all_vc_doomed[ci][l] {
                    bad.push(format!("chain {} level {l}: allVCDoomed mismatch", ch.name));
                }
            }
        }
        for c in &self.pcells {
            if c.virt.is_some() && c.priority < 0 && c.pinned.is_none() && c.healthy {
                bad.push(format!(
                    "{} is bound although healthy and not in use",
                    c.address
                ));
            }
        }
    }

    fn check_groups(&self, bad: &mut Vec<String>) {
        let empty: BTreeSet<usize> = (self.groups.iter().enumerate())
            .filter_map(|(gi, g)| g.is_none().then_some(gi))
            .collect();
        if empty != self.free_groups {
            bad.push(format!(
                "empty group slots {empty:?}, listed as free {:?}",
                self.free_groups
            ));
        }
        for (gi, g) in self.groups.iter().enumerate() {
            let Some(g) = g else { continue };
            for (_, _, _, p) in g.leaves() {
                let pc = &self.pcells[p];
                let ok = match g.state {
                    GroupState::Allocated => {
                        pc.using == Some(gi)
                            && matches!(pc.state, CellState::Used | CellState::Reserving)
                    }
                    GroupState::BeingPreempted => pc.using == Some(gi),
                    GroupState::Preempting => pc.reserving == Some(gi),
                };
                if !ok {
                    bad.push(format!(
                        "group {} ({:?}) does not hold leaf {}",
                        g.name, g.state, pc.address
                    ));
                }
                if g.virt.is_some()
                    && pc.using == Some(gi)
                    && pc.state == CellState::Used
                    && let Some(v) = pc.virt
                    && self.vcells[v].vc != g.vc
                    && pc.priority >= 0
                {
                    bad.push(format!(
                        "group {} uses {} bound to another VC",
                        g.name, pc.address
                    ));
                }
            }
        }
    }

    /// A fingerprint of the allocation state (per-cell priority, state, usage, whether
    /// bound or split, and the free lists as sets), for comparing a recovered state.
    pub fn fingerprint(&self) -> String {
        self.fingerprint_with(true)
    }

    /// The fingerprint without the bindings that exist only because cells are bad and
    /// without the free lists those bindings split. Which bad cell a VC's doomed cell
    /// binds to depends on the order nodes failed and reported in, so a scheduler
    /// recovered after a restart may pick another one; what is in use may not differ.
    pub fn fingerprint_of_use(&self) -> String {
        self.fingerprint_with(false)
    }

    fn fingerprint_with(&self, bad_bindings: bool) -> String {
        let mut s = String::new();
        for c in &self.pcells {
            let real = c.priority >= 0 || c.pinned.is_some();
            s.push_str(&format!(
                "{} {} {:?} {:?} {}",
                c.address,
                c.priority,
                c.state,
                c.used.0,
                c.virt.is_some() && (bad_bindings || real),
            ));
            if bad_bindings {
                s.push_str(&format!(" {}", c.split));
            }
            s.push('\n');
        }
        if bad_bindings {
            for (ci, levels) in self.free.iter().enumerate() {
                for (l, list) in levels.iter().enumerate() {
                    let set: BTreeSet<&str> = list
                        .iter()
                        .map(|&c| self.pcells[c].address.as_str())
                        .collect();
                    s.push_str(&format!("free {ci} {l} {set:?}\n"));
                }
            }
        }
        s
    }
}

impl Hived {
    /// Every physical cell with its binding and health, and the per-level counters; for
    /// debugging a failed invariant.
    #[doc(hidden)]
    pub fn debug_dump(&self) -> String {
        let mut s = String::new();
        for (i, c) in self.pcells.iter().enumerate() {
            let virt = c
                .virt
                .map(|v| {
                    format!(
                        "{}:{}",
                        self.vcs[self.vcells[v].vc].name, self.vcells[v].address
                    )
                })
                .unwrap_or_default();
            s.push_str(&format!(
                "p{i} {} L{} prio {} {}{}{} {virt}\n",
                c.address,
                c.level,
                c.priority,
                if c.healthy { "" } else { "BAD " },
                if c.split { "split " } else { "" },
                if self.in_free_list(i) { "free " } else { "" },
            ));
        }
        for (ci, levels) in self.free.iter().enumerate() {
            for (l, list) in levels.iter().enumerate().skip(1) {
                s.push_str(&format!(
                    "chain {ci} L{l}: free {:?} badfree {:?} total_left {} all_vc_free {} doomed {}",
                    list,
                    self.bad_free[ci][l],
                    self.total_left[ci][l],
                    self.all_vc_free[ci][l],
                    self.all_vc_doomed[ci][l]
                ));
                for (vi, vc) in self.vcs.iter().enumerate() {
                    if vc.chains.contains_key(&ci) {
                        s.push_str(&format!(
                            " {}:{}/{:?}",
                            vc.name, self.vc_free[vi][ci][l], self.vc_doomed[vi][ci][l]
                        ));
                    }
                }
                s.push('\n');
            }
        }
        s
    }
}
