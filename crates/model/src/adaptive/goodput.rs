//! Pollux's goodput model (`adaptdl/goodput.py`): a job's throughput from a fitted
//! step-time model, times its statistical efficiency at the batch size it trains with.
//!
//! Everything here mirrors the artifact's formulas term by term (including its 1e-8
//! floors and ceiling tolerances), because the policy's choices and the simulated jobs'
//! batch sizes both follow from them.

/// Step-time model parameters, fitted per job from the step times it has observed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PerfParams {
    /// Constant term of compute time.
    pub alpha_c: f64,
    /// Compute time per sample of the per-GPU batch.
    pub beta_c: f64,
    /// Constant term of inter-node network time.
    pub alpha_n: f64,
    /// Inter-node network time per replica beyond two.
    pub beta_n: f64,
    /// Constant term of intra-node network time.
    pub alpha_r: f64,
    /// Intra-node network time per replica beyond two.
    pub beta_r: f64,
    /// Overlap of compute and network: the step time is the `gamma`-norm of the two.
    pub gamma: f64,
}

impl PerfParams {
    /// The parameters as the artifact's array order.
    pub fn to_array(self) -> [f64; 7] {
        [
            self.alpha_c,
            self.beta_c,
            self.alpha_n,
            self.beta_n,
            self.alpha_r,
            self.beta_r,
            self.gamma,
        ]
    }

    /// From the artifact's array order.
    pub fn from_array(a: [f64; 7]) -> PerfParams {
        PerfParams {
            alpha_c: a[0],
            beta_c: a[1],
            alpha_n: a[2],
            beta_n: a[3],
            alpha_r: a[4],
            beta_r: a[5],
            gamma: a[6],
        }
    }

    /// Compute time of one forward and backward pass over `atomic_bsz` samples.
    pub fn accum_time(&self, atomic_bsz: f64) -> f64 {
        self.alpha_c + self.beta_c * atomic_bsz
    }

    /// Gradient synchronisation time over the most significant link.
    pub fn network_time(&self, nodes: u32, replicas: u32) -> f64 {
        let (a, b) = if nodes > 1 {
            (self.alpha_n, self.beta_n)
        } else if replicas > 1 {
            (self.alpha_r, self.beta_r)
        } else {
            (1e-8, 1e-8)
        };
        a + b * (replicas as f64 - 2.0).max(1e-8)
    }

    /// Natural log of the time of an optimizer step (compute overlapped with network).
    pub fn log_optim_time(&self, accum: f64, network: f64) -> f64 {
        let g = self.gamma;
        (accum.powf(g) + network.powf(g)).ln() / g
    }
}

/// Gradient statistics: squared norm and variance (the gradient noise scale's parts).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GradParams {
    /// Squared norm of the true gradient.
    pub sqr: f64,
    /// Variance of the per-sample gradient.
    pub var: f64,
}

/// A job's goodput: samples per second that count, as a function of its allocation and
/// batch configuration.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Goodput {
    /// Step-time model.
    pub perf: PerfParams,
    /// Gradient statistics.
    pub grad: GradParams,
    /// The batch size the learning rate was tuned for (efficiency 1).
    pub init_batch: f64,
}

/// The best configuration [`Goodput::optimize`] found.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Config {
    /// Goodput at it.
    pub goodput: f64,
    /// Per-GPU batch of one pass.
    pub atomic_bsz: u32,
    /// Gradient-accumulation passes before each optimizer step.
    pub accum_steps: u32,
}

const EPS: f64 = 1e-8;

impl Goodput {
    /// Samples per second.
    pub fn throughput(&self, nodes: u32, replicas: u32, atomic_bsz: u32, accum_steps: u32) -> f64 {
        let accum = self.perf.accum_time(atomic_bsz as f64);
        let net = self.perf.network_time(nodes, replicas);
        let optim = self.perf.log_optim_time(accum, net).exp();
        let total = accum_steps as f64 * accum + optim;
        let batch = replicas as f64 * atomic_bsz as f64 * (accum_steps as f64 + 1.0);
        batch / total
    }

    /// Statistical efficiency of a total batch: progress per sample relative to
    /// `init_batch`.
    pub fn efficiency(&self, batch: f64) -> f64 {
        let scale = batch / self.init_batch;
        let denom = self.grad.var / scale + self.grad.sqr;
        let gain = if denom > 0.0 {
            (self.grad.var + self.grad.sqr) / denom
        } else {
            1.0
        };
        gain / scale
    }

    /// Throughput times efficiency.
    pub fn evaluate(&self, nodes: u32, replicas: u32, atomic_bsz: u32, accum_steps: u32) -> f64 {
        let batch = replicas as f64 * atomic_bsz as f64 * (accum_steps as f64 + 1.0);
        self.throughput(nodes, replicas, atomic_bsz, accum_steps) * self.efficiency(batch)
    }

    /// The best of 50 total batch sizes spaced geometrically between the smallest
    /// allowed and `max_batch`, each split into per-GPU passes as the artifact splits
    /// them; configurations whose per-GPU batch falls outside `atomic_range` score 0.
    pub fn optimize(
        &self,
        nodes: u32,
        replicas: u32,
        max_batch: f64,
        atomic_range: (u32, u32),
        accumulation: bool,
    ) -> Config {
        let (min_atomic, max_atomic) = (atomic_range.0 as f64, atomic_range.1 as f64);
        let r = replicas as f64;
        let min_batch = self.init_batch.max(min_atomic * r);
        let mut best = Config {
            goodput: f64::NEG_INFINITY,
            atomic_bsz: 0,
            accum_steps: 0,
        };
        for batch in geomspace(min_batch, max_batch) {
            let local = batch / r;
            let accum = if accumulation {
                let mut a = (local / max_atomic - EPS).ceil() - 1.0;
                if replicas == 1 && local > self.init_batch + EPS {
                    a = a.max(1.0);
                }
                a
            } else {
                0.0
            };
            let atomic = (local / (accum + 1.0) - EPS).ceil();
            let ok = min_atomic <= atomic && atomic <= max_atomic;
            let (atomic, accum) = (atomic as u32, accum as u32);
            let g = if ok {
                self.evaluate(nodes, replicas, atomic, accum)
            } else {
                0.0
            };
            // numpy's argmax: the first maximum wins.
            if g > best.goodput {
                best = Config {
                    goodput: g,
                    atomic_bsz: atomic,
                    accum_steps: accum,
                };
            }
        }
        best
    }
}

/// `numpy.geomspace(start, stop, 50)`: 10 raised to 50 evenly spaced exponents, with the
/// end points exact.
fn geomspace(start: f64, stop: f64) -> impl Iterator<Item = f64> {
    const N: usize = 50;
    let (a, b) = (start.log10(), stop.log10());
    let step = (b - a) / (N - 1) as f64;
    (0..N).map(move |i| match i {
        0 => start,
        i if i == N - 1 => stop,
        i => 10f64.powf(i as f64 * step + a),
    })
}

/// One observed configuration: where the job ran and how long its steps took.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    /// Nodes spanned.
    pub nodes: u32,
    /// Replicas (GPUs).
    pub replicas: u32,
    /// Per-GPU batch of one pass.
    pub atomic_bsz: u32,
    /// Time of a pass without synchronisation (step time minus sync time).
    pub accum_time: f64,
    /// Time of an optimizer step.
    pub optim_time: f64,
}

/// Fits [`PerfParams`] to observed samples as `fit_perf_params` does: minimise the RMS
/// log error of both predicted times plus the artifact's two regularisers, within its
/// bounds, fixing the parameters the samples cannot inform.
///
/// The artifact calls SciPy's L-BFGS-B; this is a projected quasi-Newton method on the
/// same bounds with the same stopping tolerances, so both land on the same minimum up to
/// those tolerances (the objective is smooth and the fits are small).
pub fn fit_perf_params(samples: &[Sample]) -> PerfParams {
    let mut x = [1e-1, 1e-2, 1e-1, 1e-2, 1e-1, 1e-2, 1.0 + 1e-3];
    let mut lo = [1e-8, 1e-8, 1e-8, 1e-8, 1e-8, 1e-8, 1.0];
    let mut hi = [f64::INFINITY; 7];
    hi[6] = 10.0;
    let single_bsz = samples
        .windows(2)
        .all(|w| w[0].atomic_bsz == w[1].atomic_bsz);
    if single_bsz {
        let mean = samples.iter().map(|s| s.accum_time).sum::<f64>() / samples.len() as f64;
        x[0] = mean / 2.0;
        lo[0] = x[0];
        hi[0] = x[0];
    }
    let fix = |k: usize, x: &mut [f64; 7], lo: &[f64; 7], hi: &mut [f64; 7]| {
        x[k] = lo[k];
        hi[k] = lo[k];
    };
    if !samples.iter().any(|s| s.nodes > 1) {
        fix(2, &mut x, &lo, &mut hi);
        fix(3, &mut x, &lo, &mut hi);
    }
    if !samples.iter().any(|s| s.nodes == 1 && s.replicas > 1) {
        fix(4, &mut x, &lo, &mut hi);
        fix(5, &mut x, &lo, &mut hi);
    }
    if !samples.iter().any(|s| s.replicas > 2) {
        fix(3, &mut x, &lo, &mut hi);
        fix(5, &mut x, &lo, &mut hi);
    }
    let mut p = minimize(|x, g| objective(x, samples, g), x, lo, hi);
    if !samples.iter().any(|s| s.nodes > 1) {
        p[2] = p[2].max(p[4] * 1.1);
        p[3] = p[3].max(p[5] * 1.1);
    }
    PerfParams::from_array(p)
}

/// The artifact's `_obj_fn` and its gradient.
fn objective(x: &[f64; 7], samples: &[Sample], grad: &mut [f64; 7]) -> f64 {
    let p = PerfParams::from_array(*x);
    let n = samples.len() as f64;
    let g = p.gamma;
    let (mut s1, mut s2) = (0.0, 0.0);
    let mut d1 = [0.0; 7];
    let mut d2 = [0.0; 7];
    for s in samples {
        let b = s.atomic_bsz as f64;
        let a = p.accum_time(b);
        let e1 = a.ln() - s.accum_time.ln();
        s1 += e1 * e1;
        d1[0] += e1 / a;
        d1[1] += e1 * b / a;
        let m = (s.replicas as f64 - 2.0).max(1e-8);
        let net = p.network_time(s.nodes, s.replicas);
        let (u, v) = (a.powf(g), net.powf(g));
        let sum = u + v;
        let lopt = sum.ln() / g;
        let e2 = lopt - s.optim_time.ln();
        s2 += e2 * e2;
        let da = a.powf(g - 1.0) / sum;
        let dn = net.powf(g - 1.0) / sum;
        d2[0] += e2 * da;
        d2[1] += e2 * da * b;
        if s.nodes > 1 {
            d2[2] += e2 * dn;
            d2[3] += e2 * dn * m;
        } else if s.replicas > 1 {
            d2[4] += e2 * dn;
            d2[5] += e2 * dn * m;
        }
        d2[6] += e2 * ((u * a.ln() + v * net.ln()) / (g * sum) - sum.ln() / (g * g));
    }
    let err1 = (s1 / n).sqrt();
    let err2 = (s2 / n).sqrt();
    let reg1 = 1e-3 * (g - 1.0).powi(2);
    let reg2 = 1e-2 * ((p.beta_n / p.alpha_n).powi(2) + (p.beta_r / p.alpha_r).powi(2));
    for k in 0..7 {
        let a = if err1 > 0.0 { d1[k] / (n * err1) } else { 0.0 };
        let b = if err2 > 0.0 { d2[k] / (n * err2) } else { 0.0 };
        grad[k] = a + b;
    }
    grad[6] += 2e-3 * (g - 1.0);
    grad[2] -= 2e-2 * p.beta_n * p.beta_n / p.alpha_n.powi(3);
    grad[3] += 2e-2 * p.beta_n / (p.alpha_n * p.alpha_n);
    grad[4] -= 2e-2 * p.beta_r * p.beta_r / p.alpha_r.powi(3);
    grad[5] += 2e-2 * p.beta_r / (p.alpha_r * p.alpha_r);
    err1 + err2 + reg1 + reg2
}

/// Projected L-BFGS on a box: free variables move along the quasi-Newton direction,
/// variables held at a bound by their gradient stay there. Stops as SciPy's L-BFGS-B
/// does by default: relative reduction below 2.2e-9 or projected gradient below 1e-5.
fn minimize(
    f: impl Fn(&[f64; 7], &mut [f64; 7]) -> f64,
    x0: [f64; 7],
    lo: [f64; 7],
    hi: [f64; 7],
) -> [f64; 7] {
    const M: usize = 10;
    let proj = |x: &mut [f64; 7]| {
        for k in 0..7 {
            x[k] = x[k].clamp(lo[k], hi[k]);
        }
    };
    let mut x = x0;
    proj(&mut x);
    let mut g = [0.0; 7];
    let mut fx = f(&x, &mut g);
    let mut hist: Vec<([f64; 7], [f64; 7], f64)> = Vec::with_capacity(M);
    for iter in 0..15_000 {
        let mut free = [false; 7];
        let mut pg: f64 = 0.0;
        for k in 0..7 {
            let fixed = lo[k] == hi[k];
            let at_lo = x[k] <= lo[k] && g[k] > 0.0;
            let at_hi = x[k] >= hi[k] && g[k] < 0.0;
            free[k] = !(fixed || at_lo || at_hi);
            if free[k] {
                pg = pg.max(g[k].abs());
            }
        }
        if pg < 1e-5 || !fx.is_finite() {
            break;
        }
        // Two-loop recursion on the free coordinates.
        let mut d = [0.0; 7];
        for k in 0..7 {
            if free[k] {
                d[k] = -g[k];
            }
        }
        let dot = |a: &[f64; 7], b: &[f64; 7]| -> f64 {
            (0..7).filter(|&k| free[k]).map(|k| a[k] * b[k]).sum()
        };
        let mut alphas = [0.0; M];
        for (i, (s, y, rho)) in hist.iter().enumerate().rev() {
            let a = rho * dot(s, &d);
            alphas[i] = a;
            for k in 0..7 {
                if free[k] {
                    d[k] -= a * y[k];
                }
            }
        }
        if let Some((s, y, _)) = hist.last() {
            let yy = dot(y, y);
            if yy > 0.0 {
                let scale = dot(s, y) / yy;
                for v in d.iter_mut() {
                    *v *= scale;
                }
            }
        }
        for (i, (s, y, rho)) in hist.iter().enumerate() {
            let b = rho * dot(y, &d);
            for k in 0..7 {
                if free[k] {
                    d[k] += s[k] * (alphas[i] - b);
                }
            }
        }
        let mut slope = dot(&g, &d);
        if slope >= 0.0 || !slope.is_finite() {
            hist.clear();
            for k in 0..7 {
                d[k] = if free[k] { -g[k] } else { 0.0 };
            }
            slope = dot(&g, &d);
        }
        let mut t = if iter == 0 && hist.is_empty() {
            let n = dot(&g, &g).sqrt();
            (1.0 / n).min(1.0)
        } else {
            1.0
        };
        let mut accepted = None;
        for _ in 0..40 {
            let mut xn = x;
            for k in 0..7 {
                xn[k] += t * d[k];
            }
            proj(&mut xn);
            let mut gn = [0.0; 7];
            let fnew = f(&xn, &mut gn);
            let moved: f64 = (0..7).map(|k| g[k] * (xn[k] - x[k])).sum();
            if fnew.is_finite() && fnew <= fx + 1e-4 * moved.min(t * slope) {
                accepted = Some((xn, gn, fnew));
                break;
            }
            t *= 0.5;
        }
        let Some((xn, gn, fnew)) = accepted else {
            if hist.is_empty() {
                break;
            }
            hist.clear();
            continue;
        };
        let mut s = [0.0; 7];
        let mut y = [0.0; 7];
        for k in 0..7 {
            s[k] = xn[k] - x[k];
            y[k] = gn[k] - g[k];
        }
        let sy: f64 = (0..7).map(|k| s[k] * y[k]).sum();
        if sy > 1e-12 {
            if hist.len() == M {
                hist.remove(0);
            }
            hist.push((s, y, 1.0 / sy));
        }
        let rel = (fx - fnew) / fx.abs().max(fnew.abs()).max(1.0);
        x = xn;
        g = gn;
        fx = fnew;
        if rel <= 2.220446049250313e-9 {
            break;
        }
    }
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    fn truth() -> PerfParams {
        PerfParams {
            alpha_c: 0.02,
            beta_c: 0.004,
            alpha_n: 0.3,
            beta_n: 0.01,
            alpha_r: 0.05,
            beta_r: 0.002,
            gamma: 1.8,
        }
    }

    fn sample(p: &PerfParams, nodes: u32, replicas: u32, bsz: u32) -> Sample {
        let a = p.accum_time(bsz as f64);
        let n = p.network_time(nodes, replicas);
        Sample {
            nodes,
            replicas,
            atomic_bsz: bsz,
            accum_time: a,
            optim_time: p.log_optim_time(a, n).exp(),
        }
    }

    #[test]
    fn the_fit_recovers_step_times_it_was_given() {
        let p = truth();
        let samples: Vec<Sample> = [(1, 1, 32), (1, 1, 64), (1, 4, 32), (2, 8, 64), (4, 16, 32)]
            .iter()
            .map(|&(n, r, b)| sample(&p, n, r, b))
            .collect();
        let fit = fit_perf_params(&samples);
        for s in &samples {
            let a = fit.accum_time(s.atomic_bsz as f64);
            let o = fit
                .log_optim_time(a, fit.network_time(s.nodes, s.replicas))
                .exp();
            assert!(
                (a / s.accum_time - 1.0).abs() < 0.02,
                "{a} vs {}",
                s.accum_time
            );
            assert!(
                (o / s.optim_time - 1.0).abs() < 0.05,
                "{o} vs {}",
                s.optim_time
            );
        }
    }

    #[test]
    fn a_single_observation_fixes_what_it_cannot_inform() {
        let p = truth();
        let s = sample(&p, 1, 1, 32);
        let fit = fit_perf_params(&[s]);
        assert_eq!(fit.alpha_c, s.accum_time / 2.0);
        assert_eq!(fit.beta_n, fit.beta_r * 1.1);
        assert!(fit.alpha_n >= fit.alpha_r * 1.1);
        assert!((1.0..=10.0).contains(&fit.gamma));
    }

    #[test]
    fn efficiency_is_one_at_the_initial_batch_and_falls_above_it() {
        let g = Goodput {
            perf: truth(),
            grad: GradParams { sqr: 1.0, var: 4.0 },
            init_batch: 128.0,
        };
        assert!((g.efficiency(128.0) - 1.0).abs() < 1e-12);
        // (var + sqr) / (var / 2 + sqr) / 2 = 5 / 3 / 2.
        assert!((g.efficiency(256.0) - 5.0 / 6.0).abs() < 1e-12);
    }

    #[test]
    fn optimize_picks_a_valid_split() {
        let g = Goodput {
            perf: truth(),
            grad: GradParams {
                sqr: 1.0,
                var: 40.0,
            },
            init_batch: 128.0,
        };
        let c = g.optimize(2, 8, 4096.0, (16, 256), true);
        assert!((16..=256).contains(&c.atomic_bsz));
        let batch = 8 * c.atomic_bsz * (c.accum_steps + 1);
        assert!((128..=4096 + 8 * 256).contains(&batch));
        assert!(c.goodput > 0.0);
        // Every one of the 50 candidates scores at most the winner.
        for b in geomspace(128.0, 4096.0) {
            let atomic = (b / 8.0 - 1e-8).ceil() as u32;
            if atomic <= 256 {
                assert!(g.evaluate(2, 8, atomic, 0) <= c.goodput + 1e-12);
            }
        }
    }

    #[test]
    fn geomspace_matches_numpy() {
        let v: Vec<f64> = geomspace(1.0, 1000.0).collect();
        assert_eq!(v.len(), 50);
        assert_eq!(v[0], 1.0);
        assert_eq!(v[49], 1000.0);
        // numpy.geomspace(1, 1000)[1] == 1.151395399326447
        assert!((v[1] - 1.151395399326447).abs() < 1e-15);
    }
}
