//! The job model: what a trace row becomes and what policies see.
//!
//! Fields that only some systems need (deadline for ElasticFlow, per-stage times for
//! Muri, dataset size for SiloD) are optional, so that every trace format loads into the
//! same struct and later policies need no loader changes.

use crate::time::Time;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Per-iteration stage times in milliseconds (Muri's `resource_time_0..2`).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct StageTimes {
    /// Storage IO and CPU preprocessing (or RL environment stepping).
    pub data: f64,
    /// GPU forward and backward.
    pub gpu: f64,
    /// Gradient communication over the network (0 for one GPU).
    pub net: f64,
}

/// One training job as submitted.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Job {
    /// The trace's own identifier (kept as text: traces use integers and UUIDs).
    pub id: String,
    /// Submission time, ms since the trace origin.
    pub submit: Time,
    /// Gang size: the job needs exactly this many GPUs at once.
    pub gpus: u32,
    /// Run time on a consolidated placement of `gpus` GPUs, in ms. For traces that
    /// give iterations and an iteration time, this is their product.
    pub duration: Time,
    /// Number of training iterations, when the trace gives it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iterations: Option<u64>,
    /// Model name (`resnet50`, `gpt2`, Gavel's `ResNet-18 (batch size 32)`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Global batch size, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_size: Option<u32>,
    /// Tenant or virtual cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vc: Option<String>,
    /// Priority; larger is more important. Traces without one use 0.
    #[serde(default)]
    pub priority: i32,
    /// Absolute deadline, ms since the trace origin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<Time>,
    /// Per-iteration stage times, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stages: Option<StageTimes>,
    /// Dataset size in GB, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dataset_gb: Option<f64>,
    /// Required GPU type, when the job is pinned to one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_type: Option<String>,
    /// Speed on each GPU type relative to the placement `duration` was measured on,
    /// keyed by lower-case type name (Gavel's throughput matrix: a ResNet-50 runs at
    /// 0.14× its V100 speed on a K80). Absent: the same speed on every type; a type
    /// the map does not name runs at 1.0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub type_speeds: Option<BTreeMap<String, f64>>,
    /// Iterations per second at each GPU count, for jobs a policy may run elastically
    /// (ElasticFlow's throughput tables). `duration` is then the time on `gpus` GPUs,
    /// and the simulator runs the job at the table's speed for the count it holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scaling: Option<crate::Scaling>,
    /// An adaptive job (Pollux's workloads): it tunes its batch to the GPUs it gets and
    /// progresses by goodput through measured training curves; `duration` is then 0.
    /// Not serialised: the data is built into apiary and attached by the trace reader.
    #[serde(skip)]
    pub adaptive: Option<crate::adaptive::Adaptive>,
}

impl Job {
    /// A job with only the fields every trace has.
    pub fn new(id: impl Into<String>, submit: Time, gpus: u32, duration: Time) -> Job {
        Job {
            id: id.into(),
            submit,
            gpus,
            duration,
            iterations: None,
            model: None,
            batch_size: None,
            vc: None,
            priority: 0,
            deadline: None,
            stages: None,
            dataset_gb: None,
            gpu_type: None,
            type_speeds: None,
            scaling: None,
            adaptive: None,
        }
    }

    /// Relative speed on GPUs of type `gpu_type` (matched without regard to case).
    pub fn type_speed(&self, gpu_type: &str) -> f64 {
        let Some(m) = &self.type_speeds else {
            return 1.0;
        };
        if let Some(&v) = m.get(gpu_type) {
            return v;
        }
        m.iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(gpu_type))
            .map_or(1.0, |(_, &v)| v)
    }

    /// GPU time of the job on its reference placement, in GPU-milliseconds.
    pub fn gpu_time(&self) -> u128 {
        self.gpus as u128 * self.duration as u128
    }
}
