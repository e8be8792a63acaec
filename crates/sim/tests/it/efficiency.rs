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
    j.scaling = Some(Scaling::new(vec![(1, 1.0), (2, 1.5)], 2).unwrap());
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
    assert!(out.ce.is_none());
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
        assert!(err.contains("job x has no throughput table"), "{err}");
        assert!(err.contains("itp-elasticflow"), "{err}");
    }
}
