//! Online inference services on a cluster's GPUs, the other half of MuxFlow's sharing
//! (`--online`): offline training jobs may run on a GPU that serves one, in the SMs
//! and memory the service leaves.
//!
//! MuxFlow's services are ByteDance's, and their load is not public. Here the first
//! `hosts` share of the nodes serve one service per GPU, whose SM demand follows a
//! day: a cosine between a trough and a peak drawn per service, at an hour drawn per
//! service around the cluster's peak, plus short spikes (a multiple of the load, for a
//! few minutes, drawn per minute). Everything is a function of the seed, the GPU and
//! the minute, so a run reads any minute's load in constant time and the same seed
//! gives the same loads. Memory is drawn per service and per offline job.

use crate::Time;

/// Milliseconds in one load step: loads change once a minute.
pub const STEP_MS: Time = 60_000;
const DAY_MS: f64 = 86_400_000.0;

/// The services and how offline jobs fare beside them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OnlineLoad {
    /// Share of the nodes (the first ones) whose GPUs each serve a service.
    pub hosts: f64,
    /// Each service's peak SM demand is drawn uniformly in `[peak_min, peak_max]`.
    pub peak_min: f64,
    /// See `peak_min`.
    pub peak_max: f64,
    /// The trough, as a share of the service's peak.
    pub trough: f64,
    /// The cluster's peak hour; each service's is within two hours of it.
    pub peak_hour: f64,
    /// Chance that a minute starts a spike, per service.
    pub spike_prob: f64,
    /// A spike multiplies the load by this.
    pub spike_factor: f64,
    /// Minutes a spike lasts.
    pub spike_minutes: u32,
    /// An offline job loses this share of its speed per unit of the service's SM
    /// demand beside it (contention for memory bandwidth and caches).
    pub interference: f64,
    /// Each service holds GPU memory drawn uniformly in `[mem_min, mem_max]` (a share).
    pub mem_min: f64,
    /// See `mem_min`.
    pub mem_max: f64,
    /// Each offline job needs GPU memory drawn uniformly in `[job_mem_min, job_mem_max]`.
    pub job_mem_min: f64,
    /// See `job_mem_min`.
    pub job_mem_max: f64,
    /// The seed the draws come from.
    pub seed: u64,
}

impl Default for OnlineLoad {
    /// `--online default`: half the nodes serve, peaks of 10-40 % of the SMs with a
    /// trough at a third of the peak (a mean of about 17 %, near the 16 % SM activity
    /// MuxFlow reports before sharing), peaks around 20:00, a spike to 1.8x for
    /// 3 minutes about every 8 hours per service, 20 % interference; services hold
    /// 20-50 % of GPU memory (MuxFlow's fleet: 42 % before sharing), offline jobs
    /// need 10-60 %.
    fn default() -> OnlineLoad {
        OnlineLoad {
            hosts: 0.5,
            peak_min: 0.1,
            peak_max: 0.4,
            trough: 1.0 / 3.0,
            peak_hour: 20.0,
            spike_prob: 1.0 / 480.0,
            spike_factor: 1.8,
            spike_minutes: 3,
            interference: 0.2,
            mem_min: 0.2,
            mem_max: 0.5,
            job_mem_min: 0.1,
            job_mem_max: 0.6,
            seed: 0,
        }
    }
}

/// Why an `--online` setting was refused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum OnlineLoadError {
    /// A key it does not have.
    #[error(
        "unknown --online key '{0}' (keys: hosts, peak_min, peak_max, trough, peak_hour, spike_prob, spike_factor, spike_minutes, interference, mem_min, mem_max, job_mem_min, job_mem_max)"
    )]
    Key(String),
    /// A value out of range.
    #[error("--online {key}: {why} (got '{value}')")]
    Value {
        /// The key.
        key: &'static str,
        /// As given.
        value: String,
        /// What it must be.
        why: &'static str,
    },
}

/// SplitMix64 of a key: an independent uniform draw in [0, 1) per key.
fn draw(seed: u64, a: u64, b: u64, salt: u64) -> f64 {
    let mut z = seed
        ^ a.wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ b.wrapping_mul(0xC2B2_AE3D_27D4_EB4F)
        ^ salt.wrapping_mul(0x1656_67B1_9E37_79F9);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

impl OnlineLoad {
    /// `default`, or `key=value,...` over it.
    pub fn parse(s: &str) -> Result<OnlineLoad, OnlineLoadError> {
        OnlineLoad::default().with(s)
    }

    /// This setting with `key=value` pairs laid over.
    pub fn with(self, s: &str) -> Result<OnlineLoad, OnlineLoadError> {
        let mut o = self;
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            if part == "default" {
                continue;
            }
            let (k, v) = part.split_once('=').unwrap_or((part, ""));
            let num = |key: &'static str, lo: f64, hi: f64, why: &'static str| {
                v.parse::<f64>()
                    .ok()
                    .filter(|x| x.is_finite() && (lo..=hi).contains(x))
                    .ok_or_else(|| OnlineLoadError::Value {
                        key,
                        value: v.into(),
                        why,
                    })
            };
            match k {
                "hosts" => o.hosts = num("hosts", 0.0, 1.0, "a share from 0 to 1")?,
                "peak_min" => o.peak_min = num("peak_min", 0.0, 1.0, "a share from 0 to 1")?,
                "peak_max" => o.peak_max = num("peak_max", 0.0, 1.0, "a share from 0 to 1")?,
                "trough" => o.trough = num("trough", 0.0, 1.0, "a share of the peak, 0 to 1")?,
                "peak_hour" => o.peak_hour = num("peak_hour", 0.0, 24.0, "an hour, 0 to 24")?,
                "spike_prob" => o.spike_prob = num("spike_prob", 0.0, 1.0, "a chance, 0 to 1")?,
                "spike_factor" => {
                    o.spike_factor = num("spike_factor", 1.0, 10.0, "a multiple from 1 to 10")?
                }
                "spike_minutes" => {
                    o.spike_minutes = num("spike_minutes", 1.0, 60.0, "minutes, 1 to 60")? as u32
                }
                "interference" => {
                    o.interference = num("interference", 0.0, 1.0, "a share from 0 to 1")?
                }
                "mem_min" => o.mem_min = num("mem_min", 0.0, 1.0, "a share from 0 to 1")?,
                "mem_max" => o.mem_max = num("mem_max", 0.0, 1.0, "a share from 0 to 1")?,
                "job_mem_min" => {
                    o.job_mem_min = num("job_mem_min", 0.0, 1.0, "a share from 0 to 1")?
                }
                "job_mem_max" => {
                    o.job_mem_max = num("job_mem_max", 0.0, 1.0, "a share from 0 to 1")?
                }
                _ => return Err(OnlineLoadError::Key(k.into())),
            }
        }
        for (key, lo, hi) in [
            ("peak_min", o.peak_min, o.peak_max),
            ("mem_min", o.mem_min, o.mem_max),
            ("job_mem_min", o.job_mem_min, o.job_mem_max),
        ] {
            if lo > hi {
                return Err(OnlineLoadError::Value {
                    key,
                    value: lo.to_string(),
                    why: "at most its _max",
                });
            }
        }
        Ok(o)
    }

    /// The setting as `--online` writes it.
    pub fn describe(&self) -> String {
        format!(
            "hosts={},peak_min={},peak_max={},trough={:.3},peak_hour={},spike_prob={:.5},spike_factor={},spike_minutes={},interference={},mem_min={},mem_max={},job_mem_min={},job_mem_max={}",
            self.hosts,
            self.peak_min,
            self.peak_max,
            self.trough,
            self.peak_hour,
            self.spike_prob,
            self.spike_factor,
            self.spike_minutes,
            self.interference,
            self.mem_min,
            self.mem_max,
            self.job_mem_min,
            self.job_mem_max
        )
    }

    /// How many of `nodes` nodes (the first ones) serve.
    pub fn host_nodes(&self, nodes: usize) -> usize {
        (self.hosts * nodes as f64).round() as usize
    }

    /// The SM demand (0 to 1) of the service on GPU `gpu` (a cluster-wide GPU index)
    /// during the minute holding `t`.
    pub fn demand(&self, gpu: u64, t: Time) -> f64 {
        let minute = t / STEP_MS;
        let spiking = (0..u64::from(self.spike_minutes))
            .any(|k| minute >= k && self.spikes_at(gpu, minute - k));
        self.shape(self.peak(gpu), self.peak_hour_of(gpu), minute, spiking)
    }

    /// The hour of day at which the service on GPU `gpu` peaks.
    fn peak_hour_of(&self, gpu: u64) -> f64 {
        self.peak_hour + 4.0 * draw(self.seed, gpu, 0, 2) - 2.0
    }

    /// Whether a spike of the service on GPU `gpu` starts in `minute`.
    fn spikes_at(&self, gpu: u64, minute: u64) -> bool {
        draw(self.seed, gpu, minute, 3) < self.spike_prob
    }

    /// A service's demand in `minute`, given its peak, its peak hour and whether it
    /// is spiking.
    fn shape(&self, peak: f64, hour: f64, minute: u64, spiking: bool) -> f64 {
        let phase = (minute * STEP_MS) as f64 - hour * 3_600_000.0;
        let day = 0.5 * (1.0 + (2.0 * std::f64::consts::PI * phase / DAY_MS).cos());
        let mut d = peak * (self.trough + (1.0 - self.trough) * day);
        if spiking {
            d *= self.spike_factor;
        }
        d.clamp(0.0, 1.0)
    }

    /// The peak SM demand of the service on GPU `gpu`, spikes aside.
    pub fn peak(&self, gpu: u64) -> f64 {
        self.peak_min + (self.peak_max - self.peak_min) * draw(self.seed, gpu, 0, 1)
    }

    /// The least SM demand the service on GPU `gpu` ever has (its trough).
    pub fn min_demand(&self, gpu: u64) -> f64 {
        (self.peak(gpu) * self.trough).clamp(0.0, 1.0)
    }

    /// The GPU memory (share) the service on GPU `gpu` holds.
    pub fn memory(&self, gpu: u64) -> f64 {
        self.mem_min + (self.mem_max - self.mem_min) * draw(self.seed, gpu, 0, 4)
    }

    /// The GPU memory (share) offline job `job` needs on each GPU.
    pub fn job_memory(&self, job: u64) -> f64 {
        self.job_mem_min + (self.job_mem_max - self.job_mem_min) * draw(self.seed, job, 0, 5)
    }

    /// The speed (0 to 1) of an offline job given `share` of a GPU's SMs beside a
    /// service demanding `demand`.
    pub fn offline_speed(&self, share: f64, demand: f64) -> f64 {
        share.clamp(0.0, 1.0) * (1.0 - self.interference * demand)
    }
}

/// What one serving GPU's service was measured to use (live: its node's agent reads
/// the service's processes with `nvidia-smi`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GpuLoad {
    /// The SM share (0 to 1) the service used, at its most over the last minute.
    pub sm: f64,
    /// The share (0 to 1) of the GPU's memory it holds.
    pub memory: f64,
}

/// The services' loads as a policy reads them: the model's ([`OnlineLoad`]), or the
/// loads measured on a live cluster, by cluster-wide GPU index.
#[derive(Clone, Debug)]
pub enum Loads {
    /// The simulator's model.
    Model(OnlineLoad),
    /// Measured: the latest load of each serving GPU (none measured yet: idle), with
    /// the model's interference.
    Measured {
        /// Each GPU's latest load.
        gpus: std::sync::Arc<Vec<GpuLoad>>,
        /// As [`OnlineLoad::interference`].
        interference: f64,
    },
}

impl Loads {
    /// The SM demand of the service on GPU `gpu` during the minute holding `t` (live:
    /// the latest measured, whatever `t`).
    pub fn demand(&self, gpu: u64, t: Time) -> f64 {
        match self {
            Loads::Model(m) => m.demand(gpu, t),
            Loads::Measured { gpus, .. } => gpus.get(gpu as usize).map_or(0.0, |g| g.sm),
        }
    }

    /// The least SM demand the service on GPU `gpu` may have (live: none is known, so
    /// any minute may bring 0).
    pub fn min_demand(&self, gpu: u64) -> f64 {
        match self {
            Loads::Model(m) => m.min_demand(gpu),
            Loads::Measured { .. } => 0.0,
        }
    }

    /// The GPU memory (share) the service on GPU `gpu` holds.
    pub fn memory(&self, gpu: u64) -> f64 {
        match self {
            Loads::Model(m) => m.memory(gpu),
            Loads::Measured { gpus, .. } => gpus.get(gpu as usize).map_or(0.0, |g| g.memory),
        }
    }

    /// The GPU memory (share) offline job `job` needs on each GPU (live: none is
    /// declared, so any job fits; its agent hands it the share the service leaves as
    /// its quota instead).
    pub fn job_memory(&self, job: u64) -> f64 {
        match self {
            Loads::Model(m) => m.job_memory(job),
            Loads::Measured { .. } => 0.0,
        }
    }

    /// The speed (0 to 1) of an offline job given `share` of a GPU's SMs beside a
    /// service demanding `demand`.
    pub fn offline_speed(&self, share: f64, demand: f64) -> f64 {
        let interference = match self {
            Loads::Model(m) => m.interference,
            Loads::Measured { interference, .. } => *interference,
        };
        share.clamp(0.0, 1.0) * (1.0 - interference * demand)
    }
}

/// The cluster-wide index of each node's first GPU, for nodes of `gpus` GPUs each: the
/// GPU index [`OnlineLoad::demand`] and the shares take is this plus the GPU's bit.
pub fn gpu_offsets(gpus: impl IntoIterator<Item = u32>) -> Vec<u64> {
    let mut at = 0;
    gpus.into_iter()
        .map(|g| {
            let o = at;
            at += u64::from(g);
            o
        })
        .collect()
}

/// How the online services and the offline jobs beside them fared, for a run's summary.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OnlineReport {
    /// The setting.
    pub load: String,
    /// GPUs serving a service.
    pub host_gpus: u64,
    /// Mean share of SMs busy over all GPUs and the time measured (services' demand
    /// met plus offline jobs' shares).
    pub sm_activity: f64,
    /// Mean share of time a kernel ran (nvidia-smi's "GPU utilisation") over all GPUs.
    pub gpu_util: f64,
    /// The same over the serving GPUs alone.
    pub host_gpu_util: f64,
    /// The same as `sm_activity` over the serving GPUs alone.
    pub host_sm_activity: f64,
    /// Service-minutes whose demand exceeded the SMs the offline job beside it left,
    /// as a share of all service-minutes.
    pub slo_violation: f64,
    /// Offline jobs evicted for a service's load.
    pub evictions: u64,
}

/// Every service's demand, minute by minute, as [`OnlineLoad::demand`] gives it, for a
/// run that reads its minutes in order and every GPU in each: a service's peak and
/// peak hour are drawn once, each minute's spike draw is made once (and remembered
/// for the minutes it lasts), and a minute's demands are kept while it lasts. The
/// simulator measured every serving GPU at every event this way, drawing all of it
/// afresh, and that was nine tenths of a Philly run.
#[derive(Clone, Debug)]
pub struct Demands {
    load: OnlineLoad,
    peak: Vec<f64>,
    hour: Vec<f64>,
    /// Per GPU: the latest minute read so far in which a spike started.
    spiked: Vec<Option<u64>>,
    /// The minute `now` holds, once one is read.
    minute: Option<u64>,
    now: Vec<f64>,
}

impl Demands {
    /// The demands of the services on GPUs `0..gpus`.
    pub fn new(load: OnlineLoad, gpus: u64) -> Demands {
        Demands {
            peak: (0..gpus).map(|g| load.peak(g)).collect(),
            hour: (0..gpus).map(|g| load.peak_hour_of(g)).collect(),
            spiked: vec![None; gpus as usize],
            minute: None,
            now: vec![0.0; gpus as usize],
            load,
        }
    }

    /// Each GPU's demand during the minute holding `t`.
    pub fn at(&mut self, t: Time) -> &[f64] {
        self.read(t);
        &self.now
    }

    /// The demands [`Demands::read`] read last.
    pub fn current(&self) -> &[f64] {
        &self.now
    }

    /// Reads each GPU's demand during the minute holding `t` into [`Demands::current`].
    pub fn read(&mut self, t: Time) {
        let minute = t / STEP_MS;
        if self.minute == Some(minute) {
            return;
        }
        let lasts = u64::from(self.load.spike_minutes);
        // The minutes whose spikes could reach this one and are not read yet.
        let window = (minute + 1).saturating_sub(lasts);
        let first = match self.minute {
            Some(last) if last < minute => window.max(last + 1),
            _ => {
                self.spiked.fill(None);
                window
            }
        };
        for (g, d) in self.now.iter_mut().enumerate() {
            let gpu = g as u64;
            for m in first..=minute {
                if self.load.spikes_at(gpu, m) {
                    self.spiked[g] = Some(m);
                }
            }
            let spiking = self.spiked[g].is_some_and(|m| m >= window);
            *d = self.load.shape(self.peak[g], self.hour[g], minute, spiking);
        }
        self.minute = Some(minute);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn load_follows_a_day_with_spikes_and_is_a_function_of_its_inputs() {
        let o = OnlineLoad::default();
        let h = 3_600_000;
        for gpu in 0..20 {
            let (lo, hi) = (o.demand(gpu, 8 * h), o.demand(gpu, 20 * h));
            assert!(hi > lo || hi >= 1.0, "gpu {gpu}: {lo} {hi}");
            assert_eq!(o.demand(gpu, 20 * h), o.demand(gpu, 20 * h + 59_999));
        }
        // About one minute in 480 starts a 3-minute spike: ~0.6 % of minutes.
        let spiking = (0..100_000u64)
            .filter(|&m| {
                let calm = OnlineLoad {
                    spike_prob: 0.0,
                    ..o
                };
                o.demand(7, m * STEP_MS) > calm.demand(7, m * STEP_MS) + 1e-12
            })
            .count();
        assert!((400..900).contains(&spiking), "{spiking}");
        // Mean demand near MuxFlow's 16 % SM activity before sharing.
        let mean: f64 = (0..200u64)
            .flat_map(|g| (0..24).map(move |hh| (g, hh)))
            .map(|(g, hh)| o.demand(g, hh * h))
            .sum::<f64>()
            / 4800.0;
        assert!((0.14..0.2).contains(&mean), "{mean}");
        assert_ne!(OnlineLoad { seed: 1, ..o }.demand(3, 0), o.demand(3, 0));
    }

    #[test]
    fn settings_parse_and_refuse() {
        let o = OnlineLoad::parse("hosts=1,interference=0").unwrap();
        assert_eq!((o.hosts, o.interference), (1.0, 0.0));
        assert!(OnlineLoad::parse("hosts=2").is_err());
        assert!(OnlineLoad::parse("peak_min=0.9,peak_max=0.5").is_err());
        assert!(matches!(
            OnlineLoad::parse("nope=1"),
            Err(OnlineLoadError::Key(_))
        ));
        assert_eq!(OnlineLoad::default().offline_speed(0.5, 0.5), 0.45);
    }

    /// Minutes read in order, with gaps, repeated and going back give what each
    /// GPU's demand on its own gives, to the bit.
    #[test]
    fn demands_by_minute_match_each_demand() {
        for load in [
            OnlineLoad::default(),
            OnlineLoad {
                seed: 7,
                ..OnlineLoad::parse("spike_prob=0.3,spike_minutes=5").unwrap()
            },
            OnlineLoad::parse("spike_prob=0.5,spike_minutes=1").unwrap(),
        ] {
            let mut d = Demands::new(load, 40);
            let mut t = 0;
            let mut rng = crate::rng::Rng::new(3);
            for _ in 0..2_000 {
                t = match rng.below(10) {
                    0 => t / 2,
                    1 => t + rng.below(20) * STEP_MS,
                    2 => t,
                    _ => t + rng.below(2 * STEP_MS),
                };
                let got: Vec<u64> = d.at(t).iter().map(|x| x.to_bits()).collect();
                let want: Vec<u64> = (0..40).map(|g| load.demand(g, t).to_bits()).collect();
                assert_eq!(got, want, "{} at {t}", load.describe());
            }
        }
    }
}
