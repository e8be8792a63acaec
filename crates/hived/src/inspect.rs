//! Status in the shapes of HiveD's inspect API (`/v1/inspect/affinitygroups`,
//! `/v1/inspect/clusterstatus`), so the CLI, the replay tool and the live service print
//! the same JSON upstream's clients read.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::algo::{GroupState, Hived};
use crate::cells::CellState;

/// `AffinityGroup`.
#[derive(Debug, Clone, Serialize)]
pub struct AffinityGroup {
    /// `{name}`.
    pub metadata: Metadata,
    /// The group's status.
    pub status: AffinityGroupStatus,
}

/// `metadata`.
#[derive(Debug, Clone, Serialize)]
pub struct Metadata {
    /// Group name.
    pub name: String,
}

/// `AffinityGroupStatus`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AffinityGroupStatus {
    /// VC.
    pub vc: String,
    /// Priority.
    pub priority: i32,
    /// State.
    pub state: GroupState,
    /// Node -> device indices.
    pub physical_placement: BTreeMap<String, Vec<i32>>,
    /// Preassigned cell address -> virtual leaf addresses; absent when opportunistic or
    /// lazily preempted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub virtual_placement: Option<BTreeMap<String, Vec<String>>>,
    /// Bound pods.
    pub allocated_pods: Vec<String>,
    /// Pods of a preempting group waiting for their victims.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub preempting_pods: Vec<String>,
    /// Set once lazily preempted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lazy_preemption_status: Option<LazyPreemptionStatus>,
}

/// `LazyPreemptionStatus`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LazyPreemptionStatus {
    /// The group that caused it.
    pub preemptor: String,
    /// When (the caller's clock, ms).
    pub preemption_time: i64,
}

/// `CellStatus` plus the physical or virtual extras.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CellStatus {
    /// Leaf type (top-level cells only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub leaf_cell_type: Option<String>,
    /// Cell type.
    pub cell_type: String,
    /// Whether the cell is exactly one node.
    pub is_node_level: bool,
    /// Address.
    pub cell_address: String,
    /// Free, Used, Reserving, Reserved.
    pub cell_state: CellState,
    /// Healthy or Bad.
    pub cell_healthiness: &'static str,
    /// Priority (-2 free, -1 opportunistic).
    pub cell_priority: i32,
    /// VC bound to or using it (physical cells).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vc: Option<String>,
    /// The bound virtual cell, without children (physical cells).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub virtual_cell: Option<Box<CellStatus>>,
    /// The bound physical cell, without children (virtual cells).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub physical_cell: Option<Box<CellStatus>>,
    /// Children.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cell_children: Vec<CellStatus>,
}

/// `ClusterStatus`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatus {
    /// Top-level physical cells (full trees).
    pub physical_cluster: Vec<CellStatus>,
    /// Per VC: preassigned and pinned cells, then `<address>-opp` pseudo cells for
    /// opportunistic use.
    pub virtual_clusters: BTreeMap<String, Vec<CellStatus>>,
}

fn health(ok: bool) -> &'static str {
    if ok { "Healthy" } else { "Bad" }
}

impl Hived {
    /// All allocated and preempting groups, by name.
    pub fn affinity_groups(&self) -> Vec<AffinityGroup> {
        let mut named: Vec<(&String, usize)> =
            self.group_ids.iter().map(|(n, &g)| (n, g)).collect();
        named.sort_unstable();
        named
            .into_iter()
            .map(|(_, g)| self.affinity_group_status(g))
            .collect()
    }

    /// One group, if allocated or preempting.
    pub fn affinity_group(&self, name: &str) -> Option<AffinityGroup> {
        self.group_ids
            .get(name)
            .map(|&g| self.affinity_group_status(g))
    }

    fn affinity_group_status(&self, g: usize) -> AffinityGroup {
        let gr = self.group(g);
        let mut phys: BTreeMap<String, Vec<i32>> = BTreeMap::new();
        let mut virt: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (si, pi, li, p) in gr.leaves() {
            phys.entry(self.nodes[self.pcells[p].nodes[0]].clone())
                .or_default()
                .push(self.pcells[p].leaf_indices[0]);
            if let Some(v) = gr.virt.as_ref().and_then(|v| v[si][pi][li]) {
                let pre = self.vcells[v].preassigned;
                virt.entry(self.vcells[pre].address.clone())
                    .or_default()
                    .push(self.vcells[v].address.clone());
            }
        }
        AffinityGroup {
            metadata: Metadata {
                name: gr.name.clone(),
            },
            status: AffinityGroupStatus {
                vc: self.vcs[gr.vc].name.clone(),
                priority: gr.priority,
                state: gr.state,
                physical_placement: phys,
                virtual_placement: gr.virt.as_ref().map(|_| virt),
                allocated_pods: gr
                    .allocated
                    .iter()
                    .flatten()
                    .flatten()
                    .map(|(p, _)| p.clone())
                    .collect(),
                preempting_pods: gr.preempting.iter().cloned().collect(),
                lazy_preemption_status: gr.lazy.as_ref().map(|(p, t)| LazyPreemptionStatus {
                    preemptor: p.clone(),
                    preemption_time: *t,
                }),
            },
        }
    }

    fn physical_status(&self, c: usize, deep: bool) -> CellStatus {
        let pc = &self.pcells[c];
        let ch = &self.chains[pc.chain];
        let vc = match pc.virt {
            Some(v) => Some(self.vcs[self.vcells[v].vc].name.clone()),
            None => pc.opp_vc.map(|v| self.vcs[v].name.clone()),
        };
        CellStatus {
            leaf_cell_type: (pc.parent.is_none()).then(|| ch.leaf_type.clone()),
            cell_type: ch.level_type[pc.level].clone(),
            is_node_level: ch.level_is_node[pc.level],
            cell_address: pc.address.clone(),
            cell_state: pc.state,
            cell_healthiness: health(pc.healthy),
            cell_priority: pc.priority,
            vc,
            virtual_cell: if deep {
                pc.virt.map(|v| Box::new(self.virtual_status(v, false)))
            } else {
                None
            },
            physical_cell: None,
            cell_children: if deep {
                pc.children
                    .iter()
                    .map(|&x| self.physical_status(x, true))
                    .collect()
            } else {
                Vec::new()
            },
        }
    }

    fn virtual_status(&self, c: usize, deep: bool) -> CellStatus {
        let vcell = &self.vcells[c];
        let ch = &self.chains[vcell.chain];
        let (state, healthy) = match vcell.phys {
            Some(p) => (self.pcells[p].state, self.pcells[p].healthy),
            None => (CellState::Free, true),
        };
        CellStatus {
            leaf_cell_type: (vcell.parent.is_none()).then(|| ch.leaf_type.clone()),
            cell_type: ch.level_type[vcell.level].clone(),
            is_node_level: ch.level_is_node[vcell.level],
            cell_address: vcell.address.clone(),
            cell_state: state,
            cell_healthiness: health(healthy),
            cell_priority: vcell.priority,
            vc: None,
            virtual_cell: None,
            physical_cell: if deep {
                vcell.phys.map(|p| Box::new(self.physical_status(p, false)))
            } else {
                None
            },
            cell_children: if deep {
                vcell
                    .children
                    .iter()
                    .map(|&x| self.virtual_status(x, true))
                    .collect()
            } else {
                Vec::new()
            },
        }
    }

    /// The physical cluster's status: every top-level cell with its subtree.
    pub fn physical_cluster_status(&self) -> Vec<CellStatus> {
        self.chains
            .iter()
            .flat_map(|ch| ch.full[ch.top].iter())
            .map(|&c| self.physical_status(c, true))
            .collect()
    }

    /// One VC's status, if it exists.
    pub fn virtual_cluster_status(&self, vc: &str) -> Option<Vec<CellStatus>> {
        let vi = self.vc_index(vc)?;
        let mut out = Vec::new();
        for cells in self.vcs[vi].chains.values() {
            for level in &cells.preassigned {
                for &c in level {
                    out.push(self.virtual_status(c, true));
                }
            }
        }
        for (cells, _) in self.vcs[vi].pinned.values() {
            for level in &cells.preassigned {
                for &c in level {
                    out.push(self.virtual_status(c, true));
                }
            }
        }
        for ch in &self.chains {
            for &leaf in &ch.full[1] {
                let pc = &self.pcells[leaf];
                if pc.priority == crate::cells::OPPORTUNISTIC && pc.opp_vc == Some(vi) {
                    let mut s = self.physical_status(leaf, false);
                    s.cell_address = format!("{}-opp", pc.address);
                    s.vc = None;
                    out.push(CellStatus {
                        physical_cell: Some(Box::new(self.physical_status(leaf, false))),
                        ..s
                    });
                }
            }
        }
        Some(out)
    }

    /// The whole `clusterstatus` document.
    pub fn cluster_status(&self) -> ClusterStatus {
        ClusterStatus {
            physical_cluster: self.physical_cluster_status(),
            virtual_clusters: self
                .vcs
                .iter()
                .map(|v| {
                    (
                        v.name.clone(),
                        self.virtual_cluster_status(&v.name).unwrap_or_default(),
                    )
                })
                .collect(),
        }
    }
}
