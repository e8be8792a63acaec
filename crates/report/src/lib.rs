//! Metrics and reports, defined once for both drivers.
//!
//! [`Summary::of`] turns a [`RunOutcome`] into the numbers researchers compare: JCT
//! mean/median/p95/p99, queueing delay, makespan, GPU utilisation, finished and
//! unfinished counts. Where the artifacts define a metric differently, the variant is
//! selectable ([`Percentile`]). Writers emit the per-job CSV, the summary JSON, a text
//! table, and a self-contained HTML report with inline SVG charts.

pub mod chart;
pub mod fairness;
pub mod html;
mod jobs_csv;
pub mod pgf;
pub mod present;
pub mod stats;
pub mod text;
pub mod vc;
pub use html::html_report;
pub use jobs_csv::write_jobs_csv;

use apiary_model::{RunOutcome, Time};
use serde::Serialize;
use std::io::Write;

/// How a percentile is read off sorted values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Percentile {
    /// Nearest rank: the value at index ⌈p·n⌉ − 1.
    #[default]
    NearestRank,
    /// Muri's `calc.py`: the value at index ⌊p·n⌋.
    Floor,
}

impl Percentile {
    fn at(self, sorted: &[f64], p: f64) -> f64 {
        if sorted.is_empty() {
            return 0.0;
        }
        let n = sorted.len();
        let i = match self {
            Percentile::NearestRank => ((p * n as f64).ceil() as usize).max(1) - 1,
            Percentile::Floor => (p * n as f64).floor() as usize,
        };
        sorted[i.min(n - 1)]
    }
}

/// Headline numbers of one run. Times in seconds.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Summary {
    /// Policy.
    pub policy: String,
    /// Policy parameters.
    pub params: Vec<String>,
    /// Cluster.
    pub cluster: String,
    /// GPUs.
    pub gpus: u32,
    /// Jobs in the trace.
    pub jobs: usize,
    /// Jobs that finished.
    pub finished: usize,
    /// Jobs still pending or running at the end (starved or blocked).
    pub unfinished: usize,
    /// Jobs refused because they can never fit.
    pub rejected: usize,
    /// Mean JCT of finished jobs.
    pub jct_mean: f64,
    /// Median JCT.
    pub jct_median: f64,
    /// 95th percentile JCT.
    pub jct_p95: f64,
    /// 99th percentile JCT.
    pub jct_p99: f64,
    /// Mean queueing delay (first start − submit) of jobs that started.
    pub queue_mean: f64,
    /// Median queueing delay.
    pub queue_median: f64,
    /// Mean pending time of finished jobs: JCT less the time they held GPUs, so every
    /// wait counts, after preemptions too (the queueing delay counts only the wait
    /// before the first start, which preemptive policies keep near 0).
    pub pending_mean: f64,
    /// Median pending time.
    pub pending_median: f64,
    /// Mean slowdown of finished jobs: JCT over the job's duration alone on its GPUs
    /// (normalised JCT; 1 is no wait and no slowdown).
    pub slowdown_mean: f64,
    /// 99th percentile slowdown.
    pub slowdown_p99: f64,
    /// Jain's fairness index of finished jobs' speed (duration over JCT, the inverse of
    /// slowdown): (Σx)² / (n Σx²), 1 when every job is slowed alike, 1/n at worst.
    pub jain: f64,
    /// Mean of Themis' finish-time fairness ρ over finished jobs: JCT over the JCT the
    /// job would have had alone on 1/N of the cluster, N the jobs contending over its
    /// lifetime ([`fairness`]); ρ > 1 is worse than a fair share.
    pub ftf_mean: f64,
    /// Largest ρ, the quantity Themis minimises.
    pub ftf_max: f64,
    /// Last finish − first submit.
    pub makespan: f64,
    /// Busy GPU-time ÷ (GPUs × makespan).
    pub util_mean: f64,
    /// ElasticFlow's cluster efficiency averaged over the makespan (speed-up over one
    /// GPU of every running job, per cluster GPU); present when jobs carry throughput
    /// tables.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ce_mean: Option<f64>,
    /// Facility energy of the GPUs while they held jobs, kWh (PUE applied).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub energy_kwh: Option<f64>,
    /// Carbon that energy emitted at the grid's intensity of the time, kg CO2eq.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub carbon_kg: Option<f64>,
    /// Carbon of every GPU of the cluster over the makespan, idle ones included, kg.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster_carbon_kg: Option<f64>,
    /// How energy and carbon were computed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub energy_model: Option<EnergyModel>,
    /// Of the bytes jobs read, the share caches served (`--io`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_hit_ratio: Option<f64>,
    /// Remote bytes read over what the remote bandwidth could carry over the run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub io_util: Option<f64>,
    /// GPU time spent computing rather than waiting for data, over GPUs × makespan:
    /// `util_mean` less the GPUs held by jobs stalled on IO (`--io`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub util_computing: Option<f64>,
    /// How data loading was modelled and what jobs were given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub io_model: Option<IoModel>,
    /// CPU time allocated to running jobs' input pipelines over the pool's (`--cpu`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_util: Option<f64>,
    /// How input pipelines were modelled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_model: Option<CpuModel>,
    /// Mean share of time a kernel ran on the GPUs serving online services
    /// (`--online`; nvidia-smi's utilisation, MuxFlow's headline).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub online_gpu_util: Option<f64>,
    /// Mean share of SMs busy on the serving GPUs (`--online`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub online_sm_activity: Option<f64>,
    /// Service-minutes whose demand exceeded the SMs the offline job beside it left,
    /// over all service-minutes (`--online`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slo_violation: Option<f64>,
    /// How online services were modelled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub online_model: Option<OnlineModel>,
    /// Useful GPU time (each job's GPUs times the work it kept) over the GPU time jobs
    /// held (`--failures`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub goodput: Option<f64>,
    /// GPU-hours lost to failures: work redone, restores and restarts (`--failures`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lost_gpu_hours: Option<f64>,
    /// Failures that struck a running job or took a node down (`--failures`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failures: Option<u64>,
    /// The share of the GPU time jobs held that went to jobs a fatal failure ended
    /// (`--failures` with a fatal class, such as the `philly` preset).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed_gpu_share: Option<f64>,
    /// How failures went (`--failures`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_model: Option<FailureModel>,
    /// Preemptions in total.
    pub preemptions: u64,
    /// Jobs with a deadline (declined ones included; best-effort jobs have none).
    pub deadline_jobs: usize,
    /// Of those, jobs that finished by their deadline.
    pub deadline_met: usize,
    /// `deadline_met / deadline_jobs`, ElasticFlow's deadline-satisfactory ratio
    /// (declined and late jobs count against it); absent without deadline jobs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deadline_ratio: Option<f64>,
    /// Mean JCT of the finished best-effort jobs (those without a deadline) when the
    /// run also has deadline jobs, as ElasticFlow's Fig. 11 reports them; s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub best_effort_jct_mean: Option<f64>,
    /// Events processed.
    pub events: u64,
    /// Seed.
    pub seed: u64,
}

/// How a run's energy and carbon were computed, for `summary.json`.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct EnergyModel {
    /// The carbon-intensity series (`default`: a constant, the mean of the six EIA-930
    /// 2022 series apiary ships).
    pub intensity: String,
    /// Its mean, g/kWh.
    pub intensity_mean: f64,
    /// Hours missing from it and filled from the hour before.
    pub filled_hours: usize,
    /// The PUE the GPUs' energy was multiplied by.
    pub pue: f64,
    /// GPU energy while holding jobs, kWh before PUE.
    pub busy_kwh: f64,
    /// GPU energy while idle, kWh before PUE.
    pub idle_kwh: f64,
    /// The whole cluster's facility energy, idle GPUs included, kWh.
    pub cluster_energy_kwh: f64,
    /// Every GPU's power limit as a fraction of its top one, where set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub power_limit: Option<f64>,
}

/// How a run's data loading was modelled, for `summary.json`.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct IoModel {
    /// The storage setting, every key spelled out (`--io`).
    pub storage: String,
    /// Who allocated cache and bandwidth: `policy`, or the cache mode.
    pub allocated_by: String,
    /// Jobs whose model was drawn from Synergy's (the trace named none it knows).
    pub drawn_models: usize,
    /// Jobs whose dataset size was drawn from their family's range.
    pub drawn_sizes: usize,
    /// Jobs per data family.
    pub families: std::collections::BTreeMap<&'static str, usize>,
    /// Terabytes read from caches.
    pub cache_tb: f64,
    /// Terabytes read from remote storage.
    pub remote_tb: f64,
}

/// How a run's input pipelines were modelled, for `summary.json`.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct CpuModel {
    /// The pool's setting (`--cpu`).
    pub pool: String,
    /// Who allocated CPUs: `policy` (GoldMiner) or `fixed` (each job its GPUs' share).
    pub allocated_by: String,
    /// Jobs whose model was drawn from Synergy's (the trace named none it knows).
    pub drawn_models: usize,
    /// GPU-hours that held a job while its input pipeline kept it waiting.
    pub stalled_gpu_hours: f64,
}

/// How a run modelled online services beside offline jobs (`--online`).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct OnlineModel {
    /// The setting (`--online`).
    pub load: String,
    /// GPUs serving a service.
    pub host_gpus: u64,
    /// Mean share of time a kernel ran, over all GPUs.
    pub gpu_util: f64,
    /// Mean share of SMs busy, over all GPUs.
    pub sm_activity: f64,
    /// Offline jobs evicted for a service's load.
    pub evictions: u64,
}

/// How failures went in a run (`--failures`).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct FailureModel {
    /// The failure model.
    pub model: String,
    /// Failures that struck something, by class.
    pub by_class: std::collections::BTreeMap<String, u64>,
    /// Job attempts a failure ended.
    pub job_failures: u64,
    /// GPU-hours of work lost and redone.
    pub rework_gpu_hours: f64,
    /// GPU-hours of restoring and restarting.
    pub recovery_gpu_hours: f64,
    /// GPU-hours stalled saving checkpoints.
    pub checkpoint_gpu_hours: f64,
    /// GPU-hours of nodes down for repair.
    pub down_gpu_hours: f64,
    /// Jobs a fatal failure (their own error) ended.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub failed_jobs: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The numeric fields of [`Summary`] a sweep may collect, with what each measures.
pub const METRICS: &[(&str, &str)] = &[
    ("jct_mean", "mean JCT of finished jobs, s"),
    ("jct_median", "median JCT, s"),
    ("jct_p95", "95th percentile JCT, s"),
    ("jct_p99", "99th percentile JCT, s"),
    ("queue_mean", "mean delay before a job's first start, s"),
    ("queue_median", "median delay before a job's first start, s"),
    (
        "pending_mean",
        "mean time finished jobs spent not running (JCT less running time), s",
    ),
    ("pending_median", "median pending time, s"),
    (
        "slowdown_mean",
        "mean slowdown: JCT over the job's duration alone (normalised JCT)",
    ),
    ("slowdown_p99", "99th percentile slowdown"),
    (
        "jain",
        "Jain's fairness index of jobs' speed (duration over JCT), 1 = all alike",
    ),
    (
        "ftf_mean",
        "mean of Themis' finish-time fairness rho: JCT over JCT alone on 1/N of the cluster",
    ),
    (
        "ftf_max",
        "largest finish-time fairness rho (Themis minimises it)",
    ),
    ("makespan", "last finish minus first submission, s"),
    ("util_mean", "busy GPU time over GPUs x makespan"),
    (
        "ce_mean",
        "ElasticFlow's cluster efficiency (jobs with throughput tables)",
    ),
    (
        "energy_kwh",
        "energy of the GPUs while they held jobs (times the PUE), kWh",
    ),
    ("carbon_kg", "carbon that energy emitted, kg CO2eq"),
    (
        "cluster_carbon_kg",
        "carbon of every GPU over the makespan, idle ones included, kg CO2eq",
    ),
    (
        "cache_hit_ratio",
        "share of the bytes jobs read that caches served (--io)",
    ),
    (
        "io_util",
        "remote bytes read over what the remote bandwidth could carry (--io)",
    ),
    (
        "util_computing",
        "GPU time computing rather than waiting for data over GPUs x makespan (--io, --cpu)",
    ),
    (
        "cpu_util",
        "CPU time given to input pipelines over the pool's (--cpu)",
    ),
    (
        "online_gpu_util",
        "share of time a kernel ran on the GPUs serving online services (--online)",
    ),
    (
        "online_sm_activity",
        "share of SMs busy on the GPUs serving online services (--online)",
    ),
    (
        "slo_violation",
        "service-minutes short of SMs over all service-minutes (--online)",
    ),
    (
        "goodput",
        "useful GPU time over the GPU time jobs held (--failures)",
    ),
    (
        "lost_gpu_hours",
        "GPU-hours lost to failures: rework, restore, restart (--failures)",
    ),
    (
        "failures",
        "failures that struck a job or took a node down (--failures)",
    ),
    (
        "failed_gpu_share",
        "share of the GPU time jobs held that jobs a fatal failure ended held (--failures)",
    ),
    ("preemptions", "preemptions in total"),
    (
        "deadline_ratio",
        "share of deadline jobs that met their deadline",
    ),
    (
        "best_effort_jct_mean",
        "mean JCT of jobs without a deadline, s",
    ),
    ("finished", "jobs that finished"),
    ("unfinished", "jobs pending or running at the end"),
    ("rejected", "jobs refused because they can never fit"),
    ("events", "events processed"),
];

impl Summary {
    /// The value of metric `name` (one of [`METRICS`]); `None` for an unknown name or a
    /// metric this run has no value for.
    pub fn metric(&self, name: &str) -> Option<f64> {
        Some(match name {
            "jct_mean" => self.jct_mean,
            "jct_median" => self.jct_median,
            "jct_p95" => self.jct_p95,
            "jct_p99" => self.jct_p99,
            "queue_mean" => self.queue_mean,
            "queue_median" => self.queue_median,
            "pending_mean" => self.pending_mean,
            "pending_median" => self.pending_median,
            "slowdown_mean" => self.slowdown_mean,
            "slowdown_p99" => self.slowdown_p99,
            "jain" => self.jain,
            "ftf_mean" => self.ftf_mean,
            "ftf_max" => self.ftf_max,
            "makespan" => self.makespan,
            "util_mean" => self.util_mean,
            "ce_mean" => self.ce_mean?,
            "energy_kwh" => self.energy_kwh?,
            "carbon_kg" => self.carbon_kg?,
            "cluster_carbon_kg" => self.cluster_carbon_kg?,
            "cache_hit_ratio" => self.cache_hit_ratio?,
            "io_util" => self.io_util?,
            "util_computing" => self.util_computing?,
            "cpu_util" => self.cpu_util?,
            "online_gpu_util" => self.online_gpu_util?,
            "online_sm_activity" => self.online_sm_activity?,
            "slo_violation" => self.slo_violation?,
            "goodput" => self.goodput?,
            "lost_gpu_hours" => self.lost_gpu_hours?,
            "failures" => self.failures? as f64,
            "failed_gpu_share" => self.failed_gpu_share?,
            "preemptions" => self.preemptions as f64,
            "deadline_ratio" => self.deadline_ratio?,
            "best_effort_jct_mean" => self.best_effort_jct_mean?,
            "finished" => self.finished as f64,
            "unfinished" => self.unfinished as f64,
            "rejected" => self.rejected as f64,
            "events" => self.events as f64,
            _ => return None,
        })
    }
}

/// GPU-seconds that held a job waiting for its data or its input pipeline, where a
/// model of either ran. A job slowed by both waits on the scarcer, so with both models
/// on this is the larger of the two stalls, a lower bound.
fn stalled_gpu_s(o: &RunOutcome) -> Option<f64> {
    match (&o.io, &o.cpu) {
        (None, None) => None,
        (io, cpu) => Some(
            io.as_ref()
                .map_or(0.0, |i| i.stalled_gpu_s)
                .max(cpu.as_ref().map_or(0.0, |c| c.stalled_gpu_s)),
        ),
    }
}

fn s(ms: Time) -> f64 {
    ms as f64 / 1000.0
}

/// A finished job's pending time: its JCT less the time it held GPUs.
pub fn pending_ms(jct: Time, executed: Time) -> Time {
    jct.saturating_sub(executed)
}

impl Summary {
    /// Summarises a run.
    pub fn of(o: &RunOutcome, pct: Percentile) -> Summary {
        let mut jct: Vec<f64> = Vec::new();
        let mut queue: Vec<f64> = Vec::new();
        let mut pending: Vec<f64> = Vec::new();
        let (mut first_submit, mut last_finish) = (Time::MAX, 0);
        let mut rejected = 0;
        let mut preemptions = 0u64;
        let (mut deadline_jobs, mut deadline_met) = (0usize, 0usize);
        let mut be_jct: Vec<f64> = Vec::new();
        let mut slowdown: Vec<f64> = Vec::new();
        for j in &o.jobs {
            if let (None, Some(f)) = (j.deadline, j.finish) {
                be_jct.push(s(f - j.submit));
            }
            if j.deadline.is_some() {
                deadline_jobs += 1;
                deadline_met += j.met_deadline() as usize;
            }
            if j.rejected.is_some() {
                rejected += 1;
                continue;
            }
            first_submit = first_submit.min(j.submit);
            preemptions += j.preemptions as u64;
            if let Some(f) = j.finish {
                jct.push(s(f - j.submit));
                if j.duration > 0 {
                    slowdown.push((f - j.submit) as f64 / j.duration as f64);
                }
                pending.push(s(pending_ms(f - j.submit, j.executed)));
                last_finish = last_finish.max(f);
            }
            if let Some(st) = j.first_start {
                queue.push(s(st - j.submit));
            }
        }
        // total_cmp is a total order whose ties are identical bits, so the unstable sort
        // gives the same sequence, without the stable sort's buffer.
        jct.sort_unstable_by(f64::total_cmp);
        queue.sort_unstable_by(f64::total_cmp);
        pending.sort_unstable_by(f64::total_cmp);
        // Jain's index over speeds, summed before the sort reorders them.
        let (sx, sxx) = slowdown
            .iter()
            .fold((0.0, 0.0), |(a, b), d| (a + 1.0 / d, b + 1.0 / (d * d)));
        let jain = if slowdown.is_empty() || sxx == 0.0 {
            1.0
        } else {
            sx * sx / (slowdown.len() as f64 * sxx)
        };
        slowdown.sort_unstable_by(f64::total_cmp);
        let mean = |v: &[f64]| {
            if v.is_empty() {
                0.0
            } else {
                v.iter().sum::<f64>() / v.len() as f64
            }
        };
        let ftf = fairness::finish_time_fairness(o);
        let makespan = last_finish.saturating_sub(first_submit);
        let util = if makespan > 0 {
            o.util.total_busy() / (makespan as f64 * o.total_gpus as f64)
        } else {
            0.0
        };
        Summary {
            policy: o.policy.clone(),
            params: o.params.clone(),
            cluster: o.cluster.clone(),
            gpus: o.total_gpus,
            jobs: o.jobs.len(),
            finished: jct.len(),
            unfinished: o.jobs.len() - jct.len() - rejected,
            rejected,
            jct_mean: mean(&jct),
            jct_median: Percentile::NearestRank.at(&jct, 0.5),
            jct_p95: pct.at(&jct, 0.95),
            jct_p99: pct.at(&jct, 0.99),
            queue_mean: mean(&queue),
            queue_median: Percentile::NearestRank.at(&queue, 0.5),
            pending_mean: mean(&pending),
            pending_median: Percentile::NearestRank.at(&pending, 0.5),
            slowdown_mean: mean(&slowdown),
            slowdown_p99: pct.at(&slowdown, 0.99),
            jain,
            ftf_mean: mean(&ftf),
            ftf_max: ftf.iter().copied().fold(0.0, f64::max),
            makespan: s(makespan),
            util_mean: util,
            ce_mean: o.cluster_efficiency.as_ref().map(|ce| {
                if makespan > 0 {
                    ce.total_busy() / (makespan as f64 * o.total_gpus as f64)
                } else {
                    0.0
                }
            }),
            energy_kwh: o.energy.as_ref().map(|e| e.energy_kwh()),
            carbon_kg: o.energy.as_ref().map(|e| e.busy_carbon_kg),
            cluster_carbon_kg: o
                .energy
                .as_ref()
                .map(|e| e.busy_carbon_kg + e.idle_carbon_kg),
            energy_model: o.energy.as_ref().map(|e| EnergyModel {
                intensity: e.intensity.clone(),
                intensity_mean: e.intensity_mean,
                filled_hours: e.filled,
                pue: e.pue,
                busy_kwh: e.busy_kwh,
                idle_kwh: e.idle_kwh,
                cluster_energy_kwh: e.cluster_energy_kwh(),
                power_limit: e.power_limit,
            }),
            cache_hit_ratio: o.io.as_ref().map(|i| i.hit_ratio()),
            io_util: o.io.as_ref().map(|i| i.util()),
            util_computing: stalled_gpu_s(o).map(|stalled| {
                if makespan > 0 {
                    let busy = o.util.total_busy() - stalled * 1000.0;
                    busy.max(0.0) / (makespan as f64 * o.total_gpus as f64)
                } else {
                    0.0
                }
            }),
            cpu_util: o.cpu.as_ref().map(|c| c.util()),
            online_gpu_util: o.online.as_ref().map(|r| r.host_gpu_util),
            online_sm_activity: o.online.as_ref().map(|r| r.host_sm_activity),
            slo_violation: o.online.as_ref().map(|r| r.slo_violation),
            goodput: o.failures.as_ref().map(|f| f.goodput()),
            lost_gpu_hours: o.failures.as_ref().map(|f| f.lost_gpu_hours()),
            failures: o.failures.as_ref().map(|f| f.total()),
            failed_gpu_share: o.failures.as_ref().and_then(|f| f.failed_gpu_share()),
            failure_model: o.failures.as_ref().map(|f| FailureModel {
                model: f.model.clone(),
                by_class: f.by_class.iter().cloned().collect(),
                job_failures: f.job_failures,
                rework_gpu_hours: f.rework_gpu_ms / 3.6e6,
                recovery_gpu_hours: f.recovery_gpu_ms / 3.6e6,
                checkpoint_gpu_hours: f.checkpoint_gpu_ms / 3.6e6,
                down_gpu_hours: f.down_gpu_ms / 3.6e6,
                failed_jobs: f.fatal_jobs,
            }),
            online_model: o.online.as_ref().map(|r| OnlineModel {
                load: r.load.clone(),
                host_gpus: r.host_gpus,
                gpu_util: r.gpu_util,
                sm_activity: r.sm_activity,
                evictions: r.evictions,
            }),
            cpu_model: o.cpu.as_ref().map(|c| CpuModel {
                pool: c.pool.clone(),
                allocated_by: c.allocated_by.clone(),
                drawn_models: c.drawn_models,
                stalled_gpu_hours: c.stalled_gpu_s / 3600.0,
            }),
            io_model: o.io.as_ref().map(|i| IoModel {
                storage: i.storage.clone(),
                allocated_by: i.allocated_by.clone(),
                drawn_models: i.assigned.drawn_models,
                drawn_sizes: i.assigned.drawn_sizes,
                families: apiary_model::io::FAMILIES
                    .iter()
                    .zip(i.assigned.per_family)
                    .map(|(f, n)| (f.name, n))
                    .collect(),
                cache_tb: i.cache_bytes / 1e12,
                remote_tb: i.remote_bytes / 1e12,
            }),
            preemptions,
            deadline_jobs,
            deadline_met,
            deadline_ratio: (deadline_jobs > 0).then(|| deadline_met as f64 / deadline_jobs as f64),
            best_effort_jct_mean: (deadline_jobs > 0 && !be_jct.is_empty())
                .then(|| be_jct.iter().sum::<f64>() / be_jct.len() as f64),
            events: o.events,
            seed: o.seed,
        }
    }
}

/// What a run was, so a figure can be reproduced from its file: the command line,
/// apiary's version, the trace (path, SHA-256 and jobs read), the cluster, and every
/// simulator option, defaults included.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Record {
    /// The command line, as given.
    pub command: Vec<String>,
    /// apiary's version.
    pub version: String,
    /// The git commit apiary was built from ("unknown" outside a checkout).
    pub commit: String,
    /// When the run was made (UTC; `SOURCE_DATE_EPOCH` when set). Shown in report.html
    /// only: summary.json stays byte-identical for the same inputs.
    #[serde(skip)]
    pub date: String,
    /// The trace.
    pub trace: TraceRecord,
    /// The cluster, as given (preset or file).
    pub cluster: String,
    /// Every simulator option, by its flag's name.
    pub options: std::collections::BTreeMap<String, String>,
    /// The seed.
    pub seed: u64,
}

/// The trace of a [`Record`].
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct TraceRecord {
    /// The file read.
    pub path: String,
    /// SHA-256 of its bytes, hex.
    pub sha256: String,
    /// Jobs read from it.
    pub jobs: usize,
}

/// Writes the summary JSON, with the utilisation series and, when given, the record of
/// the run.
pub fn write_summary_json(
    sum: &Summary,
    o: &RunOutcome,
    record: Option<&Record>,
    mut w: impl Write,
) -> std::io::Result<()> {
    #[derive(Serialize)]
    struct Out<'a> {
        #[serde(flatten)]
        summary: &'a Summary,
        #[serde(skip_serializing_if = "Option::is_none")]
        run: Option<&'a Record>,
        util_bucket_s: f64,
        util_over_time: Vec<(f64, f64)>,
        #[serde(skip_serializing_if = "Option::is_none")]
        ce_over_time: Option<Vec<(f64, f64)>>,
    }
    let series = |u: &apiary_model::UtilSeries| -> Vec<(f64, f64)> {
        u.points()
            .into_iter()
            .map(|(t, u)| (s(t), (u * 1e4).round() / 1e4))
            .collect()
    };
    let pts = series(&o.util);
    serde_json::to_writer_pretty(
        &mut w,
        &Out {
            summary: sum,
            run: record,
            util_bucket_s: s(o.util.width),
            util_over_time: pts,
            ce_over_time: o.cluster_efficiency.as_ref().map(series),
        },
    )?;
    writeln!(w)?;
    w.flush()
}

pub use present::table;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(Percentile::NearestRank.at(&v, 0.99), 99.0);
        assert_eq!(Percentile::Floor.at(&v, 0.99), 100.0);
        assert_eq!(Percentile::NearestRank.at(&v, 0.5), 50.0);
        assert_eq!(Percentile::Floor.at(&[], 0.5), 0.0);
    }

    use apiary_model::JobOutcome;

    fn job(id: &str, submit: Time, finish: Option<Time>, deadline: Option<Time>) -> JobOutcome {
        JobOutcome {
            id: id.into(),
            submit,
            gpus: 1,
            duration: 1000,
            vc: None,
            first_start: Some(submit),
            finish,
            preemptions: 0,
            executed: 1000,
            gpu_time: 1000,
            rejected: None,
            deadline,
            judged: None,
        }
    }

    fn outcome(jobs: Vec<JobOutcome>) -> RunOutcome {
        RunOutcome::of_jobs("c", 1, jobs)
    }

    #[test]
    fn slowdown_and_jain() {
        // Durations of 1 s: JCTs of 1 s and 4 s are slowdowns 1 and 4, speeds 1 and 0.25.
        let s = Summary::of(
            &outcome(vec![
                job("a", 0, Some(1_000), None),
                job("b", 0, Some(4_000), None),
                job("unfinished", 0, None, None),
            ]),
            Percentile::NearestRank,
        );
        assert_eq!(s.slowdown_mean, 2.5);
        assert_eq!(s.slowdown_p99, 4.0);
        // (1 + 0.25)^2 / (2 (1 + 0.0625)) = 1.5625 / 2.125.
        assert!((s.jain - 1.5625 / 2.125).abs() < 1e-12, "{}", s.jain);
        assert_eq!(s.metric("jain"), Some(s.jain));
        // Alike: index 1.
        let s = Summary::of(
            &outcome(vec![
                job("a", 0, Some(2_000), None),
                job("b", 0, Some(2_000), None),
            ]),
            Percentile::NearestRank,
        );
        assert!((s.jain - 1.0).abs() < 1e-12);
    }

    #[test]
    fn deadline_ratio_and_best_effort_jct() {
        let s = Summary::of(
            &outcome(vec![
                job("met", 0, Some(10_000), Some(10_000)),
                job("late", 0, Some(20_000), Some(10_000)),
                job("be1", 0, Some(4_000), None),
                job("be2", 2_000, Some(10_000), None),
                job("be-unfinished", 0, None, None),
            ]),
            Percentile::NearestRank,
        );
        assert_eq!((s.deadline_met, s.deadline_jobs), (1, 2));
        assert_eq!(s.deadline_ratio, Some(0.5));
        // Best-effort: finished jobs without a deadline, (4 + 8) / 2 s.
        assert_eq!(s.best_effort_jct_mean, Some(6.0));
        // No deadline jobs: no best-effort class to speak of.
        let s = Summary::of(
            &outcome(vec![job("a", 0, Some(1_000), None)]),
            Percentile::NearestRank,
        );
        assert_eq!((s.deadline_ratio, s.best_effort_jct_mean), (None, None));
    }

    #[test]
    fn every_listed_metric_reads_its_summary_field() {
        let s = Summary::of(
            &outcome(vec![
                job("met", 0, Some(10_000), Some(10_000)),
                job("be", 0, Some(4_000), None),
            ]),
            Percentile::NearestRank,
        );
        let json = serde_json::to_value(&s).unwrap();
        for &(name, _) in METRICS {
            let field = json.get(name).and_then(serde_json::Value::as_f64);
            if name == "ce_mean" {
                assert_eq!(s.metric(name), None);
                continue;
            }
            assert_eq!(s.metric(name), field, "{name}");
        }
        // Counts that are not outcomes of the policy are not metrics: every other
        // numeric field is listed.
        let skip = ["gpus", "jobs", "seed", "deadline_jobs", "deadline_met"];
        for (k, v) in json.as_object().unwrap() {
            if v.is_number() && !skip.contains(&k.as_str()) {
                assert!(METRICS.iter().any(|m| m.0 == k), "{k} is not in METRICS");
            }
        }
        assert_eq!(s.metric("nonsense"), None);
    }
}
