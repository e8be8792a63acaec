//! Each policy's score and pick on two small nodes, worked by hand from the artifact's
//! formulas.

use super::*;
use crate::cluster::{Demand, NodeState, Types};
use crate::typical::Typical;

fn types() -> Types {
    Types {
        names: vec!["".into(), "T4".into()],
        specs: vec![String::new()],
        masks: vec![u64::MAX],
    }
}

fn node(cpu_left: i64, left: &[i32]) -> NodeState {
    let mut gpu_left = [0; MAX_GPUS_PER_NODE];
    gpu_left[..left.len()].copy_from_slice(left);
    NodeState {
        cpu_left,
        cpu_cap: 64_000,
        mem_left: 262_144,
        gpu_left,
        gpus: left.len() as u8,
        ty: 1,
        affinity: [0; MAX_GPUS_PER_NODE + 1],
    }
}

/// Node A: idle, two free GPUs. Node B: one fractional pod on GPU 0 (500 left).
fn nodes() -> (NodeState, NodeState) {
    let a = node(64_000, &[1000, 1000]);
    let mut b = node(60_000, &[500, 1000]);
    b.affinity[0] = 1;
    (a, b)
}

const POD: Demand = Demand {
    cpu: 4000,
    milli: 460,
    num: 1,
    spec: 0,
};

fn score(policy: &str, n: &NodeState, typical: &[Typical]) -> i64 {
    let t = types();
    let cx = Context { types: &t, typical };
    build(policy, &Default::default())
        .unwrap()
        .score(n, &POD, &cx)
}

#[test]
fn bestfit_scores_what_is_left_after_the_pod() {
    let (a, b) = nodes();
    // B: 1 − (56000/128000 + 1040/8000)/2 = 0.71625; A: 1 − (60000/128000 + 1540/8000)/2.
    assert_eq!(score("bestfit", &b, &[]), 71);
    assert_eq!(score("bestfit", &a, &[]), 66);
}

#[test]
fn dotprod_scores_one_minus_half_the_dot_product() {
    let (a, b) = nodes();
    // B: 1 − (0.46875·0.03125 + 0.1875·0.0575)/2 = 0.98729; A: 1 − 0.03/2 = 0.985.
    assert_eq!(score("dotprod", &b, &[]), 98);
    assert_eq!(score("dotprod", &a, &[]), 98);
}

#[test]
fn gpu_packing_prefers_a_shared_gpu_then_used_nodes_then_idle_ones() {
    let (a, b) = nodes();
    // B: the pod fits GPU 0 (50 % left): 100 − 50/10. A: idle with 2 GPUs: 100/3 − 2.
    assert_eq!(score("gpu-packing", &b, &[]), 95);
    assert_eq!(score("gpu-packing", &a, &[]), 31);
    // Partly used, but the pod needs a free GPU: 100/2 − 1.
    let whole = Demand { milli: 1000, ..POD };
    let t = types();
    let cx = Context {
        types: &t,
        typical: &[],
    };
    let mut p = build("gpu-packing", &Default::default()).unwrap();
    assert_eq!(p.score(&b, &whole, &cx), 49);
}

#[test]
fn gpu_clustering_bands_by_the_kinds_of_pods_a_node_holds() {
    let (a, mut b) = nodes();
    // B holds only fractional pods: 25·(8000 − 1500)/8000 + 75 (integer arithmetic).
    assert_eq!(score("gpu-clustering", &b, &[]), 95);
    // A is idle: 25·6000/8000 + 25.
    assert_eq!(score("gpu-clustering", &a, &[]), 43);
    // B holding a one-GPU pod too: the pod's kind among others, 20 + 50.
    b.affinity[1] = 1;
    assert_eq!(score("gpu-clustering", &b, &[]), 70);
    // B holding only one-GPU pods: other kinds only, 20 + 0.
    b.affinity[0] = 0;
    assert_eq!(score("gpu-clustering", &b, &[]), 20);
}

#[test]
fn fgd_takes_the_gpu_and_node_that_fragment_least() {
    let (a, b) = nodes();
    let typical = [
        Typical {
            demand: POD,
            freq: 0.5,
        },
        Typical {
            demand: Demand {
                cpu: 8000,
                milli: 1000,
                ..POD
            },
            freq: 0.5,
        },
    ];
    // B before: for the whole-GPU shape, GPU 0's 500 are too small: 0.5·500 = 250.
    // On GPU 0 (40 left): 0.5·40 + 0.5·40 = 40, sigmoid((250 − 40)/1000)·100 = 55.
    // On GPU 1 (540 left): no free GPU for the whole-GPU shape, 0.5·1040 = 520 → 43.
    assert_eq!(score("fgd", &b, &typical), 55);
    // A before: 0; either GPU leaves 540 too small for a whole GPU: 0.5·540 → 43.
    assert_eq!(score("fgd", &a, &typical), 43);
    let t = types();
    let cx = Context {
        types: &t,
        typical: &typical,
    };
    let mut p = build("fgd", &Default::default()).unwrap();
    let mut rng = Rng::new(1);
    assert_eq!(p.pick(&b, &POD, &cx, &mut rng).gpus(), &[0]);
    assert_eq!(p.pick(&a, &POD, &cx, &mut rng).gpus(), &[0]);
}

#[test]
fn gpus_are_picked_best_fit_exclusive_or_at_random() {
    let (_, b) = nodes();
    assert_eq!(best_fit_gpu(&b, &POD).gpus(), &[0]);
    let two = Demand {
        milli: 1000,
        num: 2,
        ..POD
    };
    assert_eq!(
        exclusive_gpus(&node(0, &[1000, 300, 1000, 1000]), &two).gpus(),
        &[0, 2]
    );
    let t = types();
    let cx = Context {
        types: &t,
        typical: &[],
    };
    let mut random = build("random", &Default::default()).unwrap();
    let mut rng = Rng::new(7);
    let mut seen = [0; 2];
    for _ in 0..200 {
        seen[usize::from(random.pick(&b, &POD, &cx, &mut rng).gpus()[0])] += 1;
    }
    assert!(seen[0] > 60 && seen[1] > 60, "{seen:?}");
}
