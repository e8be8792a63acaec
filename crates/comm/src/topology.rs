//! Topologies: compute nodes (GPUs, GCDs) that send and receive, switch nodes (NVSwitch,
//! NIC, IB/Ethernet switch) that only forward, and directed links with a bandwidth per
//! direction.
//!
//! Bandwidths are read as exact decimals and scaled to integer capacities with a common
//! unit, because the optimum is an exact ratio of cut sizes and the tree schedule needs
//! integer edge loads (collectives.md §1.1).

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::closed::BoxShape;
use crate::frac::{Frac, gcd};

/// What a node does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeKind {
    /// Holds data: a GPU or GCD.
    Compute,
    /// Only forwards: NVSwitch, NIC, network switch.
    Switch,
}

/// A node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    /// Name as given.
    pub name: String,
    /// Compute or switch.
    pub kind: NodeKind,
}

/// A directed edge with an integer capacity in units of [`Topology::unit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Edge {
    /// Tail node index.
    pub from: u32,
    /// Head node index.
    pub to: u32,
    /// Capacity in units.
    pub cap: u64,
}

/// A validated topology: at least two compute nodes, every compute node reachable from
/// every other, switches balanced (as much bandwidth in as out), parallel links merged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Topology {
    name: String,
    nodes: Vec<Node>,
    edges: Vec<Edge>,
    compute: Vec<u32>,
    unit: Frac,
    shape: Option<BoxShape>,
}

/// Why a topology was rejected. Each message names where: the file (or preset) and,
/// where known, the line and the field.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TopologyError {
    /// The file is not valid JSON/TOML or does not have the format's fields.
    #[error("{at}: {msg}")]
    Syntax {
        /// `file:line:column`.
        at: String,
        /// The parser's message.
        msg: String,
    },
    /// A link names a node that is declared under neither `compute` nor `switches`.
    #[error("{at}: unknown node '{name}' (declare it under `compute` or `switches`)")]
    UnknownNode {
        /// Where.
        at: String,
        /// The name.
        name: String,
    },
    /// A node is declared with an empty name (or only spaces).
    #[error("{at}: a node's name is empty")]
    EmptyName {
        /// Where.
        at: String,
    },
    /// A node is declared twice.
    #[error("{at}: node '{name}' is declared twice")]
    DuplicateNode {
        /// Where.
        at: String,
        /// The name.
        name: String,
    },
    /// A bandwidth is zero, negative, not finite, or has more than 12 decimals.
    #[error("{at}: bandwidth {value} must be a positive number (GB/s per direction)")]
    BadBandwidth {
        /// Where.
        at: String,
        /// The value as read.
        value: String,
    },
    /// A link from a node to itself.
    #[error("{at}: link from '{name}' to itself")]
    SelfLink {
        /// Where.
        at: String,
        /// The node.
        name: String,
    },
    /// Fewer than two compute nodes: no collective to plan.
    #[error("{at}: needs at least 2 compute nodes, has {count}")]
    TooFewCompute {
        /// Where.
        at: String,
        /// How many there are.
        count: usize,
    },
    /// A switch forwards, so it must be able to send on what it receives.
    #[error(
        "{at}: switch '{name}' is unbalanced: {inbound} GB/s in, {outbound} GB/s out (a switch must have as much bandwidth in as out; use duplex links)"
    )]
    Unbalanced {
        /// Where.
        at: String,
        /// The switch.
        name: String,
        /// Total inbound bandwidth.
        inbound: String,
        /// Total outbound bandwidth.
        outbound: String,
    },
    /// Some compute node cannot send to another: no collective can finish.
    #[error("{at}: compute nodes are disconnected: '{to}' cannot be reached from '{from}'")]
    Disconnected {
        /// Where.
        at: String,
        /// Sender.
        from: String,
        /// Unreachable receiver.
        to: String,
    },
    /// Bandwidths whose ratio is too extreme to hold as exact integers.
    #[error(
        "{at}: bandwidths span too wide a range to plan exactly (largest / smallest step over 2^40)"
    )]
    Range {
        /// Where.
        at: String,
    },
    /// The declared box shape does not describe the links.
    #[error("{at}: shape {shape}: {msg}")]
    Shape {
        /// Where.
        at: String,
        /// The shape as declared.
        shape: String,
        /// How it contradicts the links.
        msg: String,
    },
}

/// The on-disk format (JSON or TOML). See docs/comm.md.
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct TopologyFile {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    compute: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    switches: Vec<String>,
    links: Vec<LinkFile>,
    /// Box shape for the closed-form comparisons (optional).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    shape: Option<ShapeFile>,
}

#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct ShapeFile {
    boxes: u32,
    gpus: u32,
    intra: f64,
    #[serde(default)]
    nic: f64,
}

#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct LinkFile {
    from: String,
    to: String,
    /// GB/s per direction.
    bw: f64,
    /// One direction only (default: both directions, `bw` each way).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    directed: bool,
}

/// Builds a topology link by link; presets and the cluster conversion use it, and so
/// does the file reader.
#[derive(Clone, Debug, Default)]
pub struct TopologyBuilder {
    name: String,
    nodes: Vec<Node>,
    index: BTreeMap<String, u32>,
    arcs: Vec<(u32, u32, Frac)>,
    shape: Option<BoxShape>,
}

impl TopologyBuilder {
    /// An empty topology called `name`.
    pub fn new(name: &str) -> TopologyBuilder {
        TopologyBuilder {
            name: name.to_string(),
            ..TopologyBuilder::default()
        }
    }

    fn add(&mut self, name: &str, kind: NodeKind) -> Result<u32, String> {
        if self.index.contains_key(name) {
            return Err(name.to_string());
        }
        let id = self.nodes.len() as u32;
        self.nodes.push(Node {
            name: name.to_string(),
            kind,
        });
        self.index.insert(name.to_string(), id);
        Ok(id)
    }

    /// Adds a compute node; returns its index. Panics on a duplicate name (presets
    /// only; files go through [`Topology::parse`], which reports it).
    pub fn compute(&mut self, name: &str) -> u32 {
        self.add(name, NodeKind::Compute)
            .expect("duplicate node in a built-in topology")
    }

    /// Adds a switch node; returns its index.
    pub fn switch(&mut self, name: &str) -> u32 {
        self.add(name, NodeKind::Switch)
            .expect("duplicate node in a built-in topology")
    }

    /// A link of `bw` GB/s in each direction.
    pub fn link(&mut self, a: u32, b: u32, bw: Frac) {
        self.arc(a, b, bw);
        self.arc(b, a, bw);
    }

    /// A one-way link of `bw` GB/s.
    pub fn arc(&mut self, a: u32, b: u32, bw: Frac) {
        self.arcs.push((a, b, bw));
    }

    /// Declares the box shape (for closed-form comparisons).
    pub fn shape(&mut self, shape: BoxShape) {
        self.shape = Some(shape);
    }

    /// Index of a node by name.
    pub fn node(&self, name: &str) -> Option<u32> {
        self.index.get(name).copied()
    }

    /// Validates and scales to integer capacities.
    pub fn build(self) -> Result<Topology, TopologyError> {
        let at = self.name.clone();
        self.build_at(&at)
    }

    fn build_at(self, at: &str) -> Result<Topology, TopologyError> {
        let compute: Vec<u32> = (0..self.nodes.len() as u32)
            .filter(|&i| self.nodes[i as usize].kind == NodeKind::Compute)
            .collect();
        if compute.len() < 2 {
            return Err(TopologyError::TooFewCompute {
                at: at.to_string(),
                count: compute.len(),
            });
        }
        // Merge parallel links, keeping the order in which each pair first appears.
        let mut merged: Vec<(u32, u32, Frac)> = Vec::new();
        let mut slot: BTreeMap<(u32, u32), usize> = BTreeMap::new();
        for &(a, b, bw) in &self.arcs {
            match slot.get(&(a, b)) {
                Some(&i) => merged[i].2 = merged[i].2.plus(bw),
                None => {
                    slot.insert((a, b), merged.len());
                    merged.push((a, b, bw));
                }
            }
        }
        // Switches must be balanced.
        let n = self.nodes.len();
        let mut inbound = vec![Frac::ZERO; n];
        let mut outbound = vec![Frac::ZERO; n];
        for &(a, b, bw) in &merged {
            outbound[a as usize] = outbound[a as usize].plus(bw);
            inbound[b as usize] = inbound[b as usize].plus(bw);
        }
        for (i, node) in self.nodes.iter().enumerate() {
            if node.kind == NodeKind::Switch && inbound[i] != outbound[i] {
                return Err(TopologyError::Unbalanced {
                    at: at.to_string(),
                    name: node.name.clone(),
                    inbound: decimal(inbound[i]),
                    outbound: decimal(outbound[i]),
                });
            }
        }
        if let Some(sh) = &self.shape {
            check_shape(sh, &compute, &self.nodes, &outbound, at)?;
        }
        // Integer capacities: common denominator, then divide by the common factor.
        let mut lcm: u128 = 1;
        for &(_, _, bw) in &merged {
            lcm = lcm / gcd(lcm, bw.den()) * bw.den();
            if lcm > 1 << 60 {
                return Err(TopologyError::Range { at: at.to_string() });
            }
        }
        let ints: Vec<u128> = merged
            .iter()
            .map(|&(_, _, bw)| bw.num() * (lcm / bw.den()))
            .collect();
        let g = ints.iter().fold(0, |g, &c| gcd(g, c)).max(1);
        let mut edges = Vec::with_capacity(merged.len());
        for (&(a, b, _), &c) in merged.iter().zip(&ints) {
            let cap = c / g;
            if cap > 1 << 40 {
                return Err(TopologyError::Range { at: at.to_string() });
            }
            edges.push(Edge {
                from: a,
                to: b,
                cap: cap as u64,
            });
        }
        let t = Topology {
            name: self.name,
            nodes: self.nodes,
            edges,
            compute,
            unit: Frac::new(g, lcm),
            shape: self.shape,
        };
        t.check_connected(at)?;
        Ok(t)
    }
}

/// The closed forms read a shape as `boxes` x `gpus` compute nodes, each sending `intra`
/// GB/s into its box's switch (when a box has several GPUs) and, across boxes, `nic`
/// GB/s more: a shape whose count
/// differs from the compute nodes, or that promises a GPU more bandwidth than its links
/// carry, would print closed forms for another topology.
fn check_shape(
    sh: &BoxShape,
    compute: &[u32],
    nodes: &[Node],
    outbound: &[Frac],
    at: &str,
) -> Result<(), TopologyError> {
    let err = |msg: String| TopologyError::Shape {
        at: at.to_string(),
        shape: format!(
            "{{ boxes = {}, gpus = {}, intra = {}, nic = {} }}",
            sh.boxes,
            sh.gpus,
            decimal(sh.intra),
            decimal(sh.nic)
        ),
        msg,
    };
    if sh.boxes == 0 || sh.gpus == 0 {
        return Err(err("boxes and gpus must be at least 1".into()));
    }
    let n = sh.boxes as u64 * sh.gpus as u64;
    if n != compute.len() as u64 {
        return Err(err(format!(
            "describes {n} GPUs, the links {} compute nodes",
            compute.len()
        )));
    }
    // A box of one GPU has no intra-box traffic, and one box no NIC traffic.
    let intra = if sh.gpus > 1 { sh.intra } else { Frac::ZERO };
    let need = if sh.boxes > 1 {
        intra.plus(sh.nic)
    } else {
        intra
    };
    if let Some(&c) = compute.iter().find(|&&c| outbound[c as usize] < need) {
        return Err(err(format!(
            "gives each GPU {} GB/s out, but '{}' has links for {} GB/s",
            decimal(need),
            nodes[c as usize].name,
            decimal(outbound[c as usize])
        )));
    }
    Ok(())
}

/// A bandwidth as a decimal when it has one, else as a fraction.
pub(crate) fn decimal(f: Frac) -> String {
    let x = f.to_f64();
    match Frac::from_f64_decimal(x) {
        Some(back) if back == f => format!("{x}"),
        _ => f.to_string(),
    }
}

fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
    (line, col)
}

/// The line where `"name"` first appears after `from` (where an unknown name in a link
/// is written: it cannot appear earlier among the declarations, or it would be known).
fn line_of_quoted(text: &str, name: &str, from: usize) -> Option<usize> {
    let needle = format!("\"{name}\"");
    let start = from.min(text.len());
    text[start..]
        .find(&needle)
        .map(|i| line_col(text, start + i).0)
}

impl Topology {
    /// Reads a topology file: JSON when it starts with `{`, TOML otherwise.
    pub fn read(path: &Path) -> Result<Topology, TopologyError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| TopologyError::Syntax {
            at: file.clone(),
            msg: format!("cannot read: {e}"),
        })?;
        Topology::parse(&text, &file)
    }

    /// Parses a topology in the file format; `file` names it in errors.
    pub fn parse(text: &str, file: &str) -> Result<Topology, TopologyError> {
        let parsed: TopologyFile = if text.trim_start().starts_with('{') {
            serde_json::from_str(text).map_err(|e| TopologyError::Syntax {
                at: format!("{file}:{}:{}", e.line(), e.column()),
                msg: e
                    .to_string()
                    .split(" at line ")
                    .next()
                    .unwrap_or("")
                    .to_string(),
            })?
        } else {
            toml::from_str(text).map_err(|e| {
                let at = match e.span() {
                    Some(span) => {
                        let (l, c) = line_col(text, span.start);
                        format!("{file}:{l}:{c}")
                    }
                    None => file.to_string(),
                };
                TopologyError::Syntax {
                    at,
                    msg: e.message().to_string(),
                }
            })?
        };
        let links_start = text
            .find("links")
            .or_else(|| text.find("[[links]]"))
            .unwrap_or(0);
        let mut b = TopologyBuilder::new(parsed.name.as_deref().unwrap_or(file));
        let declared = |field: &str, i: usize, name: &str| {
            let line = line_of_quoted(text, name, 0).map_or(String::new(), |l| format!(":{l}"));
            format!("{file}{line}: {field}[{i}]")
        };
        for (field, names) in [("compute", &parsed.compute), ("switches", &parsed.switches)] {
            if let Some(i) = names.iter().position(|n| n.trim().is_empty()) {
                return Err(TopologyError::EmptyName {
                    at: format!("{file}: {field}[{i}]"),
                });
            }
        }
        for (i, name) in parsed.compute.iter().enumerate() {
            b.add(name, NodeKind::Compute)
                .map_err(|name| TopologyError::DuplicateNode {
                    at: declared("compute", i, &name),
                    name,
                })?;
        }
        for (i, name) in parsed.switches.iter().enumerate() {
            b.add(name, NodeKind::Switch)
                .map_err(|name| TopologyError::DuplicateNode {
                    at: declared("switches", i, &name),
                    name,
                })?;
        }
        for (i, l) in parsed.links.iter().enumerate() {
            let endpoint = |field: &str, name: &str| {
                b.node(name).ok_or_else(|| {
                    let line = line_of_quoted(text, name, links_start)
                        .map_or(String::new(), |l| format!(":{l}"));
                    TopologyError::UnknownNode {
                        at: format!("{file}{line}: links[{i}].{field}"),
                        name: name.to_string(),
                    }
                })
            };
            let from = endpoint("from", &l.from)?;
            let to = endpoint("to", &l.to)?;
            if from == to {
                return Err(TopologyError::SelfLink {
                    at: format!("{file}: links[{i}]"),
                    name: l.from.clone(),
                });
            }
            let bw = Frac::from_f64_decimal(l.bw)
                .filter(|f| *f > Frac::ZERO)
                .ok_or_else(|| TopologyError::BadBandwidth {
                    at: format!("{file}: links[{i}].bw"),
                    value: format!("{}", l.bw),
                })?;
            if l.directed {
                b.arc(from, to, bw);
            } else {
                b.link(from, to, bw);
            }
        }
        if let Some(sh) = &parsed.shape {
            let f = |x: f64, field: &str, zero_ok: bool| {
                Frac::from_f64_decimal(x)
                    .filter(|v| zero_ok || *v > Frac::ZERO)
                    .ok_or_else(|| TopologyError::BadBandwidth {
                        at: format!("{file}: shape.{field}"),
                        value: format!("{x}"),
                    })
            };
            b.shape(BoxShape {
                boxes: sh.boxes,
                gpus: sh.gpus,
                intra: f(sh.intra, "intra", false)?,
                nic: f(sh.nic, "nic", sh.boxes <= 1)?,
            });
        }
        b.build_at(file)
    }

    /// The topology in the file format (JSON), links listed one way each.
    pub fn to_json(&self) -> String {
        let mut links = Vec::new();
        let mut done = vec![false; self.edges.len()];
        let slot: BTreeMap<(u32, u32), usize> = self
            .edges
            .iter()
            .enumerate()
            .map(|(i, e)| ((e.from, e.to), i))
            .collect();
        for (i, e) in self.edges.iter().enumerate() {
            if done[i] {
                continue;
            }
            done[i] = true;
            let back = slot
                .get(&(e.to, e.from))
                .copied()
                .filter(|&j| !done[j] && self.edges[j].cap == e.cap);
            if let Some(j) = back {
                done[j] = true;
            }
            links.push(LinkFile {
                from: self.nodes[e.from as usize].name.clone(),
                to: self.nodes[e.to as usize].name.clone(),
                bw: self.bandwidth(e.cap).to_f64(),
                directed: back.is_none(),
            });
        }
        let file = TopologyFile {
            name: Some(self.name.clone()),
            compute: self
                .compute
                .iter()
                .map(|&c| self.nodes[c as usize].name.clone())
                .collect(),
            switches: self
                .nodes
                .iter()
                .filter(|n| n.kind == NodeKind::Switch)
                .map(|n| n.name.clone())
                .collect(),
            links,
            shape: self.shape.map(|s| ShapeFile {
                boxes: s.boxes,
                gpus: s.gpus,
                intra: s.intra.to_f64(),
                nic: s.nic.to_f64(),
            }),
        };
        serde_json::to_string_pretty(&file).expect("topology serializes") + "\n"
    }

    fn check_connected(&self, at: &str) -> Result<(), TopologyError> {
        let n = self.nodes.len();
        let mut out: Vec<Vec<u32>> = vec![Vec::new(); n];
        let mut inn: Vec<Vec<u32>> = vec![Vec::new(); n];
        for e in &self.edges {
            out[e.from as usize].push(e.to);
            inn[e.to as usize].push(e.from);
        }
        let reach = |adj: &[Vec<u32>]| {
            let mut seen = vec![false; n];
            let mut stack = vec![self.compute[0]];
            seen[self.compute[0] as usize] = true;
            while let Some(u) = stack.pop() {
                for &v in &adj[u as usize] {
                    if !seen[v as usize] {
                        seen[v as usize] = true;
                        stack.push(v);
                    }
                }
            }
            seen
        };
        let first = self.nodes[self.compute[0] as usize].name.clone();
        let fwd = reach(&out);
        if let Some(&c) = self.compute.iter().find(|&&c| !fwd[c as usize]) {
            return Err(TopologyError::Disconnected {
                at: at.to_string(),
                from: first,
                to: self.nodes[c as usize].name.clone(),
            });
        }
        let bwd = reach(&inn);
        if let Some(&c) = self.compute.iter().find(|&&c| !bwd[c as usize]) {
            return Err(TopologyError::Disconnected {
                at: at.to_string(),
                from: self.nodes[c as usize].name.clone(),
                to: first,
            });
        }
        Ok(())
    }

    /// Name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// All nodes.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// Directed edges, parallel links merged.
    pub fn edges(&self) -> &[Edge] {
        &self.edges
    }

    /// Indices of the compute nodes, in declaration order.
    pub fn compute(&self) -> &[u32] {
        &self.compute
    }

    /// Number of compute nodes (`N`).
    pub fn n(&self) -> usize {
        self.compute.len()
    }

    /// The box shape, when the topology is box-shaped (box presets, cluster
    /// placements, files with a `shape` table).
    pub fn shape(&self) -> Option<BoxShape> {
        self.shape
    }

    /// GB/s of one capacity unit.
    pub fn unit(&self) -> Frac {
        self.unit
    }

    /// Bandwidth in GB/s of `cap` units.
    pub fn bandwidth(&self, cap: u64) -> Frac {
        self.unit.times(Frac::int(cap as u128))
    }

    /// The same topology with every edge reversed: reduce-scatter's view (collectives.md
    /// §1.2).
    pub fn reversed(&self) -> Topology {
        let mut t = self.clone();
        for e in &mut t.edges {
            std::mem::swap(&mut e.from, &mut e.to);
        }
        t
    }

    /// True when every link has an opposite link of the same capacity, so reduce-scatter
    /// and allgather have the same optimum.
    pub fn is_symmetric(&self) -> bool {
        let set: BTreeMap<(u32, u32), u64> =
            self.edges.iter().map(|e| ((e.from, e.to), e.cap)).collect();
        self.edges
            .iter()
            .all(|e| set.get(&(e.to, e.from)) == Some(&e.cap))
    }
}
