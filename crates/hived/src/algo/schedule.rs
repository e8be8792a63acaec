//! One scheduling decision: validation, new groups, guaranteed placement through binding
//! paths, and opportunistic placement.

use super::topo::ViewId;
use super::{Ctx, GroupState, Hived, ListRef, Map, PathVertex, Placement, Request};
use crate::cells::{CellState, OPPORTUNISTIC};
use crate::types::{Decision, HivedError, Phase, PodSpec, Suggested, user};
use std::collections::BTreeSet;

impl Hived {
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

    pub(super) fn schedule_unsettled(
        &mut self,
        pod: &str,
        spec: &PodSpec,
        suggested: &Suggested,
        phase: Phase,
    ) -> Result<Decision, HivedError> {
        let req = Request::new(pod, spec)?;
        // The suggested nodes are read only where the request, or its group, heeds them
        // (`ignoreK8sSuggestedNodes: false`); building the set costs a lookup per node,
        // 5,000 for each filter kube-scheduler sends a large cluster.
        let heeded = !req.ignore_suggested
            || (self.group_ids.get(req.group)).is_some_and(|&g| !self.group(g).ignore_suggested);
        let sugg = if heeded {
            self.suggested_vec(suggested)
        } else {
            Vec::new()
        };
        if let Some(&g) = self.group_ids.get(req.group) {
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

    pub(super) fn bad_or_unsuggested(&self, g: usize, sugg: &[bool]) -> bool {
        let gr = self.group(g);
        gr.leaves().any(|(_, _, _, l)| {
            let n = self.pcells[l].nodes[0];
            !self.pcells[l].healthy || (!gr.ignore_suggested && !sugg[n])
        })
    }

    pub(super) fn validate_request(&self, r: &Request) -> Result<(), HivedError> {
        let Some(vc) = self.vc_index(r.vc).filter(|&v| !self.vcs[v].retired) else {
            return Err(user(format!("VC {} does not exist", r.vc)));
        };
        if !r.pinned.is_empty() {
            if !self.vcs[vc].pinned.contains_key(r.pinned) {
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
    pub(super) fn schedule_new_group(
        &mut self,
        r: &Request,
        sugg: &[bool],
    ) -> Result<Result<(Placement, Option<Placement>), String>, HivedError> {
        let vc = self.vc_index(r.vc).expect("validated");
        if !r.pinned.is_empty() {
            return Ok(self.process(r, vc, None, sugg));
        }
        // The chains of every leaf type, in type order, or of the one asked for.
        let chains: Vec<usize> = if r.leaf_type.is_empty() {
            self.leaf_chains.values().flatten().copied().collect()
        } else {
            let Some(chains) = self.leaf_chains.get(r.leaf_type) else {
                return Err(user(format!(
                    "leaf cell type {} does not exist in the cluster",
                    r.leaf_type
                )));
            };
            chains.clone()
        };
        let mut reason = String::new();
        let mut vc_has = false;
        for c in chains {
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
        if reason.is_empty() {
            reason = format!("VC {} has no cells for this request", r.vc);
        }
        Ok(Err(reason))
    }

    pub(super) fn process(
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
                .topo_schedule(ViewId::Opportunistic(chain), &r.sizes, OPPORTUNISTIC, &ctx)
                .map_err(|e| format!("{e} when scheduling in the physical cluster"))?;
            Ok((placement, None))
        }
    }

    pub(super) fn schedule_guaranteed(
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
            Some(c) => ViewId::Vc(vc, c),
            None => ViewId::Pinned(vc, r.pinned.to_string()),
        };
        let vplace = self
            .topo_schedule(view, &r.sizes, r.priority, &ctx)
            .map_err(|e| format!("{e} when scheduling in VC {}", r.vc))?;
        let chain = self.vcells[vplace[0][0][0].expect("leaf")].chain;
        // Lazy preemption of groups on the chosen virtual leaves.
        let mut lazied: Vec<(usize, Placement)> = Vec::new();
        for pods in &vplace {
            for leaves in pods {
                for &vl in leaves.iter().flatten() {
                    let Some(pl) = self.vcells[vl].phys else {
                        continue;
                    };
                    if self.pcells[pl].state != CellState::Used {
                        continue;
                    }
                    let Some(u) = self.pcells[pl].using else {
                        continue;
                    };
                    let ug = self.group(u);
                    if ug.lazy_enable && ug.virt.is_some() {
                        let saved = self.lazy_preempt(u, r.group);
                        lazied.push((u, saved));
                    }
                }
            }
        }
        let mut bindings: Map<usize, usize> = Map::default();
        let (pre, non_pre) = self.binding_paths(&vplace, &mut bindings);
        // The mapping works on copies of the chain's free lists; the copies reuse one
        // buffer across decisions.
        let mut free = std::mem::take(&mut self.free_copy);
        free.clone_from(&self.free[chain]);
        let mut free_num = self.all_vc_free[chain].clone();
        let mapped = self.map_virtual_to_physical(
            &pre,
            &non_pre,
            &mut free,
            &mut free_num,
            &ctx,
            &mut bindings,
        );
        self.free_copy = free;
        if mapped {
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

    pub(super) fn binding_paths(
        &self,
        vplace: &Placement,
        bindings: &mut Map<usize, usize>,
    ) -> (Vec<PathVertex>, Vec<Vec<PathVertex>>) {
        // Build the forest of unbound ancestors, then split it into preassigned roots and
        // groups of roots under a bound parent (in first-seen order).
        let mut in_forest: BTreeSet<usize> = BTreeSet::new();
        let mut children_of: Map<usize, Vec<usize>> = Map::default();
        let mut roots: Vec<usize> = Vec::new();
        let mut path = Vec::new();
        for pods in vplace {
            for leaves in pods {
                for &leaf in leaves.iter().flatten() {
                    if let Some(p) = self.vcells[leaf].phys {
                        bindings.insert(leaf, p);
                        continue;
                    }
                    path.clear();
                    let mut c = Some(leaf);
                    while let Some(x) = c {
                        if self.vcells[x].phys.is_some() || in_forest.contains(&x) {
                            break;
                        }
                        path.push(x);
                        c = self.vcells[x].parent;
                    }
                    let root = *path.last().expect("unbound leaf");
                    in_forest.insert(root);
                    match self.vcells[root].parent {
                        Some(parent) if !in_forest.contains(&parent) => roots.push(root),
                        Some(parent) => children_of.entry(parent).or_default().push(root),
                        None => roots.push(root),
                    }
                    for i in (0..path.len().saturating_sub(1)).rev() {
                        let x = path[i];
                        children_of
                            .entry(self.vcells[x].parent.expect("parent"))
                            .or_default()
                            .push(x);
                        in_forest.insert(x);
                    }
                }
            }
        }
        fn build(c: usize, ch: &Map<usize, Vec<usize>>) -> PathVertex {
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
            match self.vcells[r].parent {
                None => pre.push(vx),
                Some(parent) => {
                    if let Some(gr) = non_pre
                        .iter_mut()
                        .find(|g| self.vcells[g[0].cell].parent == Some(parent))
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

    pub(super) fn map_virtual_to_physical(
        &mut self,
        pre: &[PathVertex],
        non_pre: &[Vec<PathVertex>],
        free: &mut [Vec<usize>],
        free_num: &mut [i64],
        ctx: &Ctx<'_>,
        bindings: &mut Map<usize, usize>,
    ) -> bool {
        for vx in pre {
            let level = self.vcells[vx.cell].level;
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
            let parent = self.vcells[group[0].cell].parent.expect("parent");
            let Some(pp) = self.vcells[parent].phys else {
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
}
