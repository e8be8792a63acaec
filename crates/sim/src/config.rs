//! What a run is given besides the cluster, the jobs and the policy: when the policy is
//! consulted, overheads, the seed; and how far a run has got.

use apiary_model::Time;

/// When the policy is consulted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// After every batch of simultaneous events (Tiresias, Muri).
    EventDriven,
    /// Only at multiples of the slot length (ElasticFlow 60/240 s, Gavel 360 s rounds).
    Slotted(Time),
}

impl Mode {
    /// `event` or `slot:SECONDS` (0.001 to 10^12), as `--mode` and sweep files write it.
    pub fn parse(s: &str) -> Option<Mode> {
        match s {
            "event" => Some(Mode::EventDriven),
            m => m
                .strip_prefix("slot:")
                .and_then(|x| x.parse::<f64>().ok())
                .and_then(apiary_model::time::secs_f64)
                .filter(|&ms| ms > 0)
                .map(Mode::Slotted),
        }
    }
}

/// Engine settings beyond the policy.
#[derive(Clone, Debug)]
pub struct Config {
    /// Scheduling mode.
    pub mode: Mode,
    /// Time a job makes no progress after resuming from a preemption.
    pub restart_overhead: Time,
    /// Artifact quirk (Muri and its Tiresias/SRTF baselines): at every event, every
    /// running job loses its model's restart overhead from the interval just ended,
    /// whether or not it was touched. See `docs/fidelity.md`.
    pub per_event_overhead: bool,
    /// Seed for any randomness (recorded in the outcome).
    pub seed: u64,
    /// The grid's carbon intensity over the run (the documented constant when `None`).
    pub carbon: Option<std::sync::Arc<apiary_model::energy::Intensity>>,
    /// The facility's power usage effectiveness, multiplying the GPUs' energy.
    pub pue: f64,
    /// The cluster's cache and remote storage, when data loading is modelled (`--io`;
    /// without it every job reads at no cost, as the traces' simulators assume).
    pub io: Option<apiary_model::io::Storage>,
    /// The cluster's CPUs for input pipelines, when preprocessing is modelled
    /// (`--cpu`; without it every job has the CPUs it needs).
    pub cpu: Option<apiary_model::cpu::CpuPool>,
    /// Every GPU capped at this fraction of its type's top power limit (`--power-limit`;
    /// Zeus's time and power per network, [`apiary_model::power`]).
    pub power_limit: Option<f64>,
    /// Online inference services on the first nodes' GPUs, beside which offline jobs
    /// run slower (`--online`; [`apiary_model::online`], MuxFlow's sharing).
    pub online: Option<apiary_model::online::OnlineLoad>,
    /// Failures and checkpoints (`--failures`; [`crate::failures`]).
    pub failures: Option<crate::failures::Setting>,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            mode: Mode::EventDriven,
            restart_overhead: 0,
            per_event_overhead: false,
            seed: 0,
            carbon: None,
            pue: 1.0,
            io: None,
            cpu: None,
            power_limit: None,
            online: None,
            failures: None,
        }
    }
}

/// How far a run has got, for progress bars.
#[derive(Clone, Copy, Debug)]
pub struct Progress {
    /// Simulated time.
    pub now: Time,
    /// Events so far.
    pub events: u64,
    /// Jobs finished.
    pub finished: usize,
    /// Jobs in the trace.
    pub total: usize,
}
