//! HiveD's own configuration shape (`physicalCluster`, `virtualClusters`), read from YAML
//! or JSON, with HiveD's address defaulting and validation that names the offending path.
//!
//! Upstream's top-level keys the scheduler does not read (`kubeApiServerAddress`,
//! `webServerAddress`, ...) are accepted and ignored, so an upstream config file loads
//! unchanged; any other top-level key is an error (a misspelt `physicalClusters` would
//! otherwise leave an empty cluster). Keys inside the sections are not checked, as
//! upstream's YAML reader does not.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Deserializer, Serialize};

/// A configuration error: the path of the offending field and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The text is not valid YAML/JSON or does not have the expected shape.
    #[error("{0}")]
    Parse(String),
    /// A field holds a value that is not allowed.
    #[error("{path}: {message}")]
    Invalid {
        /// Dotted path of the field, e.g. `physicalCluster.physicalCells[2].cellAddress`.
        path: String,
        /// What is wrong.
        message: String,
    },
}

pub(crate) fn invalid(path: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        path: path.into(),
        message: message.into(),
    }
}

/// The whole configuration file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Config {
    /// Cell types and physical cells.
    #[serde(default)]
    pub physical_cluster: PhysicalClusterSpec,
    /// Tenants and the cells each is guaranteed.
    #[serde(default)]
    pub virtual_clusters: BTreeMap<String, VirtualClusterSpec>,
}

/// `physicalCluster`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PhysicalClusterSpec {
    /// Composite cell types by name; a type used as a child but not defined is a leaf type.
    #[serde(default)]
    pub cell_types: BTreeMap<String, CellTypeSpec>,
    /// Top-level physical cells, each a full tree.
    #[serde(default)]
    pub physical_cells: Vec<PhysicalCellSpec>,
}

/// One composite cell type.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CellTypeSpec {
    /// Type of its children.
    #[serde(default)]
    pub child_cell_type: String,
    /// Fan-out.
    #[serde(default)]
    pub child_cell_number: i64,
    /// Whether a cell of this type is exactly one machine.
    #[serde(default)]
    pub is_node_level: bool,
}

/// One physical cell (and its subtree).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PhysicalCellSpec {
    /// Type; children inherit it from the parent's type when omitted.
    #[serde(default)]
    pub cell_type: String,
    /// Address component; defaults to a running index (see [`Config::defaulted`]).
    #[serde(default, deserialize_with = "string_or_number")]
    pub cell_address: String,
    /// Marks this cell as a pinned cell with this id.
    #[serde(default, deserialize_with = "string_or_number")]
    pub pinned_cell_id: String,
    /// Children; omitted or empty means all children with default addresses.
    #[serde(default, deserialize_with = "children")]
    pub cell_children: Vec<PhysicalCellSpec>,
}

/// One VC.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VirtualClusterSpec {
    /// Preassigned cells.
    #[serde(default, deserialize_with = "null_vec")]
    pub virtual_cells: Vec<VirtualCellSpec>,
    /// Pinned cells owned by this VC.
    #[serde(default, deserialize_with = "null_vec")]
    pub pinned_cells: Vec<PinnedCellSpec>,
}

/// `{cellType: CHAIN.T1...Tk, cellNumber: n}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VirtualCellSpec {
    /// Dotted path from a chain (top-level type) down to the preassigned cell's type.
    pub cell_type: String,
    /// How many such cells.
    #[serde(default)]
    pub cell_number: i64,
}

/// `{pinnedCellId: ID}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PinnedCellSpec {
    /// The id given to a physical cell.
    #[serde(deserialize_with = "string_or_number")]
    pub pinned_cell_id: String,
}

fn string_or_number<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum V {
        S(String),
        I(i64),
        F(f64),
        B(bool),
    }
    Ok(match Option::<V>::deserialize(d)? {
        None => String::new(),
        Some(V::S(s)) => s,
        Some(V::I(i)) => i.to_string(),
        Some(V::F(f)) => f.to_string(),
        Some(V::B(b)) => b.to_string(),
    })
}

/// Top-level keys of upstream HiveD's config (`pkg/api/config.go`): the two apiary
/// reads and the scheduler-process settings it ignores.
const TOP_LEVEL_KEYS: [&str; 9] = [
    "physicalCluster",
    "virtualClusters",
    "kubeApiServerAddress",
    "kubeConfigFilePath",
    "webServerAddress",
    "forcePodBindThreshold",
    "podBindAttempts",
    "waitingPodSchedulingBlockMilliSec",
    "quotaExcludeVCs",
];

fn children<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<PhysicalCellSpec>, D::Error> {
    Ok(Option::<Vec<PhysicalCellSpec>>::deserialize(d)?.unwrap_or_default())
}

fn null_vec<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Vec<T>, D::Error> {
    Ok(Option::<Vec<T>>::deserialize(d)?.unwrap_or_default())
}

impl Config {
    /// Parses YAML (JSON is YAML too, but a leading `{` is parsed as JSON for exact
    /// JSON error positions).
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        let json = text.trim_start().starts_with('{');
        // A misspelt top-level key (`physicalClusters`) would otherwise leave an empty
        // cluster; upstream's own keys are accepted and ignored.
        let keys: BTreeMap<String, serde::de::IgnoredAny> = if json {
            serde_json::from_str(text).map_err(|e| ConfigError::Parse(e.to_string()))?
        } else {
            serde_saphyr::from_str::<Option<BTreeMap<String, serde::de::IgnoredAny>>>(text)
                .map_err(|e| ConfigError::Parse(e.to_string()))?
                .unwrap_or_default()
        };
        if let Some(k) = keys.keys().find(|k| !TOP_LEVEL_KEYS.contains(&k.as_str())) {
            return Err(invalid(
                k.clone(),
                format!(
                    "unknown top-level key (known: {})",
                    TOP_LEVEL_KEYS.join(", ")
                ),
            ));
        }
        if json {
            serde_json::from_str(text).map_err(|e| ConfigError::Parse(e.to_string()))
        } else {
            serde_saphyr::from_str::<Option<Config>>(text)
                .map_err(|e| ConfigError::Parse(e.to_string()))
                .map(Option::unwrap_or_default)
        }
    }

    /// A copy with HiveD's address defaulting applied: a top-level cell's default
    /// component is its index in `physicalCells`; the i-th child of a cell whose default
    /// index is k gets `k*fanout + i`; the index restarts at 0 below a node-level cell.
    /// Every address becomes the full path `parent/child`.
    pub fn defaulted(&self) -> Config {
        let mut c = self.clone();
        let types = &self.physical_cluster.cell_types;
        for (i, cell) in c.physical_cluster.physical_cells.iter_mut().enumerate() {
            let t = cell.cell_type.clone();
            infer(cell, types, &t, i as i64, "");
        }
        c
    }
}

fn infer(
    spec: &mut PhysicalCellSpec,
    types: &BTreeMap<String, CellTypeSpec>,
    cell_type: &str,
    default_index: i64,
    prefix: &str,
) {
    if spec.cell_type.is_empty() {
        spec.cell_type = cell_type.to_string();
    }
    spec.cell_address = if spec.cell_address.is_empty() {
        format!("{prefix}{default_index}")
    } else {
        format!("{prefix}{}", spec.cell_address)
    };
    let Some(ct) = types.get(cell_type) else {
        return;
    };
    let index = if ct.is_node_level { 0 } else { default_index };
    if ct.child_cell_number > 0 && spec.cell_children.is_empty() {
        spec.cell_children = vec![PhysicalCellSpec::default(); ct.child_cell_number as usize];
    }
    let child_prefix = format!("{}/", spec.cell_address);
    for (i, child) in spec.cell_children.iter_mut().enumerate() {
        infer(
            child,
            types,
            &ct.child_cell_type,
            index.saturating_mul(ct.child_cell_number) + i as i64,
            &child_prefix,
        );
    }
}

/// A resolved cell type: its level and shape within the type forest.
#[derive(Debug, Clone)]
pub(crate) struct TypeInfo {
    pub level: usize,
    pub child: Option<String>,
    pub fanout: usize,
    /// The type or a descendant is node level.
    pub has_node: bool,
    /// A child type has a node level (this type spans several nodes).
    pub multi_node: bool,
    pub is_node_level: bool,
    pub leaf_type: String,
    pub leaf_count: usize,
    /// Cells in one full cell of this type, itself included (saturating).
    pub cells: usize,
}

/// The most levels a cell-type chain may have, leaf included. Real topologies have
/// fewer than ten (GPU, PCIe switch, socket, node, rack, pod); the bound keeps every
/// walk over a cell tree shallow, whatever a config says.
pub const MAX_LEVELS: usize = 64;

/// The most cells (at every level) the physical cluster may have; virtual cells cannot
/// outnumber physical ones, so the same bound holds for them. 100,000 GPUs in 8-GPU
/// nodes take about 200,000.
pub const MAX_CELLS: usize = 4_000_000;

/// Resolves every cell type (levels, leaf counts), rejecting cycles, bad fan-outs,
/// chains deeper than [`MAX_LEVELS`] and nested node levels. Iterative: a chain's
/// length costs no stack.
pub(crate) fn resolve_types(
    types: &BTreeMap<String, CellTypeSpec>,
) -> Result<BTreeMap<String, TypeInfo>, ConfigError> {
    let mut out: BTreeMap<String, TypeInfo> = BTreeMap::new();
    for name in types.keys() {
        // Walk down to a resolved type or a leaf type, then resolve upwards.
        let mut path: Vec<&str> = Vec::new();
        let mut on_path: BTreeSet<&str> = BTreeSet::new();
        let mut t: &str = name;
        loop {
            if out.contains_key(t) {
                break;
            }
            let Some(spec) = types.get(t) else {
                out.insert(
                    t.to_string(),
                    TypeInfo {
                        level: 1,
                        child: None,
                        fanout: 0,
                        has_node: false,
                        multi_node: false,
                        is_node_level: false,
                        leaf_type: t.to_string(),
                        leaf_count: 1,
                        cells: 1,
                    },
                );
                break;
            };
            let at = format!("physicalCluster.cellTypes.{t}");
            if !on_path.insert(t) {
                let from = path.iter().position(|p| *p == t).unwrap_or(0);
                return Err(invalid(
                    at,
                    format!(
                        "cell types form a cycle: {} -> {t}",
                        path[from..].join(" -> ")
                    ),
                ));
            }
            if spec.child_cell_type.is_empty() {
                return Err(invalid(at + ".childCellType", "missing"));
            }
            if spec.child_cell_number <= 0 || spec.child_cell_number > 4096 {
                return Err(invalid(
                    at + ".childCellNumber",
                    format!(
                        "bad fan-out {} (must be between 1 and 4096)",
                        spec.child_cell_number
                    ),
                ));
            }
            path.push(t);
            if path.len() >= MAX_LEVELS {
                return Err(invalid(
                    format!("physicalCluster.cellTypes.{name}"),
                    format!("the chain below {name} has more than {MAX_LEVELS} levels"),
                ));
            }
            t = &spec.child_cell_type;
        }
        for &t in path.iter().rev() {
            let spec = &types[t];
            let child = out[&spec.child_cell_type].clone();
            if child.level >= MAX_LEVELS {
                return Err(invalid(
                    format!("physicalCluster.cellTypes.{t}"),
                    format!("the chain below {t} has more than {MAX_LEVELS} levels"),
                ));
            }
            if spec.is_node_level && child.has_node {
                return Err(invalid(
                    format!("physicalCluster.cellTypes.{t}.isNodeLevel"),
                    format!(
                        "node-level type contains another node-level type below it ({})",
                        spec.child_cell_type
                    ),
                ));
            }
            let fanout = spec.child_cell_number as usize;
            out.insert(
                t.to_string(),
                TypeInfo {
                    level: child.level + 1,
                    child: Some(spec.child_cell_type.clone()),
                    fanout,
                    has_node: child.has_node || spec.is_node_level,
                    multi_node: child.has_node,
                    is_node_level: spec.is_node_level,
                    leaf_type: child.leaf_type.clone(),
                    leaf_count: child.leaf_count.saturating_mul(fanout),
                    cells: child.cells.saturating_mul(fanout).saturating_add(1),
                },
            );
        }
    }
    Ok(out)
}

/// Checks the VC section against the physical one (pinned ids, type paths).
pub(crate) fn validate_vcs(
    cfg: &Config,
    types: &BTreeMap<String, TypeInfo>,
    chains: &BTreeSet<String>,
    pinned: &BTreeMap<String, usize>,
) -> Result<(), ConfigError> {
    let mut pinned_owner: BTreeMap<&str, &str> = BTreeMap::new();
    for (vc, spec) in &cfg.virtual_clusters {
        if vc.is_empty() {
            return Err(invalid("virtualClusters", "empty VC name"));
        }
        for (i, v) in spec.virtual_cells.iter().enumerate() {
            let path = format!("virtualClusters.{vc}.virtualCells[{i}]");
            if v.cell_number < 0 {
                return Err(invalid(
                    path + ".cellNumber",
                    format!("negative cell number {}", v.cell_number),
                ));
            }
            let parts: Vec<&str> = v.cell_type.split('.').collect();
            if parts.iter().any(|p| p.is_empty()) {
                return Err(invalid(path + ".cellType", "empty cell type"));
            }
            for p in &parts {
                if !types.contains_key(*p) {
                    return Err(invalid(
                        path.clone() + ".cellType",
                        format!("unknown cell type {p} in {}", v.cell_type),
                    ));
                }
            }
            if !chains.contains(parts[0]) {
                return Err(invalid(
                    path + ".cellType",
                    format!(
                        "{} must start with a cell type used in physicalCells (one of {})",
                        v.cell_type,
                        chains.iter().cloned().collect::<Vec<_>>().join(", ")
                    ),
                ));
            }
            for w in parts.windows(2) {
                if types[w[0]].child.as_deref() != Some(w[1]) {
                    return Err(invalid(
                        path + ".cellType",
                        format!(
                            "{} is not a child type of {} in {}",
                            w[1], w[0], v.cell_type
                        ),
                    ));
                }
            }
        }
        for (i, p) in spec.pinned_cells.iter().enumerate() {
            let path = format!("virtualClusters.{vc}.pinnedCells[{i}].pinnedCellId");
            if !pinned.contains_key(&p.pinned_cell_id) {
                return Err(invalid(
                    path,
                    format!("no physical cell has pinnedCellId {}", p.pinned_cell_id),
                ));
            }
            if let Some(owner) = pinned_owner.insert(&p.pinned_cell_id, vc) {
                return Err(invalid(
                    path,
                    format!(
                        "pinned cell {} is already referenced by VC {owner}",
                        p.pinned_cell_id
                    ),
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_default_like_hived() {
        let cfg = Config::parse(
            "physicalCluster:\n  cellTypes:\n    S: {childCellType: G, childCellNumber: 2}\n    N: {childCellType: S, childCellNumber: 2, isNodeLevel: true}\n    R: {childCellType: N, childCellNumber: 2}\n  physicalCells:\n  - cellType: N\n    cellAddress: n0\n  - cellType: R\n    cellChildren: [{cellAddress: a}, {cellAddress: b, cellChildren: [{cellAddress: 7}, {}]}]\n",
        )
        .unwrap()
        .defaulted();
        let pc = &cfg.physical_cluster.physical_cells;
        assert_eq!(pc[0].cell_address, "n0");
        assert_eq!(
            pc[0].cell_children[1].cell_children[1].cell_address,
            "n0/1/3"
        );
        assert_eq!(pc[1].cell_address, "1");
        assert_eq!(pc[1].cell_children[1].cell_address, "1/b");
        assert_eq!(
            pc[1].cell_children[1].cell_children[0].cell_address,
            "1/b/7"
        );
        assert_eq!(
            pc[1].cell_children[1].cell_children[1].cell_address,
            "1/b/1"
        );
        assert_eq!(
            pc[1].cell_children[1].cell_children[1].cell_children[1].cell_address,
            "1/b/1/3"
        );
    }

    #[test]
    fn json_and_yaml_agree() {
        let y = Config::parse("physicalCluster:\n  cellTypes:\n    N: {childCellType: G, childCellNumber: 4, isNodeLevel: true}\n  physicalCells: [{cellType: N, cellAddress: a}]\nvirtualClusters:\n  v: {virtualCells: [{cellType: N, cellNumber: 1}]}\n").unwrap();
        let j = Config::parse(r#"{"physicalCluster":{"cellTypes":{"N":{"childCellType":"G","childCellNumber":4,"isNodeLevel":true}},"physicalCells":[{"cellType":"N","cellAddress":"a"}]},"virtualClusters":{"v":{"virtualCells":[{"cellType":"N","cellNumber":1}]}}}"#).unwrap();
        assert_eq!(y, j);
    }

    #[test]
    fn bad_yaml_names_line() {
        let e = Config::parse("physicalCluster:\n  cellTypes: [\n").unwrap_err();
        assert!(e.to_string().contains("line"), "{e}");
    }

    #[test]
    fn cycles_and_fanout_rejected() {
        let mut t = BTreeMap::new();
        t.insert(
            "A".into(),
            CellTypeSpec {
                child_cell_type: "B".into(),
                child_cell_number: 2,
                is_node_level: false,
            },
        );
        t.insert(
            "B".into(),
            CellTypeSpec {
                child_cell_type: "A".into(),
                child_cell_number: 2,
                is_node_level: false,
            },
        );
        assert!(resolve_types(&t).unwrap_err().to_string().contains("cycle"));
        t.remove("B");
        t.get_mut("A").unwrap().child_cell_number = 0;
        assert!(
            resolve_types(&t)
                .unwrap_err()
                .to_string()
                .contains("bad fan-out")
        );
    }
}
