//! The tenant table: how many nodes each VC gets, from the trace's demand or an explicit
//! `cells` list.

use super::DEFAULT_VC;
use apiary_model::{Cluster, Job};
use std::collections::BTreeMap;

/// Why a tenant table does not fit the cluster or its jobs.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TableError {
    /// Nodes of different sizes.
    #[error("VC sharing needs nodes of one size; cluster {cluster} mixes GPU counts per node")]
    MixedNodes {
        /// The cluster.
        cluster: String,
    },
    /// The VCs' largest jobs do not fit side by side.
    #[error("the cluster has {nodes} nodes but the VCs' largest jobs alone need {need}")]
    TooSmall {
        /// Nodes in the cluster.
        nodes: u32,
        /// Nodes the largest jobs need.
        need: u32,
    },
    /// A `cells` entry that is not `vc:nodes`.
    #[error("cells: '{0}' is not vc:nodes")]
    NotVcNodes(String),
    /// A VC named twice in `cells`.
    #[error("cells: VC {0} is given twice")]
    Twice(String),
    /// A VC given fewer nodes than its largest job needs.
    #[error("cells: VC {vc} has {have} nodes but its largest job needs {gpus} GPUs ({need} nodes)")]
    Short {
        /// The VC.
        vc: String,
        /// Nodes given.
        have: u32,
        /// Its largest job's GPUs.
        gpus: u32,
        /// Nodes that job needs.
        need: u32,
    },
    /// More nodes given than the cluster has.
    #[error("cells: {given} nodes given but the cluster has {nodes}")]
    OverGiven {
        /// Nodes given.
        given: u32,
        /// Nodes in the cluster.
        nodes: u32,
    },
}

/// Nodes per VC.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assignment {
    /// `(vc, nodes)` in VC name order.
    pub vcs: Vec<(String, u32)>,
    /// GPUs per node.
    pub node_gpus: u32,
}

/// Reads the `cells` parameter and sizes every VC of a run's jobs: the simulator's
/// tenant table, which it can draw from the whole trace.
pub fn assign(c: &Cluster, jobs: &[Job], cells: &str) -> Result<Assignment, TableError> {
    let node_gpus = c.nodes.first().map_or(0, |n| n.gpus);
    if c.nodes.iter().any(|n| n.gpus != node_gpus) {
        return Err(TableError::MixedNodes {
            cluster: c.name.clone(),
        });
    }
    // Per VC: GPU-time demand and the largest job.
    let mut demand: BTreeMap<&str, (u128, u32)> = BTreeMap::new();
    for j in jobs {
        let e = demand
            .entry(j.vc.as_deref().unwrap_or(DEFAULT_VC))
            .or_default();
        e.0 += j.gpu_time();
        e.1 = e.1.max(j.gpus);
    }
    let nodes = c.nodes.len() as u32;
    let need = |max_gpus: u32| max_gpus.div_ceil(node_gpus.max(1));
    let vcs: Vec<(String, u32)> = if cells == "demand" {
        let min: Vec<u32> = demand.values().map(|d| need(d.1)).collect();
        let floor: u32 = min.iter().sum();
        if floor > nodes {
            return Err(TableError::TooSmall { nodes, need: floor });
        }
        let rest = (nodes - floor) as u128;
        let total: u128 = demand.values().map(|d| d.0).sum::<u128>().max(1);
        let mut got: Vec<u32> = Vec::with_capacity(min.len());
        let mut rem: Vec<(u128, usize)> = Vec::with_capacity(min.len());
        for (i, d) in demand.values().enumerate() {
            let exact = rest * d.0;
            got.push(min[i] + (exact / total) as u32);
            rem.push((exact % total, i));
        }
        let mut left = nodes - got.iter().sum::<u32>();
        // Largest remainder first; equal remainders in VC name order.
        rem.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        for &(_, i) in &rem {
            if left == 0 {
                break;
            }
            got[i] += 1;
            left -= 1;
        }
        demand.keys().map(|s| s.to_string()).zip(got).collect()
    } else {
        let given: BTreeMap<String, u32> = parse_cells(cells)?.into_iter().collect();
        for (vc, d) in &demand {
            let have = given.get(*vc).copied().unwrap_or(0);
            if have < need(d.1) {
                return Err(TableError::Short {
                    vc: vc.to_string(),
                    have,
                    gpus: d.1,
                    need: need(d.1),
                });
            }
        }
        let sum: u32 = given.values().sum();
        if sum > nodes {
            return Err(TableError::OverGiven { given: sum, nodes });
        }
        given.into_iter().collect()
    };
    Ok(Assignment { vcs, node_gpus })
}

/// Parses an explicit `vc:nodes,...` list.
pub(super) fn parse_cells(cells: &str) -> Result<Vec<(String, u32)>, TableError> {
    let mut given: BTreeMap<String, u32> = BTreeMap::new();
    for part in cells.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (vc, n) = part
            .rsplit_once(':')
            .and_then(|(v, n)| Some((v.trim(), n.trim().parse::<u32>().ok()?)))
            .ok_or_else(|| TableError::NotVcNodes(part.to_string()))?;
        if given.insert(vc.to_string(), n).is_some() {
            return Err(TableError::Twice(vc.to_string()));
        }
    }
    Ok(given.into_iter().collect())
}
