//! Shared GPUs: pods that ask for part of one GPU (thousandths, "milli"), whole GPUs,
//! CPU milli-cores and memory, and nodes that offer GPUs of one type, CPU and memory.
//!
//! Alibaba's 2023 GPU trace is written in these terms, and so are the FGD paper's
//! experiments on it: a pod with `gpu_milli` 460 takes 460 thousandths of one GPU and
//! leaves the rest to others. The placement names the GPUs and the share of each, and
//! the invariants are that no GPU gives out more than [`MILLI`] and no node more CPU
//! or memory than it has.

use crate::CompactString;

/// Thousandths in one GPU.
pub const MILLI: u32 = 1000;

/// The most GPUs one node may have (FGD's node model keeps them in a fixed array).
pub const MAX_GPUS_PER_NODE: usize = 8;

/// Kubernetes' quality-of-service class, as the trace records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub enum Qos {
    /// Latency-sensitive (Alibaba's online services).
    #[serde(rename = "LS")]
    Ls,
    /// Best-effort.
    #[serde(rename = "BE")]
    Be,
    /// Kubernetes' Burstable.
    Burstable,
    /// Kubernetes' Guaranteed.
    Guaranteed,
}

impl Qos {
    /// The class the trace's `qos` column names, if it is one of the four.
    pub fn parse(s: &str) -> Option<Qos> {
        Some(match s {
            "LS" => Qos::Ls,
            "BE" => Qos::Be,
            "Burstable" => Qos::Burstable,
            "Guaranteed" => Qos::Guaranteed,
            _ => return None,
        })
    }

    /// The trace's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Qos::Ls => "LS",
            Qos::Be => "BE",
            Qos::Burstable => "Burstable",
            Qos::Guaranteed => "Guaranteed",
        }
    }
}

/// One pod of a GPU-sharing trace.
#[derive(Debug, Clone, PartialEq)]
pub struct Pod {
    /// The trace's name for it.
    pub name: CompactString,
    /// CPU request, thousandths of a core.
    pub cpu_milli: u32,
    /// Memory request, MiB.
    pub mem_mib: u32,
    /// GPUs: 0 for a CPU-only pod.
    pub num_gpu: u8,
    /// Thousandths of each of its GPUs: below [`MILLI`] only for a one-GPU pod.
    pub gpu_milli: u32,
    /// GPU types it may run on; empty for any.
    pub gpu_spec: Vec<CompactString>,
    /// Its QoS class, where the trace gives one.
    pub qos: Option<Qos>,
    /// Creation time, seconds from the trace's start.
    pub creation: Option<u64>,
    /// Deletion time, seconds; `None` for a pod still running at the trace's end.
    pub deletion: Option<u64>,
}

impl Pod {
    /// Thousandths of GPUs it asks for in all.
    pub fn total_gpu_milli(&self) -> u64 {
        u64::from(self.num_gpu) * u64::from(self.gpu_milli)
    }

    /// Whether it shares one GPU with others.
    pub fn is_fractional(&self) -> bool {
        self.num_gpu == 1 && self.gpu_milli < MILLI
    }

    /// Whether a node with GPUs of type `ty` meets its GPU-type constraint.
    pub fn accepts_type(&self, ty: &str) -> bool {
        self.gpu_spec.is_empty() || self.gpu_spec.iter().any(|t| t == ty)
    }
}

/// One node of a GPU-sharing cluster.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuNode {
    /// Its name.
    pub name: CompactString,
    /// CPU, thousandths of a core.
    pub cpu_milli: u32,
    /// Memory, MiB.
    pub mem_mib: u32,
    /// GPUs, at most [`MAX_GPUS_PER_NODE`].
    pub gpus: u8,
    /// Their type (empty for a CPU node).
    pub gpu_type: CompactString,
}

/// Where one pod runs: a node, and on it the GPUs with the thousandths it takes of each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharePlacement {
    /// Index of the node in the cluster's node list.
    pub node: usize,
    /// (GPU index on the node, thousandths of it).
    pub gpus: Vec<(u8, u32)>,
}
