//! A Philly-calibrated synthetic trace of any size.
//!
//! Distributions, fitted to the 82,247 jobs of `philly.csv` (documented in
//! `docs/traces.md`):
//! * GPUs per job: Philly's empirical histogram (1: 93.2 %, 2: 2.2 %, 4: 2.3 %, 8: 2.0 %,
//!   16: 0.24 %, 32: 0.08 %, and the rare 12/24/64/128).
//! * Duration: log-normal with μ = 6.791, σ = 2.156 (the mean and standard deviation of
//!   Philly's log-durations in seconds), clamped to [1 s, 4,628,226 s] (Philly's range).
//! * Arrivals: Poisson, with the rate that gives the requested offered load
//!   (GPU-time demanded per unit time ÷ cluster GPUs). Philly's own load on the
//!   Philly-like cluster (2,816 GPUs) is 0.133, the default.
//! * VC: drawn with Philly's per-VC job shares.
//!
//! Each concern draws from its own named RNG stream, so changing one distribution does
//! not reshuffle the others.

use apiary_model::{Job, Rng, Time};

/// GPU counts and their Philly job counts.
pub const PHILLY_GPUS: [(u32, f64); 10] = [
    (1, 76_627.0),
    (2, 1_818.0),
    (4, 1_870.0),
    (8, 1_643.0),
    (12, 7.0),
    (16, 199.0),
    (24, 7.0),
    (32, 67.0),
    (64, 6.0),
    (128, 3.0),
];
/// Philly VCs and their job counts.
pub const PHILLY_VCS: [(&str, f64); 15] = [
    ("6214e9", 41_226.0),
    ("11cb48", 16_091.0),
    ("6c71a0", 9_953.0),
    ("b436b2", 7_423.0),
    ("103959", 1_934.0),
    ("ee9e8c", 1_511.0),
    ("0e4a51", 1_435.0),
    ("ed69ec", 1_137.0),
    ("7f04ca", 723.0),
    ("2869ce", 422.0),
    ("e13805", 374.0),
    ("23dbec", 8.0),
    ("51b7ef", 4.0),
    ("925e2b", 3.0),
    ("795a4c", 3.0),
];
/// Log-duration mean (ln seconds).
pub const MU: f64 = 6.791;
/// Log-duration standard deviation.
pub const SIGMA: f64 = 2.156;
/// Philly's offered load on the 2,816-GPU Philly-like cluster.
pub const PHILLY_LOAD: f64 = 0.133;

/// Generator settings.
#[derive(Clone, Debug)]
pub struct SynthOptions {
    /// Number of jobs.
    pub jobs: usize,
    /// GPUs of the target cluster (sets the arrival rate with `load`).
    pub cluster_gpus: u32,
    /// Offered load.
    pub load: f64,
    /// Seed.
    pub seed: u64,
    /// Largest GPU count to draw (larger draws are redrawn), e.g. the cluster size.
    pub max_gpus: u32,
}

/// Generates a trace.
pub fn generate(o: &SynthOptions) -> Vec<Job> {
    let mut arr = Rng::stream(o.seed, "synth/arrivals");
    let mut dur = Rng::stream(o.seed, "synth/durations");
    let mut gpu = Rng::stream(o.seed, "synth/gpus");
    let mut vcs = Rng::stream(o.seed, "synth/vcs");
    let allowed: Vec<(u32, f64)> = PHILLY_GPUS
        .iter()
        .copied()
        .filter(|(g, _)| *g <= o.max_gpus.max(1))
        .collect();
    let weights: Vec<f64> = allowed.iter().map(|x| x.1).collect();
    let vc_w: Vec<f64> = PHILLY_VCS.iter().map(|x| x.1).collect();
    let mean_gpus: f64 =
        allowed.iter().map(|(g, w)| *g as f64 * w).sum::<f64>() / weights.iter().sum::<f64>();
    // Mean of the clamped log-normal, by the unclamped formula (clamping moves it <1 %).
    let mean_dur = (MU + SIGMA * SIGMA / 2.0).exp();
    let gap = mean_gpus * mean_dur / (o.load.max(1e-9) * o.cluster_gpus.max(1) as f64);
    let mut t = 0.0f64;
    let mut out = Vec::with_capacity(o.jobs);
    for i in 0..o.jobs {
        if i > 0 {
            t += arr.exp(gap);
        }
        let g = allowed[gpu.weighted(&weights)].0;
        let d = dur.lognormal(MU, SIGMA).clamp(1.0, 4_628_226.0);
        let mut j = Job::new(
            format!("{i}"),
            (t * 1000.0).round() as Time,
            g,
            (d * 1000.0).round() as Time,
        );
        j.vc = Some(PHILLY_VCS[vcs.weighted(&vc_w)].0.into());
        out.push(j);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn deterministic_and_calibrated() {
        let o = SynthOptions {
            jobs: 20_000,
            cluster_gpus: 2816,
            load: PHILLY_LOAD,
            seed: 7,
            max_gpus: 2816,
        };
        let a = generate(&o);
        assert_eq!(a, generate(&o));
        let ones = a.iter().filter(|j| j.gpus == 1).count() as f64 / a.len() as f64;
        assert!((ones - 0.932).abs() < 0.01, "{ones}");
        let mut d: Vec<u64> = a.iter().map(|j| j.duration).collect();
        d.sort_unstable();
        let median = d[d.len() / 2] as f64 / 1000.0;
        assert!((median / MU.exp() - 1.0).abs() < 0.1, "median {median}");
        assert!(a.windows(2).all(|w| w[0].submit <= w[1].submit));
    }
}
