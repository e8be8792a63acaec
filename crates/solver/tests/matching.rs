//! The blossom solver against the exhaustive oracle on random small graphs.

use apiary_solver::matching::{brute_force, max_weight_matching};
use proptest::prelude::*;

fn graph() -> impl Strategy<Value = (usize, Vec<(usize, usize, i64)>)> {
    (2usize..11).prop_flat_map(|n| {
        // v ranges over the other n - 1 vertices: no loops, nothing rejected.
        let edge = (0..n, 0..n - 1, -3i64..50)
            .prop_map(|(u, v, w)| (u, if v >= u { v + 1 } else { v }, w));
        (Just(n), prop::collection::vec(edge, 0..30))
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn blossom_finds_the_optimum((n, edges) in graph()) {
        let m = max_weight_matching(n, &edges).unwrap();
        prop_assert_eq!(m.weight, brute_force(n, &edges).unwrap());
        // A valid matching over positive edges that exist.
        for (u, mate) in m.mate.iter().enumerate() {
            if let Some(v) = *mate {
                prop_assert_eq!(m.mate[v], Some(u));
                let w = edges
                    .iter()
                    .filter(|e| (e.0 == u && e.1 == v) || (e.0 == v && e.1 == u))
                    .map(|e| e.2)
                    .max();
                prop_assert!(w.is_some_and(|w| w > 0), "matched {u}-{v} without a positive edge");
            }
        }
    }

    #[test]
    fn the_same_graph_gives_the_same_matching((n, edges) in graph()) {
        prop_assert_eq!(max_weight_matching(n, &edges).unwrap(), max_weight_matching(n, &edges).unwrap());
    }
}
