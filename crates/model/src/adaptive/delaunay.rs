//! Linear interpolation over a 3-D Delaunay tetrahedralization of integer points: what
//! SciPy's `LinearNDInterpolator` does for Pollux's step times on 5 to 16 nodes.
//!
//! Points and queries are integers (node count, replica count, per-GPU batch), so the
//! orientation and in-sphere predicates are evaluated exactly in `i128`; Bowyer-Watson
//! insertion then cannot be derailed by rounding. Where the Delaunay tetrahedralization
//! is not unique (five or more co-spherical points, as on a regular grid) we keep the
//! first one insertion order produces, which may differ from Qhull's choice inside those
//! cells.

use std::collections::BTreeMap;

type P = [i64; 3];

fn sub(a: P, b: P) -> [i128; 3] {
    [
        (a[0] - b[0]) as i128,
        (a[1] - b[1]) as i128,
        (a[2] - b[2]) as i128,
    ]
}

fn det3(a: [i128; 3], b: [i128; 3], c: [i128; 3]) -> i128 {
    a[0] * (b[1] * c[2] - b[2] * c[1]) - a[1] * (b[0] * c[2] - b[2] * c[0])
        + a[2] * (b[0] * c[1] - b[1] * c[0])
}

/// Six times the signed volume of `abcd`.
fn orient(a: P, b: P, c: P, d: P) -> i128 {
    det3(sub(b, a), sub(c, a), sub(d, a))
}

/// Positive when `e` lies strictly inside the circumsphere of the positively oriented
/// tetrahedron `abcd`.
fn insphere(a: P, b: P, c: P, d: P, e: P) -> i128 {
    let rows = [sub(a, e), sub(b, e), sub(c, e), sub(d, e)];
    let l = rows.map(|r| r[0] * r[0] + r[1] * r[1] + r[2] * r[2]);
    // Expand along the lifted column.
    let m = |i: usize, j: usize, k: usize| det3(rows[i], rows[j], rows[k]);
    let det = -l[0] * m(1, 2, 3) + l[1] * m(0, 2, 3) - l[2] * m(0, 1, 3) + l[3] * m(0, 1, 2);
    -det
}

/// Whether `e` lies strictly inside the circumsphere of the positively oriented
/// tetrahedron `abcd`: [`insphere`]`(a, b, c, d, e) > 0`, decided in floating point
/// where that is certain and exactly otherwise.
///
/// Triangulating checks every tetrahedron against every point, and most are far from
/// it, so the determinant's sign is clear: the `i128` products were nearly all of
/// loading the built-in applications. The differences of coordinates (below 2^21) and
/// their squared lengths are exact in `f64`; the rest of the determinant is at most
/// nine roundings deep, so its error is below 10ε times the same expression over
/// absolute values (Shewchuk's static filter; 16ε is used). Within that bound the
/// exact predicate decides, so the result is always the exact one.
fn inside_sphere(a: P, b: P, c: P, d: P, e: P) -> bool {
    let f = |p: P| {
        [
            (p[0] - e[0]) as f64,
            (p[1] - e[1]) as f64,
            (p[2] - e[2]) as f64,
        ]
    };
    let rows = [f(a), f(b), f(c), f(d)];
    let l = rows.map(|r| r[0] * r[0] + r[1] * r[1] + r[2] * r[2]);
    let m = |i: usize, j: usize, k: usize| {
        let (a, b, c) = (rows[i], rows[j], rows[k]);
        a[0] * (b[1] * c[2] - b[2] * c[1]) - a[1] * (b[0] * c[2] - b[2] * c[0])
            + a[2] * (b[0] * c[1] - b[1] * c[0])
    };
    let pm = |i: usize, j: usize, k: usize| {
        let (a, b, c) = (rows[i], rows[j], rows[k]);
        a[0].abs() * ((b[1] * c[2]).abs() + (b[2] * c[1]).abs())
            + a[1].abs() * ((b[0] * c[2]).abs() + (b[2] * c[0]).abs())
            + a[2].abs() * ((b[0] * c[1]).abs() + (b[1] * c[0]).abs())
    };
    let det = -l[0] * m(1, 2, 3) + l[1] * m(0, 2, 3) - l[2] * m(0, 1, 3) + l[3] * m(0, 1, 2);
    let permanent =
        l[0] * pm(1, 2, 3) + l[1] * pm(0, 2, 3) + l[2] * pm(0, 1, 3) + l[3] * pm(0, 1, 2);
    // 16 unit roundoffs (ε = 2^-53).
    if det.abs() > 16.0 * (f64::EPSILON / 2.0) * permanent {
        return det < 0.0;
    }
    insphere(a, b, c, d, e) > 0
}

/// A tetrahedralization with values at its vertices.
#[derive(Clone, Debug)]
pub struct Delaunay3 {
    points: Vec<P>,
    values: Vec<[f64; 2]>,
    tets: Vec<[u32; 4]>,
}

impl Delaunay3 {
    /// Triangulates `points` (distinct), each with two values. Coordinates must lie
    /// within ±2^19 so that the predicates fit in `i128`.
    pub fn new(points: Vec<P>, values: Vec<[f64; 2]>) -> Delaunay3 {
        assert_eq!(points.len(), values.len());
        let n = points.len() as u32;
        // A bounding tetrahedron far outside the data: its corners are removed at the end.
        const M: i64 = 1 << 19;
        let mut all = points.clone();
        all.extend([[-M, -M, -M], [M, 0, -M], [0, M, -M], [0, 0, M]]);
        let mut tets: Vec<[u32; 4]> = vec![[n, n + 1, n + 2, n + 3]];
        if orient(
            all[n as usize],
            all[n as usize + 1],
            all[n as usize + 2],
            all[n as usize + 3],
        ) < 0
        {
            tets[0].swap(0, 1);
        }
        let mut faces: BTreeMap<[u32; 3], ([u32; 3], u32)> = BTreeMap::new();
        for i in 0..n {
            let p = all[i as usize];
            faces.clear();
            let mut k = 0;
            while k < tets.len() {
                let t = tets[k];
                let [a, b, c, d] = t.map(|v| all[v as usize]);
                if inside_sphere(a, b, c, d, p) {
                    // Faces with their outward-facing order (opposite vertex last).
                    for f in [
                        [t[1], t[2], t[3]],
                        [t[0], t[3], t[2]],
                        [t[0], t[1], t[3]],
                        [t[0], t[2], t[1]],
                    ] {
                        let mut key = f;
                        key.sort_unstable();
                        faces.entry(key).and_modify(|e| e.1 += 1).or_insert((f, 1));
                    }
                    tets.swap_remove(k);
                } else {
                    k += 1;
                }
            }
            for (f, count) in faces.values() {
                if *count == 1 {
                    let mut t = [f[0], f[1], f[2], i];
                    let [a, b, c, d] = t.map(|v| all[v as usize]);
                    if orient(a, b, c, d) < 0 {
                        t.swap(0, 1);
                    }
                    tets.push(t);
                }
            }
        }
        tets.retain(|t| t.iter().all(|&v| v < n));
        tets.sort_unstable();
        Delaunay3 {
            points,
            values,
            tets,
        }
    }

    /// Number of tetrahedra.
    pub fn len(&self) -> usize {
        self.tets.len()
    }

    /// True when the points span no volume.
    pub fn is_empty(&self) -> bool {
        self.tets.is_empty()
    }

    /// The barycentric interpolation of the values at `q`, or `None` outside the convex
    /// hull (where SciPy returns NaN).
    pub fn interpolate(&self, q: P) -> Option<[f64; 2]> {
        for t in &self.tets {
            let [a, b, c, d] = t.map(|v| self.points[v as usize]);
            let w = [
                orient(q, b, c, d),
                orient(a, q, c, d),
                orient(a, b, q, d),
                orient(a, b, c, q),
            ];
            if w.iter().all(|&x| x >= 0) {
                let total: i128 = w.iter().sum();
                if total == 0 {
                    continue;
                }
                let mut out = [0.0; 2];
                for (k, &v) in t.iter().enumerate() {
                    let f = w[k] as f64 / total as f64;
                    out[0] += f * self.values[v as usize][0];
                    out[1] += f * self.values[v as usize][1];
                }
                return Some(out);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_predicates_have_the_documented_signs() {
        let (a, b, c, d) = ([0, 0, 0], [4, 0, 0], [0, 4, 0], [0, 0, 4]);
        assert!(orient(a, b, c, d) > 0);
        assert!(insphere(a, b, c, d, [1, 1, 1]) > 0);
        assert!(insphere(a, b, c, d, [9, 9, 9]) < 0);
        assert_eq!(insphere(a, b, c, d, [4, 4, 0]), 0);
    }

    #[test]
    fn the_filtered_predicate_is_the_exact_one() {
        // Random points, points on a small grid (many co-spherical sets) and the
        // bounding corners far away, as triangulating meets them.
        let mut rng = crate::Rng::new(5);
        let mut pick = |span: u64| (rng.below(2 * span + 1) as i64) - span as i64;
        let far = 1 << 19;
        let corners = [
            [-far, -far, -far],
            [far, 0, -far],
            [0, far, -far],
            [0, 0, far],
        ];
        let (mut checked, mut degenerate) = (0, 0);
        for round in 0..60_000 {
            let span = [3, 40, 5000][round % 3];
            let mut p = || [pick(span), pick(span), pick(span)];
            let mut t = [p(), p(), p(), p()];
            let e = p();
            if round % 7 == 0 {
                t[round % 4] = corners[round % 4];
            }
            let [a, b, c, d] = t;
            if orient(a, b, c, d) <= 0 {
                continue;
            }
            checked += 1;
            degenerate += usize::from(insphere(a, b, c, d, e) == 0);
            assert_eq!(inside_sphere(a, b, c, d, e), insphere(a, b, c, d, e) > 0);
        }
        assert!(
            checked > 10_000 && degenerate > 100,
            "{checked} {degenerate}"
        );
    }

    #[test]
    fn linear_data_is_reproduced_exactly_on_a_grid() {
        // A 4 x 4 x 4 grid: maximally degenerate (every cube's corners are co-spherical).
        let mut pts = Vec::new();
        let mut vals = Vec::new();
        let f = |p: P| 2.0 * p[0] as f64 - 3.0 * p[1] as f64 + 0.5 * p[2] as f64 + 1.0;
        for x in 0..4 {
            for y in 0..4 {
                for z in 0..4 {
                    let p = [x * 10, y * 7, z * 100];
                    pts.push(p);
                    vals.push([f(p), -f(p)]);
                }
            }
        }
        let d = Delaunay3::new(pts, vals);
        // The tetrahedra tile the box: volumes add up to the box's.
        let vol: i128 = d
            .tets
            .iter()
            .map(|t| {
                let [a, b, c, e] = t.map(|v| d.points[v as usize]);
                orient(a, b, c, e)
            })
            .sum();
        assert_eq!(vol, 6 * 30 * 21 * 300);
        for q in [
            [5, 3, 50],
            [15, 20, 299],
            [0, 0, 0],
            [30, 21, 300],
            [29, 1, 17],
        ] {
            let v = d.interpolate(q).expect("inside");
            assert!((v[0] - f(q)).abs() < 1e-9, "{q:?}: {} vs {}", v[0], f(q));
            assert!((v[1] + f(q)).abs() < 1e-9);
        }
        assert!(d.interpolate([31, 0, 0]).is_none());
    }
}
