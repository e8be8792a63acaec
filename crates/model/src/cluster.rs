//! Cluster description: a tree of cluster → switch (rack) → node → GPU.
//!
//! A [`ClusterSpec`] is what a user writes (TOML, or a preset name) and what the peer
//! simulators ship (their `num_switch,num_node_p_switch,…` CSV); [`Cluster`] is the
//! flattened, validated topology the engine and policies index by node number.

use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

/// Why a cluster description was rejected.
#[derive(Debug, thiserror::Error)]
pub enum ClusterSpecError {
    /// The TOML did not parse or had a wrong field.
    #[error("cluster spec {source_name}: {message}")]
    Toml {
        /// Where the text came from.
        source_name: String,
        /// The parser's message (it names line, column and field).
        message: String,
    },
    /// A peer-simulator CSV spec was malformed.
    #[error("cluster spec {source_name}, line {line}: {message}")]
    Csv {
        /// Where the text came from.
        source_name: String,
        /// 1-based line.
        line: usize,
        /// What was wrong.
        message: String,
    },
    /// The description parsed but is not a usable cluster.
    #[error("cluster spec {source_name}: {message}")]
    Invalid {
        /// Where the text came from.
        source_name: String,
        /// What was wrong, naming the field.
        message: String,
    },
    /// No preset of that name.
    #[error(
        "unknown cluster preset '{0}'{hint} (try n8g8, nNgG, philly, itp, or a .toml / .csv file)",
        hint = apiary_core::params::did_you_mean(.0, ["philly", "itp"])
    )]
    UnknownPreset(String),
}

/// A group of identical nodes under one switch.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeGroup {
    /// How many nodes of this shape.
    #[serde(default = "one")]
    pub count: u32,
    /// GPUs per node (1..=64).
    pub gpus: u32,
    /// GPU model name, e.g. `V100`.
    #[serde(default = "default_gpu_type")]
    pub gpu_type: String,
    /// CPU cores per node.
    #[serde(default)]
    pub cpus: u32,
    /// Host memory per node, GB.
    #[serde(default)]
    pub memory_gb: u32,
    /// NIC bandwidth per node (all its NICs together), Gbit/s per direction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nic_gbps: Option<f64>,
    /// Intra-node GPU interconnect bandwidth (NVLink/PCIe) per GPU, GB/s per direction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intra_gbps: Option<f64>,
}

fn one() -> u32 {
    1
}
fn default_gpu_type() -> String {
    "GPU".to_string()
}

/// One switch (rack) and its nodes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SwitchSpec {
    /// Optional name; defaults to `s<index>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// How many identical switches this entry stands for.
    #[serde(default = "one")]
    pub count: u32,
    /// Uplink bandwidth to the spine, Gbit/s per direction (none: non-blocking).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uplink_gbps: Option<f64>,
    /// The nodes under this switch.
    pub nodes: Vec<NodeGroup>,
}

/// A cluster as described by a user or a preset.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterSpec {
    /// Name shown in reports.
    pub name: String,
    /// The switches.
    pub switches: Vec<SwitchSpec>,
}

/// A switch of the built topology.
#[derive(Clone, Debug)]
pub struct Switch {
    /// Name.
    pub name: String,
    /// Nodes `first_node .. first_node + nodes` belong to this switch.
    pub first_node: u32,
    /// Number of nodes.
    pub nodes: u32,
    /// Uplink bandwidth, Gbit/s.
    pub uplink_gbps: Option<f64>,
}

/// A node of the built topology.
#[derive(Clone, Debug)]
pub struct Node {
    /// Name, `<switch>-n<index>`.
    pub name: String,
    /// Index of its switch.
    pub switch: u32,
    /// GPUs.
    pub gpus: u32,
    /// GPU model.
    pub gpu_type: String,
    /// CPU cores.
    pub cpus: u32,
    /// Memory, GB.
    pub memory_gb: u32,
    /// NIC, Gbit/s.
    pub nic_gbps: Option<f64>,
    /// Intra-node interconnect, GB/s.
    pub intra_gbps: Option<f64>,
}

/// The validated, flattened topology.
#[derive(Clone, Debug)]
pub struct Cluster {
    /// Name.
    pub name: String,
    /// Switches in order.
    pub switches: Vec<Switch>,
    /// Nodes in switch order.
    pub nodes: Vec<Node>,
    /// Total GPUs.
    pub total_gpus: u32,
    /// Largest GPU count of any node.
    pub max_gpus_per_node: u32,
}

impl ClusterSpec {
    /// Parses a TOML description.
    pub fn from_toml_str(text: &str, source_name: &str) -> Result<ClusterSpec, ClusterSpecError> {
        toml::from_str(text).map_err(|e| ClusterSpecError::Toml {
            source_name: source_name.to_string(),
            message: e.to_string(),
        })
    }

    /// Renders as TOML.
    pub fn to_toml(&self) -> String {
        toml::to_string(self).unwrap_or_default()
    }

    /// Parses the Tiresias-family CSV (`num_switch,num_node_p_switch,num_gpu_p_node,
    /// num_cpu_p_node,mem_p_node`), as shipped by Tiresias, Muri and ElasticFlow.
    pub fn from_peer_csv_str(
        text: &str,
        source_name: &str,
    ) -> Result<ClusterSpec, ClusterSpecError> {
        let mut lines = text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty());
        let err = |line: usize, message: String| ClusterSpecError::Csv {
            source_name: source_name.to_string(),
            line,
            message,
        };
        let (_, header) = lines.next().ok_or_else(|| err(1, "empty file".into()))?;
        let cols: Vec<&str> = header.split(',').map(str::trim).collect();
        let expect = [
            "num_switch",
            "num_node_p_switch",
            "num_gpu_p_node",
            "num_cpu_p_node",
            "mem_p_node",
        ];
        if cols != expect {
            return Err(err(1, format!("expected header {}", expect.join(","))));
        }
        let (i, row) = lines.next().ok_or_else(|| err(2, "no data row".into()))?;
        let vals: Vec<&str> = row.split(',').map(str::trim).collect();
        if vals.len() != 5 {
            return Err(err(
                i + 1,
                format!("expected 5 fields, found {}", vals.len()),
            ));
        }
        let mut nums = [0u32; 5];
        for (k, v) in vals.iter().enumerate() {
            nums[k] = v.parse().map_err(|_| {
                err(
                    i + 1,
                    format!("field {}: '{}' is not a non-negative integer", expect[k], v),
                )
            })?;
        }
        let name = std::path::Path::new(source_name)
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "cluster".into());
        let spec = ClusterSpec {
            name,
            switches: vec![SwitchSpec {
                name: None,
                count: nums[0],
                uplink_gbps: None,
                nodes: vec![NodeGroup {
                    count: nums[1],
                    gpus: nums[2],
                    gpu_type: default_gpu_type(),
                    cpus: nums[3],
                    memory_gb: nums[4],
                    nic_gbps: None,
                    intra_gbps: None,
                }],
            }],
        };
        spec.build_from(source_name)?;
        Ok(spec)
    }

    /// A built-in cluster: `nNgG` (N nodes of G GPUs, 32 nodes per switch, as the peers'
    /// `n64g8`/`n256g8` specs), optionally `nNgG-TYPE`; `philly`; `itp`.
    pub fn preset(name: &str) -> Result<ClusterSpec, ClusterSpecError> {
        match name {
            "philly" => return Ok(philly()),
            "itp" => return Ok(itp()),
            _ => {}
        }
        let (shape, gpu_type) = match name.split_once('-') {
            Some((s, t)) => (s, t.to_string()),
            None => (name, "V100".to_string()),
        };
        let parse = || -> Option<(u32, u32)> {
            let rest = shape.strip_prefix('n')?;
            let (n, g) = rest.split_once('g')?;
            Some((n.parse().ok()?, g.parse().ok()?))
        };
        let (n, g) = parse().ok_or_else(|| ClusterSpecError::UnknownPreset(name.to_string()))?;
        if n == 0 || g == 0 || g > 64 || n > 1_000_000 {
            return Err(ClusterSpecError::UnknownPreset(name.to_string()));
        }
        Ok(uniform(name, n, g, &gpu_type, 32))
    }

    /// Builds and validates the topology; errors name the spec's `name`, so use
    /// [`ClusterSpec::build_from`] for a spec read from a file.
    pub fn build(&self) -> Result<Cluster, ClusterSpecError> {
        self.build_from(&self.name)
    }

    /// Builds and validates the topology; errors name `source_name` (the file the spec
    /// was read from), which is where the user has to look.
    pub fn build_from(&self, source_name: &str) -> Result<Cluster, ClusterSpecError> {
        let invalid = |message: String| ClusterSpecError::Invalid {
            source_name: source_name.to_string(),
            message,
        };
        let mut switches = Vec::new();
        let mut nodes = Vec::new();
        let mut total: u64 = 0;
        let mut max_g = 0;
        for (si, s) in self.switches.iter().enumerate() {
            if s.nodes.is_empty() {
                return Err(invalid(format!("switches[{si}].nodes is empty")));
            }
            if let Some(v) = s.uplink_gbps.filter(|v| !(v.is_finite() && *v > 0.0)) {
                return Err(invalid(format!(
                    "switches[{si}].uplink_gbps = {v}: must be a positive number"
                )));
            }
            for rep in 0..s.count {
                let sw_idx = switches.len() as u32;
                let sname = match (&s.name, s.count) {
                    (Some(n), 1) => n.clone(),
                    (Some(n), _) => format!("{n}{rep}"),
                    (None, _) => format!("s{sw_idx}"),
                };
                let first = nodes.len() as u32;
                for (gi, g) in s.nodes.iter().enumerate() {
                    if g.gpus == 0 || g.gpus > 64 {
                        return Err(invalid(format!(
                            "switches[{si}].nodes[{gi}].gpus = {}: must be 1..=64",
                            g.gpus
                        )));
                    }
                    for (field, v) in [("nic_gbps", g.nic_gbps), ("intra_gbps", g.intra_gbps)] {
                        if let Some(v) = v.filter(|v| !(v.is_finite() && *v > 0.0)) {
                            return Err(invalid(format!(
                                "switches[{si}].nodes[{gi}].{field} = {v}: must be a positive number"
                            )));
                        }
                    }
                    for _ in 0..g.count {
                        let idx = nodes.len() as u32 - first;
                        nodes.push(Node {
                            name: format!("{sname}-n{idx}"),
                            switch: sw_idx,
                            gpus: g.gpus,
                            gpu_type: g.gpu_type.clone(),
                            cpus: g.cpus,
                            memory_gb: g.memory_gb,
                            nic_gbps: g.nic_gbps,
                            intra_gbps: g.intra_gbps,
                        });
                        total += g.gpus as u64;
                        max_g = max_g.max(g.gpus);
                        if nodes.len() > 4_000_000 {
                            return Err(invalid("more than 4,000,000 nodes".into()));
                        }
                    }
                }
                let count = nodes.len() as u32 - first;
                if count == 0 {
                    return Err(invalid(format!(
                        "switches[{si}] has no nodes (every count is 0)"
                    )));
                }
                switches.push(Switch {
                    name: sname,
                    first_node: first,
                    nodes: count,
                    uplink_gbps: s.uplink_gbps,
                });
            }
        }
        if nodes.is_empty() {
            return Err(invalid("the cluster has no nodes".into()));
        }
        if total > u32::MAX as u64 {
            return Err(invalid("more than 2^32 GPUs".into()));
        }
        Ok(Cluster {
            name: self.name.clone(),
            switches,
            nodes,
            total_gpus: total as u32,
            max_gpus_per_node: max_g,
        })
    }
}

fn uniform(name: &str, n: u32, g: u32, gpu_type: &str, per_switch: u32) -> ClusterSpec {
    let mut switches = Vec::new();
    let full = n / per_switch;
    let rest = n % per_switch;
    let group = |count| NodeGroup {
        count,
        gpus: g,
        gpu_type: gpu_type.to_string(),
        cpus: 64,
        memory_gb: 256,
        nic_gbps: None,
        intra_gbps: None,
    };
    if full > 0 {
        switches.push(SwitchSpec {
            name: None,
            count: full,
            uplink_gbps: None,
            nodes: vec![group(per_switch)],
        });
    }
    if rest > 0 {
        switches.push(SwitchSpec {
            name: None,
            count: 1,
            uplink_gbps: None,
            nodes: vec![group(rest)],
        });
    }
    ClusterSpec {
        name: name.to_string(),
        switches,
    }
}

/// Philly-like: the node counts the Helios authors assign to each Philly VC
/// (`philly_vc.csv`: 11 VCs, 352 nodes in all), 8 GPUs per node as in Philly's machine
/// list, one switch per VC.
fn philly() -> ClusterSpec {
    const VCS: [(&str, u32); 11] = [
        ("6214e9", 64),
        ("7f04ca", 32),
        ("11cb48", 16),
        ("b436b2", 64),
        ("ee9e8c", 64),
        ("e13805", 16),
        ("6c71a0", 32),
        ("2869ce", 16),
        ("ed69ec", 8),
        ("103959", 8),
        ("0e4a51", 32),
    ];
    ClusterSpec {
        name: "philly".into(),
        switches: VCS
            .iter()
            .map(|(vc, n)| SwitchSpec {
                name: Some(format!("vc-{vc}")),
                count: 1,
                uplink_gbps: None,
                nodes: vec![NodeGroup {
                    count: *n,
                    gpus: 8,
                    gpu_type: "P100".into(),
                    cpus: 48,
                    memory_gb: 256,
                    nic_gbps: Some(100.0),
                    intra_gbps: None,
                }],
            })
            .collect(),
    }
}

/// ITP-like: 128 nodes × 8 A100, the largest cluster ElasticFlow's Fig. 8(b) replays ITP
/// clusters on (`n128g8`), as 4 racks of 32 nodes.
fn itp() -> ClusterSpec {
    let mut s = uniform("itp", 128, 8, "A100", 32);
    for sw in &mut s.switches {
        for g in &mut sw.nodes {
            g.cpus = 64;
            g.memory_gb = 256;
            g.nic_gbps = Some(200.0);
            // Per GPU and direction (A100 NVLink: 600 GB/s both ways together).
            g.intra_gbps = Some(300.0);
        }
    }
    s
}

impl Cluster {
    /// A human-readable tree.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        let types: std::collections::BTreeMap<&str, u32> =
            self.nodes.iter().fold(Default::default(), |mut m, n| {
                *m.entry(n.gpu_type.as_str()).or_default() += n.gpus;
                m
            });
        let _ = writeln!(
            out,
            "cluster {}: {} switches, {} nodes, {} GPUs ({})",
            self.name,
            self.switches.len(),
            self.nodes.len(),
            self.total_gpus,
            types
                .iter()
                .map(|(t, c)| format!("{c} {t}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        for s in &self.switches {
            let nodes = &self.nodes[s.first_node as usize..(s.first_node + s.nodes) as usize];
            let gpus: u32 = nodes.iter().map(|n| n.gpus).sum();
            let uplink = s
                .uplink_gbps
                .map(|b| format!(", uplink {b} Gb/s"))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "  switch {}: {} nodes, {} GPUs{}",
                s.name, s.nodes, gpus, uplink
            );
            // Runs of identical nodes print as one line.
            let mut i = 0;
            while i < nodes.len() {
                let n = &nodes[i];
                let mut j = i + 1;
                while j < nodes.len()
                    && nodes[j].gpus == n.gpus
                    && nodes[j].gpu_type == n.gpu_type
                    && nodes[j].cpus == n.cpus
                    && nodes[j].memory_gb == n.memory_gb
                {
                    j += 1;
                }
                let range = if j - i == 1 {
                    n.name.clone()
                } else {
                    format!("{} .. {}", n.name, nodes[j - 1].name)
                };
                let nic = n
                    .nic_gbps
                    .map(|b| format!(", NIC {b} Gb/s"))
                    .unwrap_or_default();
                let _ = writeln!(
                    out,
                    "    {range}: {} x {} GPU, {} CPU, {} GB{nic}",
                    n.gpus, n.gpu_type, n.cpus, n.memory_gb
                );
                i = j;
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets() {
        let c = ClusterSpec::preset("n8g8").unwrap().build().unwrap();
        assert_eq!((c.switches.len(), c.nodes.len(), c.total_gpus), (1, 8, 64));
        let c = ClusterSpec::preset("n64g8").unwrap().build().unwrap();
        assert_eq!((c.switches.len(), c.total_gpus), (2, 512));
        let c = ClusterSpec::preset("n40g4-T4").unwrap().build().unwrap();
        assert_eq!((c.switches.len(), c.nodes[39].gpu_type.as_str()), (2, "T4"));
        let c = ClusterSpec::preset("philly").unwrap().build().unwrap();
        assert_eq!((c.nodes.len(), c.total_gpus), (352, 2816));
        let c = ClusterSpec::preset("itp").unwrap().build().unwrap();
        assert_eq!(c.total_gpus, 1024);
        assert!(ClusterSpec::preset("n0g8").is_err());
        assert!(ClusterSpec::preset("bogus").is_err());
    }

    #[test]
    fn toml_roundtrip_and_errors() {
        let text = r#"
name = "lab"
[[switches]]
uplink_gbps = 100.0
[[switches.nodes]]
count = 2
gpus = 4
gpu_type = "A100"
cpus = 32
memory_gb = 512
"#;
        let spec = ClusterSpec::from_toml_str(text, "lab.toml").unwrap();
        let c = spec.build().unwrap();
        assert_eq!(c.total_gpus, 8);
        assert_eq!(
            ClusterSpec::from_toml_str(&spec.to_toml(), "x").unwrap(),
            spec
        );
        let bad = text.replace("gpus = 4", "gpus = 0");
        let e = ClusterSpec::from_toml_str(&bad, "lab.toml")
            .unwrap()
            .build()
            .unwrap_err()
            .to_string();
        assert!(e.contains("switches[0].nodes[0].gpus"), "{e}");
        let e = ClusterSpec::from_toml_str("name = 1", "bad.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("bad.toml") && e.contains("line 1"), "{e}");
    }

    #[test]
    fn peer_csv() {
        let s = ClusterSpec::from_peer_csv_str(
            "num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node\n2,32,8,64,256",
            "specs/n64g8.csv",
        )
        .unwrap();
        let c = s.build().unwrap();
        assert_eq!(
            (c.name.as_str(), c.switches.len(), c.total_gpus),
            ("n64g8", 2, 512)
        );
        let e = ClusterSpec::from_peer_csv_str("num_switch,x\n1,2", "f.csv")
            .unwrap_err()
            .to_string();
        assert!(e.contains("f.csv, line 1"), "{e}");
        let e = ClusterSpec::from_peer_csv_str(
            "num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node\n1,a,8,1,1",
            "f.csv",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("line 2") && e.contains("num_node_p_switch"),
            "{e}"
        );
        // Windows line endings (the peers' files have them) and blank lines: the same
        // line is named.
        let e = ClusterSpec::from_peer_csv_str(
            "num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node\r\n\r\n1,a,8,1,1\r\n",
            "f.csv",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("f.csv, line 3"), "{e}");
        let ok = ClusterSpec::from_peer_csv_str(
            "num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node\r\n1,2,8,1,1\r\n",
            "f.csv",
        );
        assert_eq!(ok.unwrap().build().unwrap().total_gpus, 16);
        // Errors of a spec read from a file name the file, not the spec's name.
        let e = ClusterSpec::from_toml_str(
            "name = \"production\"\n[[switches]]\n[[switches.nodes]]\ngpus = 0\n",
            "site/prod.toml",
        )
        .unwrap()
        .build_from("site/prod.toml")
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("cluster spec site/prod.toml:"), "{e}");
    }
}
