//! FGD's expected results (its artifact's `expected_results`, in
//! `../shared/traces/alibaba/fgd-expected/`): on each of the four shared workloads,
//! each policy's allocation ratio at 100 % arrived load, averaged over seeds 42-51 of
//! `--mode fill:1.3`, lies within half a point of the artifact's mean. Seeds are ours,
//! not Go's `math/rand`, so single runs differ; the means must not.

use apiary_share::{ByArrived, Mode, Prepared, build, run, workload_typical};
use std::collections::BTreeMap;
use std::path::PathBuf;

fn shared() -> Option<PathBuf> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/traces/alibaba");
    if p.join("fgd-expected/summary_mean_over_seeds.csv").is_file() {
        return Some(p);
    }
    assert!(
        std::env::var("CI").is_err(),
        "{} missing under CI",
        p.display()
    );
    eprintln!("skipping: {} not present", p.display());
    None
}

/// (policy as the artifact names it) -> mean allocation % at 100 % arrived.
fn expected(dir: &std::path::Path, workload: &str) -> BTreeMap<String, f64> {
    let text =
        std::fs::read_to_string(dir.join("fgd-expected/summary_mean_over_seeds.csv")).unwrap();
    let mut lines = text.lines();
    let head: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |n: &str| head.iter().position(|c| *c == n).unwrap();
    let (metric, wl, pol, at100) = (
        col("metric"),
        col("workload"),
        col("sc_policy"),
        col("mean_at_100"),
    );
    lines
        .map(|l| l.split(',').collect::<Vec<_>>())
        .filter(|r| r[metric] == "alloc_pct" && r[wl] == format!("openb_pod_list_{workload}"))
        .map(|r| (r[pol].to_string(), r[at100].parse().unwrap()))
        .collect()
}

const POLICIES: [(&str, &str); 6] = [
    ("01-Random", "random"),
    ("02-DotProd", "dotprod"),
    ("03-GpuClustering", "gpu-clustering"),
    ("04-GpuPacking", "gpu-packing"),
    ("05-BestFit", "bestfit"),
    ("06-FGD", "fgd"),
];

fn check(workload: &str) {
    let Some(dir) = shared() else { return };
    let want = expected(&dir, workload);
    assert_eq!(want.len(), 6, "six policies expected for {workload}");
    let data = dir.join("gpu-v2023");
    let nodes =
        apiary_trace::openb::read_nodes(&data.join("openb_node_list_gpu_node.csv")).unwrap();
    let pods = apiary_trace::openb::read_pods(&data.join(format!("openb_pod_list_{workload}.csv")))
        .unwrap();
    let prep = Prepared::new(&nodes, &pods).unwrap();
    let typical = workload_typical(&prep, 95.0);
    let mut report = Vec::new();
    for (theirs, ours) in POLICIES {
        let mut sum = 0.0;
        for seed in 42..52 {
            let policy = build(ours, &Default::default()).unwrap();
            let o = run(&prep, &pods, typical.clone(), policy, Mode::Fill(1.3), seed).unwrap();
            sum += ByArrived::of(&o).alloc_at(100).unwrap();
        }
        let got = sum / 10.0;
        report.push(format!("{ours}: {got:.2} (FGD {:.2})", want[theirs]));
        assert!(
            (got - want[theirs]).abs() <= 0.5,
            "{workload}: {}",
            report.join(", ")
        );
    }
    eprintln!("{workload}: {}", report.join(", "));
}

#[test]
fn default_workload_matches_fgd() {
    check("default");
}

#[test]
fn gpushare100_matches_fgd() {
    check("gpushare100");
}

#[test]
fn gpuspec33_matches_fgd() {
    check("gpuspec33");
}

#[test]
fn multigpu50_matches_fgd() {
    check("multigpu50");
}
