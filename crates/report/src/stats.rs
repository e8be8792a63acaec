//! Statistics over repeated runs (seeds): means with Student-t 95 % confidence
//! intervals, and ratios against a baseline paired by seed, as sweep reports show them.

/// The two-sided 95 % quantile of Student's t for `df` degrees of freedom.
pub fn t95(df: usize) -> f64 {
    const T: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042,
    ];
    match df {
        0 => f64::INFINITY,
        1..=30 => T[df - 1],
        // The normal quantile with the first-order correction, within 0.1 % past 30.
        _ => 1.960 + 2.4 / df as f64,
    }
}

/// A mean over seeds and the half-width of its 95 % confidence interval.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Estimate {
    /// Mean.
    pub mean: f64,
    /// Half-width of the 95 % interval (0 with one value: no spread is known).
    pub ci95: f64,
    /// Values it is over.
    pub n: usize,
}

impl Estimate {
    /// The estimate over `values` (`None` when there are none).
    pub fn of(values: &[f64]) -> Option<Estimate> {
        let n = values.len();
        if n == 0 {
            return None;
        }
        let mean = values.iter().sum::<f64>() / n as f64;
        let ci95 = if n < 2 {
            0.0
        } else {
            let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
            t95(n - 1) * (var / n as f64).sqrt()
        };
        Some(Estimate { mean, ci95, n })
    }
}

/// The ratio `values[i] / base[i]` over the seeds both have (pairs where the base is 0
/// are left out), as an estimate.
pub fn paired_ratio(values: &[(u64, f64)], base: &[(u64, f64)]) -> Option<Estimate> {
    let ratios: Vec<f64> = values
        .iter()
        .filter_map(|&(seed, v)| {
            let &(_, b) = base.iter().find(|&&(s, _)| s == seed)?;
            (b != 0.0).then(|| v / b)
        })
        .collect();
    Estimate::of(&ratios)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interval_matches_a_hand_computation() {
        // mean 2, sample sd 1, n 3: 4.303 * 1 / sqrt(3).
        let e = Estimate::of(&[1.0, 2.0, 3.0]).unwrap();
        assert_eq!(e.mean, 2.0);
        assert!((e.ci95 - 4.303 / 3f64.sqrt()).abs() < 1e-12);
        assert_eq!(Estimate::of(&[5.0]).unwrap().ci95, 0.0);
        assert!(Estimate::of(&[]).is_none());
        assert!((t95(120) - 1.98).abs() < 0.001);
    }

    #[test]
    fn ratios_pair_by_seed() {
        let r = paired_ratio(&[(0, 2.0), (1, 6.0), (2, 1.0)], &[(1, 3.0), (0, 1.0)]).unwrap();
        assert_eq!(r.n, 2);
        assert_eq!(r.mean, 2.0);
    }
}
