//! HiveD's topology-aware scheduler, used inside each VC (over virtual cells) and for
//! opportunistic pods (over physical cells).
//!
//! Nodes are packed: the persistent node list is re-sorted stably (Go's algorithm, see
//! [`crate::gosort`]) so that healthy, suggested, fuller nodes come first; a gang takes
//! consecutive nodes greedily; inside a node each pod gets the leaves whose lowest common
//! ancestor is lowest, first free leaves then preemptible ones, in depth-first order.

use std::collections::BTreeSet;

use super::{Ctx, Hived, Map, Placement};
use crate::cells::{FREE, OPPORTUNISTIC};

/// Which persistent node view to schedule in.
#[derive(Debug, Clone)]
pub(crate) enum ViewId {
    /// Physical cells of a chain, for opportunistic pods.
    Opportunistic(usize),
    /// A VC's non-pinned cells of a chain.
    Vc(usize, usize),
    /// A VC's pinned cell.
    Pinned(usize, String),
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct NodeInfo {
    cell: usize,
    free: i64,
    same: i64,
    higher: i64,
    ok: bool,
}

impl Hived {
    fn view_mut(&mut self, id: &ViewId) -> &mut Vec<usize> {
        match id {
            ViewId::Opportunistic(c) => &mut self.opp_views[*c],
            ViewId::Vc(vc, c) => &mut self.vcs[*vc].chains.get_mut(c).expect("vc chain").view,
            ViewId::Pinned(vc, pid) => &mut self.vcs[*vc].pinned.get_mut(pid).expect("pin").0.view,
        }
    }

    fn node_info(&self, physical: bool, cell: usize, p: i32, ctx: &Ctx<'_>) -> NodeInfo {
        let (total, used) = if physical {
            let c = &self.pcells[cell];
            (self.chains[c.chain].level_leaves[c.level] as i64, &c.used)
        } else {
            let c = &self.vcells[cell];
            (self.chains[c.chain].level_leaves[c.level] as i64, &c.used)
        };
        let cross = !physical;
        let mut same = used.get(p) as i64;
        let mut higher = 0i64;
        let mut free = total;
        for &(prio, n) in &used.0 {
            let n = n as i64;
            if cross {
                if prio != p {
                    same += n;
                }
            } else if prio > p {
                higher += n;
            }
            if prio >= p {
                free -= n;
            }
        }
        let phys = if physical {
            Some(cell)
        } else {
            self.vcells[cell].phys
        };
        let ok = match phys {
            None => true,
            // The node is read only when suggestions are heeded.
            Some(pc) => {
                let c = &self.pcells[pc];
                c.healthy && (ctx.ignore || ctx.node_ok(c.nodes[0]))
            }
        };
        NodeInfo {
            cell,
            free,
            same,
            higher,
            ok,
        }
    }

    fn sort_and_fit(
        &mut self,
        id: &ViewId,
        physical: bool,
        pods: &[usize],
        p: i32,
        ctx: &Ctx<'_>,
    ) -> Result<Vec<usize>, String> {
        let mut view = std::mem::take(self.view_mut(id));
        let mut infos = std::mem::take(&mut self.node_infos);
        infos.clear();
        infos.extend(view.iter().map(|&c| self.node_info(physical, c, p, ctx)));
        crate::gosort::stable(&mut infos, &mut |a: &NodeInfo, b: &NodeInfo| {
            if !b.ok {
                true
            } else if !a.ok {
                false
            } else if a.same != b.same {
                a.same > b.same
            } else {
                a.higher < b.higher
            }
        });
        view.clear();
        view.extend(infos.iter().map(|n| n.cell));
        *self.view_mut(id) = view;
        let fit = self.fit(&infos, physical, pods);
        self.node_infos = infos;
        fit
    }

    /// Takes consecutive nodes of the sorted view greedily for the pods, in order.
    fn fit(
        &self,
        infos: &[NodeInfo],
        physical: bool,
        pods: &[usize],
    ) -> Result<Vec<usize>, String> {
        let mut picked = Vec::with_capacity(pods.len());
        let mut taken = 0i64;
        let mut ni = 0;
        let mut pi = 0;
        while ni < infos.len() {
            let n = infos[ni];
            if !n.ok {
                let addr = if physical {
                    self.pcells[n.cell].address.clone()
                } else {
                    self.vcells[n.cell]
                        .phys
                        .map(|x| self.pcells[x].address.clone())
                        .unwrap_or_default()
                };
                return Err(format!(
                    "have to use at least one bad or non-suggested node {addr}"
                ));
            }
            if n.free - taken >= pods[pi] as i64 {
                picked.push(n.cell);
                taken += pods[pi] as i64;
                pi += 1;
                if pi == pods.len() {
                    return Ok(picked);
                }
            } else {
                taken = 0;
                ni += 1;
            }
        }
        Err("insufficient capacity".into())
    }

    /// Places a gang (`sizes`: (leaves per pod, pods), ascending) at priority `p`.
    pub(crate) fn topo_schedule(
        &mut self,
        id: ViewId,
        sizes: &[(usize, usize)],
        p: i32,
        ctx: &Ctx<'_>,
    ) -> Result<Placement, String> {
        let physical = matches!(id, ViewId::Opportunistic(_));
        let pods: Vec<usize> = sizes
            .iter()
            .flat_map(|&(s, n)| std::iter::repeat_n(s, n))
            .collect();
        let mut prio = OPPORTUNISTIC;
        let mut res = self.sort_and_fit(&id, physical, &pods, prio, ctx);
        if res.is_err() && p > OPPORTUNISTIC {
            prio = p;
            res = self.sort_and_fit(&id, physical, &pods, prio, ctx);
        }
        let nodes = res?;
        let mut avail: Map<usize, Vec<usize>> = Map::default();
        let mut out: Placement = sizes.iter().map(|&(_, n)| Vec::with_capacity(n)).collect();
        let mut si = 0;
        for (i, &size) in pods.iter().enumerate() {
            while sizes[si].0 != size {
                si += 1;
            }
            let node = nodes[i];
            let list = avail
                .entry(node)
                .or_insert_with(|| self.leaves_of(physical, node, prio));
            let chosen = pick_leaves(self, physical, list, size);
            out[si].push(chosen.into_iter().map(Some).collect());
        }
        Ok(out)
    }

    /// Free leaves then preemptible leaves (priority below `p`), depth first.
    fn leaves_of(&self, physical: bool, node: usize, p: i32) -> Vec<usize> {
        let mut free = Vec::new();
        let mut pre = Vec::new();
        let mut stack = vec![node];
        // Depth-first in child order.
        while let Some(c) = stack.pop() {
            let (level, prio, children): (usize, i32, &[usize]) = if physical {
                (
                    self.pcells[c].level,
                    self.pcells[c].priority,
                    &self.pcells[c].children,
                )
            } else {
                (
                    self.vcells[c].level,
                    self.vcells[c].priority,
                    &self.vcells[c].children,
                )
            };
            if level > 1 {
                stack.extend(children.iter().rev());
            } else if prio == FREE {
                free.push(c);
            } else if prio < p {
                pre.push(c);
            }
        }
        free.extend(pre);
        free
    }

    fn parent_of(&self, physical: bool, c: usize) -> Option<usize> {
        if physical {
            self.pcells[c].parent
        } else {
            self.vcells[c].parent
        }
    }
}

/// The first (in list order) `k` leaves whose lowest common ancestor is lowest, as
/// upstream's pruned search finds them; removes them from `list`.
fn pick_leaves(h: &Hived, physical: bool, list: &mut Vec<usize>, k: usize) -> Vec<usize> {
    let chain = if physical {
        list.first().map(|&c| h.pcells[c].chain)
    } else {
        list.first().map(|&c| h.vcells[c].chain)
    };
    let Some(chain) = chain else {
        return Vec::new();
    };
    let ch = &h.chains[chain];
    let optimal = (1..=ch.top)
        .find(|&l| ch.level_leaves[l] >= k)
        .unwrap_or(ch.top);
    let mut chosen: Option<Vec<usize>> = None;
    let mut anc: Vec<usize> = list.clone();
    let mut level = 1;
    while level <= ch.top {
        if level >= optimal {
            let best = first_group(&anc, k);
            if best.is_some() {
                chosen = best;
                break;
            }
        }
        // Move every ancestor one level up (cells already at the top stay).
        for a in anc.iter_mut() {
            if let Some(p) = h.parent_of(physical, *a) {
                *a = p;
            }
        }
        level += 1;
    }
    let idx = chosen.unwrap_or_else(|| (0..k.min(list.len())).collect());
    let picked: Vec<usize> = idx.iter().map(|&i| list[i]).collect();
    let mut j = 0;
    list.retain(|_| {
        let keep = !idx.contains(&j);
        j += 1;
        keep
    });
    picked
}

/// The first `k` positions of the ancestor that first appears in `anc` among those over
/// at least `k` positions. Upstream takes the least, compared as lists, of every such
/// ancestor's first `k` positions; ancestors' positions are disjoint, so that is the
/// one whose first position comes first. Lists are a node's leaves: quadratic is fine.
fn first_group(anc: &[usize], k: usize) -> Option<Vec<usize>> {
    (0..anc.len()).find_map(|i| {
        let a = anc[i];
        let first = !anc[..i].contains(&a);
        (first && anc[i..].iter().filter(|&&x| x == a).count() >= k)
            .then(|| (i..anc.len()).filter(|&j| anc[j] == a).take(k).collect())
    })
}

/// A node view over per-level cell lists: the node-level cells, then top-level cells
/// below node level (each treated as a node), in list order.
pub(super) fn new_view(
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

#[cfg(test)]
mod tests {
    use super::first_group;

    /// Upstream's form: group positions by ancestor, keep groups of at least `k`, take
    /// the least of their first `k` positions.
    fn upstream(anc: &[usize], k: usize) -> Option<Vec<usize>> {
        let mut groups: Vec<(usize, Vec<usize>)> = Vec::new();
        for (i, &a) in anc.iter().enumerate() {
            match groups.iter_mut().find(|g| g.0 == a) {
                Some(g) => g.1.push(i),
                None => groups.push((a, vec![i])),
            }
        }
        groups
            .into_iter()
            .filter(|g| g.1.len() >= k)
            .map(|g| g.1[..k].to_vec())
            .min()
    }

    #[test]
    fn first_group_is_upstreams_least_group() {
        // Every list of up to 7 ancestors drawn from 3 values, every k up to 8.
        let mut checked = 0;
        for len in 0..=7u32 {
            for code in 0..3usize.pow(len) {
                let anc: Vec<usize> = (0..len).map(|d| code / 3usize.pow(d) % 3).collect();
                for k in 0..=8 {
                    assert_eq!(first_group(&anc, k), upstream(&anc, k), "{anc:?} k={k}");
                    checked += 1;
                }
            }
        }
        assert!(checked > 10_000);
    }
}
