//! Closed-form allreduce costs of the schedules NCCL and hierarchical libraries use
//! (collectives.md §2.2), for `apiary comm compare` to show beside the optimum.
//!
//! They apply to box-shaped topologies (`n` boxes of `g` GPUs on an intra-box switch,
//! one NIC per GPU), which is what box presets and cluster placements produce. Each
//! cost is `α·steps + bytes/bandwidth` with NCCL's default latencies (Simple protocol,
//! `src/graph/tuning.cc`).

use serde::Serialize;

use crate::frac::Frac;

/// The shape the closed forms need.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct BoxShape {
    /// Boxes (`n`).
    pub boxes: u32,
    /// GPUs per box (`g`).
    pub gpus: u32,
    /// Per-GPU bandwidth into the intra-box switch, GB/s (`B_nv`).
    pub intra: Frac,
    /// Per-GPU NIC bandwidth, GB/s (`B_nic`); unused when `boxes == 1`.
    pub nic: Frac,
}

/// NCCL's Simple-protocol base latency, µs.
pub const BASE_US: f64 = 8.4;
/// NCCL's Simple-protocol per-hop latency over NVLink (ring), µs.
pub const HOP_NVLINK_US: f64 = 3.4;
/// NCCL's Simple-protocol per-hop latency over the network, µs.
pub const HOP_NET_US: f64 = 14.0;

/// One schedule's cost.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Cost {
    /// Schedule name.
    pub schedule: &'static str,
    /// Bandwidth-term algbw, GB/s (buffer bytes over the bandwidth term).
    pub algbw: f64,
    /// Latency term, µs.
    pub latency_us: f64,
}

impl Cost {
    /// Seconds for a buffer of `gb` GB.
    pub fn seconds(&self, gb: f64) -> f64 {
        self.latency_us * 1e-6 + gb / self.algbw
    }
}

impl BoxShape {
    fn n(&self) -> f64 {
        (self.boxes * self.gpus) as f64
    }

    fn hop_us(&self) -> f64 {
        if self.boxes > 1 {
            HOP_NET_US
        } else {
            HOP_NVLINK_US
        }
    }

    /// Per-rank bandwidth a flat ring reaches: NVSwitch-limited in one box; across
    /// boxes, `g` rail-aligned channels each limited by its NIC hop.
    fn ring_bw(&self) -> f64 {
        let nv = self.intra.to_f64();
        if self.boxes > 1 {
            nv.min(self.gpus as f64 * self.nic.to_f64())
        } else {
            nv
        }
    }

    /// Flat ring allreduce: `2(N−1)·α + 2(N−1)/N · S/B`.
    pub fn ring(&self) -> Cost {
        let n = self.n();
        Cost {
            schedule: "ring",
            algbw: self.ring_bw() * n / (2.0 * (n - 1.0)),
            latency_us: BASE_US + 2.0 * (n - 1.0) * self.hop_us(),
        }
    }

    /// NCCL's double binary tree: per-rank traffic `2S` each way, so `2S/B`, and
    /// `2·log2(N)` hops.
    pub fn double_binary_tree(&self) -> Cost {
        Cost {
            schedule: "double binary tree",
            algbw: self.ring_bw() / 2.0,
            latency_us: BASE_US + 2.0 * self.n().log2().ceil() * self.hop_us(),
        }
    }

    /// Hierarchical allreduce: intra-box reduce-scatter, inter-box allreduce of `S/g`
    /// per GPU over its NIC, intra-box allgather; phases in sequence (times add) or
    /// overlapped (the slowest phase sets the bandwidth).
    pub fn hierarchical(&self, overlapped: bool) -> Cost {
        let (n, g) = (self.boxes as f64, self.gpus as f64);
        let intra = 2.0 * (g - 1.0) / g / self.intra.to_f64();
        let inter = if self.boxes > 1 {
            2.0 * (n - 1.0) / n / g / self.nic.to_f64()
        } else {
            0.0
        };
        let per_gb = if overlapped {
            intra.max(inter)
        } else {
            intra + inter
        };
        Cost {
            schedule: if overlapped {
                "hierarchical, overlapped"
            } else {
                "hierarchical, in sequence"
            },
            algbw: 1.0 / per_gb,
            latency_us: BASE_US + 2.0 * (g - 1.0) * HOP_NVLINK_US + 2.0 * (n - 1.0) * HOP_NET_US,
        }
    }

    /// All four closed forms.
    pub fn all(&self) -> Vec<Cost> {
        vec![
            self.ring(),
            self.double_binary_tree(),
            self.hierarchical(false),
            self.hierarchical(true),
        ]
    }
}
