//! Linear programs `maximize cᵀx subject to Ax ≤ b, x ≥ 0`, solved by a primal-dual
//! interior-point method (Mehrotra's predictor-corrector).
//!
//! Why an interior-point method and not simplex: Gavel's allocation programs are
//! heavily degenerate (max-min fairness fixes only the smallest job's share, so the
//! others may take any of many optimal splits), and the artifact solves them with
//! ECOS, an interior-point solver. Interior-point iterates converge to the analytic
//! centre of the optimal face — the "middle" optimal solution — whereas simplex stops
//! at whichever vertex its pivoting rule reaches. The time fractions a policy hands
//! to a round-based mechanism are those solutions, so only a method of the same kind
//! reproduces the artifact's schedules.
//!
//! The constraint matrix is stored by sparse rows; the normal equations
//! `A D Aᵀ` are formed by columns (cost: the sum over columns of the squared number
//! of their non-zeros) and factored densely by Cholesky, which suits the few hundred
//! rows a cluster's allocation program has.

/// Why a program could not be solved.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LpError {
    /// A coefficient, bound or objective entry is not finite, or names a variable
    /// that does not exist.
    #[error("invalid linear program: {0}")]
    Invalid(String),
    /// The iterates diverged: the program is unbounded or infeasible.
    #[error("linear program is infeasible or unbounded")]
    InfeasibleOrUnbounded,
    /// The method did not reach the tolerance within its iteration budget.
    #[error("linear program did not converge in {0} iterations")]
    NotConverged(u32),
}

/// An optimal solution.
#[derive(Debug, Clone, PartialEq)]
pub struct LpSolution {
    /// The variables.
    pub x: Vec<f64>,
    /// `cᵀx`.
    pub objective: f64,
    /// Interior-point iterations taken.
    pub iterations: u32,
}

/// `maximize cᵀx subject to Ax ≤ b, x ≥ 0`, built row by row.
#[derive(Debug, Clone, Default)]
pub struct LinearProgram {
    n: usize,
    c: Vec<f64>,
    rows: Vec<Vec<(usize, f64)>>,
    b: Vec<f64>,
    bad_objective: Option<usize>,
}

const MAX_ITER: u32 = 200;
const TOL: f64 = 1e-9;

impl LinearProgram {
    /// A program over `n` non-negative variables with a zero objective.
    pub fn new(n: usize) -> LinearProgram {
        LinearProgram {
            n,
            c: vec![0.0; n],
            rows: Vec::new(),
            b: Vec::new(),
            bad_objective: None,
        }
    }

    /// Number of variables.
    pub fn vars(&self) -> usize {
        self.n
    }

    /// Number of constraints.
    pub fn constraints(&self) -> usize {
        self.rows.len()
    }

    /// Sets the objective coefficient of variable `j`.
    pub fn objective(&mut self, j: usize, coef: f64) {
        if j < self.n {
            self.c[j] = coef;
        } else {
            self.bad_objective = Some(j);
        }
    }

    /// Adds `Σ coef·x_j ≤ rhs`. Repeated variables are summed.
    pub fn add_le(&mut self, terms: &[(usize, f64)], rhs: f64) {
        let mut row: Vec<(usize, f64)> = terms.iter().copied().filter(|t| t.1 != 0.0).collect();
        row.sort_by_key(|t| t.0);
        row.dedup_by(|a, b| {
            if a.0 == b.0 {
                b.1 += a.1;
                true
            } else {
                false
            }
        });
        self.rows.push(row);
        self.b.push(rhs);
    }

    fn validate(&self) -> Result<(), LpError> {
        if let Some(j) = self.bad_objective {
            return Err(LpError::Invalid(format!(
                "objective names variable {j} of {}",
                self.n
            )));
        }
        if let Some(v) = self.c.iter().find(|v| !v.is_finite()) {
            return Err(LpError::Invalid(format!("objective coefficient {v}")));
        }
        for (i, (row, &b)) in self.rows.iter().zip(&self.b).enumerate() {
            if !b.is_finite() {
                return Err(LpError::Invalid(format!("row {i}: bound {b}")));
            }
            for &(j, a) in row {
                if j >= self.n {
                    return Err(LpError::Invalid(format!(
                        "row {i}: variable {j} of {}",
                        self.n
                    )));
                }
                if !a.is_finite() {
                    return Err(LpError::Invalid(format!("row {i}: coefficient {a}")));
                }
            }
        }
        Ok(())
    }

    /// Solves the program. The solution is (to within 1e-9, relative) optimal, and of
    /// all optimal solutions the one an interior-point method converges to: near the
    /// analytic centre of the optimal face.
    pub fn maximize(&self) -> Result<LpSolution, LpError> {
        self.validate()?;
        Ipm::new(self).solve()
    }
}

/// Column `k` of the Cholesky factor below the diagonal: for each row `i` of `below`
/// (rows `k + 1..` of the `m`-wide matrix), `L[i][k] = (M[i][k] − Σ_t L[i][t]·L[k][t]) /
/// p`, the sum over `t = 0..k` in that order, where `lk` is `L[k][..k]`.
///
/// Each row's sum is one chain of dependent subtractions, so a row at a time waits on
/// the adder's latency. Eight rows at once keep eight independent chains in flight,
/// each with the same operations in the same order as alone, so the factor is the
/// same to the bit (the dense factor was nearly all of Gavel's run on Philly).
fn eliminate(lk: &[f64], below: &mut [f64], m: usize, k: usize, p: f64) {
    const ROWS: usize = 8;
    let mut blocks = below.chunks_exact_mut(ROWS * m);
    for block in &mut blocks {
        let mut s = [0.0f64; ROWS];
        {
            let rows: [&[f64]; ROWS] = std::array::from_fn(|r| &block[r * m..r * m + k]);
            for (r, sum) in s.iter_mut().enumerate() {
                *sum = block[r * m + k];
            }
            for (t, &l) in lk.iter().enumerate() {
                for r in 0..ROWS {
                    s[r] -= rows[r][t] * l;
                }
            }
        }
        for (r, sum) in s.iter().enumerate() {
            block[r * m + k] = sum / p;
        }
    }
    for row in blocks.into_remainder().chunks_exact_mut(m) {
        let mut sum = row[k];
        for (&a, &l) in row[..k].iter().zip(lk) {
            sum -= a * l;
        }
        row[k] = sum / p;
    }
}

/// Working state of one solve, in standard form `min ĉᵀv, Âv = b, v ≥ 0` with
/// `v = (x, s)`, `Â = [A I]`, `ĉ = (−c, 0)`.
struct Ipm<'a> {
    lp: &'a LinearProgram,
    m: usize,
    nv: usize,
    /// Column view of A: per variable, `(row, coef)`.
    cols: Vec<Vec<(usize, f64)>>,
    chat: Vec<f64>,
    /// Normal matrix, dense row-major `m × m`, then its Cholesky factor.
    mat: Vec<f64>,
}

// Dense linear algebra reads best with explicit indices.
#[allow(clippy::needless_range_loop)]
impl<'a> Ipm<'a> {
    fn new(lp: &'a LinearProgram) -> Ipm<'a> {
        let m = lp.rows.len();
        let mut cols = vec![Vec::new(); lp.n];
        for (i, row) in lp.rows.iter().enumerate() {
            for &(j, a) in row {
                cols[j].push((i, a));
            }
        }
        let mut chat: Vec<f64> = lp.c.iter().map(|v| -v).collect();
        chat.resize(lp.n + m, 0.0);
        Ipm {
            lp,
            m,
            nv: lp.n + m,
            cols,
            chat,
            mat: vec![0.0; m * m],
        }
    }

    /// `Âv` into `out`.
    fn a_mul(&self, v: &[f64], out: &mut [f64]) {
        for (i, row) in self.lp.rows.iter().enumerate() {
            out[i] = row.iter().map(|&(j, a)| a * v[j]).sum::<f64>() + v[self.lp.n + i];
        }
    }

    /// `Âᵀy` into `out`.
    fn at_mul(&self, y: &[f64], out: &mut [f64]) {
        for (j, col) in self.cols.iter().enumerate() {
            out[j] = col.iter().map(|&(i, a)| a * y[i]).sum();
        }
        out[self.lp.n..].copy_from_slice(y);
    }

    /// Forms `Â diag(d) Âᵀ` and factors it in place. Pivots that vanish (a direction
    /// the iterates have left) are replaced by a huge value, which zeroes that
    /// component of the step, as LIPSOL does.
    fn factor(&mut self, d: &[f64]) {
        let m = self.m;
        self.mat.iter_mut().for_each(|v| *v = 0.0);
        for (j, col) in self.cols.iter().enumerate() {
            for &(i, a) in col {
                for &(k, bk) in col {
                    if k <= i {
                        self.mat[i * m + k] += a * bk * d[j];
                    }
                }
            }
        }
        for i in 0..m {
            self.mat[i * m + i] += d[self.lp.n + i];
        }
        let max_diag = (0..m).map(|i| self.mat[i * m + i]).fold(0.0f64, f64::max);
        let tiny = 1e-30f64.max(max_diag * 1e-14);
        for k in 0..m {
            let mut p = self.mat[k * m + k];
            for t in 0..k {
                p -= self.mat[k * m + t] * self.mat[k * m + t];
            }
            let p = if p > tiny { p.sqrt() } else { 1e64 };
            self.mat[k * m + k] = p;
            let (done, below) = self.mat.split_at_mut((k + 1) * m);
            eliminate(&done[k * m..k * m + k], below, m, k, p);
        }
    }

    /// Solves `L Lᵀ y = r` in place.
    fn back_solve(&self, r: &mut [f64]) {
        let m = self.m;
        for i in 0..m {
            let mut s = r[i];
            for t in 0..i {
                s -= self.mat[i * m + t] * r[t];
            }
            r[i] = s / self.mat[i * m + i];
        }
        for i in (0..m).rev() {
            let mut s = r[i];
            for t in i + 1..m {
                s -= self.mat[t * m + i] * r[t];
            }
            r[i] = s / self.mat[i * m + i];
        }
    }

    fn solve(mut self) -> Result<LpSolution, LpError> {
        let (m, nv, n) = (self.m, self.nv, self.lp.n);
        if m == 0 {
            // No constraints: bounded only if no objective coefficient is positive.
            if self.lp.c.iter().any(|&c| c > 0.0) {
                return Err(LpError::InfeasibleOrUnbounded);
            }
            return Ok(LpSolution {
                x: vec![0.0; n],
                objective: 0.0,
                iterations: 0,
            });
        }
        let b = &self.lp.b;
        let bnorm = 1.0 + b.iter().fold(0.0f64, |a, v| a.max(v.abs()));
        let cnorm = 1.0 + self.chat.iter().fold(0.0f64, |a, v| a.max(v.abs()));

        // Mehrotra's starting point: least-norm x and least-squares (y, z), shifted
        // into the positive orthant and balanced.
        let mut x = vec![0.0; nv];
        let mut y = vec![0.0; m];
        let mut z = vec![0.0; nv];
        let ones = vec![1.0; nv];
        self.factor(&ones);
        let mut r = b.clone();
        self.back_solve(&mut r);
        self.at_mul(&r, &mut x);
        let mut ac = vec![0.0; m];
        self.a_mul(&self.chat, &mut ac);
        self.back_solve(&mut ac);
        y.copy_from_slice(&ac);
        let mut aty = vec![0.0; nv];
        self.at_mul(&y, &mut aty);
        for j in 0..nv {
            z[j] = self.chat[j] - aty[j];
        }
        let dx = (-1.5 * x.iter().fold(f64::INFINITY, |a, &v| a.min(v))).max(0.0);
        let dz = (-1.5 * z.iter().fold(f64::INFINITY, |a, &v| a.min(v))).max(0.0);
        x.iter_mut().for_each(|v| *v += dx);
        z.iter_mut().for_each(|v| *v += dz);
        let xz: f64 = x.iter().zip(&z).map(|(a, b)| a * b).sum();
        let sx: f64 = x.iter().sum();
        let sz: f64 = z.iter().sum();
        let hx = if sz > 0.0 { 0.5 * xz / sz } else { 0.0 };
        let hz = if sx > 0.0 { 0.5 * xz / sx } else { 0.0 };
        for j in 0..nv {
            x[j] = (x[j] + hx).max(1e-4);
            z[j] = (z[j] + hz).max(1e-4);
        }

        let mut rp = vec![0.0; m];
        let mut rd = vec![0.0; nv];
        let mut d = vec![0.0; nv];
        let mut rhs = vec![0.0; m];
        let mut tmp = vec![0.0; nv];
        let mut dx_aff = vec![0.0; nv];
        let mut dz_aff = vec![0.0; nv];
        let mut dy = vec![0.0; m];
        let mut rc = vec![0.0; nv];
        let mut dxv = vec![0.0; nv];
        let mut dzv = vec![0.0; nv];

        for it in 1..=MAX_ITER {
            // Residuals.
            self.a_mul(&x, &mut rp);
            for i in 0..m {
                rp[i] = b[i] - rp[i];
            }
            self.at_mul(&y, &mut aty);
            for j in 0..nv {
                rd[j] = self.chat[j] - aty[j] - z[j];
            }
            let gap: f64 = x.iter().zip(&z).map(|(a, b)| a * b).sum();
            let primal: f64 = self.chat.iter().zip(&x).map(|(a, b)| a * b).sum();
            let pinf = rp.iter().fold(0.0f64, |a, v| a.max(v.abs())) / bnorm;
            let dinf = rd.iter().fold(0.0f64, |a, v| a.max(v.abs())) / cnorm;
            if pinf < TOL && dinf < TOL && gap / (1.0 + primal.abs()) < TOL {
                let xs: Vec<f64> = x[..n].to_vec();
                let objective = self.lp.c.iter().zip(&xs).map(|(a, b)| a * b).sum();
                return Ok(LpSolution {
                    x: xs,
                    objective,
                    iterations: it - 1,
                });
            }
            if !gap.is_finite() || x.iter().any(|v| *v > 1e14) || z.iter().any(|v| *v > 1e14) {
                return Err(LpError::InfeasibleOrUnbounded);
            }
            let mu = gap / nv as f64;
            for j in 0..nv {
                d[j] = x[j] / z[j];
            }
            self.factor(&d);

            // One Newton direction for complementarity target `rc` (XZe + Δ = rc).
            let direction = |ipm: &Ipm,
                             rc: &[f64],
                             rhs: &mut [f64],
                             tmp: &mut [f64],
                             dy: &mut [f64],
                             dxo: &mut [f64],
                             dzo: &mut [f64]| {
                // A D Aᵀ Δy = rp + A (D rd − Z⁻¹ rc)
                for j in 0..nv {
                    tmp[j] = d[j] * rd[j] - rc[j] / z[j];
                }
                ipm.a_mul(tmp, rhs);
                for i in 0..m {
                    rhs[i] += rp[i];
                }
                dy.copy_from_slice(rhs);
                ipm.back_solve(dy);
                ipm.at_mul(dy, tmp);
                for j in 0..nv {
                    dxo[j] = d[j] * (tmp[j] - rd[j]) + rc[j] / z[j];
                    dzo[j] = (rc[j] - z[j] * dxo[j]) / x[j];
                }
            };
            let step = |v: &[f64], dv: &[f64]| {
                let mut a = 1.0f64;
                for j in 0..nv {
                    if dv[j] < 0.0 {
                        a = a.min(-v[j] / dv[j]);
                    }
                }
                a
            };

            // Predictor (affine scaling).
            for j in 0..nv {
                rc[j] = -x[j] * z[j];
            }
            direction(
                &self,
                &rc,
                &mut rhs,
                &mut tmp,
                &mut dy,
                &mut dx_aff,
                &mut dz_aff,
            );
            let ap = step(&x, &dx_aff);
            let ad = step(&z, &dz_aff);
            let mu_aff: f64 = (0..nv)
                .map(|j| (x[j] + ap * dx_aff[j]) * (z[j] + ad * dz_aff[j]))
                .sum::<f64>()
                / nv as f64;
            let sigma = (mu_aff / mu).clamp(0.0, 1.0).powi(3);

            // Corrector, centring towards σμ.
            for j in 0..nv {
                rc[j] = sigma * mu - x[j] * z[j] - dx_aff[j] * dz_aff[j];
            }
            direction(&self, &rc, &mut rhs, &mut tmp, &mut dy, &mut dxv, &mut dzv);
            let ap = (0.995 * step(&x, &dxv)).min(1.0);
            let ad = (0.995 * step(&z, &dzv)).min(1.0);
            for j in 0..nv {
                x[j] += ap * dxv[j];
                z[j] += ad * dzv[j];
            }
            for i in 0..m {
                y[i] += ad * dy[i];
            }
        }
        Err(LpError::NotConverged(MAX_ITER))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol * (1.0 + a.abs().max(b.abs()))
    }

    /// The factor, eight rows at a time, is the one-row-at-a-time loops' to the bit, on
    /// programs shaped like Gavel's (a dense column) and random ones, of sizes that
    /// leave every remainder of eight rows.
    #[test]
    fn factor_matches_the_plain_loops_to_the_bit() {
        let mut x = 17u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 11) as f64 / (1u64 << 53) as f64
        };
        for (vars, rows) in [(3, 2), (9, 7), (20, 17), (40, 33), (31, 40)] {
            let mut lp = LinearProgram::new(vars);
            for r in 0..rows {
                let mut terms = Vec::new();
                for j in 0..vars {
                    if j == 0 || next() < 0.3 || j % rows == r {
                        terms.push((j, next() * 4.0 - 1.0));
                    }
                }
                lp.add_le(&terms, 1.0);
            }
            let d: Vec<f64> = (0..vars + rows).map(|_| 1e-3 + next() * 10.0).collect();
            let mut ipm = Ipm::new(&lp);
            ipm.factor(&d);
            // The same factor by the plain loops.
            let m = rows;
            let mut mat = vec![0.0; m * m];
            for (j, col) in ipm.cols.iter().enumerate() {
                for &(i, a) in col {
                    for &(k, bk) in col {
                        if k <= i {
                            mat[i * m + k] += a * bk * d[j];
                        }
                    }
                }
            }
            for i in 0..m {
                mat[i * m + i] += d[vars + i];
            }
            let max_diag = (0..m).map(|i| mat[i * m + i]).fold(0.0f64, f64::max);
            let tiny = 1e-30f64.max(max_diag * 1e-14);
            for k in 0..m {
                let mut p = mat[k * m + k];
                for t in 0..k {
                    p -= mat[k * m + t] * mat[k * m + t];
                }
                let p = if p > tiny { p.sqrt() } else { 1e64 };
                mat[k * m + k] = p;
                for i in k + 1..m {
                    let mut s = mat[i * m + k];
                    for t in 0..k {
                        s -= mat[i * m + t] * mat[k * m + t];
                    }
                    mat[i * m + k] = s / p;
                }
            }
            for i in 0..m {
                for t in 0..=i {
                    assert_eq!(
                        ipm.mat[i * m + t].to_bits(),
                        mat[i * m + t].to_bits(),
                        "{vars} vars, {rows} rows: L[{i}][{t}]"
                    );
                }
            }
        }
    }

    #[test]
    fn textbook_program() {
        // max 3x + 5y: x ≤ 4, 2y ≤ 12, 3x + 2y ≤ 18 → (2, 6), 36.
        let mut lp = LinearProgram::new(2);
        lp.objective(0, 3.0);
        lp.objective(1, 5.0);
        lp.add_le(&[(0, 1.0)], 4.0);
        lp.add_le(&[(1, 2.0)], 12.0);
        lp.add_le(&[(0, 3.0), (1, 2.0)], 18.0);
        let s = lp.maximize().unwrap();
        assert!(close(s.objective, 36.0, 1e-8), "{s:?}");
        assert!(
            close(s.x[0], 2.0, 1e-6) && close(s.x[1], 6.0, 1e-6),
            "{s:?}"
        );
    }

    #[test]
    fn degenerate_optimum_is_the_centre_of_the_optimal_face() {
        // max x0 with x0 ≤ 1 and x1 ≤ 1: every x1 in [0, 1] is optimal; an interior
        // point method ends in the middle, where simplex would pick a vertex.
        let mut lp = LinearProgram::new(2);
        lp.objective(0, 1.0);
        lp.add_le(&[(0, 1.0)], 1.0);
        lp.add_le(&[(1, 1.0)], 1.0);
        let s = lp.maximize().unwrap();
        assert!(close(s.x[0], 1.0, 1e-7), "{s:?}");
        assert!((s.x[1] - 0.5).abs() < 1e-4, "{s:?}");
    }

    #[test]
    fn max_min_share_splits_evenly() {
        // Two jobs share one GPU: max t, t ≤ x0, t ≤ x1, x0 + x1 ≤ 1 → 0.5 each.
        let mut lp = LinearProgram::new(3);
        lp.objective(2, 1.0);
        lp.add_le(&[(2, 1.0), (0, -1.0)], 0.0);
        lp.add_le(&[(2, 1.0), (1, -1.0)], 0.0);
        lp.add_le(&[(0, 1.0), (1, 1.0)], 1.0);
        let s = lp.maximize().unwrap();
        assert!(close(s.objective, 0.5, 1e-8), "{s:?}");
        assert!(close(s.x[0], 0.5, 1e-6) && close(s.x[1], 0.5, 1e-6));
    }

    #[test]
    fn zero_objective_and_empty_programs() {
        let lp = LinearProgram::new(3);
        let s = lp.maximize().unwrap();
        assert_eq!(s.x, vec![0.0; 3]);
        let mut lp = LinearProgram::new(1);
        lp.objective(0, 1.0);
        assert_eq!(lp.maximize(), Err(LpError::InfeasibleOrUnbounded));
    }

    #[test]
    fn unbounded_and_invalid_programs_are_reported() {
        let mut lp = LinearProgram::new(2);
        lp.objective(0, 1.0);
        lp.add_le(&[(1, 1.0)], 1.0);
        assert_eq!(lp.maximize(), Err(LpError::InfeasibleOrUnbounded));
        let mut lp = LinearProgram::new(1);
        lp.add_le(&[(3, 1.0)], 1.0);
        assert!(matches!(lp.maximize(), Err(LpError::Invalid(_))));
        let mut lp = LinearProgram::new(1);
        lp.add_le(&[(0, f64::NAN)], 1.0);
        assert!(matches!(lp.maximize(), Err(LpError::Invalid(_))));
    }

    /// The best vertex of `max cᵀx, Ax ≤ b, x ≥ 0` (n = 2) by enumerating every pair
    /// of tight constraints.
    fn brute(c: &[f64], rows: &[(f64, f64, f64)]) -> f64 {
        let mut all: Vec<(f64, f64, f64)> = rows.to_vec();
        all.push((-1.0, 0.0, 0.0));
        all.push((0.0, -1.0, 0.0));
        let mut best = f64::NEG_INFINITY;
        for i in 0..all.len() {
            for k in i + 1..all.len() {
                let (a1, b1, r1) = all[i];
                let (a2, b2, r2) = all[k];
                let det = a1 * b2 - a2 * b1;
                if det.abs() < 1e-9 {
                    continue;
                }
                let x = (r1 * b2 - r2 * b1) / det;
                let y = (a1 * r2 - a2 * r1) / det;
                if all.iter().all(|&(a, b, r)| a * x + b * y <= r + 1e-7) {
                    best = best.max(c[0] * x + c[1] * y);
                }
            }
        }
        best
    }

    proptest! {
        #[test]
        fn matches_vertex_enumeration(
            c in proptest::collection::vec(0.0f64..5.0, 2),
            rows in proptest::collection::vec((-3.0f64..5.0, -3.0f64..5.0, 0.0f64..10.0), 1..6),
        ) {
            // A box keeps every program bounded; x = 0 keeps it feasible (b ≥ 0).
            let mut all = rows.clone();
            all.push((1.0, 0.0, 20.0));
            all.push((0.0, 1.0, 20.0));
            let mut lp = LinearProgram::new(2);
            lp.objective(0, c[0]);
            lp.objective(1, c[1]);
            for &(a, b, r) in &all {
                lp.add_le(&[(0, a), (1, b)], r);
            }
            let s = lp.maximize().unwrap();
            let want = brute(&c, &all);
            prop_assert!(close(s.objective, want, 1e-6), "got {} want {}", s.objective, want);
            for &(a, b, r) in &all {
                prop_assert!(a * s.x[0] + b * s.x[1] <= r + 1e-6);
            }
            prop_assert!(s.x.iter().all(|v| *v >= -1e-9));
        }
    }
}
