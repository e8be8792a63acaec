//! Metric series measured from the cluster's state between events, shared by both
//! drivers: the simulator's [`Engine`](crate::Engine) and the live service replayed on
//! simulated time call the same observers, so a series means the same thing in both.
//!
//! An observer sees the world as it stood over each interval between two events and
//! writes what it measured into the run's outcome at the end. New metrics (power,
//! carbon, cache hit rates) arrive as new observers, not as new engine code.

use apiary_model::energy::{EnergyReport, GpuPower, Intensity, gpu_power};
use apiary_model::{Job, Occupancy, RunOutcome, Time, UtilSeries};
use apiary_policy::World;
use std::sync::Arc;

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

/// GPU energy and carbon: every interval, each GPU draws its type's busy power while it
/// holds a job and its idle power otherwise ([`apiary_model::energy::gpu_power`]), times
/// the PUE, and emits that energy times the grid's intensity over the interval.
#[derive(Clone, Debug)]
pub struct Energy {
    intensity: Arc<Intensity>,
    pue: f64,
    /// Per node, its GPUs' power; built at the first interval.
    nodes: Vec<GpuPower>,
    /// Every node's GPUs are of one type: the cluster's busy GPU count suffices.
    uniform: Option<GpuPower>,
    /// Joules.
    busy_j: f64,
    idle_j: f64,
    /// Grams.
    busy_g: f64,
    idle_g: f64,
    /// kg/h and g/kWh over time, where a series was given (under the constant the
    /// emission is utilisation scaled, and reports draw neither).
    emission: UtilSeries,
    intensity_over_time: UtilSeries,
    over_time: bool,
    /// Every GPU capped at this fraction of its top limit: busy power per job, from
    /// Zeus ([`apiary_model::power`]).
    power_limit: Option<f64>,
    /// Per job, its limit and busy power ratio there, once looked up (by the type of
    /// the first node it ran on).
    ratios: Vec<Option<(f64, f64)>>,
}

impl Energy {
    /// From `start`, under `intensity` (the documented constant when `None`) and `pue`.
    pub fn new(start: Time, intensity: Option<Arc<Intensity>>, pue: f64) -> Energy {
        let over_time = intensity.is_some();
        Energy {
            over_time,
            intensity: intensity.unwrap_or_else(|| Arc::new(Intensity::default_constant())),
            pue,
            nodes: Vec::new(),
            uniform: None,
            busy_j: 0.0,
            idle_j: 0.0,
            busy_g: 0.0,
            idle_g: 0.0,
            emission: UtilSeries::new(start, 1),
            intensity_over_time: UtilSeries::new(start, 1),
            power_limit: None,
            ratios: Vec::new(),
        }
    }

    /// Every GPU capped at `fraction` of its type's top limit: a busy GPU draws what
    /// Zeus measured for its job's network at that limit (relative to its top).
    pub fn with_power_limit(mut self, fraction: Option<f64>) -> Energy {
        self.power_limit = fraction;
        self
    }

    /// Reads `intensity` from now on (live: the server's file was read again).
    pub fn set_intensity(&mut self, intensity: Arc<Intensity>) {
        self.intensity = intensity;
        self.over_time = true;
    }

    /// The intensity it reads now, g/kWh at `t`.
    pub fn intensity_at(&self, t: Time) -> f64 {
        self.intensity.at(t)
    }

    /// What it has measured so far.
    pub fn snapshot(&self) -> EnergyReport {
        const J_PER_KWH: f64 = 3.6e6;
        EnergyReport {
            busy_kwh: self.busy_j / J_PER_KWH,
            idle_kwh: self.idle_j / J_PER_KWH,
            pue: self.pue,
            busy_carbon_kg: self.busy_g / 1000.0,
            idle_carbon_kg: self.idle_g / 1000.0,
            intensity: self.intensity.source.clone(),
            intensity_mean: self.intensity.mean(),
            filled: self.intensity.filled,
            emission: self.emission.clone(),
            intensity_series: self.intensity_over_time.clone(),
            power_limit: self.power_limit,
        }
    }

    /// Busy and idle power (W) of the cluster as `world` holds it.
    fn power(&mut self, world: &World) -> (f64, f64) {
        let c = &world.cluster;
        if self.nodes.is_empty() && !c.nodes.is_empty() {
            self.nodes = c.nodes.iter().map(|n| gpu_power(&n.gpu_type)).collect();
            let first = &c.nodes[0].gpu_type;
            if c.nodes.iter().all(|n| &n.gpu_type == first) {
                self.uniform = Some(self.nodes[0]);
            }
        }
        if let Some(fraction) = self.power_limit {
            return self.capped_power(world, fraction);
        }
        if let Some(p) = self.uniform {
            let busy = world.busy_gpus() as f64;
            let idle = c.total_gpus as f64 - busy;
            return (busy * p.busy_w, idle * p.idle_w);
        }
        let s = &world.state;
        let (mut b, mut i) = (0.0, 0.0);
        for (n, p) in self.nodes.iter().enumerate() {
            let free = s.free_on(n as u32) as f64;
            b += (s.capacity_of(n as u32) as f64 - free) * p.busy_w;
            i += free * p.idle_w;
        }
        (b, i)
    }
}

impl Energy {
    /// Busy and idle power under a power limit: each running job's GPUs at their type's
    /// busy power times Zeus's power ratio for its network at the limit.
    fn capped_power(&mut self, world: &World, fraction: f64) -> (f64, f64) {
        if self.ratios.len() < world.jobs.len() {
            self.ratios.resize(world.jobs.len(), None);
        }
        let c = &world.cluster;
        let mut busy = 0.0;
        let mut held = 0.0;
        for &j in world.running() {
            let parts = &world.rt[j as usize].placement.parts;
            let Some(&(first, _)) = parts.first() else {
                continue;
            };
            let f = crate::power::limit(world, j, fraction);
            let ratio = match self.ratios[j as usize] {
                Some((at, r)) if at == f => r,
                _ => {
                    let net = world.jobs[j as usize]
                        .model
                        .as_deref()
                        .and_then(apiary_model::power::network);
                    let r =
                        apiary_model::power::scaling(&c.nodes[first as usize].gpu_type, net, f).1;
                    self.ratios[j as usize] = Some((f, r));
                    r
                }
            };
            for &(n, mask) in parts {
                let g = mask.count_ones() as f64;
                busy += g * self.nodes[n as usize].busy_w * ratio;
                held += g * self.nodes[n as usize].idle_w;
            }
        }
        let idle_all: f64 = self
            .nodes
            .iter()
            .zip(&c.nodes)
            .map(|(p, n)| p.idle_w * n.gpus as f64)
            .sum();
        (busy, idle_all - held)
    }
}

impl Observer for Energy {
    fn interval(&mut self, world: &World, from: Time, to: Time) {
        if to <= from {
            return;
        }
        let (busy_w, idle_w) = self.power(world);
        let secs = (to - from) as f64 / 1000.0;
        self.busy_j += busy_w * secs;
        self.idle_j += idle_w * secs;
        // kW x (g/kWh)·h = g.
        let integral = self.intensity.integral(from, to);
        let ci = integral * self.pue / 1000.0;
        self.busy_g += busy_w * ci;
        self.idle_g += idle_w * ci;
        if self.over_time {
            let mean_ci = integral / (secs / 3600.0);
            self.intensity_over_time.add_weight(from, to, mean_ci);
            // kW x g/kWh / 1000 = kg/h.
            self.emission
                .add_weight(from, to, busy_w * self.pue / 1000.0 * mean_ci / 1000.0);
        }
    }
    fn report(self: Box<Self>, outcome: &mut RunOutcome) {
        outcome.energy = Some(self.snapshot());
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

/// The series a driver records for `jobs` by default: utilisation, job counts, energy
/// and carbon (under `carbon`, `pue` and `power_limit`), and cluster efficiency where
/// it applies.
pub fn standard(
    jobs: &[Job],
    start: Time,
    total_gpus: u32,
    carbon: Option<Arc<Intensity>>,
    pue: f64,
    power_limit: Option<f64>,
) -> Vec<Box<dyn Observer>> {
    let mut out: Vec<Box<dyn Observer>> = vec![
        Box::new(Utilisation::new(start, total_gpus)),
        Box::new(JobCounts::new(start)),
        Box::new(Energy::new(start, carbon, pue).with_power_limit(power_limit)),
    ];
    if ClusterEfficiency::applies(jobs) {
        out.push(Box::new(ClusterEfficiency::new(start, total_gpus)));
    }
    out
}
