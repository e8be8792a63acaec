//! Metric series measured from the cluster's state between events, shared by both
//! drivers: the simulator's [`Engine`](crate::Engine) and the live service replayed on
//! simulated time call the same observers, so a series means the same thing in both.
//!
//! An observer sees the world as it stood over each interval between two events and
//! writes what it measured into the run's outcome at the end. New metrics (power,
//! carbon, cache hit rates) arrive as new observers, not as new engine code.

use apiary_model::{Job, Occupancy, RunOutcome, Time, UtilSeries};
use apiary_policy::World;

/// Measures the cluster over the intervals between events.
pub trait Observer {
    /// The cluster stood as `world` shows it over `[from, to)`.
    fn interval(&mut self, world: &World, from: Time, to: Time);
    /// Writes the measurement into the run's outcome.
    fn report(self: Box<Self>, outcome: &mut RunOutcome);
}

/// Busy GPUs over time: the outcome's `util` series.
#[derive(Clone, Debug)]
pub struct Utilisation(UtilSeries);

impl Utilisation {
    /// Starts at `start` on a cluster of `total_gpus`.
    pub fn new(start: Time, total_gpus: u32) -> Utilisation {
        Utilisation(UtilSeries::new(start, total_gpus))
    }
}

impl Observer for Utilisation {
    fn interval(&mut self, world: &World, from: Time, to: Time) {
        self.0.add(from, to, world.busy_gpus());
    }
    fn report(self: Box<Self>, outcome: &mut RunOutcome) {
        outcome.util = self.0;
    }
}

/// Jobs waiting and jobs running over time: the outcome's `occupancy`, from which
/// reports draw queue length beside utilisation.
#[derive(Clone, Debug)]
pub struct JobCounts(Occupancy);

impl JobCounts {
    /// Starts at `start`.
    pub fn new(start: Time) -> JobCounts {
        JobCounts(Occupancy::new(start))
    }
}

impl Observer for JobCounts {
    fn interval(&mut self, world: &World, from: Time, to: Time) {
        self.0.pending.add(from, to, world.pending_count() as u64);
        self.0.running.add(from, to, world.running().len() as u64);
    }
    fn report(self: Box<Self>, outcome: &mut RunOutcome) {
        outcome.occupancy = Some(self.0);
    }
}

/// ElasticFlow's cluster efficiency (`get_efficiency`): the running jobs' speed-ups
/// over one GPU, as GPUs' worth of useful work. Only jobs with a throughput table
/// (elastic traces) make it differ from utilisation, so drivers add it when a trace
/// has such jobs ([`ClusterEfficiency::applies`]).
#[derive(Clone, Debug)]
pub struct ClusterEfficiency(UtilSeries);

impl ClusterEfficiency {
    /// Starts at `start` on a cluster of `total_gpus`.
    pub fn new(start: Time, total_gpus: u32) -> ClusterEfficiency {
        ClusterEfficiency(UtilSeries::new(start, total_gpus))
    }

    /// Whether the series means anything for `jobs`: some job has a throughput table.
    pub fn applies(jobs: &[Job]) -> bool {
        jobs.iter().any(|j| j.extras().scaling.is_some())
    }
}

impl Observer for ClusterEfficiency {
    fn interval(&mut self, world: &World, from: Time, to: Time) {
        self.0.add_weight(from, to, useful_gpus(world));
    }
    fn report(self: Box<Self>, outcome: &mut RunOutcome) {
        outcome.cluster_efficiency = Some(self.0);
    }
}

/// The running jobs' speed-ups over one GPU of their own throughput table; a job
/// without one counts the GPUs it holds.
fn useful_gpus(world: &World) -> f64 {
    world
        .running()
        .iter()
        .map(|&j| {
            let n = world.rt[j as usize].placement.gpus();
            match &world.jobs[j as usize].extras().scaling {
                Some(s) => {
                    let (g0, t0) = s.levels[0];
                    s.tput(n).map_or(n as f64, |t| t / t0 * g0 as f64)
                }
                None => n as f64,
            }
        })
        .sum()
}

/// The series a driver records for `jobs` by default: utilisation, and cluster
/// efficiency where it applies.
pub fn standard(jobs: &[Job], start: Time, total_gpus: u32) -> Vec<Box<dyn Observer>> {
    let mut out: Vec<Box<dyn Observer>> = vec![
        Box::new(Utilisation::new(start, total_gpus)),
        Box::new(JobCounts::new(start)),
    ];
    if ClusterEfficiency::applies(jobs) {
        out.push(Box::new(ClusterEfficiency::new(start, total_gpus)));
    }
    out
}
