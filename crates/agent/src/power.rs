//! GPU power limits: each attempt a `power-limits` policy (GreenFlow) caps runs on GPUs
//! set to that fraction of their top limit, with `nvidia-smi -i GPUS -pl WATTS` (which
//! needs root). The agent keeps each GPU at what the server's latest reply asks:
//! a GPU whose attempt ended, or whose attempt has no cap, goes back to its default
//! limit. The limits are read once from `nvidia-smi`; without them nothing is set, and
//! the agent says so once.

use apiary_api::{AttemptRef, PowerCap};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

/// A GPU's limits, watts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Limits {
    /// The lowest it takes.
    pub min: f64,
    /// The highest it takes: a cap's fraction is of this.
    pub max: f64,
    /// Its limit when nobody set one.
    pub default: f64,
}

/// What the agent set where.
pub struct Power {
    /// The program to run (`--nvidia-smi`).
    smi: PathBuf,
    /// Each GPU's limits, once read (none known when reading them failed).
    limits: Option<BTreeMap<u32, Limits>>,
    /// The watts each GPU was set to (none: its default, as found).
    applied: BTreeMap<u32, f64>,
}

impl Power {
    /// Nothing set yet; `smi` is `nvidia-smi`'s path.
    pub fn new(smi: PathBuf) -> Power {
        Power {
            smi,
            limits: None,
            applied: BTreeMap::new(),
        }
    }

    /// Sets every GPU to what `caps` ask of the running attempts (`gpus_of` gives a
    /// running attempt's GPUs), and GPUs no running attempt caps back to their default.
    /// Returns what it could not do, to log.
    pub fn apply<'a>(
        &mut self,
        caps: &[PowerCap],
        gpus_of: impl Fn(&AttemptRef) -> Option<&'a [u32]>,
    ) -> Vec<String> {
        let mut said = Vec::new();
        if caps.is_empty() && self.applied.is_empty() {
            return said;
        }
        if self.limits.is_none() {
            // Read once: a failure is said once, and caps are dropped until a restart.
            let read = read_limits(&self.smi);
            if let Err(e) = &read {
                said.push(format!(
                    "power limits asked for, but `{} --query-gpu` gave no limits ({e}): \
                     running uncapped",
                    self.smi.display()
                ));
            }
            self.limits = Some(read.unwrap_or_default());
        }
        let limits = self.limits.clone().unwrap_or_default();
        let want = wanted(caps, gpus_of, &limits);
        // Group the GPUs by the watts they go to: one call per value.
        let mut calls: BTreeMap<u64, Vec<u32>> = BTreeMap::new();
        for (&gpu, &watts) in &want {
            if self.applied.get(&gpu) != Some(&watts) {
                calls.entry(watts.to_bits()).or_default().push(gpu);
            }
        }
        for (&gpu, _) in self.applied.iter().filter(|(g, _)| !want.contains_key(g)) {
            if let Some(l) = limits.get(&gpu) {
                calls.entry(l.default.to_bits()).or_default().push(gpu);
            }
        }
        for (bits, gpus) in calls {
            let watts = f64::from_bits(bits);
            match self.set(&gpus, watts) {
                Ok(()) => {
                    for g in gpus {
                        match want.get(&g) {
                            Some(&w) => self.applied.insert(g, w),
                            None => self.applied.remove(&g),
                        };
                    }
                }
                Err(e) => said.push(format!(
                    "setting GPUs {gpus:?} to {watts} W: {e} (power limits need root)"
                )),
            }
        }
        said
    }

    fn set(&self, gpus: &[u32], watts: f64) -> Result<(), String> {
        let ids: Vec<String> = gpus.iter().map(u32::to_string).collect();
        let out = Command::new(&self.smi)
            .args(["-i", &ids.join(","), "-pl", &format!("{watts:.2}")])
            .output()
            .map_err(|e| format!("running {}: {e}", self.smi.display()))?;
        if out.status.success() {
            Ok(())
        } else {
            let text = String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr);
            Err(text.trim().to_string())
        }
    }
}

/// The watts each capped GPU goes to: its attempt's fraction of its top limit, within
/// its limits. A GPU without known limits is left alone.
pub fn wanted<'a>(
    caps: &[PowerCap],
    gpus_of: impl Fn(&AttemptRef) -> Option<&'a [u32]>,
    limits: &BTreeMap<u32, Limits>,
) -> BTreeMap<u32, f64> {
    let mut out = BTreeMap::new();
    for c in caps {
        let key = AttemptRef {
            job: c.job,
            attempt: c.attempt,
        };
        let Some(gpus) = gpus_of(&key) else {
            continue;
        };
        let f = if c.fraction.is_finite() {
            c.fraction.clamp(0.0, 1.0)
        } else {
            1.0
        };
        for g in gpus {
            if let Some(l) = limits.get(g) {
                let watts = (f * l.max).clamp(l.min, l.max);
                out.insert(*g, (watts * 100.0).round() / 100.0);
            }
        }
    }
    out
}

/// Each GPU's limits, from `nvidia-smi --query-gpu`.
fn read_limits(smi: &PathBuf) -> Result<BTreeMap<u32, Limits>, String> {
    let out = Command::new(smi)
        .args([
            "--query-gpu=index,power.min_limit,power.max_limit,power.default_limit",
            "--format=csv,noheader,nounits",
        ])
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
    }
    parse_limits(&String::from_utf8_lossy(&out.stdout))
}

/// Reads `index, min, max, default` lines; a GPU that reports `[N/A]` has no limits to
/// set and is left out.
pub fn parse_limits(text: &str) -> Result<BTreeMap<u32, Limits>, String> {
    let mut out = BTreeMap::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        let [index, min, max, default] = f[..] else {
            return Err(format!("'{line}': not index, min, max, default"));
        };
        let index: u32 = index
            .parse()
            .map_err(|_| format!("'{line}': index '{index}'"))?;
        let watts = |s: &str| s.parse::<f64>().ok().filter(|w| w.is_finite() && *w > 0.0);
        if let (Some(min), Some(max), Some(default)) = (watts(min), watts(max), watts(default))
            && min <= max
        {
            out.insert(index, Limits { min, max, default });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_are_fractions_of_the_top_limit_within_the_gpus_limits() {
        let limits = parse_limits(
            "0, 100.00, 300.00, 250.00\n1, 100.00, 300.00, 250.00\n2, [N/A], [N/A], [N/A]\n",
        )
        .unwrap();
        assert_eq!(limits.len(), 2, "GPU 2 reports no limits");
        let a = |job| AttemptRef { job, attempt: 1 };
        let running: BTreeMap<_, _> = [(a(1), vec![0]), (a(2), vec![1, 2])].into();
        let caps = [
            PowerCap {
                job: 1,
                attempt: 1,
                fraction: 0.6,
            },
            PowerCap {
                job: 2,
                attempt: 1,
                fraction: 0.3,
            },
            // Not running here: ignored.
            PowerCap {
                job: 3,
                attempt: 1,
                fraction: 0.5,
            },
        ];
        let w = wanted(&caps, |a| running.get(a).map(Vec::as_slice), &limits);
        // 0.6 x 300 = 180 W; 0.3 x 300 = 90 W is below the 100 W floor.
        assert_eq!(w, [(0, 180.0), (1, 100.0)].into());
        assert!(parse_limits("0, 1").is_err());
    }
}
