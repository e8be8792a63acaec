//! One training application of Pollux's simulator: its measured step times and its
//! per-epoch training curves at several batch sizes (`simulator/applications.py`).

use super::delaunay::Delaunay3;
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

/// One epoch of a validation run (the columns the simulation uses).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EpochStats {
    /// Training progress at the end of the epoch.
    pub progress: f64,
    /// Squared norm of the gradient during the epoch.
    pub grad_sqr: f64,
    /// Variance of the gradient during the epoch.
    pub grad_var: f64,
}

/// A measured step: `(per-GPU batch, step time, sync time)`, seconds.
pub type StepRow = (u32, f64, f64);

/// An application's data and the artifact's derived limits.
pub struct Application {
    /// Name (`cifar10`, `bert`, …).
    pub name: String,
    /// Batch size of the smallest validation run: efficiency 1.
    pub init_batch: u32,
    /// Batch size of the largest validation run.
    pub max_batch: u32,
    /// Smallest per-GPU batch measured.
    pub min_local: u32,
    /// Largest per-GPU batch measured (or the artifact's override).
    pub max_local: u32,
    /// Epochs to train.
    pub max_epochs: u32,
    /// The total batch the artifact forces under Pollux (NCF: 32,768), if any.
    pub fixed_batch: Option<u32>,
    /// The most replicas Pollux may give (NCF: 1), if limited.
    pub max_replicas: Option<u32>,
    validation: Vec<(u32, Vec<EpochStats>)>,
    progress: Vec<f64>,
    placements: BTreeMap<u64, Vec<StepRow>>,
    spread: Delaunay3,
    memo: Mutex<HashMap<(u64, u32), (f64, f64)>>,
}

impl std::fmt::Debug for Application {
    // The measurements run to thousands of rows; a job's debug output names the
    // application and its limits.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Application")
            .field("name", &self.name)
            .field("init_batch", &self.init_batch)
            .field("max_batch", &self.max_batch)
            .field("local", &(self.min_local, self.max_local))
            .field("max_epochs", &self.max_epochs)
            .finish_non_exhaustive()
    }
}

/// Why an application's data cannot be used.
#[derive(Clone, Debug, thiserror::Error, PartialEq)]
pub enum AppError {
    /// Something is missing or inconsistent.
    #[error("application {app}: {message}")]
    Invalid {
        /// The application.
        app: String,
        /// What is wrong.
        message: String,
    },
}

/// The digits of a placement (GPUs per node), rotated to the lexicographically smallest
/// rotation as the artifact normalises it, read as a decimal number.
pub fn placement_id(counts: &[u32]) -> u64 {
    let p: Vec<u32> = counts.iter().copied().filter(|&c| c > 0).collect();
    let n = p.len();
    let best = (0..n)
        .map(|i| {
            let mut r = p[i..].to_vec();
            r.extend_from_slice(&p[..i]);
            r
        })
        .min()
        .unwrap_or_default();
    best.iter().fold(0u64, |acc, &d| {
        acc.saturating_mul(10).saturating_add(d as u64)
    })
}

impl Application {
    /// Builds an application. `validation` holds one run per batch size (the smallest
    /// is the initial batch unless `init_batch` says otherwise); `placements`
    /// the measured rows per placement id (see [`placement_id`]); `scalability` rows
    /// `(nodes, replicas, per-GPU batch, step, sync)` for larger jobs.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        name: &str,
        mut validation: Vec<(u32, Vec<EpochStats>)>,
        placements: BTreeMap<u64, Vec<StepRow>>,
        scalability: &[(u32, u32, u32, f64, f64)],
        max_epochs: u32,
        init_batch: Option<u32>,
        max_local: Option<u32>,
        fixed_batch: Option<u32>,
        max_replicas: Option<u32>,
    ) -> Result<Application, AppError> {
        let bad = |message: String| AppError::Invalid {
            app: name.to_string(),
            message,
        };
        validation.sort_by_key(|v| v.0);
        if validation.is_empty() {
            return Err(bad("no validation runs".into()));
        }
        if let Some((b, _)) = validation
            .iter()
            .find(|(_, v)| v.len() < max_epochs as usize)
        {
            return Err(bad(format!(
                "validation run at batch {b} has fewer than {max_epochs} epochs"
            )));
        }
        if placements.is_empty() {
            return Err(bad("no placement measurements".into()));
        }
        let init_batch = init_batch.unwrap_or(validation[0].0);
        let max_batch = validation[validation.len() - 1].0;
        let all_local = placements.values().flatten().map(|r| r.0);
        let min_local = all_local.clone().min().unwrap_or(1);
        let max_local = max_local.unwrap_or_else(|| all_local.max().unwrap_or(1));
        if max_batch < min_local {
            return Err(bad(format!(
                "largest batch {max_batch} is below the smallest per-GPU batch {min_local}"
            )));
        }
        let progress = (0..=max_epochs as usize)
            .map(|e| {
                if e == 0 {
                    0.0
                } else {
                    validation
                        .iter()
                        .map(|(_, v)| v[e - 1].progress)
                        .fold(f64::INFINITY, f64::min)
                }
            })
            .collect();
        // pandas: groupby(num_nodes, num_replicas, local_bsz).mean(), then the
        // scalability rows appended.
        let mut groups: BTreeMap<[i64; 3], (f64, f64, u32)> = BTreeMap::new();
        for (&id, rows) in &placements {
            let digits: Vec<u32> = id.to_string().bytes().map(|b| (b - b'0') as u32).collect();
            let key = |bsz: u32| {
                [
                    digits.len() as i64,
                    digits.iter().sum::<u32>() as i64,
                    bsz as i64,
                ]
            };
            for &(bsz, step, sync) in rows {
                let e = groups.entry(key(bsz)).or_insert((0.0, 0.0, 0));
                e.0 += step;
                e.1 += sync;
                e.2 += 1;
            }
        }
        let mut pts = Vec::new();
        let mut vals = Vec::new();
        for (k, (s, y, c)) in groups {
            pts.push(k);
            vals.push([s / c as f64, y / c as f64]);
        }
        for &(n, r, b, s, y) in scalability {
            let k = [n as i64, r as i64, b as i64];
            if pts.contains(&k) {
                return Err(bad(format!(
                    "scalability point {k:?} repeats a placement point"
                )));
            }
            pts.push(k);
            vals.push([s, y]);
        }
        Ok(Application {
            name: name.to_string(),
            init_batch,
            max_batch,
            min_local,
            max_local,
            max_epochs,
            fixed_batch,
            max_replicas,
            validation,
            progress,
            placements: placements
                .into_iter()
                .map(|(k, mut v)| {
                    v.sort_by_key(|r| r.0);
                    (k, v)
                })
                .collect(),
            spread: Delaunay3::new(pts, vals),
            memo: Mutex::new(HashMap::new()),
        })
    }

    /// The batch limits a job of this application declares.
    pub fn limits(&self) -> super::BatchLimits {
        super::BatchLimits {
            init_batch: self.init_batch,
            max_batch: self.max_batch,
            min_local: self.min_local,
            max_local: self.max_local,
            max_replicas: self.max_replicas,
        }
    }

    /// Progress at the end of `epoch` (0 at the start): the smallest over the runs.
    pub fn progress_at(&self, epoch: u32) -> f64 {
        self.progress[(epoch as usize).min(self.progress.len() - 1)]
    }

    /// The validation runs bracketing `batch` (the same run when one matches), clamped
    /// to the measured range.
    fn bracket(&self, batch: f64) -> (usize, usize) {
        let v = &self.validation;
        let hi = v
            .partition_point(|(b, _)| (*b as f64) < batch)
            .min(v.len() - 1);
        if v[hi].0 as f64 <= batch || hi == 0 {
            return (hi, hi);
        }
        (hi - 1, hi)
    }

    /// Gradient `(sqr, var)` during `epoch` at total batch `batch`, interpolated
    /// linearly between the runs at the neighbouring batch sizes.
    pub fn grad_stats(&self, batch: f64, epoch: u32) -> (f64, f64) {
        let e = (epoch as usize).min(self.max_epochs as usize - 1);
        let (lo, hi) = self.bracket(batch);
        let (bl, l) = (&self.validation[lo].0, &self.validation[lo].1[e]);
        let (bu, u) = (&self.validation[hi].0, &self.validation[hi].1[e]);
        if lo == hi {
            return (l.grad_sqr, l.grad_var);
        }
        let (bl, bu) = (*bl as f64, *bu as f64);
        let f = |x: f64, y: f64| ((batch - bl) * y + (bu - batch) * x) / (bu - bl);
        (f(l.grad_sqr, u.grad_sqr), f(l.grad_var, u.grad_var))
    }

    /// Measured `(step, sync)` seconds on a placement (GPUs per node) at a per-GPU
    /// batch: linear in the batch between the placement's own rows when it was
    /// measured, else 3-D linear over (nodes ≤ 16, replicas, batch) from every
    /// measurement.
    pub fn step_time(&self, counts: &[u32], local_bsz: u32) -> (f64, f64) {
        let id = placement_id(counts);
        let nodes = counts.iter().filter(|&&c| c > 0).count() as u64;
        let replicas: u32 = counts.iter().sum();
        let key = if self.placements.contains_key(&id) {
            id
        } else {
            // 3-D interpolation sees only node and replica counts.
            (1 << 63) | (nodes.min(16) << 32) | replicas as u64
        };
        if let Some(v) = self
            .memo
            .lock()
            .ok()
            .and_then(|m| m.get(&(key, local_bsz)).copied())
        {
            return v;
        }
        let v = match self.placements.get(&id) {
            Some(rows) => interp1(rows, local_bsz),
            None => {
                let q = [nodes.min(16) as i64, replicas as i64, local_bsz as i64];
                match self.spread.interpolate(q) {
                    Some([s, y]) => (s, y),
                    // Outside the measured hull (the artifact fails an assertion here):
                    // use the nearest replica count on the hull's edge.
                    None => self.nearest_inside(q),
                }
            }
        };
        if let Ok(mut m) = self.memo.lock() {
            m.insert((key, local_bsz), v);
        }
        v
    }

    fn nearest_inside(&self, q: [i64; 3]) -> (f64, f64) {
        for dr in 1..=64 {
            for r in [q[1] - dr, q[1] + dr] {
                if r >= q[0]
                    && let Some([s, y]) = self.spread.interpolate([q[0], r, q[2]])
                {
                    return (s, y);
                }
            }
        }
        let rows = self
            .placements
            .values()
            .next()
            .map(|r| r.as_slice())
            .unwrap_or(&[]);
        interp1(rows, q[2] as u32)
    }
}

/// SciPy's `interp1d` (linear) over rows sorted by batch; a batch outside the measured
/// range (where SciPy raises) takes the nearest end.
fn interp1(rows: &[StepRow], x: u32) -> (f64, f64) {
    let Some(first) = rows.first() else {
        return (f64::NAN, f64::NAN);
    };
    let i = rows.partition_point(|r| r.0 < x);
    if i == 0 {
        return (first.1, first.2);
    }
    if i == rows.len() {
        let l = rows[rows.len() - 1];
        return (l.1, l.2);
    }
    let (a, b) = (rows[i - 1], rows[i]);
    if b.0 == x {
        return (b.1, b.2);
    }
    let t = (x - a.0) as f64 / (b.0 - a.0) as f64;
    (a.1 + t * (b.1 - a.1), a.2 + t * (b.2 - a.2))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placements_normalise_to_their_smallest_rotation() {
        assert_eq!(placement_id(&[2, 1, 1]), 112);
        assert_eq!(placement_id(&[1, 2, 2, 1]), 1122);
        assert_eq!(placement_id(&[4, 0, 4]), 44);
        assert_eq!(placement_id(&[3]), 3);
    }

    #[test]
    fn interp1_is_linear_between_rows() {
        let rows = [(4, 1.0, 0.1), (8, 2.0, 0.3)];
        assert_eq!(interp1(&rows, 6), (1.5, 0.2));
        assert_eq!(interp1(&rows, 8), (2.0, 0.3));
        assert_eq!(interp1(&rows, 2), (1.0, 0.1));
    }
}
