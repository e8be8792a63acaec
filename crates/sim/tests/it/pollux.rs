//! Pollux: adaptive jobs driven by the engine's agent stepping and the genetic search.

use apiary_model::{ClusterSpec, Job, RunOutcome};
use apiary_policy::{Params, registry};
use apiary_sim::{Config, DurationModel};
use std::path::Path;

fn workload() -> Vec<Job> {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/traces/pollux-workload-6.csv");
    apiary_trace::read(&path, &Default::default())
        .expect("pollux workload")
        .jobs
}

fn run(jobs: Vec<Job>, params: &[&str]) -> RunOutcome {
    let c = ClusterSpec::preset("n16g4").unwrap().build().unwrap();
    let p = Params::from_pairs(params.iter().copied()).unwrap();
    let mut pol = registry::build("pollux", &p).unwrap();
    apiary_sim::run(
        c,
        jobs,
        pol.as_mut(),
        &DurationModel,
        &Config::default(),
        &mut |_| {},
    )
    .unwrap()
}

#[test]
fn the_workload_reads_as_adaptive_jobs() {
    let jobs = workload();
    assert_eq!(jobs.len(), 160);
    assert_eq!(jobs[0].id, "cifar10-0");
    assert_eq!(jobs[0].submit, 53_000);
    assert!(jobs.iter().all(|j| j.adaptive.is_some() && j.duration == 0));
}

#[test]
fn a_lone_job_doubles_its_replicas_as_it_profiles_them() {
    // Pollux caps a job at twice the replicas it has run on, so a lone job grows
    // 1, 2, 4, 8, … one interval at a time.
    let jobs: Vec<Job> = workload().into_iter().take(1).collect();
    let out = run(jobs, &["generations=30"]);
    let j = &out.jobs[0];
    assert!(j.finish.is_some());
    assert_eq!(
        j.first_start,
        Some(60_000),
        "decides at the first 60 s boundary"
    );
    // Service: at least the ramp 1 + 2 + 4 GPU-intervals before reaching 8.
    assert!(j.gpu_time > 7 * 60_000);
    // Faster than one GPU would be: 100 CIFAR-10 epochs take over an hour there.
    let jct = j.finish.unwrap() - j.submit;
    assert!(jct < 3_600_000, "jct {jct}");
}

#[test]
fn every_job_finishes_and_a_seed_repeats_the_run() {
    let jobs: Vec<Job> = workload()
        .into_iter()
        .filter(|j| !j.id.starts_with("imagenet"))
        .take(12)
        .collect();
    let a = run(jobs.clone(), &["generations=10", "population=20"]);
    assert!(a.jobs.iter().all(|j| j.finish.is_some()));
    let b = run(jobs.clone(), &["generations=10", "population=20"]);
    let fin = |o: &RunOutcome| o.jobs.iter().map(|j| j.finish).collect::<Vec<_>>();
    assert_eq!(fin(&a), fin(&b));
    // GPUs are never over-committed: each bucket's busy GPU-time fits the cluster.
    let cap = a.util.width as f64 * a.util.total_gpus as f64;
    assert!(a.util.busy.iter().all(|&b| b <= cap + 1e-6));
}

#[test]
fn pollux_refuses_jobs_without_a_goodput_model() {
    let c = ClusterSpec::preset("n16g4").unwrap().build().unwrap();
    let mut pol = registry::build("pollux", &Params::default()).unwrap();
    let err = apiary_sim::run(
        c,
        vec![Job::new("plain", 0, 1, 1000)],
        pol.as_mut(),
        &DurationModel,
        &Config::default(),
        &mut |_| {},
    )
    .unwrap_err();
    assert!(err.to_string().contains("Pollux workload"), "{err}");
}
