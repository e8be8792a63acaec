//! What a run's energy and carbon are computed from: each GPU type's power when busy and
//! when idle, the facility's PUE, and the grid's carbon intensity over time.
//!
//! Power is per GPU, from published figures (`../shared/carbon/README.md`): busy power is
//! the board TDP times the median ratio of measured to top-limit power that Zeus
//! (NSDI '23) measured while training on that GPU (0.7 where Zeus has no trace); idle
//! power is the datasheet-era idle reading where one is listed, else 15 % of TDP. The
//! intensity is a piecewise-constant hourly series in gCO2eq/kWh (EIA-930), read from
//! the run's time 0 at the series' first hour and wrapped around at its end.

use crate::{HOUR, Time};

/// One GPU type's board power, watts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GpuPower {
    /// While it trains.
    pub busy_w: f64,
    /// While it is powered and holds no job.
    pub idle_w: f64,
}

/// The types apiary knows: name as a cluster spec writes it, TDP (W), the Zeus
/// measured-to-limit power ratio while training, idle (W; `None`: 15 % of TDP).
/// Sources: NVIDIA datasheets and Green Algorithms' TDP table for TDPs (the K80's 300 W
/// board holds two GPUs); Zeus `summary_power_*.csv` medians at the top power limit for
/// the ratios (V100 0.71, A40 0.68, P100 0.48, RTX 6000 0.74); the rough idle readings
/// of the README's table 2c.
const TABLE: &[(&str, f64, f64, Option<f64>)] = &[
    ("H100", 700.0, 0.7, Some(80.0)),
    ("A100", 400.0, 0.7, Some(55.0)),
    ("A40", 300.0, 0.68, Some(30.0)),
    ("V100", 300.0, 0.71, Some(47.5)),
    ("RTX6000", 260.0, 0.74, None),
    ("P100", 250.0, 0.48, None),
    ("T4", 70.0, 0.7, Some(10.0)),
    ("K80", 150.0, 0.7, None),
];

/// Green Algorithms' "Any" GPU: 200 W, for types the table lacks.
const ANY_TDP: f64 = 200.0;

/// The power of `gpu_type` (matched case-insensitively, ignoring `-` and spaces, so
/// `a100`, `A100` and `rtx-6000` are found); an unknown type gets Green Algorithms'
/// generic 200 W GPU.
pub fn gpu_power(gpu_type: &str) -> GpuPower {
    let key: String = gpu_type
        .chars()
        .filter(|c| !matches!(c, '-' | ' ' | '_'))
        .map(|c| c.to_ascii_uppercase())
        .collect();
    let (tdp, ratio, idle) = TABLE
        .iter()
        .find(|t| t.0 == key)
        .map_or((ANY_TDP, 0.7, None), |t| (t.1, t.2, t.3));
    GpuPower {
        busy_w: tdp * ratio,
        idle_w: idle.unwrap_or(0.15 * tdp),
    }
}

/// The intensity used when no series is given: the mean of the six EIA-930 2022 series
/// apiary ships (BPAT 54.7, CISO 256.2, ERCO 347.2, MISO 440.5, NYIS 272.8, PJM
/// 362.6 g/kWh).
pub const DEFAULT_INTENSITY: f64 = 289.0;

/// Grid carbon intensity over time, gCO2eq/kWh, one value per hour.
#[derive(Clone, Debug, PartialEq)]
pub struct Intensity {
    /// Where it comes from, for reports (`CISO`, a file, `default`).
    pub source: String,
    /// Hours whose value was missing and carried over from the hour before.
    pub filled: usize,
    /// When the first hour began, as Unix milliseconds, where the source dates its rows.
    pub stamped: Option<Time>,
    hourly: Vec<f64>,
    /// `prefix[k]`: the sum of the first `k` hours.
    prefix: Vec<f64>,
    /// Where hour 0 is on the clock ([`Intensity::anchored`]); `None`: at time 0, the
    /// series repeating (the simulator's runs start there).
    origin: Option<Time>,
}

impl Intensity {
    /// A series of `hourly` values (at least one; none gives the default constant).
    pub fn new(source: impl Into<String>, hourly: Vec<f64>, filled: usize) -> Intensity {
        let hourly = if hourly.is_empty() {
            vec![DEFAULT_INTENSITY]
        } else {
            hourly
        };
        let mut prefix = Vec::with_capacity(hourly.len() + 1);
        let mut sum = 0.0;
        prefix.push(0.0);
        for v in &hourly {
            sum += v;
            prefix.push(sum);
        }
        Intensity {
            source: source.into(),
            filled,
            stamped: None,
            hourly,
            prefix,
            origin: None,
        }
    }

    /// The series read on a wall clock: its first hour at Unix time `origin` (ms),
    /// without repeating. Before it the first hour's value holds, after its end the last
    /// one's (a forecast that ran out).
    pub fn anchored(mut self, origin: Time) -> Intensity {
        self.origin = Some(origin);
        self
    }

    /// One value at every hour.
    pub fn constant(source: impl Into<String>, g_per_kwh: f64) -> Intensity {
        Intensity::new(source, vec![g_per_kwh], 0)
    }

    /// The documented default ([`DEFAULT_INTENSITY`]).
    pub fn default_constant() -> Intensity {
        Intensity::constant("default", DEFAULT_INTENSITY)
    }

    /// Whether it repeats from time 0 (the simulator's), rather than being read on the
    /// wall clock ([`Intensity::anchored`]).
    pub fn repeats(&self) -> bool {
        self.origin.is_none()
    }

    /// The nearest-rank `p`th percentile (0 to 100) of its hours.
    pub fn percentile(&self, p: f64) -> f64 {
        let mut v = self.hourly.clone();
        v.sort_by(f64::total_cmp);
        let i = ((p / 100.0 * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
        v[i]
    }

    /// Hours in one cycle of the series.
    pub fn hours(&self) -> usize {
        self.hourly.len()
    }

    /// The intensity at time `t`.
    pub fn at(&self, t: Time) -> f64 {
        let n = self.hourly.len() as u64;
        let h = match self.origin {
            None => (t / HOUR) % n,
            Some(o) => (t.saturating_sub(o) / HOUR).min(n - 1),
        };
        self.hourly[h as usize]
    }

    /// The mean over one cycle.
    pub fn mean(&self) -> f64 {
        self.prefix[self.hourly.len()] / self.hourly.len() as f64
    }

    /// ∫ intensity dt from time 0 (or the origin) to `t`, in (g/kWh)·h.
    fn integral_to(&self, t: Time) -> f64 {
        let n = self.hourly.len() as u64;
        if let Some(o) = self.origin {
            if t <= o {
                return -((o - t) as f64 / HOUR as f64) * self.hourly[0];
            }
            let d = t - o;
            let h = d / HOUR;
            if h >= n {
                let past = (d - n * HOUR) as f64 / HOUR as f64;
                return self.prefix[n as usize] + past * self.hourly[n as usize - 1];
            }
            let frac = (d % HOUR) as f64 / HOUR as f64;
            return self.prefix[h as usize] + frac * self.hourly[h as usize];
        }
        let h = t / HOUR;
        let (cycles, k) = (h / n, (h % n) as usize);
        let frac = (t % HOUR) as f64 / HOUR as f64;
        cycles as f64 * self.prefix[n as usize] + self.prefix[k] + frac * self.hourly[k]
    }

    /// ∫ intensity dt over `[from, to)`, in (g/kWh)·h: grams per kW held over it.
    pub fn integral(&self, from: Time, to: Time) -> f64 {
        if to <= from {
            return 0.0;
        }
        if let [v] = self.hourly[..] {
            return v * (to - from) as f64 / HOUR as f64;
        }
        self.integral_to(to) - self.integral_to(from)
    }
}

/// What a run's GPUs used and emitted. Jobs' figures count the GPUs while they hold
/// jobs (what a schedule moves); idle figures the powered GPUs holding none (a cluster
/// constant per hour, so a longer makespan costs more of it).
#[derive(Clone, Debug, PartialEq)]
pub struct EnergyReport {
    /// Energy of GPUs holding jobs, kWh (before PUE).
    pub busy_kwh: f64,
    /// Energy of idle GPUs, kWh (before PUE).
    pub idle_kwh: f64,
    /// The facility's power usage effectiveness the energy was multiplied by.
    pub pue: f64,
    /// Carbon of the busy GPUs' facility energy at the intensity of the time, kg CO2eq.
    pub busy_carbon_kg: f64,
    /// The same for idle GPUs.
    pub idle_carbon_kg: f64,
    /// The intensity series' source.
    pub intensity: String,
    /// Its mean over one cycle, g/kWh.
    pub intensity_mean: f64,
    /// Hours of it that were missing and filled.
    pub filled: usize,
    /// The jobs' emission rate over time, kg CO2eq per hour (a series over a "cluster"
    /// of one, so its points read the rate).
    pub emission: crate::UtilSeries,
    /// The intensity over the run, g/kWh, likewise.
    pub intensity_series: crate::UtilSeries,
    /// Every GPU's power limit, as a fraction of its type's top limit, where one was
    /// set (`--power-limit`; busy power then follows Zeus per job).
    pub power_limit: Option<f64>,
}

impl EnergyReport {
    /// Jobs' facility energy: busy GPUs' energy times the PUE, kWh.
    pub fn energy_kwh(&self) -> f64 {
        self.busy_kwh * self.pue
    }
    /// The whole cluster's facility energy, idle GPUs included, kWh.
    pub fn cluster_energy_kwh(&self) -> f64 {
        (self.busy_kwh + self.idle_kwh) * self.pue
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_types_and_a_generic_one() {
        let v = gpu_power("V100");
        assert!((v.busy_w - 213.0).abs() < 1e-9 && v.idle_w == 47.5);
        assert_eq!(gpu_power("v100"), v);
        assert_eq!(gpu_power("rtx-6000").idle_w, 39.0);
        let any = gpu_power("Z9000");
        assert_eq!((any.busy_w, any.idle_w), (140.0, 30.0));
    }

    #[test]
    fn the_integral_is_exact_over_hours_and_wraps() {
        let s = Intensity::new("t", vec![100.0, 300.0], 0);
        // Half of hour 0 and half of hour 1: 50 + 150.
        assert_eq!(s.integral(HOUR / 2, 3 * HOUR / 2), 200.0);
        // Hours 1, 2 (= 0 again) and 3 (= 1): 300 + 100 + 300.
        assert_eq!(s.integral(HOUR, 4 * HOUR), 700.0);
        assert_eq!(s.at(2 * HOUR + 5), 100.0);
        assert_eq!(s.mean(), 200.0);
        assert_eq!(
            (s.percentile(0.0), s.percentile(50.0), s.percentile(100.0)),
            (100.0, 100.0, 300.0)
        );
        assert_eq!(s.integral(5, 5), 0.0);
        let c = Intensity::default_constant();
        assert_eq!(c.integral(0, 2 * HOUR), 2.0 * DEFAULT_INTENSITY);
    }

    #[test]
    fn an_anchored_series_holds_its_ends_instead_of_repeating() {
        let o = 1_000 * HOUR;
        let s = Intensity::new("t", vec![100.0, 300.0], 0).anchored(o);
        assert_eq!(
            (s.at(0), s.at(o), s.at(o + HOUR), s.at(o + 9 * HOUR)),
            (100.0, 100.0, 300.0, 300.0)
        );
        // An hour before it (100), its two hours, and two after (300 each).
        assert_eq!(s.integral(o - HOUR, o + 4 * HOUR), 100.0 + 400.0 + 600.0);
        assert_eq!(s.integral(o + HOUR / 2, o + HOUR), 50.0);
    }
}
