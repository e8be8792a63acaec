//! The state placement works on: each node's CPU, memory and per-GPU thousandths left,
//! and each pod's demand, with GPU types and type constraints turned into small ids so
//! that a node's state is a plain value to copy, compare and hash.

use crate::ShareError;
use apiary_model::CompactString;
use apiary_model::share::{GpuNode, MAX_GPUS_PER_NODE, MILLI, Pod};

/// Thousandths of one GPU, signed for arithmetic.
pub(crate) const M: i32 = MILLI as i32;

/// What a pod asks of a node, as the policies see it (FGD's `PodResource`; memory is
/// only checked when filtering).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Demand {
    /// CPU, thousandths of a core.
    pub cpu: i64,
    /// Thousandths of each GPU (0 for a CPU-only pod).
    pub milli: i32,
    /// GPUs.
    pub num: u8,
    /// Its GPU-type constraint, an index into [`Types::specs`] (0: none).
    pub spec: u16,
}

impl Demand {
    /// Thousandths of GPUs in all.
    pub fn total_milli(&self) -> i64 {
        i64::from(self.milli) * i64::from(self.num)
    }

    /// Whether it takes part of one GPU.
    pub fn is_fractional(&self) -> bool {
        self.num == 1 && self.milli < M
    }
}

/// One node's resources left, and how many pods of each GPU count it holds (what
/// GpuClustering groups by).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct NodeState {
    /// CPU left, thousandths.
    pub cpu_left: i64,
    /// CPU it has.
    pub cpu_cap: i64,
    /// Memory left, MiB.
    pub mem_left: i64,
    /// Thousandths left on each GPU; only the first `gpus` count.
    pub gpu_left: [i32; MAX_GPUS_PER_NODE],
    /// GPUs it has.
    pub gpus: u8,
    /// Its GPU type, an index into [`Types::names`].
    pub ty: u8,
    /// Pods it holds by affinity: index 0 fractional, k pods of k whole GPUs.
    pub affinity: [u16; MAX_GPUS_PER_NODE + 1],
}

impl NodeState {
    /// The GPUs' thousandths left.
    pub fn left(&self) -> &[i32] {
        &self.gpu_left[..usize::from(self.gpus)]
    }

    /// Thousandths left over all its GPUs.
    pub fn total_left(&self) -> i64 {
        self.left().iter().map(|&x| i64::from(x)).sum()
    }

    /// GPUs nobody uses.
    pub fn free_gpus(&self) -> usize {
        self.left().iter().filter(|&&x| x == M).count()
    }

    /// Whether `num` of its GPUs each have `milli` left.
    pub fn gpus_fit(&self, milli: i32, num: u8) -> bool {
        num == 0 || self.left().iter().filter(|&&x| x >= milli).count() >= usize::from(num)
    }

    /// Whether nothing runs on it.
    pub fn is_idle(&self) -> bool {
        self.free_gpus() == usize::from(self.gpus) && self.cpu_left == self.cpu_cap
    }
}

/// The affinity slot of a demand (`None` for a CPU-only pod).
pub(crate) fn affinity_slot(d: &Demand) -> Option<usize> {
    match d.num {
        0 => None,
        _ if d.is_fractional() => Some(0),
        n => Some(usize::from(n)),
    }
}

/// GPU type names and the constraints pods name, as ids.
#[derive(Clone, Debug)]
pub struct Types {
    /// GPU type names; a node's `ty` indexes this. Index 0 is the empty type (no GPUs).
    pub names: Vec<CompactString>,
    /// Constraints as written (`V100M16|V100M32`); index 0 is "any".
    pub specs: Vec<String>,
    /// For each constraint, the bit set of type ids it allows (bit i: `names[i]`).
    pub masks: Vec<u64>,
}

impl Default for Types {
    fn default() -> Types {
        Types::new()
    }
}

impl Types {
    /// No types yet: only the empty type and the "any" constraint.
    pub fn new() -> Types {
        Types {
            names: vec![CompactString::default()],
            specs: vec![String::new()],
            masks: vec![u64::MAX],
        }
    }

    /// The id of GPU type `name`, added if new (at most 63 types).
    pub fn type_id(&mut self, name: &str) -> Result<u8, ShareError> {
        if let Some(i) = self.names.iter().position(|n| n == name) {
            return Ok(i as u8);
        }
        if self.names.len() >= 64 {
            return Err(ShareError::Input(format!(
                "more than 63 GPU types (at '{name}')"
            )));
        }
        self.names.push(name.into());
        Ok((self.names.len() - 1) as u8)
    }

    /// The id of the constraint allowing the types `spec` names (0 for none: any),
    /// added if new. Add the types first: a name no type has allows nothing.
    pub fn spec_id(&mut self, spec: &[CompactString]) -> u16 {
        if spec.is_empty() {
            return 0;
        }
        let text = spec
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join("|");
        if let Some(i) = self.specs.iter().position(|s| *s == text) {
            return i as u16;
        }
        let mask = spec
            .iter()
            .fold(0u64, |m, t| match self.names.iter().position(|n| n == t) {
                Some(i) => m | (1 << i),
                None => m,
            });
        self.specs.push(text);
        self.masks.push(mask);
        (self.specs.len() - 1) as u16
    }

    /// Whether a node of type `ty` meets constraint `spec`. A constrained pod never
    /// runs on a node without GPUs, as FGD's `IsNodeAccessibleToPod` has it.
    pub fn accessible(&self, ty: u8, spec: u16) -> bool {
        spec == 0 || (ty != 0 && self.masks[usize::from(spec)] & (1 << ty) != 0)
    }
}

/// One pod's requests: its demand as policies score it, and the CPU and memory the
/// node gives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    /// What policies score.
    pub demand: Demand,
    /// CPU it takes, thousandths.
    pub cpu: i64,
    /// Memory it takes, MiB.
    pub mem: i64,
}

/// A cluster and a workload in placement terms.
#[derive(Clone, Debug)]
pub struct Prepared {
    /// Types and constraints.
    pub types: Types,
    /// Each node's empty state, in node-list order.
    pub nodes: Vec<NodeState>,
    /// Each pod's requests, in pod-list order.
    pub pods: Vec<Request>,
}

impl Prepared {
    /// Turns nodes and pods into ids and states. A pod whose constraint names a type
    /// no node has can never run; it stays in the workload and fails to place, as in FGD.
    pub fn new(nodes: &[GpuNode], pods: &[Pod]) -> Result<Prepared, ShareError> {
        let mut types = Types::new();
        let mut states = Vec::with_capacity(nodes.len());
        for n in nodes {
            if usize::from(n.gpus) > MAX_GPUS_PER_NODE {
                return Err(ShareError::Input(format!(
                    "node {}: {} GPUs, at most {MAX_GPUS_PER_NODE}",
                    n.name, n.gpus
                )));
            }
            let ty = if n.gpus == 0 {
                0
            } else {
                types.type_id(&n.gpu_type)?
            };
            let mut gpu_left = [0; MAX_GPUS_PER_NODE];
            gpu_left[..usize::from(n.gpus)].fill(M);
            states.push(NodeState {
                cpu_left: i64::from(n.cpu_milli),
                cpu_cap: i64::from(n.cpu_milli),
                mem_left: i64::from(n.mem_mib),
                gpu_left,
                gpus: n.gpus,
                ty,
                affinity: [0; MAX_GPUS_PER_NODE + 1],
            });
        }
        let pods = pods
            .iter()
            .map(|p| {
                // Kubernetes scores a pod that requests no CPU as if it asked for a
                // tenth of a core (`GetNonzeroRequests`), and filters on what it asks.
                let d = Demand {
                    cpu: if p.cpu_milli == 0 {
                        100
                    } else {
                        i64::from(p.cpu_milli)
                    },
                    milli: p.gpu_milli.min(MILLI) as i32,
                    num: p.num_gpu,
                    spec: types.spec_id(&p.gpu_spec),
                };
                Request {
                    demand: d,
                    cpu: i64::from(p.cpu_milli),
                    mem: i64::from(p.mem_mib),
                }
            })
            .collect();
        Ok(Prepared {
            types,
            nodes: states,
            pods,
        })
    }

    /// GPUs in the cluster.
    pub fn total_gpus(&self) -> u64 {
        self.nodes.iter().map(|n| u64::from(n.gpus)).sum()
    }
}
