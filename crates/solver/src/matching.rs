//! Maximum-weight matching on a general (non-bipartite) graph: pick vertex-disjoint
//! edges of largest total weight, leaving a vertex unmatched where that is better.
//!
//! Muri groups jobs by matching them on the interleaving efficiency of each pair. The
//! algorithm is Edmonds' primal-dual blossom algorithm, O(V³), in [`crate::blossom`]:
//! integer weights, so callers scale real weights (see [`scale`]). [`brute_force`] is the exhaustive oracle the tests
//! compare it with; it is exported so that callers' tests can use it too.

pub use crate::blossom::Blossom;

/// Why a matching instance was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MatchingError {
    /// An edge names a vertex that does not exist, or joins a vertex to itself.
    #[error("edge ({u}, {v}) is not between two distinct vertices of 0..{n}")]
    BadEdge {
        /// One end.
        u: usize,
        /// The other.
        v: usize,
        /// Vertex count.
        n: usize,
    },
    /// A weight beyond what the solver can add up without overflow.
    #[error("edge ({u}, {v}) has weight {w}; weights must be below 2^53")]
    BadWeight {
        /// One end.
        u: usize,
        /// The other.
        v: usize,
        /// Its weight.
        w: i64,
    },
    /// Too many vertices for the dense solver.
    #[error("{n} vertices: the matching solver takes at most {MAX_VERTICES}")]
    TooLarge {
        /// Vertex count.
        n: usize,
    },
}

/// Largest graph accepted: the solver keeps an n × n weight matrix.
pub const MAX_VERTICES: usize = 4096;
const MAX_WEIGHT: i64 = 1 << 53;

/// A matching: `mate[v]` is `v`'s partner, if any.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Matching {
    /// Partner of each vertex.
    pub mate: Vec<Option<usize>>,
    /// Total weight of the matched edges.
    pub weight: i64,
}

impl Matching {
    /// The matched pairs `(u, v)` with `u < v`, in order of `u`.
    pub fn pairs(&self) -> Vec<(usize, usize)> {
        self.mate
            .iter()
            .enumerate()
            .filter_map(|(u, m)| m.filter(|&v| u < v).map(|v| (u, v)))
            .collect()
    }
}

/// Scales a non-negative real weight to the integers the solver takes (6 decimal
/// digits kept; values at or below zero become 0, i.e. no edge).
pub fn scale(w: f64) -> i64 {
    if w.is_finite() && w > 0.0 {
        ((w * 1e6).round() as i64).min(MAX_WEIGHT - 1)
    } else {
        0
    }
}

fn check(n: usize, edges: &[(usize, usize, i64)]) -> Result<(), MatchingError> {
    if n > MAX_VERTICES {
        return Err(MatchingError::TooLarge { n });
    }
    for &(u, v, w) in edges {
        if u >= n || v >= n || u == v {
            return Err(MatchingError::BadEdge { u, v, n });
        }
        if w >= MAX_WEIGHT {
            return Err(MatchingError::BadWeight { u, v, w });
        }
    }
    Ok(())
}

/// A maximum-weight matching of `n` vertices joined by `edges` `(u, v, weight)`.
/// Edges of weight 0 or less are never used; of parallel edges the heaviest counts.
pub fn max_weight_matching(
    n: usize,
    edges: &[(usize, usize, i64)],
) -> Result<Matching, MatchingError> {
    max_weight_matching_with(&mut Blossom::new(), n, edges)
}

/// [`max_weight_matching`] reusing `solver`'s memory (for callers that solve many).
pub fn max_weight_matching_with(
    solver: &mut Blossom,
    n: usize,
    edges: &[(usize, usize, i64)],
) -> Result<Matching, MatchingError> {
    check(n, edges)?;
    let mut dense = vec![0i64; n * n];
    for &(u, v, w) in edges {
        let (a, b) = (u.min(v), u.max(v));
        let x = dense[a * n + b].max(w);
        dense[a * n + b] = x;
        dense[b * n + a] = x;
    }
    let mate = solver.solve(n, &dense);
    let weight = mate
        .iter()
        .enumerate()
        .filter_map(|(u, m)| m.filter(|&v| u < v).map(|v| dense[u * n + v]))
        .sum();
    Ok(Matching { mate, weight })
}

/// The best total weight by trying every matching: exponential, for tests on graphs
/// of up to about 12 vertices.
pub fn brute_force(n: usize, edges: &[(usize, usize, i64)]) -> Result<i64, MatchingError> {
    check(n, edges)?;
    let mut w = vec![0i64; n * n];
    for &(u, v, x) in edges {
        w[u * n + v] = w[u * n + v].max(x);
        w[v * n + u] = w[v * n + u].max(x);
    }
    fn best(i: usize, n: usize, used: &mut [bool], w: &[i64]) -> i64 {
        let Some(u) = (i..n).find(|&u| !used[u]) else {
            return 0;
        };
        used[u] = true;
        // Leave u unmatched, or match it with any free v over a positive edge.
        let mut b = best(u + 1, n, used, w);
        for v in u + 1..n {
            if !used[v] && w[u * n + v] > 0 {
                used[v] = true;
                b = b.max(w[u * n + v] + best(u + 1, n, used, w));
                used[v] = false;
            }
        }
        used[u] = false;
        b
    }
    Ok(best(0, n, &mut vec![false; n], &w))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hand_worked_triangle_and_path() {
        // Triangle 0-1-2 plus pendant 3 on 2: best is 0-1 (5) + 2-3 (4) = 9, not 1-2 (7).
        let e = [(0, 1, 5), (1, 2, 7), (0, 2, 3), (2, 3, 4)];
        let m = max_weight_matching(4, &e).unwrap();
        assert_eq!(m.weight, 9);
        assert_eq!(m.pairs(), vec![(0, 1), (2, 3)]);
        // A lone heavy edge beats two light ones only if heavier than their sum.
        let m = max_weight_matching(4, &[(0, 1, 3), (1, 2, 10), (2, 3, 3)]).unwrap();
        assert_eq!(m.pairs(), vec![(1, 2)]);
        // An odd cycle (a blossom) with a stem.
        let e = [(0, 1, 6), (1, 2, 6), (2, 0, 6), (2, 3, 5), (3, 4, 6)];
        assert_eq!(max_weight_matching(5, &e).unwrap().weight, 12);
        assert_eq!(brute_force(5, &e).unwrap(), 12);
    }

    #[test]
    fn bad_input_is_refused() {
        assert!(matches!(
            max_weight_matching(3, &[(0, 3, 1)]),
            Err(MatchingError::BadEdge { .. })
        ));
        assert!(matches!(
            max_weight_matching(3, &[(1, 1, 1)]),
            Err(MatchingError::BadEdge { .. })
        ));
        assert!(matches!(
            max_weight_matching(2, &[(0, 1, 1 << 60)]),
            Err(MatchingError::BadWeight { .. })
        ));
        assert!(matches!(
            max_weight_matching(MAX_VERTICES + 1, &[]),
            Err(MatchingError::TooLarge { .. })
        ));
        assert_eq!(max_weight_matching(0, &[]).unwrap(), Matching::default());
        assert_eq!(scale(0.123_456_7), 123_457);
        assert_eq!(scale(-1.0), 0);
        assert_eq!(scale(f64::NAN), 0);
    }
}
