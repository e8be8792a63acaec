//! Tenants sharing one cluster: every job belongs to a virtual cluster (VC), each VC is
//! entitled to a number of nodes, and an intra-VC policy (FIFO, Tiresias, ...) orders
//! the VC's own jobs. Three ways to share, to compare on one trace:
//!
//! * `private`: each VC alone on its own nodes (a static partition), placed by HiveD's
//!   topology-aware packing inside the partition;
//! * `quota`: one shared cluster, each VC limited to its GPU count (YARN-CS style), jobs
//!   placed anywhere the hosted policy's placement finds GPUs; fragmentation can make a
//!   VC wait although its quota is free, the *sharing anomaly*;
//! * `hived`: one shared cluster, each VC's nodes as HiveD cells bound lazily by buddy
//!   cell allocation, so a VC can always place what fits its cells.
//!
//! The hosted policy runs unchanged in a scoped [`Ctx`]: it sees its VC's capacity and
//! jobs, and its starts go through the VC's [`Placer`].
//!
//! VC sizes come from `cells`: `demand` (default) gives each VC the nodes its largest job
//! needs, then the remaining nodes in proportion to the VC's GPU-time demand in the trace
//! (largest remainder, ties by VC name); or an explicit `vc:nodes,...` list.

use crate::ctx::{Ctx, Placer, Tenant};
use crate::placement::PlacementStrategy;
use crate::spec::{Capabilities, Capability, ParamSpec, PolicySpec};
use crate::world::{JobIdx, World};
use crate::{ParamError, Params, Policy, PolicyError, Tenancy, TenantShare};
use apiary_hived::{
    BindInfo, Config, Decision, GroupSpec, Hived, MemberSpec, Phase, PodSpec, Suggested,
};
use apiary_model::{Cluster, Job, Placement, Time};
use std::collections::BTreeMap;
use std::fmt::Write as _;
/// `hived`: its spec.
pub const HIVED: PolicySpec = PolicySpec {
    name: "hived",
    about: "HiveD: VCs own node cells bound by buddy cell allocation on one shared cluster; `intra` orders each VC",
    capabilities: Capabilities::of(&[Capability::Tenants]),
    params: VC_PARAMS,
    build: |p| Ok(Box::new(VcSharing::new(Sharing::Hived, p)?)),
};

/// `quota`: its spec.
pub const QUOTA: PolicySpec = PolicySpec {
    name: "quota",
    about: "VCs share the cluster under per-VC GPU quotas (YARN-CS style); `intra` orders each VC",
    capabilities: Capabilities::of(&[Capability::Tenants]),
    params: VC_PARAMS,
    build: |p| Ok(Box::new(VcSharing::new(Sharing::Quota, p)?)),
};

/// `private`: its spec.
pub const PRIVATE: PolicySpec = PolicySpec {
    name: "private",
    about: "each VC alone on its own nodes (static partition, HiveD packing inside); `intra` orders each VC",
    capabilities: Capabilities::of(&[Capability::Tenants]),
    params: VC_PARAMS,
    build: |p| Ok(Box::new(VcSharing::new(Sharing::Private, p)?)),
};

const VC_PARAMS: &[ParamSpec] = &[
    ParamSpec {
        key: "intra",
        default: "tiresias",
        about: "policy inside each VC: fifo, sjf, srtf, srsf, tiresias, tiresias-gittins",
    },
    ParamSpec {
        key: "cells",
        default: "demand",
        about: "nodes per VC: demand (largest job, then by GPU-time demand) or vc:nodes,...",
    },
    ParamSpec {
        key: "intra.*",
        default: "-",
        about: "a parameter of the intra-VC policy, e.g. intra.thresholds=3250,7200",
    },
];

/// The VC of jobs whose trace names none.
pub const DEFAULT_VC: &str = "default";

/// The policy inside each VC when `intra` names none.
pub const DEFAULT_INTRA: &str = "tiresias";

/// How VCs share the cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sharing {
    /// Each VC on its own nodes.
    Private,
    /// Shared nodes, per-VC GPU-count quota.
    Quota,
    /// Shared nodes, HiveD cells.
    Hived,
}

/// The registry names of the VC-sharing policies.
pub const SHARING: &[&str] = &["private", "quota", "hived"];

/// Policies that can run inside a VC: those whose capabilities a tenant's share can
/// host ([`crate::Capability::in_tenant`]); the registry's tests check the list against
/// every spec.
pub const INTRA: &[PolicySpec] = &[
    crate::fifo::FIFO,
    crate::fifo::SJF,
    crate::srtf::SRTF,
    crate::srtf::SRSF,
    crate::tiresias::TIRESIAS,
    crate::tiresias::TIRESIAS_GITTINS,
];

fn intra_names() -> String {
    INTRA.iter().map(|s| s.name).collect::<Vec<_>>().join(", ")
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
pub fn assign(c: &Cluster, jobs: &[Job], cells: &str) -> Result<Assignment, String> {
    let node_gpus = c.nodes.first().map_or(0, |n| n.gpus);
    if c.nodes.iter().any(|n| n.gpus != node_gpus) {
        return Err(format!(
            "VC sharing needs nodes of one size; cluster {} mixes GPU counts per node",
            c.name
        ));
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
            return Err(format!(
                "the cluster has {nodes} nodes but the VCs' largest jobs alone need {floor}"
            ));
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
                return Err(format!(
                    "cells: VC {vc} has {have} nodes but its largest job needs {} GPUs ({} nodes)",
                    d.1,
                    need(d.1)
                ));
            }
        }
        let sum: u32 = given.values().sum();
        if sum > nodes {
            return Err(format!(
                "cells: {sum} nodes given but the cluster has {nodes}"
            ));
        }
        given.into_iter().collect()
    };
    Ok(Assignment { vcs, node_gpus })
}

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
) -> Result<Config, String> {
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
    Config::parse(&text).map_err(|e| format!("building the HiveD config: {e}"))
}

fn json_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

/// Places a VC's jobs through HiveD: one affinity group per job, pods of at most a node.
pub struct HivedPlacer {
    h: Hived,
    /// The top-level cell type, the chain every bind record names.
    chain: String,
    node_of: BTreeMap<String, u32>,
    node_gpus: u32,
    bound: BTreeMap<JobIdx, Vec<(String, PodSpec, BindInfo)>>,
}

impl HivedPlacer {
    /// A placer over `config`, whose node names are those of `cluster`.
    pub fn new(cluster: &Cluster, config: &Config) -> Result<HivedPlacer, String> {
        let h = Hived::with_all_nodes_healthy(config).map_err(|e| e.to_string())?;
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
        let mut members = Vec::new();
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
            name: format!("job-{j}"),
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
        let mut out = Vec::new();
        for k in 0..full {
            out.push((format!("job-{j}-{k}"), spec(g)));
        }
        if rest > 0 {
            out.push((format!("job-{j}-{full}"), spec(rest)));
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

    fn release(&mut self, _w: &World, j: JobIdx) {
        if let Some(pods) = self.bound.remove(&j) {
            for (name, spec, info) in &pods {
                let _ = self.h.delete_allocated_pod(name, spec, info);
            }
        }
    }
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
    fn release(&mut self, _w: &World, _j: JobIdx) {}
}

enum Placers {
    None,
    Quota(QuotaPlacer),
    Shared(Box<HivedPlacer>),
    Private(Vec<HivedPlacer>),
}

/// Not in any tenant (a job admit refused).
const NO_VC: u32 = u32::MAX;

/// A VC-sharing policy hosting one intra-VC policy per VC.
pub struct VcSharing {
    spec: &'static PolicySpec,
    sharing: Sharing,
    intra: &'static PolicySpec,
    intra_params: Params,
    cells: String,
    table: Vec<TenantShare>,
    names: BTreeMap<String, u32>,
    node_names: Vec<String>,
    job_vc: Vec<u32>,
    tenants: Vec<Tenant>,
    intras: Vec<Box<dyn Policy>>,
    placers: Placers,
    dirty: Vec<bool>,
    wake: Vec<Time>,
}

impl std::fmt::Debug for VcSharing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VcSharing")
            .field("sharing", &self.sharing)
            .field("intra", &self.intra.name)
            .field("table", &self.table)
            .finish()
    }
}

impl VcSharing {
    /// Parameters: `intra` (an [`INTRA`] policy, default `tiresias`), `cells`
    /// (`demand` or `vc:nodes,...`), and `intra.KEY` passed to the intra policy.
    pub fn new(sharing: Sharing, p: &Params) -> Result<VcSharing, ParamError> {
        let name = p.str("intra").unwrap_or(DEFAULT_INTRA);
        let intra = INTRA
            .iter()
            .find(|s| s.name == name)
            .ok_or_else(|| ParamError::Bad {
                key: "intra".into(),
                value: name.into(),
                message: format!("expected one of {}", intra_names()),
            })?;
        let mut intra_params = Params(
            p.0.iter()
                .filter_map(|(k, v)| Some((k.strip_prefix("intra.")?.to_string(), v.clone())))
                .collect(),
        );
        // HiveD places a job's pods on as few nodes as its cells allow; a quota baseline
        // that scattered GPUs would compare against a weaker locality demand.
        if sharing == Sharing::Quota {
            intra_params
                .0
                .entry("placement".into())
                .or_insert_with(|| "consolidated".into());
        }
        // Fail now, not mid-run, on a bad intra parameter, naming it as the user wrote it.
        intra.build_checked(&intra_params).map_err(|e| match e {
            ParamError::Bad {
                key,
                value,
                message,
            } => ParamError::Bad {
                key: format!("intra.{key}"),
                value,
                message,
            },
            ParamError::Unknown { policy, key, known } => ParamError::Unknown {
                policy,
                key: format!("intra.{key}"),
                known,
            },
        })?;
        let cells = p.str("cells").unwrap_or("demand").to_string();
        if cells != "demand" {
            parse_cells(&cells).map_err(|message| ParamError::Bad {
                key: "cells".into(),
                value: cells.clone(),
                message,
            })?;
        }
        Ok(VcSharing {
            spec: match sharing {
                Sharing::Private => &PRIVATE,
                Sharing::Quota => &QUOTA,
                Sharing::Hived => &HIVED,
            },
            sharing,
            intra,
            intra_params,
            cells,
            table: Vec::new(),
            names: BTreeMap::new(),
            node_names: Vec::new(),
            job_vc: Vec::new(),
            tenants: Vec::new(),
            intras: Vec::new(),
            placers: Placers::None,
            dirty: Vec::new(),
            wake: Vec::new(),
        })
    }

    fn table_error(&self, reason: String) -> PolicyError {
        PolicyError::Tenants {
            policy: self.spec.name,
            reason,
        }
    }

    fn build_intra(&self, cluster: &Cluster) -> Result<Box<dyn Policy>, PolicyError> {
        let mut p = self
            .intra
            .build_checked(&self.intra_params)
            .map_err(|e| self.table_error(e.to_string()))?;
        p.attach(cluster)?;
        Ok(p)
    }

    /// A tenant's capacity in GPUs: its quota, or its node cells' GPUs.
    fn capacity(&self, share: &TenantShare, node_gpus: u32) -> u64 {
        match self.sharing {
            Sharing::Quota => share.gpus,
            Sharing::Hived | Sharing::Private => share.nodes as u64 * node_gpus as u64,
        }
    }

    /// Job `j` gave its GPUs back (finished, or `pending` again): its VC's records and
    /// placer forget them. Returns the VC.
    fn left_gpus(&mut self, ctx: &Ctx<'_>, j: JobIdx, pending: bool) -> Option<usize> {
        let v = *self.job_vc.get(j as usize)?;
        if v == NO_VC {
            return None;
        }
        let v = v as usize;
        let g = ctx.job(j).gpus;
        if let Some((t, p)) = self.parts(v) {
            t.stopped(j, g, pending);
            p.release(ctx.world(), j);
        }
        self.dirty[v] = true;
        Some(v)
    }

    /// VC `v`'s tenant record and placer; none before `attach`.
    fn parts(&mut self, v: usize) -> Option<(&mut Tenant, &mut dyn Placer)> {
        let p: &mut dyn Placer = match &mut self.placers {
            Placers::Quota(q) => q,
            Placers::Shared(h) => h.as_mut(),
            Placers::Private(ps) => ps.get_mut(v)?,
            Placers::None => return None,
        };
        Some((self.tenants.get_mut(v)?, p))
    }

    fn vc_of(&self, job: &Job) -> Option<usize> {
        self.names
            .get(job.vc.as_deref().unwrap_or(DEFAULT_VC))
            .map(|&v| v as usize)
    }
}

/// Parses an explicit `vc:nodes,...` list.
fn parse_cells(cells: &str) -> Result<Vec<(String, u32)>, String> {
    let mut given: BTreeMap<String, u32> = BTreeMap::new();
    for part in cells.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (vc, n) = part
            .rsplit_once(':')
            .and_then(|(v, n)| Some((v.trim(), n.trim().parse::<u32>().ok()?)))
            .ok_or_else(|| format!("cells: '{part}' is not vc:nodes"))?;
        if given.insert(vc.to_string(), n).is_some() {
            return Err(format!("cells: VC {vc} is given twice"));
        }
    }
    Ok(given.into_iter().collect())
}

impl Policy for VcSharing {
    fn spec(&self) -> &'static PolicySpec {
        self.spec
    }

    fn tenancy(&mut self) -> Option<&mut dyn Tenancy> {
        Some(self)
    }

    fn attach(&mut self, cluster: &Cluster) -> Result<(), PolicyError> {
        let node_gpus = cluster.nodes.first().map_or(0, |n| n.gpus);
        if self.sharing != Sharing::Quota && cluster.nodes.iter().any(|n| n.gpus != node_gpus) {
            return Err(self.table_error(format!(
                "VC cells need nodes of one size; cluster {} mixes GPU counts per node",
                cluster.name
            )));
        }
        if self.table.is_empty() {
            return Err(self.table_error(
                "no VCs: the driver gives the table (the trace's demand in the simulator, \
                 [[vcs]] in server.toml)"
                    .into(),
            ));
        }
        let nodes: u64 = self.table.iter().map(|t| t.nodes as u64).sum();
        if self.sharing != Sharing::Quota && nodes > cluster.nodes.len() as u64 {
            return Err(self.table_error(format!(
                "{nodes} nodes given but the cluster has {}",
                cluster.nodes.len()
            )));
        }
        self.names = self
            .table
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), i as u32))
            .collect();
        self.tenants = self
            .table
            .iter()
            .map(|t| Tenant::new(self.capacity(t, node_gpus)))
            .collect();
        self.intras = (0..self.table.len())
            .map(|_| self.build_intra(cluster))
            .collect::<Result<_, _>>()?;
        self.dirty = vec![false; self.table.len()];
        self.wake = vec![Time::MAX; self.table.len()];
        self.node_names = cluster.nodes.iter().map(|n| n.name.clone()).collect();
        let vcs: Vec<(String, u32)> = self
            .table
            .iter()
            .map(|t| (t.name.clone(), t.nodes))
            .collect();
        let all: Vec<u32> = (0..cluster.nodes.len() as u32).collect();
        let placer = |nodes: &[u32], vcs: &[(String, u32)], racks: bool| {
            hived_config(cluster, nodes, vcs, racks)
                .and_then(|cfg| HivedPlacer::new(cluster, &cfg))
                .map_err(|reason| self.table_error(reason))
        };
        self.placers = match self.sharing {
            Sharing::Quota => Placers::Quota(QuotaPlacer),
            Sharing::Hived => Placers::Shared(Box::new(placer(&all, &vcs, true)?)),
            Sharing::Private => {
                // Static partition: VCs in table order take consecutive nodes.
                let mut next = 0u32;
                let mut ps = Vec::with_capacity(vcs.len());
                for (name, n) in &vcs {
                    let nodes: Vec<u32> = (next..next + n).collect();
                    next += n;
                    ps.push(placer(&nodes, &[(name.clone(), *n)], false)?);
                }
                Placers::Private(ps)
            }
        };
        Ok(())
    }

    fn admit(&mut self, ctx: &Ctx<'_>, j: JobIdx) -> Result<(), PolicyError> {
        let job = ctx.job(j);
        let refuse = |reason: String| PolicyError::Job {
            policy: self.spec.name,
            job: job.id.clone(),
            reason,
        };
        let vc = job.vc.as_deref().unwrap_or(DEFAULT_VC);
        let Some(v) = self.vc_of(job) else {
            let known: Vec<&str> = self.names.keys().map(String::as_str).collect();
            return Err(refuse(format!(
                "VC {vc} is not in the tenant table ({})",
                known.join(", ")
            )));
        };
        let cap = self.tenants[v].capacity;
        if job.gpus as u64 > cap {
            return Err(refuse(format!(
                "it needs {} GPUs but VC {vc}'s share is {cap}",
                job.gpus
            )));
        }
        if self.job_vc.len() <= j as usize {
            self.job_vc.resize(j as usize + 1, NO_VC);
        }
        self.intras[v].admit(ctx, j)?;
        self.job_vc[j as usize] = v as u32;
        self.tenants[v].add_pending(job.gpus);
        self.dirty[v] = true;
        Ok(())
    }

    fn on_finish(&mut self, ctx: &Ctx<'_>, j: JobIdx) {
        if let Some(v) = self.left_gpus(ctx, j, false) {
            self.intras[v].on_finish(ctx, j);
        }
    }

    fn on_requeue(&mut self, ctx: &Ctx<'_>, j: JobIdx) {
        if let Some(v) = self.left_gpus(ctx, j, true) {
            self.intras[v].on_requeue(ctx, j);
        }
    }

    fn schedule(&mut self, ctx: &mut Ctx<'_>) {
        let now = ctx.now();
        let quota = self.sharing == Sharing::Quota;
        let mut wake = Time::MAX;
        for v in 0..self.tenants.len() {
            // With quotas, GPUs freed by any VC can unblock a fragmented one; with cells
            // (shared or private) a VC's placements depend on its own jobs only.
            let due = self.dirty[v]
                || self.wake[v] <= now
                || (quota && self.tenants[v].pending_count() > 0);
            if due {
                self.dirty[v] = false;
                let mut intra = std::mem::replace(&mut self.intras[v], Box::new(Idle));
                let Some((t, p)) = self.parts(v) else {
                    self.intras[v] = intra;
                    return;
                };
                let mut sub = ctx.scoped(t, p, intra.spec());
                intra.schedule(&mut sub);
                let (woken, error) = (sub.wake(), sub.take_error());
                self.wake[v] = woken.unwrap_or(Time::MAX);
                self.intras[v] = intra;
                if let Some(e) = error {
                    ctx.fail(e);
                }
            }
            wake = wake.min(self.wake[v]);
        }
        if wake != Time::MAX {
            ctx.wake_at(wake);
        }
    }
}

impl Tenancy for VcSharing {
    /// VC sizes by the `cells` parameter, each VC's share checked against its largest
    /// job.
    fn plan(&self, cluster: &Cluster, jobs: &[Job]) -> Result<Vec<TenantShare>, PolicyError> {
        let a = assign(cluster, jobs, &self.cells).map_err(|reason| self.table_error(reason))?;
        let g = a.node_gpus as u64;
        Ok(a.vcs
            .into_iter()
            .map(|(name, nodes)| TenantShare {
                name,
                nodes,
                gpus: nodes as u64 * g,
            })
            .collect())
    }

    fn set_table(&mut self, vcs: Vec<TenantShare>) {
        self.table = vcs;
    }

    fn set_share(&mut self, share: TenantShare) -> Result<(), PolicyError> {
        if self.sharing != Sharing::Quota {
            return Err(self.table_error(
                "VC cells are bound to physical cells: they change with the config and a restart"
                    .into(),
            ));
        }
        match self.names.get(&share.name) {
            Some(&v) => {
                self.tenants[v as usize].capacity = share.gpus;
                self.dirty[v as usize] = true;
                self.table[v as usize] = share;
            }
            None => {
                let intra = self
                    .intra
                    .build_checked(&self.intra_params)
                    .map_err(|e| self.table_error(e.to_string()))?;
                self.names
                    .insert(share.name.clone(), self.table.len() as u32);
                self.tenants.push(Tenant::new(share.gpus));
                self.intras.push(intra);
                self.dirty.push(true);
                self.wake.push(Time::MAX);
                self.table.push(share);
            }
        }
        Ok(())
    }

    fn adopt(&mut self, world: &World, j: JobIdx) -> bool {
        let Some(&v) = self.job_vc.get(j as usize) else {
            return false;
        };
        if v == NO_VC {
            return false;
        }
        let v = v as usize;
        self.tenants[v].started(j, world.jobs[j as usize].gpus);
        self.dirty[v] = true;
        let placement = &world.rt[j as usize].placement;
        match &mut self.placers {
            Placers::Shared(h) => h.adopt(world, j, placement, &self.node_names),
            Placers::Private(ps) => ps[v].adopt(world, j, placement, &self.node_names),
            Placers::Quota(_) | Placers::None => true,
        }
    }

    fn node_health(&mut self, node: &str, healthy: bool) {
        match &mut self.placers {
            Placers::Shared(h) => h.set_node_health(node, healthy),
            Placers::Private(ps) => {
                for p in ps {
                    if p.node_of.contains_key(node) {
                        p.set_node_health(node, healthy);
                    }
                }
            }
            Placers::Quota(_) | Placers::None => {}
        }
        self.refresh();
    }

    fn refresh(&mut self) {
        self.dirty.iter_mut().for_each(|d| *d = true);
    }
}

/// Stands in for an intra policy while it is lent out for a call.
struct Idle;

const IDLE: PolicySpec = PolicySpec {
    name: "idle",
    about: "stands in for an intra-VC policy during its call",
    capabilities: Capabilities::CORE,
    params: &[],
    build: |_| Ok(Box::new(Idle)),
};

impl Policy for Idle {
    fn spec(&self) -> &'static PolicySpec {
        &IDLE
    }
    fn schedule(&mut self, _ctx: &mut Ctx<'_>) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use apiary_model::{ClusterSpec, Job};

    fn job(vc: &str, gpus: u32, secs: u64) -> Job {
        let mut j = Job::new(format!("{vc}{gpus}"), 0, gpus, secs * 1000);
        j.vc = Some(vc.into());
        j
    }

    fn world(cluster: &str, jobs: Vec<Job>) -> World {
        World::new(ClusterSpec::preset(cluster).unwrap().build().unwrap(), jobs)
    }

    #[test]
    fn demand_rule_gives_the_largest_job_then_shares_by_gpu_time() {
        // 10 nodes of 8. a: a 16-GPU job (2 nodes) and 100 GPU-s; b: 1 GPU, 300 GPU-s;
        // c: 1 GPU, 0 GPU-s. Minimums 2+1+1, the other 6 split 100:300:0 -> 1.5, 4.5, 0:
        // floors 1 and 4, one node left to the larger remainder (a and b tie at .5: a by
        // name).
        let w = world(
            "n10g8",
            vec![
                job("a", 16, 0),
                job("a", 1, 100),
                job("b", 1, 300),
                job("c", 1, 0),
            ],
        );
        let a = assign(&w.cluster, &w.jobs, "demand").unwrap();
        assert_eq!(
            a.vcs,
            vec![("a".into(), 4), ("b".into(), 5), ("c".into(), 1)]
        );
        assert_eq!(a.node_gpus, 8);
        assert_eq!(a.vcs.iter().map(|v| v.1).sum::<u32>(), 10);
    }

    #[test]
    fn explicit_cells_are_checked() {
        let w = world("n4g4", vec![job("a", 8, 1), job("b", 1, 1)]);
        assert_eq!(
            assign(&w.cluster, &w.jobs, "a:2,b:1").unwrap().vcs,
            vec![("a".into(), 2), ("b".into(), 1)]
        );
        let e = assign(&w.cluster, &w.jobs, "a:1,b:1").unwrap_err();
        assert!(
            e.contains("VC a has 1 nodes but its largest job needs 8 GPUs"),
            "{e}"
        );
        assert!(
            assign(&w.cluster, &w.jobs, "a:2")
                .unwrap_err()
                .contains("VC b has 0 nodes")
        );
        assert!(
            assign(&w.cluster, &w.jobs, "a:3,b:2")
                .unwrap_err()
                .contains("5 nodes given")
        );
        assert!(
            assign(&w.cluster, &w.jobs, "a=2")
                .unwrap_err()
                .contains("not vc:nodes")
        );
        let tight = world("n2g4", vec![job("a", 8, 1), job("b", 4, 1)]);
        assert!(
            assign(&tight.cluster, &tight.jobs, "demand")
                .unwrap_err()
                .contains("need 3")
        );
        let mixed = World::new(
            ClusterSpec::preset("philly").unwrap().build().unwrap(),
            vec![job("a", 1, 1)],
        );
        assert!(assign(&mixed.cluster, &mixed.jobs, "demand").is_ok());
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
            p.release(&w, 0);
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
