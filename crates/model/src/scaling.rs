//! How fast an elastic job trains on each GPU count it may be given.
//!
//! ElasticFlow's users state a model, a global batch and an iteration count, not a GPU
//! count; the scheduler picks the count from a measured table of iterations per second
//! at 1, 2, 4, … GPUs (its "levels"). The table travels with the job so that the
//! simulator charges progress at the speed of the count a policy chose, and so that
//! any elastic policy can read it without I/O.

use serde::{Deserialize, Serialize};

/// Iterations per second of one job at each GPU count it can run on.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Scaling {
    /// `(gpus, iterations per second)`, GPU counts strictly increasing, throughputs
    /// finite and positive.
    pub levels: Vec<(u32, f64)>,
    /// The most GPUs an elastic scheduler may give the job (ElasticFlow's per-model
    /// `max_gpu`); levels above it exist for baselines that run the trace's count.
    pub max_gpus: u32,
    /// The global batch the table was measured at, when known: the artifact caps its
    /// EDF baselines at the largest measured count within it (and 64).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<u32>,
}

impl Scaling {
    /// A table from `(gpus, iterations/s)` pairs; `None` unless the counts increase
    /// strictly and every throughput is finite and positive.
    pub fn new(levels: Vec<(u32, f64)>, max_gpus: u32) -> Option<Scaling> {
        let ok = !levels.is_empty()
            && levels.windows(2).all(|w| w[0].0 < w[1].0)
            && levels
                .iter()
                .all(|&(g, t)| g > 0 && t.is_finite() && t > 0.0);
        ok.then_some(Scaling {
            levels,
            max_gpus,
            batch: None,
        })
    }

    /// The same table, measured at global batch `batch`.
    pub fn with_batch(mut self, batch: u32) -> Scaling {
        self.batch = Some(batch);
        self
    }

    /// The largest count the table measured of at most `gpus`, whatever `max_gpus`
    /// says (0 when none).
    pub fn floor_measured(&self, gpus: u32) -> u32 {
        self.levels
            .iter()
            .map(|&(g, _)| g)
            .take_while(|&g| g <= gpus)
            .last()
            .unwrap_or(0)
    }

    /// The most GPUs ElasticFlow's non-elastic baselines give the job (`jobs.py`: the
    /// largest measured count, at most 64 and at most the global batch).
    pub fn baseline_max(&self) -> u32 {
        self.floor_measured(self.batch.unwrap_or(u32::MAX).min(64))
    }

    /// Iterations per second on `gpus` GPUs, if the table has that count.
    pub fn tput(&self, gpus: u32) -> Option<f64> {
        self.levels
            .iter()
            .find(|&&(g, _)| g == gpus)
            .map(|&(_, t)| t)
    }

    /// The smallest level above `gpus` within `max_gpus`, or `gpus` itself when there
    /// is none (ElasticFlow's `get_next_level`; 0 asks for the first level).
    pub fn next_level(&self, gpus: u32) -> u32 {
        self.levels
            .iter()
            .map(|&(g, _)| g)
            .take_while(|&g| g <= self.max_gpus)
            .find(|&g| g > gpus)
            .unwrap_or(gpus)
    }

    /// The largest level of at most `free` GPUs within `max_gpus`, 0 when none fits
    /// (ElasticFlow's `get_last_level(free + 1)`).
    pub fn floor_level(&self, free: u32) -> u32 {
        self.levels
            .iter()
            .map(|&(g, _)| g)
            .take_while(|&g| g <= self.max_gpus && g <= free)
            .last()
            .unwrap_or(0)
    }

    /// Speed on `gpus` GPUs relative to `reference` GPUs (1.0 when either is missing,
    /// so a job never stalls on a count its table lacks).
    pub fn speedup(&self, gpus: u32, reference: u32) -> f64 {
        match (self.tput(gpus), self.tput(reference)) {
            (Some(a), Some(b)) => a / b,
            _ => 1.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> Scaling {
        Scaling::new(vec![(1, 1.0), (2, 1.8), (4, 3.0), (8, 4.0)], 4).unwrap()
    }

    #[test]
    fn levels() {
        let s = table();
        assert_eq!(s.next_level(0), 1);
        assert_eq!(s.next_level(1), 2);
        assert_eq!(s.next_level(4), 4, "8 is above max_gpus");
        assert_eq!(s.floor_level(0), 0);
        assert_eq!(s.floor_level(3), 2);
        assert_eq!(s.floor_level(100), 4);
        assert_eq!(s.tput(8), Some(4.0));
        assert_eq!(s.tput(3), None);
        assert!((s.speedup(4, 2) - 3.0 / 1.8).abs() < 1e-12);
        assert_eq!(s.speedup(3, 1), 1.0);
    }

    #[test]
    fn rejects_bad_tables() {
        assert!(Scaling::new(vec![], 1).is_none());
        assert!(Scaling::new(vec![(2, 1.0), (1, 1.0)], 2).is_none());
        assert!(Scaling::new(vec![(1, f64::NAN)], 1).is_none());
        assert!(Scaling::new(vec![(0, 1.0)], 1).is_none());
    }
}
