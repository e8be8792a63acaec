//! CPU preprocessing as a resource: a job's input pipeline (decoding, augmentation) runs
//! on CPUs, and too few of them hold its GPUs back.
//!
//! Synergy (OSDI '22) measured each model's throughput by CPUs per GPU; a job on `g`
//! GPUs with `c` CPUs runs at `speed(c/g)` of its GPU-bound rate, the measured
//! throughput at `c/g` CPUs per GPU over the best measured ([`speed`]). The models are
//! [`crate::io::MODELS`]' (a job's model comes from [`crate::io::assign`]).

/// CPUs per GPU at which Synergy measured (`simulator/models`, rows of `tput`).
pub const CPUS_PER_GPU: [f64; 9] = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 9.0, 12.0, 24.0];

/// Throughput of each of [`crate::io::MODELS`] (same order) at each of
/// [`CPUS_PER_GPU`], normalised to 3 CPUs per GPU, 1-GPU jobs with 250 GB of memory (so
/// the dataset is in memory and only CPUs vary). From msr-fiddle/synergy at
/// 1bb2bed6 (`../shared/io/synergy/synergy_tput_long.csv`); MIT License, Copyright (c)
/// 2015 - present Microsoft Corporation.
pub const TPUT: [[f64; 9]; 12] = [
    [0.3, 0.66, 1.0, 1.25, 1.53, 1.75, 2.0, 2.94, 2.94], // alexnet
    [0.3, 0.66, 1.0, 1.25, 1.53, 1.75, 2.0, 2.89, 2.89], // shufflenet
    [0.37, 0.72, 1.0, 1.3, 1.53, 1.75, 2.4, 2.4, 2.4],   // res18
    [0.4, 0.74, 1.0, 1.15, 1.15, 1.15, 1.15, 1.15, 1.15], // res50
    [0.37, 0.72, 1.0, 1.3, 1.49, 1.55, 1.55, 1.55, 1.55], // mobilenet
    [0.3, 0.66, 1.0, 1.2, 1.4, 2.5, 2.5, 2.5, 2.5],      // m5
    [0.3, 0.66, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0],      // deepspeech
    [1.0; 9],                                            // gnmt
    [1.0; 9],                                            // transformer
    [1.0; 9],                                            // lstm
    [1.0; 9],                                            // bert
    [1.0; 9],                                            // vae
];

/// The fraction of its GPU-bound speed model `m` (an index into
/// [`crate::io::MODELS`]) reaches with `x` CPUs per GPU: linear between Synergy's
/// points, proportional to `x` below one CPU, the best measured beyond 24.
pub fn speed(m: usize, x: f64) -> f64 {
    let t = &TPUT[m.min(TPUT.len() - 1)];
    let best = t.iter().copied().fold(0.0, f64::max);
    let x = x.max(0.0);
    let at = if x <= CPUS_PER_GPU[0] {
        t[0] * x / CPUS_PER_GPU[0]
    } else if let Some(k) = CPUS_PER_GPU.iter().position(|&c| c >= x) {
        let (c0, c1) = (CPUS_PER_GPU[k - 1], CPUS_PER_GPU[k]);
        t[k - 1] + (t[k] - t[k - 1]) * (x - c0) / (c1 - c0)
    } else {
        best
    };
    (at / best).clamp(1e-6, 1.0)
}

/// The points of model `m`'s speed curve: (CPUs per GPU, speed), from none.
pub fn curve(m: usize) -> impl Iterator<Item = (f64, f64)> {
    std::iter::once((0.0, 0.0)).chain(CPUS_PER_GPU.iter().map(move |&c| (c, speed(m, c))))
}

/// The cluster's CPUs for input pipelines.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CpuPool {
    /// CPUs per GPU on every node; the pool is this times the cluster's GPUs.
    pub cpus_per_gpu: f64,
}

impl Default for CpuPool {
    /// `--cpu default`: 3 CPUs per GPU, Synergy's 24-CPU, 8-GPU server.
    fn default() -> CpuPool {
        CpuPool { cpus_per_gpu: 3.0 }
    }
}

/// Why a `--cpu` setting was refused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum CpuPoolError {
    /// A key it does not have.
    #[error("unknown --cpu key '{0}' (keys: cpus_per_gpu)")]
    Key(String),
    /// A value out of range.
    #[error("--cpu cpus_per_gpu: a number from 0.1 to 1000 (got '{0}')")]
    Value(String),
}

impl CpuPool {
    /// `default`, or `cpus_per_gpu=N`.
    pub fn parse(s: &str) -> Result<CpuPool, CpuPoolError> {
        CpuPool::default().with(s)
    }

    /// This setting with `cpus_per_gpu=N` laid over.
    pub fn with(self, s: &str) -> Result<CpuPool, CpuPoolError> {
        let mut p = self;
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            if part == "default" {
                continue;
            }
            match part.split_once('=') {
                Some(("cpus_per_gpu", v)) => {
                    p.cpus_per_gpu = v
                        .parse::<f64>()
                        .ok()
                        .filter(|x| x.is_finite() && (0.1..=1000.0).contains(x))
                        .ok_or_else(|| CpuPoolError::Value(v.into()))?;
                }
                _ => {
                    return Err(CpuPoolError::Key(
                        part.split('=').next().unwrap_or("").into(),
                    ));
                }
            }
        }
        Ok(p)
    }

    /// The setting as `--cpu` writes it.
    pub fn describe(&self) -> String {
        format!("cpus_per_gpu={}", self.cpus_per_gpu)
    }
}

/// How a run's input pipelines went, for its summary.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CpuReport {
    /// The setting.
    pub pool: String,
    /// Who allocated CPUs: `policy` (GoldMiner's data workers) or `fixed` (each job
    /// its GPUs' share of its nodes).
    pub allocated_by: String,
    /// CPU-seconds allocated to running jobs.
    pub cpu_s: f64,
    /// The pool × the time measured, CPU-seconds.
    pub capacity_s: f64,
    /// GPU-seconds that held a job while its input pipeline kept it waiting.
    pub stalled_gpu_s: f64,
    /// Jobs whose model was drawn.
    pub drawn_models: usize,
}

impl CpuReport {
    /// Allocated CPU time over the pool's.
    pub fn util(&self) -> f64 {
        if self.capacity_s > 0.0 {
            self.cpu_s / self.capacity_s
        } else {
            0.0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::MODELS;

    #[test]
    fn speed_follows_synergys_points() {
        let res18 = MODELS.iter().position(|m| m.name == "res18").unwrap();
        // 3 CPUs per GPU is Synergy's fair share: 1 / 2.4 of the best.
        assert!((speed(res18, 3.0) - 1.0 / 2.4).abs() < 1e-12);
        assert_eq!(speed(res18, 9.0), 1.0);
        assert_eq!(speed(res18, 100.0), 1.0);
        // Halfway between 6 (1.75) and 9 (2.4).
        assert!((speed(res18, 7.5) - 2.075 / 2.4).abs() < 1e-12);
        assert!((speed(res18, 0.5) - 0.185 / 2.4).abs() < 1e-12);
        let bert = MODELS.iter().position(|m| m.name == "bert").unwrap();
        assert_eq!(speed(bert, 1.0), 1.0);
        let c: Vec<_> = curve(res18).collect();
        assert_eq!(c.len(), 10);
        assert_eq!(c[0], (0.0, 0.0));
        assert!(c.windows(2).all(|w| w[1].1 >= w[0].1));
    }

    #[test]
    fn settings_parse() {
        assert_eq!(CpuPool::parse("default").unwrap(), CpuPool::default());
        assert_eq!(CpuPool::parse("cpus_per_gpu=6").unwrap().cpus_per_gpu, 6.0);
        assert!(CpuPool::parse("cpus_per_gpu=0").is_err());
        assert!(matches!(
            CpuPool::parse("cores=2"),
            Err(CpuPoolError::Key(_))
        ));
        let p = CpuPool::parse("cpus_per_gpu=4.5").unwrap();
        assert_eq!(CpuPool::parse(&p.describe()).unwrap(), p);
    }
}
