//! The scheduler, the typical pods and the fill order, worked by hand; and the
//! invariants of shared GPUs under every policy on random clusters and pods.

use apiary_model::share::{GpuNode, MILLI, Pod};
use apiary_share::experiment::fill_order;
use apiary_share::{ByArrived, Mode, Outcome, Prepared, Scheduler, build, run, typical_pods};
use proptest::prelude::*;

fn pod(name: &str, cpu: u32, num_gpu: u8, gpu_milli: u32, spec: &[&str]) -> Pod {
    Pod {
        name: name.into(),
        cpu_milli: cpu,
        mem_mib: 1024,
        num_gpu,
        gpu_milli,
        gpu_spec: spec.iter().map(|s| (*s).into()).collect(),
        qos: None,
        creation: None,
        deletion: None,
    }
}

fn gpu_node(name: &str, gpus: u8, ty: &str) -> GpuNode {
    GpuNode {
        name: name.into(),
        cpu_milli: 32_000,
        mem_mib: 65_536,
        gpus,
        gpu_type: ty.into(),
    }
}

/// `policy` over `pods` on `nodes` in `mode`, seed 0, typical pods from the pods.
fn outcome(nodes: &[GpuNode], pods: &[Pod], policy: &str, mode: Mode) -> Outcome {
    let prep = Prepared::new(nodes, pods).unwrap();
    let typical = apiary_share::workload_typical(&prep, 95.0);
    let p = build(policy, &Default::default()).unwrap();
    run(&prep, pods, typical, p, mode, 0).unwrap()
}

#[test]
fn typical_pods_cover_the_popularity_with_the_commonest_shapes_first() {
    let pods: Vec<Pod> = ["a", "a", "a", "b", "b", "c"]
        .iter()
        .enumerate()
        .map(|(i, k)| match *k {
            "a" => pod(&format!("p{i}"), 4000, 1, 500, &[]),
            "b" => pod(&format!("p{i}"), 8000, 1, 1000, &[]),
            _ => pod(&format!("p{i}"), 2000, 0, 0, &[]),
        })
        .collect();
    let prep = Prepared::new(&[gpu_node("n", 2, "T4")], &pods).unwrap();
    let d: Vec<_> = prep.pods.iter().map(|r| r.demand).collect();
    // 80 % of 6 pods is 4.8: a (3) and b (2) cover it, shares renormalised to 3:2.
    let t = typical_pods(&d, &prep.types, 80.0);
    assert_eq!(t.len(), 2);
    assert_eq!((t[0].demand.milli, t[0].freq), (500, 0.6));
    assert_eq!((t[1].demand.milli, t[1].freq), (1000, 0.4));
    // 95 % needs all three.
    assert_eq!(typical_pods(&d, &prep.types, 95.0).len(), 3);
    // Equal counts: the larger CPU first, as FGD sorts.
    let t = typical_pods(&d[2..5], &prep.types, 100.0);
    assert_eq!(t[0].demand.cpu, 8000);
}

#[test]
fn ties_go_to_the_seeded_node_order_and_release_restores_the_node() {
    let nodes: Vec<GpuNode> = (0..4)
        .map(|i| gpu_node(&format!("n{i}"), 2, "T4"))
        .collect();
    let pods = vec![pod("p", 4000, 1, 500, &[])];
    let prep = Prepared::new(&nodes, &pods).unwrap();
    let typical = apiary_share::workload_typical(&prep, 95.0);
    // Four idle nodes tie under bestfit; two seeds may order them differently, and
    // each seed always picks the same one.
    let first = |seed| {
        let mut s = Scheduler::new(
            &prep,
            typical.clone(),
            build("bestfit", &Default::default()).unwrap(),
            seed,
        );
        s.place(&prep.pods[0]).unwrap().node
    };
    assert_eq!(first(3), first(3));
    let picks: std::collections::BTreeSet<u32> = (0..16).map(first).collect();
    assert!(picks.len() > 1, "one node for every seed: {picks:?}");
    let mut s = Scheduler::new(
        &prep,
        typical,
        build("fgd", &Default::default()).unwrap(),
        0,
    );
    let before = s.nodes().to_vec();
    let at = s.place(&prep.pods[0]).unwrap();
    assert_eq!(s.used_milli(), 500);
    assert_eq!(s.nodes()[at.node as usize].affinity[0], 1);
    s.release(&prep.pods[0], &at);
    assert_eq!(s.nodes(), &before[..]);
    assert_eq!(s.used_milli(), 0);
}

#[test]
fn fill_trims_or_extends_the_workload_to_the_ratio() {
    // Two GPUs; pods of 1000 each: four pods are 2x capacity, trimmed to 1.3x = 2600,
    // which leaves two (2000); one pod is 0.5x, extended until the next would pass 2600.
    let many: Vec<Pod> = (0..4)
        .map(|i| pod(&format!("p{i}"), 1000, 1, 1000, &[]))
        .collect();
    let order = fill_order(&many, 2, 1.3, 1);
    assert_eq!(order.len(), 2);
    let one = vec![pod("solo", 1000, 1, 1000, &[])];
    assert_eq!(fill_order(&one, 2, 1.3, 1), vec![0, 0]);
    // Half-GPU pods: 1.3 x 2000 = 2600 takes five (2500).
    let half = vec![pod("h", 1000, 1, 500, &[])];
    assert_eq!(fill_order(&half, 2, 1.3, 1).len(), 5);
}

#[test]
fn replay_frees_gpus_at_deletion_times() {
    let nodes = vec![gpu_node("n", 1, "T4")];
    let mut a = pod("a", 1000, 1, 1000, &[]);
    let mut b = pod("b", 1000, 1, 1000, &[]);
    (a.creation, a.deletion) = (Some(0), Some(10));
    (b.creation, b.deletion) = (Some(5), Some(20));
    let mut c = pod("c", 1000, 1, 1000, &[]);
    (c.creation, c.deletion) = (Some(10), None);
    let pods = vec![a, b, c];
    let o = outcome(&nodes, &pods, "fgd", Mode::Replay);
    // a runs; b finds the one GPU taken; a leaves at 10 and c takes it; b's deletion
    // at 20 frees nothing.
    let placed: Vec<bool> = o.arrivals.iter().map(|x| x.placed.is_some()).collect();
    assert_eq!(placed, [true, false, true]);
    let used: Vec<i64> = o.steps.iter().map(|s| s.used_milli).collect();
    assert_eq!(used, [1000, 1000, 0, 1000, 1000]);
}

#[test]
fn curves_bucket_by_arrived_percent() {
    // One GPU, four quarter-GPU pods: arrivals at 25, 50, 75, 100 %, all placed.
    let nodes = vec![gpu_node("n", 1, "T4")];
    let pods: Vec<Pod> = (0..4)
        .map(|i| pod(&format!("q{i}"), 1000, 1, 250, &[]))
        .collect();
    let o = outcome(&nodes, &pods, "bestfit", Mode::Fill(1.0));
    let b = ByArrived::of(&o);
    assert_eq!(b.alloc_at(100), Some(100.0));
    assert_eq!(b.alloc_at(50), Some(50.0));
    // 24 % has no event of its own and takes the 25 % one beside it; 10 % has none near.
    assert_eq!(b.alloc_at(24), Some(25.0));
    assert_eq!(b.alloc_at(10), None);
}

fn arb_node() -> impl Strategy<Value = (u8, u8, u32)> {
    (0u8..=8, 0u8..3, 4u32..=64)
}

fn arb_pod() -> impl Strategy<Value = (u32, u8, u32, u8)> {
    (1u32..=16, 0u8..=4, 1u32..=1000, 0u8..4)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// No GPU gives more than 1000, no node more CPU or memory than it has, a pod runs
    /// only on a type it allows, every arrival is placed or counted, and releasing
    /// everything leaves the cluster as it was.
    #[test]
    fn sharing_invariants_hold_under_every_policy(
        nodes in prop::collection::vec(arb_node(), 1..12),
        pods in prop::collection::vec(arb_pod(), 1..60),
        seed in 0u64..1000,
    ) {
        let tys = ["T4", "P100", "G2"];
        let nodes: Vec<GpuNode> = nodes.iter().enumerate().map(|(i, &(g, t, cpu))| GpuNode {
            name: format!("n{i}").into(),
            cpu_milli: cpu * 1000,
            mem_mib: 32_768,
            gpus: g,
            gpu_type: if g == 0 { "".into() } else { tys[usize::from(t)].into() },
        }).collect();
        let pods: Vec<Pod> = pods.iter().enumerate().map(|(i, &(cpu, n, milli, spec))| {
            let milli = if n == 1 { milli } else { MILLI };
            let spec: &[&str] = match spec { 0 | 1 => &[], 2 => &["T4"], _ => &["P100", "G2"] };
            pod(&format!("p{i}"), cpu * 1000, n, if n == 0 { 0 } else { milli }, spec)
        }).collect();
        let prep = Prepared::new(&nodes, &pods).unwrap();
        let typical = apiary_share::workload_typical(&prep, 95.0);
        for policy in apiary_share::POLICIES.names() {
            let mut s = Scheduler::new(&prep, typical.clone(), build(policy, &Default::default()).unwrap(), seed);
            let empty = s.nodes().to_vec();
            let mut placed = Vec::new();
            let mut used = 0i64;
            for (i, r) in prep.pods.iter().enumerate() {
                if let Some(at) = s.place(r) {
                    let n = &nodes[at.node as usize];
                    prop_assert!(pods[i].accepts_type(&n.gpu_type) || pods[i].num_gpu == 0, "{policy}: type");
                    prop_assert_eq!(at.pick.gpus().len(), usize::from(pods[i].num_gpu));
                    used += pods[i].total_gpu_milli() as i64;
                    placed.push((i, at));
                }
                for (k, n) in s.nodes().iter().enumerate() {
                    prop_assert!(n.cpu_left >= 0 && n.mem_left >= 0, "{policy}: node {k} over");
                    prop_assert!(n.left().iter().all(|&x| (0..=1000).contains(&x)), "{policy}: GPU over");
                }
                prop_assert_eq!(s.used_milli(), used);
            }
            for (i, at) in placed.iter().rev() {
                s.release(&prep.pods[*i], at);
            }
            prop_assert_eq!(s.nodes(), &empty[..]);
            prop_assert!(s.frag_milli().abs() < 1e-6 || (s.frag_milli() - Scheduler::new(&prep, typical.clone(), build(policy, &Default::default()).unwrap(), seed).frag_milli()).abs() < 1e-6);
        }
    }
}

#[test]
fn replay_reports_the_cluster_at_the_end_of_each_hour() {
    // Two GPUs. a (one GPU) from 0 to 2 h; b (one GPU) from 1.5 h to 3 h.
    let nodes = vec![gpu_node("n", 2, "T4")];
    let mut a = pod("a", 1000, 1, 1000, &[]);
    let mut b = pod("b", 1000, 1, 1000, &[]);
    (a.creation, a.deletion) = (Some(0), Some(7200));
    (b.creation, b.deletion) = (Some(5400), Some(10_800));
    let pods = vec![a, b];
    let o = outcome(&nodes, &pods, "bestfit", Mode::Replay);
    // End of hour 0: a alone (50 %); hour 1: a and b (100 %); hour 2: a left at 2 h,
    // b runs (50 %); hour 3: b left at 3 h (0 %).
    assert_eq!(
        apiary_share::ByHour::of(&o).alloc_pct,
        [50.0, 100.0, 50.0, 0.0]
    );
}

#[test]
fn states_set_from_outside_are_scored_and_measured_as_placements_leave_them() {
    // The live service sets nodes to what they are, rather than placing every pod
    // here: a node set to a state must score and measure as if placements made it.
    let nodes = [gpu_node("n0", 2, "T4"), gpu_node("n1", 2, "T4")];
    let pods = vec![
        pod("half", 4000, 1, 500, &[]),
        pod("whole", 4000, 1, 1000, &[]),
    ];
    let prep = Prepared::new(&nodes, &pods).unwrap();
    let typical = apiary_share::workload_typical(&prep, 95.0);
    let placed = || {
        Scheduler::new(
            &prep,
            typical.clone(),
            build("fgd", &Default::default()).unwrap(),
            0,
        )
    };
    let mut by_placing = placed();
    let at = by_placing.place(&prep.pods[0]).unwrap();
    let mut by_setting = placed();
    by_setting.set_node(at.node as usize, by_placing.nodes()[at.node as usize]);
    assert_eq!(by_setting.nodes(), by_placing.nodes());
    assert_eq!(by_setting.used_milli(), 500);
    assert_eq!(by_setting.frag_milli(), by_placing.frag_milli());
    // A half GPU left on n0 is fragmented for the whole-GPU shape (half the shapes):
    // 500 x 0.5 = 250 thousandths.
    assert_eq!(by_setting.frag_milli(), 250.0);
    // FGD puts the next half beside the first, on the same GPU, in both.
    let a = by_placing.place(&prep.pods[0]).unwrap();
    let b = by_setting.place(&prep.pods[0]).unwrap();
    assert_eq!((a.node, a.pick.gpus()), (at.node, at.pick.gpus()));
    assert_eq!((b.node, b.pick.gpus()), (at.node, at.pick.gpus()));
    // With only halves typical, a half GPU left is not fragmented at all.
    let halves = apiary_share::typical_of_counts([(prep.pods[0].demand, 7)], &prep.types, 95.0);
    assert_eq!(halves.len(), 1);
    assert_eq!(halves[0].freq, 1.0);
    let mut s = placed();
    s.place(&prep.pods[0]).unwrap();
    s.set_typical(halves);
    assert_eq!(s.frag_milli(), 0.0);
}
