//! The topology a placement induces: an apiary cluster spec (nodes under switches, with
//! NIC, NVLink and uplink bandwidths) and the GPUs a job holds on each node, as a
//! ForestColl [`Topology`], so the simulator and the placement strategy can price a
//! placement by its optimal allreduce time.
//!
//! Each used node becomes a box: its GPUs on a node switch (NVSwitch, or the PCIe
//! switch) at the node's intra-node bandwidth per GPU. When the job spans nodes, each
//! GPU also links to its rack's switch through its share of the node's NIC (`NIC /
//! node GPUs`: a DGX's per-GPU rails, which GPUDirect reaches without crossing NVLink),
//! and racks link to one spine when it spans racks. Shared links are priced at the
//! job's fair share, so a job's speed does not depend on its neighbours: the NIC as
//! above, a rack's uplink at `used in rack / rack GPUs` of its bandwidth. A switch
//! without an uplink bandwidth is non-blocking: its uplink carries its GPUs' NIC
//! shares. This is the shape of the DGX presets with a `single` fabric per rack, so the
//! closed-form schedules of `apiary comm compare` apply to it.
//!
//! Bandwidths not in the spec come from the GPU type ([`default_intra`],
//! [`default_nic`]); docs/comm.md has the table.

use std::collections::BTreeMap;

use apiary_model::{Cluster, Node, Switch};

use crate::closed::BoxShape;
use crate::frac::Frac;
use crate::topology::{Topology, TopologyBuilder, TopologyError};

/// Why a placement has no topology.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlacementError {
    /// A node index or name the cluster does not have.
    #[error(
        "placement: no node '{0}' in the cluster (nodes are numbered from 0 or named as `apiary cluster` prints them)"
    )]
    UnknownNode(String),
    /// More GPUs on a node than it has.
    #[error("placement: node '{node}' has {has} GPUs, the placement asks for {asked}")]
    TooMany {
        /// The node's name.
        node: String,
        /// GPUs asked for.
        asked: u32,
        /// GPUs it has.
        has: u32,
    },
    /// A node named twice.
    #[error("placement: node '{0}' appears twice")]
    Duplicate(String),
    /// A bandwidth in the cluster spec that is not a positive decimal.
    #[error("cluster: {field} of node '{node}' is {value}: must be a positive number")]
    BadBandwidth {
        /// The node (or switch) it belongs to.
        node: String,
        /// The field.
        field: &'static str,
        /// The value.
        value: f64,
    },
    /// Malformed placement text.
    #[error("placement '{text}': {msg} (write NODE:GPUS,NODE:GPUS, e.g. 0:8,1:4)")]
    Syntax {
        /// The text.
        text: String,
        /// What is wrong.
        msg: String,
    },
    /// The induced topology was rejected (fewer than two GPUs, for one).
    #[error(transparent)]
    Topology(#[from] TopologyError),
}

/// Intra-node bandwidth per GPU and direction, GB/s, for a GPU type without
/// `intra_gbps`: NVLink per GPU on SXM parts (H100 18 × 25, A100 12 × 25, V100 6 × 25,
/// P100 4 × 20 GB/s), PCIe 3.0 x16 otherwise.
pub fn default_intra(gpu_type: &str) -> f64 {
    match family(gpu_type) {
        Family::H100 => 450.0,
        Family::A100 => 300.0,
        Family::V100 => 150.0,
        Family::P100 => 80.0,
        Family::Other => 16.0,
    }
}

/// A node's network bandwidth per direction, Gbit/s, for a GPU type without
/// `nic_gbps`: DGX H100 8 × 400, DGX A100 8 × 200, DGX-1 4 × 100; 100 otherwise.
pub fn default_nic(gpu_type: &str) -> f64 {
    match family(gpu_type) {
        Family::H100 => 3200.0,
        Family::A100 => 1600.0,
        Family::V100 => 400.0,
        Family::P100 | Family::Other => 100.0,
    }
}

enum Family {
    H100,
    A100,
    V100,
    P100,
    Other,
}

fn family(gpu_type: &str) -> Family {
    let t = gpu_type.to_ascii_uppercase();
    if ["H100", "H200", "H800", "H20"]
        .iter()
        .any(|m| t.contains(m))
    {
        Family::H100
    } else if ["A100", "A800"].iter().any(|m| t.contains(m)) {
        Family::A100
    } else if t.contains("V100") {
        Family::V100
    } else if t.contains("P100") {
        Family::P100
    } else {
        Family::Other
    }
}

fn exact(node: &str, field: &'static str, value: f64) -> Result<Frac, PlacementError> {
    Frac::from_f64_decimal(value)
        .filter(|f| f.num() > 0)
        .ok_or(PlacementError::BadBandwidth {
            node: node.to_string(),
            field,
            value,
        })
}

/// A node's intra-node bandwidth per GPU (GB/s) and NIC bandwidth (GB/s), from the
/// spec or the GPU type's defaults.
pub fn node_bandwidths(n: &Node) -> Result<(Frac, Frac), PlacementError> {
    let intra = n.intra_gbps.unwrap_or_else(|| default_intra(&n.gpu_type));
    let nic = n.nic_gbps.unwrap_or_else(|| default_nic(&n.gpu_type));
    Ok((
        exact(&n.name, "intra_gbps", intra)?,
        exact(&n.name, "nic_gbps", nic)?.over(Frac::int(8)),
    ))
}

/// Parses `NODE:GPUS,NODE:GPUS` (a node by index or by name) into `(node, gpus)`.
pub fn parse_placement(cluster: &Cluster, text: &str) -> Result<Vec<(u32, u32)>, PlacementError> {
    let syntax = |msg: String| PlacementError::Syntax {
        text: text.to_string(),
        msg,
    };
    let mut out = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (node, gpus) = part
            .rsplit_once(':')
            .ok_or_else(|| syntax(format!("'{part}' has no ':GPUS'")))?;
        let g: u32 = gpus
            .trim()
            .parse()
            .map_err(|_| syntax(format!("'{gpus}' is not a GPU count")))?;
        let idx = match node.trim().parse::<u32>() {
            Ok(i) if (i as usize) < cluster.nodes.len() => i,
            _ => cluster
                .nodes
                .iter()
                .position(|n| n.name == node.trim())
                .ok_or_else(|| PlacementError::UnknownNode(node.trim().to_string()))?
                as u32,
        };
        out.push((idx, g));
    }
    if out.is_empty() {
        return Err(syntax("no nodes".to_string()));
    }
    Ok(out)
}

/// The topology of `parts` (`(node index, GPUs used)`) on `cluster`. Nodes with no
/// GPUs are skipped; a placement of fewer than two GPUs has no collective and is an
/// error ([`TopologyError::TooFewCompute`]).
pub fn placement_topology(
    cluster: &Cluster,
    parts: &[(u32, u32)],
) -> Result<Topology, PlacementError> {
    let used = check(cluster, parts)?;
    let name = format!(
        "{}[{}]",
        cluster.name,
        used.iter()
            .map(|(n, g)| format!("{}:{g}", cluster.nodes[*n as usize].name))
            .collect::<Vec<_>>()
            .join(",")
    );
    let mut b = TopologyBuilder::new(&name);
    let racks: BTreeMap<u32, Vec<(u32, u32)>> =
        used.iter().fold(BTreeMap::new(), |mut m, &(n, g)| {
            m.entry(cluster.nodes[n as usize].switch)
                .or_insert_with(Vec::new)
                .push((n, g));
            m
        });
    let multi_node = used.len() > 1;
    let spine = (racks.len() > 1).then(|| b.switch("spine"));
    let mut shape: Option<BoxShape> = None;
    let mut uniform = true;
    for (&s, nodes) in &racks {
        let sw = &cluster.switches[s as usize];
        let rack = multi_node.then(|| b.switch(&sw.name));
        let mut rack_share = Frac::ZERO;
        for &(n, g) in nodes {
            let node = &cluster.nodes[n as usize];
            let (intra, nic) = node_bandwidths(node)?;
            let nvs = (g > 1).then(|| b.switch(&format!("{}.switch", node.name)));
            let per_gpu = nic.over(Frac::int(node.gpus as u128));
            for i in 0..g {
                let gpu = b.compute(&format!("{}.gpu{i}", node.name));
                if let Some(nvs) = nvs {
                    b.link(gpu, nvs, intra);
                }
                if let Some(rack) = rack {
                    b.link(gpu, rack, per_gpu);
                }
            }
            rack_share = rack_share.plus(per_gpu.times(Frac::int(g as u128)));
            let this = BoxShape {
                boxes: used.len() as u32,
                gpus: g,
                intra,
                nic: per_gpu,
            };
            uniform &= shape.is_none_or(|s| s == this);
            shape = Some(this);
        }
        if let (Some(spine), Some(rack)) = (spine, rack) {
            let in_rack: u32 = nodes.iter().map(|p| p.1).sum();
            let up = uplink_share(cluster, s, in_rack)?.unwrap_or(rack_share);
            b.link(rack, spine, up);
        }
    }
    if let (true, Some(s)) = (uniform, shape) {
        b.shape(s);
    }
    Ok(b.build()?)
}

/// A switch's uplink to the spine, GB/s per direction; `None` for a non-blocking one.
pub fn uplink_bandwidth(sw: &Switch) -> Result<Option<Frac>, PlacementError> {
    sw.uplink_gbps
        .map(|u| Ok(exact(&sw.name, "uplink_gbps", u)?.over(Frac::int(8))))
        .transpose()
}

/// The job's fair share of switch `s`'s uplink for its `in_rack` GPUs there.
fn uplink_share(cluster: &Cluster, s: u32, in_rack: u32) -> Result<Option<Frac>, PlacementError> {
    let sw = &cluster.switches[s as usize];
    let Some(up) = uplink_bandwidth(sw)? else {
        return Ok(None);
    };
    let rack_gpus: u32 = (sw.first_node..sw.first_node + sw.nodes)
        .map(|n| cluster.nodes[n as usize].gpus)
        .sum();
    Ok(Some(
        up.times(Frac::new(in_rack as u128, rack_gpus as u128)),
    ))
}

/// The used nodes of `parts` in node order, checked against the cluster.
fn check(cluster: &Cluster, parts: &[(u32, u32)]) -> Result<Vec<(u32, u32)>, PlacementError> {
    let mut used: Vec<(u32, u32)> = Vec::with_capacity(parts.len());
    for &(n, g) in parts {
        let node = cluster
            .nodes
            .get(n as usize)
            .ok_or_else(|| PlacementError::UnknownNode(n.to_string()))?;
        if g > node.gpus {
            return Err(PlacementError::TooMany {
                node: node.name.clone(),
                asked: g,
                has: node.gpus,
            });
        }
        if used.iter().any(|p| p.0 == n) {
            return Err(PlacementError::Duplicate(node.name.clone()));
        }
        if g > 0 {
            used.push((n, g));
        }
    }
    used.sort_unstable();
    Ok(used)
}

/// A key equal for placements whose topologies are the same up to renaming nodes and
/// racks, so their optimum can be computed once: per used rack its uplink share and
/// its nodes' (intra, NIC share, GPUs), canonically ordered.
pub fn signature(cluster: &Cluster, parts: &[(u32, u32)]) -> Result<Vec<u128>, PlacementError> {
    let used = check(cluster, parts)?;
    let multi_rack = used
        .windows(2)
        .any(|w| cluster.nodes[w[0].0 as usize].switch != cluster.nodes[w[1].0 as usize].switch);
    let mut racks: BTreeMap<u32, Vec<[u128; 5]>> = BTreeMap::new();
    for &(n, g) in &used {
        let node = &cluster.nodes[n as usize];
        let (intra, nic) = node_bandwidths(node)?;
        let share = nic.times(Frac::new(g as u128, node.gpus as u128));
        racks.entry(node.switch).or_default().push([
            intra.num(),
            intra.den(),
            share.num(),
            share.den(),
            g as u128,
        ]);
    }
    let mut keyed: Vec<Vec<u128>> = Vec::with_capacity(racks.len());
    for (s, mut nodes) in racks {
        nodes.sort_unstable();
        let in_rack = nodes.iter().map(|k| k[4]).sum::<u128>() as u32;
        let up = if multi_rack {
            uplink_share(cluster, s, in_rack)?.unwrap_or(Frac::ZERO)
        } else {
            Frac::ZERO
        };
        let mut k = vec![up.num(), up.den(), nodes.len() as u128];
        k.extend(nodes.iter().flatten());
        keyed.push(k);
    }
    keyed.sort_unstable();
    Ok(keyed.concat())
}

/// Prices placements by their optimal allreduce time, computing each distinct
/// topology (by [`signature`]) once. A simulation or a scheduler keeps one per cluster.
#[derive(Debug, Default)]
pub struct Pricer {
    cache: BTreeMap<Vec<u128>, f64>,
    solves: u64,
    lookups: u64,
}

impl Pricer {
    /// An empty cache.
    pub fn new() -> Pricer {
        Pricer::default()
    }

    /// Seconds per GB of per-rank buffer for the optimal allreduce on `parts`
    /// (`(node, GPUs)`); 0 for fewer than two GPUs.
    pub fn allreduce_s_per_gb(
        &mut self,
        cluster: &Cluster,
        parts: &[(u32, u32)],
    ) -> Result<f64, PlacementError> {
        self.lookups += 1;
        if parts.iter().map(|p| p.1).sum::<u32>() < 2 {
            return Ok(0.0);
        }
        let key = signature(cluster, parts)?;
        if let Some(&s) = self.cache.get(&key) {
            return Ok(s);
        }
        let t = placement_topology(cluster, parts)?;
        let s = crate::Bandwidths::of(&t)
            .seconds_per_gb(crate::Collective::Allreduce, t.n())
            .to_f64();
        self.solves += 1;
        self.cache.insert(key, s);
        Ok(s)
    }

    /// `(distinct topologies solved, prices asked)`.
    pub fn stats(&self) -> (u64, u64) {
        (self.solves, self.lookups)
    }
}
