//! The all-to-all LP against collectives.md §2.4's τ column (checked there with HiGHS).

use apiary_comm::alltoall::alltoall;
use apiary_comm::preset;

fn tau(spec: &str) -> f64 {
    alltoall(&preset(spec).unwrap())
        .unwrap_or_else(|e| panic!("{spec}: {e}"))
        .tau
}

#[test]
fn tau_matches_the_closed_forms_and_the_table() {
    for (spec, want) in [
        ("ring:4", 6.0), // N(N−1)/(2b)
        ("ring:5", 10.0),
        ("bring:4", 2.0), // n²/(8b), even n
        ("bring:6", 4.5),
        ("complete:4", 1.0), // 1/b
        ("complete:5", 1.0),
        ("star:4", 3.0), // (n−1)/b
        ("star:8", 7.0),
        ("torus:3x3", 3.0),
        ("triangle", 1.0),
        ("leaf-spine:2:2:10:5", 0.8),
        ("leaf-spine:2:2:10:20", 0.3),
        ("dgx-h100:1", 7.0 / 450.0),
        ("dgx-a100:2", 0.32),
        ("dgx-h100:2", 0.16),
    ] {
        let got = tau(spec);
        assert!(
            (got - want).abs() < 1e-6 * want.max(1.0),
            "{spec}: {got} vs {want}"
        );
    }
}
