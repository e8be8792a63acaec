//! collectives.md §2.4's test vectors: every exact `x*`, and the closed-form
//! comparisons of its allreduce table.

use apiary_comm::{Bandwidths, Collective, Frac, Topology, optimum, preset};

fn x(spec: &str) -> Frac {
    optimum(&preset(spec).unwrap_or_else(|e| panic!("{spec}: {e}"))).x_star
}

#[test]
fn rings_complete_graphs_stars_and_tori() {
    assert_eq!(x("ring:4"), Frac::int(3));
    assert_eq!(x("ring:5"), Frac::int(4));
    assert_eq!(x("bring:4"), Frac::new(3, 2));
    assert_eq!(x("bring:6"), Frac::new(5, 2));
    assert_eq!(x("bring:6:3"), Frac::new(5, 6), "(n-1)/(2b)");
    assert_eq!(x("complete:4"), Frac::int(1));
    assert_eq!(x("complete:5"), Frac::int(1));
    assert_eq!(x("complete:5:4"), Frac::new(1, 4), "1/b");
    assert_eq!(x("star:4"), Frac::int(3));
    assert_eq!(x("star:8"), Frac::int(7));
    assert_eq!(x("torus:3x3"), Frac::int(2));
    assert_eq!(x("triangle"), Frac::int(1));
}

#[test]
fn triangle_bottleneck_is_the_cut_around_a_and_b() {
    let t = preset("triangle").unwrap();
    let o = optimum(&t);
    let names: Vec<&str> = o
        .cut
        .iter()
        .map(|&i| t.nodes()[i as usize].name.as_str())
        .collect();
    // Either side-2 cut has ratio 1; {a, b} sends 2 units out (b–c 1, a–c 1).
    assert_eq!(o.cut_compute, 2);
    assert_eq!(o.cut_bandwidth, Frac::int(2));
    assert_eq!(names.len(), 2, "{names:?}");
}

#[test]
fn leaf_spine_binds_on_the_uplink_or_the_gpu_ingress() {
    assert_eq!(x("leaf-spine:2:2:10:5"), Frac::new(2, 5));
    assert_eq!(x("leaf-spine:2:2:10:20"), Frac::new(3, 10));
}

#[test]
fn dgx1_matches_sccl_bound() {
    assert_eq!(x("dgx1:1"), Frac::new(7, 6));
    assert_eq!(x("dgx1"), Frac::new(7, 150), "25 GB/s per NVLink");
}

#[test]
fn dgx_boxes_match_the_table() {
    assert_eq!(x("dgx-h100:1"), Frac::new(7, 450));
    assert_eq!(x("dgx-a100:2"), Frac::new(3, 65));
    assert_eq!(x("dgx-a100:4"), Frac::new(3, 25));
    assert_eq!(x("dgx-h100:2"), Frac::new(3, 100));
    assert_eq!(x("dgx-h100:4"), Frac::new(31, 500));
    assert_eq!(x("dgx-h100:8"), Frac::new(7, 50));
}

#[test]
fn a100_split_gives_k_13_and_u_three_fifths() {
    let o = optimum(&preset("dgx-a100:2").unwrap());
    assert_eq!((o.k, o.u), (13, Frac::new(3, 5)));
    assert_eq!(o.u.over(Frac::int(o.k as u128)), o.x_star, "x* = U/k");
}

#[test]
fn mi250_matches_forestcoll_examples() {
    // ForestColl's own examples: 1×16 MI250 342.9 GB/s (k = 3), 2×16 354.1 GB/s (k = 83).
    let one = optimum(&preset("mi250:1").unwrap());
    assert_eq!((one.x_star, one.k), (Frac::new(7, 150), 3));
    let two = optimum(&preset("mi250:2").unwrap());
    assert_eq!((two.x_star, two.k), (Frac::new(15, 166), 83));
    assert!((32.0 / two.x_star.to_f64() - 354.1).abs() < 0.05);
}

#[test]
fn dgx_formula_holds_on_every_fabric() {
    // x* = max((n·g − 1)/(B_nv + B_nic), (n − 1)/B_nic) for n ≥ 2.
    for &(n, g, nv, nic) in &[
        (2u32, 8u32, 300u128, 25u128),
        (3, 4, 100, 50),
        (5, 2, 40, 10),
        (4, 8, 450, 50),
    ] {
        let f = Frac::new((n * g - 1) as u128, nv + nic).max(Frac::new(n as u128 - 1, nic));
        for fabric in ["rails", "rails2", "single", "leaf2", "leaf1"] {
            let spec = format!("dgx:{n}:{g}:{nv}:{nic}:{fabric}");
            assert_eq!(x(&spec), f, "{spec}");
        }
    }
}

#[test]
fn oversubscribed_leaves_bind_on_the_uplink() {
    // 4 boxes of 8, two per leaf. At 2:1 the cut around one leaf's 16 GPUs (16/400) is
    // still below the single-GPU cut 31/500; at 4:1 it binds: 16/(8·50·2/4).
    assert_eq!(x("dgx-h100:4:leaf2/2"), Frac::new(31, 500));
    assert_eq!(x("dgx-h100:4:leaf2/4"), Frac::new(16, 200));
}

#[test]
fn allreduce_comparison_table_for_two_h100_and_a100_boxes() {
    for (spec, want) in [
        ("dgx-h100:2", [266.7, 257.1, 156.5, 213.3]),
        ("dgx-a100:2", [173.3, 171.4, 92.3, 106.7]),
    ] {
        let t = preset(spec).unwrap();
        let bw = Bandwidths::of(&t);
        let opt = 1.0 / bw.seconds_per_gb(Collective::Allreduce, t.n()).to_f64();
        let shape = t.shape().unwrap();
        let got = [
            opt,
            shape.hierarchical(true).algbw,
            shape.hierarchical(false).algbw,
            shape.ring().algbw,
        ];
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() < 0.05, "{spec}: {got:?} vs {want:?}");
        }
    }
}

#[test]
fn te_ccl_mesh_from_a_file() {
    let json = r#"{
      "name": "te-ccl mesh",
      "compute": ["0", "1", "2", "3"],
      "links": [
        {"from": "0", "to": "1", "bw": 100}, {"from": "0", "to": "2", "bw": 100},
        {"from": "1", "to": "2", "bw": 100}, {"from": "1", "to": "3", "bw": 100},
        {"from": "2", "to": "3", "bw": 100}
      ]
    }"#;
    let t = Topology::parse(json, "mesh.json").unwrap();
    assert_eq!(optimum(&t).x_star, Frac::new(3, 200));
}

#[test]
fn asymmetric_topologies_solve_reduce_scatter_on_the_reversed_graph() {
    let toml = r#"
compute = ["a", "b", "c"]
links = [
  { from = "a", to = "b", bw = 2, directed = true },
  { from = "b", to = "c", bw = 1, directed = true },
  { from = "c", to = "a", bw = 1, directed = true },
  { from = "b", to = "a", bw = 1, directed = true },
]
"#;
    let t = Topology::parse(toml, "asym.toml").unwrap();
    assert!(!t.is_symmetric());
    let bw = Bandwidths::of(&t);
    assert_eq!(bw.allgather.x_star, optimum(&t).x_star);
    assert_eq!(bw.reduce_scatter.x_star, optimum(&t.reversed()).x_star);
}

#[test]
fn committed_topology_files_load() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/topologies");
    let ex = Topology::read(&dir.join("example.toml")).unwrap();
    // The direct gpu0–gpu1 link does not help gpu2: everything but gpu2 sends 2 shards
    // through the switch's 300 GB/s.
    assert_eq!(optimum(&ex).x_star, Frac::new(2, 300));
    assert!(ex.shape().is_some());
    let h = Topology::read(&dir.join("dgx-h100x2.json")).unwrap();
    assert_eq!(optimum(&h).x_star, Frac::new(3, 100));
}
