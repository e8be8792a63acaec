//! What a run produced, in the shape both drivers (simulator and live service) fill and
//! the report crate summarises: one definition of every metric's inputs.

use crate::time::Time;
use compact_str::CompactString;

/// The fate of one job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobOutcome {
    /// Trace identifier.
    pub id: CompactString,
    /// Submission time.
    pub submit: Time,
    /// GPUs.
    pub gpus: u32,
    /// Reference duration.
    pub duration: Time,
    /// Virtual cluster, if any.
    pub vc: Option<CompactString>,
    /// First start, if it ever ran.
    pub first_start: Option<Time>,
    /// Completion, if it finished.
    pub finish: Option<Time>,
    /// Times preempted.
    pub preemptions: u32,
    /// Time holding GPUs (ms).
    pub executed: Time,
    /// GPU-ms held.
    pub gpu_time: u64,
    /// Why it never ran, if it was refused outright (it can never fit, or admission
    /// control declined it).
    pub rejected: Option<Box<str>>,
    /// Absolute deadline, if the job has one.
    pub deadline: Option<Time>,
    /// When the deadline is judged, where not at `finish`: the ElasticFlow artifact
    /// judges a job on its plan's exact end ([`JobOutcome::met_deadline`]).
    pub judged: Option<Time>,
}

impl JobOutcome {
    /// Whether the job has a deadline and finished by it (a declined or unfinished job
    /// has not).
    pub fn met_deadline(&self) -> bool {
        matches!((self.deadline, self.finish, &self.rejected), (Some(d), Some(f), None) if self.judged.unwrap_or(f) <= d)
    }
}

/// Busy GPUs over time, integrated into equal-width buckets whose width doubles as
/// the run grows, so memory stays bounded whatever the run length.
#[derive(Clone, Debug)]
pub struct UtilSeries {
    /// Time of the first bucket's start.
    pub start: Time,
    /// Bucket width, ms.
    pub width: Time,
    /// Busy GPU-ms in each bucket.
    pub busy: Vec<f64>,
    /// Cluster GPUs.
    pub total_gpus: u32,
    /// The bucket the last interval ended in, and its span `[lo, hi)` (empty when
    /// none): most intervals between two events fall in it, with no division.
    hot: (usize, Time, Time),
}

/// Series are equal when their buckets are, whichever bucket each last wrote.
impl PartialEq for UtilSeries {
    fn eq(&self, other: &Self) -> bool {
        (self.start, self.width, &self.busy, self.total_gpus)
            == (other.start, other.width, &other.busy, other.total_gpus)
    }
}

const MAX_BUCKETS: usize = 2048;

impl UtilSeries {
    /// Starts empty at `start`.
    pub fn new(start: Time, total_gpus: u32) -> UtilSeries {
        UtilSeries {
            start,
            width: 60_000,
            busy: Vec::new(),
            total_gpus,
            hot: (0, 0, 0),
        }
    }

    /// Adds `gpus` busy GPUs over `[from, to)`.
    #[inline]
    pub fn add(&mut self, from: Time, to: Time, gpus: u64) {
        self.add_weight(from, to, gpus as f64);
    }

    /// Adds `gpus` (a fractional count: GPUs' worth of useful work) over `[from, to)`.
    // Inlined across crates: observers call it three times at every event, and the
    // common case is a handful of instructions.
    #[inline]
    pub fn add_weight(&mut self, from: Time, to: Time, gpus: f64) {
        if to <= from || gpus <= 0.0 || from < self.start {
            return;
        }
        let (hot, lo, hi) = self.hot;
        if from >= lo && to <= hi {
            self.busy[hot] += (to - from) as f64 * gpus;
            return;
        }
        // Most other intervals lie in one bucket already held: one division finds it,
        // where the general path takes three.
        if to <= self.start + self.busy.len() as Time * self.width {
            let b = ((from - self.start) / self.width) as usize;
            let lo = self.start + b as Time * self.width;
            if to <= lo + self.width {
                self.busy[b] += (to - from) as f64 * gpus;
                self.hot = (b, lo, lo + self.width);
                return;
            }
        }
        self.add_spanning(from, to, gpus);
    }

    /// The general path of [`UtilSeries::add_weight`]: grows the series to `to`, then
    /// adds to each bucket the interval spans.
    #[inline(never)]
    fn add_spanning(&mut self, from: Time, to: Time, gpus: f64) {
        while (to - self.start).div_ceil(self.width) as usize > MAX_BUCKETS {
            self.coarsen();
        }
        let need = (to - self.start).div_ceil(self.width) as usize;
        if self.busy.len() < need {
            self.busy.resize(need, 0.0);
        }
        let mut t = from;
        while t < to {
            let b = ((t - self.start) / self.width) as usize;
            let lo = self.start + b as Time * self.width;
            let end = (lo + self.width).min(to);
            self.busy[b] += (end - t) as f64 * gpus;
            self.hot = (b, lo, lo + self.width);
            t = end;
        }
    }

    fn coarsen(&mut self) {
        self.hot = (0, 0, 0);
        self.width *= 2;
        let merged: Vec<f64> = self.busy.chunks(2).map(|c| c.iter().sum()).collect();
        self.busy = merged;
    }

    /// Utilisation (0..1) per bucket, paired with the bucket's start time.
    pub fn points(&self) -> Vec<(Time, f64)> {
        let cap = self.width as f64 * self.total_gpus as f64;
        self.busy
            .iter()
            .enumerate()
            .map(|(i, b)| {
                (
                    self.start + i as Time * self.width,
                    if cap > 0.0 { b / cap } else { 0.0 },
                )
            })
            .collect()
    }

    /// Total busy GPU-ms.
    pub fn total_busy(&self) -> f64 {
        self.busy.iter().sum()
    }
}

/// Job counts over time: each series holds job-ms per bucket over a "cluster" of one,
/// so [`UtilSeries::points`] reads the mean count over each bucket.
#[derive(Clone, Debug, PartialEq)]
pub struct Occupancy {
    /// Jobs submitted and not running (waiting for a first start or after a preemption).
    pub pending: UtilSeries,
    /// Jobs running.
    pub running: UtilSeries,
}

impl Occupancy {
    /// Starts empty at `start`.
    pub fn new(start: Time) -> Occupancy {
        Occupancy {
            pending: UtilSeries::new(start, 1),
            running: UtilSeries::new(start, 1),
        }
    }
}

/// Everything a run produced.
#[derive(Clone, Debug)]
pub struct RunOutcome {
    /// Policy name.
    pub policy: String,
    /// Policy parameters, `key=value`.
    pub params: Vec<String>,
    /// Cluster name.
    pub cluster: String,
    /// Cluster GPUs.
    pub total_gpus: u32,
    /// Per job, in trace order.
    pub jobs: Vec<JobOutcome>,
    /// Busy GPUs over time.
    pub util: UtilSeries,
    /// ElasticFlow's cluster efficiency over time, when any job has a throughput table:
    /// each running job counts T(n)/T(1) GPUs (its speed on its n GPUs over its speed on
    /// one), a job without a table its n.
    pub cluster_efficiency: Option<UtilSeries>,
    /// Jobs waiting and jobs running over time, where the driver measured them.
    pub occupancy: Option<Occupancy>,
    /// GPU energy and carbon, where the driver measured them.
    pub energy: Option<crate::energy::EnergyReport>,
    /// Data loading, where the IO model ran (`--io`).
    pub io: Option<crate::io::IoReport>,
    /// Input pipelines, where the CPU model ran (`--cpu`).
    pub cpu: Option<crate::cpu::CpuReport>,
    /// Online services beside offline jobs, where the online model ran (`--online`).
    pub online: Option<crate::online::OnlineReport>,
    /// What failures did, where the run had a failure model (`--failures`).
    pub failures: Option<crate::failures::FailureReport>,
    /// Events processed.
    pub events: u64,
    /// Policy invocations.
    pub passes: u64,
    /// Seed.
    pub seed: u64,
}

impl RunOutcome {
    /// An outcome of `jobs` on `total_gpus` GPUs and nothing else measured: what a
    /// report builds to summarise a subset of a run's jobs, and tests build by hand.
    pub fn of_jobs(
        cluster: impl Into<String>,
        total_gpus: u32,
        jobs: Vec<JobOutcome>,
    ) -> RunOutcome {
        RunOutcome {
            policy: String::new(),
            params: Vec::new(),
            cluster: cluster.into(),
            total_gpus,
            jobs,
            util: UtilSeries::new(0, total_gpus),
            cluster_efficiency: None,
            occupancy: None,
            energy: None,
            io: None,
            cpu: None,
            online: None,
            failures: None,
            events: 0,
            passes: 0,
            seed: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_outcome_fits_in_its_job() {
        // The simulator turns its job list into outcomes in place (std's in-place
        // collect needs the outcome no larger than the job); a larger outcome costs a
        // second list of the trace's size, a tenth of a Philly run in page faults.
        assert!(std::mem::size_of::<JobOutcome>() <= std::mem::size_of::<crate::Job>());
        assert_eq!(
            std::mem::align_of::<JobOutcome>(),
            std::mem::align_of::<crate::Job>()
        );
    }

    #[test]
    fn util_buckets_integrate_and_coarsen() {
        let mut u = UtilSeries::new(0, 4);
        u.add(0, 120_000, 2);
        assert_eq!(u.busy, vec![120_000.0, 120_000.0]);
        assert_eq!(u.points()[0].1, 0.5);
        u.add(0, 60_000 * 5000, 1);
        assert!(u.busy.len() <= MAX_BUCKETS);
        assert_eq!(u.total_busy(), 240_000.0 + 300_000_000.0);
    }

    #[test]
    fn intervals_within_a_bucket_add_as_the_general_path_does() {
        let (mut fast, mut slow) = (UtilSeries::new(7, 64), UtilSeries::new(7, 64));
        let (mut t, mut x) = (7u64, 3u64);
        for _ in 0..20_000 {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            // Events mostly milliseconds apart, some hours, so buckets fill and coarsen.
            let dt = if (x >> 60) == 0 {
                (x >> 20) % 20_000_000
            } else {
                (x >> 30) % 5_000
            };
            let gpus = ((x >> 8) % 65) as f64 * 0.75;
            fast.add_weight(t, t + dt, gpus);
            if t + dt > t && gpus > 0.0 {
                slow.add_spanning(t, t + dt, gpus);
            }
            t += dt;
        }
        assert!(fast.width > 60_000, "the run coarsened");
        assert_eq!(fast, slow);
    }
}
