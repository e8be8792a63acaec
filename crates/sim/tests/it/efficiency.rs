//! ElasticFlow's cluster efficiency: each running job counts its speed-up over one GPU.

use apiary_model::{ClusterSpec, Job, Scaling};
use apiary_policy::{Params, registry};
use apiary_report::{Percentile, Summary};
use apiary_sim::{Config, DurationModel};

#[test]
fn cluster_efficiency_counts_speedup_over_one_gpu() {
    // One job that EDF runs on both GPUs of the node, where it is 1.5 times as fast as
    // on one: useful work is 1.5 of 2 GPUs for the whole run.
    let mut j = Job::new("a", 0, 1, 300_000);
    j.deadline = Some(1_000_000);
    j.extras_mut().scaling = Some(Scaling::new(vec![(1, 1.0), (2, 1.5)], 2).unwrap());
    let c = ClusterSpec::preset("n1g2").unwrap().build().unwrap();
    let mut p = registry::build("edf", &Params::default()).unwrap();
    let out = apiary_sim::run(
        c,
        vec![j],
        p.as_mut(),
        &DurationModel,
        &Config::default(),
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(out.jobs[0].finish, Some(200_000), "300 s of work at 1.5x");
    let s = Summary::of(&out, Percentile::NearestRank);
    assert_eq!(s.util_mean, 1.0);
    assert_eq!(s.ce_mean, Some(0.75));
    // Runs without throughput tables have no efficiency to report.
    let c = ClusterSpec::preset("n1g2").unwrap().build().unwrap();
    let mut p = registry::build("fifo", &Params::default()).unwrap();
    let plain = vec![Job::new("b", 0, 2, 10_000)];
    let out = apiary_sim::run(
        c,
        plain,
        p.as_mut(),
        &DurationModel,
        &Config::default(),
        &mut |_| {},
    )
    .unwrap();
    assert!(out.cluster_efficiency.is_none());
    assert_eq!(Summary::of(&out, Percentile::NearestRank).ce_mean, None);
}

#[test]
fn table_policies_name_what_a_trace_lacks() {
    for policy in ["edf", "elasticflow"] {
        let c = ClusterSpec::preset("n1g2").unwrap().build().unwrap();
        let mut p = registry::build(policy, &Params::default()).unwrap();
        let jobs = vec![Job::new("x", 0, 1, 1_000)];
        let err = apiary_sim::run(
            c,
            jobs,
            p.as_mut(),
            &DurationModel,
            &Config::default(),
            &mut |_| {},
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("reads a throughput table (scaling), which job x lacks"),
            "{err}"
        );
        assert!(err.contains("itp-elasticflow"), "{err}");
    }
}

/// ElasticFlow's greedy pass scores most levels by a short path and keeps scores the
/// timeline has not touched since. Debug builds (these tests) plan every score in
/// full as well and assert that both agree (`ElasticFlow::next_gpu_time`); this run is
/// loaded enough that jobs queue, best-effort jobs fill in and held scores are used.
#[test]
fn elasticflow_greedy_shortcuts_agree_with_full_plans() {
    if !cfg!(debug_assertions) {
        eprintln!("skipped: the check lives in debug assertions");
        return;
    }
    let opts = apiary_trace::efgen::EfGenOptions {
        jobs: 80,
        lam: 300.0,
        seed: 3,
        best_effort: 0.3,
        ..Default::default()
    };
    let tables = apiary_trace::elasticflow::Tables::builtin("A100").unwrap();
    let jobs = apiary_trace::efgen::generate(&opts, &tables).unwrap();
    let dir = std::env::temp_dir().join(format!("apiary-ef-greedy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("trace.csv");
    apiary_trace::efgen::write(&jobs, std::fs::File::create(&path).unwrap()).unwrap();
    let jobs = apiary_trace::read(&path, &Default::default()).unwrap().jobs;
    std::fs::remove_dir_all(&dir).ok();
    for slot in ["slot=60", "slot=240"] {
        let c = ClusterSpec::preset("n2g8").unwrap().build().unwrap();
        let mut p = registry::build("elasticflow", &Params::from_pairs([slot]).unwrap()).unwrap();
        let out = apiary_sim::run(
            c,
            jobs.clone(),
            p.as_mut(),
            &DurationModel,
            &Config::default(),
            &mut |_| {},
        )
        .unwrap();
        let finished = out.jobs.iter().filter(|j| j.finish.is_some()).count();
        assert!(
            (40..80).contains(&finished),
            "{slot}: {finished} of 80 finished"
        );
    }
}
