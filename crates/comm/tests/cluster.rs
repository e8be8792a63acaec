//! Topologies induced by a placement on an apiary cluster: they equal the DGX presets
//! where the shapes agree, fair shares of NICs and uplinks give the hand-computed
//! bottlenecks, and placements with one signature have one optimum.

use apiary_comm::cluster::{parse_placement, placement_topology, signature};
use apiary_comm::{Frac, PlacementError, optimum, preset};
use apiary_model::{Cluster, ClusterSpec};
use proptest::prelude::*;

fn cluster(name: &str) -> Cluster {
    ClusterSpec::preset(name).unwrap().build().unwrap()
}

fn toml(text: &str) -> Cluster {
    ClusterSpec::from_toml_str(text, "test.toml")
        .unwrap()
        .build()
        .unwrap()
}

#[test]
fn two_full_dgx_nodes_are_the_dgx_preset_on_one_switch() {
    for (c, p) in [
        ("n4g8-A100", "dgx-a100:2:single"),
        ("n4g8-H100", "dgx-h100:2:single"),
    ] {
        let t = placement_topology(&cluster(c), &[(0, 8), (1, 8)]).unwrap();
        let d = preset(p).unwrap();
        assert_eq!(optimum(&t).x_star, optimum(&d).x_star, "{c} vs {p}");
        assert_eq!(t.shape(), d.shape(), "{c} vs {p}");
        assert_eq!(t.n(), 16);
    }
}

#[test]
fn a_one_node_placement_gets_an_nccl_ring_and_two_nodes_do_not() {
    let c = cluster("n2g8-A100");
    let x = apiary_comm::nccl::ring_graph(&placement_topology(&c, &[(1, 4)]).unwrap(), 2).unwrap();
    assert_eq!(x.matches("<gpu dev=").count(), 8);
    let two = placement_topology(&c, &[(0, 4), (1, 4)]).unwrap();
    assert!(apiary_comm::nccl::ring_graph(&two, 2).is_err());
}

#[test]
fn one_node_is_limited_by_each_gpus_link() {
    // Every GPU but one must reach the last through its NVLink: x* = (g − 1) / B_nv.
    let t = placement_topology(&cluster("n2g8-A100"), &[(1, 4)]).unwrap();
    assert_eq!(optimum(&t).x_star, Frac::new(3, 300));
    let t = placement_topology(&cluster("n2g8-K80"), &[(0, 8)]).unwrap();
    assert_eq!(optimum(&t).x_star, Frac::new(7, 16));
}

#[test]
fn spanning_racks_uses_the_uplink_share() {
    // Racks of two 8-GPU A100 nodes (16 GPUs) with 800 Gbit/s uplinks: a job with 8 GPUs
    // in each rack gets half of each uplink, 50 GB/s, below its NICs' 8 × 25 GB/s. So
    // the 8 GPUs of one rack send out through 50 GB/s: x* = 8/50.
    let c = toml(
        r#"
name = "oversubscribed"
[[switches]]
count = 2
uplink_gbps = 800
[[switches.nodes]]
count = 2
gpus = 8
gpu_type = "A100"
"#,
    );
    let t = placement_topology(&c, &[(0, 8), (2, 8)]).unwrap();
    let o = optimum(&t);
    assert_eq!(o.x_star, Frac::new(8, 50));
    assert_eq!(o.cut_compute, 8);
    // Inside one rack the uplink does not matter: the limit is each GPU's NVLink and
    // NIC share, 15 shards into one GPU through 300 + 25 GB/s.
    let t = placement_topology(&c, &[(0, 8), (1, 8)]).unwrap();
    assert_eq!(optimum(&t).x_star, Frac::new(15, 325));
    // Without an uplink bandwidth the spine is non-blocking: same as one rack.
    let c = cluster("n64g8-A100");
    let across = placement_topology(&c, &[(0, 8), (40, 8)]).unwrap();
    let within = placement_topology(&c, &[(0, 8), (1, 8)]).unwrap();
    assert_eq!(optimum(&across).x_star, optimum(&within).x_star);
}

#[test]
fn a_partly_used_node_gets_its_gpus_share_of_the_nic() {
    // 2 GPUs on one node and 6 on another: the 6 GPUs' shards must all enter the
    // 2-GPU node through its share of the NIC, 2 × 25 GB/s.
    let c = cluster("n4g8-A100");
    let t = placement_topology(&c, &[(0, 2), (1, 6)]).unwrap();
    let o = optimum(&t);
    assert_eq!((o.x_star, o.cut_compute), (Frac::new(6, 50), 6));
    assert_eq!(t.shape(), None, "uneven boxes have no closed-form shape");
    // One GPU alone on a node has no node switch, only its NIC share.
    let t = placement_topology(&c, &[(0, 1), (1, 8)]).unwrap();
    assert_eq!(t.n(), 9);
    assert_eq!(optimum(&t).x_star, Frac::new(8, 25));
}

#[test]
fn bandwidths_from_the_spec_override_the_gpu_types() {
    let c = toml(
        r#"
name = "custom"
[[switches]]
[[switches.nodes]]
count = 2
gpus = 4
gpu_type = "T4"
intra_gbps = 32
nic_gbps = 50
"#,
    );
    // NIC 50 Gbit/s = 6.25 GB/s per node, 1.5625 per GPU: 4 GPUs through 6.25 GB/s.
    let t = placement_topology(&c, &[(0, 4), (1, 4)]).unwrap();
    assert_eq!(optimum(&t).x_star, Frac::new(4 * 8, 50));
    let t = placement_topology(&c, &[(0, 4)]).unwrap();
    assert_eq!(optimum(&t).x_star, Frac::new(3, 32));
}

#[test]
fn bad_placements_say_what_is_wrong() {
    let c = cluster("n4g8");
    let err = |p: &[(u32, u32)]| placement_topology(&c, p).unwrap_err().to_string();
    assert!(err(&[(4, 2)]).contains("no node '4'"), "{}", err(&[(4, 2)]));
    assert!(err(&[(0, 9)]).contains("'s0-n0' has 8 GPUs, the placement asks for 9"));
    assert!(err(&[(0, 2), (0, 2)]).contains("'s0-n0' appears twice"));
    assert!(err(&[(0, 1)]).contains("needs at least 2 compute nodes"));
    let parse = |t: &str| parse_placement(&c, t).unwrap_err().to_string();
    assert!(
        parse("0=8").contains("'0=8' has no ':GPUS'"),
        "{}",
        parse("0=8")
    );
    assert!(parse("0:x").contains("'x' is not a GPU count"));
    assert!(parse("nine:1").contains("no node 'nine'"));
    assert!(parse("").contains("no nodes"));
    assert_eq!(
        parse_placement(&c, "0:8, s0-n3:2").unwrap(),
        vec![(0, 8), (3, 2)]
    );
    // A cluster built in code with a bad bandwidth (files are checked when built).
    let mut bad = c.clone();
    bad.nodes[1].nic_gbps = Some(-1.0);
    assert!(matches!(
        placement_topology(&bad, &[(0, 4), (1, 4)]),
        Err(PlacementError::BadBandwidth {
            field: "nic_gbps",
            ..
        })
    ));
}

#[test]
fn cluster_files_reject_bad_bandwidths() {
    for (field, at) in [
        ("nic_gbps = 0", "switches[0].nodes[0].nic_gbps = 0"),
        ("intra_gbps = -5", "switches[0].nodes[0].intra_gbps = -5"),
    ] {
        let text = format!("name = \"x\"\n[[switches]]\n[[switches.nodes]]\ngpus = 8\n{field}\n");
        let e = ClusterSpec::from_toml_str(&text, "x.toml")
            .unwrap()
            .build()
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(at) && e.contains("must be a positive number"),
            "{e}"
        );
    }
    let text = "name = \"x\"\n[[switches]]\nuplink_gbps = nan\n[[switches.nodes]]\ngpus = 8\n";
    let e = ClusterSpec::from_toml_str(text, "x.toml")
        .unwrap()
        .build()
        .unwrap_err()
        .to_string();
    assert!(e.contains("switches[0].uplink_gbps = NaN"), "{e}");
}

/// Three racks of mixed nodes: two A100 racks (one oversubscribed) and a V100 rack.
fn mixed() -> Cluster {
    toml(
        r#"
name = "mixed"
[[switches]]
count = 2
uplink_gbps = 1600
[[switches.nodes]]
count = 3
gpus = 8
gpu_type = "A100"
[[switches]]
[[switches.nodes]]
count = 2
gpus = 4
gpu_type = "V100"
[[switches.nodes]]
gpus = 8
gpu_type = "V100"
"#,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    #[test]
    fn one_signature_one_optimum(
        a in proptest::collection::vec((0u32..9, 0u32..9), 1..5),
        b in proptest::collection::vec((0u32..9, 0u32..9), 1..5),
    ) {
        let c = mixed();
        let fit = |p: &[(u32, u32)]| -> Vec<(u32, u32)> {
            let mut seen = Vec::new();
            for &(n, g) in p {
                if !seen.iter().any(|q: &(u32, u32)| q.0 == n) {
                    seen.push((n, g.min(c.nodes[n as usize].gpus)));
                }
            }
            seen
        };
        let (a, b) = (fit(&a), fit(&b));
        let (Ok(ta), Ok(tb)) = (placement_topology(&c, &a), placement_topology(&c, &b)) else {
            return Ok(());
        };
        let (sa, sb) = (signature(&c, &a).unwrap(), signature(&c, &b).unwrap());
        if sa == sb {
            prop_assert_eq!(optimum(&ta).x_star, optimum(&tb).x_star);
        }
        // Reordering the parts changes nothing.
        let mut r = a.clone();
        r.reverse();
        prop_assert_eq!(&signature(&c, &r).unwrap(), &sa);
        // Swapping the two A100 racks and rotating nodes inside them renames the
        // topology: same signature, same optimum.
        let rename = |n: u32| match n {
            0..=5 => (n + 3) % 6 / 3 * 3 + (n + 1) % 3,
            n => n,
        };
        let m: Vec<(u32, u32)> = a.iter().map(|&(n, g)| (rename(n), g)).collect();
        prop_assert_eq!(signature(&c, &m).unwrap(), sa);
        prop_assert_eq!(optimum(&placement_topology(&c, &m).unwrap()).x_star, optimum(&ta).x_star);
    }
}

#[test]
fn isomorphic_placements_share_a_signature() {
    let c = mixed();
    let s = |p: &[(u32, u32)]| signature(&c, p).unwrap();
    // Nodes 0-2 in rack 0, 3-5 in rack 1 (same shape), 6-8 in rack 2 (V100).
    assert_eq!(s(&[(0, 8), (1, 4)]), s(&[(4, 4), (5, 8)]));
    assert_eq!(s(&[(0, 8), (3, 4)]), s(&[(1, 4), (5, 8)]));
    assert_ne!(
        s(&[(0, 8), (1, 4)]),
        s(&[(0, 8), (3, 4)]),
        "one rack vs two"
    );
    assert_ne!(s(&[(0, 4), (1, 4)]), s(&[(6, 4), (7, 4)]), "A100 vs V100");
    assert_ne!(
        s(&[(6, 4), (7, 4)]),
        s(&[(6, 4), (8, 4)]),
        "a 4-GPU node's NIC share vs an 8-GPU node's"
    );
}
