//! The job model: what a trace row becomes and what policies see.
//!
//! Fields that only some systems need (deadline for ElasticFlow, per-stage times for
//! Muri, dataset size for SiloD) are optional, so that every trace format loads into the
//! same struct and later policies need no loader changes.

use crate::time::Time;
use compact_str::CompactString;
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
///
/// Fields that a few systems' traces carry (stage times, dataset sizes, per-type speeds,
/// scaling tables, adaptive applications) live out of line in [`JobExtras`]: a trace
/// holds every job in one list, and keeping those fields inline made each job 288 bytes
/// instead of 168, paid in copies and page faults on every read.
#[derive(Clone, Debug)]
pub struct Job {
    /// The trace's own identifier (kept as text: traces use integers and UUIDs).
    pub id: CompactString,
    /// Submission time, ms since the trace origin.
    pub submit: Time,
    /// Gang size: the job needs exactly this many GPUs at once.
    pub gpus: u32,
    /// Priority; larger is more important. Traces without one use 0.
    pub priority: i32,
    /// Run time on a consolidated placement of `gpus` GPUs, in ms. For traces that
    /// give iterations and an iteration time, this is their product.
    pub duration: Time,
    /// Number of training iterations, when the trace gives it.
    pub iterations: Option<u64>,
    /// Model name (`resnet50`, `gpt2`, Gavel's `ResNet-18 (batch size 32)`, …).
    pub model: Option<String>,
    /// Global batch size, when known.
    pub batch_size: Option<u32>,
    /// Tenant or virtual cluster.
    pub vc: Option<CompactString>,
    /// Absolute deadline, ms since the trace origin.
    pub deadline: Option<Time>,
    /// Required GPU type, when the job is pinned to one.
    pub gpu_type: Option<String>,
    extras: Option<Box<JobExtras>>,
}

/// The fields of a [`Job`] that only some traces carry.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct JobExtras {
    /// Per-iteration stage times, ms.
    pub stages: Option<StageTimes>,
    /// Dataset size in GB, when known.
    pub dataset_gb: Option<f64>,
    /// Speed on each GPU type relative to the placement `duration` was measured on,
    /// keyed by lower-case type name (Gavel's throughput matrix: a ResNet-50 runs at
    /// 0.14× its V100 speed on a K80). Absent: the same speed on every type; a type
    /// the map does not name runs at 1.0.
    pub type_speeds: Option<BTreeMap<String, f64>>,
    /// Iterations per second at each GPU count, for jobs a policy may run elastically
    /// (ElasticFlow's throughput tables). `duration` is then the time on `gpus` GPUs,
    /// and the simulator runs the job at the table's speed for the count it holds.
    pub scaling: Option<crate::Scaling>,
    /// An adaptive job (Pollux's workloads): it tunes its batch to the GPUs it gets and
    /// progresses by goodput through measured training curves; `duration` is then 0.
    /// Not serialised: the data is built into apiary and attached by the trace reader.
    pub adaptive: Option<crate::adaptive::Adaptive>,
    /// What it reads and how fast (the IO model, `--io`): the trace's dataset size
    /// with a model's rates, given by [`crate::io::assign`]. Not serialised.
    pub data: Option<crate::io::DataProfile>,
}

impl JobExtras {
    /// Whether every field is absent.
    pub fn is_empty(&self) -> bool {
        let JobExtras {
            stages,
            dataset_gb,
            type_speeds,
            scaling,
            adaptive,
            data,
        } = self;
        stages.is_none()
            && dataset_gb.is_none()
            && type_speeds.is_none()
            && scaling.is_none()
            && adaptive.is_none()
            && data.is_none()
    }
}

static NO_EXTRAS: JobExtras = JobExtras {
    stages: None,
    dataset_gb: None,
    type_speeds: None,
    scaling: None,
    adaptive: None,
    data: None,
};

impl PartialEq for Job {
    fn eq(&self, o: &Job) -> bool {
        // Spelled out so that a new field cannot be left out of the comparison.
        let Job {
            id,
            submit,
            gpus,
            priority,
            duration,
            iterations,
            model,
            batch_size,
            vc,
            deadline,
            gpu_type,
            extras: _,
        } = self;
        *id == o.id
            && *submit == o.submit
            && *gpus == o.gpus
            && *priority == o.priority
            && *duration == o.duration
            && *iterations == o.iterations
            && *model == o.model
            && *batch_size == o.batch_size
            && *vc == o.vc
            && *deadline == o.deadline
            && *gpu_type == o.gpu_type
            // A job given extras and then cleared of them equals one never given any.
            && self.extras() == o.extras()
    }
}

/// A job as serialised: every field flat, in the order the wire format has always had.
#[derive(Serialize)]
struct JobOut<'a> {
    id: &'a str,
    submit: Time,
    gpus: u32,
    duration: Time,
    #[serde(skip_serializing_if = "Option::is_none")]
    iterations: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    model: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    batch_size: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    vc: Option<&'a str>,
    priority: i32,
    #[serde(skip_serializing_if = "Option::is_none")]
    deadline: Option<Time>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stages: Option<&'a StageTimes>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dataset_gb: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    gpu_type: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    type_speeds: Option<&'a BTreeMap<String, f64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    scaling: Option<&'a crate::Scaling>,
}

/// A job as deserialised (see [`JobOut`]).
#[derive(Deserialize)]
struct JobIn {
    id: CompactString,
    submit: Time,
    gpus: u32,
    duration: Time,
    #[serde(default)]
    iterations: Option<u64>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    batch_size: Option<u32>,
    #[serde(default)]
    vc: Option<CompactString>,
    #[serde(default)]
    priority: i32,
    #[serde(default)]
    deadline: Option<Time>,
    #[serde(default)]
    stages: Option<StageTimes>,
    #[serde(default)]
    dataset_gb: Option<f64>,
    #[serde(default)]
    gpu_type: Option<String>,
    #[serde(default)]
    type_speeds: Option<BTreeMap<String, f64>>,
    #[serde(default)]
    scaling: Option<crate::Scaling>,
}

impl Serialize for Job {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let x = self.extras();
        JobOut {
            id: &self.id,
            submit: self.submit,
            gpus: self.gpus,
            duration: self.duration,
            iterations: self.iterations,
            model: self.model.as_deref(),
            batch_size: self.batch_size,
            vc: self.vc.as_deref(),
            priority: self.priority,
            deadline: self.deadline,
            stages: x.stages.as_ref(),
            dataset_gb: x.dataset_gb,
            gpu_type: self.gpu_type.as_deref(),
            type_speeds: x.type_speeds.as_ref(),
            scaling: x.scaling.as_ref(),
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for Job {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Job, D::Error> {
        let r = JobIn::deserialize(d)?;
        let mut j = Job::new(r.id, r.submit, r.gpus, r.duration);
        j.iterations = r.iterations;
        j.model = r.model;
        j.batch_size = r.batch_size;
        j.vc = r.vc;
        j.priority = r.priority;
        j.deadline = r.deadline;
        j.gpu_type = r.gpu_type;
        j.set_extras(JobExtras {
            stages: r.stages,
            dataset_gb: r.dataset_gb,
            type_speeds: r.type_speeds,
            scaling: r.scaling,
            adaptive: None,
            data: None,
        });
        Ok(j)
    }
}

impl Job {
    /// A job with only the fields every trace has.
    pub fn new(id: impl Into<CompactString>, submit: Time, gpus: u32, duration: Time) -> Job {
        Job {
            id: id.into(),
            submit,
            gpus,
            priority: 0,
            duration,
            iterations: None,
            model: None,
            batch_size: None,
            vc: None,
            deadline: None,
            gpu_type: None,
            extras: None,
        }
    }

    /// The fields only some traces carry (all absent for most jobs).
    pub fn extras(&self) -> &JobExtras {
        self.extras.as_deref().unwrap_or(&NO_EXTRAS)
    }

    /// Whether the job carries any of the fields only some traces carry (a test that
    /// reads no more than the job itself).
    pub fn has_extras(&self) -> bool {
        self.extras.is_some()
    }

    /// Replaces the fields only some traces carry (kept out of line only when one is set).
    pub fn set_extras(&mut self, x: JobExtras) {
        self.extras = (!x.is_empty()).then(|| Box::new(x));
    }

    /// The fields only some traces carry, to set them.
    pub fn extras_mut(&mut self) -> &mut JobExtras {
        self.extras.get_or_insert_with(Box::default)
    }

    /// Relative speed on GPUs of type `gpu_type` (matched without regard to case).
    pub fn type_speed(&self, gpu_type: &str) -> f64 {
        let Some(m) = &self.extras().type_speeds else {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_stay_small_and_extras_round_trip() {
        // A trace is one list of jobs, copied by the reader and the sort: the rare
        // fields stay out of line.
        assert!(
            std::mem::size_of::<Job>() <= 168,
            "{}",
            std::mem::size_of::<Job>()
        );
        let mut j = Job::new("a", 1, 2, 3);
        assert!(j.extras.is_none());
        j.extras_mut().dataset_gb = Some(4.5);
        j.extras_mut().stages = Some(StageTimes {
            data: 1.0,
            gpu: 2.0,
            net: 0.0,
        });
        let text = serde_json::to_string(&j).unwrap();
        assert_eq!(
            text,
            r#"{"id":"a","submit":1,"gpus":2,"duration":3,"priority":0,"stages":{"data":1.0,"gpu":2.0,"net":0.0},"dataset_gb":4.5}"#
        );
        let back: Job = serde_json::from_str(&text).unwrap();
        assert_eq!(back, j);
        // Cleared extras equal none at all, and a plain job reads back without any.
        j.set_extras(JobExtras::default());
        assert!(j.extras.is_none());
        let plain: Job =
            serde_json::from_str(r#"{"id":"b","submit":0,"gpus":1,"duration":5}"#).unwrap();
        assert!(plain.extras.is_none());
        assert_eq!(plain, Job::new("b", 0, 1, 5));
        let mut k = Job::new("b", 0, 1, 5);
        k.extras_mut().scaling = None;
        assert_eq!(plain, k);
    }
}
