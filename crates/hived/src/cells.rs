//! The cell forest: physical cells, each VC's virtual cells, and building both from a
//! validated [`Config`].
//!
//! Cells live in two arenas (`Vec<PCell>`, `Vec<VCell>`) and point at each other by
//! index, so binding and unbinding are index writes and the whole state clones cheaply
//! for recovery checks. Levels count from 1 (leaf) upwards, as in HiveD.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::config::{
    Config, ConfigError, MAX_CELLS, TypeInfo, invalid, resolve_types, validate_vcs,
};

/// Priority of a free cell.
pub const FREE: i32 = -2;
/// Priority of opportunistic use.
pub const OPPORTUNISTIC: i32 = -1;
/// Highest guaranteed priority.
pub const MAX_PRIORITY: i32 = 1000;

/// A leaf cell's (and by derivation its ancestors') allocation state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum CellState {
    /// Nobody uses or reserves it.
    Free,
    /// A running group uses it.
    Used,
    /// A group uses it and a preemptor has reserved it.
    Reserving,
    /// A preemptor has reserved it; nobody uses it.
    Reserved,
}

/// Leaf counts in use per priority, kept sorted by priority (a handful of entries).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Used(pub Vec<(i32, u32)>);

impl Used {
    pub fn get(&self, p: i32) -> u32 {
        self.0.iter().find(|e| e.0 == p).map_or(0, |e| e.1)
    }
    pub fn add(&mut self, p: i32, delta: i64) {
        match self.0.binary_search_by_key(&p, |e| e.0) {
            Ok(i) => {
                let n = self.0[i].1 as i64 + delta;
                if n <= 0 {
                    self.0.remove(i);
                } else {
                    self.0[i].1 = n as u32;
                }
            }
            Err(i) => {
                if delta > 0 {
                    self.0.insert(i, (p, delta as u32));
                }
            }
        }
    }
}

/// Per-chain shape: the cell type, leaf count and fan-out at every level.
#[derive(Debug, Clone)]
pub(crate) struct Chain {
    pub name: String,
    pub leaf_type: String,
    /// Number of levels; index 0 of the per-level vectors is unused.
    pub top: usize,
    pub level_type: Vec<String>,
    pub level_leaves: Vec<usize>,
    pub level_fanout: Vec<usize>,
    pub level_at_or_above_node: Vec<bool>,
    pub level_is_node: Vec<bool>,
    /// Every physical cell of the chain, per level, in build (config, depth-first) order.
    pub full: Vec<Vec<usize>>,
}

#[derive(Debug, Clone)]
pub(crate) struct PCell {
    pub chain: usize,
    pub level: usize,
    pub address: String,
    pub parent: Option<usize>,
    pub children: Vec<usize>,
    /// Node ids it spans.
    pub nodes: Vec<usize>,
    /// Device indices for cells at or below node level, `[-1]` above.
    pub leaf_indices: Vec<i32>,
    pub priority: i32,
    pub state: CellState,
    pub used: Used,
    pub using: Option<usize>,
    pub reserving: Option<usize>,
    pub virt: Option<usize>,
    pub split: bool,
    pub pinned: Option<String>,
    pub healthy: bool,
    /// VC of the opportunistic group using this leaf, for status.
    pub opp_vc: Option<usize>,
}

#[derive(Debug, Clone)]
pub(crate) struct VCell {
    pub vc: usize,
    pub chain: usize,
    pub level: usize,
    pub address: String,
    pub parent: Option<usize>,
    pub children: Vec<usize>,
    pub preassigned: usize,
    pub priority: i32,
    pub used: Used,
    pub phys: Option<usize>,
}

/// A VC's cells in one chain (non-pinned) or one pinned cell.
#[derive(Debug, Clone, Default)]
pub(crate) struct VcCells {
    /// All virtual cells per level (index 0 unused).
    pub full: Vec<Vec<usize>>,
    /// Preassigned cells per level.
    pub preassigned: Vec<Vec<usize>>,
    /// Persistent node view of the topology-aware scheduler.
    pub view: Vec<usize>,
}

#[derive(Debug, Clone)]
pub(crate) struct Vc {
    pub name: String,
    /// Non-pinned cells by chain id.
    pub chains: BTreeMap<usize, VcCells>,
    /// Pinned cells by id: (cells, physical cell).
    pub pinned: BTreeMap<String, (VcCells, usize)>,
    /// Not in the config: a reconfiguration deleted it, and it exists only to hold the
    /// recovered groups that still run under its name (lazily preempted, no cells).
    pub retired: bool,
}

/// Everything built from a config before any allocation.
#[derive(Debug, Clone)]
pub(crate) struct Built {
    pub chains: Vec<Chain>,
    pub pcells: Vec<PCell>,
    pub vcells: Vec<VCell>,
    pub vcs: Vec<Vc>,
    pub nodes: Vec<String>,
    pub node_ids: BTreeMap<String, usize>,
    /// Leaves on each node, chain by chain in leaf order.
    pub node_leaves: Vec<Vec<usize>>,
    /// Leaf type -> chain ids, descending by chain name.
    pub leaf_chains: BTreeMap<String, Vec<usize>>,
    /// Top-level physical cells per chain in config order (the initial free lists).
    pub tops: Vec<Vec<usize>>,
    /// vcFreeCellNum before pinned binding: [vc][chain][level].
    pub vc_free: Vec<Vec<Vec<i64>>>,
    /// Pinned cells per VC: (vc, pinned id, physical cell, virtual root).
    pub pinned: Vec<(usize, String, usize, usize)>,
    pub chain_ids: BTreeMap<String, usize>,
}

struct Builder<'a> {
    types: &'a BTreeMap<String, TypeInfo>,
    built: Built,
    addresses: BTreeSet<String>,
    leaf_keys: BTreeSet<(usize, usize, i32)>,
    pinned_ids: BTreeMap<String, usize>,
}

impl Built {
    pub fn from_config(raw: &Config) -> Result<Built, ConfigError> {
        let types = resolve_types(&raw.physical_cluster.cell_types)?;
        if raw.physical_cluster.physical_cells.is_empty() {
            return Err(invalid(
                "physicalCluster.physicalCells",
                "no physical cells: a HiveD config needs at least one",
            ));
        }
        check_cell_count(raw, &types)?;
        let cfg = raw.defaulted();
        let mut chain_names = BTreeSet::new();
        for (i, top) in cfg.physical_cluster.physical_cells.iter().enumerate() {
            let path = format!("physicalCluster.physicalCells[{i}].cellType");
            match raw.physical_cluster.cell_types.get(&top.cell_type) {
                None if top.cell_type.is_empty() => return Err(invalid(path, "missing")),
                None => {
                    return Err(invalid(
                        path,
                        format!(
                            "unknown cell type {} (not defined in cellTypes)",
                            top.cell_type
                        ),
                    ));
                }
                Some(_) => {}
            }
            if !types[&top.cell_type].has_node {
                return Err(invalid(
                    path,
                    format!(
                        "top-level cell type {} must be node level or above",
                        top.cell_type
                    ),
                ));
            }
            chain_names.insert(top.cell_type.clone());
        }
        let chain_ids: BTreeMap<String, usize> = chain_names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.clone(), i))
            .collect();
        let mut chains = Vec::new();
        for name in &chain_names {
            let mut level_type = vec![String::new()];
            let mut level_leaves = vec![0];
            let mut level_fanout = vec![0];
            let mut level_above = vec![false];
            let mut level_node = vec![false];
            let mut t = name.clone();
            let mut stack = Vec::new();
            loop {
                stack.push(t.clone());
                match &types[&t].child {
                    Some(c) => t = c.clone(),
                    None => break,
                }
            }
            for t in stack.iter().rev() {
                let ti = &types[t];
                level_type.push(t.clone());
                level_leaves.push(ti.leaf_count);
                level_fanout.push(ti.fanout);
                level_above.push(ti.has_node);
                level_node.push(ti.is_node_level);
            }
            let top = stack.len();
            chains.push(Chain {
                name: name.clone(),
                leaf_type: types[name].leaf_type.clone(),
                top,
                level_type,
                level_leaves,
                level_fanout,
                level_at_or_above_node: level_above,
                level_is_node: level_node,
                full: vec![Vec::new(); top + 1],
            });
        }
        let mut b = Builder {
            types: &types,
            built: Built {
                chains,
                pcells: Vec::new(),
                vcells: Vec::new(),
                vcs: Vec::new(),
                nodes: Vec::new(),
                node_ids: BTreeMap::new(),
                node_leaves: Vec::new(),
                leaf_chains: BTreeMap::new(),
                tops: vec![Vec::new(); chain_names.len()],
                vc_free: Vec::new(),
                pinned: Vec::new(),
                chain_ids: chain_ids.clone(),
            },
            addresses: BTreeSet::new(),
            leaf_keys: BTreeSet::new(),
            pinned_ids: BTreeMap::new(),
        };
        for (i, top) in cfg.physical_cluster.physical_cells.iter().enumerate() {
            let chain = chain_ids[&top.cell_type];
            let path = format!("physicalCluster.physicalCells[{i}]");
            let id = b.physical(top, &top.cell_type, chain, None, None, &path)?;
            b.built.tops[chain].push(id);
        }
        validate_vcs(raw, &types, &chain_names, &b.pinned_ids)?;
        // Node leaves, chain by chain.
        let mut node_leaves = vec![Vec::new(); b.built.nodes.len()];
        for ch in &b.built.chains {
            for &leaf in &ch.full[1] {
                node_leaves[b.built.pcells[leaf].nodes[0]].push(leaf);
            }
        }
        b.built.node_leaves = node_leaves;
        for (id, ch) in b.built.chains.iter().enumerate().rev() {
            b.built
                .leaf_chains
                .entry(ch.leaf_type.clone())
                .or_default()
                .push(id);
        }
        b.virtuals(raw)?;
        Ok(b.built)
    }
}

/// Refuses a physical cluster of more than [`MAX_CELLS`] cells before any is built:
/// `cellNumber`s and fan-outs multiply, and defaulting would allocate every cell.
fn check_cell_count(raw: &Config, types: &BTreeMap<String, TypeInfo>) -> Result<(), ConfigError> {
    let mut total = 0usize;
    let mut stack: Vec<(&crate::config::PhysicalCellSpec, &str)> = Vec::new();
    for (i, top) in raw.physical_cluster.physical_cells.iter().enumerate() {
        stack.push((top, &top.cell_type));
        while let Some((spec, cell_type)) = stack.pop() {
            let ti = types.get(cell_type);
            if spec.cell_children.is_empty() {
                // Defaulting gives every child: the type's full subtree.
                total = total.saturating_add(ti.map_or(1, |t| t.cells));
            } else {
                total = total.saturating_add(1);
                let child = ti.and_then(|t| t.child.as_deref()).unwrap_or("");
                stack.extend(spec.cell_children.iter().map(|c| (c, child)));
            }
            if total > MAX_CELLS {
                return Err(invalid(
                    format!("physicalCluster.physicalCells[{i}]"),
                    format!("the physical cells up to this one hold more than {MAX_CELLS} cells"),
                ));
            }
        }
    }
    Ok(())
}

impl Builder<'_> {
    fn physical(
        &mut self,
        spec: &crate::config::PhysicalCellSpec,
        cell_type: &str,
        chain: usize,
        parent: Option<usize>,
        node: Option<usize>,
        path: &str,
    ) -> Result<usize, ConfigError> {
        if spec.cell_type != cell_type {
            return Err(invalid(
                format!("{path}.cellType"),
                format!(
                    "{} given where the parent's type requires {cell_type}",
                    spec.cell_type
                ),
            ));
        }
        let ti = &self.types[cell_type];
        if !self.addresses.insert(spec.cell_address.clone()) {
            return Err(invalid(
                format!("{path}.cellAddress"),
                format!("duplicate cell address {}", spec.cell_address),
            ));
        }
        let last = spec
            .cell_address
            .rsplit('/')
            .next()
            .unwrap_or_default()
            .to_string();
        let mut node = node;
        if ti.has_node && !ti.multi_node {
            if last.is_empty() {
                return Err(invalid(format!("{path}.cellAddress"), "empty node name"));
            }
            let next = self.built.nodes.len();
            let id = *self.built.node_ids.entry(last.clone()).or_insert(next);
            if id == next {
                self.built.nodes.push(last.clone());
            }
            node = Some(id);
        }
        let id = self.built.pcells.len();
        self.built.pcells.push(PCell {
            chain,
            level: ti.level,
            address: spec.cell_address.clone(),
            parent,
            children: Vec::new(),
            nodes: Vec::new(),
            leaf_indices: Vec::new(),
            priority: FREE,
            state: CellState::Free,
            used: Used::default(),
            using: None,
            reserving: None,
            virt: None,
            split: false,
            pinned: None,
            healthy: true,
            opp_vc: None,
        });
        self.built.chains[chain].full[ti.level].push(id);
        if !spec.pinned_cell_id.is_empty() {
            if self
                .pinned_ids
                .insert(spec.pinned_cell_id.clone(), id)
                .is_some()
            {
                return Err(invalid(
                    format!("{path}.pinnedCellId"),
                    format!("duplicate pinnedCellId {}", spec.pinned_cell_id),
                ));
            }
            self.built.pcells[id].pinned = Some(spec.pinned_cell_id.clone());
        }
        if ti.level == 1 {
            let Some(n) = node else {
                return Err(invalid(
                    format!("{path}.cellType"),
                    format!(
                        "leaf cell {} is not inside a node-level cell",
                        spec.cell_address
                    ),
                ));
            };
            let index: i32 = last.parse().map_err(|_| {
                invalid(
                    format!("{path}.cellAddress"),
                    format!(
                        "leaf cell address must end in a device index, got {}",
                        spec.cell_address
                    ),
                )
            })?;
            if !self.leaf_keys.insert((chain, n, index)) {
                return Err(invalid(
                    format!("{path}.cellAddress"),
                    format!(
                        "device index {index} appears twice on node {}",
                        self.built.nodes[n]
                    ),
                ));
            }
            let c = &mut self.built.pcells[id];
            c.nodes = vec![n];
            c.leaf_indices = vec![index];
            return Ok(id);
        }
        if spec.cell_children.len() != ti.fanout {
            return Err(invalid(
                format!("{path}.cellChildren"),
                format!(
                    "bad fan-out: {} children given, type {cell_type} has childCellNumber {}",
                    spec.cell_children.len(),
                    ti.fanout
                ),
            ));
        }
        let child_type = ti.child.clone().unwrap_or_default();
        let mut children = Vec::with_capacity(ti.fanout);
        let mut nodes = Vec::new();
        let mut indices = Vec::new();
        for (i, cs) in spec.cell_children.iter().enumerate() {
            let cid = self.physical(
                cs,
                &child_type,
                chain,
                Some(id),
                node,
                &format!("{path}.cellChildren[{i}]"),
            )?;
            children.push(cid);
            let c = &self.built.pcells[cid];
            if ti.multi_node {
                nodes.extend(c.nodes.iter().copied());
            } else {
                indices.extend(c.leaf_indices.iter().copied());
            }
        }
        let c = &mut self.built.pcells[id];
        c.children = children;
        if ti.multi_node {
            c.nodes = nodes;
            c.leaf_indices = vec![-1];
        } else {
            c.nodes = node.into_iter().collect();
            c.leaf_indices = indices;
        }
        Ok(id)
    }

    /// Each VC's preassigned and pinned cells per chain and level: what `vc_free`
    /// starts at, counted before any virtual cell is built.
    fn vc_needs(&self, raw: &Config) -> Vec<Vec<Vec<i64>>> {
        raw.virtual_clusters
            .values()
            .map(|spec| {
                let mut need: Vec<Vec<i64>> = self
                    .built
                    .chains
                    .iter()
                    .map(|c| vec![0; c.top + 1])
                    .collect();
                for v in &spec.virtual_cells {
                    let parts: Vec<&str> = v.cell_type.split('.').collect();
                    let chain = self.built.chain_ids[parts[0]];
                    let level = self.types[parts[parts.len() - 1]].level;
                    need[chain][level] = need[chain][level].saturating_add(v.cell_number);
                }
                for p in &spec.pinned_cells {
                    let pc = &self.built.pcells[self.pinned_ids[&p.pinned_cell_id]];
                    need[pc.chain][pc.level] = need[pc.chain][pc.level].saturating_add(1);
                }
                need
            })
            .collect()
    }

    /// HiveD's start-up safety check (hived.md §5.1), before any virtual cell is built:
    /// the VCs' cells, level by level from the top, must fit the physical cells left
    /// over, so a `cellNumber` in the billions is refused without allocating.
    fn check_vc_capacity(&self, needs: &[Vec<Vec<i64>>]) -> Result<(), ConfigError> {
        for (c, ch) in self.built.chains.iter().enumerate() {
            let mut available = self.built.tops[c].len() as i64;
            for l in (1..=ch.top).rev() {
                let need = needs.iter().fold(0i64, |n, vc| n.saturating_add(vc[c][l]));
                let left = available - need;
                if left < 0 {
                    return Err(invalid(
                        "virtualClusters",
                        format!(
                            "the VC assignment cannot map onto the physical cells: chain {} level {} ({}) needs {} cells, {} available",
                            ch.name, l, ch.level_type[l], need, available
                        ),
                    ));
                }
                available = left.saturating_mul(ch.level_fanout[l] as i64);
            }
        }
        Ok(())
    }

    fn virtuals(&mut self, raw: &Config) -> Result<(), ConfigError> {
        let needs = self.vc_needs(raw);
        self.check_vc_capacity(&needs)?;
        for (vi, ((vname, spec), free)) in raw.virtual_clusters.iter().zip(needs).enumerate() {
            let mut vc = Vc {
                name: vname.clone(),
                chains: BTreeMap::new(),
                pinned: BTreeMap::new(),
                retired: false,
            };
            let mut count = 0usize;
            for v in &spec.virtual_cells {
                let parts: Vec<&str> = v.cell_type.split('.').collect();
                let chain = self.built.chain_ids[parts[0]];
                let root_type = parts[parts.len() - 1];
                for _ in 0..v.cell_number {
                    let top = self.built.chains[chain].top;
                    let entry = vc.chains.entry(chain).or_insert_with(|| VcCells::new(top));
                    self.preassigned_root(entry, vi, chain, root_type, format!("{vname}/{count}"));
                    count += 1;
                }
            }
            for p in &spec.pinned_cells {
                let pid = self.pinned_ids[&p.pinned_cell_id];
                let pc = &self.built.pcells[pid];
                let chain = pc.chain;
                let level = pc.level;
                let root_type = self.built.chains[chain].level_type[level].clone();
                let mut cells = VcCells::new(self.built.chains[chain].top);
                let root = self.preassigned_root(
                    &mut cells,
                    vi,
                    chain,
                    &root_type,
                    format!("{vname}/{count}"),
                );
                count += 1;
                self.built
                    .pinned
                    .push((vi, p.pinned_cell_id.clone(), pid, root));
                vc.pinned.insert(p.pinned_cell_id.clone(), (cells, pid));
            }
            self.built.vc_free.push(free);
            self.built.vcs.push(vc);
        }
        Ok(())
    }
}

impl VcCells {
    fn new(top: usize) -> VcCells {
        VcCells {
            full: vec![Vec::new(); top + 1],
            preassigned: vec![Vec::new(); top + 1],
            view: Vec::new(),
        }
    }
}

impl Builder<'_> {
    /// Builds one preassigned virtual cell (a full subtree) into `cells`.
    fn preassigned_root(
        &mut self,
        cells: &mut VcCells,
        vc: usize,
        chain: usize,
        cell_type: &str,
        address: String,
    ) -> usize {
        let root = build_virtual(
            &mut self.built.vcells,
            self.types,
            &mut cells.full,
            vc,
            chain,
            cell_type,
            address,
            None,
            None,
        );
        cells.preassigned[self.types[cell_type].level].push(root);
        root
    }
}

#[allow(clippy::too_many_arguments)]
fn build_virtual(
    vcells: &mut Vec<VCell>,
    types: &BTreeMap<String, TypeInfo>,
    full: &mut [Vec<usize>],
    vc: usize,
    chain: usize,
    cell_type: &str,
    address: String,
    parent: Option<usize>,
    preassigned: Option<usize>,
) -> usize {
    let ti = &types[cell_type];
    let id = vcells.len();
    vcells.push(VCell {
        vc,
        chain,
        level: ti.level,
        address: address.clone(),
        parent,
        children: Vec::new(),
        preassigned: preassigned.unwrap_or(id),
        priority: FREE,
        used: Used::default(),
        phys: None,
    });
    full[ti.level].push(id);
    if ti.level == 1 {
        return id;
    }
    let parts = address.split('/').count();
    let offset = if parts == 2 {
        0
    } else {
        address
            .rsplit('/')
            .next()
            .and_then(|s| s.parse::<usize>().ok())
            .unwrap_or(0)
            * ti.fanout
    };
    let child_type = ti.child.clone().unwrap_or_default();
    let mut children = Vec::with_capacity(ti.fanout);
    for i in 0..ti.fanout {
        let c = build_virtual(
            vcells,
            types,
            full,
            vc,
            chain,
            &child_type,
            format!("{address}/{}", offset + i),
            Some(id),
            Some(preassigned.unwrap_or(id)),
        );
        children.push(c);
    }
    vcells[id].children = children;
    id
}
