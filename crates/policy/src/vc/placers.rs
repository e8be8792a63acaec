//! Where a tenant's jobs go: through HiveD's cells ([`HivedPlacer`], over a config built
//! from the cluster and the tenant table by [`hived_config`]) or anywhere free
//! ([`QuotaPlacer`]).

use super::DEFAULT_VC;
use crate::ctx::Placer;
use crate::placement::PlacementStrategy;
use crate::world::{JobIdx, World};
use apiary_hived::{
    BindInfo, Config, ConfigError, Decision, GroupSpec, Hived, MemberSpec, Phase, PodSpec,
    Suggested,
};
use apiary_model::{Cluster, Placement};
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

/// HiveD's cell types for nodes of `g` GPUs: halving levels while `g` is a power of two
/// (so packing inside a node follows the buddy structure), then the node.
fn node_levels(g: u32, types: &mut String) {
    let mut child = "GPU".to_string();
    let mut size = 1;
    while g.is_power_of_two() && size * 2 < g {
        let name = format!("G{}", size * 2);
        let _ = write!(
            types,
            r#""{name}":{{"childCellType":"{child}","childCellNumber":2}},"#
        );
        child = name;
        size *= 2;
    }
    let _ = write!(
        types,
        r#""NODE":{{"childCellType":"{child}","childCellNumber":{},"isNodeLevel":true}}"#,
        g / size
    );
}

/// A HiveD config for `nodes` of `cluster` shared by `vcs` (name, node cells). With
/// `racks`, and every switch holding the same number of nodes, switches are top-level
/// cells and VCs own `RACK.NODE` cells; otherwise nodes are top-level cells.
pub fn hived_config(
    cluster: &Cluster,
    nodes: &[u32],
    vcs: &[(String, u32)],
    racks: bool,
) -> Result<Config, ConfigError> {
    let g = cluster.nodes.first().map_or(1, |n| n.gpus);
    let mut types = String::new();
    node_levels(g, &mut types);
    let per_switch = cluster.switches.first().map_or(0, |s| s.nodes);
    let racks = racks
        && nodes.len() == cluster.nodes.len()
        && cluster.switches.iter().all(|s| s.nodes == per_switch)
        && per_switch > 1;
    let mut cells = String::new();
    let vc_type = if racks {
        let _ = write!(
            types,
            r#","RACK":{{"childCellType":"NODE","childCellNumber":{per_switch}}}"#
        );
        for (si, s) in cluster.switches.iter().enumerate() {
            if si > 0 {
                cells.push(',');
            }
            cells.push_str(r#"{"cellType":"RACK","cellChildren":["#);
            for k in 0..s.nodes {
                if k > 0 {
                    cells.push(',');
                }
                let n = &cluster.nodes[(s.first_node + k) as usize];
                let _ = write!(cells, r#"{{"cellAddress":{}}}"#, json_str(&n.name));
            }
            cells.push_str("]}");
        }
        "RACK.NODE"
    } else {
        for (k, &n) in nodes.iter().enumerate() {
            if k > 0 {
                cells.push(',');
            }
            let _ = write!(
                cells,
                r#"{{"cellType":"NODE","cellAddress":{}}}"#,
                json_str(&cluster.nodes[n as usize].name)
            );
        }
        "NODE"
    };
    let mut v = String::new();
    for (k, (name, n)) in vcs.iter().filter(|(_, n)| *n > 0).enumerate() {
        if k > 0 {
            v.push(',');
        }
        let _ = write!(
            v,
            r#"{}:{{"virtualCells":[{{"cellType":"{vc_type}","cellNumber":{n}}}]}}"#,
            json_str(name)
        );
    }
    let text = format!(
        r#"{{"physicalCluster":{{"cellTypes":{{{types}}},"physicalCells":[{cells}]}},"virtualClusters":{{{v}}}}}"#
    );
    Config::parse(&text)
}

fn json_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

/// Places a VC's jobs through HiveD: one affinity group per job, pods of at most a node.
pub struct HivedPlacer {
    h: Hived,
    /// The top-level cell type, the chain every bind record names.
    chain: String,
    /// Node ids by name (fixed-seed hashing: looked up per placed pod, never walked).
    node_of: HashMap<String, u32, foldhash::fast::FixedState>,
    node_gpus: u32,
    bound: BTreeMap<JobIdx, Vec<(String, PodSpec, BindInfo)>>,
}

impl HivedPlacer {
    /// Whether `node` is one of this placer's.
    pub fn has_node(&self, node: &str) -> bool {
        self.node_of.contains_key(node)
    }

    /// A placer over `config`, whose node names are those of `cluster`.
    pub fn new(cluster: &Cluster, config: &Config) -> Result<HivedPlacer, ConfigError> {
        let h = Hived::with_all_nodes_healthy(config)?;
        Ok(HivedPlacer {
            h,
            node_of: cluster
                .nodes
                .iter()
                .enumerate()
                .map(|(i, n)| (n.name.clone(), i as u32))
                .collect(),
            node_gpus: cluster.nodes.first().map_or(1, |n| n.gpus),
            bound: BTreeMap::new(),
            chain: config
                .physical_cluster
                .physical_cells
                .first()
                .map_or_else(String::new, |c| c.cell_type.clone()),
        })
    }

    /// Tells HiveD a node went bad (`healthy` false) or came back.
    pub fn set_node_health(&mut self, node: &str, healthy: bool) {
        let _ = if healthy {
            self.h.set_node_healthy(node)
        } else {
            self.h.set_node_bad(node)
        };
    }

    /// The HiveD state, for inspection.
    pub fn hived(&self) -> &Hived {
        &self.h
    }

    /// The pod specs of job `j`: whole-node pods, then one pod for the remainder.
    fn pods(&self, w: &World, j: JobIdx) -> Vec<(String, PodSpec)> {
        let job = &w.jobs[j as usize];
        let g = self.node_gpus.max(1);
        let (full, rest) = if job.gpus <= g {
            (0, job.gpus)
        } else {
            (job.gpus / g, job.gpus % g)
        };
        let mut members = Vec::with_capacity(2);
        if full > 0 {
            members.push(MemberSpec {
                pod_number: full as i64,
                leaf_cell_number: g as i64,
            });
        }
        if rest > 0 {
            members.push(MemberSpec {
                pod_number: 1,
                leaf_cell_number: rest as i64,
            });
        }
        let group = GroupSpec {
            name: job_name(j, None),
            members,
        };
        let spec = |n: u32| PodSpec {
            virtual_cluster: job.vc.as_deref().unwrap_or(DEFAULT_VC).to_string(),
            // Guaranteed at the trace's priority; opportunistic jobs are not hosted yet,
            // so a negative priority counts as 0.
            priority: job.priority.clamp(0, apiary_hived::MAX_PRIORITY) as i64,
            pinned_cell_id: String::new(),
            leaf_cell_type: String::new(),
            leaf_cell_number: n as i64,
            affinity_group: Some(group.clone()),
            lazy_preemption_enable: false,
            ignore_k8s_suggested_nodes: true,
            gang_release_enable: false,
        };
        let mut out = Vec::with_capacity(full as usize + usize::from(rest > 0));
        for k in 0..full {
            out.push((job_name(j, Some(k)), spec(g)));
        }
        if rest > 0 {
            out.push((job_name(j, Some(full)), spec(rest)));
        }
        out
    }

    /// Registers a job already running on `placement` (a scheduler recovering after a
    /// restart) from the bind records its parts imply: one pod per node, bound through
    /// the VC's `preassigned` cell type on chain `chain`. Returns false if HiveD refuses.
    pub fn adopt(
        &mut self,
        w: &World,
        j: JobIdx,
        placement: &Placement,
        node_names: &[String],
    ) -> bool {
        // VCs own node cells, so every GPU is preassigned at the node level.
        let preassigned = "NODE";
        use apiary_hived::{MemberBindInfo, PodPlacement};
        let pods = self.pods(w, j);
        // Pods by size (as the group's members list them) against parts by size.
        let mut parts: Vec<(u32, u64)> = placement.parts.clone();
        let mut assigned: Vec<(String, PodSpec, (u32, u64))> = Vec::new();
        for (name, spec) in pods {
            let want = spec.leaf_cell_number as u32;
            let Some(i) = parts.iter().position(|p| p.1.count_ones() == want) else {
                return false;
            };
            assigned.push((name, spec, parts.remove(i)));
        }
        let Some(group) = assigned.first().and_then(|a| a.1.affinity_group.clone()) else {
            return false;
        };
        let placement_of = |(n, mask): (u32, u64)| PodPlacement {
            physical_node: node_names[n as usize].clone(),
            physical_leaf_cell_indices: (0..64).filter(|b| mask & (1 << b) != 0).collect(),
            preassigned_cell_types: Some(vec![preassigned.to_string(); mask.count_ones() as usize]),
        };
        let members: Vec<MemberBindInfo> = group
            .members
            .iter()
            .map(|m| MemberBindInfo {
                pod_placements: assigned
                    .iter()
                    .filter(|a| a.1.leaf_cell_number == m.leaf_cell_number)
                    .map(|a| placement_of(a.2))
                    .collect(),
            })
            .collect();
        let mut done = Vec::new();
        for (name, spec, part) in assigned {
            let pp = placement_of(part);
            let info = BindInfo {
                node: pp.physical_node.clone(),
                leaf_cell_isolation: pp.physical_leaf_cell_indices.clone(),
                cell_chain: self.chain.clone(),
                affinity_group_bind_info: members.clone(),
            };
            if self.h.add_allocated_pod(&name, &spec, &info).is_err() {
                return false;
            }
            done.push((name, spec, info));
        }
        self.bound.insert(j, done);
        true
    }

    fn add(&self, info: &BindInfo, out: &mut Placement) -> bool {
        let Some(&n) = self.node_of.get(&info.node) else {
            return false;
        };
        let mut mask = 0u64;
        for &i in &info.leaf_cell_isolation {
            if !(0..64).contains(&i) {
                return false;
            }
            mask |= 1 << i;
        }
        out.add(n, mask);
        true
    }
}

impl Placer for HivedPlacer {
    fn place(
        &mut self,
        w: &World,
        j: JobIdx,
        _strategy: PlacementStrategy,
        out: &mut Placement,
    ) -> bool {
        out.clear();
        let pods = self.pods(w, j);
        let want = pods.len();
        let mut done: Vec<(String, PodSpec, BindInfo)> = Vec::with_capacity(pods.len());
        for (name, spec) in pods {
            // Filtering: the hosted policy makes its own preemptions, so a placement that
            // would need victims must not leave a reservation behind; it, a wait and a
            // refusal all leave the job pending.
            let info = match self
                .h
                .schedule(&name, &spec, &Suggested::All, Phase::Filtering)
            {
                Ok(Decision::Bind(info)) => info,
                _ => break,
            };
            if self.h.add_allocated_pod(&name, &spec, &info).is_err() || !self.add(&info, out) {
                done.push((name, spec, info));
                break;
            }
            done.push((name, spec, info));
        }
        let complete = out.gpus() == w.jobs[j as usize].gpus && done.len() == want;
        if !complete {
            for (name, spec, info) in &done {
                let _ = self.h.delete_allocated_pod(name, spec, info);
            }
            out.clear();
            return false;
        }
        out.parts.sort_unstable();
        self.bound.insert(j, done);
        true
    }

    fn release(&mut self, j: JobIdx) {
        if let Some(pods) = self.bound.remove(&j) {
            for (name, spec, info) in &pods {
                let _ = self.h.delete_allocated_pod(name, spec, info);
            }
        }
    }
}

/// `job-J` (a job's affinity group) or `job-J-K` (its pod K), written without the
/// formatting machinery: a placement names every pod, and `format!` was a twentieth of
/// a HiveD run.
fn job_name(j: JobIdx, pod: Option<u32>) -> String {
    let mut digits = itoa::Buffer::new();
    let mut s = String::with_capacity(24);
    s.push_str("job-");
    s.push_str(digits.format(j));
    if let Some(k) = pod {
        s.push('-');
        s.push_str(digits.format(k));
    }
    s
}

/// Places anywhere the hosted policy's strategy finds free GPUs: sharing by quota.
#[derive(Debug, Default)]
pub struct QuotaPlacer;

impl Placer for QuotaPlacer {
    fn place(
        &mut self,
        w: &World,
        j: JobIdx,
        strategy: PlacementStrategy,
        out: &mut Placement,
    ) -> bool {
        w.place(j, strategy, out)
    }
    fn release(&mut self, _j: JobIdx) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use apiary_model::{ClusterSpec, Job};

    #[test]
    fn job_names_are_those_format_writes() {
        for j in [0, 7, 10, 99_999, u32::MAX] {
            assert_eq!(job_name(j, None), format!("job-{j}"));
            for k in [0, 1, 12, u32::MAX] {
                assert_eq!(job_name(j, Some(k)), format!("job-{j}-{k}"));
            }
        }
    }

    fn job(vc: &str, gpus: u32, secs: u64) -> Job {
        let mut j = Job::new(format!("{vc}{gpus}"), 0, gpus, secs * 1000);
        j.vc = Some(vc.into());
        j
    }

    #[test]
    fn configs_build_with_and_without_racks() {
        // n64g8: two switches of 32 nodes -> racks; philly: switches of 64..8 -> nodes.
        for (name, chain) in [("n64g8", "RACK"), ("philly", "NODE"), ("n3g6", "RACK")] {
            let c = ClusterSpec::preset(name).unwrap().build().unwrap();
            let all: Vec<u32> = (0..c.nodes.len() as u32).collect();
            let vcs = vec![("a".to_string(), 2), ("b".to_string(), 1)];
            let cfg = hived_config(&c, &all, &vcs, true).unwrap();
            let mut p = HivedPlacer::new(&c, &cfg).unwrap();
            let w = World::new(c.clone(), vec![job("a", c.nodes[0].gpus + 1, 1)]);
            let mut out = Placement::default();
            assert!(
                p.place(&w, 0, PlacementStrategy::Counting, &mut out),
                "{name}"
            );
            assert_eq!(out.gpus(), c.nodes[0].gpus + 1);
            assert_eq!(out.nodes(), 2);
            assert_eq!(p.bound[&0][0].2.cell_chain, chain, "{name}");
            p.release(0);
            assert!(p.bound.is_empty());
            assert!(p.hived().check_invariants().is_empty());
        }
    }

    #[test]
    fn a_vc_cannot_place_beyond_its_cells() {
        let c = ClusterSpec::preset("n4g4").unwrap().build().unwrap();
        let all: Vec<u32> = (0..4).collect();
        let vcs = vec![("a".to_string(), 1), ("b".to_string(), 3)];
        let cfg = hived_config(&c, &all, &vcs, true).unwrap();
        let mut p = HivedPlacer::new(&c, &cfg).unwrap();
        let w = World::new(c, vec![job("a", 4, 1), job("a", 1, 1)]);
        let mut out = Placement::default();
        assert!(p.place(&w, 0, PlacementStrategy::Counting, &mut out));
        assert!(!p.place(&w, 1, PlacementStrategy::Counting, &mut out));
        assert!(out.parts.is_empty());
        assert!(p.hived().check_invariants().is_empty());
    }
}
