//! The blossom solver against the exhaustive oracle on random small graphs.

use apiary_solver::blossom::Blossom;
use apiary_solver::matching::{brute_force, max_weight_matching, max_weight_matching_with};
use proptest::prelude::*;

fn graph() -> impl Strategy<Value = (usize, Vec<(usize, usize, i64)>)> {
    (2usize..11).prop_flat_map(|n| {
        // v ranges over the other n - 1 vertices: no loops, nothing rejected.
        let edge = (0..n, 0..n - 1, -3i64..50)
            .prop_map(|(u, v, w)| (u, if v >= u { v + 1 } else { v }, w));
        (Just(n), prop::collection::vec(edge, 0..30))
    })
}

/// Dense graphs whose weights take few distinct values in Muri's range (efficiencies
/// scaled by 10^6): many ties and many blossoms.
fn dense_ties() -> impl Strategy<Value = (usize, Vec<(usize, usize, i64)>)> {
    (2usize..10).prop_flat_map(|n| {
        let pairs: Vec<(usize, usize)> = (0..n)
            .flat_map(|u| (u + 1..n).map(move |v| (u, v)))
            .collect();
        let k = pairs.len();
        (
            Just(n),
            prop::collection::vec(
                prop::sample::select(vec![0i64, 379_860, 396_775, 405_075, 434_985]),
                k,
            )
            .prop_map(move |ws| pairs.iter().zip(ws).map(|(&(u, v), w)| (u, v, w)).collect()),
        )
    })
}

/// `integer-blossom` 1.2.1, which apiary used first, never returned on this graph
/// (Muri's weights for four jobs of the Philly sample).
#[test]
fn a_graph_that_hung_the_old_solver() {
    let e = [
        (0, 1, 396_775),
        (0, 2, 405_075),
        (0, 3, 396_775),
        (1, 2, 434_985),
        (1, 3, 379_860),
        (2, 3, 434_985),
    ];
    let m = max_weight_matching(4, &e).unwrap();
    assert_eq!(m.weight, brute_force(4, &e).unwrap());
    assert_eq!(m.weight, 396_775 + 434_985);
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

    #[test]
    fn blossom_is_optimal_on_dense_graphs_with_ties((n, edges) in dense_ties()) {
        let m = max_weight_matching(n, &edges).unwrap();
        prop_assert_eq!(m.weight, brute_force(n, &edges).unwrap());
    }

    #[test]
    fn a_reused_solver_matches_a_fresh_one(gs in prop::collection::vec(graph(), 1..6)) {
        let mut solver = Blossom::new();
        for (n, edges) in &gs {
            prop_assert_eq!(
                max_weight_matching_with(&mut solver, *n, edges).unwrap(),
                max_weight_matching(*n, edges).unwrap()
            );
        }
    }
}
