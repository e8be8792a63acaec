//! FGD's measure of fragmentation. A workload's "typical pods" are its most common pod
//! shapes, enough of them to cover 95 % of its pods; a node's idle GPU thousandths are
//! fragmented for a shape when that shape cannot use them there, and a node's
//! fragmentation is the expectation over the typical shapes. FGD places each pod where
//! that expectation grows least; the fill experiment reports it for the whole cluster.
//!
//! Everything follows `pkg/utils/frag.go` of FGD's artifact (`GetTypicalPods`,
//! `GetNodePodFrag`, `NodeGpuShareFragAmount`), including two choices worth knowing: a
//! CPU-only shape counts every idle GPU thousandth of the node as fragmented, whether or
//! not the node has the CPU for it, and a shape a node can host counts the GPUs too small
//! for it.

use crate::cluster::{Demand, NodeState, Types};
use std::collections::HashMap;

/// One typical pod shape and its share of the typical pods (shares sum to one).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Typical {
    /// The shape.
    pub demand: Demand,
    /// Its share.
    pub freq: f64,
}

/// The commonest shapes of `demands`, covering at least `popularity` percent of them,
/// with their shares renormalised over the shapes kept. Shapes of equal count go larger
/// first (CPU, then GPU thousandths, GPU count, type constraint), as FGD sorts them.
pub fn typical_pods(demands: &[Demand], types: &Types, popularity: f64) -> Vec<Typical> {
    let mut counts: HashMap<Demand, u64, foldhash::fast::FixedState> = HashMap::default();
    for d in demands {
        *counts.entry(*d).or_default() += 1;
    }
    let list: Vec<(Demand, u64)> = counts.into_iter().collect();
    typical_of_counts(list, types, popularity)
}

/// [`typical_pods`] of a workload given as shapes and how many pods have each.
pub fn typical_of_counts(
    counts: impl IntoIterator<Item = (Demand, u64)>,
    types: &Types,
    popularity: f64,
) -> Vec<Typical> {
    let mut list: Vec<(Demand, f64)> = counts
        .into_iter()
        .filter(|&(_, n)| n > 0)
        .map(|(d, n)| (d, n as f64))
        .collect();
    let total: f64 = list.iter().map(|&(_, n)| n).sum();
    list.sort_by(|a, b| {
        b.1.total_cmp(&a.1).then_with(|| {
            let key = |d: &Demand| (d.cpu, d.milli, d.num);
            key(&b.0).cmp(&key(&a.0)).then_with(|| {
                types.specs[usize::from(b.0.spec)].cmp(&types.specs[usize::from(a.0.spec)])
            })
        })
    });
    let expected = popularity * total / 100.0;
    let mut cum = 0.0;
    let mut kept = 0;
    while cum < expected && kept < list.len() {
        cum += list[kept].1;
        kept += 1;
    }
    list.truncate(kept);
    list.into_iter()
        .map(|(demand, n)| Typical {
            demand,
            freq: n / cum,
        })
        .collect()
}

/// The seven ways a node can stand to a shape (FGD's `FragRatioDataMap` order).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    LackBoth = 0,
    LackGpu = 1,
    Satisfied = 2,
    LackCpu = 3,
    CpuOnlySatisfied = 4,
    CpuOnlyLackCpu = 5,
    NoAccess = 6,
}

fn class(n: &NodeState, d: &Demand, types: &Types) -> Class {
    let cpu_ok = n.cpu_left >= d.cpu;
    if d.milli == 0 {
        return if cpu_ok {
            Class::CpuOnlySatisfied
        } else {
            Class::CpuOnlyLackCpu
        };
    }
    if !types.accessible(n.ty, d.spec) {
        return Class::NoAccess;
    }
    match (n.gpus_fit(d.milli, d.num.max(1)), cpu_ok) {
        (true, true) => Class::Satisfied,
        (true, false) => Class::LackCpu,
        (false, true) => Class::LackGpu,
        (false, false) => Class::LackBoth,
    }
}

/// Thousandths of `n`'s idle GPUs fragmented for the typical pods (FGD's
/// `NodeGpuShareFragAmountScore`): for a shape the node can host, its GPUs with less
/// left than the shape needs; for any other shape, all it has left.
pub fn node_frag(n: &NodeState, typical: &[Typical], types: &Types) -> f64 {
    let left = n.total_left();
    if left == 0 {
        return 0.0;
    }
    let mut data = [0.0f64; 7];
    for t in typical {
        match class(n, &t.demand, types) {
            Class::Satisfied => {
                let small: i64 = n
                    .left()
                    .iter()
                    .filter(|&&x| x < t.demand.milli)
                    .map(|&x| i64::from(x))
                    .sum();
                data[Class::LackGpu as usize] += t.freq * small as f64;
                data[Class::Satisfied as usize] += t.freq * (left - small) as f64;
            }
            c => data[c as usize] += t.freq * left as f64,
        }
    }
    data.iter()
        .enumerate()
        .filter(|&(i, _)| i != Class::Satisfied as usize)
        .map(|(_, v)| v)
        .sum()
}
